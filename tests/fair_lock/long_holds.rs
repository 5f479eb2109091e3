//! A hold longer than the waiters' wait (`fair_wait_timeout`): live waiters keep their places, gone ones are dropped.

use super::*;

/// The time left until the Unix time `ms` (zero once it has passed).
fn time_until(ms: i64) -> Duration {
    Duration::from_millis((ms - now_ms()).max(0) as u64)
}

/// Clients with a 1 s watchdog and a 2 s fair wait: holds of a few seconds outlast the wait.
async fn short_wait_client(server: &RedisServer) -> LockClient {
    client_with(server, |b| {
        b.watchdog_timeout(SECOND)
            .fair_wait_timeout(Duration::from_secs(2))
    })
    .await
}

/// Waiters that keep asking keep their places however long the hold lasts: with a 2 s wait,
/// waiters that join 1 s apart behind a hold that lasts one wait past the deadline the first
/// of them had when it joined (about 6 s) get the lock in the order they joined (before,
/// each one's deadline passed while it was first in line, it was dropped and joined again at
/// the tail: the queue rotated and the lock went to 3, 1, 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_waiters_keep_their_places_through_a_hold_longer_than_their_wait() {
    let server = RedisServer::start();
    let clients = [
        short_wait_client(&server).await,
        short_wait_client(&server).await,
    ];
    let name = "outlasting-hold";
    let start = Instant::now();
    let held = held_renewed(&clients[0], name).await;

    let mut waiters = InOrder::behind(0);
    let mut first_deadline = None;
    for i in 1..=3 {
        // The scenario's timing: one waiter a second.
        tokio::time::sleep_until((start + i as u32 * SECOND).into()).await;
        let owner = waiters.join(&server, &clients[i % 2], name).await;
        first_deadline.get_or_insert_with(|| deadline_of(&server, name, &owner));
    }

    // The hold itself, whose length is the scenario: one wait (2 s) past the deadline the
    // first waiter had when it joined, about 6 s from the start, three times the wait.
    tokio::time::sleep(time_until(first_deadline.unwrap() + 2_000)).await;
    let lock = clients[0].fair_lock(name).unwrap();
    assert!(lock.is_held_by(held.owner()).await.unwrap());
    assert_eq!(
        queued(&server, name),
        waiters.owners,
        "the queue order changed"
    );
    held.unlock().await.unwrap();
    assert_eq!(waiters.taken().await, [1, 2, 3]);
    assert_no_queue(&server, name);
}

/// The same when the hold that outlasts the wait is a waiter's own: the next waiters become
/// first in line without being woken when the one before them takes the lock, and must look
/// again before their deadlines (which the one before them no longer moves) pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_waiters_keep_their_places_while_the_one_before_them_holds_the_lock_long() {
    let server = RedisServer::start();
    let clients = [
        short_wait_client(&server).await,
        short_wait_client(&server).await,
    ];
    let name = "long-handover";
    let held = held_renewed(&clients[0], name).await;

    let first = clients[1].new_owner();
    let first_task = spawn_lock(&clients[1].fair_lock(name).unwrap(), &first);
    queue_reaches(&server, name, 1).await;
    let mut next = InOrder::behind(1);
    for i in 2..=4 {
        next.join(&server, &clients[i % 2], name).await;
    }

    held.unlock().await.unwrap();
    let (first_hold, _) = within(WAKE, "the first waiter", first_task).await.unwrap();
    // The first waiter's own hold, renewed by its watchdog, the scenario's length: 5 s, two
    // and a half times the wait. Sampled throughout, the others stay in the order they joined
    // (so none of them took the lock before it either).
    let end = Instant::now() + 5 * SECOND;
    while Instant::now() < end {
        assert_eq!(
            queued(&server, name),
            next.owners,
            "the queue order changed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first_hold.unlock().await.unwrap();
    assert_eq!(next.taken().await, [1, 2, 3]);
    assert_no_queue(&server, name);
}

/// A waiter that stops asking (its future is leaked mid-wait, as if its process froze: it
/// never leaves the queue) is still dropped at its deadline while the lock stays held and
/// the live waiters behind it keep asking; they keep their places and get the lock in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_stops_asking_is_dropped_at_its_deadline_during_a_long_hold() {
    let server = RedisServer::start();
    let holder_client = short_wait_client(&server).await;
    let c = short_wait_client(&server).await;
    let name = "stops-asking";
    let lock = c.fair_lock(name).unwrap();
    let held = held_renewed(&holder_client, name).await;

    // Polled until it is queued, then never again, and never dropped.
    let dead = c.new_owner();
    let mut dead_wait = Box::pin(lock.lock(&dead));
    tokio::select! {
        _ = &mut dead_wait => panic!("the lock is held"),
        _ = queue_reaches(&server, name, 1) => {}
    }
    std::mem::forget(dead_wait);
    // Anything the leaked future sent on this client's connection has run after this.
    let _: Value = c.redis().ping(None).await.unwrap();
    let dead_deadline = deadline_of(&server, name, &dead);

    let mut live = InOrder::behind(1);
    let first = live.join(&server, &c, name).await;
    live.join(&server, &c, name).await;
    let first_deadline = deadline_of(&server, name, &first);
    assert_eq!(first_deadline, dead_deadline + 2_000);

    // Dropped by the next look of a live waiter (at least every half wait) past its deadline.
    eventually(
        time_until(dead_deadline) + WAKE,
        "the waiter that stopped asking being dropped",
        || queued(&server, name) == live.owners,
    )
    .await;
    let dropped_at = now_ms();
    assert!(
        dropped_at >= dead_deadline,
        "dropped {} ms before its deadline",
        dead_deadline - dropped_at
    );
    assert_eq!(deadline(&server, name, &dead.to_string()), None);
    assert!(lock.is_held_by(held.owner()).await.unwrap());

    // The hold goes on past the first live waiter's deadline as it was when it joined: the
    // scenario's length.
    tokio::time::sleep(time_until(first_deadline + 1_500)).await;
    assert_eq!(queued(&server, name), live.owners);
    held.unlock().await.unwrap();
    assert_eq!(live.taken().await, [1, 2]);
    assert_no_queue(&server, name);
}
