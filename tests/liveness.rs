//! A guard's view of its hold: a hold known to be lost answers at once, and `lease_lost()`
//! completes no later than the key can expire on the server.

mod support;

use std::time::Duration;

use redisson_lock::{Error, LockClient, LockGuard};
use support::*;

/// A client whose commands wait long for an answer, so that any command sent to a server
/// that is gone shows in the time a call takes.
async fn patient_client(server: &RedisServer) -> LockClient {
    client_with(server, |b| {
        b.watchdog_timeout(Duration::from_millis(600))
            .command_timeout(Duration::from_secs(10))
    })
    .await
}

/// Stops the server under `guard`, waits for `lease_lost()`, then unlocks: `NotHeld` at once,
/// nothing sent (a command would wait for the 10 s command timeout, and be resent).
async fn unlock_after_the_server_is_gone(mut server: RedisServer, guard: LockGuard) {
    assert!(!guard.is_lease_lost());
    server.stop();
    within(10 * SECOND, "lease_lost", guard.lease_lost()).await;
    let unlocked = within(2 * SECOND, "unlock of a hold known lost", guard.unlock()).await;
    assert!(
        matches!(unlocked, Err(Error::NotHeld { .. })),
        "{unlocked:?}"
    );
}

#[tokio::test]
async fn unlock_after_lease_lost_answers_at_once_with_a_watchdog_lease() {
    let server = RedisServer::start();
    let c = patient_client(&server).await;
    let guard = c.lock("gone-renewed").unwrap().lock(&c.new_owner()).await;
    unlock_after_the_server_is_gone(server, guard.unwrap()).await;
}

#[tokio::test]
async fn unlock_after_lease_lost_answers_at_once_with_a_fixed_lease() {
    let server = RedisServer::start();
    let c = patient_client(&server).await;
    let lock = c.fair_lock("gone-fixed").unwrap().with_lease(fixed(500));
    let guard = lock.lock(&c.new_owner()).await;
    unlock_after_the_server_is_gone(server, guard.unwrap()).await;
}
