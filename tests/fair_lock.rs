//! The fair lock (Redisson's `RFairLock`, protocol §4): FIFO order across clients, the
//! per-waiter timeout, leaving the queue on time-out and on drop, per-waiter wake-ups, and
//! states written exactly as Java writes them. Ports of `RedissonFairLockTest` (§11.4)
//! that apply are at the end.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::Value;
use redisson_lock::{Error, FairLock, LockClient, LockGuard, LockOwner};
use support::*;
use tokio::task::JoinHandle;

/// The default `fair_wait_timeout` (Redisson's `fairLockWaitTimeout`), in ms.
const DEFAULT_WAIT_MS: i64 = 300_000;

fn timeouts_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

fn waiter_channel(name: &str, field: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}:{field}")
}

/// A waiter's deadline in the timeout set.
fn deadline(server: &RedisServer, name: &str, member: &str) -> Option<i64> {
    let reply = server.command(&["ZSCORE", &timeouts_key(name), member]);
    (reply != "(nil)").then(|| reply.parse::<f64>().expect("a score").round() as i64)
}

fn deadline_of(server: &RedisServer, name: &str, owner: &LockOwner) -> i64 {
    deadline(server, name, &owner.to_string()).unwrap_or_else(|| panic!("{owner} has no deadline"))
}

fn timeouts_len(server: &RedisServer, name: &str) -> usize {
    server
        .command(&["ZCARD", &timeouts_key(name)])
        .parse()
        .unwrap()
}

/// Neither the queue nor the timeout set exists (Redis deletes them once empty).
fn assert_no_queue(server: &RedisServer, name: &str) {
    assert_eq!(
        server.command(&["EXISTS", &queue_key(name), &timeouts_key(name)]),
        "0",
        "queue {:?}, {} deadlines left",
        queued(server, name),
        timeouts_len(server, name)
    );
}

/// Java's enqueue of a waiter that will never ask again (its process died).
fn enqueue_java(server: &RedisServer, name: &str, field: &str, deadline: i64) {
    server.command(&["RPUSH", &queue_key(name), field]);
    server.command(&["ZADD", &timeouts_key(name), &deadline.to_string(), field]);
}

/// Takes `lock` for a new owner of `c` with a fixed 30 s lease, which nothing renews.
async fn held_30_s(c: &LockClient, lock: &FairLock) -> LockGuard {
    lock.clone()
        .with_lease(fixed(30_000))
        .lock(&c.new_owner())
        .await
        .unwrap()
}

async fn queue_reaches(server: &RedisServer, name: &str, len: usize) {
    eventually(Duration::from_secs(10), &format!("queue of {len}"), || {
        queued(server, name).len() == len
    })
    .await;
}

/// Takes `name` for a new owner of `c`, renewed by `c`'s watchdog: waiters see its short lease.
async fn held_renewed(c: &LockClient, name: &str) -> LockGuard {
    c.fair_lock(name)
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap()
}

/// The time left until the Unix time `ms` (zero once it has passed).
fn time_until(ms: i64) -> Duration {
    Duration::from_millis((ms - now_ms()).max(0) as u64)
}

/// Spawns `owner`'s `lock()`; the task returns the guard and when it was obtained (Unix ms).
fn spawn_lock(lock: &FairLock, owner: &LockOwner) -> JoinHandle<(LockGuard, i64)> {
    let acquire = lock.lock(owner);
    tokio::spawn(async move {
        let guard = acquire.await.expect("lock()");
        (guard, now_ms())
    })
}

/// Waiters numbered 1, 2, … in the order they join; each notes its number when it gets the
/// lock, then releases it.
struct InOrder {
    /// How many waiters were queued ahead of the first.
    ahead: usize,
    /// The waiters' owners, in the order they joined.
    owners: Vec<String>,
    tasks: Vec<JoinHandle<()>>,
    taken: Arc<Mutex<Vec<usize>>>,
}

impl InOrder {
    /// Waiters to queue behind `ahead` others.
    fn behind(ahead: usize) -> Self {
        InOrder {
            ahead,
            owners: Vec::new(),
            tasks: Vec::new(),
            taken: Arc::default(),
        }
    }

