//! The watchdog keeps holds alive, renews in batches, and reports lost holds.

mod support;

use std::time::{Duration, Instant};

use redisson_lock::{LockClient, LockGuard, LockOwner, ReadGuard};
use support::*;

#[tokio::test]
async fn a_hold_lives_well_past_the_watchdog_timeout() {
    let server = RedisServer::start();
    let c = client(&server).await; // 900 ms lease, renewed every 300 ms
    let me = c.new_owner();
    let lock = c.lock("kept").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    let other = c.new_owner();
    // Wakes at each deadline that a renewal has since moved, and must sleep again.
    let lost = guard.lease_lost();
    tokio::pin!(lost);
    // Time passing is what is under test here: over 3 watchdog timeouts.
    let until = Instant::now() + Duration::from_millis(3000);
    while Instant::now() < until {
        assert!(lock.try_lock(&other).await.unwrap().is_none());
        let ttl = pttl(&server, "kept");
        assert!(ttl > 0 && ttl <= 900, "pttl {ttl}");
        tokio::select! {
            () = &mut lost => panic!("lease_lost completed while the hold was renewed"),
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    assert!(!guard.is_lease_lost());
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_deleted_hold_is_reported_lost_at_the_next_renewal() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .lock("deleted")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    assert!(!guard.is_lease_lost());
    server.command(&["DEL", "deleted"]);
    // Renewal runs every 300 ms; nothing but a renewal reports the loss.
    within(5 * SECOND, "lease_lost", guard.lease_lost()).await;
    assert!(guard.is_lease_lost());
    assert_eq!(c.renewed_holds(), 0, "renewal stopped");
    assert_eq!(
        server.command(&["EXISTS", "deleted"]),
        "0",
        "nothing recreated"
    );
}

/// How a test takes one of its holds.
#[derive(Clone, Copy)]
enum Kind {
    Plain,
    Read,
}

/// A hold of either kind.
enum Held {
    Plain(LockGuard),
    Read(ReadGuard),
}

impl Held {
    async fn take(c: &LockClient, kind: Kind, name: &str, owner: &LockOwner) -> Held {
        match kind {
            Kind::Plain => Held::Plain(c.lock(name).unwrap().lock(owner).await.unwrap()),
            Kind::Read => Held::Read(c.read_write_lock(name).unwrap().read(owner).await.unwrap()),
        }
    }

    fn is_lease_lost(&self) -> bool {
        match self {
            Held::Plain(guard) => guard.is_lease_lost(),
            Held::Read(guard) => guard.is_lease_lost(),
        }
    }

    async fn unlock(self) {
        match self {
            Held::Plain(guard) => guard.unlock().await.unwrap(),
            Held::Read(guard) => guard.unlock().await.unwrap(),
        }
    }
}

/// What [`renew_holds`] saw of the renewal scripts.
struct Renewals {
    /// Scripts run.
    calls: u64,
    /// How many renewal rounds they may come from (one per 300 ms, plus one under way at
    /// either end).
    ticks: u64,
    /// The most keys one script was given.
    most_keys: usize,
}

/// Takes `n` holds named by `name`, watches the renewal scripts over about four ticks and
/// checks every lease was kept up.
async fn renew_holds(n: usize, kind: Kind, name: fn(usize) -> String, by_slot: bool) -> Renewals {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.group_renewals_by_slot(by_slot)).await;
    let me = c.new_owner();
    let mut guards = Vec::new();
    for i in 0..n {
        guards.push(Held::take(&c, kind, &name(i), &me).await);
    }
    assert_eq!(c.renewed_holds(), n);
    server.command(&["CONFIG", "RESETSTAT"]);
    log_every_command(&server);
    let start = Instant::now();
    // Time passing is what is under test here: over a watchdog timeout.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let calls = evalsha_calls(&server);
    let ticks = start.elapsed().as_millis() as u64 / 300 + 2;
    let most_keys = script_key_counts(&server).into_iter().max().unwrap_or(0);
    for (i, guard) in guards.iter().enumerate() {
        assert!(pttl(&server, &name(i)) > 0, "{} not renewed", name(i));
        assert!(!guard.is_lease_lost(), "{} reported lost", name(i));
    }
    for guard in guards {
        guard.unlock().await;
    }
    Renewals {
        calls,
        ticks,
        most_keys,
    }
}

/// Distinct names, spread over many slots.
fn distinct(i: usize) -> String {
    format!("batch:{i}")
}

/// Checks that every round renewed the holds in `batches` scripts of at most `max_keys`
/// keys, the largest full.
fn batched(seen: Renewals, batches: u64, max_keys: usize) {
    let Renewals {
        calls,
        ticks,
        most_keys,
    } = seen;
    assert!(calls >= batches, "at least one round: {calls}");
    assert!(
        calls <= ticks * batches,
        "{calls} calls in {ticks} ticks: not batched"
    );
    assert_eq!(most_keys, max_keys, "a full batch's keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_holds_are_renewed_in_batches_of_250() {
    // A single server: any 250 holds share a script, whatever their slots.
    batched(renew_holds(600, Kind::Plain, distinct, false).await, 3, 250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_holds_are_renewed_in_batches_of_100() {
    // A reader costs Redis more than a plain hold: its batches are smaller (two keys each).
    batched(renew_holds(250, Kind::Read, distinct, false).await, 3, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_in_one_slot_share_one_script_per_batch() {
    // A common hash tag puts every lock in one slot, so batching is visible in the counts.
    let name = |i| format!("{{tenant}}:lock:{i}");
    batched(renew_holds(600, Kind::Plain, name, false).await, 3, 250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_grouped_by_slot_for_proxies_still_renew_everything() {
    // Forced slot grouping (for a proxy in front of a cluster): one script per slot group.
    let Renewals { calls, ticks, .. } = renew_holds(250, Kind::Plain, distinct, true).await;
    assert!(
        calls > ticks * 3,
        "one script per slot, not per batch: {calls}"
    );
    assert!(calls <= ticks * 250, "{calls} calls in {ticks} ticks");
}

#[tokio::test]
async fn an_idle_client_sends_no_renewals() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("idle").unwrap();
    lock.lock(&c.new_owner())
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    server.command(&["CONFIG", "RESETSTAT"]);
    // Time passing is the scenario: over two renewal periods of 300 ms.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(evalsha_calls(&server), 0);
}

#[tokio::test]
async fn a_key_overwritten_with_another_type_loses_only_its_own_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let kept = c.lock("kept-in-batch").unwrap().lock(&me).await.unwrap();
    let clobbered = c.lock("clobbered").unwrap().lock(&me).await.unwrap();
    // Someone replaces one lock's hash with a string: one renewal batch holds both.
    server.command(&["SET", "clobbered", "not a lock"]);
    within(
        5 * SECOND,
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
