//! The watchdog keeps holds alive, renews in batches, and reports lost holds.

mod support;

use std::time::{Duration, Instant};

use support::*;

fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map(|n| n.parse().unwrap())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_hold_lives_well_past_the_watchdog_timeout() {
    let server = RedisServer::start();
    let c = client(&server).await; // 900 ms lease, renewed every 300 ms
    let me = c.new_owner();
    let lock = c.lock("kept");
    let guard = lock.lock(&me).await.unwrap();
    let other = c.new_owner();
    // Time passing is what is under test here: over 3 watchdog timeouts.
    let until = Instant::now() + Duration::from_millis(3000);
    while Instant::now() < until {
        assert!(lock.try_lock(&other).await.unwrap().is_none());
        let pttl: i64 = server.command(&["PTTL", "kept"]).parse().unwrap();
        assert!(pttl > 0 && pttl <= 900, "pttl {pttl}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!guard.is_lease_lost());
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_deleted_hold_is_reported_lost_at_the_next_renewal() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c.lock("deleted").lock(&c.new_owner()).await.unwrap();
    assert!(!guard.is_lease_lost());
    server.command(&["DEL", "deleted"]);
    let start = Instant::now();
    within(Duration::from_secs(2), "lease_lost", guard.lease_lost()).await;
    assert!(
        start.elapsed() < Duration::from_millis(700),
        "renewal runs every 300 ms"
    );
    assert!(guard.is_lease_lost());
    assert_eq!(c.renewed_holds(), 0, "renewal stopped");
    assert_eq!(
        server.command(&["EXISTS", "deleted"]),
        "0",
        "nothing recreated"
    );
}

/// Takes 250 holds with distinct names (spread over ~250 slots), then counts the renewal
/// scripts over about four ticks and checks every lease was kept up.
async fn renew_250_distinct_holds(by_slot: bool) -> (u64, u64) {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.group_renewals_by_slot(by_slot)).await;
    let me = c.new_owner();
    let mut guards = Vec::new();
    for i in 0..250 {
        guards.push(c.lock(&format!("batch:{i}")).lock(&me).await.unwrap());
    }
    assert_eq!(c.renewed_holds(), 250);
    server.command(&["CONFIG", "RESETSTAT"]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let calls = evalsha_calls(&server);
    let ticks = start.elapsed().as_millis() as u64 / 300 + 1;
    for i in 0..250 {
        let pttl: i64 = server
            .command(&["PTTL", &format!("batch:{i}")])
            .parse()
            .unwrap();
        assert!(pttl > 0, "batch:{i} not renewed");
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    (calls, ticks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_renewed_in_batches_of_at_most_one_hundred() {
    // A single server: any 100 holds share a script, whatever their slots.
    let (calls, ticks) = renew_250_distinct_holds(false).await;
    assert!(calls >= 3, "at least one tick of 3 batches: {calls}");
    assert!(
        calls <= ticks * 3,
        "{calls} calls in {ticks} ticks: not batched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_grouped_by_slot_for_proxies_still_renew_everything() {
    // Forced slot grouping (for a proxy in front of a cluster): one script per slot group.
    let (calls, ticks) = renew_250_distinct_holds(true).await;
    assert!(
        calls > ticks * 3,
        "one script per slot, not per 100 holds: {calls}"
    );
    assert!(calls <= ticks * 250, "{calls} calls in {ticks} ticks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_in_one_slot_share_one_script_per_hundred() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let mut guards = Vec::new();
    // A common hash tag puts every lock in one slot, so batching is visible in the counts.
    for i in 0..250 {
        guards.push(
            c.lock(&format!("{{tenant}}:lock:{i}"))
                .lock(&me)
                .await
                .unwrap(),
        );
    }
    server.command(&["CONFIG", "RESETSTAT"]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let calls = evalsha_calls(&server);
    let ticks = start.elapsed().as_millis() as u64 / 300 + 1;
    assert!(calls >= 3, "at least one tick of 3 batches: {calls}");
    assert!(
        calls <= ticks * 3,
        "{calls} calls in {ticks} ticks: not batched"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn an_idle_client_sends_no_renewals() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("idle");
    lock.lock(&c.new_owner())
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    server.command(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(evalsha_calls(&server), 0);
}

#[tokio::test]
async fn a_key_overwritten_with_another_type_loses_only_its_own_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let kept = c.lock("kept-in-batch").lock(&me).await.unwrap();
    let clobbered = c.lock("clobbered").lock(&me).await.unwrap();
    // Someone replaces one lock's hash with a string: one renewal batch holds both.
    server.command(&["SET", "clobbered", "not a lock"]);
    within(
        Duration::from_secs(2),
        "lease_lost of the clobbered hold",
        clobbered.lease_lost(),
    )
    .await;
    // The other hold of the same batch is still renewed well past its 900 ms lease.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!kept.is_lease_lost());
    assert_eq!(
        server.command(&["HGET", "kept-in-batch", &me.to_string()]),
        "1"
    );
    assert_eq!(server.command(&["GET", "clobbered"]), "not a lock");
    kept.unlock().await.unwrap();
}