    /// Starts the next waiter, a new owner of `c`, and returns it once the server has it queued.
    async fn join(&mut self, server: &RedisServer, c: &LockClient, name: &str) -> LockOwner {
        let owner = c.new_owner();
        let acquire = c.fair_lock(name).unwrap().lock(&owner);
        let (number, taken) = (self.tasks.len() + 1, self.taken.clone());
        self.tasks.push(tokio::spawn(async move {
            let guard = acquire.await.expect("lock()");
            taken.lock().unwrap().push(number);
            guard.unlock().await.expect("unlock()");
        }));
        self.owners.push(owner.to_string());
        queue_reaches(server, name, self.ahead + self.owners.len()).await;
        owner
    }

    /// Awaits the waiters, each woken in turn, and returns their numbers in the order they
    /// got the lock.
    async fn taken(self) -> Vec<usize> {
        for (i, task) in self.tasks.into_iter().enumerate() {
            within(WAKE, &format!("waiter {}", i + 1), task)
                .await
                .unwrap();
        }
        let taken = self.taken.lock().unwrap();
        taken.clone()
    }
}

/// Awaits the waiters of a client that was shut down: each ends at once with `Closed`.
async fn all_closed(waiters: Vec<JoinHandle<redisson_lock::Result<LockGuard>>>) {
    for outcome in all_finish(WAKE, "the waiters", waiters).await {
        assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");
    }
}

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
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "gives-up";
    let lock = c.fair_lock(name).unwrap();
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
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "dropped";
    let lock = c.fair_lock(name).unwrap();
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
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "head-leaves";
    let lock = c.fair_lock(name).unwrap();
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
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "handoff";
    let lock = c.fair_lock(name).unwrap();
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

