//! Spin waiting (protocol §8.1): Redisson's `RSpinLock` (plain hash acquire, releases that
//! publish nothing, waiters that poll by a back-off and never subscribe), and a plain
//! `Lock` switched to `WaitStrategy::Spin`. Ports of `RedissonSpinLockTest` (§11.9) that
//! apply.

mod support;

use std::time::{Duration, Instant};

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use redisson_lock::{Backoff, Error, Lease, SpinLock, WaitStrategy};
use support::*;
use tokio::sync::broadcast;

const SECOND: Duration = Duration::from_secs(1);
/// A Java owner (`<client uuid>:<thread id>`).
const JAVA_OWNER: &str = "8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:57";

/// A raw subscriber to every channel, standing in for any listener on the server.
async fn listen_to_everything(
    server: &RedisServer,
) -> (SubscriberClient, broadcast::Receiver<Message>) {
    let subscriber = Builder::from_config(Config::from_url(&server.url()).unwrap())
        .build_subscriber_client()
        .unwrap();
    subscriber.init().await.unwrap();
    let messages = subscriber.message_rx();
    subscriber.psubscribe("*").await.unwrap();
    let _: Value = subscriber.ping(None).await.unwrap();
    (subscriber, messages)
}

fn no_channels(server: &RedisServer) -> bool {
    server.command(&["PUBSUB", "CHANNELS"]).is_empty()
}

#[tokio::test]
async fn a_spin_lock_and_a_plain_lock_exclude_each_other() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (a, b) = (c.new_owner(), c.new_owner());
    let spin = c.spin_lock("spin-shared");
    let plain = c.lock("spin-shared");

    let guard = spin.lock(&a).await.unwrap();
    assert_eq!(
        server.command(&["HGET", "spin-shared", &a.to_string()]),
        "1"
    );
    assert!(plain.try_lock(&b).await.unwrap().is_none());
    assert!(plain.is_held_by(&a).await.unwrap());
    guard.unlock().await.unwrap();

    let guard = plain.lock(&b).await.unwrap();
    assert!(spin.try_lock(&a).await.unwrap().is_none());
    assert!(spin
        .try_lock_for(&a, Duration::from_millis(150))
        .await
        .unwrap()
        .is_none());
    assert!(spin.is_locked().await.unwrap());
    // A spin waiter notices the plain unlock by polling.
    let waiter = tokio::spawn(spin.lock(&a));
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.unlock().await.unwrap();
    within(SECOND, "spin waiter", waiter)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert!(!plain.is_locked().await.unwrap());
}

#[tokio::test]
async fn spin_releases_publish_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (_subscriber, mut messages) = listen_to_everything(&server).await;
    let me = c.new_owner();
    let spin = c.spin_lock("spin-quiet");

    // Re-entered, released twice, then force-unlocked: never a message.
    let outer = spin.lock(&me).await.unwrap();
    let inner = spin.lock(&me).await.unwrap();
    assert_eq!(spin.hold_count(&me).await.unwrap(), 2);
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    assert!(!spin.is_locked().await.unwrap());
    spin.lock(&me).await.unwrap().detach();
    assert!(spin.force_unlock().await.unwrap());
    assert!(!spin.force_unlock().await.unwrap());
    assert!(!spin.is_locked().await.unwrap());

    // Control: a plain unlock on the same name does publish, and the listener sees it.
    c.lock("spin-quiet")
        .lock(&me)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let message = within(SECOND, "the plain unlock message", messages.recv())
        .await
        .unwrap();
    assert_eq!(message.channel, "redisson_lock__channel:{spin-quiet}");
    assert!(
        messages.try_recv().is_err(),
        "the spin releases published nothing"
    );
}

#[tokio::test]
async fn a_spin_waiter_acquires_soon_after_release_without_subscribing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (holder, waiter_owner) = (c.new_owner(), c.new_owner());
    let spin = c.spin_lock("spin-wait");

    let guard = spin.lock(&holder).await.unwrap();
    let waiter = tokio::spawn(spin.lock(&waiter_owner));
    // Long enough for the back-off to reach its 128 ms cap, renewals included.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(no_channels(&server), "a spin waiter never subscribes");
        assert_eq!(c.subscribed_channels(), 0);
    }
    assert!(!waiter.is_finished());

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let got = within(SECOND, "spin waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    // One back-off step (at most 128 ms) plus a round trip.
    assert!(
        released.elapsed() < Duration::from_millis(400),
        "took {:?}",
        released.elapsed()
    );
    assert!(spin.is_held_by(&waiter_owner).await.unwrap());
    got.unlock().await.unwrap();
    assert!(no_channels(&server));
}

