//! The queue: FIFO order across clients, time-outs and dropped futures leaving it, dead waiters and per-waiter wake-ups.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_two_clients_get_the_lock_in_queue_order() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let name = "fifo";
    let held = held_renewed(&clients[0], name).await;

    let mut waiters = InOrder::behind(0);
    for i in 0..6 {
        // The next waiter starts only once this one is queued.
        waiters.join(&server, &clients[i % 2], name).await;
    }
    assert_eq!(queued(&server, name), waiters.owners);
    assert_eq!(timeouts_len(&server, name), 6);

    held.unlock().await.unwrap();
    assert_eq!(waiters.taken().await, [1, 2, 3, 4, 5, 6]);
    assert_no_queue(&server, name);
    assert!(!clients[1]
        .fair_lock(name)
        .unwrap()
        .is_locked()
        .await
        .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_waiter_leaves_at_once_and_moves_the_others_up() {
    let name = "gives-up";
    let (server, c, lock) = on_a_new_server(name).await;
    let held = held_30_s(&c, &lock).await;

    // Long enough for the others to queue behind it on a loaded machine.
    const QUIT_WAIT_MS: i64 = 3_000;
    let quitter = c.new_owner();
    let started = Instant::now();
    let quit_wait = Duration::from_millis(QUIT_WAIT_MS as u64);
    let quitting = tokio::spawn(lock.try_lock_for(&quitter, quit_wait));
    queue_reaches(&server, name, 1).await;
    let next = c.new_owner();
    let next_task = spawn_lock(&lock, &next);
    queue_reaches(&server, name, 2).await;
    let last = c.new_owner();
    let last_task = spawn_lock(&lock, &last);
    queue_reaches(&server, name, 3).await;

    // Each deadline is the previous one plus that waiter's wait; the first one is the
    // holder's PTTL plus the try_lock_for wait.
    let (q, n, l) = (
        deadline_of(&server, name, &quitter),
        deadline_of(&server, name, &next),
        deadline_of(&server, name, &last),
    );
    let ahead = q - now_ms();
    assert!((25_000..=30_000 + QUIT_WAIT_MS).contains(&ahead), "{ahead}");
    assert_eq!(n - q, DEFAULT_WAIT_MS);
    assert_eq!(l - n, DEFAULT_WAIT_MS);

    let result = within(10 * SECOND, "timed-out waiter", quitting)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_none());
    assert!(started.elapsed() >= quit_wait);
    // Already gone when try_lock_for returns, and the others moved up by its wait.
    assert_eq!(queued(&server, name), [next.to_string(), last.to_string()]);
    assert_eq!(deadline(&server, name, &quitter.to_string()), None);
    assert_eq!(deadline_of(&server, name, &next), n - QUIT_WAIT_MS);
    assert_eq!(deadline_of(&server, name, &last), l - QUIT_WAIT_MS);

    // The next waiter is not held up by the one that left (whose deadline is 30 s away).
    subscribed(&server, &waiter_channel(name, &next.to_string())).await;
    held.unlock().await.unwrap();
    let (guard, _) = within(WAKE, "next waiter", next_task).await.unwrap();
    guard.unlock().await.unwrap();
    let (guard, _) = within(WAKE, "last waiter", last_task).await.unwrap();
    guard.unlock().await.unwrap();
    assert_no_queue(&server, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_lock_future_leaves_the_queue_and_holds_nothing() {
    let name = "dropped";
    let (server, c, lock) = on_a_new_server(name).await;
    let held = held_30_s(&c, &lock).await;

    let dropped = c.new_owner();
    let dropped_task = tokio::spawn(lock.lock(&dropped));
    queue_reaches(&server, name, 1).await;
    let behind = c.new_owner();
    let behind_task = spawn_lock(&lock, &behind);
    queue_reaches(&server, name, 2).await;
    let behind_deadline = deadline_of(&server, name, &behind);

    dropped_task.abort();
    assert!(dropped_task.await.unwrap_err().is_cancelled());
    eventually(5 * SECOND, "the dropped waiter leaving", || {
        queued(&server, name) == [behind.to_string()]
    })
    .await;
    assert_eq!(deadline(&server, name, &dropped.to_string()), None);
    assert_eq!(timeouts_len(&server, name), 1);
    // It left with lock()'s wait, the client's fair_wait_timeout.
    assert_eq!(
        deadline_of(&server, name, &behind),
        behind_deadline - DEFAULT_WAIT_MS
    );

    // Otherwise the one behind would wait up to 5 min for the dropped waiter's deadline.
    subscribed(&server, &waiter_channel(name, &behind.to_string())).await;
    held.unlock().await.unwrap();
    let (guard, _) = within(WAKE, "waiter behind", behind_task).await.unwrap();
    assert_eq!(lock.hold_count(&dropped).await.unwrap(), 0);

    // The same through tokio::time::timeout.
    let timed_out = tokio::time::timeout(Duration::from_millis(300), lock.lock(&dropped)).await;
    assert!(timed_out.is_err());
    eventually(5 * SECOND, "the timed-out waiter leaving", || {
        queued(&server, name).is_empty() && timeouts_len(&server, name) == 0
    })
    .await;
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.hold_count(&dropped).await.unwrap(), 0);
    assert_no_queue(&server, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_head_that_leaves_a_free_lock_wakes_the_next_waiter() {
    let name = "head-leaves";
    let (server, c, lock) = on_a_new_server(name).await;
    let held = held_30_s(&c, &lock).await;
    // A fixed lease: nothing renews, so the server's script count is the waiters' attempts.
    let before = evalsha_calls(&server);
    let head = c.new_owner();
    let head_task = tokio::spawn(lock.lock(&head));
    queue_reaches(&server, name, 1).await;
    let next = c.new_owner();
    let next_task = spawn_lock(&lock, &next);
    queue_reaches(&server, name, 2).await;
    waiting(
        &server,
        &waiter_channel(name, &next.to_string()),
        before + 4,
    )
    .await;

    // The hold vanishes without a message (its lease ran out), then the head gives up
    // before its 30 s timer: leaving must tell the next waiter.
    held.detach();
    server.command(&["DEL", name]);
    head_task.abort();
    let (guard, _) = within(WAKE, "next waiter", next_task).await.unwrap();
    guard.unlock().await.unwrap();
    assert_no_queue(&server, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_waiter_ahead_delays_a_live_one_by_no_more_than_its_wait() {
    let server = RedisServer::start();
    // A long wait: the live waiter's own deadline is 10 s past the dead one's.
    let c = client_with(&server, |b| b.fair_wait_timeout(10 * SECOND)).await;
    let name = "dead-waiter";
    let lock = c.fair_lock(name).unwrap();
    let held = held_30_s(&c, &lock).await;

    // What a Java waiter leaves behind when its process is killed while queued; far enough
    // ahead for the live waiter to queue behind it on a loaded machine.
    let dead = java_owner(13);
    let dead_deadline = now_ms() + 3_000;
    enqueue_java(&server, name, &dead, dead_deadline);
    let live = c.new_owner();
    let live_task = spawn_lock(&lock, &live);
    queue_reaches(&server, name, 2).await;
    assert_eq!(queued(&server, name), [dead.clone(), live.to_string()]);
    // Chained on the dead waiter's deadline, with the builder's wait.
    assert_eq!(deadline_of(&server, name, &live), dead_deadline + 10_000);

    // The unlock tells the dead head, not the live waiter.
    held.unlock().await.unwrap();
    let (guard, acquired_ms) = within(20 * SECOND, "live waiter", live_task).await.unwrap();
    assert!(
        acquired_ms >= dead_deadline,
        "took the lock {} ms before the dead waiter's deadline",
        dead_deadline - acquired_ms
    );
    assert!(
        acquired_ms <= dead_deadline + 3_000,
        "held up {} ms past the dead waiter's deadline",
        acquired_ms - dead_deadline
    );
    assert_no_queue(&server, name);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_behind_a_dead_head_on_a_free_lock_backs_off_instead_of_spinning() {
    let server = RedisServer::start();
    // A long wait: the live waiter's own deadline is 10 s past the dead one's.
    let c = client_with(&server, |b| b.fair_wait_timeout(10 * SECOND)).await;
    let name = "dead-head-free-lock";
    let lock = c.fair_lock(name).unwrap();
    let dead = java_owner(14);
    let dead_deadline = now_ms() + 1_000;
    enqueue_java(&server, name, &dead, dead_deadline);

    let before = evalsha_calls(&server);
    let live = c.new_owner();
    let (guard, acquired_ms) = within(20 * SECOND, "live waiter", spawn_lock(&lock, &live))
        .await
        .unwrap();
    let calls = evalsha_calls(&server) - before;
    assert!(acquired_ms >= dead_deadline);
    assert!(
        acquired_ms <= dead_deadline + 3_000,
        "held up {} ms past the dead waiter's deadline",
        acquired_ms - dead_deadline
    );
    // The free lock answers 0 while the dead waiter is first: Java retries at once; we
    // pause up to 64 ms, so about 1 s of waiting takes a few dozen attempts at most.
    assert!(calls < 40, "{calls} attempts in about a second");
    guard.unlock().await.unwrap();
    assert_no_queue(&server, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_head_is_woken_on_its_own_channel_long_before_the_ttl() {
    let name = "handoff";
    let (server, c, lock) = on_a_new_server(name).await;
    let held = held_30_s(&c, &lock).await;

    // A fixed lease: nothing renews, so the server's script count is the waiter's attempts.
    let before = evalsha_calls(&server);
    let waiter = c.new_owner();
    let pending = spawn_lock(&lock, &waiter);
    queue_reaches(&server, name, 1).await;
    waiting(
        &server,
        &waiter_channel(name, &waiter.to_string()),
        before + 2,
    )
    .await;
    // Only its own channel: the shared one is for plain locks.
    assert_eq!(subscribers(&server, &lock_channel(name)), 0);

    held.unlock().await.unwrap();
    let (guard, _) = within(WAKE, "waiter", pending).await.unwrap();
    assert!(lock.is_held_by(guard.owner()).await.unwrap());
    guard.unlock().await.unwrap();
    assert_no_queue(&server, name);
    // The waiter's subscription is dropped with its wait.
    eventually(5 * SECOND, "unsubscribed", || {
        c.subscribed_channels() == 0 && no_channels(&server)
    })
    .await;
}
