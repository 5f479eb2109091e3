//! The watchdog: one task per client that keeps every hold taken without a fixed lease
//! alive (protocol §3.7), and tells the holders when a hold is lost.
//!
//! Every `watchdog_timeout / 3` the task renews all registered holds with one script per
//! batch of at most 100 holds of the same [`Renew`] kind (and, on clusters, of the same
//! cluster slot): plain
//! holds by their field, read-write readers also by their timeout keys (protocol §5.6). A
//! hold whose field is gone (expired, force-unlocked, or the data was lost) is dropped from
//! the registry and its guards' `lease_lost()` fires; so does a hold that could not be
//! renewed before its lease ran out. Transient errors are retried on the next tick, sooner
//! when a lease is close to its end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::keys::Str;
use crate::script::{Script, ScriptRunner, READ_RENEW_BATCH, RENEW_BATCH};
use crate::time::millis;
use crate::wait::backoff::renewal_retry;

/// At most this many holds are renewed by one script call (Redisson's default batch size).
const BATCH_SIZE: usize = 100;

/// Identifies one hold: a lock key and the field that holds it, and how it is renewed.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct HoldKey {
    pub(crate) key: Str,
    pub(crate) field: Str,
    pub(crate) renew: Renew,
}

/// How the watchdog renews a hold.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Renew {
    /// The key's TTL, while the hash has the hold's field (`renew_batch.lua`, protocol
    /// §3.7): reentrant, fair and write holds.
    Field,
    /// A read-write lock's reader (`read_renew_batch.lua`, protocol §5.6): the key's TTL and
    /// the reader's own timeout keys `<key_prefix>:<field>:rwlock_timeout:<n>`, which other
    /// clients' read unlocks check to tell live readers from dead ones.
    Reader { key_prefix: Arc<str> },
}

/// A guard's part in a hold; hand it back with [`Watchdog::leave`].
#[derive(Debug)]
pub(crate) struct Ticket {
    hold: HoldKey,
    entry_id: u64,
    /// When the guard's fixed lease ends; `None` for a watchdog lease.
    fixed: Option<Instant>,
}

/// One hold of this client as it lives in Redis: every guard (and detached hold) of one
/// owner on one lock, from the acquisition that created the field until it is gone. A
/// new hold of the same owner after this one was lost is a new entry with a new `id`,
/// which is how a guard of the lost hold knows it must not release the new one.
struct Entry {
    id: u64,
    slot: u16,
    /// Holds of this entry with a watchdog lease: while there is one, the key is renewed.
    renewed: usize,
    /// When each fixed-lease hold of this entry ends.
    fixed: Vec<Instant>,
    /// When the watchdog lease runs out unless renewed (while `renewed > 0`): counted from
    /// before the command that last set it was sent.
    expires: Instant,
    lost: LostSignal,
}

// However an entry ends, its holds are no longer renewed: its guards are told.
impl Drop for Entry {
    fn drop(&mut self) {
        self.lost.signal();
    }
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.renewed == 0 && self.fixed.is_empty()
    }

    /// How long the key must live for this entry's holds: the watchdog timeout while one is
    /// renewed, else until the last fixed lease ends; `None` when no hold is known.
    fn longest(&self, timeout: Duration, now: Instant) -> Option<Duration> {
        if self.renewed > 0 {
            return Some(timeout);
        }
        let end = self.fixed.iter().max()?;
        Some(
            end.saturating_duration_since(now)
                .max(Duration::from_millis(1)),
        )
    }

    fn remove_fixed(&mut self, end: Instant) {
        if let Some(at) = self.fixed.iter().position(|e| *e == end) {
            self.fixed.swap_remove(at);
        }
    }
}

struct Registry {
    holds: HashMap<HoldKey, Entry>,
    closed: bool,
}

/// What a guard that gives up its hold needs for the release script.
#[derive(Debug)]
pub(crate) struct Leaving {
    /// The entry the guard belonged to, to be named when the release's reply arrives.
    pub(crate) generation: u64,
    /// How long the key must still live for the owner's other holds; `None` when this
    /// client knows of none (the handle's lease applies).
    pub(crate) keep_alive: Option<Duration>,
}

