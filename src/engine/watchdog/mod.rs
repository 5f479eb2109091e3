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
//! [`TIMER_MARGIN`](crate::base::time::TIMER_MARGIN) (see [`lease_end`]). A guard reports its hold
//! lost once that deadline passes, even while a renewal is still on the wire, and the key
//! on the server, whose TTL started later, cannot have expired before. The standing is one
//! atomic word and one [`Notify`] per hold, shared by the registry and the hold's guards:
//! a hold costs no task and no channel.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::base::keys::Str;
use crate::base::observe;
use crate::base::time::lease_end;

mod registry;
mod renewal;
mod standing;
#[cfg(test)]
mod tests;

use registry::{Entry, Registered, Registry};
use standing::{Clock, Standing};

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
    /// Has the task renew every hold now (after a move to another master).
    renew_now: Arc<Notify>,
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
            renew_now: Arc::new(Notify::new()),
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

    /// What makes the renewal task renew every hold at once, rather than at its next tick:
    /// the failover watcher notifies it when the client moved to a new master.
    pub(crate) fn renew_now(&self) -> Arc<Notify> {
        self.renew_now.clone()
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
}