#[tokio::test]
async fn a_hold_written_by_java_excludes_us() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "java-held";
    let lock = c.fair_lock(name).unwrap();
    let java = java_owner(7);
    server.command(&["HSET", name, &java, "1"]);
    server.command(&["PEXPIRE", name, "30000"]);

    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());
    assert!(lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    assert_eq!(lock.hold_count(&me).await.unwrap(), 0);
    assert!(lock
        .try_lock_for(&me, Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert_no_queue(&server, name);
    assert!(matches!(lock.unlock(&me).await, Err(Error::NotHeld { .. })));
    assert_eq!(server.command(&["HGET", name, &java]), "1");
    let ttl = pttl(&server, name);
    assert!(ttl > 20_000, "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_java_waiter_ahead_is_honoured_and_a_java_unlock_message_wakes_us() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "java-queued";
    let lock = c.fair_lock(name).unwrap();
    let java = java_owner(8);
    let java_deadline = now_ms() + 10_000;
    enqueue_java(&server, name, &java, java_deadline);

    // The lock is free, but the Java waiter is next in line.
    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());
    assert_eq!(queued(&server, name), std::slice::from_ref(&java));
    assert!(lock
        .try_lock_for(&me, Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    assert_eq!(queued(&server, name), std::slice::from_ref(&java));
    assert_eq!(deadline(&server, name, &java), Some(java_deadline));
    assert_eq!(timeouts_len(&server, name), 1);

    // The Java waiter takes the lock as Redisson's acquire does.
    server.command(&["LPOP", &queue_key(name)]);
    server.command(&["ZREM", &timeouts_key(name), &java]);
    server.command(&["HSET", name, &java, "1"]);
    server.command(&["PEXPIRE", name, "30000"]);

    // Nothing renews: the server's script count is the waiter's attempts.
    let before = evalsha_calls(&server);
    let pending = spawn_lock(&lock, &me);
    queue_reaches(&server, name, 1).await;
    let my_channel = waiter_channel(name, &me.to_string());
    // At least its first attempt (one only while its channel lingers from its last wait).
    waiting(&server, &my_channel, before + 1).await;
    // Redisson's release: the hash goes, "0" goes to the head's own channel.
    server.command(&["DEL", name]);
    assert_eq!(server.command(&["PUBLISH", &my_channel, "0"]), "1");
    // Woken by the message, not the 30 s TTL.
    let (guard, _) = within(WAKE, "waiter", pending).await.unwrap();
    guard.unlock().await.unwrap();
    assert_no_queue(&server, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unlocks_tell_the_head_on_its_exact_channel_and_nobody_else() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "tells-head";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(30_000));
    let mut messages = Listener::pattern(&server, "redisson_lock__channel*").await;
    let me = c.new_owner();

    // A full release tells the head, a Java waiter, on its own channel.
    let guard = lock.try_lock(&me).await.unwrap().unwrap();
    let partial = lock.try_lock(&me).await.unwrap().unwrap();
    let first = java_owner(9);
    let second = java_owner(10);
    enqueue_java(&server, name, &first, now_ms() + 60_000);
    enqueue_java(&server, name, &second, now_ms() + 120_000);
    partial.unlock().await.unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 1);
    guard.unlock().await.unwrap();
    assert_eq!(
        messages.next().await,
        (waiter_channel(name, &first), "0".to_owned())
    );
    // Nothing for the partial release, nothing for the second waiter, nothing on the
    // shared channel.
    messages.no_more().await;

    // The first Java waiter takes the lock; force_unlock tells the next head.
    server.command(&["LPOP", &queue_key(name)]);
    server.command(&["ZREM", &timeouts_key(name), &first]);
    server.command(&["HSET", name, &first, "1"]);
    server.command(&["PEXPIRE", name, "30000"]);
    assert!(lock.force_unlock().await.unwrap());
    assert_eq!(
        messages.next().await,
        (waiter_channel(name, &second), "0".to_owned())
    );
    assert!(!lock.force_unlock().await.unwrap());
    messages.no_more().await;

    // Our deliberate difference from Java: unlocking a hold that is gone is an error, but
    // the head is told all the same (and the queue is untouched).
    server.command(&["DEL", &queue_key(name), &timeouts_key(name)]);
    let guard = lock.try_lock(&me).await.unwrap().unwrap();
    enqueue_java(&server, name, &first, now_ms() + 60_000);
    server.command(&["DEL", name]);
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        messages.next().await,
        (waiter_channel(name, &first), "0".to_owned())
    );
    assert_eq!(queued(&server, name), std::slice::from_ref(&first));
    messages.no_more().await;
}

// Ports of RedissonFairLockTest (protocol §11.4).

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
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "non-delayed";
    let lock = c.fair_lock(name).unwrap();
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

// A hold longer than the waiters' wait (fair_wait_timeout), and shutdown.

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

/// `shutdown()` takes the client's waiters out of every queue before it returns, so the
/// lock is not blocked for their deadlines (3 × 5 min by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_takes_its_waiters_out_of_the_queue() {
    let server = RedisServer::start();
    let holder_client = client(&server).await;
    let waiters_client = client(&server).await;
    let name = "shutdown-queue";
    let held = held_30_s(&holder_client, &holder_client.fair_lock(name).unwrap()).await;

    // A fixed lease: nothing renews, so the server's script count is the waiters' attempts.
    let before = evalsha_calls(&server);
    let lock = waiters_client.fair_lock(name).unwrap();
    let owners: Vec<_> = (0..3).map(|_| waiters_client.new_owner()).collect();
    let mut waiters = Vec::new();
    for (i, owner) in owners.iter().enumerate() {
        waiters.push(tokio::spawn(lock.lock(owner)));
        queue_reaches(&server, name, i + 1).await;
    }
    // All three wait for a wake-up.
    let last_channel = waiter_channel(name, &owners[2].to_string());
    waiting(&server, &last_channel, before + 6).await;

    waiters_client.shutdown().await;
    // Gone when shutdown returns, not at their deadlines.
    assert_no_queue(&server, name);
    all_closed(waiters).await;

    held.unlock().await.unwrap();
    let fresh = holder_client.new_owner();
    let guard = holder_client
        .fair_lock(name)
        .unwrap()
        .try_lock(&fresh)
        .await
        .unwrap()
        .expect("nobody is queued any more");
    guard.unlock().await.unwrap();
}

/// Shutdown while waiters are still joining (some attempts on the wire, some about to be
/// sent): no queue entry is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_while_waiters_join_leaves_no_queue_entry() {
    let server = RedisServer::start();
    let holder_client = client(&server).await;
    let name = "shutdown-joining";
    let held = held_30_s(&holder_client, &holder_client.fair_lock(name).unwrap()).await;
    for _round in 0..5 {
        let waiters_client = client(&server).await;
        let lock = waiters_client.fair_lock(name).unwrap();
        // A fixed lease: nothing renews, so the server's script count is the waiters' attempts.
        let before = evalsha_calls(&server);
        let waiters: Vec<_> = (0..20)
            .map(|_| tokio::spawn(lock.lock(&waiters_client.new_owner())))
            .collect();
        // One waiter has joined; the others are on the wire or about to be sent.
        scripts_reach(&server, before + 1).await;
        waiters_client.shutdown().await;
        assert_no_queue(&server, name);
        all_closed(waiters).await;
    }
    held.unlock().await.unwrap();
}

