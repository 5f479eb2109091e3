//! Unlock latches (protocol §3.4): the keys a release records its outcome in, so that a
//! resend of the same request replays that outcome instead of releasing a second time; and
//! their deletion once no release will use them.
//!
//! Redisson writes a new latch key for every release and deletes it with one DEL after the
//! reply. Here every lock handle keeps the latch keys of its earlier releases and reuses
//! them: a release overwrites the record of an earlier one that was answered, so a lock +
//! unlock costs its two scripts and nothing else. A record names its request, so a resend
//! (or a first send that arrives after its resend) only ever replays its own outcome. A key is reused only when its release was answered at
//! its first send: then no other send of that request exists that could still run later.
//! The keys of a handle are deleted when the handle is dropped, by one task per client that
//! gathers them and UNLINKs them together: up to [`BATCH_SIZE`] keys per command on one
//! server, one command per cluster slot on a cluster, the commands sent together. A key that
//! is not reused (its release needed a resend) or whose deletion fails expires with its TTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::KeysInterface;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use crate::base::keys::LockKeys;

/// How long the task waits for more keys before deleting a batch.
const GATHER: Duration = Duration::from_millis(2);
/// At most this many keys per UNLINK (Redis runs nothing else meanwhile: about 0.1 ms).
const BATCH_SIZE: usize = 500;
/// At most this many UNLINKs on the wire at once.
const IN_FLIGHT: usize = 16;

/// One release's latch: the key it records its outcome in, and its request id.
pub(crate) struct Latch {
    pub(crate) key: Value,
    pub(crate) request: Value,
}

pub(crate) struct Latches {
    /// Random per client, so latch keys of different clients never meet.
    base: u128,
    next_key: AtomicU64,
    next_request: AtomicU64,
    /// Keys of dropped handles, waiting to be deleted.
    retired: Mutex<Vec<Value>>,
    wake: Notify,
}

impl Latches {
    pub(crate) fn new() -> Arc<Latches> {
        Arc::new(Latches {
            base: uuid::Uuid::new_v4().as_u128(),
            next_key: AtomicU64::new(0),
            next_request: AtomicU64::new(1),
            retired: Mutex::new(Vec::new()),
            wake: Notify::new(),
        })
    }

    /// A latch key of `keys`' lock that no other release uses, ending in 32 lowercase hex
    /// digits, as Redisson's request ids.
    pub(crate) fn new_key(&self, keys: &LockKeys) -> Value {
        let n = self.next_key.fetch_add(1, Ordering::Relaxed);
        let id = format!("{:032x}", self.base.wrapping_add(u128::from(n)));
        Value::from(keys.unlock_latch(&id))
    }

    /// A request id, distinct from every other of this client: the latch key tells clients
    /// apart, this tells the releases that use one key apart.
    pub(crate) fn request_id(&self) -> Value {
        Value::from(self.next_request.fetch_add(1, Ordering::Relaxed) as i64)
    }

    /// The keys of a dropped handle: no release will use them again.
    pub(crate) fn retire(&self, keys: Vec<Value>) {
        let first = {
            let mut retired = self.retired.lock();
            let first = retired.is_empty();
            retired.extend(keys);
            first
        };
        if first {
            self.wake.notify_one();
        }
    }

    /// Deletes retired keys until `shutdown` turns true. `by_slot`: each command's keys must
    /// share a cluster slot (a cluster, or a proxy in front of one).
    pub(crate) async fn run(
        self: Arc<Self>,
        redis: Client,
        by_slot: bool,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = shutdown.changed() => return,
            }
            tokio::time::sleep(GATHER).await;
            // Keys retired while a round was deleting are deleted in the next one at once.
            loop {
                let retired = std::mem::take(&mut *self.retired.lock());
                if retired.is_empty() {
                    break;
                }
                delete(&redis, batches(retired, by_slot)).await;
            }
        }
    }
}

/// `keys` in batches for UNLINK: at most [`BATCH_SIZE`] each, and of one slot each when
/// `by_slot`.
fn batches(keys: Vec<Value>, by_slot: bool) -> Vec<Vec<Value>> {
    let groups = if by_slot {
        let mut groups: HashMap<u16, Vec<Value>> = HashMap::new();
        for key in keys {
            let slot = key.as_bytes().map_or(0, fred::util::redis_keyslot);
            groups.entry(slot).or_default().push(key);
        }
        groups.into_values().collect()
    } else {
        vec![keys]
    };
    let mut batches = Vec::new();
    for mut keys in groups {
        while keys.len() > BATCH_SIZE {
            let rest = keys.split_off(BATCH_SIZE);
            batches.push(std::mem::replace(&mut keys, rest));
        }
        batches.push(keys);
    }
    batches
}

/// UNLINKs each batch, up to [`IN_FLIGHT`] at once: one after another, a round trip each, the
/// deletes fall behind the drops of a busy client.
async fn delete(redis: &Client, batches: Vec<Vec<Value>>) {
    let mut sending = JoinSet::new();
    for batch in batches {
        if sending.len() >= IN_FLIGHT {
            sending.join_next().await;
        }
        let redis = redis.clone();
        sending.spawn(async move {
            let names: Vec<String> = batch.iter().filter_map(Value::as_string).collect();
            if let Err(error) = redis.unlink::<Value, _>(names).await {
                tracing::debug!(%error, "deleting unlock latches failed; they expire");
            }
        });
    }
    while sending.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latches_are_deleted_in_batches_of_one_slot_only_where_they_must() {
        let keys = |names: &[String]| names.iter().map(|n| Value::from(n.as_str())).collect();
        let names: Vec<String> = (0..1200).map(|i| format!("latch:{{n{i}}}:x")).collect();
        let batches = batches(keys(&names), false);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [BATCH_SIZE, BATCH_SIZE, 1200 - 2 * BATCH_SIZE]);
        for batch in super::batches(keys(&names), true) {
            let slot = |key: &Value| fred::util::redis_keyslot(key.as_bytes().unwrap());
            assert!(batch.iter().all(|key| slot(key) == slot(&batch[0])));
        }
        let one_slot: Vec<String> = (0..1200).map(|i| format!("latch:{{n}}:{i}")).collect();
        assert_eq!(super::batches(keys(&one_slot), true).len(), 3);
    }

    #[test]
    fn latch_keys_and_request_ids_are_distinct() {
        let latches = Latches::new();
        let keys = LockKeys::new("orders");
        let (a, b) = (latches.new_key(&keys), latches.new_key(&keys));
        assert_ne!(a, b);
        for key in [a, b] {
            let key = key.as_string().unwrap();
            let id = key.strip_prefix("redisson_unlock_latch:{orders}:").unwrap();
            assert_eq!(id.len(), 32);
            assert!(id
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        }
        assert_ne!(Latches::new().new_key(&keys), Latches::new().new_key(&keys));
        assert_ne!(latches.request_id(), latches.request_id());
    }
}
