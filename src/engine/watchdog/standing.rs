//! What a hold's guards know of it without asking Redis, and the watchdog's clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The word of a [`Standing`] while the hold stands and no hold of it is renewed by the
/// watchdog (fixed leases are timed by their own guards).
pub(super) const HELD: u64 = u64::MAX;
/// The word of a [`Standing`] once the hold is lost, for good.
pub(super) const LOST: u64 = u64::MAX - 1;
/// The latest deadline a word can hold (about 584 years after the watchdog started).
pub(super) const LAST_DEADLINE: u64 = u64::MAX - 2;

/// What the guards of a hold know of it, without asking Redis: held (until the watchdog
/// lease's deadline while a hold of it is renewed), or lost. One atomic word, so a guard's
/// look costs no lock, and a notification for the guards awaiting the loss.
#[derive(Debug)]
#[repr(C)]
pub(super) struct Standing {
    /// [`HELD`], [`LOST`], or the deadline on the watchdog's [`Clock`]. First (see [`Hold`]).
    pub(super) word: AtomicU64,
    /// Woken when the hold becomes lost; a deadline passing is awaited with a timer.
    pub(super) lost: Notify,
}

impl Standing {
    pub(super) fn new() -> Standing {
        Standing {
            word: AtomicU64::new(HELD),
            lost: Notify::new(),
        }
    }

    /// Whether the hold stands at `now`; if it does and `next` is given, the deadline becomes
    /// `next` ([`HELD`]: none). A deadline that passed by `now` makes the hold lost, for
    /// good: checking and changing are one atomic step, so the watchdog never renews a hold
    /// that a guard was told is lost.
    pub(super) fn settle(&self, now: u64, next: Option<u64>) -> bool {
        self.update(now, |word| next.unwrap_or(word))
    }

    /// A renewal answered at `now`: the deadline becomes `next` if the hold stands and is
    /// still renewed (one whose last renewed guard left meanwhile keeps no deadline, or
    /// the watchdog would time its fixed leases). Whether the hold stands.
    pub(super) fn renew(&self, now: u64, next: u64) -> bool {
        self.update(now, |word| if word == HELD { HELD } else { next })
    }

    /// [`settle`](Self::settle) with the new word made by `next` from the current one.
    pub(super) fn update(&self, now: u64, next: impl Fn(u64) -> u64) -> bool {
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
    pub(super) fn holds_at(&self, now: u64) -> bool {
        self.settle(now, None)
    }

    /// Whether the hold was found lost (not merely past its deadline, which is only found
    /// by a look at the clock).
    pub(super) fn is_lost(&self) -> bool {
        self.word.load(Ordering::Acquire) == LOST
    }

    /// The watchdog lease's deadline; `None` when lost or none is set.
    pub(super) fn deadline(&self) -> Option<u64> {
        let word = self.word.load(Ordering::Acquire);
        (word <= LAST_DEADLINE).then_some(word)
    }

    /// The hold is lost, for good.
    pub(super) fn lose(&self) {
        if self.word.swap(LOST, Ordering::AcqRel) != LOST {
            self.lost.notify_waiters();
        }
    }
}

/// The watchdog's clock: an instant as nanoseconds since the watchdog was made, so that a
/// deadline fits in a [`Standing`]'s word.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    pub(super) start: Instant,
}

impl Clock {
    /// `instant` on this clock; one before the start counts as the start, which only makes
    /// a deadline pass sooner.
    pub(super) fn at(self, instant: Instant) -> u64 {
        let nanos = instant.saturating_duration_since(self.start).as_nanos();
        u64::try_from(nanos).map_or(LAST_DEADLINE, |n| n.min(LAST_DEADLINE))
    }

    pub(super) fn now(self) -> u64 {
        self.at(Instant::now())
    }

    pub(super) fn instant(self, at: u64) -> Instant {
        self.start + Duration::from_nanos(at)
    }
}
