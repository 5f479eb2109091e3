//! Waiting: wake-ups on unlock, waiters on a channel already subscribed, timed tries.

use super::*;

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