#[tokio::test]
async fn try_lock_for_gives_up_after_the_wait() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let spin = c.spin_lock("spin-timed");
    let guard = spin.lock(&c.new_owner()).await.unwrap();
    for wait in [Duration::from_millis(300), SECOND] {
        let started = Instant::now();
        let got = spin.try_lock_for(&c.new_owner(), wait).await.unwrap();
        let took = started.elapsed();
        assert!(got.is_none());
        assert!(took >= wait, "gave up early: {took:?} < {wait:?}");
        assert!(
            took < wait + Duration::from_millis(200),
            "gave up late: {took:?}"
        );
    }
    // A zero wait is a single attempt.
    let started = Instant::now();
    assert!(spin
        .try_lock_for(&c.new_owner(), Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() < Duration::from_millis(100));
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_spin_waiter_gets_the_lock_when_a_fixed_lease_ends() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // A constant back-off longer than the lease: the holder's TTL cuts the sleep short.
    let spin = c
        .spin_lock("spin-expire")
        .with_backoff(Backoff::constant(5 * SECOND));
    let first = spin
        .clone()
        .with_lease(Lease::Fixed(Duration::from_millis(400)))
        .lock(&c.new_owner())
        .await
        .unwrap();
    let started = Instant::now();
    let second = within(2 * SECOND, "second", spin.lock(&c.new_owner()))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "took {:?}",
        started.elapsed()
    );
    // The old owner's unlock fails (testExpire).
    assert!(matches!(first.unlock().await, Err(Error::NotHeld { .. })));
    second.unlock().await.unwrap();
}

#[tokio::test]
async fn a_plain_lock_with_spin_waiting_outwaits_a_java_holder_without_pub_sub() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // A Java hold with a long TTL, released by a DEL that publishes nothing (a spin unlock,
    // or a crashed publisher): a pub/sub waiter would sleep until the TTL ran out.
    server.command(&["HINCRBY", "java-spin", JAVA_OWNER, "1"]);
    server.command(&["PEXPIRE", "java-spin", "30000"]);
    let lock = c
        .lock("java-spin")
        .with_wait_strategy(WaitStrategy::Spin(Backoff::exponential()));
    assert_eq!(
        lock.wait_strategy(),
        WaitStrategy::Spin(Backoff::exponential())
    );
    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());

    let waiter = tokio::spawn(lock.lock(&me));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(no_channels(&server), "spin waiting never subscribes");
    assert!(!waiter.is_finished());
    let released = Instant::now();
    server.command(&["DEL", "java-spin"]);
    let guard = within(2 * SECOND, "spin waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_millis(400),
        "took {:?}",
        released.elapsed()
    );
    // It is an ordinary hold of the plain lock: unlocking publishes as usual.
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn spin_locks_reenter_count_and_report_like_plain_locks() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let spin: SpinLock = c.spin_lock("spin-basics");
    assert_eq!(spin.name(), "spin-basics");
    assert!(format!("{spin:?}").contains("Spin("));
    assert!(spin.remaining_lease().await.unwrap().is_none());

    let guards = [
        spin.lock(&me).await.unwrap(),
        spin.try_lock(&me).await.unwrap().unwrap(),
        spin.try_lock_for(&me, SECOND).await.unwrap().unwrap(),
    ];
    assert_eq!(spin.hold_count(&me).await.unwrap(), 3);
    assert_eq!(spin.hold_count(&other).await.unwrap(), 0);
    assert!(!spin.is_held_by(&other).await.unwrap());
    assert!(spin.remaining_lease().await.unwrap().is_some());
    // Renewed by the watchdog (900 ms in tests) like any hold.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(spin.is_held_by(&me).await.unwrap());
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    assert!(!spin.is_locked().await.unwrap());
    assert!(matches!(spin.unlock(&me).await, Err(Error::NotHeld { .. })));
}
