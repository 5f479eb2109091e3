//! The watchdog: one task per client that keeps every hold taken without a fixed lease
//! alive (protocol §3.7), and tells the holders when a hold is lost.
//!
//! Every `watchdog_timeout / 3` the task renews all registered holds with one script per
//! batch of holds of the same [`Renew`] kind (and, on clusters, of the same cluster slot):
//! plain holds by their field, read-write readers also by their timeout keys (protocol §5.6). A
//! hold whose field is gone (expired, force-unlocked, or the data was lost) is dropped from
//! the registry and its guards' `lease_lost()` fires; so does a hold that could not be
//! renewed before its lease ran out. Transient errors are retried on the next tick, sooner
//! when a lease is close to its end.
//!
//! Guards see each hold's [`Standing`]: lost, or held until the watchdog lease's deadline,
//! counted from the send of the command that last set the lease, less
//! [`TIMER_MARGIN`](crate::time::TIMER_MARGIN) (see [`lease_end`]). A guard reports its hold
//! lost once that deadline passes, even while a renewal is still on the wire, and the key
//! on the server, whose TTL started later, cannot have expired before. The standing is one
//! atomic word and one [`Notify`] per hold, shared by the registry and the hold's guards:
//! a hold costs no task and no channel.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::error::Error as RedisError;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backoff::renewal_retry;
use crate::keys::Str;
use crate::observe;
use crate::script::{Call, ScriptRunner, READ_RENEW_BATCH, RENEW_BATCH};
use crate::time::{lease_end, millis};

/// At most this many plain holds are renewed by one script. Redis runs nothing else while a
/// script runs, so this bounds how long other commands wait behind one: a plain hold costs
/// about 1.2 µs of Redis time (HEXISTS and PEXPIRE), 250 of them about 0.3 ms. Fewer, larger
/// scripts cost the client less: each script carries a fixed cost in fred and in this task.
const FIELD_BATCH: usize = 250;
/// At most this many read holds are renewed by one script: a reader costs about four times
/// a plain hold (its timeout keys), so 100 take about 0.5 ms (Redisson's batch size).
const READER_BATCH: usize = 100;
/// How many holds the renewal round looks at before taking them.
const LOOK_AHEAD: usize = 32;

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

/// One hold of this client as it lives in Redis: every guard (and detached hold) of one
/// owner on one lock, from the acquisition that created the field until it is gone. Shared
/// by the registry and the hold's guards. A new hold of the same owner after this one was
/// lost is a new `Hold` with a new `id`, which is how a guard of the lost hold knows it must
/// not release the new one.
///
/// The renewal round reads every hold's reference count and standing word: laid out first,
/// they share the record's first cache line (at 100,000 holds, each line read is a miss).
#[derive(Debug)]
#[repr(C)]
struct Hold {
    standing: Standing,
    key: HoldKey,
    id: u64,
}

/// A guard's part in a hold; hand it back with [`Watchdog::leave`], and ask the watchdog
/// whether the hold is lost with [`Watchdog::is_lost`] and [`Watchdog::lost`].
#[derive(Debug)]
pub(crate) struct Ticket {
    hold: Arc<Hold>,
    /// When the guard's fixed lease ends; `None` for a watchdog lease.
    fixed: Option<Instant>,
}

impl Ticket {
    /// Whether the guard's own fixed lease has ended by `now`.
    fn fixed_ended(&self, now: Instant) -> bool {
        self.fixed.is_some_and(|ends| now >= ends)
    }
}

/// The word of a [`Standing`] while the hold stands and no hold of it is renewed by the
/// watchdog (fixed leases are timed by their own guards).
const HELD: u64 = u64::MAX;
/// The word of a [`Standing`] once the hold is lost, for good.
const LOST: u64 = u64::MAX - 1;
/// The latest deadline a word can hold (about 584 years after the watchdog started).
const LAST_DEADLINE: u64 = u64::MAX - 2;

/// What the guards of a hold know of it, without asking Redis: held (until the watchdog
/// lease's deadline while a hold of it is renewed), or lost. One atomic word, so a guard's
/// look costs no lock, and a notification for the guards awaiting the loss.
#[derive(Debug)]
#[repr(C)]
struct Standing {
    /// [`HELD`], [`LOST`], or the deadline on the watchdog's [`Clock`]. First (see [`Hold`]).
    word: AtomicU64,
    /// Woken when the hold becomes lost; a deadline passing is awaited with a timer.
    lost: Notify,
}

