//! A web handler that takes a per-order lock: `POST /orders/{id}/pay` charges an order at
//! most once at a time, across every replica of the service (and Java services sharing the
//! lock name). A request that cannot get the lock within a short wait is answered
//! `409 Conflict` (someone else is paying this order: retry later), and one that cannot reach
//! Redis `503 Service Unavailable`; neither charges anything.
//!
//! Run: `cargo run --manifest-path docs/examples/Cargo.toml --bin orders-http`. It serves on a
//! free port, sends itself three requests at once (two for the same order) and prints the
//! answers: one of the two gets 409.

mod redis;

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use redisson_lock::LockClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a request waits for the order's lock before answering 409.
const WAIT: Duration = Duration::from_millis(100);

async fn pay(State(locks): State<LockClient>, Path(order): Path<u64>) -> (StatusCode, String) {
    let lock = match locks.lock(&format!("orders:{order}")) {
        Ok(lock) => lock,
        Err(error) => return (StatusCode::BAD_REQUEST, error.to_string()),
    };
    // One owner per request: two requests of this process exclude each other too.
    let me = locks.new_owner();
    let guard = match lock.try_lock_for(&me, WAIT).await {
        Ok(Some(guard)) => guard,
        Ok(None) => return (StatusCode::CONFLICT, format!("order {order} is being paid")),
        Err(error) => return (StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
    };
    // The work the lock protects. Stop if the hold is lost (Redis unreachable for longer than
    // the lease): another request may then be paying the same order.
    let charged = tokio::select! {
        _ = charge(order) => true,
        _ = guard.lease_lost() => false,
    };
    // Dropping the guard would release it too, in the background; unlocking reports errors.
    let released = guard.unlock().await;
    match (charged, released) {
        (true, Ok(())) => (StatusCode::OK, format!("order {order} paid")),
        (true, Err(error)) => (StatusCode::OK, format!("order {order} paid ({error})")),
        (false, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "lock lost; not charged".into(),
        ),
    }
}

/// Stands in for the payment provider's call.
async fn charge(_order: u64) {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// A minimal HTTP/1.1 client: the status line of `POST path`.
async fn post_status(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.lines().next().unwrap_or_default().to_owned();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    format!("{status:<24} {body}")
}

#[tokio::main]
async fn main() -> redisson_lock::Result<()> {
    let redis = redis::redis();
    let locks = LockClient::connect(&redis.url).await?;
    let app = Router::new()
        .route("/orders/{id}/pay", post(pay))
        .with_state(locks.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let requests = ["/orders/7/pay", "/orders/7/pay", "/orders/8/pay"]
        .map(|path| tokio::spawn(post_status(addr, path)));
    for (path, answer) in ["order 7", "order 7", "order 8"].iter().zip(requests) {
        println!("{path}: {}", answer.await.unwrap());
    }
    server.abort();
    locks.shutdown().await;
    Ok(())
}