/// A waiter whose future is dropped while its acquire script still has to be sent: the
/// attempt goes on in the background, and the exit waits for it. Otherwise the exit would
/// run first, and the late acquire would queue the waiter again for good, holding up every
/// waiter behind it until its deadline.
async fn a_dropped_waiter_leaves_after_its_late_attempt(
    name: &str,
    make_it_late: impl FnOnce(&RedisServer),
) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fair_lock(name).unwrap();
    let held = (lock.clone().with_lease(fixed(30_000)))
        .lock(&c.new_owner())
        .await
        .unwrap();
    make_it_late(&server);
    let scripts = evalsha_calls(&server);
    server.command(&["CLIENT", "PAUSE", "1000", "ALL"]);
    let waiter = c.new_owner();
    let dropped = tokio::time::timeout(Duration::from_millis(300), lock.lock(&waiter)).await;
    assert!(dropped.is_err(), "the lock is held");
    // The acquire, then the exit.
    scripts_reach(&server, scripts + 2).await;
    assert!(
        !queued(&server, name).contains(&waiter.to_string()),
        "the dropped waiter is still queued"
    );
    held.unlock().await.unwrap();
}

/// The acquire script is not cached (a restart, a failover): it is answered NOSCRIPT,
/// loaded and sent again, after the caller gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_before_its_acquire_is_sent_again_leaves_the_queue() {
    a_dropped_waiter_leaves_after_its_late_attempt("resent-acquire", |server| {
        server.command(&["SCRIPT", "FLUSH"]);
        server.command(&["SCRIPT", "LOAD", &lua("fair_acquire_failed")]);
    })
    .await;
}

/// With the replica check on (the default), an attempt reads the replica count first when
/// the count it read last is over a second old, and sends its script after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_while_its_replica_count_is_read_leaves_the_queue() {
    a_dropped_waiter_leaves_after_its_late_attempt("count-read-first", |server| {
        // The exit's script is cached, as in a process where a waiter left a queue before.
        server.command(&["SCRIPT", "LOAD", &lua("fair_acquire_failed")]);
        // The count read while taking the hold goes stale.
        std::thread::sleep(Duration::from_millis(1_200));
    })
    .await;
}

/// Tasks sharing an owner share its place in the queue: one that gives up leaves the place
/// to the other, which keeps its turn ahead of a waiter that came later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_giving_up_leaves_its_owners_place_to_the_others() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "shared-place";
    let lock = c.fair_lock(name).unwrap();
    let held = (lock.clone().with_lease(fixed(30_000)))
        .lock(&c.new_owner())
        .await
        .unwrap();
    let (owner, later) = (c.new_owner(), c.new_owner());
    let giving_up = tokio::spawn(lock.try_lock_for(&owner, Duration::from_millis(800)));
    eventually(5 * SECOND, "the owner queued", || {
        queued(&server, name).len() == 1
    })
    .await;
    let scripts = evalsha_calls(&server);
    let staying = tokio::spawn(lock.lock(&owner));
    scripts_reach(&server, scripts + 1).await;
    let last = tokio::spawn(lock.lock(&later));
    eventually(5 * SECOND, "the later waiter queued", || {
        queued(&server, name).len() == 2
    })
    .await;
    assert!(giving_up.await.unwrap().unwrap().is_none());
    // Its exit has run: the place stays, first.
    assert_eq!(
        queued(&server, name),
        [owner.to_string(), later.to_string()],
        "the owner lost its place"
    );
    held.unlock().await.unwrap();
    woken_and_released("the owner's staying task", staying).await;
    woken_and_released("the later waiter", last).await;
}