impl Standing {
    fn new() -> Standing {
        Standing {
            word: AtomicU64::new(HELD),
            lost: Notify::new(),
        }
    }

    /// Whether the hold stands at `now`; if it does and `next` is given, the deadline becomes
    /// `next` ([`HELD`]: none). A deadline that passed by `now` makes the hold lost, for
    /// good: checking and changing are one atomic step, so the watchdog never renews a hold
    /// that a guard was told is lost.
    fn settle(&self, now: u64, next: Option<u64>) -> bool {
        self.update(now, |word| next.unwrap_or(word))
    }

    /// A renewal answered at `now`: the deadline becomes `next` if the hold stands and is
    /// still renewed (one whose last renewed guard left meanwhile keeps no deadline, or
    /// the watchdog would time its fixed leases). Whether the hold stands.
    fn renew(&self, now: u64, next: u64) -> bool {
        self.update(now, |word| if word == HELD { HELD } else { next })
    }

    /// [`settle`](Self::settle) with the new word made by `next` from the current one.
    fn update(&self, now: u64, next: impl Fn(u64) -> u64) -> bool {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let stands = word == HELD || (word != LOST && now < word);
            let new = if stands { next(word) } else { LOST };
            if new == word {
                return stands;
            }
            match (self.word).compare_exchange_weak(word, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if new == LOST {
                        self.lost.notify_waiters();
                    }
                    return stands;
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// Whether the hold stands at `now`.
    fn holds_at(&self, now: u64) -> bool {
        self.settle(now, None)
    }

    /// Whether the hold was found lost (not merely past its deadline, which is only found
    /// by a look at the clock).
    fn is_lost(&self) -> bool {
        self.word.load(Ordering::Acquire) == LOST
    }

    /// The watchdog lease's deadline; `None` when lost or none is set.
    fn deadline(&self) -> Option<u64> {
        let word = self.word.load(Ordering::Acquire);
        (word <= LAST_DEADLINE).then_some(word)
    }

    /// The hold is lost, for good.
    fn lose(&self) {
        if self.word.swap(LOST, Ordering::AcqRel) != LOST {
            self.lost.notify_waiters();
        }
    }
}

/// The watchdog's clock: an instant as nanoseconds since the watchdog was made, so that a
/// deadline fits in a [`Standing`]'s word.
#[derive(Clone, Copy, Debug)]
struct Clock {
    start: Instant,
}

impl Clock {
    /// `instant` on this clock; one before the start counts as the start, which only makes
    /// a deadline pass sooner.
    fn at(self, instant: Instant) -> u64 {
        let nanos = instant.saturating_duration_since(self.start).as_nanos();
        u64::try_from(nanos).map_or(LAST_DEADLINE, |n| n.min(LAST_DEADLINE))
    }

    fn now(self) -> u64 {
        self.at(Instant::now())
    }

    fn instant(self, at: u64) -> Instant {
        self.start + Duration::from_nanos(at)
    }
}

/// A [`Hold`] as the registry files it: found by its [`HoldKey`].
struct Registered(Arc<Hold>);

impl Borrow<HoldKey> for Registered {
    fn borrow(&self) -> &HoldKey {
        &self.0.key
    }
}

impl Hash for Registered {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl PartialEq for Registered {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Registered {}

/// The registry's part of one hold: its guards' parts.
struct Entry {
    /// Holds with a watchdog lease: while there is one, the key is renewed.
    renewed: u32,
    /// When each fixed-lease hold ends.
    fixed: Vec<Instant>,
    slot: u16,
    /// A read hold (renewed by its own script): known here, the round need not read the
    /// hold's record for it.
    reader: bool,
    /// When the first acquire reply of this hold was filed.
    filed_at: Instant,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.renewed == 0 && self.fixed.is_empty()
    }

    /// How long the key must live for this entry's holds: the watchdog timeout while one is
    /// renewed, and until the last fixed lease ends, whichever is longer; `None` when no
    /// hold is known.
    fn longest(&self, timeout: Duration, now: Instant) -> Option<Duration> {
        Self::longest_of(self.renewed > 0, self.fixed.iter().max(), timeout, now)
    }

    /// [`longest`](Self::longest) once [`Watchdog::release_one`] has ended one of them.
    fn longest_after_release_one(&self, timeout: Duration, now: Instant) -> Option<Duration> {
        if self.renewed > 0 {
            return Self::longest_of(self.renewed > 1, self.fixed.iter().max(), timeout, now);
        }
        // The fixed lease that ends first goes: the others end no later than the last.
        let last = (self.fixed.len() > 1)
            .then(|| self.fixed.iter().max())
            .flatten();
        Self::longest_of(false, last, timeout, now)
    }

    fn longest_of(
        renewed: bool,
        last_fixed_end: Option<&Instant>,
        timeout: Duration,
        now: Instant,
    ) -> Option<Duration> {
        let fixed = last_fixed_end.map(|end| {
            end.saturating_duration_since(now)
                .max(Duration::from_millis(1))
        });
        fixed.max(renewed.then_some(timeout))
    }

    /// Whether a hold of this entry still keeps the key alive at `now`.
    fn keeps_key(&self, now: Instant) -> bool {
        self.renewed > 0 || self.fixed.iter().any(|end| *end > now)
    }

    fn remove_fixed(&mut self, end: Instant) {
        if let Some(at) = self.fixed.iter().position(|e| *e == end) {
            self.fixed.swap_remove(at);
        }
    }

    /// A renewed hold left: when none is renewed any more, only fixed leases remain, which
    /// their guards time themselves; unless the watchdog lease ran out meanwhile, which
    /// stays lost.
    fn renewed_hold_left(&mut self, standing: &Standing, now: u64) {
        self.renewed = self.renewed.saturating_sub(1);
        if self.renewed == 0 {
            standing.settle(now, Some(HELD));
        }
    }
}

struct Registry {
    holds: HashMap<Registered, Entry>,
    closed: bool,
}

impl Registry {
    /// The hold registered under `key`.
    fn hold(&self, key: &HoldKey) -> Option<&Arc<Hold>> {
        self.holds
            .get_key_value(key)
            .map(|(registered, _)| &registered.0)
    }

    /// Whether `hold` is the one registered under its key. A hold leaves the registry lost
    /// (every way out marks it so, under the registry's lock), so one that is not lost
    /// needs no lookup: the watchdog asks this of every hold in every round.
    fn is_current(&self, hold: &Arc<Hold>) -> bool {
        !hold.standing.is_lost()
            || (self.hold(&hold.key)).is_some_and(|current| Arc::ptr_eq(current, hold))
    }

    /// The entry of `hold`, while `hold` is the one registered under its key.
    fn entry_of(&mut self, hold: &Arc<Hold>) -> Option<&mut Entry> {
        if !self.is_current(hold) {
            return None;
        }
        self.holds.get_mut(&hold.key)
    }

    /// The hold of `key` leaves the registry: its guards learn that it is lost. Every hold
    /// leaves through here, but for those dropped in bulk: at shutdown, each is told the
    /// same way, and a lapsed one was lost when its lapse was seen.
    fn remove(&mut self, key: &HoldKey) {
        if let Some((registered, _)) = self.holds.remove_entry(key) {
            registered.0.standing.lose();
        }
    }
}

/// Holds renewed by one script: of one renewal kind (and, on clusters, of one slot), at
/// most [`FIELD_BATCH`] plain holds or [`READER_BATCH`] read holds.
struct Batch {
    reader: bool,
    holds: Vec<Arc<Hold>>,
}

impl Batch {
    fn new(reader: bool) -> Batch {
        Batch {
            reader,
            holds: Vec::with_capacity(Batch::max_len(reader)),
        }
    }

    fn max_len(reader: bool) -> usize {
        if reader {
            READER_BATCH
        } else {
            FIELD_BATCH
        }
    }

    fn is_full(&self) -> bool {
        self.holds.len() == Batch::max_len(self.reader)
    }
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
    clock: Clock,
    /// Group holds by cluster slot (else every hold is filed under slot 0).
    by_slot: bool,
    /// Wakes the task when the client closes.
    wake: Notify,
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
            clock: Clock {
                start: Instant::now(),
            },
            by_slot,
            wake: Notify::new(),
        })
    }

