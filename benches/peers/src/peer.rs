//! The contenders, each driven through its own public API with its own defaults: how it
//! takes a lock (waiting as it waits), and how it releases one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use redisson_lock::{Lock, LockClient, LockGuard, LockOwner};

use crate::common::{Bare, BareLock};

/// Who competes. `Raw` is Redisson's hash protocol as two bare EVALSHA scripts on one fred
/// client, waiting by polling every millisecond; `Scripts` is raw with Redisson 4.7's own
/// unlock (its request's latch, the latch's `DEL` not waited for), what Java sends; the
/// others are the crates a user would pick.
#[derive(Clone)]
pub enum Peer {
    Ours(LockClient),
    Raw(Bare),
    Scripts(Bare),
    Rslock(Arc<rslock::LockManager>),
    Rlock(Arc<rlock::async_lock::RLock>),
    Naive(ConnectionManager),
}

/// How often `Raw` polls a busy lock.
const RAW_POLL: Duration = Duration::from_millis(1);
/// How often the naive loop polls a busy lock, and its lease.
const NAIVE_POLL: Duration = Duration::from_millis(100);
const NAIVE_LEASE_MS: u64 = 30_000;
/// rslock has no watchdog: its lease, as long as ours.
const RSLOCK_LEASE: Duration = Duration::from_secs(30);

/// The compare-and-delete of the naive loop.
const NAIVE_RELEASE: &str = r#"
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"#;

/// What a held lock is, per contender (`Raw` for raw's and Scripts' alike).
pub enum Held {
    Ours(LockGuard),
    Raw(BareLock),
    Rslock(rslock::LockGuard),
    Rlock(rlock::async_lock::RLockGuard),
    Naive(String, String),
}

/// One task's view of a contender: its identity and its lock handles, made once per name
/// as a user of each API would keep them.
pub struct Worker {
    peer: Peer,
    id: usize,
    owner: Option<LockOwner>,
    ours: HashMap<String, Lock>,
    /// Raw's locks, or redisson-scripts' (the same hash protocol).
    raw: HashMap<String, BareLock>,
}

impl Peer {
    pub const NAMES: [&'static str; 5] = ["redisson-lock", "raw", "rslock", "rlock", "naive"];
    /// [`NAMES`](Self::NAMES) and, beside raw, redisson-scripts. It waits by raw's 1 ms
    /// poll, which handoff and contention would only measure again: throughput alone runs it.
    pub const THROUGHPUT_NAMES: [&'static str; 6] = [
        "redisson-lock",
        "raw",
        "redisson-scripts",
        "rslock",
        "rlock",
        "naive",
    ];

    /// Connects contender `name` to `url`.
    pub async fn connect(name: &str, url: &str) -> Peer {
        match name {
            "redisson-lock" => Peer::Ours(LockClient::connect(url).await.unwrap()),
            "raw" => Peer::Raw(Bare::connect(url).await),
            "redisson-scripts" => Peer::Scripts(Bare::connect(url).await),
            "rslock" => Peer::Rslock(Arc::new(rslock::LockManager::new(vec![url.to_owned()]))),
            "rlock" => Peer::Rlock(Arc::new(rlock::async_lock::RLock::new(url).await.unwrap())),
            "naive" => {
                let client = redis::Client::open(url).unwrap();
                Peer::Naive(client.get_connection_manager().await.unwrap())
            }
            other => panic!("unknown contender {other}"),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Peer::Ours(_) => "redisson-lock",
            Peer::Raw(_) => "raw",
            Peer::Scripts(_) => "redisson-scripts",
            Peer::Rslock(_) => "rslock",
            Peer::Rlock(_) => "rlock",
            Peer::Naive(_) => "naive",
        }
    }

    /// A task's worker; `id` tells tasks apart (the owner of raw's hash field).
    pub fn worker(&self, id: usize) -> Worker {
        let owner = match self {
            Peer::Ours(client) => Some(client.new_owner()),
            _ => None,
        };
        Worker {
            peer: self.clone(),
            id,
            owner,
            ours: HashMap::new(),
            raw: HashMap::new(),
        }
    }

    pub async fn close(self) {
        match self {
            Peer::Ours(client) => {
                client.shutdown().await;
            }
            Peer::Rlock(rlock) => rlock.shutdown().await,
            _ => {}
        }
    }
}

impl Worker {
    /// Takes `name`, waiting as the contender waits.
    pub async fn acquire(&mut self, name: &str) -> Held {
        match &self.peer {
            Peer::Ours(client) => {
                if !self.ours.contains_key(name) {
                    self.ours
                        .insert(name.to_owned(), client.lock(name).unwrap());
                }
                let owner = self.owner.as_ref().unwrap();
                Held::Ours(self.ours[name].lock(owner).await.unwrap())
            }
            Peer::Raw(bare) | Peer::Scripts(bare) => {
                if !self.raw.contains_key(name) {
                    let lock = bare.lock(name, &self.id.to_string());
                    self.raw.insert(name.to_owned(), lock);
                }
                let lock = self.raw[name].clone();
                while bare.acquire(&lock).await.is_some() {
                    tokio::time::sleep(RAW_POLL).await;
                }
                Held::Raw(lock)
            }
            Peer::Rslock(manager) => {
                let guard = manager.acquire(name.as_bytes(), RSLOCK_LEASE).await;
                Held::Rslock(guard.unwrap())
            }
            Peer::Rlock(rlock) => Held::Rlock(rlock.acquire_mutex(name).await.unwrap()),
            Peer::Naive(redis) => {
                let mut redis = redis.clone();
                let token = format!("{}:{}", std::process::id(), self.id);
                loop {
                    let options = redis::SetOptions::default()
                        .conditional_set(redis::ExistenceCheck::NX)
                        .with_expiration(redis::SetExpiry::PX(NAIVE_LEASE_MS));
                    let set: Option<String> =
                        redis.set_options(name, &token, options).await.unwrap();
                    if set.is_some() {
                        return Held::Naive(name.to_owned(), token);
                    }
                    tokio::time::sleep(NAIVE_POLL).await;
                }
            }
        }
    }

    pub async fn release(&mut self, held: Held) {
        match (held, &self.peer) {
            (Held::Ours(guard), _) => guard.unlock().await.unwrap(),
            (Held::Raw(lock), Peer::Raw(bare)) => bare.unlock(&lock).await,
            (Held::Raw(lock), Peer::Scripts(bare)) => bare.unlock_redisson(&lock).await,
            (Held::Rslock(guard), _) => guard.release().await,
            (Held::Rlock(mut guard), _) => guard.release().await.unwrap(),
            (Held::Naive(name, token), Peer::Naive(redis)) => {
                let script = redis::Script::new(NAIVE_RELEASE);
                let deleted: i64 = (script.key(name).arg(token))
                    .invoke_async(&mut redis.clone())
                    .await
                    .unwrap();
                assert_eq!(deleted, 1, "the naive lock was lost");
            }
            _ => unreachable!("a hold is released by its own contender"),
        }
    }

    /// Lock + unlock of `name`.
    pub async fn cycle(&mut self, name: &str) {
        let held = self.acquire(name).await;
        self.release(held).await;
    }
}
