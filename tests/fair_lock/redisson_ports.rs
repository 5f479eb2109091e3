//! Ports of Redisson's `RedissonFairLockTest` (protocol §11.4) that apply.

use super::*;

/// testAcquireFailedTimeoutDrift_Descrete: wait 5000, lease 30000, owners 101..105.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acquire_failed_moves_only_the_waiters_behind_up() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.fair_wait_timeout(Duration::from_secs(5))).await;
    let name = "acquire-failed-drift";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(30_000));
    let owner = |id| LockOwner::from_parts(c.id(), id);
    let first = lock.try_lock(&owner(101)).await.unwrap().unwrap();

    let mut tasks = Vec::new();
    for (i, id) in (102..=105).enumerate() {
        tasks.push(spawn_lock(&lock, &owner(id)));
        queue_reaches(&server, name, i + 1).await;
    }
    let now = now_ms();
    let before: Vec<i64> = (102..=105)
        .map(|id| deadline_of(&server, name, &owner(id)))
        .collect();
    // Java's replies 30000/35000/40000/45000 are these deadlines minus the wait.
    for (i, deadline) in before.iter().enumerate() {
        let expected = 35_000 + 5_000 * i as i64;
        let ahead = deadline - now;
        assert!(
            (expected - 4_000..=expected).contains(&ahead),
            "{i}: {ahead}"
        );
    }

    // 103 gives up: only 104 and 105 move up, by its wait.
    let t103 = tasks.remove(1);
    t103.abort();
    eventually(5 * SECOND, "103 leaving", || {
        queued(&server, name).len() == 3
    })
    .await;
    let after: Vec<Option<i64>> = (102..=105)
        .map(|id| deadline(&server, name, &owner(id).to_string()))
        .collect();
    assert_eq!(
        after,
        [
            Some(before[0]),
            None,
            Some(before[2] - 5_000),
            Some(before[3] - 5_000)
        ]
    );

    // 101 unlocks, 102 acquires: the rest move up by 102's wait.
    first.unlock().await.unwrap();
    let t102 = tasks.remove(0);
    let (second, _) = within(WAKE, "102", t102).await.unwrap();
    assert!(lock.is_held_by(&owner(102)).await.unwrap());
    assert_eq!(
        queued(&server, name),
        [owner(104).to_string(), owner(105).to_string()]
    );
    assert_eq!(deadline_of(&server, name, &owner(104)), before[2] - 10_000);
    assert_eq!(deadline_of(&server, name, &owner(105)), before[3] - 10_000);
    let lease = lock.remaining_lease().await.unwrap().unwrap();
    assert!(lease > Duration::from_secs(20), "{lease:?}");

    for task in tasks {
        task.abort();
    }
    eventually(5 * SECOND, "the rest leaving", || {
        queued(&server, name).is_empty()
    })
    .await;
    second.unlock().await.unwrap();
    assert_no_queue(&server, name);
}

/// testLockAcquiredTimeoutDrift_Descrete: lease 300000, wait 5000; deadlines do not drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlines_move_up_by_the_wait_of_each_waiter_that_acquires() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.fair_wait_timeout(Duration::from_secs(5))).await;
    let name = "acquired-drift";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(300_000));
    let owner = |id| LockOwner::from_parts(c.id(), id);
    let first = lock.try_lock(&owner(101)).await.unwrap().unwrap();
    let t102 = spawn_lock(&lock, &owner(102));
    queue_reaches(&server, name, 1).await;
    let t103 = tokio::spawn(lock.lock(&owner(103)));
    queue_reaches(&server, name, 2).await;
    let d102 = deadline_of(&server, name, &owner(102));
    let d103 = deadline_of(&server, name, &owner(103));
    assert_eq!(d103 - d102, 5_000);

    first.unlock().await.unwrap();
    let (second, _) = within(WAKE, "102", t102).await.unwrap();
    let d103_after = deadline_of(&server, name, &owner(103));
    assert_eq!(d103 - d103_after, 5_000);

    let t104 = tokio::spawn(lock.lock(&owner(104)));
    queue_reaches(&server, name, 2).await;
    let d104 = deadline_of(&server, name, &owner(104));
    assert_eq!(d104 - d103_after, 5_000);
    // No drift: nobody is further out than the lease plus the waits ahead of it.
    assert!(
        d104 <= now_ms() + 300_000 + 2 * 5_000,
        "{}",
        d104 - now_ms()
    );

    t103.abort();
    t104.abort();
    eventually(5 * SECOND, "waiters leaving", || {
        queued(&server, name).is_empty()
    })
    .await;
    second.unlock().await.unwrap();
    assert_no_queue(&server, name);
}

