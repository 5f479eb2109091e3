//! Finding locks and counters by name: bounded SCANs, each candidate then inspected.

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::base::error::{Error, Result};
use crate::base::keys;
use crate::engine::Engine;

use super::{array, inspect, text, FoundLocks, HoldMode};

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

/// The string keys that the locks' own names make (Redisson's and this crate's): never a
/// semaphore's or a latch's count, though some hold a number.
const DERIVED_STRINGS: [&str; 5] = [
    "redisson_lock_token:",
    "redisson_unlock_latch:",
    "redisson_lock_left:",
    "redisson_lock_took:",
    "redisson_sc_attempt:",
];

/// Whether the string key `key` is one a lock's name makes (see [`DERIVED_STRINGS`]), or a
/// read hold's timeout key (`…:rwlock_timeout:<n>`).
fn derived_string(key: &str) -> bool {
    DERIVED_STRINGS.iter().any(|prefix| key.starts_with(prefix)) || key.contains(":rwlock_timeout:")
}

/// Finds the counters whose name matches the glob `pattern` (see [`HoldMode::Counter`]): a
/// SCAN of strings, each then read, leaving out the strings the locks' own names make and
/// strings that hold no whole number. Stops after looking at about `max_keys` keys (on a
/// cluster, per node).
pub(crate) async fn find_counters(
    engine: &Engine,
    pattern: &str,
    max_keys: u64,
) -> Result<FoundLocks> {
    let prefix = &engine.settings().name_prefix;
    let matching = format!("{}{pattern}", glob_escape(prefix));
    let (keys, complete) = scan(engine.redis(), &matching, "string", max_keys).await?;
    let mut names: Vec<String> = keys
        .iter()
        .filter(|key| !derived_string(key))
        .filter_map(|key| key.strip_prefix(prefix.as_str()).map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    let mut found = FoundLocks {
        locks: Vec::new(),
        incomplete: !complete,
    };
    for name in names {
        let state = inspect(engine, &name).await?;
        if state.mode == HoldMode::Counter {
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

/// SCANs every node for keys of type `kind` matching `pattern`, looking at about `max_keys`
/// keys per node and keeping at most `max_keys` of them; `true` when every node was covered
/// (never with `max_keys` 0, which looks at nothing).
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
    if max_keys == 0 {
        return Ok((found, false));
    }
    for node in nodes {
        let mut cursor = String::from("0");
        let mut looked = 0;
        let mut this_node = 0;
        loop {
            // No page looks at more than what is left of `max_keys`.
            let page = PAGE.min(max_keys - looked);
            let args: Vec<Value> = vec![
                cursor.as_str().into(),
                "MATCH".into(),
                pattern.into(),
                "COUNT".into(),
                (page as i64).into(),
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
            let keys = array(keys);
            // A page may bring more keys than its COUNT (a bucket's whole chain): never more
            // than `max_keys` a node are kept.
            let room = (max_keys - this_node) as usize;
            if keys.len() > room {
                complete = false;
            }
            this_node += keys.len().min(room) as u64;
            found.extend(keys.iter().take(room).map(text));
            cursor = text(&next);
            looked += page;
            if cursor == "0" {
                break;
            }
            if looked >= max_keys || this_node >= max_keys {
                complete = false;
                break;
            }
        }
    }
    Ok((found, complete))
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
    fn tells_the_strings_a_lock_s_name_makes() {
        for key in [
            "redisson_lock_token:{orders}",
            "redisson_sc_attempt:{jobs}:U:3",
            "{orders}:U:57:rwlock_timeout:1",
        ] {
            assert!(derived_string(key), "{key}");
        }
        for key in ["jobs", "app1:latch", "{user:7}:latch"] {
            assert!(!derived_string(key), "{key}");
        }
    }

    #[test]
    fn escapes_glob_characters() {
        assert_eq!(glob_escape(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
        assert_eq!(glob_escape("app1:"), "app1:");
    }
}
