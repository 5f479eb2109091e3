//! The baseline: the Redisson hash protocol as two bare EVALSHA scripts on a fred client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, KeysInterface, LuaInterface};
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

/// Redisson's own unlock as 4.7 sends it (protocol §3.4): the request's latch answers a
/// resend; otherwise HINCRBY -1, then PEXPIRE (still held) or DEL + publish (freed), and the
/// outcome kept in the latch for `latchTtl` ms.
pub const RELEASE_LATCHED: &str = r#"
local latched = redis.call('get', KEYS[3])
if latched ~= false then return tonumber(latched) end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
"#;

/// The latch TTL Java 4.7 sends with its defaults: (3000 + 1000) × 4 ms.
const LATCH_TTL_MS: i64 = 16_000;

/// The baseline: a fred client running the two scripts by EVALSHA, no waiting logic.
#[derive(Clone)]
pub struct Bare {
    pub redis: Client,
    acquire: String,
    release: String,
    release_latched: String,
}

/// One lock as the bare baseline sees it: key, unlock channel, owner field, and the start
/// of its unlock latches' keys.
#[derive(Clone)]
pub struct BareLock {
    pub key: Key,
    pub channel: Key,
    pub owner: Value,
    latches: String,
}

impl Bare {
    pub async fn connect(url: &str) -> Bare {
        let redis = Builder::from_config(Config::from_url(url).unwrap())
            .build()
            .unwrap();
        redis.init().await.unwrap();
        let acquire = redis.script_load(ACQUIRE).await.unwrap();
        let release = redis.script_load(RELEASE).await.unwrap();
        let release_latched = redis.script_load(RELEASE_LATCHED).await.unwrap();
        Bare {
            redis,
            acquire,
            release,
            release_latched,
        }
    }

    pub fn lock(&self, name: &str, owner: &str) -> BareLock {
        BareLock {
            key: name.into(),
            channel: format!("redisson_lock__channel:{{{name}}}").into(),
            owner: format!("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:{owner}").into(),
            latches: format!("redisson_unlock_latch:{{{name}}}:"),
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

    /// Redisson 4.7's lock + unlock as Java sends them: the acquire script, then
    /// [`unlock_redisson`](Self::unlock_redisson).
    pub async fn lock_unlock_redisson(&self, lock: &BareLock) {
        assert_eq!(self.acquire(lock).await, None, "the bare lock was busy");
        self.unlock_redisson(lock).await;
    }

    /// Redisson 4.7's unlock as Java sends it: the unlock script with a latch key of its own
    /// request (a new id each time, 36 characters as Java's UUIDs); then a `DEL` of that
    /// latch, sent and not waited for. Asserts that it freed the lock.
    pub async fn unlock_redisson(&self, lock: &BareLock) {
        static REQUESTS: AtomicU64 = AtomicU64::new(0);
        let request = REQUESTS.fetch_add(1, Ordering::Relaxed);
        let latch: Key = format!("{}5b7d0000-4e2a-4f61-8d4c-{request:012x}", lock.latches).into();
        let keys = vec![lock.key.clone(), lock.channel.clone(), latch.clone()];
        let args: Vec<Value> = vec![
            "0".into(),
            LEASE_MS.into(),
            lock.owner.clone(),
            "PUBLISH".into(),
            LATCH_TTL_MS.into(),
        ];
        let sha = self.release_latched.as_str();
        let freed: Option<i64> = self.redis.evalsha(sha, keys, args).await.unwrap();
        assert_eq!(freed, Some(1));
        let redis = self.redis.clone();
        tokio::spawn(async move {
            let _: Result<i64, _> = redis.del(latch).await;
        });
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