    /// Records a guard of `key` taken by a command sent at `sent_at`, with a fixed lease
    /// ending at `fixed` or (`None`) renewed by the watchdog. `new_hold`: the script found no
    /// hold of the owner, so any hold still recorded is one that was lost meanwhile: its
    /// guards are told, and it is replaced. So is a hold whose watchdog lease ran out, which
    /// its guards may have reported lost already.
    ///
    /// Tasks sharing an owner file their replies in any order, not the server's. A hold
    /// first filed after this command was sent may be a re-entry the server ran after it,
    /// into the hold this command made: then it is this hold, and stays. (Had the server
    /// run it first, that hold was lost within one round trip: by a fixed lease that short,
    /// which its guards know has ended, or by someone deleting the key in that instant.)
    pub(crate) fn register(
        &self,
        key: HoldKey,
        sent_at: Instant,
        fixed: Option<Instant>,
        new_hold: bool,
    ) -> Ticket {
        let mut registry = self.registry.lock();
        let now = self.clock.now();
        let current = registry.hold(&key).cloned();
        let filed_since_sent = |registry: &Registry| {
            (registry.holds.get(&key)).is_some_and(|entry| entry.filed_at > sent_at)
        };
        let (hold, entry) = match current {
            Some(hold)
                if hold.standing.holds_at(now) && (!new_hold || filed_since_sent(&registry)) =>
            {
                let entry = registry.holds.get_mut(&key).expect("registered");
                (hold, entry)
            }
            stale => {
                if stale.is_some() {
                    tracing::warn!(key = %key.key, field = %key.field, "hold lost: replaced by the owner's new acquisition");
                    observe::lease_lost(observe::Lost::Replaced);
                    registry.remove(&key);
                }
                let slot = if self.by_slot {
                    fred::util::redis_keyslot(key.key.as_bytes())
                } else {
                    0
                };
                let reader = matches!(key.renew, Renew::Reader { .. });
                let hold = Arc::new(Hold {
                    key,
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                    standing: Standing::new(),
                });
                let entry = (registry.holds)
                    .entry(Registered(hold.clone()))
                    .or_insert(Entry {
                        renewed: 0,
                        fixed: Vec::new(),
                        slot,
                        reader,
                        filed_at: Instant::now(),
                    });
                (hold, entry)
            }
        };
        match fixed {
            Some(end) => entry.fixed.push(end),
            None => {
                let expires = self.clock.at(lease_end(sent_at, self.timeout));
                // A re-entry keeps the later of its own and the renewed deadline.
                let expires = match hold.standing.deadline() {
                    Some(current) if entry.renewed > 0 => current.max(expires),
                    _ => expires,
                };
                entry.renewed += 1;
                // A reply that came after the lease's end makes a hold that is lost at once.
                hold.standing.settle(now, Some(expires));
            }
        }
        if registry.closed {
            // Nobody will renew it: say so at once.
            hold.standing.lose();
        }
        // The task is not woken: its next tick, at most a period away, renews the new hold
        // in time, since its lease was just set for the whole watchdog timeout.
        Ticket { hold, fixed }
    }

