//! Looking at locks from outside, as an operator does: what Redis holds for one name (read
//! in one script, `lua/inspect.lua`), which names hold locks or counters (SCAN, bounded), who
//! listens on the lock's channels, and which clients of this crate are connected. Nothing
//! here writes.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use uuid::Uuid;

use crate::base::error::{Error, Result};
use crate::base::keys::{self, LockKeys, MODE_FIELD, WRITE_MODE};
use crate::base::owner::LockOwner;
use crate::engine::Engine;
use crate::topology::connection_name::{masters, CONNECTION_NAME_PREFIX};
use crate::topology::script::{Call, INSPECT};

mod find;

pub(crate) use find::{find_counters, find_locks};

/// The most hash fields, queue entries and reader timeout keys one inspection reads.
const READ_LIMIT: i64 = 1000;

/// What Redis holds for one lock name, read at one instant.
///
/// Made by [`LockClient::inspect`](crate::LockClient::inspect). The kind of lock is told
/// only as far as the data shows it: a plain, fenced, spin or non-reentrant hold look alike
/// (one hash field per owner); a read-write lock has its `mode` field; a fair lock shows
/// only while someone queues; a fencing token stays after every fenced acquisition. A
/// semaphore and a count-down latch look alike too: a string holding a whole number
/// ([`HoldMode::Counter`]); only the listeners on each kind's channel tell whose waiters wait.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LockState {
    /// The lock's name, as given.
    pub name: String,
    /// The lock's Redis key (the name after the client's name prefix).
    pub key: String,
    /// How the lock is held.
    pub mode: HoldMode,
    /// The key's remaining time to live; `None` when the key is gone, `Duration::MAX`
    /// when it never expires.
    pub ttl: Option<Duration>,
    /// Every holder: one for an exclusive hold, the writer and the readers of a read-write
    /// lock.
    pub holders: Vec<Holder>,
    /// The fair queue, head first, with each waiter's deadline.
    pub queue: Vec<QueuedWaiter>,
    /// The queue's length (it may be longer than `queue`, which stops at 1000 entries).
    pub queue_len: u64,
    /// The fencing token counter, when a fenced lock was ever taken under this name.
    pub fence_token: Option<u64>,
    /// The lock's pub/sub channels and how many connections listen on each: the unlock
    /// channel, the read-write channel, and every queued waiter's own channel; for a
    /// [`HoldMode::Counter`] or a name that holds nothing and has no queue, the semaphore's
    /// channel (`redisson_sc:{name}`) and the count-down latch's
    /// (`redisson_countdownlatch__channel__{name}`) too.
    pub channels: Vec<ChannelListeners>,
    /// The count of a [`HoldMode::Counter`]: a semaphore's free permits or a count-down
    /// latch's count.
    pub counter: Option<i64>,
    /// The permits taken from a permit-expirable semaphore of this name, as its leases
    /// (`{name}:timeout`) list them, earliest expiry first (at most 1000).
    pub leased_permits: Vec<LeasedPermit>,
    /// How many permits the leases list (it may be longer than `leased_permits`).
    pub leased_permits_len: u64,
}

/// One permit taken from a permit-expirable semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeasedPermit {
    /// The permit's id in hex, as [`PermitId`](crate::PermitId) shows it (any member of the
    /// leases is shown so, 16 bytes or not).
    pub id: String,
    /// When its lease ends, by the clock of the client that took it; `None` for a permit
    /// without a lease. A time in the past means expired but not yet given back: the next
    /// script of the semaphore that reaps (an acquire, a count) returns it to the pool.
    pub expires: Option<SystemTime>,
}

/// How a lock is held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldMode {
    /// Nobody holds it (waiters may still queue).
    Free,
    /// One owner holds it: a plain, fair, fenced, spin or non-reentrant lock.
    Exclusive,
    /// A read-write lock in read mode.
    Read,
    /// A read-write lock in write mode (the writer may also hold read holds).
    Write,
    /// The key exists but is not a lock: the reason says what it is.
    NotALock(String),
    /// The key is a string holding a whole number ([`LockState::counter`]), as a semaphore
    /// (its free permits) and a count-down latch (its count) store it. Which of the two, or
    /// some other counter, the data does not tell.
    Counter,
}

