//! The renewal task: every hold renewed in batches, each of one kind (and slot).

use std::collections::HashMap;
use std::sync::Arc;

use fred::error::Error as RedisError;
use fred::types::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::registry::{Registered, Registry};
use super::{Hold, Renew, Watchdog};
use crate::base::backoff::renewal_retry;
use crate::base::keys::Str;
use crate::base::observe;
use crate::base::time::{lease_end, millis};
use crate::topology::runner::ScriptRunner;
use crate::topology::script::{Call, READ_RENEW_BATCH, RENEW_BATCH};

/// At most this many plain holds are renewed by one script. Redis runs nothing else while a
/// script runs, so this bounds how long other commands wait behind one: a plain hold costs
/// about 1.2 µs of Redis time (HEXISTS and PEXPIRE), 250 of them about 0.3 ms. Fewer, larger
/// scripts cost the client less: each script carries a fixed cost in fred and in this task.
pub(super) const FIELD_BATCH: usize = 250;
/// At most this many read holds are renewed by one script: a reader costs about four times
/// a plain hold (its timeout keys), so 100 take about 0.5 ms (Redisson's batch size).
pub(super) const READER_BATCH: usize = 100;
/// How many holds the renewal round looks at before taking them.
pub(super) const LOOK_AHEAD: usize = 32;

/// Holds renewed by one script: of one renewal kind (and, on clusters, of one slot), at
/// most [`FIELD_BATCH`] plain holds or [`READER_BATCH`] read holds.
pub(super) struct Batch {
    pub(super) reader: bool,
    pub(super) holds: Vec<Arc<Hold>>,
}

impl Batch {
    pub(super) fn new(reader: bool) -> Batch {
        Batch {
            reader,
            holds: Vec::with_capacity(Batch::max_len(reader)),
        }
    }

    pub(super) fn max_len(reader: bool) -> usize {
        if reader {
            READER_BATCH
        } else {
            FIELD_BATCH
        }
    }

    pub(super) fn is_full(&self) -> bool {
        self.holds.len() == Batch::max_len(self.reader)
    }
}

impl Watchdog {
    /// The renewal loop; returns when the client shuts down. It ticks every period whether
    /// or not there are holds: waking it on each new hold instead would cost a task wake-up
    /// per acquisition, while a tick with nothing to renew sends nothing.
    pub(crate) async fn run(self: Arc<Self>, runner: ScriptRunner) {
        let period = self.timeout / 3;
        let mut next = Instant::now() + period;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = self.renew_now.notified() => {}
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
        let mut calls = JoinSet::new();
        for batch in self.batches(now) {
            let call = runner.run(self.renewal_call(&batch));
            calls.spawn(async move { (batch, call.await) });
        }
        let next_lease = self.clock.at(lease_end(now, self.timeout));
        let mut next_due = now + self.timeout;
        while let Some(joined) = calls.join_next().await {
            let Ok((batch, reply)) = joined else { continue };
            if let Some(retry) = self.answered(&batch.holds, reply, next_lease) {
                next_due = next_due.min(retry);
            }
        }
        next_due
    }

    /// Takes in the reply to the renewal of `holds`: each is renewed until `next_lease`, or
    /// lost. After a failure, when to try again at the latest (before a lease runs out).
    pub(super) fn answered(
        &self,
        holds: &[Arc<Hold>],
        reply: Result<Value, RedisError>,
        next_lease: u64,
    ) -> Option<Instant> {
        let mut registry = self.registry.lock();
        match reply {
            Ok(Value::Array(flags)) if flags.len() == holds.len() => {
                self.flagged(&mut registry, holds, flags, next_lease);
                None
            }
            Err(error) => {
                tracing::warn!(%error, "renewing holds failed; will retry");
                self.not_renewed(&mut registry, holds)
            }
            Ok(reply) => {
                tracing::warn!(?reply, "unexpected renewal reply; will retry");
                self.not_renewed(&mut registry, holds)
            }
        }
    }

    /// `holds` were answered with one flag each: 1 renewed, else gone.
    pub(super) fn flagged(
        &self,
        registry: &mut Registry,
        holds: &[Arc<Hold>],
        flags: Vec<Value>,
        next_lease: u64,
    ) {
        let at = self.clock.now();
        // A first look at every standing: these plain loads of scattered records overlap,
        // where each atomic update below would wait for its own.
        let any_lost = holds.iter().any(|hold| hold.standing.is_lost());
        let mut renewed = 0;
        for (hold, flag) in holds.iter().zip(flags) {
            if any_lost && !registry.is_current(hold) {
                continue;
            }
            let key = &hold.key;
            if !matches!(flag, Value::Integer(1)) {
                tracing::warn!(key = %key.key, field = %key.field, "hold lost: it no longer exists in Redis");
                observe::lease_lost(observe::Lost::Gone);
                registry.remove(key);
            } else if !hold.standing.renew(at, next_lease) {
                tracing::warn!(key = %key.key, field = %key.field, "hold lost: its renewal was answered after its lease ran out");
                observe::lease_lost(observe::Lost::Unreachable);
                registry.remove(key);
            } else {
                renewed += 1;
            }
        }
        observe::renewed(renewed);
    }

