//! Looking at locks from outside, as an operator does: what Redis holds for one name (read
//! in one script, `lua/inspect.lua`), which names hold locks (SCAN, bounded), who listens on
//! the lock's channels, and which clients of this crate are connected. Nothing here writes.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};
use uuid::Uuid;

use crate::connection_name::{masters, CONNECTION_NAME_PREFIX};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::keys::{self, LockKeys, MODE_FIELD, WRITE_MODE};
use crate::owner::LockOwner;
use crate::script::{Call, INSPECT};

/// The most hash fields, queue entries and reader timeout keys one inspection reads.
const READ_LIMIT: i64 = 1000;

/// What Redis holds for one lock name, read at one instant.
///
/// Made by [`LockClient::inspect`](crate::LockClient::inspect). The kind of lock is told
/// only as far as the data shows it: a plain, fenced, spin or non-reentrant hold look alike
/// (one hash field per owner); a read-write lock has its `mode` field; a fair lock shows
/// only while someone queues; a fencing token stays after every fenced acquisition.
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
    /// channel, the read-write channel, and every queued waiter's own channel.
    pub channels: Vec<ChannelListeners>,
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
    let [key_type, pttl, count, fields, queue_type, queue_len, queue, deadlines_type, deadlines, token_type, token, readers] =
        <[Value; 12]>::try_from(items).map_err(|items| unexpected(format!("{items:?}")))?;
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
    })
}

/// How many connections listen on each channel (they all share the lock's slot), by classic
/// and, where this client uses it, sharded pub/sub.
async fn listeners(engine: &Engine, channels: Vec<String>) -> Result<Vec<ChannelListeners>> {
    let slot = ClusterHash::Custom(fred::util::redis_keyslot(channels[0].as_bytes()));
    let mut kinds = vec![("NUMSUB", ClusterHash::Random)];
    if engine.pubsub().flavour().sharded {
        kinds.push(("SHARDNUMSUB", slot));
    }
    let mut counts: Vec<ChannelListeners> = channels
        .iter()
        .map(|channel| ChannelListeners {
            channel: channel.clone(),
            listeners: 0,
        })
        .collect();
    for (command, route) in kinds {
        let mut args = vec![Value::from(command)];
        args.extend(channels.iter().map(|c| Value::from(c.as_str())));
        let pubsub = CustomCommand::new_static("PUBSUB", route, false);
        let reply: Value = engine.redis().custom(pubsub, args).await?;
        for (count, pair) in counts.iter_mut().zip(array(reply).chunks(2)) {
            count.listeners += pair.get(1).and_then(Value::as_u64).unwrap_or(0);
        }
    }
    Ok(counts)
}

/// Escapes the glob characters of SCAN's MATCH in `text`.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Finds the names of locks held or queued for, whose name matches the glob `pattern`: a
/// SCAN of hashes for the held ones (each then checked to have a lock's fields), and of
/// fair queues (`redisson_lock_queue:{<name>}`) for names that only have waiters. Stops
/// after looking at about `max_keys` keys per scan (on a cluster, per node).
pub(crate) async fn find_locks(
    engine: &Engine,
    pattern: &str,
    max_keys: u64,
) -> Result<FoundLocks> {
    let prefix = &engine.settings().name_prefix;
    let held = format!("{}{pattern}", glob_escape(prefix));
    let queued = keys::prefix_name("redisson_lock_queue", &held);
    let mut found = FoundLocks::default();
    let mut names = Vec::new();
    for (matching, kind) in [(held.as_str(), "hash"), (queued.as_str(), "list")] {
        let (keys, complete) = scan(engine.redis(), matching, kind, max_keys).await?;
        found.incomplete |= !complete;
        for key in keys {
            let raw = if kind == "list" {
                let Some(raw) = queue_lock_name(&key) else {
                    continue;
                };
                raw
            } else {
                key
            };
            if let Some(name) = raw.strip_prefix(prefix.as_str()) {
                names.push(name.to_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    // A hash is listed only when its fields are a lock's.
    for name in names {
        let state = inspect(engine, &name).await?;
        let held = !matches!(state.mode, HoldMode::Free | HoldMode::NotALock(_));
        if held || (state.mode == HoldMode::Free && state.queue_len > 0) {
            found.locks.push(state);
        }
    }
    Ok(found)
}

/// The raw lock name of a fair queue key `redisson_lock_queue:{<raw>}` (a raw name without
/// a `{`; one with a `{` has the queue key `redisson_lock_queue:<raw>`).
fn queue_lock_name(key: &str) -> Option<String> {
    let rest = key.strip_prefix("redisson_lock_queue:")?;
    match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        Some(inner) if !inner.contains('{') => Some(inner.to_owned()),
        _ => Some(rest.to_owned()),
    }
}

/// SCANs every node for keys of type `kind` matching `pattern`, about `max_keys` keys per
/// node at most; `true` when every node was covered.
async fn scan(
    redis: &Client,
    pattern: &str,
    kind: &str,
    max_keys: u64,
) -> Result<(Vec<String>, bool)> {
    const PAGE: u64 = 1000;
    // One pass per cluster primary, or one on the server.
    let nodes: Vec<Option<Server>> = if redis.is_clustered() {
        redis.active_connections().into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let mut found = Vec::new();
    let mut complete = true;
    for node in nodes {
        let mut cursor = String::from("0");
        let mut looked = 0;
        loop {
            let args: Vec<Value> = vec![
                cursor.as_str().into(),
                "MATCH".into(),
                pattern.into(),
                "COUNT".into(),
                (PAGE as i64).into(),
                "TYPE".into(),
                kind.into(),
            ];
            let command = CustomCommand::new_static("SCAN", ClusterHash::Random, false);
            let reply: Value = match &node {
                Some(node) => {
                    redis
                        .with_cluster_node(node.clone())
                        .custom(command, args)
                        .await?
                }
                None => redis.custom(command, args).await?,
            };
            let [next, keys] = <[Value; 2]>::try_from(array(reply)).map_err(|reply| {
                Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!("unexpected SCAN reply {reply:?}"),
                ))
            })?;
            found.extend(array(keys).iter().map(text));
            cursor = text(&next);
            looked += PAGE;
            if cursor == "0" {
                break;
            }
            if looked >= max_keys {
                complete = false;
                break;
            }
        }
    }
    Ok((found, complete))
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
    fn reads_queue_keys_back_into_names() {
        assert_eq!(
            queue_lock_name("redisson_lock_queue:{orders}").as_deref(),
            Some("orders")
        );
        assert_eq!(
            queue_lock_name("redisson_lock_queue:{user:7}:cart").as_deref(),
            Some("{user:7}:cart")
        );
        assert_eq!(queue_lock_name("other:{x}"), None);
    }

    #[test]
    fn escapes_glob_characters() {
        assert_eq!(glob_escape(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
        assert_eq!(glob_escape("app1:"), "app1:");
    }

    #[test]
    fn parses_owner_fields() {
        let owner = owner_of("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:57").unwrap();
        assert_eq!(owner.id(), 57);
        assert!(owner_of("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:-1").is_none());
        assert!(owner_of("nobody").is_none());
    }
}
