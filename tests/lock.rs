//! The reentrant lock's behaviour against a real redis-server.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redisson_lock::{Error, Lease, LockClient, LockGuard};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_clients_loses_no_update() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let counter = "mutex:counter";
    const TASKS: usize = 12;
    const ROUNDS: usize = 25;

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = clients[t % 2].clone();
        tasks.push(tokio::spawn(async move {
            let owner = client.new_owner();
            let lock = client.lock("mutex").unwrap();
            for _ in 0..ROUNDS {
                let guard = lock.lock(&owner).await.unwrap();
                racy_increment(&client, counter).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    all_finish(Duration::from_secs(60), "all tasks", tasks).await;
    assert_eq!(
        server.command(&["GET", counter]),
        (TASKS * ROUNDS).to_string()
    );
    assert_eq!(server.command(&["EXISTS", "mutex"]), "0");
}

#[tokio::test]
async fn reentrancy_to_depth_three_and_back() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let lock = c.lock("reentrant").unwrap();

    let mut guards = Vec::new();
    for depth in 1..=3 {
        guards.push(lock.lock(&me).await.unwrap());
        assert_eq!(lock.hold_count(&me).await.unwrap(), depth);
        assert_eq!(
            server.command(&["HGET", "reentrant", &me.to_string()]),
            depth.to_string()
        );
    }
    assert!(lock.try_lock(&other).await.unwrap().is_none());
    for depth in (0..3).rev() {
        guards.pop().unwrap().unlock().await.unwrap();
        assert_eq!(lock.hold_count(&me).await.unwrap(), depth);
        if depth > 0 {
            assert!(lock.is_locked().await.unwrap());
            assert!(lock.try_lock(&other).await.unwrap().is_none());
        }
    }
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    take_and_release(&lock, &other).await;
}

#[tokio::test]
async fn clones_of_an_owner_share_reentrancy_and_handles_do_not() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("shared-owner").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    // A spawned task acting for the same owner re-enters.
    let (lock2, me2) = (lock.clone(), me.clone());
    let inner = tokio::spawn(async move { lock2.try_lock(&me2).await })
        .await
        .unwrap()
        .unwrap()
        .expect("same owner re-enters from another task");
    assert_eq!(lock.hold_count(&me).await.unwrap(), 2);
    // A fresh owner on a cloned handle is excluded.
    assert!(lock
        .clone()
        .try_lock(&c.new_owner())
        .await
        .unwrap()
        .is_none());
    inner.unlock().await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn fixed_lease_expires_and_hands_over() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (first, second) = (c.new_owner(), c.new_owner());
    let lock = c.lock("fixed").unwrap().with_lease(fixed(400));

    let start = Instant::now();
    let guard = lock.lock(&first).await.unwrap();
    let ttl = pttl(&server, "fixed");
    assert!(
        (1..=400).contains(&ttl),
        "pttl {ttl}, not the 900 ms watchdog's"
    );
    assert_eq!(c.renewed_holds(), 0, "a fixed lease is not renewed");

    // Nobody unlocks: the waiter is woken by the holder's TTL, not by a message.
    let next = within(5 * SECOND, "waiter", lock.lock(&second))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(380),
        "acquired too early: {waited:?}"
    );
    assert!(guard.is_lease_lost());
    within(5 * SECOND, "lease_lost", guard.lease_lost()).await;
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        lock.is_held_by(&second).await.unwrap(),
        "the old owner's unlock changed nothing"
    );
    next.unlock().await.unwrap();
}

#[tokio::test]
async fn partial_unlock_resets_the_fixed_lease() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("ttl").unwrap().with_lease(fixed(10_000));
    let g1 = lock.lock(&me).await.unwrap();
    let g2 = lock.lock(&me).await.unwrap();
    let g3 = lock.lock(&me).await.unwrap();
    g3.unlock().await.unwrap();
    g2.unlock().await.unwrap();
    let remaining = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        (Duration::from_secs(5)..=Duration::from_secs(10)).contains(&remaining),
        "{remaining:?}"
    );
    g1.unlock().await.unwrap();
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    assert_eq!(server.command(&["PTTL", "ttl"]), "-2");
}