    /// The renewal of `holds` failed: those whose lease ran out meanwhile are lost; returns
    /// when to try again, well before the earliest end of the others' leases.
    pub(super) fn not_renewed(
        &self,
        registry: &mut Registry,
        holds: &[Arc<Hold>],
    ) -> Option<Instant> {
        observe::renewal_failed();
        let later = Instant::now();
        let mut retry: Option<Instant> = None;
        for hold in holds {
            if !registry.is_current(hold) {
                continue;
            }
            let key = &hold.key;
            if !hold.standing.holds_at(self.clock.at(later)) {
                tracing::warn!(key = %key.key, field = %key.field, "hold lost: Redis unreachable until its lease ran out");
                observe::lease_lost(observe::Lost::Unreachable);
                registry.remove(key);
            } else if let Some(expires) = hold.standing.deadline() {
                let at = renewal_retry(later, self.clock.instant(expires));
                retry = Some(retry.map_or(at, |earlier| earlier.min(at)));
            }
        }
        retry
    }

    /// The holds to renew at `now`, in batches, in one pass over the registry (at 100,000
    /// holds, each pass over scattered records costs more than the work done on them). A
    /// lease that ran out meanwhile (the process was paused, or the last renewal took that
    /// long) is lost, and not renewed: the key then expires on its own soon.
    pub(super) fn batches(&self, now: Instant) -> Vec<Batch> {
        let at = self.clock.at(now);
        let mut full = Vec::new();
        // The batch being filled of each slot and renewal kind: each kind has its own script.
        let mut filling: HashMap<(u16, bool), Batch> = HashMap::new();
        let mut registry = self.registry.lock();
        let mut lapsed = Vec::new();
        {
            let mut renewed = (registry.holds.iter()).filter(|(_, entry)| entry.renewed > 0);
            let mut standing = Vec::with_capacity(LOOK_AHEAD);
            loop {
                // The standings of a few holds are read before any of them is taken: these
                // reads of scattered records overlap, where taking a hold between them (an
                // atomic count) would make each read wait for the one before.
                let mut looked = 0;
                for (Registered(hold), entry) in renewed.by_ref().take(LOOK_AHEAD) {
                    looked += 1;
                    if hold.standing.holds_at(at) {
                        standing.push((hold, entry));
                    } else {
                        lapsed.push(hold.clone());
                    }
                }
                if looked == 0 {
                    break;
                }
                for (hold, entry) in standing.drain(..) {
                    let reader = entry.reader;
                    let batch =
                        (filling.entry((entry.slot, reader))).or_insert_with(|| Batch::new(reader));
                    batch.holds.push(hold.clone());
                    if batch.is_full() {
                        full.push(std::mem::replace(batch, Batch::new(reader)));
                    }
                }
            }
        }
        for hold in lapsed {
            let key = &hold.key;
            tracing::warn!(key = %key.key, field = %key.field, "hold lost: its lease ran out before it could be renewed");
            registry.remove(key);
        }
        drop(registry);
        full.extend(
            filling
                .into_values()
                .filter(|batch| !batch.holds.is_empty()),
        );
        full
    }

    /// The script renewing one batch; its reply has one flag per hold.
    pub(super) fn renewal_call(&self, batch: &Batch) -> Call {
        let (holds, ttl) = (&batch.holds, Value::from(millis(self.timeout)));
        let fields = packed(holds.iter().map(|hold| &*hold.key.field));
        let mut args = Vec::with_capacity(1 + holds.len() * if batch.reader { 2 } else { 1 });
        args.push(ttl);
        if !batch.reader {
            args.extend(fields);
            let keys = packed(holds.iter().map(|hold| &*hold.key.key));
            return Call::of(&RENEW_BATCH, keys, args);
        }
        // One (key, key prefix) pair per hold, each listing one reader: the reply then tells
        // every hold apart, even two readers of this client on the same lock.
        args.extend(
            fields
                .into_iter()
                .flat_map(|field| [Value::from(1_i64), field]),
        );
        let keys = packed(holds.iter().flat_map(|hold| {
            let Renew::Reader { key_prefix } = &hold.key.renew else {
                unreachable!("batches are grouped by renewal kind")
            };
            [&*hold.key.key, &**key_prefix]
        }));
        Call::of(&READ_RENEW_BATCH, keys, args)
    }
}

/// `texts` as script arguments, copied into one shared buffer that each of them is a slice
/// of. The script runner and fred copy every argument again and drop the copies later: on
/// one buffer, that only counts references in one place, which stays in the cache, where on
/// each hold's own text it would miss the cache at every count (100,000 holds are far more
/// than a cache keeps).
pub(super) fn packed<'a>(texts: impl Iterator<Item = &'a str> + Clone) -> Vec<Value> {
    let mut all = String::with_capacity(texts.clone().map(str::len).sum());
    texts.clone().for_each(|text| all.push_str(text));
    let all = Str::from(all);
    let mut end = 0;
    (texts.map(|text| {
        let start = end;
        end += text.len();
        Value::String(all.slice(start..end))
    }))
    .collect()
}
