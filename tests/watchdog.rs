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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_renewed_in_batches_of_at_most_one_hundred() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let mut guards = Vec::new();
    for i in 0..250 {
        guards.push(c.lock(&format!("batch:{i}")).lock(&me).await.unwrap());
    }
    assert_eq!(c.renewed_holds(), 250);
    server.command(&["CONFIG", "RESETSTAT"]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let elapsed = start.elapsed();
    let calls = evalsha_calls(&server);
    // Four or five ticks of 300 ms, each one script per 100 holds of one slot. The 250
    // keys spread over up to 250 slots, so the bound is per slot group: at most one call
    // per distinct slot and 100 holds.
    let ticks = elapsed.as_millis() as u64 / 300 + 1;
    assert!(calls >= 1, "renewal ran");
    assert!(calls <= ticks * 250, "{calls} calls in {ticks} ticks");
    // Every lease was kept up.
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
