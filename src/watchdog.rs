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
//!
//! Guards see each hold's [`Standing`]: lost, or held until the watchdog lease's deadline,
//! counted from the send of the command that last set the lease. A guard reports its hold
//! lost once that deadline passes, even while a renewal is still on the wire, and the key
//! on the server, whose TTL started later, cannot have expired before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::keys::Str;
use crate::observe;
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
    standing: watch::Sender<Standing>,
}

/// What the guards of a hold know of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Held; while a hold of the entry is renewed by the watchdog, `until` is when the
    /// watchdog lease runs out unless renewed before (fixed leases are timed by their own
    /// guards).
    Held { until: Option<Instant> },
    /// Lost for good.
    Lost,
}

impl Standing {
    /// Whether the hold still stands at `now`.
    pub(crate) fn holds_at(self, now: Instant) -> bool {
        match self {
            Standing::Held { until } => until.is_none_or(|until| now < until),
            Standing::Lost => false,
        }
    }

    /// When the hold stops standing unless renewed before.
    pub(crate) fn until(self) -> Option<Instant> {
        match self {
            Standing::Held { until } => until,
            Standing::Lost => None,
        }
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

    /// Tells the guards the hold is lost, for good.
    fn lose(&self) {
        self.standing.send_replace(Standing::Lost);
    }

    /// Moves the watchdog lease's end to `expires`, unless the lease already ran out: then
    /// the hold is lost (returns `false`), even if the server did renew it, since a guard
    /// may have said so already. Decided under the channel's lock, with the clock read
    /// there, as the guards read it: what a guard said is never contradicted.
    fn extend(&mut self, expires: Instant) -> bool {
        let mut kept = false;
        self.standing.send_modify(|standing| {
            kept = standing.holds_at(Instant::now());
            *standing = if kept {
                Standing::Held {
                    until: Some(expires),
                }
            } else {
                Standing::Lost
            };
        });
        if kept {
            self.expires = expires;
        }
        kept
    }

    /// A renewed hold left: when none is renewed any more, only fixed leases remain, which
    /// their guards time themselves; unless the watchdog lease ran out meanwhile, which
    /// stays lost.
    fn renewed_hold_left(&mut self) {
        self.renewed = self.renewed.saturating_sub(1);
        if self.renewed == 0 {
            self.standing.send_modify(|standing| {
                *standing = if standing.holds_at(Instant::now()) {
                    Standing::Held { until: None }
                } else {
                    Standing::Lost
                };
            });
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

/// How a guard follows its hold's [`Standing`].
pub(crate) type LostSignal = watch::Receiver<Standing>;

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
    /// meanwhile: its guards are told, and it is replaced. So is an entry whose watchdog
    /// lease ran out, which its guards may have reported lost already.
    pub(crate) fn register(
        &self,
        hold: HoldKey,
        sent_at: Instant,
        fixed: Option<Instant>,
        new_hold: bool,
    ) -> (Ticket, LostSignal) {
        let mut registry = self.registry.lock();
        let closed = registry.closed;
        let stale = registry
            .holds
            .get(&hold)
            .is_some_and(|entry| new_hold || !entry.standing.borrow().holds_at(Instant::now()));
        if stale {
            let stale = registry.holds.remove(&hold).expect("checked above");
            tracing::warn!(key = %hold.key, field = %hold.field, "hold lost: replaced by the owner's new acquisition");
            observe::lease_lost(observe::Lost::Replaced);
            stale.lose();
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
            standing: watch::channel(Standing::Held { until: None }).0,
        });
        let first_renewed = fixed.is_none() && entry.renewed == 0;
        match fixed {
            Some(end) => entry.fixed.push(end),
            None => {
                let expires = sent_at + self.timeout;
                let expires = if first_renewed {
                    expires
                } else {
                    entry.expires.max(expires)
                };
                entry.renewed += 1;
                // A reply that came after the lease's end makes a hold that is lost at once.
                entry.extend(expires);
            }
        }
        let ticket = Ticket {
            hold,
            entry_id: entry.id,
            fixed,
        };
        let signal = entry.standing.subscribe();
        if closed {
            // Nobody will renew it: say so at once.
            entry.lose();
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
            None => entry.renewed_hold_left(),
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
            entry.renewed_hold_left();
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
            entry.lose();
        }
    }

    /// Stops renewing everything; every guard learns its lease will run out.
    pub(crate) fn close(&self) {
        let mut registry = self.registry.lock();
        registry.closed = true;
        for (_, entry) in registry.holds.drain() {
            entry.lose();
        }
        drop(registry);
        self.wake.notify_one();
    }

    /// How many holds are being renewed (a lease that ran out is not, even before the
    /// renewal task has dropped it).
    pub(crate) fn renewed(&self) -> usize {
        let registry = self.registry.lock();
        let now = Instant::now();
        (registry.holds.values())
            .filter(|e| e.renewed > 0 && e.standing.borrow().holds_at(now))
            .count()
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
        {
            let mut registry = self.registry.lock();
            // A lease that ran out meanwhile (the process was paused, or the last renewal took
            // that long) is lost, and not renewed: the key then expires on its own soon.
            registry.holds.retain(|hold, entry| {
                let lapsed = entry.renewed > 0 && !entry.standing.borrow().holds_at(now);
                if lapsed {
                    tracing::warn!(key = %hold.key, field = %hold.field, "hold lost: its lease ran out before it could be renewed");
                    entry.lose();
                }
                !lapsed
            });
            for (hold, entry) in registry.holds.iter() {
                if entry.renewed == 0 {
                    continue;
                }
                let reader = matches!(hold.renew, Renew::Reader { .. });
                batches
                    .entry((entry.slot, reader))
                    .or_default()
                    .push((hold.clone(), entry.id));
            }
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
                            Some(entry) if entry.id == *id => {
                                if !renewed {
                                    tracing::warn!(key = %hold.key, field = %hold.field, "hold lost: it no longer exists in Redis");
                                    observe::lease_lost(observe::Lost::Gone);
                                    entry.lose();
                                    registry.holds.remove(hold);
                                } else if !entry.extend(now + self.timeout) {
                                    tracing::warn!(key = %hold.key, field = %hold.field, "hold lost: its renewal was answered after its lease ran out");
                                    observe::lease_lost(observe::Lost::Unreachable);
                                    registry.holds.remove(hold);
                                } else {
                                    observe::renewed(1);
                                }
                            }
                            _ => {}
                        }
                    }
                }
                failed => {
                    observe::renewal_failed();
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
                            observe::lease_lost(observe::Lost::Unreachable);
                            entry.lose();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hold() -> HoldKey {
        HoldKey {
            key: "lock".into(),
            field: "owner".into(),
            renew: Renew::Field,
        }
    }

    #[test]
    fn a_watchdog_lease_that_ran_out_stays_lost() {
        let watchdog = Watchdog::new(Duration::from_millis(100), false);
        let now = Instant::now();
        let in_a_minute = Some(now + Duration::from_secs(60));
        let (_fixed, fixed_standing) = watchdog.register(hold(), now, in_a_minute, true);
        // A re-entry with the watchdog lease whose reply came after that lease's end.
        let sent = now - Duration::from_millis(200);
        let (renewed, renewed_standing) = watchdog.register(hold(), sent, None, false);
        assert!(!renewed_standing.borrow().holds_at(Instant::now()));
        assert_eq!(
            watchdog.renewed(),
            0,
            "a lease that ran out is not being renewed"
        );
        // The lapsed guard leaving does not revive the hold for the fixed one.
        assert!(watchdog.leave(renewed).is_some());
        assert_eq!(*fixed_standing.borrow(), Standing::Lost);
    }

    #[test]
    fn a_guard_with_time_left_follows_the_renewals() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let (ticket, standing) = watchdog.register(hold(), now, None, true);
        assert_eq!(
            *standing.borrow(),
            Standing::Held {
                until: Some(now + Duration::from_secs(30))
            }
        );
        assert_eq!(watchdog.renewed(), 1);
        assert!(watchdog.leave(ticket).is_some());
        assert_eq!(watchdog.renewed(), 0);
    }
}
