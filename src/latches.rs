//! Unlock latches (protocol §3.4): unique request ids, and deleting each latch once its
//! release has been answered.
//!
//! A latch only serves resends of its own release, so it is useless once a reply arrived.
//! Redisson deletes it right away with one DEL per release; here one task per client gathers
//! the latches of releases that answered within a few milliseconds and UNLINKs them together,
//! grouped by cluster slot, so a busy client sends far fewer commands. A latch whose deletion
//! fails still expires with its TTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::KeysInterface;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

/// How long the task waits for more latches before deleting a batch.
const GATHER: Duration = Duration::from_millis(2);
/// At most this many keys per UNLINK.
const BATCH_SIZE: usize = 100;

pub(crate) struct Latches {
    /// Random per client, so request ids of different clients never meet.
    base: u128,
    next: AtomicU64,
    done: Mutex<Vec<String>>,
    wake: Notify,
}

impl Latches {
    pub(crate) fn new() -> Arc<Latches> {
        Arc::new(Latches {
            base: uuid::Uuid::new_v4().as_u128(),
            next: AtomicU64::new(0),
            done: Mutex::new(Vec::new()),
            wake: Notify::new(),
        })
    }

    /// A fresh request id: 32 lowercase hex digits, as Redisson's.
    pub(crate) fn request_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:032x}", self.base.wrapping_add(u128::from(n)))
    }

    /// The release that wrote `latch` has answered: the latch can go.
    pub(crate) fn answered(&self, latch: String) {
        let first = {
            let mut done = self.done.lock();
            done.push(latch);
            done.len() == 1
        };
        if first {
            self.wake.notify_one();
        }
    }

    /// Deletes answered latches until `shutdown` turns true.
    pub(crate) async fn run(self: Arc<Self>, redis: Client, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = shutdown.changed() => return,
            }
            tokio::time::sleep(GATHER).await;
            let done = std::mem::take(&mut *self.done.lock());
            let mut by_slot: HashMap<u16, Vec<String>> = HashMap::new();
            for latch in done {
                by_slot
                    .entry(fred::util::redis_keyslot(latch.as_bytes()))
                    .or_default()
                    .push(latch);
            }
            for (_, mut keys) in by_slot {
                while !keys.is_empty() {
                    let rest = keys.split_off(keys.len().min(BATCH_SIZE));
                    if let Err(error) = redis.unlink::<Value, _>(keys).await {
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
    fn request_ids_are_distinct_32_digit_hex() {
        let latches = Latches::new();
        let (a, b) = (latches.request_id(), latches.request_id());
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.len(), 32);
            assert!(id
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        }
        assert_ne!(Latches::new().request_id(), Latches::new().request_id());
    }
}
