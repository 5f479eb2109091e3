//! Hand-offs for the fair lock: a release gives the lock to a waiter of its own client only
//! when that waiter is first in the queue in Redis, doing what the waiter's own acquire would
//! (its place taken out, the deadlines behind it moved up, its trace set), so the order of
//! the queue is kept across clients.

use redisson_lock::kind::Kind;
use redisson_lock::{ExclusiveLock, HandOff};
use support::proxy::FaultProxy;

use super::handing_over::{
    handing_client, heir_dropped_mid_hand_off, layout, mostly_handed_over, proxied_handing_client,
    Contenders,
};
use super::*;

/// The default `fair_wait_timeout`, in ms: each waiter's step in the deadlines.
const WAIT_MS: i64 = 300_000;

fn timeouts_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

/// The deadline of `field` in the fair lock `name`'s queue.
fn deadline(server: &RedisServer, name: &str, field: &str) -> Option<i64> {
    let reply = server.command(&["ZSCORE", &timeouts_key(name), field]);
    (reply != "(nil)").then(|| reply.parse::<f64>().expect("a score").round() as i64)
}

/// The channel the fair lock `name` tells its waiter `field` on.
fn waiter_channel(name: &str, field: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}:{field}")
}

/// Neither the queue nor the deadlines exist (Redis deletes them once empty).
fn no_queue(server: &RedisServer, name: &str) -> bool {
    server.command(&["EXISTS", &queue_key(name), &timeouts_key(name)]) == "0"
}

