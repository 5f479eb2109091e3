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
//! gathers them and UNLINKs them together, grouped by cluster slot; a key that is not reused
//! (its release needed a resend) or whose deletion fails expires with its TTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::KeysInterface;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use crate::keys::LockKeys;

/// How long the task waits for more keys before deleting a batch.
const GATHER: Duration = Duration::from_millis(2);
/// At most this many keys per UNLINK.
const BATCH_SIZE: usize = 100;

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

    /// Deletes retired keys until `shutdown` turns true.
    pub(crate) async fn run(self: Arc<Self>, redis: Client, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = shutdown.changed() => return,
            }
            tokio::time::sleep(GATHER).await;
            let retired = std::mem::take(&mut *self.retired.lock());
            let mut by_slot: HashMap<u16, Vec<Value>> = HashMap::new();
            for key in retired {
                let slot = key.as_bytes().map_or(0, fred::util::redis_keyslot);
                by_slot.entry(slot).or_default().push(key);
            }
            for (_, mut keys) in by_slot {
                while !keys.is_empty() {
                    let rest = keys.split_off(keys.len().min(BATCH_SIZE));
                    let names: Vec<String> = keys.iter().filter_map(Value::as_string).collect();
                    if let Err(error) = redis.unlink::<Value, _>(names).await {
                        tracing::debug!(%error, "deleting unlock latches failed; they expire");
                    }
                    keys = rest;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
