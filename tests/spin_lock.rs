//! Spin waiting (protocol §8.1): Redisson's `RSpinLock` (plain hash acquire, releases that
//! publish nothing, waiters that poll by a back-off and never subscribe), and a plain
//! `Lock` switched to `WaitStrategy::Spin`. Ports of `RedissonSpinLockTest` (§11.9) that
//! apply.

mod support;

use std::time::{Duration, Instant};

use redisson_lock::{Backoff, Error, SpinLock, WaitStrategy};
use support::*;

#[tokio::test]
async fn a_spin_lock_and_a_plain_lock_exclude_each_other() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (a, b) = (c.new_owner(), c.new_owner());
    let spin = c.spin_lock("spin-shared").unwrap();
    let plain = c.lock("spin-shared").unwrap();

    let guard = spin.lock(&a).await.unwrap();
    assert_eq!(
        server.command(&["HGET", "spin-shared", &a.to_string()]),
        "1"
    );
    assert!(plain.try_lock(&b).await.unwrap().is_none());
    assert!(plain.is_held_by(&a).await.unwrap());
    guard.unlock().await.unwrap();

    // A fixed 60 s lease: nothing renews, so the server's script count is the spin waiter's
    // attempts, and only its polling can notice the unlock in time.
    let guard = plain
        .clone()
        .with_lease(fixed(60_000))
        .lock(&b)
        .await
        .unwrap();
    assert!(spin.try_lock(&a).await.unwrap().is_none());
    assert!(spin
        .try_lock_for(&a, Duration::from_millis(150))
        .await
        .unwrap()
        .is_none());
    assert!(spin.is_locked().await.unwrap());
    // A spin waiter notices the plain unlock by polling: it is polling already.
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(spin.lock(&a));
    scripts_reach(&server, before + 2).await;
    guard.unlock().await.unwrap();
    woken_and_released("spin waiter", waiter).await;
    assert!(!plain.is_locked().await.unwrap());
}

#[tokio::test]
async fn spin_releases_publish_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // Every channel, standing in for any listener on the server.
    let mut messages = Listener::pattern(&server, "*").await;
    let me = c.new_owner();
    let spin = c.spin_lock("spin-quiet").unwrap();

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
        .unwrap()
        .lock(&me)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let (channel, _) = messages.next().await;
    assert_eq!(channel, lock_channel("spin-quiet"), "the plain unlock's");
    // The spin releases published nothing, before it or after.
    messages.no_more().await;
}

#[tokio::test]
async fn a_spin_waiter_acquires_soon_after_release_without_subscribing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (holder, waiter_owner) = (c.new_owner(), c.new_owner());
    let spin = c.spin_lock("spin-wait").unwrap();

    // A fixed 60 s lease: only the waiter's polling can notice the release in time.
    let guard = spin
        .clone()
        .with_lease(fixed(60_000))
        .lock(&holder)
        .await
        .unwrap();
    let waiter = tokio::spawn(spin.lock(&waiter_owner));
    // Time passing is the scenario: long enough for the back-off to reach its 128 ms cap.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(no_channels(&server), "a spin waiter never subscribes");
        assert_eq!(c.subscribed_channels(), 0);
    }
    assert!(!waiter.is_finished());

    guard.unlock().await.unwrap();
    let got = within(WAKE, "spin waiter", waiter).await.unwrap().unwrap();
    assert!(spin.is_held_by(&waiter_owner).await.unwrap());
    got.unlock().await.unwrap();
    assert!(no_channels(&server));
}

#[tokio::test]
async fn try_lock_for_gives_up_after_the_wait() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let spin = c.spin_lock("spin-timed").unwrap();
    // A fixed 60 s lease: nothing renews, so the server's script count is the waiters'.
    let guard = spin
        .clone()
        .with_lease(fixed(60_000))
        .lock(&c.new_owner())
        .await
        .unwrap();
    for wait in [Duration::from_millis(300), SECOND] {
        let started = Instant::now();
        // Given up after the wait, far from the holder's 60 s lease.
        let attempt = spin.try_lock_for(&c.new_owner(), wait);
        let got = within(wait + 5 * SECOND, "try_lock_for", attempt).await;
        let took = started.elapsed();
        assert!(got.unwrap().is_none());
        assert!(took >= wait, "gave up early: {took:?} < {wait:?}");
    }
    // A zero wait is a single attempt.
    let before = evalsha_calls(&server);
    assert!(spin
        .try_lock_for(&c.new_owner(), Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    assert_eq!(evalsha_calls(&server), before + 1, "one attempt");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_spin_waiter_gets_the_lock_when_a_fixed_lease_ends() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // A constant back-off far longer than the lease: the holder's TTL cuts the sleep short.
    let spin = c
        .spin_lock("spin-expire")
        .unwrap()
        .with_backoff(Backoff::constant(60 * SECOND));
    let first = spin
        .clone()
        .with_lease(fixed(400))
        .lock(&c.new_owner())
        .await
        .unwrap();
    let second = within(5 * SECOND, "second", spin.lock(&c.new_owner()))
        .await
        .unwrap();
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
        .unwrap()
        .with_wait_strategy(WaitStrategy::Spin(Backoff::exponential()));
    assert_eq!(
        lock.wait_strategy(),
        WaitStrategy::Spin(Backoff::exponential())
    );
    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());

    // Nothing renews: the server's script count is the waiter's attempts. After three, a
    // pub/sub waiter would have subscribed.
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&me));
    scripts_reach(&server, before + 3).await;
    assert!(no_channels(&server), "spin waiting never subscribes");
    assert!(!waiter.is_finished());
    server.command(&["DEL", "java-spin"]);
    // Noticed by polling, long before the 30 s TTL.
    let guard = within(WAKE, "spin waiter", waiter).await.unwrap().unwrap();
    // It is an ordinary hold of the plain lock: unlocking publishes as usual.
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn spin_locks_reenter_count_and_report_like_plain_locks() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let spin: SpinLock = c.spin_lock("spin-basics").unwrap();
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
