//! Dropping an acquire future at any point never leaves a hold that nobody owns.

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_uncontended_acquires_mid_flight_leaves_no_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // A long lease: only the release of an orphaned hold can free the lock in time.
    let lock = c.lock("cancel-free").unwrap().with_lease(fixed(60_000));
    // The span of the deadlines below: three acquisitions' time here and now (at least
    // 400 µs), so that on a loaded machine too some fall after the reply.
    let mut span = Duration::from_micros(400);
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let guard = lock.lock(&c.new_owner()).await.unwrap();
        span = span.max(started.elapsed() * 3);
        guard.unlock().await.unwrap();
    }
    let span = span.as_micros() as u64;
    let mut acquired = 0;
    for i in 0..300 {
        let owner = c.new_owner();
        // Deadlines from 0 to `span` fall before, during and after the script's round trip.
        // On timeout the future is dropped: whatever it took is released in the background.
        if let Ok(guard) = cut_off(spread(i, span), lock.lock(&owner)).await {
            acquired += 1;
            guard.unwrap().unlock().await.unwrap();
        }
    }
    eventually(
        Duration::from_secs(5),
        "every orphaned hold released",
        || server.command(&["EXISTS", "cancel-free"]) == "0",
    )
    .await;
    assert_eq!(c.renewed_holds(), 0);
    // Both paths were exercised.
    assert!(acquired > 0 && acquired < 300, "acquired {acquired} of 300");
    // The lock is really free: another client takes it at once.
    let other = client(&server).await;
    let guard = other
        .lock("cancel-free")
        .unwrap()
        .try_lock(&other.new_owner())
        .await
        .unwrap()
        .expect("free");
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_waiters_at_every_stage_leaves_no_hold_and_no_subscription() {
    let server = RedisServer::start();
    let (holder_client, waiter_client) = (client(&server).await, client(&server).await);
    let long = fixed(60_000);
    let lock = holder_client.lock("cancel-busy").unwrap().with_lease(long);
    let waiting = waiter_client.lock("cancel-busy").unwrap().with_lease(long);
    let holder = holder_client.new_owner();

    for i in 0..60 {
        let guard = lock.lock(&holder).await.unwrap();
        let owner = waiter_client.new_owner();
        let pending = tokio::spawn(waiting.lock(&owner));
        // Release while the waiter is at some stage: first try, subscribing, or waiting.
        tokio::time::sleep(spread(i, 3_000)).await;
        guard.unlock().await.unwrap();
        tokio::time::sleep(spread(i + 7, 1_500)).await;
        pending.abort();
        if let Ok(Ok(guard)) = pending.await {
            guard.unlock().await.unwrap();
        }
    }
    eventually(Duration::from_secs(5), "no stray hold", || {
        server.command(&["EXISTS", "cancel-busy"]) == "0"
    })
    .await;
    eventually(Duration::from_secs(5), "no stray subscription", || {
        waiter_client.subscribed_channels() == 0 && no_channels(&server)
    })
    .await;
    assert_eq!(waiter_client.renewed_holds(), 0);
    assert_eq!(holder_client.renewed_holds(), 0);
}

#[tokio::test]
async fn timeout_around_lock_is_safe_while_the_lock_is_held() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("cancel-timeout").unwrap().with_lease(fixed(60_000));
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    let waiter = c.new_owner();
    for _ in 0..5 {
        assert!(
            tokio::time::timeout(Duration::from_millis(30), lock.lock(&waiter))
                .await
                .is_err()
        );
    }
    assert!(!lock.is_held_by(&waiter).await.unwrap());
    guard.unlock().await.unwrap();
    eventually(Duration::from_secs(5), "unsubscribed", || {
        c.subscribed_channels() == 0 && no_channels(&server)
    })
    .await;
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn a_reentrant_acquire_dropped_mid_flight_undoes_only_itself() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c
        .lock("cancel-reentrant")
        .unwrap()
        .with_lease(fixed(30_000));
    let me = c.new_owner();
    let outer = lock.lock(&me).await.unwrap();
    for i in 0..100 {
        if let Ok(guard) = cut_off(spread(i, 300), lock.lock(&me)).await {
            guard.unwrap().unlock().await.unwrap();
        }
    }
    eventually(
        Duration::from_secs(5),
        "orphaned re-entries released",
        || server.command(&["HGET", "cancel-reentrant", &me.to_string()]) == "1",
    )
    .await;
    assert!(
        lock.is_held_by(&me).await.unwrap(),
        "the outer hold survived"
    );
    outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn select_on_lease_lost_beside_the_work() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .lock("select")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    server.command(&["DEL", "select"]); // someone breaks the lock
    let outcome = tokio::select! {
        _ = guard.lease_lost() => "stopped: lease lost",
        _ = tokio::time::sleep(Duration::from_secs(5)) => "work finished",
    };
    assert_eq!(outcome, "stopped: lease lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_unlock_still_releases_the_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    // A long lease: only the release itself can free the lock in time.
    let lock = c.lock("cancel-unlock").unwrap().with_lease(fixed(60_000));
    let free = || server.command(&["EXISTS", "cancel-unlock"]) == "0";

    // Dropped before its first poll.
    let guard = lock.lock(&me).await.unwrap();
    drop(guard.unlock());
    eventually(
        Duration::from_secs(5),
        "released after an unpolled drop",
        free,
    )
    .await;

    // Dropped at points before, during and after the script's round trip, with an outer hold
    // of the same owner that must survive every one of them.
    let outer = lock.lock(&me).await.unwrap();
    let mut finished = 0;
    for i in 0..200 {
        let inner = lock.lock(&me).await.unwrap();
        if cut_off(spread(i, 400), inner.unlock()).await.is_ok() {
            finished += 1;
        }
        eventually(Duration::from_secs(5), "the inner hold released", || {
            server.command(&["HGET", "cancel-unlock", &me.to_string()]) == "1"
        })
        .await;
    }
    assert!(finished < 200, "no unlock was cancelled");
    outer.unlock().await.unwrap();
    assert!(free());
}