pub(crate) struct Watchdog {
    registry: Mutex<Registry>,
    next_id: AtomicU64,
    timeout: Duration,
    /// Group holds by cluster slot (else every hold is filed under slot 0).
    by_slot: bool,
    /// Wakes the task when the client closes.
    wake: Notify,
}

/// The news that a hold is lost, shared by its guards: set once, never cleared. (Leaner
/// than a `watch` channel, which the registry would keep one of per hold.)
#[derive(Default)]
pub(crate) struct Lost {
    set: AtomicBool,
    notify: Notify,
}

pub(crate) type LostSignal = Arc<Lost>;

impl Lost {
    fn signal(&self) {
        self.set.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Completes once the hold is lost.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a signal in between is not missed.
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

impl Watchdog {
    /// `by_slot`: put only holds of one cluster slot in a script (clusters, and proxies in
    /// front of them, refuse scripts across slots); otherwise any 100 holds share one.
    pub(crate) fn new(timeout: Duration, by_slot: bool) -> Arc<Watchdog> {
        Arc::new(Watchdog {
            registry: Mutex::new(Registry {
                holds: HashMap::new(),
                closed: false,
            }),
            next_id: AtomicU64::new(1),
            timeout,
            by_slot,
            wake: Notify::new(),
        })
    }

    /// Records a guard of `hold` taken by a command sent at `sent_at`, with a fixed lease
    /// ending at `fixed` or (`None`) renewed by the watchdog. `new_hold`: the script found no
    /// hold of the owner, so any entry still recorded belongs to a hold that was lost
    /// meanwhile: its guards are told, and it is replaced.
    pub(crate) fn register(
        &self,
        hold: HoldKey,
        sent_at: Instant,
        fixed: Option<Instant>,
        new_hold: bool,
    ) -> (Ticket, LostSignal) {
        let mut registry = self.registry.lock();
        let closed = registry.closed;
        if new_hold {
            if let Some(stale) = registry.holds.remove(&hold) {
                tracing::warn!(key = %hold.key, field = %hold.field, "hold lost: the owner's new acquisition found it gone");
                stale.lost.signal();
            }
        }
        let entry = registry.holds.entry(hold.clone()).or_insert_with(|| Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            slot: if self.by_slot {
                fred::util::redis_keyslot(hold.key.as_bytes())
            } else {
                0
            },
            renewed: 0,
            fixed: Vec::new(),
            expires: sent_at + self.timeout,
            lost: LostSignal::default(),
        });
        let first_renewed = fixed.is_none() && entry.renewed == 0;
        match fixed {
            Some(end) => entry.fixed.push(end),
            None if first_renewed => {
                entry.renewed = 1;
                entry.expires = sent_at + self.timeout;
            }
            None => {
                entry.renewed += 1;
                entry.expires = entry.expires.max(sent_at + self.timeout);
            }
        }
        let ticket = Ticket {
            hold,
            entry_id: entry.id,
            fixed,
        };
        let signal = entry.lost.clone();
        if closed {
            // Nobody will renew it: say so at once.
            entry.lost.signal();
        }
        // The task is not woken: its next tick, at most a period away, renews the new hold
        // in time, since its lease was just set for the whole watchdog timeout.
        (ticket, signal)
    }

    /// A guard gives up its part: renewal stops with the entry's last renewed hold.
    /// `None` when the guard's hold is already known to be lost (its entry was forgotten or
    /// replaced by a newer hold of the owner): its release must then touch nothing.
    pub(crate) fn leave(&self, ticket: Ticket) -> Option<Leaving> {
        let mut registry = self.registry.lock();
        let entry = registry
            .holds
            .get_mut(&ticket.hold)
            .filter(|entry| entry.id == ticket.entry_id)?;
        match ticket.fixed {
            Some(end) => entry.remove_fixed(end),
            None => entry.renewed = entry.renewed.saturating_sub(1),
        }
        let leaving = Leaving {
            generation: entry.id,
            keep_alive: entry.longest(self.timeout, Instant::now()),
        };
        if entry.is_empty() {
            registry.holds.remove(&ticket.hold);
        }
        Some(leaving)
    }

    /// For a release without a guard (`Lock::unlock`): the entry as it is now, to be named
    /// when the reply arrives, and how long the key must live for the owner's holds.
    pub(crate) fn plan_unlock(&self, hold: &HoldKey) -> (Option<u64>, Option<Duration>) {
        let registry = self.registry.lock();
        match registry.holds.get(hold) {
            Some(entry) => (Some(entry.id), entry.longest(self.timeout, Instant::now())),
            None => (None, None),
        }
    }

    /// How long the key of `hold` must live for the holds this client knows of.
    pub(crate) fn keep_alive(&self, hold: &HoldKey) -> Option<Duration> {
        self.plan_unlock(hold).1
    }

    /// The registrations of every hold of `key`, as `(hold, generation)`.
    pub(crate) fn generations_of_key(&self, key: &str) -> Vec<(HoldKey, u64)> {
        let registry = self.registry.lock();
        registry
            .holds
            .iter()
            .filter(|(hold, _)| &*hold.key == key)
            .map(|(hold, entry)| (hold.clone(), entry.id))
            .collect()
    }

    /// A release outside any guard (`Lock::unlock`) ended one hold of entry `id` (a
    /// detached one: a renewed hold if there is one, else the fixed one that ends first).
    pub(crate) fn release_one(&self, hold: &HoldKey, id: Option<u64>) {
        let mut registry = self.registry.lock();
        let Some(entry) = registry.holds.get_mut(hold) else {
            return;
        };
        if Some(entry.id) != id {
            return;
        }
        if entry.renewed > 0 {
            entry.renewed -= 1;
        } else if let Some(first) = entry.fixed.iter().min().copied() {
            entry.remove_fixed(first);
        }
        if entry.is_empty() {
            registry.holds.remove(hold);
        }
    }

    /// Entry `id` of `hold` no longer exists on the server: stop renewing it and tell its
    /// guards.
    pub(crate) fn forget(&self, hold: &HoldKey, id: Option<u64>) {
        let mut registry = self.registry.lock();
        if registry
            .holds
            .get(hold)
            .is_some_and(|entry| Some(entry.id) == id)
        {
            let entry = registry.holds.remove(hold).expect("checked above");
            entry.lost.signal();
        }
    }

    /// Stops renewing everything; every guard learns its lease will run out.
    pub(crate) fn close(&self) {
        let mut registry = self.registry.lock();
        registry.closed = true;
        for (_, entry) in registry.holds.drain() {
            entry.lost.signal();
        }
        drop(registry);
        self.wake.notify_one();
    }

    /// How many holds are being renewed.
    pub(crate) fn renewed(&self) -> usize {
        let registry = self.registry.lock();
        registry.holds.values().filter(|e| e.renewed > 0).count()
    }

    /// The renewal loop; returns when the client shuts down. It ticks every period whether
    /// or not there are holds: waking it on each new hold instead would cost a task wake-up
    /// per acquisition, while a tick with nothing to renew sends nothing.
    pub(crate) async fn run(self: Arc<Self>, runner: ScriptRunner) {
        let period = self.timeout / 3;
        let mut next = Instant::now() + period;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = self.closed() => return,
            }
            next = tokio::select! {
                due = self.renew_all(&runner) => due.min(Instant::now() + period),
                _ = self.closed() => return,
            };
        }
    }

    async fn closed(&self) {
        loop {
            let notified = self.wake.notified();
            if self.registry.lock().closed {
                return;
            }
            notified.await;
        }
    }

    /// Renews every hold once. Returns when the next attempt is due at the latest (sooner
    /// than a full period when a renewal failed and a lease is about to run out).
    async fn renew_all(&self, runner: &ScriptRunner) -> Instant {
        let now = Instant::now();
        // One group per slot and renewal kind: each kind has its own script.
        let mut batches: HashMap<(u16, bool), Vec<(HoldKey, u64)>> = HashMap::new();
        for (hold, entry) in self.registry.lock().holds.iter() {
            if entry.renewed == 0 {
                continue;
            }
            let reader = matches!(hold.renew, Renew::Reader { .. });
            batches
                .entry((entry.slot, reader))
                .or_default()
                .push((hold.clone(), entry.id));
        }
        let mut calls = JoinSet::new();
        for ((_, reader), holds) in batches {
            for chunk in holds.chunks(BATCH_SIZE) {
                let chunk = chunk.to_vec();
                let (script, keys, args) = self.renewal_call(&chunk, reader);
                let call = runner.run(script, keys, args);
                calls.spawn(async move { (chunk, call.await) });
            }
        }

        let mut next_due = now + self.timeout;
        while let Some(joined) = calls.join_next().await {
            let Ok((chunk, reply)) = joined else { continue };
            let mut registry = self.registry.lock();
            match reply {
                Ok(Value::Array(flags)) if flags.len() == chunk.len() => {
                    for ((hold, id), flag) in chunk.iter().zip(flags) {
                        let renewed = matches!(flag, Value::Integer(1));
                        match registry.holds.get_mut(hold) {
                            Some(entry) if entry.id == *id && renewed => {
                                entry.expires = now + self.timeout;
                            }
                            Some(entry) if entry.id == *id => {
                                tracing::warn!(key = %hold.key, field = %hold.field, "hold lost: it no longer exists in Redis");
                                entry.lost.signal();
                                registry.holds.remove(hold);
                            }
                            _ => {}
                        }
                    }
                }
                failed => {
                    match &failed {
                        Err(error) => tracing::warn!(%error, "renewing holds failed; will retry"),
                        Ok(reply) => tracing::warn!(?reply, "unexpected renewal reply; will retry"),
                    }
                    let later = Instant::now();
                    for (hold, id) in &chunk {
                        let Some(entry) = registry.holds.get_mut(hold) else {
                            continue;
                        };
                        if entry.id != *id {
                            continue;
                        }
                        if entry.expires <= later {
                            tracing::warn!(key = %hold.key, field = %hold.field, "hold lost: Redis unreachable until its lease ran out");
                            entry.lost.signal();
                            registry.holds.remove(hold);
                        } else {
                            // Try again well before the lease ends.
                            next_due = next_due.min(renewal_retry(later, entry.expires));
                        }
                    }
                }
            }
        }
        next_due
    }

    /// The script renewing one chunk of holds of one kind; its reply has one flag per hold.
    fn renewal_call(
        &self,
        chunk: &[(HoldKey, u64)],
        reader: bool,
    ) -> (&'static Script, Vec<Value>, Vec<Value>) {
        let ttl = Value::from(millis(self.timeout));
        if !reader {
            let keys = (chunk.iter())
                .map(|(h, _)| Value::String(h.key.clone()))
                .collect();
            let mut args = Vec::with_capacity(chunk.len() + 1);
            args.push(ttl);
            args.extend(chunk.iter().map(|(h, _)| Value::String(h.field.clone())));
            return (&RENEW_BATCH, keys, args);
        }
        // One (key, key prefix) pair per hold, each listing one reader: the reply then tells
        // every hold apart, even two readers of this client on the same lock.
        let mut keys = Vec::with_capacity(chunk.len() * 2);
        let mut args = Vec::with_capacity(chunk.len() * 2 + 1);
        args.push(ttl);
        for (hold, _) in chunk {
            let Renew::Reader { key_prefix } = &hold.renew else {
                unreachable!("chunks are grouped by renewal kind")
            };
            keys.push(Value::String(hold.key.clone()));
            keys.push(Value::from(&**key_prefix));
            args.push(Value::from(1_i64));
            args.push(Value::String(hold.field.clone()));
        }
        (&READ_RENEW_BATCH, keys, args)
    }
}
