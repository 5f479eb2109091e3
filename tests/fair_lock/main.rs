//! The fair lock (Redisson's `RFairLock`, protocol §4): FIFO order across clients, the
//! per-waiter timeout, leaving the queue on time-out and on drop, per-waiter wake-ups, and
//! states written exactly as Java writes them. Ports of `RedissonFairLockTest` (§11.4)
//! that apply are in `redisson_ports`.

#[path = "../support/mod.rs"]
mod support;

mod java_wire;
mod leaving;
mod long_holds;
mod queue;
mod redisson_ports;

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

/// A new server, a client of it, and the fair lock `name` there.
async fn on_a_new_server(name: &str) -> (RedisServer, LockClient, FairLock) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fair_lock(name).unwrap();
    (server, c, lock)
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