    /// A guard gives up its part: renewal stops with the hold's last renewed guard.
    /// `None` when the guard's hold is already known to be lost (it was forgotten or
    /// replaced by a newer hold of the owner, its watchdog lease ran out, or its fixed lease
    /// ended with nothing else keeping the key): its release must then touch nothing, and
    /// is answered at once, even with Redis out of reach.
    pub(crate) fn leave(&self, ticket: &Ticket) -> Option<Leaving> {
        let mut registry = self.registry.lock();
        let now = Instant::now();
        let at = self.clock.at(now);
        let entry = registry.entry_of(&ticket.hold)?;
        if !ticket.hold.standing.holds_at(at) {
            // Lost for every guard of the hold: nothing of it is renewed or released.
            registry.remove(&ticket.hold.key);
            return None;
        }
        match ticket.fixed {
            Some(end) => entry.remove_fixed(end),
            None => entry.renewed_hold_left(&ticket.hold.standing, at),
        }
        if ticket.fixed_ended(now) && !entry.keeps_key(now) {
            // The key's last lease ended: it is gone, or about to go on its own.
            if entry.is_empty() {
                registry.remove(&ticket.hold.key);
            }
            return None;
        }
        let leaving = Leaving {
            generation: ticket.hold.id,
            keep_alive: entry.longest(self.timeout, Instant::now()),
        };
        if entry.is_empty() {
            registry.remove(&ticket.hold.key);
        }
        Some(leaving)
    }