/// The side of a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Side {
    /// A hold of an exclusive lock.
    Exclusive,
    /// A read-write lock's read hold.
    Read,
    /// A read-write lock's write hold.
    Write,
}

/// One holder of a lock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Holder {
    /// The hash field as stored: `<client uuid>:<owner id>`, plus `:write` for a writer.
    pub field: String,
    /// The owner, when the field has Redisson's form (a Java thread id and an owner of this
    /// crate look the same: tell them apart with
    /// [`LockClient::connected_lock_clients`](crate::LockClient::connected_lock_clients)).
    pub owner: Option<LockOwner>,
    /// The side of the hold.
    pub side: Side,
    /// The re-entry count.
    pub count: i64,
    /// For a reader: the remaining lease of each of its holds' timeout keys (hold 1 first);
    /// `None` for a key that is gone (a reader whose every key is gone is dead, and the
    /// next read unlock purges it).
    pub read_leases: Vec<Option<Duration>>,
}

/// One waiter in a fair lock's queue.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The queue entry as stored: `<client uuid>:<owner id>`.
    pub field: String,
    /// The owner, when the entry has Redisson's form.
    pub owner: Option<LockOwner>,
    /// When the waiter counts as gone unless it asks again (its deadline, by the wall
    /// clock of the client that wrote it); `None` when it has none.
    pub deadline: Option<SystemTime>,
}

/// A pub/sub channel and its listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelListeners {
    /// The channel's name.
    pub channel: String,
    /// How many connections are subscribed to it (`PUBSUB NUMSUB`, or `SHARDNUMSUB` on a
    /// cluster), as the server the query reached counts them.
    pub listeners: u64,
}

/// The locks found by [`LockClient::find_locks`](crate::LockClient::find_locks).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct FoundLocks {
    /// Each lock found, sorted by name (names without the client's name prefix).
    pub locks: Vec<LockState>,
    /// Whether the scan stopped at its limit before it covered every key.
    pub incomplete: bool,
}

/// Reads everything about the lock `name`.
pub(crate) async fn inspect(engine: &Engine, name: &str) -> Result<LockState> {
    let keys = engine.lock_keys(name)?;
    let call = Call::new(
        &INSPECT,
        &[
            &keys.raw,
            &keys.fair_queue(),
            &keys.fair_timeouts(),
            &keys.fence_token(),
            &keys::expirable_leases(&keys.raw),
        ],
        vec![Value::from(keys.read_key_prefix()), Value::from(READ_LIMIT)],
    );
    let reply = engine.run(call, name).await?;
    let mut state = read(name, &keys, reply)?;
    let mut channels = vec![keys.channel.to_string(), keys.rw_channel()];
    channels.extend(
        state
            .queue
            .iter()
            .map(|w| keys.fair_waiter_channel(&w.field)),
    );
    // A counter, or no key at all: a semaphore without permits or an open latch may be
    // waited for all the same.
    let bare = state.mode == HoldMode::Free && state.queue_len == 0;
    if state.mode == HoldMode::Counter || bare {
        channels.push(keys::semaphore_channel(&keys.raw));
        channels.push(keys::latch_channel(&keys.raw));
    }
    state.channels = listeners(engine, channels).await?;
    Ok(state)
}

fn unexpected(detail: impl Into<String>) -> Error {
    Error::UnexpectedReply {
        script: INSPECT.name,
        detail: detail.into(),
    }
}

fn text(value: &Value) -> String {
    value.as_string().unwrap_or_default()
}

fn array(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

/// `<client uuid>:<owner id>` as an owner, when it has that form.
fn owner_of(field: &str) -> Option<LockOwner> {
    let (client, id) = field.rsplit_once(':')?;
    Some(LockOwner::from_parts(
        Uuid::parse_str(client).ok()?,
        id.parse().ok()?,
    ))
}

/// A PTTL as a remaining time: `None` when the key is gone, `Duration::MAX` without expiry.
fn ttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => None,
        ms if ms < 0 => Some(Duration::MAX),
        ms => Some(Duration::from_millis(ms as u64)),
    }
}