/// testTryLockNonDelayed: a failed timed try leaves the queue, so a later try succeeds.
#[tokio::test]
async fn a_failed_timed_try_does_not_delay_a_later_try() {
    let name = "non-delayed";
    let (server, c, lock) = on_a_new_server(name).await;
    let (t1, t2, main) = (c.new_owner(), c.new_owner(), c.new_owner());
    let held = lock.try_lock(&t1).await.unwrap().unwrap();
    assert!(lock
        .try_lock_for(&t2, Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert_no_queue(&server, name);
    held.unlock().await.unwrap();
    let guard = lock
        .try_lock(&main)
        .await
        .unwrap()
        .expect("not held up by t2");
    guard.unlock().await.unwrap();
}

/// testLockAcquiredBooleanTimeoutDrift_Descrete: the no-wait form never queues.
#[tokio::test]
async fn try_lock_never_joins_the_queue() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.fair_wait_timeout(Duration::from_millis(100))).await;
    let name = "no-wait";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(500));
    let owner = |id| LockOwner::from_parts(c.id(), id);

    let first = lock.try_lock(&owner(101)).await.unwrap().unwrap();
    assert!(lock.try_lock(&owner(102)).await.unwrap().is_none());
    assert!(lock.try_lock(&owner(103)).await.unwrap().is_none());
    assert_no_queue(&server, name);
    first.unlock().await.unwrap();
    let second = lock.try_lock(&owner(102)).await.unwrap().unwrap();
    for id in [104, 103, 104] {
        assert!(lock.try_lock(&owner(id)).await.unwrap().is_none());
    }
    assert_no_queue(&server, name);
    // 102's lease runs out; then 104 gets it.
    second.detach();
    eventually(5 * SECOND, "lease expiry", || {
        server.command(&["EXISTS", name]) == "0"
    })
    .await;
    let third = lock.try_lock(&owner(104)).await.unwrap().unwrap();
    third.unlock().await.unwrap();
    assert_no_queue(&server, name);

    // The no-wait form purges expired heads by `now`...
    enqueue_java(&server, name, &java_owner(15), now_ms() - 1);
    let fourth = lock.try_lock(&owner(105)).await.unwrap().unwrap();
    fourth.unlock().await.unwrap();
    assert_no_queue(&server, name);
    // ...and moves the others up by the client's wait when the owner first
    // in line takes the lock.
    let behind_deadline = now_ms() + 60_000;
    enqueue_java(&server, name, &owner(106).to_string(), now_ms() + 30_000);
    enqueue_java(&server, name, &java_owner(16), behind_deadline);
    let fifth = lock.try_lock(&owner(106)).await.unwrap().unwrap();
    assert_eq!(queued(&server, name), [java_owner(16)]);
    assert_eq!(
        deadline(&server, name, &java_owner(16)),
        Some(behind_deadline - 100)
    );
    fifth.unlock().await.unwrap();
}

/// testIsLocked, testGetHoldCount, testReentrancy: reentrancy depth 3, a partial release
/// keeps the queue waiting, the last one hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reentrancy_hold_count_and_is_locked() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "reentrant";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(30_000));
    let (me, other) = (c.new_owner(), c.new_owner());
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);

    let g1 = lock.lock(&me).await.unwrap();
    let g2 = lock.try_lock(&me).await.unwrap().unwrap();
    let g3 = lock.try_lock_for(&me, SECOND).await.unwrap().unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 3);
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.is_held_by(&me).await.unwrap());
    assert!(!lock.is_held_by(&other).await.unwrap());
    assert_eq!(lock.hold_count(&other).await.unwrap(), 0);
    assert!(lock.try_lock(&other).await.unwrap().is_none());
    assert_no_queue(&server, name);
    assert!(matches!(
        lock.unlock(&other).await,
        Err(Error::NotHeld { .. })
    ));

    let waiting = spawn_lock(&lock, &other);
    queue_reaches(&server, name, 1).await;
    server.command(&["PEXPIRE", name, "5000"]);
    g3.unlock().await.unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 2);
    // A partial release resets the TTL to the lease.
    let lease = lock.remaining_lease().await.unwrap().unwrap();
    assert!(lease > Duration::from_secs(20), "{lease:?}");
    g2.unlock().await.unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 1);
    assert!(!waiting.is_finished());
    assert_eq!(queued(&server, name), [other.to_string()]);

    g1.unlock().await.unwrap();
    let (guard, _) = within(WAKE, "waiter", waiting).await.unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 0);
    assert_eq!(lock.hold_count(&other).await.unwrap(), 1);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_no_queue(&server, name);
}