    /// Whether the hold of `ticket` is lost: the watchdog said so, the watchdog lease's
    /// deadline passed, or the guard's fixed lease ended.
    pub(crate) fn is_lost(&self, ticket: &Ticket) -> bool {
        let now = Instant::now();
        !ticket.hold.standing.holds_at(self.clock.at(now)) || ticket.fixed_ended(now)
    }

    /// Completes once [`is_lost`](Self::is_lost) turns true: woken by the loss, or by a
    /// timer at the next deadline (a renewal that moved it meanwhile sends it back to sleep).
    pub(crate) fn lost(&self, ticket: &Ticket) -> impl Future<Output = ()> + Send + 'static {
        let (hold, fixed, clock) = (ticket.hold.clone(), ticket.fixed, self.clock);
        async move {
            loop {
                // Made before the look, so a loss right after it still wakes this.
                let lost = hold.standing.lost.notified();
                let now = Instant::now();
                if !hold.standing.holds_at(clock.at(now)) || fixed.is_some_and(|f| now >= f) {
                    return;
                }
                let renewed_until = hold.standing.deadline().map(|at| clock.instant(at));
                let deadline = [renewed_until, fixed].into_iter().flatten().min();
                let deadline_passes = async move {
                    match deadline {
                        Some(deadline) => tokio::time::sleep_until(deadline).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = lost => return,
                    () = deadline_passes => {}
                }
            }
        }
    }

    /// For a release without a guard (`Lock::unlock`): the hold as it is now, to be named
    /// when the reply arrives, and how long the key must live for the owner's holds that
    /// remain after it (see [`release_one`](Self::release_one)).
    pub(crate) fn plan_unlock(&self, key: &HoldKey) -> (Option<u64>, Option<Duration>) {
        let registry = self.registry.lock();
        match registry.holds.get_key_value(key) {
            Some((Registered(hold), entry)) => (
                Some(hold.id),
                entry.longest_after_release_one(self.timeout, Instant::now()),
            ),
            None => (None, None),
        }
    }

    /// Whether the hold registered under `key` is known to be lost (its watchdog lease ran
    /// out, or its last fixed lease ended with none renewed); it then leaves the registry.
    /// A release of it must send nothing: the key is gone, or about to go on its own.
    pub(crate) fn forget_if_lost(&self, key: &HoldKey) -> bool {
        let mut registry = self.registry.lock();
        let now = Instant::now();
        let Some((Registered(hold), entry)) = registry.holds.get_key_value(key) else {
            return false;
        };
        let lost = !hold.standing.holds_at(self.clock.at(now)) || !entry.keeps_key(now);
        if lost {
            registry.remove(key);
        }
        lost
    }

    /// How long the key of `key` must live for the holds this client knows of.
    pub(crate) fn keep_alive(&self, key: &HoldKey) -> Option<Duration> {
        let registry = self.registry.lock();
        let entry = registry.holds.get(key)?;
        entry.longest(self.timeout, Instant::now())
    }

    /// The registrations of every hold of `key`, as `(hold, generation)`.
    pub(crate) fn generations_of_key(&self, key: &str) -> Vec<(HoldKey, u64)> {
        let registry = self.registry.lock();
        (registry.holds.keys())
            .filter(|Registered(hold)| &*hold.key.key == key)
            .map(|Registered(hold)| (hold.key.clone(), hold.id))
            .collect()
    }

    /// The hold registered under `key` if its generation is `id`.
    fn generation(registry: &Registry, key: &HoldKey, id: Option<u64>) -> Option<Arc<Hold>> {
        registry
            .hold(key)
            .filter(|hold| Some(hold.id) == id)
            .cloned()
    }

    /// A release outside any guard (`Lock::unlock`) ended one hold of generation `id` (a
    /// detached one: a renewed hold if there is one, else the fixed one that ends first).
    pub(crate) fn release_one(&self, key: &HoldKey, id: Option<u64>) {
        let mut registry = self.registry.lock();
        let Some(hold) = Self::generation(&registry, key, id) else {
            return;
        };
        let entry = registry.holds.get_mut(key).expect("registered");
        if entry.renewed > 0 {
            entry.renewed_hold_left(&hold.standing, self.clock.now());
        } else if let Some(first) = entry.fixed.iter().min().copied() {
            entry.remove_fixed(first);
        }
        if entry.is_empty() {
            registry.remove(key);
        }
    }