#[tokio::test]
async fn watchdog_lease_is_the_watchdog_timeout() {
    let server = RedisServer::start();
    let c = long_watchdog_client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("wd-ttl").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    let ttl = pttl(&server, "wd-ttl");
    assert!((20_000..=30_000).contains(&ttl), "pttl {ttl}");
    assert_eq!(c.renewed_holds(), 1);
    guard.unlock().await.unwrap();
    assert_eq!(c.renewed_holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_wakes_on_unlock_long_before_the_ttl() {
    let server = RedisServer::start();
    // A 30 s lease: only the unlock message can explain a fast wake-up.
    let (a, b) = (
        long_watchdog_client(&server).await,
        long_watchdog_client(&server).await,
    );
    let lock_a = a.lock("wake").unwrap();
    let lock_b = b.lock("wake").unwrap();
    let holder = lock_a.lock(&a.new_owner()).await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock_b.lock(&b.new_owner()));
    waiting(&server, &lock_channel("wake"), before + 2).await;
    holder.unlock().await.unwrap();
    woken_and_released("woken waiter", waiter).await;
    // The last waiter gone, the channel is unsubscribed.
    eventually(5 * SECOND, "unsubscribed", || no_channels(&server)).await;
}

/// A waiter on a channel its client already listens to, with no message since its first
/// attempt, waits right after that attempt: any later release wakes a waiter of the line.
#[tokio::test]
async fn a_waiter_on_a_channel_already_subscribed_waits_after_one_attempt() {
    let server = RedisServer::start();
    let (a, b) = (
        long_watchdog_client(&server).await,
        long_watchdog_client(&server).await,
    );
    let holder = a
        .lock("listened")
        .unwrap()
        .lock(&a.new_owner())
        .await
        .unwrap();
    let lock = b.lock("listened").unwrap();
    let before = evalsha_calls(&server);
    let first = tokio::spawn({
        let (lock, owner) = (lock.clone(), b.new_owner());
        async move { lock.lock(&owner).await }
    });
    // A channel new to the client: two attempts, the second once subscribed.
    waiting(&server, &lock_channel("listened"), before + 2).await;

    let before = evalsha_calls(&server);
    let gave_up = (lock
        .try_lock_for(&b.new_owner(), Duration::from_millis(300))
        .await)
        .unwrap();
    assert!(gave_up.is_none());
    assert_eq!(
        evalsha_calls(&server),
        before + 1,
        "one attempt, then waiting"
    );

    holder.unlock().await.unwrap();
    woken_and_released("the first waiter", first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_that_finds_the_lock_taken_stays_first_in_line() {
    let server = RedisServer::start();
    let (a, b) = (
        long_watchdog_client(&server).await,
        long_watchdog_client(&server).await,
    );
    let holder = a.lock("line").unwrap().lock(&a.new_owner()).await.unwrap();
    let (lock_b, channel) = (b.lock("line").unwrap(), lock_channel("line"));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Two waiters in one client, the first waiting before the second starts.
    let mut waiters = Vec::new();
    for n in 1..=2 {
        let before = evalsha_calls(&server);
        let (lock, owner, order) = (lock_b.clone(), b.new_owner(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock(&owner).await.unwrap();
            order.lock().unwrap().push(n);
            guard.unlock().await.unwrap();
        }));
        // The first subscribes between its two attempts; the second finds the channel
        // subscribed, with no message since, and waits after one.
        waiting(&server, &channel, before + if n == 1 { 2 } else { 1 }).await;
    }
    // An unlock message while the lock is still held: the first waiter tries, and loses.
    let before = evalsha_calls(&server);
    server.command(&["PUBLISH", &channel, "0"]);
    scripts_reach(&server, before + 1).await;
    // The real release wakes the same waiter again: it did not go to the back of the line.
    holder.unlock().await.unwrap();
    all_finish(10 * SECOND, "both waiters", waiters).await;
    assert_eq!(*order.lock().unwrap(), [1, 2]);
}

#[tokio::test]
async fn try_lock_for_gives_up_on_time_and_takes_a_freed_lock_at_once() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("timed").unwrap();
    // A fixed lease: nothing renews, so the server's script count is the waiter's attempts.
    let holder = held_for_a_minute(&lock, &c.new_owner()).await;
    let waiter = c.new_owner();

    let start = Instant::now();
    // Given up on time: not before the wait, and far from the holder's 60 s lease.
    let gave_up = within(
        5 * SECOND,
        "try_lock_for",
        lock.try_lock_for(&waiter, Duration::from_millis(700)),
    )
    .await;
    assert!(gave_up.unwrap().is_none());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(690),
        "gave up early: {waited:?}"
    );

    // A zero wait is one attempt.
    let before = evalsha_calls(&server);
    assert!(lock
        .try_lock_for(&waiter, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    assert_eq!(evalsha_calls(&server), before + 1, "one attempt");

    // Freed while waiting: acquired well before the limit.
    let before = evalsha_calls(&server);
    let pending = tokio::spawn(lock.try_lock_for(&waiter, Duration::from_secs(60)));
    // At least its first attempt (one only while the channel lingers from the last wait).
    waiting(&server, &lock_channel("timed"), before + 1).await;
    holder.unlock().await.unwrap();
    let guard = within(WAKE, "woken waiter", pending)
        .await
        .unwrap()
        .unwrap()
        .expect("acquired");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn unlock_by_a_non_owner_is_not_held_and_changes_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (owner, stranger) = (c.new_owner(), c.new_owner());
    let lock = c.lock("owned").unwrap();
    let guard = lock.lock(&owner).await.unwrap();
    let before = server.command(&["HGETALL", "owned"]);

    match lock.unlock(&stranger).await {
        Err(Error::NotHeld { name, owner }) => {
            assert_eq!(name, "owned");
            assert_eq!(owner, stranger);
        }
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert_eq!(server.command(&["HGETALL", "owned"]), before);
    assert!(lock.is_held_by(&owner).await.unwrap());
    // No stray unlock message either: the holder still holds after a round trip.
    assert!(!guard.is_lease_lost());
    guard.unlock().await.unwrap();
    // Unlocking a free lock is NotHeld too.
    assert!(matches!(
        lock.unlock(&owner).await,
        Err(Error::NotHeld { .. })
    ));
}

#[tokio::test]
async fn java_style_detach_and_unlock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("java-style").unwrap();
    lock.lock(&me).await.unwrap().detach();
    lock.lock(&me).await.unwrap().detach();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 2);
    assert_eq!(c.renewed_holds(), 1, "one renewal per hold, however deep");
    lock.unlock(&me).await.unwrap();
    assert_eq!(c.renewed_holds(), 1);
    lock.unlock(&me).await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(c.renewed_holds(), 0);
}

#[tokio::test]
async fn dropping_a_guard_releases_it_in_the_background() {
    let server = RedisServer::start();
    // A 30 s lease: only the release can free the lock in time.
    let c = long_watchdog_client(&server).await;
    let lock = c.lock("dropped").unwrap();
    let me = c.new_owner();
    drop(lock.lock(&me).await.unwrap());
    assert_eq!(c.renewed_holds(), 0, "renewal stops at drop, synchronously");
    // The release runs in the background: a waiter is woken by its message.
    let other = within(WAKE, "next owner", lock.lock(&c.new_owner()))
        .await
        .unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 0);
    other.unlock().await.unwrap();
}