/// §11.4 testNameMapper: with a name prefix, the queue and deadline keys are built from the
/// prefixed name (as Redisson 3.52+ does), and the lock works.
#[tokio::test]
async fn the_name_prefix_maps_the_queue_keys_too() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.name_prefix("test::")).await;
    let lock = c.fair_lock("lock").unwrap();
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    let waiter = c.new_owner();
    let pending = spawn_lock(&lock, &waiter);
    queue_reaches(&server, "test::lock", 1).await;
    assert_eq!(queued(&server, "test::lock"), vec![waiter.to_string()]);
    assert!(deadline(&server, "test::lock", &waiter.to_string()).is_some());
    assert_eq!(server.command(&["EXISTS", &queue_key("lock")]), "0");
    holder.unlock().await.unwrap();
    let (guard, _) = within(WAKE, "waiter", pending).await.unwrap();
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_no_queue(&server, "test::lock");
}

/// §11.4 testAcquireFailedNotCalledOnRedisTimeout, adapted: while Redis refuses writes
/// (`CLIENT PAUSE … WRITE`), a queued waiter's `try_lock_for` ends within the pause instead
/// of waiting out its minute; Redisson returns false there, ours reports the timeout as a
/// retryable error (or `None`). Once writes resume, the waiter has left the queue.
#[tokio::test]
async fn a_queued_waiter_ends_during_a_write_pause_and_leaves_the_queue_after_it() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.command_timeout(Duration::from_millis(500))).await;
    let lock = c.fair_lock("paused").unwrap();
    // The waiters sleep until the holder's lease would end (3 s; Redisson's test: 10 s), then
    // look again, which the pause answers with timeouts.
    let holder = lock
        .clone()
        .with_lease(fixed(3_000))
        .lock(&c.new_owner())
        .await
        .unwrap();
    // A waiter in lock() rides out outages shorter than watchdog_timeout (900 ms here, 30 s
    // by default): this pause is longer, so it may end with a retryable error too.
    let second = tokio::spawn(lock.lock(&c.new_owner()));
    queue_reaches(&server, "paused", 1).await;
    let waiter = c.new_owner();
    let timed = tokio::spawn(lock.try_lock_for(&waiter, Duration::from_secs(60)));
    queue_reaches(&server, "paused", 2).await;

    server.command(&["CLIENT", "PAUSE", "30000", "WRITE"]);
    let outcome = within(
        Duration::from_secs(20),
        "try_lock_for during the pause",
        timed,
    )
    .await
    .unwrap();
    match outcome {
        Ok(None) => {}
        Err(error) => assert!(error.is_retryable(), "{error:?}"),
        Ok(Some(_)) => panic!("the lock is held, and expiry is paused with the writes"),
    }

    server.command(&["CLIENT", "UNPAUSE"]);
    // Its exit is retried in the background while writes are paused: generous margins.
    eventually(Duration::from_secs(15), "the waiter left the queue", || {
        !queued(&server, "paused").contains(&waiter.to_string())
    })
    .await;
    assert_eq!(deadline(&server, "paused", &waiter.to_string()), None);
    drop(holder); // its 3 s lease may be over by now: release in the background if not
    match within(Duration::from_secs(5), "second waiter", second)
        .await
        .unwrap()
    {
        Ok(guard) => guard.unlock().await.unwrap(),
        Err(error) => assert!(error.is_retryable(), "{error:?}"),
    }
    eventually(
        Duration::from_secs(15),
        "every waiter left the queue",
        || server.command(&["EXISTS", &queue_key("paused"), &timeouts_key("paused")]) == "0",
    )
    .await;
}