    /// Generation `id` of `key` no longer exists on the server: stop renewing it and tell
    /// its guards.
    pub(crate) fn forget(&self, key: &HoldKey, id: Option<u64>) {
        let mut registry = self.registry.lock();
        if Self::generation(&registry, key, id).is_some() {
            registry.remove(key);
        }
    }

    /// Stops renewing everything; every guard learns its lease will run out.
    pub(crate) fn close(&self) {
        let mut registry = self.registry.lock();
        registry.closed = true;
        for (Registered(hold), _) in registry.holds.drain() {
            hold.standing.lose();
        }
        drop(registry);
        self.wake.notify_one();
    }

    /// How many holds are being renewed (a lease that ran out is not, even before the
    /// renewal task has dropped it).
    pub(crate) fn renewed(&self) -> usize {
        let registry = self.registry.lock();
        let now = self.clock.now();
        (registry.holds.iter())
            .filter(|(Registered(hold), entry)| entry.renewed > 0 && hold.standing.holds_at(now))
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
    fn answered(
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
    fn flagged(
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
    fn not_renewed(&self, registry: &mut Registry, holds: &[Arc<Hold>]) -> Option<Instant> {
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
    fn batches(&self, now: Instant) -> Vec<Batch> {
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
    fn renewal_call(&self, batch: &Batch) -> Call {
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
fn packed<'a>(texts: impl Iterator<Item = &'a str> + Clone) -> Vec<Value> {
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

    fn plain(i: usize) -> HoldKey {
        HoldKey {
            key: format!("lock:{i}").into(),
            field: "owner".into(),
            renew: Renew::Field,
        }
    }

    fn reader(i: usize) -> HoldKey {
        HoldKey {
            key: format!("rw:{i}").into(),
            field: "owner".into(),
            renew: Renew::Reader {
                key_prefix: format!("{{rw:{i}}}").into(),
            },
        }
    }

    /// The holds of the round's only batch.
    fn only_batch(watchdog: &Watchdog, now: Instant) -> Vec<Arc<Hold>> {
        let mut batches = watchdog.batches(now);
        assert_eq!(batches.len(), 1, "one batch");
        batches.pop().expect("one batch").holds
    }

    /// A reply renewing `holds` but those of `gone`.
    fn flags(holds: &[Arc<Hold>], gone: &[HoldKey]) -> Result<Value, RedisError> {
        let flag = |hold: &Arc<Hold>| Value::Integer(i64::from(!gone.contains(&hold.key)));
        Ok(Value::Array(holds.iter().map(flag).collect()))
    }

    #[test]
    fn a_round_renews_every_renewed_hold_once_in_as_few_scripts_as_allowed() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let (plains, readers) = (FIELD_BATCH * 2 + 7, READER_BATCH + 3);
        let renewed: Vec<Ticket> = ((0..plains).map(plain))
            .chain((0..readers).map(reader))
            .map(|key| watchdog.register(key, now, None, true))
            .collect();
        // Fixed leases are timed by their guards, not renewed.
        let in_an_hour = Some(now + Duration::from_secs(3600));
        let fixed = watchdog.register(plain(plains), now, in_an_hour, true);
        // A lease that ran out before the round is lost, not renewed.
        let an_hour_ago = now - Duration::from_secs(3600);
        let lapsed = watchdog.register(plain(plains + 1), an_hour_ago, None, true);

        let batches = watchdog.batches(Instant::now());
        let mut seen = std::collections::HashSet::new();
        for batch in &batches {
            assert!(batch.holds.len() <= Batch::max_len(batch.reader));
            for hold in &batch.holds {
                assert_eq!(matches!(hold.key.renew, Renew::Reader { .. }), batch.reader);
                assert!(
                    seen.insert(hold.key.clone()),
                    "{:?} renewed twice",
                    hold.key
                );
            }
        }
        let expected = renewed.iter().map(|ticket| ticket.hold.key.clone());
        assert_eq!(seen, expected.collect());
        let reader_batches = batches.iter().filter(|batch| batch.reader).count();
        assert_eq!(reader_batches, readers.div_ceil(READER_BATCH));
        let plain_batches = batches.len() - reader_batches;
        assert_eq!(plain_batches, plains.div_ceil(FIELD_BATCH));
        assert!(!watchdog.is_lost(&fixed));
        assert!(watchdog.is_lost(&lapsed));
        assert_eq!(
            watchdog.plan_unlock(&lapsed.hold.key),
            (None, None),
            "dropped"
        );
    }

    #[test]
    fn by_slot_a_script_renews_holds_of_one_slot() {
        let watchdog = Watchdog::new(Duration::from_secs(30), true);
        let now = Instant::now();
        let tagged = |i| HoldKey {
            key: format!("{{tenant}}:{i}").into(),
            ..plain(i)
        };
        let _tickets: Vec<Ticket> = ((0..300).map(plain))
            .chain((0..300).map(tagged))
            .map(|key| watchdog.register(key, now, None, true))
            .collect();
        let batches = watchdog.batches(now);
        let slot = |hold: &Arc<Hold>| fred::util::redis_keyslot(hold.key.key.as_bytes());
        for batch in &batches {
            let first = slot(&batch.holds[0]);
            assert!(batch.holds.iter().all(|hold| slot(hold) == first));
        }
        let total: usize = batches.iter().map(|batch| batch.holds.len()).sum();
        assert_eq!(total, 600);
        let tenant = fred::util::redis_keyslot(b"tenant");
        let tenants = batches
            .iter()
            .filter(|batch| slot(&batch.holds[0]) == tenant);
        assert_eq!(tenants.count(), 2, "the tagged holds share full batches");
    }

    #[test]
    fn a_reply_renews_the_flagged_holds_and_loses_the_others() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let tickets: Vec<Ticket> = (0..3)
            .map(|i| watchdog.register(plain(i), now, None, true))
            .collect();
        let holds = only_batch(&watchdog, now);
        let next_lease = watchdog.clock.at(now + Duration::from_secs(40));
        let reply = flags(&holds, &[plain(1)]);
        assert_eq!(watchdog.answered(&holds, reply, next_lease), None);
        assert!(watchdog.is_lost(&tickets[1]));
        for kept in [&tickets[0], &tickets[2]] {
            assert!(!watchdog.is_lost(kept));
            assert_eq!(kept.hold.standing.deadline(), Some(next_lease));
        }
        assert_eq!(watchdog.renewed(), 2);
    }

    #[test]
    fn a_reply_about_a_forgotten_hold_leaves_its_successor_alone() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let old = watchdog.register(hold(), now, None, true);
        let holds = only_batch(&watchdog, now);
        // Released meanwhile, and taken again by the same owner.
        watchdog.forget(&hold(), Some(old.hold.id));
        let new = watchdog.register(hold(), now, None, true);
        let deadline = new.hold.standing.deadline();
        let next_lease = watchdog.clock.at(now + Duration::from_secs(40));
        for gone in [vec![hold()], vec![]] {
            let reply = flags(&holds, &gone);
            assert_eq!(watchdog.answered(&holds, reply, next_lease), None);
            assert!(watchdog.is_lost(&old));
            assert!(!watchdog.is_lost(&new));
            assert_eq!(new.hold.standing.deadline(), deadline);
        }
        assert_eq!(watchdog.renewed(), 1);
    }

    #[test]
    fn a_renewal_answered_after_the_last_renewed_guard_left_sets_no_deadline() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let renewed = watchdog.register(hold(), now, None, true);
        let in_an_hour = Some(now + Duration::from_secs(3600));
        let fixed = watchdog.register(hold(), now, in_an_hour, false);
        let holds = only_batch(&watchdog, now);
        assert!(watchdog.leave(&renewed).is_some());
        // A deadline set now would end the fixed lease's hold at once.
        let reply = flags(&holds, &[]);
        assert_eq!(watchdog.answered(&holds, reply, 0), None);
        assert_eq!(fixed.hold.standing.deadline(), None);
        assert!(!watchdog.is_lost(&fixed));
    }

    #[test]
    fn a_failed_renewal_is_retried_before_the_lease_ends() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let ticket = watchdog.register(hold(), now, None, true);
        let holds = only_batch(&watchdog, now);
        let error = RedisError::new(fred::error::ErrorKind::IO, "connection lost");
        let retry = (watchdog.answered(&holds, Err(error), 0)).expect("a retry");
        assert!(retry > now && retry < now + Duration::from_secs(30));
        assert!(!watchdog.is_lost(&ticket));
        let odd = Ok(Value::Array(Vec::new()));
        assert!(watchdog.answered(&holds, odd, 0).is_some());
        assert_eq!(watchdog.renewed(), 1);
    }

    #[tokio::test]
    async fn a_failed_renewal_drops_the_holds_whose_lease_ran_out() {
        let watchdog = Watchdog::new(Duration::from_millis(200), false);
        let ticket = watchdog.register(hold(), Instant::now(), None, true);
        let holds = only_batch(&watchdog, Instant::now());
        tokio::time::timeout(Duration::from_secs(10), watchdog.lost(&ticket))
            .await
            .expect("lost() completes once the deadline passed");
        let error = RedisError::new(fred::error::ErrorKind::IO, "connection lost");
        assert_eq!(watchdog.answered(&holds, Err(error), 0), None);
        assert_eq!(watchdog.plan_unlock(&hold()), (None, None), "dropped");
    }

    #[test]
    fn a_watchdog_lease_that_ran_out_stays_lost() {
        let watchdog = Watchdog::new(Duration::from_millis(100), false);
        let now = Instant::now();
        let in_a_minute = Some(now + Duration::from_secs(60));
        let fixed = watchdog.register(hold(), now, in_a_minute, true);
        assert!(!watchdog.is_lost(&fixed));
        // A re-entry with the watchdog lease whose reply came after that lease's end.
        let sent = now - Duration::from_millis(200);
        let renewed = watchdog.register(hold(), sent, None, false);
        assert!(watchdog.is_lost(&renewed));
        assert_eq!(
            watchdog.renewed(),
            0,
            "a lease that ran out is not being renewed"
        );
        // The lapsed guard leaving sends nothing, and does not revive the hold for the
        // fixed one.
        assert!(watchdog.leave(&renewed).is_none());
        assert!(watchdog.is_lost(&fixed));
    }

    #[test]
    fn a_guard_whose_fixed_lease_ended_leaves_without_a_release() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let ended = Some(now - Duration::from_millis(1));
        // Alone: the key's lease is over, nothing is released.
        let alone = watchdog.register(plain(1), now, ended, true);
        assert!(watchdog.leave(&alone).is_none());
        assert_eq!(watchdog.plan_unlock(&plain(1)), (None, None), "dropped");
        // Beside a renewed hold of the owner, which keeps the key: its count is released.
        let renewed = watchdog.register(plain(2), now, None, true);
        let inner = watchdog.register(plain(2), now, ended, false);
        assert!(watchdog.leave(&inner).is_some());
        assert!(!watchdog.is_lost(&renewed));
    }

