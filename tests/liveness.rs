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
async fn unlock_by_owner_of_a_detached_hold_known_lost_answers_at_once() {
    let mut server = RedisServer::start();
    let c = patient_client(&server).await;
    let (lock, owner) = (c.lock("gone-detached").unwrap(), c.new_owner());
    lock.lock(&owner).await.unwrap().detach();
    assert_eq!(c.renewed_holds(), 1);
    server.stop();
    // The hold's watchdog lease runs out unrenewed.
    eventually(10 * SECOND, "the lease lapsed", || c.renewed_holds() == 0).await;
    let unlocked = within(
        2 * SECOND,
        "unlock of a hold known lost",
        lock.unlock(&owner),
    )
    .await;
    assert!(
        matches!(unlocked, Err(Error::NotHeld { .. })),
        "{unlocked:?}"
    );
}

#[tokio::test]
async fn unlock_after_lease_lost_answers_at_once_with_a_fixed_lease() {
    let server = RedisServer::start();
    let c = patient_client(&server).await;
    let lock = c.fair_lock("gone-fixed").unwrap().with_lease(fixed(500));
    let guard = lock.lock(&c.new_owner()).await;
    unlock_after_the_server_is_gone(server, guard.unwrap()).await;
}

/// The wall clock in µs since the epoch: the server's clock too, on this machine.
fn now_us() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.unwrap().as_micros() as i64
}

/// The first instant (µs since the epoch) at which the server counts `key` as expired: a
/// key expires once the server's clock in whole ms is past its `PEXPIRETIME`.
fn expiry_us(server: &RedisServer, key: &str) -> i64 {
    let at = support::server::expire_time_ms(server, key);
    assert!(at > 0, "{key} has no expiry: {at}");
    (at + 1) * 1000
}

/// How long after the key could expire `lease_lost()` completed (negative: before), in µs.
async fn late_by(guard: &LockGuard, expires_us: i64) -> i64 {
    guard.lease_lost().await;
    let lost_us = now_us();
    assert!(guard.is_lease_lost());
    lost_us - expires_us
}

/// Checks the lateness of many `lease_lost()` completions (see [`late_by`]). Each must be
/// before the key can expire; a thread of this loaded machine is stalled now and then for
/// milliseconds, which no margin covers, so a few late ones (at most one in eight) are
/// forgiven. With `typical`, half of them must also be well before it (2 ms): the timer is
/// set a margin early, where a timer set at the very end fires around the expiry, late as
/// often as not.
fn assert_before_expiry(late: &[i64], typical: bool) {
    println!("lease_lost() completed this long after the key could expire (µs): {late:?}");
    let mut sorted = late.to_vec();
    sorted.sort_unstable();
    let late_ones = late.iter().filter(|&&us| us >= 0).count();
    assert!(
        late_ones * 8 <= late.len(),
        "lease_lost() completed after the key could expire in {late_ones} of {} tries (µs after): {late:?}",
        late.len()
    );
    let median = sorted[sorted.len() / 2];
    assert!(
        !typical || median < -2000,
        "lease_lost() typically completed {median} µs after the key could expire, not well before: {late:?}"
    );
}

#[tokio::test]
async fn lease_lost_completes_before_a_fixed_lease_expires_on_the_server() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let owner = c.new_owner();
    let mut late = Vec::new();
    // Tokio's timer ticks in whole ms: each try meets the tick at another point.
    for i in 0..40 {
        let name = format!("fixed-expiry-{i}");
        let lock = c.lock(&name).unwrap().with_lease(fixed(150));
        let guard = lock.lock(&owner).await.unwrap();
        let expires = expiry_us(&server, &name);
        late.push(within(5 * SECOND, "lease_lost", late_by(&guard, expires)).await);
        guard.detach();
    }
    assert_before_expiry(&late, true);
}

#[tokio::test]
async fn lease_lost_completes_before_an_unrenewed_watchdog_lease_expires_on_the_server() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let c = LockClient::builder()
        .url(&proxy.url())
        .watchdog_timeout(Duration::from_millis(600))
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let owner = c.new_owner();
    let mut late = Vec::new();
    for i in 0..8 {
        proxy.set(Net::Clear);
        let name = format!("renewed-expiry-{i}");
        let guard = c.lock(&name).unwrap().lock(&owner).await.unwrap();
        // Renewals that reach the server no more: the last one sets the key's end.
        proxy.set(Net::BlackHole);
        let mut expires = expiry_us(&server, &name);
        eventually(5 * SECOND, "the key's end set for good", || {
            let again = expiry_us(&server, &name);
            std::mem::replace(&mut expires, again) == again
        })
        .await;
        late.push(within(5 * SECOND, "lease_lost", late_by(&guard, expires)).await);
        guard.detach();
    }
    // Not `typical`: a renewal that reached the server while its answer was held in the
    // black hole moves the key's end past the guard's deadline, by up to a renewal period.
    assert_before_expiry(&late, false);
}

#[tokio::test]
async fn lease_lost_completes_when_the_hold_is_released() {
    let server = RedisServer::start();
    let c = long_watchdog_client(&server).await;
    let owner = c.new_owner();
    let lock = c.lock("released").unwrap();
    // By unlock.
    let guard = lock.lock(&owner).await.unwrap();
    let lost = guard.lease_lost();
    guard.unlock().await.unwrap();
    within(SECOND, "lease_lost after unlock", lost).await;
    // By a drop.
    let guard = lock.lock(&owner).await.unwrap();
    let lost = guard.lease_lost();
    drop(guard);
    within(SECOND, "lease_lost after a drop", lost).await;
    // A re-entry's release leaves the hold to the outer guard: its lease_lost() follows
    // the hold, which ends with the outer guard's release.
    let outer = lock.lock(&owner).await.unwrap();
    let inner = lock.lock(&owner).await.unwrap();
    let inner_lost = inner.lease_lost();
    tokio::pin!(inner_lost);
    inner.unlock().await.unwrap();
    assert!(!outer.is_lease_lost());
    assert!(cut_off(Duration::from_millis(100), &mut inner_lost)
        .await
        .is_err());
    outer.unlock().await.unwrap();
    within(SECOND, "lease_lost after the last release", inner_lost).await;
}