/// Starts `lock()` of `owner` on a task of its own; returns once the waiter is in the queue
/// (`place` waiters in all), listens on its channel and has made its two attempts (the first,
/// and the one after subscribing).
async fn queued_waiter<K: Kind>(
    server: &RedisServer,
    lock: &ExclusiveLock<K>,
    name: &str,
    owner: &redisson_lock::LockOwner,
    place: usize,
) -> tokio::task::JoinHandle<redisson_lock::Result<LockGuard<K::Hold>>> {
    let before = evalsha_calls(server);
    let waiter = tokio::spawn(lock.lock(owner));
    eventually(10 * SECOND, "the waiter queued", || {
        queued(server, name).len() == place
    })
    .await;
    waiting(
        server,
        &waiter_channel(name, &owner.to_string()),
        before + 2,
    )
    .await;
    waiter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_hands_the_lock_to_the_first_waiter_when_it_is_of_its_client() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.fair_lock("fair-heir").unwrap();
    // Fixed leases: the waiters look again only when the holder's would end, long after.
    let held = (lock.clone().with_lease(fixed(30_000)))
        .lock(&client.new_owner())
        .await
        .unwrap();
    let (heir, next) = (client.new_owner(), client.new_owner());
    let heir_lock = lock.clone().with_lease(fixed(20_000));
    let waiter = queued_waiter(&server, &heir_lock, "fair-heir", &heir, 1).await;
    let behind = queued_waiter(&server, &lock, "fair-heir", &next, 2).await;
    let next_deadline = deadline(&server, "fair-heir", &next.to_string()).unwrap();

    let (published, scripts) = (command_calls(&server, "publish"), evalsha_calls(&server));
    held.unlock().await.unwrap();
    let guard = within(10 * SECOND, "the heir", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(command_calls(&server, "publish"), published, "nobody told");
    assert_eq!(evalsha_calls(&server), scripts + 1, "the release alone ran");
    // What Java reads after the heir's own acquire: the heir holds once with its lease, out
    // of the queue, and the waiter behind it moved up by its step.
    let (fields, pttl) = layout(&client, "fair-heir").await;
    assert_eq!(fields, [(heir.to_string(), 1)]);
    assert!((15_000..=20_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(queued(&server, "fair-heir"), [next.to_string()]);
    assert_eq!(deadline(&server, "fair-heir", &heir.to_string()), None);
    assert_eq!(
        deadline(&server, "fair-heir", &next.to_string()),
        Some(next_deadline - WAIT_MS)
    );
    let trace = format!("redisson_lock_took:{{fair-heir}}:{heir}");
    assert_eq!(server.command(&["EXISTS", &trace]), "1", "the heir's trace");

    // The next one is first in line, and is handed the lock in turn.
    guard.unlock().await.unwrap();
    let last = within(10 * SECOND, "the next waiter", behind)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(command_calls(&server, "publish"), published);
    last.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(no_queue(&server, "fair-heir"));
}

/// The non-reentrant fair lock hands over as the fair lock does, in the queue's order and so
/// past the bound on runs (here one hand-off in a row), and its heir still may not re-enter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_reentrant_fair_lock_hands_over_in_queue_order_and_refuses_a_re_entry() {
    let server = RedisServer::start();
    let one_in_a_row = HandOff::new(1, Duration::from_secs(3600));
    let client = client_with(&server, |b| {
        b.watchdog_timeout(30 * SECOND).hand_off(one_in_a_row)
    })
    .await;
    let lock = client.non_reentrant_fair_lock("fair-once").unwrap();
    let held = (lock.clone().with_lease(fixed(30_000)))
        .lock(&client.new_owner())
        .await
        .unwrap();
    let (heir, next) = (client.new_owner(), client.new_owner());
    let waiter = queued_waiter(&server, &lock, "fair-once", &heir, 1).await;
    let behind = queued_waiter(&server, &lock, "fair-once", &next, 2).await;

    let published = command_calls(&server, "publish");
    held.unlock().await.unwrap();
    let guard = within(10 * SECOND, "the heir", waiter)
        .await
        .unwrap()
        .unwrap();
    // The second hand-off in a row, which the bound would forbid another kind.
    guard.unlock().await.unwrap();
    let last = within(10 * SECOND, "the next waiter", behind)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(command_calls(&server, "publish"), published, "nobody told");
    let (fields, _) = layout(&client, "fair-once").await;
    assert_eq!(fields, [(next.to_string(), 1)]);
    assert!(no_queue(&server, "fair-once"));
    assert!(matches!(
        lock.try_lock(&next).await,
        Err(Error::WouldDeadlock(_))
    ));
    last.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

/// A waiter of the client behind another client's waiter is not handed the lock: the release
/// frees it and tells the first waiter, as Redisson's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_never_hands_the_lock_past_another_clients_waiter() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.fair_lock("fair-order").unwrap();
    let held = (lock.clone().with_lease(fixed(30_000)))
        .lock(&client.new_owner())
        .await
        .unwrap();
    // Another client's waiter, first in line, with a deadline a minute away.
    let java = "00000000-0000-0000-0000-000000000000:1";
    let minute_away = (now_ms() + 60_000).to_string();
    server.command(&["RPUSH", &queue_key("fair-order"), java]);
    server.command(&["ZADD", &timeouts_key("fair-order"), &minute_away, java]);
    let ours = client.new_owner();
    let waiter = queued_waiter(&server, &lock, "fair-order", &ours, 2).await;

    let published = command_calls(&server, "publish");
    held.unlock().await.unwrap();
    assert_eq!(
        command_calls(&server, "publish"),
        published + 1,
        "the first waiter told"
    );
    assert!(
        !lock.is_locked().await.unwrap(),
        "freed for the first waiter"
    );
    assert_eq!(queued(&server, "fair-order"), [java, &*ours.to_string()]);
    waiter.abort();
    let _ = waiter.await;
    eventually(10 * SECOND, "our waiter gone from the queue", || {
        queued(&server, "fair-order") == [java]
    })
    .await;
}

/// Eight tasks hand a fair lock around, with no bound on runs: a waiter of another client
/// still gets it in its turn, as the queue decides. Exclusion holds, most holds go over
/// without a message, and nothing is left in the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_hand_a_fair_lock_around_and_another_clients_waiter_gets_its_turn() {
    let server = RedisServer::start();
    let (busy, other) = (
        handing_client(&server, false).await,
        long_watchdog_client(&server).await,
    );
    let lock = busy.fair_lock("fair-hot").unwrap();
    let published = command_calls(&server, "publish");
    let contenders = Contenders::start(&busy, &lock, 8, |_| {});
    contenders.reached(100).await;
    // Each is served once the eight ahead of it are (milliseconds), never passed over by the
    // tasks that hand the lock around.
    contenders
        .outsider_served(&other, &other.fair_lock("fair-hot").unwrap())
        .await;
    contenders.reached(contenders.holds() + 100).await;
    let holds = contenders.stop().await;
    mostly_handed_over(&server, published, holds);
    assert!(!lock.is_locked().await.unwrap());
    eventually(10 * SECOND, "the queue empty", || {
        no_queue(&server, "fair-hot")
    })
    .await;
}

/// The release hands the lock over while the heir's call is dropped: the hold is released at
/// once, and the heir's place is gone from the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_dropped_while_the_hand_off_is_on_the_wire_leaves_nothing_behind() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let client = proxied_handing_client(&proxy).await;
    let lock = client.fair_lock("fair-dropped").unwrap();
    let held = lock.lock(&client.new_owner()).await.unwrap();
    let heir = client.new_owner();
    let waiter = queued_waiter(&server, &lock, "fair-dropped", &heir, 1).await;
    heir_dropped_mid_hand_off(&server, &proxy, ("fair-dropped", held), &heir, waiter).await;
    eventually(10 * SECOND, "the lock freed and the queue empty", || {
        server.command(&["EXISTS", "fair-dropped"]) == "0" && no_queue(&server, "fair-dropped")
    })
    .await;
}
