//! The registry of holds: one entry per (lock, owner field), shared by its guards.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::standing::{Standing, HELD};
use super::{Hold, HoldKey};

/// A [`Hold`] as the registry files it: found by its [`HoldKey`].
pub(super) struct Registered(pub(super) Arc<Hold>);

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
pub(super) struct Entry {
    /// Holds with a watchdog lease: while there is one, the key is renewed.
    pub(super) renewed: u32,
    /// When each fixed-lease hold ends.
    pub(super) fixed: Vec<Instant>,
    pub(super) slot: u16,
    /// A read hold (renewed by its own script): known here, the round need not read the
    /// hold's record for it.
    pub(super) reader: bool,
    /// When the first acquire reply of this hold was filed.
    pub(super) filed_at: Instant,
}

impl Entry {
    pub(super) fn is_empty(&self) -> bool {
        self.renewed == 0 && self.fixed.is_empty()
    }

    /// How long the key must live for this entry's holds: the watchdog timeout while one is
    /// renewed, and until the last fixed lease ends, whichever is longer; `None` when no
    /// hold is known.
    pub(super) fn longest(&self, timeout: Duration, now: Instant) -> Option<Duration> {
        Self::longest_of(self.renewed > 0, self.fixed.iter().max(), timeout, now)
    }

    /// [`longest`](Self::longest) once [`Watchdog::release_one`] has ended one of them.
    pub(super) fn longest_after_release_one(
        &self,
        timeout: Duration,
        now: Instant,
    ) -> Option<Duration> {
        if self.renewed > 0 {
            return Self::longest_of(self.renewed > 1, self.fixed.iter().max(), timeout, now);
        }
        // The fixed lease that ends first goes: the others end no later than the last.
        let last = (self.fixed.len() > 1)
            .then(|| self.fixed.iter().max())
            .flatten();
        Self::longest_of(false, last, timeout, now)
    }

    pub(super) fn longest_of(
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
    pub(super) fn keeps_key(&self, now: Instant) -> bool {
        self.renewed > 0 || self.fixed.iter().any(|end| *end > now)
    }

    pub(super) fn remove_fixed(&mut self, end: Instant) {
        if let Some(at) = self.fixed.iter().position(|e| *e == end) {
            self.fixed.swap_remove(at);
        }
    }

    /// A renewed hold left: when none is renewed any more, only fixed leases remain, which
    /// their guards time themselves; unless the watchdog lease ran out meanwhile, which
    /// stays lost.
    pub(super) fn renewed_hold_left(&mut self, standing: &Standing, now: u64) {
        self.renewed = self.renewed.saturating_sub(1);
        if self.renewed == 0 {
            standing.settle(now, Some(HELD));
        }
    }
}

pub(super) struct Registry {
    pub(super) holds: HashMap<Registered, Entry>,
    pub(super) closed: bool,
}

impl Registry {
    /// The hold registered under `key`.
    pub(super) fn hold(&self, key: &HoldKey) -> Option<&Arc<Hold>> {
        self.holds
            .get_key_value(key)
            .map(|(registered, _)| &registered.0)
    }

    /// Whether `hold` is the one registered under its key. A hold leaves the registry lost
    /// (every way out marks it so, under the registry's lock), so one that is not lost
    /// needs no lookup: the watchdog asks this of every hold in every round.
    pub(super) fn is_current(&self, hold: &Arc<Hold>) -> bool {
        !hold.standing.is_lost()
            || (self.hold(&hold.key)).is_some_and(|current| Arc::ptr_eq(current, hold))
    }

    /// The entry of `hold`, while `hold` is the one registered under its key.
    pub(super) fn entry_of(&mut self, hold: &Arc<Hold>) -> Option<&mut Entry> {
        if !self.is_current(hold) {
            return None;
        }
        self.holds.get_mut(&hold.key)
    }

    /// The hold of `key` leaves the registry: its guards learn that it is lost. Every hold
    /// leaves through here, but for those dropped in bulk: at shutdown, each is told the
    /// same way, and a lapsed one was lost when its lapse was seen.
    pub(super) fn remove(&mut self, key: &HoldKey) {
        if let Some((registered, _)) = self.holds.remove_entry(key) {
            registered.0.standing.lose();
        }
    }
}