/// Turns the script's reply into a state (without the channels).
fn read(name: &str, keys: &LockKeys, reply: Value) -> Result<LockState> {
    let items = array(reply);
    let [key_type, pttl, count, fields, queue_type, queue_len, queue, deadlines_type, deadlines, token_type, token, readers, value, leases_type, leases_len, leases] =
        <[Value; 16]>::try_from(items).map_err(|items| unexpected(format!("{items:?}")))?;
    // A decimal integer, as Java's semaphores and latches write their counts.
    let counter = value
        .as_string()
        .filter(|v| {
            v.strip_prefix('-')
                .unwrap_or(v)
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .and_then(|v| v.parse::<i64>().ok());
    let key_type = text(&key_type);
    let count = count.as_i64().unwrap_or(0);
    let fields: Vec<(String, String)> = array(fields)
        .chunks(2)
        .map(|pair| (text(&pair[0]), pair.get(1).map(text).unwrap_or_default()))
        .collect();

    let mut holders = Vec::new();
    let mode = match key_type.as_str() {
        "none" => HoldMode::Free,
        "hash" if fields.is_empty() => {
            HoldMode::NotALock(format!("a hash of {count} fields, too many for a lock"))
        }
        "hash" => {
            let mode = fields.iter().find(|(f, _)| f == MODE_FIELD).map(|(_, v)| v);
            let mut foreign = None;
            for (field, value) in fields.iter().filter(|(f, _)| f != MODE_FIELD) {
                let Ok(count) = value.parse::<i64>() else {
                    foreign = Some(format!("field {field:?} holds {value:?}, not a count"));
                    break;
                };
                let (side, owner_field) = match (mode, field.strip_suffix(":write")) {
                    (Some(_), Some(owner)) => (Side::Write, owner),
                    (Some(_), None) => (Side::Read, field.as_str()),
                    (None, _) => (Side::Exclusive, field.as_str()),
                };
                holders.push(Holder {
                    field: field.clone(),
                    owner: owner_of(owner_field),
                    side,
                    count,
                    read_leases: Vec::new(),
                });
            }
            match (foreign, mode.map(String::as_str)) {
                (Some(reason), _) => HoldMode::NotALock(reason),
                (None, Some(WRITE_MODE)) => HoldMode::Write,
                (None, Some("read")) => HoldMode::Read,
                (None, Some(other)) => HoldMode::NotALock(format!("mode {other:?}")),
                (None, None) if holders.iter().all(|h| h.owner.is_some()) => HoldMode::Exclusive,
                (None, None) => HoldMode::NotALock("fields that are not lock owners".into()),
            }
        }
        "string" if counter.is_some() => HoldMode::Counter,
        other => HoldMode::NotALock(format!("a {other}")),
    };
    if matches!(mode, HoldMode::NotALock(_)) {
        holders.clear();
    }
    // Writers first, then readers; each reader with its timeout keys in hold order.
    holders.sort_by_key(|h| h.side != Side::Write);
    for triple in array(readers).chunks(3) {
        let [field, _, pttl] = triple else { continue };
        let field = text(field);
        if let Some(reader) = holders
            .iter_mut()
            .find(|h| h.side == Side::Read && h.field == field)
        {
            reader.read_leases.push(ttl(pttl.as_i64().unwrap_or(-2)));
        }
    }

    let deadlines: HashMap<String, SystemTime> = if text(&deadlines_type) == "zset" {
        array(deadlines)
            .chunks(2)
            .filter_map(|pair| {
                let ms = pair.get(1)?.as_f64()?;
                Some((
                    text(&pair[0]),
                    UNIX_EPOCH + Duration::from_millis(ms.max(0.0) as u64),
                ))
            })
            .collect()
    } else {
        HashMap::new()
    };
    let queue = if text(&queue_type) == "list" {
        array(queue)
            .iter()
            .map(|entry| {
                let field = text(entry);
                QueuedWaiter {
                    owner: owner_of(&field),
                    deadline: deadlines.get(&field).copied(),
                    field,
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let fence_token = match text(&token_type).as_str() {
        "string" => token.as_string().and_then(|t| t.parse().ok()),
        _ => None,
    };
    Ok(LockState {
        name: name.to_owned(),
        key: keys.raw.to_string(),
        mode,
        ttl: ttl(pttl.as_i64().unwrap_or(-2)),
        holders,
        queue,
        queue_len: queue_len.as_u64().unwrap_or(0),
        fence_token,
        channels: Vec::new(),
        counter: counter.filter(|_| key_type == "string"),
        leased_permits: if text(&leases_type) == "zset" {
            array(leases).chunks(2).filter_map(leased_permit).collect()
        } else {
            Vec::new()
        },
        leased_permits_len: leases_len.as_u64().unwrap_or(0),
    })
}

/// A member of a permit-expirable semaphore's leases and its score.
fn leased_permit(pair: &[Value]) -> Option<LeasedPermit> {
    let [member, score] = pair else { return None };
    let id = member
        .as_bytes()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let ms = score.as_f64()?;
    let expires = (ms < crate::synchronizers::expirable_semaphore::NEVER as f64)
        .then(|| UNIX_EPOCH + Duration::from_millis(ms.max(0.0) as u64));
    Some(LeasedPermit { id, expires })
}

/// How many connections listen on each channel, by classic and, where this client uses it,
/// sharded pub/sub (asked of the master of each channel's slot: a latch's channel may be in
/// another slot than the lock's).
async fn listeners(engine: &Engine, channels: Vec<String>) -> Result<Vec<ChannelListeners>> {
    let mut counts: Vec<ChannelListeners> = channels
        .iter()
        .map(|channel| ChannelListeners {
            channel: channel.clone(),
            listeners: 0,
        })
        .collect();
    let all: Vec<usize> = (0..channels.len()).collect();
    let mut asks = vec![("NUMSUB", ClusterHash::Random, all)];
    if engine.pubsub().flavour().sharded {
        let mut slots: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, channel) in channels.iter().enumerate() {
            let slot = fred::util::redis_keyslot(channel.as_bytes());
            match slots.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, these)) => these.push(i),
                None => slots.push((slot, vec![i])),
            }
        }
        for (slot, these) in slots {
            asks.push(("SHARDNUMSUB", ClusterHash::Custom(slot), these));
        }
    }
    for (command, route, these) in asks {
        let mut args = vec![Value::from(command)];
        args.extend(these.iter().map(|&i| Value::from(channels[i].as_str())));
        let pubsub = CustomCommand::new_static("PUBSUB", route, false);
        let reply: Value = engine.redis().custom(pubsub, args).await?;
        for (&i, pair) in these.iter().zip(array(reply).chunks(2)) {
            counts[i].listeners += pair.get(1).and_then(Value::as_u64).unwrap_or(0);
        }
    }
    Ok(counts)
}

/// The clients of this crate connected now, by client id, with their address: every
/// connection named `redisson-lock:<uuid>` in `CLIENT LIST`, of every master on a cluster
/// (a client names its connection to each).
pub(crate) async fn connected_lock_clients(engine: &Engine) -> Result<HashMap<Uuid, String>> {
    let redis = engine.redis();
    let lists = match masters(redis) {
        Some(masters) => {
            let mut lists = Vec::with_capacity(masters.len());
            for master in masters {
                lists.push(client_list(&redis.with_cluster_node(master)).await?);
            }
            lists
        }
        None => vec![client_list(redis).await?],
    };
    let mut clients = HashMap::new();
    for line in lists.iter().flat_map(|list| list.lines()) {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        };
        let id = field("name")
            .and_then(|name| name.strip_prefix(CONNECTION_NAME_PREFIX))
            .and_then(|id| Uuid::parse_str(id).ok());
        if let Some(id) = id {
            clients.insert(id, field("addr").unwrap_or_default().to_owned());
        }
    }
    Ok(clients)
}

/// `CLIENT LIST` of the server `redis` sends to.
async fn client_list(redis: &impl ClientLike) -> Result<String> {
    let command = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
    let list: Value = redis.custom(command, vec![Value::from("LIST")]).await?;
    Ok(list.as_string().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_owner_fields() {
        let owner = owner_of("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:57").unwrap();
        assert_eq!(owner.id(), 57);
        assert!(owner_of("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:-1").is_none());
        assert!(owner_of("nobody").is_none());
    }
}
