//! `rediss://` end to end: a private redis-server serving TLS with a throw-away CA.
#![cfg(feature = "tls")]

mod support;

use std::time::Duration;

use redisson_lock::LockClient;
use support::tls::serve_tls;
use support::*;

#[tokio::test]
async fn a_rediss_url_locks_over_tls() {
    let server = RedisServer::start();
    let Some(tls) = serve_tls(&server) else {
        let why = "the server was built without TLS";
        return support::server::skipped("a_rediss_url_locks_over_tls", why);
    };
    let tls_port = tls.port;
    // Trust the throw-away CA: rustls' root store honours SSL_CERT_FILE. This binary holds
    // only this test, so the variable touches nothing else.
    std::env::set_var("SSL_CERT_FILE", &tls.ca);

    let client = LockClient::builder()
        .url(&format!("rediss://localhost:{tls_port}"))
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .await
        .expect("TLS connection");
    let lock = client.lock("over-tls").unwrap();
    let me = client.new_owner();
    let guard = lock.lock(&me).await.unwrap();
    // The hold is really in this server (seen through its plain port).
    assert_eq!(server.command(&["HGET", "over-tls", &me.to_string()]), "1");
    // Waiting works over the TLS subscriber connection too.
    let waiter = tokio::spawn(lock.lock(&client.new_owner()));
    subscribed(&server, &lock_channel("over-tls")).await;
    guard.unlock().await.unwrap();
    woken_and_released("waiter", waiter).await;
    client.shutdown().await;

    // A plain-text server behind a rediss:// URL is an error, not a silent downgrade.
    let result = LockClient::builder()
        .url(&format!("rediss://localhost:{}", server.port()))
        .command_timeout(Duration::from_millis(500))
        .build()
        .await;
    assert!(
        result.is_err(),
        "TLS handshake against a plain port must fail"
    );
}
