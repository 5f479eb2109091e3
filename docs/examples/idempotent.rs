//! Idempotent request handling: a client that retries (a timeout, a double click, a queue
//! that delivers twice) must not have its request carried out twice. The request id is the
//! lock name; the result is stored once under the id; a repeat is answered from the store.
//!
//! 1. Answer from the store if the result is there (the common repeat: no lock needed).
//! 2. Otherwise take the request's lock, and look at the store again: a duplicate that held
//!    the lock before may have finished meanwhile.
//! 3. Carry the request out, store the result (`SET NX`, with a retention time), release.
//!
//! Run: `cargo run --manifest-path docs/examples/Cargo.toml --bin idempotent`. Five copies of
//! one request arrive at once: the work runs once and all five get the same answer.

mod redis;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisson_lock::fred::interfaces::KeysInterface;
use redisson_lock::fred::types::{Expiration, SetOptions};
use redisson_lock::{LockClient, Result};

/// How long a result is kept for repeats.
const RETENTION: Expiration = Expiration::EX(24 * 3600);
/// How long a duplicate waits for the copy that is carrying the request out.
const WAIT: Duration = Duration::from_secs(10);

/// Handles request `id`, carrying it out with `work` at most once.
async fn handle(
    locks: &LockClient,
    id: &str,
    work: impl std::future::Future<Output = String>,
) -> Result<Option<String>> {
    let stored = format!("result:{id}");
    let redis = locks.redis();
    if let Some(result) = redis.get::<Option<String>, _>(&stored).await? {
        return Ok(Some(result));
    }
    let me = locks.new_owner();
    let Some(guard) = locks
        .lock(&format!("request:{id}"))?
        .try_lock_for(&me, WAIT)
        .await?
    else {
        return Ok(None); // still in progress elsewhere: tell the caller to retry later
    };
    let result = match redis.get::<Option<String>, _>(&stored).await? {
        Some(result) => result, // a duplicate finished while this one waited
        None => {
            let result = work.await;
            let _: () = redis
                .set(
                    &stored,
                    result.as_str(),
                    Some(RETENTION),
                    Some(SetOptions::NX),
                    false,
                )
                .await?;
            result
        }
    };
    guard.unlock().await?;
    Ok(Some(result))
}

#[tokio::main]
async fn main() -> Result<()> {
    let redis = redis::redis();
    let locks = LockClient::connect(&redis.url).await?;
    let executions = Arc::new(AtomicU32::new(0));
    let copies: Vec<_> = (0..5)
        .map(|copy| {
            let (locks, executions) = (locks.clone(), executions.clone());
            tokio::spawn(async move {
                let work = async {
                    executions.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await; // the real work
                    "payment 4711 accepted".to_string()
                };
                let answer = handle(&locks, "req-4711", work).await;
                println!("copy {copy}: {answer:?}");
                answer
            })
        })
        .collect();
    for copy in copies {
        assert_eq!(
            copy.await.unwrap()?.as_deref(),
            Some("payment 4711 accepted")
        );
    }
    let runs = executions.load(Ordering::SeqCst);
    println!("the work ran {runs} time(s) for 5 copies of the request");
    assert_eq!(runs, 1);
    locks.shutdown().await;
    Ok(())
}
