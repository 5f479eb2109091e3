//! The synchronizers' baseline: Redisson's own semaphore and permit-expirable semaphore
//! scripts (4.x), sent by EVALSHA on one fred client, with no waiting logic and no
//! undo records.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::clients::Client;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::config::Config;
use fred::types::{Builder, Key, Value};

/// Redisson's `RSemaphore.tryAcquire(n)`: DECRBY when enough are free.
pub const SEMAPHORE_ACQUIRE: &str = r#"
local value = redis.call('get', KEYS[1]);
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then
    redis.call('decrby', KEYS[1], ARGV[1]);
    return 1;
end;
return 0;
"#;
/// Redisson's `RSemaphore.release(n)`: INCRBY, then publish the new count.
pub const SEMAPHORE_RELEASE: &str = r#"
local value = redis.call('incrby', KEYS[1], ARGV[1]);
redis.call(ARGV[2], KEYS[2], value);
"#;
/// Redisson's permit-expirable `tryAcquire(n, lease)`: reap up to n expired leases, then
/// take n permits under the ids given.
pub const EXPIRABLE_ACQUIRE: &str = r#"
local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]);
if #expiredIds > 0 then
    redis.call('zrem', KEYS[2], unpack(expiredIds));
    local value = redis.call('incrby', KEYS[1], #expiredIds);
    if tonumber(value) > 0 then
        redis.call(ARGV[5], KEYS[3], value);
    end;
end;
local value = redis.call('get', KEYS[1]);
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then
    redis.call('decrby', KEYS[1], ARGV[1]);
    for i = 6, #ARGV, 1 do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]);
    end;
    local ttl = redis.call('pttl', KEYS[1]);
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl);
    end;
    return 'OK';
end;
local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES');
if v[1] ~= nil and v[2] ~= ARGV[4] then
    return ':' .. tostring(v[2]);
end;
return nil;
"#;
/// Redisson's permit-expirable `release(id)`: ZREM the id, INCRBY, publish the new count;
/// 1 when its lease was still running.
pub const EXPIRABLE_RELEASE: &str = r#"
local expire = redis.call('zscore', KEYS[3], ARGV[1]);
local removed = redis.call('zrem', KEYS[3], ARGV[1]);
if tonumber(removed) ~= 1 then
    return 0;
end;
local value = redis.call('incrby', KEYS[1], ARGV[2]);
redis.call(ARGV[4], KEYS[2], value);
if tonumber(expire) <= tonumber(ARGV[3]) then
    return 0;
end;
return 1;
"#;
/// Redisson's "never" lease score.
const NEVER: i64 = 922_337_203_685_477;

/// Fresh 16-byte permit ids: a counter after a per-process prefix (Java's are random).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A fred client running Redisson's synchronizer scripts by EVALSHA.
#[derive(Clone)]
pub struct BareSync {
    pub redis: Client,
    acquire: String,
    release: String,
    expirable_acquire: String,
    expirable_release: String,
}

/// A semaphore's keys as the bare client sends them.
#[derive(Clone)]
pub struct BareSemaphore {
    pub key: Key,
    pub channel: Key,
    pub timeout: Key,
}

impl BareSemaphore {
    pub fn new(name: &str) -> BareSemaphore {
        BareSemaphore {
            key: name.into(),
            channel: format!("redisson_sc:{{{name}}}").into(),
            timeout: format!("{{{name}}}:timeout").into(),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

impl BareSync {
    pub async fn connect(url: &str) -> BareSync {
        let redis = Builder::from_config(Config::from_url(url).unwrap())
            .build()
            .unwrap();
        redis.init().await.unwrap();
        let load = |script| redis.script_load::<String, _>(script);
        BareSync {
            acquire: load(SEMAPHORE_ACQUIRE).await.unwrap(),
            release: load(SEMAPHORE_RELEASE).await.unwrap(),
            expirable_acquire: load(EXPIRABLE_ACQUIRE).await.unwrap(),
            expirable_release: load(EXPIRABLE_RELEASE).await.unwrap(),
            redis,
        }
    }

    /// One attempt to take a permit; asserts that it did.
    pub async fn acquire(&self, sem: &BareSemaphore) {
        let taken: i64 = (self.redis)
            .evalsha(&self.acquire, sem.key.clone(), vec![Value::from(1)])
            .await
            .unwrap();
        assert_eq!(taken, 1, "the bare semaphore had no permit");
    }

    pub async fn release(&self, sem: &BareSemaphore) {
        let keys = vec![sem.key.clone(), sem.channel.clone()];
        let args = vec![Value::from(1), Value::from_static_str("publish")];
        let _: Value = self.redis.evalsha(&self.release, keys, args).await.unwrap();
    }

    /// `n` acquire + release, one after the other.
    pub async fn semaphore_loop(self, sem: BareSemaphore, n: u64) {
        for _ in 0..n {
            self.acquire(&sem).await;
            self.release(&sem).await;
        }
    }

    /// Takes one permit with a lease of `lease`; its id.
    pub async fn expirable_acquire(&self, sem: &BareSemaphore, lease: Duration) -> Value {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut id = [0x5au8; 16];
        id[8..].copy_from_slice(&n.to_be_bytes());
        let id = Value::Bytes(id.to_vec().into());
        let now = now_ms();
        let keys = vec![sem.key.clone(), sem.timeout.clone(), sem.channel.clone()];
        let args = vec![
            Value::from(1),
            Value::from(now + lease.as_millis() as i64),
            Value::from(now),
            Value::from(NEVER),
            Value::from_static_str("publish"),
            id.clone(),
        ];
        let reply: Value = (self.redis)
            .evalsha(&self.expirable_acquire, keys, args)
            .await
            .unwrap();
        assert_eq!(
            reply.as_str().as_deref(),
            Some("OK"),
            "no permit: {reply:?}"
        );
        id
    }

    pub async fn expirable_release(&self, sem: &BareSemaphore, id: Value) {
        let keys = vec![sem.key.clone(), sem.channel.clone(), sem.timeout.clone()];
        let args = vec![
            id,
            Value::from(1),
            Value::from(now_ms()),
            Value::from_static_str("publish"),
        ];
        let released: i64 = (self.redis)
            .evalsha(&self.expirable_release, keys, args)
            .await
            .unwrap();
        assert_eq!(released, 1);
    }

    /// `n` acquire (with `lease`) + release by id, one after the other.
    pub async fn expirable_loop(self, sem: BareSemaphore, lease: Duration, n: u64) {
        for _ in 0..n {
            let id = self.expirable_acquire(&sem, lease).await;
            self.expirable_release(&sem, id).await;
        }
    }
}