#[tokio::test]
async fn force_unlock_frees_wakes_and_reports_the_loss() {
    let server = RedisServer::start();
    // A 30 s lease, renewed every 10 s: only the forced unlock's message wakes the waiter in
    // time, and the server's script count is the waiter's attempts.
    let c = long_watchdog_client(&server).await;
    let lock = c.lock("forced").unwrap();
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    waiting(&server, &lock_channel("forced"), before + 2).await;

    assert!(lock.force_unlock().await.unwrap());
    within(WAKE, "holder told", holder.lease_lost()).await;
    let guard = within(WAKE, "waiter woken", waiter).await.unwrap().unwrap();
    assert!(matches!(holder.unlock().await, Err(Error::NotHeld { .. })));
    guard.unlock().await.unwrap();
    assert!(!lock.force_unlock().await.unwrap(), "nothing left to force");
}

#[tokio::test]
async fn queries() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let lock = c.lock("queries").unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    assert_eq!(lock.hold_count(&me).await.unwrap(), 0);
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    let guard = lock.lock(&me).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.is_held_by(&me).await.unwrap());
    assert!(!lock.is_held_by(&other).await.unwrap());
    assert!(lock.remaining_lease().await.unwrap().unwrap() <= Duration::from_millis(900));
    assert_eq!(guard.name(), "queries");
    assert_eq!(guard.owner(), &me);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn name_prefix_maps_every_key_and_channel() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.name_prefix("app1:")).await;
    let me = c.new_owner();
    let lock = c.lock("orders").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    assert_eq!(guard.name(), "orders", "the name as the user gave it");
    assert_eq!(
        server.command(&["HGET", "app1:orders", &me.to_string()]),
        "1"
    );
    assert_eq!(server.command(&["EXISTS", "orders"]), "0");
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    subscribed(&server, &lock_channel("app1:orders")).await;
    assert_eq!(
        server.command(&["PUBSUB", "CHANNELS"]),
        lock_channel("app1:orders"),
        "the only channel"
    );
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn bad_arguments_are_refused_where_they_are_given() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let refused = |result: Result<(), Error>, what: &str| {
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{what}: {result:?}"
        );
    };
    refused(c.lock("").map(drop), "lock");
    refused(c.fair_lock("").map(drop), "fair_lock");
    refused(c.read_write_lock("").map(drop), "read_write_lock");
    refused(c.fenced_lock("").map(drop), "fenced_lock");
    refused(c.spin_lock("").map(drop), "spin_lock");
    refused(c.non_reentrant_lock("").map(drop), "non_reentrant_lock");
    refused(
        c.non_reentrant_fair_lock("").map(drop),
        "non_reentrant_fair_lock",
    );
    refused(
        c.multi_lock(Vec::<redisson_lock::Lock>::new()).map(drop),
        "multi_lock",
    );
    refused(
        c.red_lock(Vec::<redisson_lock::Lock>::new()).map(drop),
        "red_lock",
    );
    for lease in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        refused(Lease::fixed(lease).map(drop), &format!("{lease:?}"));
    }
    let lock = c.lock("args").unwrap();
    assert!(matches!(
        lock.try_lock_for(&me, Duration::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    for timeout in [Duration::ZERO, Duration::from_millis(2)] {
        let built = LockClient::builder()
            .url(&server.url())
            .watchdog_timeout(timeout)
            .build()
            .await;
        assert!(
            matches!(built, Err(Error::InvalidArgument(_))),
            "{timeout:?}"
        );
    }
    assert!(matches!(
        LockClient::builder().build().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        LockClient::builder()
            .url(&server.url())
            .command_timeout(Duration::ZERO)
            .build()
            .await,
        Err(Error::InvalidArgument(_))
    ));
    // Nothing reached Redis.
    assert_eq!(server.command(&["DBSIZE"]), "0");
}

#[tokio::test]
async fn shutdown_closes_everything() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("shutdown").unwrap();
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    subscribed(&server, &lock_channel("shutdown")).await;
    c.shutdown().await;
    assert!(c.is_shut_down());
    within(5 * SECOND, "lease_lost at shutdown", guard.lease_lost()).await;
    assert!(matches!(
        within(5 * SECOND, "waiter", waiter).await.unwrap(),
        Err(Error::Closed)
    ));
    assert!(matches!(
        lock.try_lock(&c.new_owner()).await,
        Err(Error::Closed)
    ));
    // As in Redisson, the hold is not released: it expires with its lease.
    assert_eq!(server.command(&["EXISTS", "shutdown"]), "1");
    drop(guard);
}

#[test]
fn guards_handles_and_futures_are_send_and_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<LockClient>();
    send_sync_static::<redisson_lock::Lock>();
    send_sync_static::<LockGuard>();
    send_sync_static::<redisson_lock::LockOwner>();
    send_sync_static::<Error>();
    send_sync_static::<redisson_lock::FairLock>();
    send_sync_static::<redisson_lock::ReadWriteLock>();
    send_sync_static::<redisson_lock::ReadGuard>();
    send_sync_static::<redisson_lock::WriteGuard>();
    send_sync_static::<redisson_lock::FencedLock>();
    send_sync_static::<redisson_lock::FencedGuard>();
    send_sync_static::<redisson_lock::NonReentrantLock>();
    send_sync_static::<redisson_lock::NonReentrantFairLock>();
    send_sync_static::<redisson_lock::SpinLock>();
    send_sync_static::<redisson_lock::MultiLock>();
    send_sync_static::<redisson_lock::RedLock>();
    send_sync_static::<redisson_lock::MultiLockGuard>();
    // The futures are checked by the compiler alone: no client, no server, nothing runs.
    let _: fn(LockClient, LockGuard) = futures_are_spawnable;
}