    #[test]
    fn a_guard_with_time_left_follows_the_renewals() {
        let watchdog = Watchdog::new(Duration::from_secs(30), false);
        let now = Instant::now();
        let ticket = watchdog.register(hold(), now, None, true);
        let deadline = ticket
            .hold
            .standing
            .deadline()
            .map(|at| watchdog.clock.instant(at));
        assert_eq!(deadline, Some(lease_end(now, Duration::from_secs(30))));
        assert!(!watchdog.is_lost(&ticket));
        assert_eq!(watchdog.renewed(), 1);
        assert!(watchdog.leave(&ticket).is_some());
        assert_eq!(watchdog.renewed(), 0);
        assert!(watchdog.is_lost(&ticket), "its last part left");
    }

    #[test]
    fn a_guard_told_lost_is_never_contradicted_by_a_renewal() {
        let standing = Standing::new();
        assert!(standing.settle(10, Some(100)), "held until 100");
        // A guard looks at 150: the deadline passed.
        assert!(!standing.holds_at(150));
        // The watchdog read its clock at 50, before the guard's look, and comes second.
        assert!(
            !standing.settle(50, Some(400)),
            "the renewal does not revive it"
        );
        assert_eq!(standing.deadline(), None);
        assert!(!standing.holds_at(60));
    }

    #[tokio::test]
    async fn lost_completes_at_the_deadline_without_a_renewal() {
        // Nothing runs the renewal task: the deadline passes unrenewed.
        let watchdog = Watchdog::new(Duration::from_millis(200), false);
        let ticket = watchdog.register(hold(), Instant::now(), None, true);
        assert!(!watchdog.is_lost(&ticket));
        tokio::time::timeout(Duration::from_secs(10), watchdog.lost(&ticket))
            .await
            .expect("lost() completes once the deadline passed");
        assert!(watchdog.is_lost(&ticket));
        assert_eq!(watchdog.renewed(), 0);
    }
}
