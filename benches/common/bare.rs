//! The baseline: the Redisson hash protocol as two bare EVALSHA scripts on a fred client.

use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::config::Config;
use fred::types::{Builder, ClusterHash, CustomCommand, Key, Value};

use super::*;

/// Redisson's acquire, bare: HINCRBY + PEXPIRE and nil when taken or re-entered, the
/// holder's PTTL when busy.
pub const ACQUIRE: &str = r#"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;
/// Redisson's classic release, without this crate's unlock latch:
/// HINCRBY -1, then PEXPIRE (still held) or DEL + PUBLISH (freed).
pub const RELEASE: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
"#;

/// The baseline: a fred client running the two scripts by EVALSHA, no waiting logic.
#[derive(Clone)]
pub struct Bare {
    pub redis: Client,
    acquire: String,
    release: String,
}

/// One lock as the bare baseline sees it: key, unlock channel, owner field.
#[derive(Clone)]
pub struct BareLock {
    pub key: Key,
    pub channel: Key,
    pub owner: Value,
}

impl Bare {
    pub async fn connect(url: &str) -> Bare {
        let redis = Builder::from_config(Config::from_url(url).unwrap())
            .build()
            .unwrap();
        redis.init().await.unwrap();
        let acquire = redis.script_load(ACQUIRE).await.unwrap();
        let release = redis.script_load(RELEASE).await.unwrap();
        Bare {
            redis,
            acquire,
            release,
        }
    }

    pub fn lock(&self, name: &str, owner: &str) -> BareLock {
        BareLock {
            key: name.into(),
            channel: format!("redisson_lock__channel:{{{name}}}").into(),
            owner: format!("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:{owner}").into(),
        }
    }

    /// One EVALSHA of the acquire script: `None` when taken, the holder's PTTL when busy.
    pub async fn acquire_for(&self, lock: &BareLock, lease_ms: i64) -> Option<i64> {
        let args = vec![Value::from(lease_ms), lock.owner.clone()];
        let sha = self.acquire.as_str();
        self.redis
            .evalsha(sha, lock.key.clone(), args)
            .await
            .unwrap()
    }

    pub async fn acquire(&self, lock: &BareLock) -> Option<i64> {
        self.acquire_for(lock, LEASE_MS).await
    }

    /// One EVALSHA of the release script; asserts that it freed the lock.
    pub async fn unlock(&self, lock: &BareLock) {
        let keys = vec![lock.key.clone(), lock.channel.clone()];
        let args = vec![Value::from(LEASE_MS), lock.owner.clone()];
        let sha = self.release.as_str();
        let freed: Option<i64> = self.redis.evalsha(sha, keys, args).await.unwrap();
        assert_eq!(freed, Some(1));
    }

    /// Acquire then release: two round trips, the same Redis work as a lock + unlock.
    pub async fn lock_unlock(&self, lock: &BareLock) {
        assert_eq!(self.acquire(lock).await, None, "the bare lock was busy");
        self.unlock(lock).await;
    }

    /// [`lock_unlock`](Self::lock_unlock) as Redisson does it on a master with replicas:
    /// each script pipelined with a `WAIT` for one replica.
    pub async fn lock_unlock_replicated(&self, lock: &BareLock) {
        let wait = || {
            let command = CustomCommand::new_static("WAIT", ClusterHash::FirstKey, false);
            let args: Vec<Value> = vec![1.into(), 1_000.into()];
            self.redis.custom::<i64, _>(command, args)
        };
        let (acquired, acked) = tokio::join!(self.acquire(lock), wait());
        assert_eq!(acquired, None, "the bare lock was busy");
        assert_eq!(acked.unwrap(), 1);
        let (_, acked) = tokio::join!(self.unlock(lock), wait());
        assert_eq!(acked.unwrap(), 1);
    }

    /// A lock held by someone else for the rest of the run, for [`round_trip`](Self::round_trip).
    pub async fn busy_lock(&self) -> BareLock {
        let holder = self.lock("bench:bare:busy", "1");
        let _ = self.acquire_for(&holder, 3_600_000).await; // None, or already ours
        self.lock("bench:bare:busy", "2")
    }

    /// One round trip, timed: the acquire script on a lock someone else holds (reads only,
    /// what a waiter's retry costs).
    pub async fn round_trip(&self, busy: &BareLock) -> Duration {
        let start = Instant::now();
        assert!(self.acquire(busy).await.is_some(), "the busy lock was free");
        start.elapsed()
    }

    /// `n` timed round trips, one after the other.
    pub async fn round_trips(&self, busy: &BareLock, n: usize) -> Vec<Duration> {
        let mut trips = Vec::with_capacity(n);
        for _ in 0..n {
            trips.push(self.round_trip(busy).await);
        }
        trips
    }
}