/// Type-checked, never called: the futures of every kind must be spawnable (`Send + 'static`).
fn futures_are_spawnable(c: LockClient, guard: LockGuard) {
    fn send_static<T: Send + 'static>(_: &T) {}
    let lock = c.lock("bounds").unwrap();
    let me = c.new_owner();
    send_static(&lock.lock(&me));
    send_static(&lock.try_lock(&me));
    send_static(&lock.try_lock_for(&me, Duration::from_secs(1)));
    let (fair, rw) = (
        c.fair_lock("bounds-fair").unwrap(),
        c.read_write_lock("bounds-rw").unwrap(),
    );
    send_static(&fair.lock(&me));
    send_static(&fair.try_lock_for(&me, Duration::from_secs(1)));
    send_static(&rw.read(&me));
    send_static(&rw.try_write_for(&me, Duration::from_secs(1)));
    send_static(&c.fenced_lock("bounds-fenced").unwrap().lock(&me));
    send_static(
        &c.spin_lock("bounds-spin")
            .unwrap()
            .try_lock_for(&me, Duration::from_secs(1)),
    );
    send_static(&c.non_reentrant_lock("bounds-nr").unwrap().lock(&me));
    let multi = c
        .multi_lock([c.lock("bounds-a").unwrap(), c.lock("bounds-b").unwrap()])
        .unwrap();
    send_static(&multi.lock(&me));
    send_static(
        &c.red_lock([c.lock("bounds-a").unwrap()])
            .unwrap()
            .try_lock_for(&me, Duration::from_secs(1)),
    );
    send_static(&guard.lease_lost());
    send_static(&guard.unlock());
    let _ = Arc::new(c);
}

#[tokio::test]
async fn dropping_every_handle_closes_the_clients_connections() {
    let server = RedisServer::start();
    let connections = || server.command(&["CLIENT", "LIST"]).lines().count();
    let c = client(&server).await;
    let guard = c
        .lock("dropped-client")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    assert_eq!(
        connections(),
        3,
        "commands, subscriber, and the harness's own"
    );
    drop(guard);
    drop(c);
    // The last handle gone, the background tasks stop and the connections are closed.
    eventually(Duration::from_secs(5), "connections closed", || {
        connections() == 1
    })
    .await;
}
