//! Hand-offs between the tasks of one client: a release that frees a lock one of the
//! client's own tasks is waiting for gives it to that task in the same script (see
//! `lua/lock_hand_off.lua` and `lua/write_release.lua`), so the waiter holds it one round
//! trip after the release began, with no message and no acquire script of its own. This file
//! keeps the client's waiters that may take such a hold, one line per lock and kind, in the
//! order they began to wait, and the bound that keeps other clients' waiters from starving.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use fred::types::Value;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::base::keys::Str;
use crate::base::owner::LockOwner;

/// Whether, and how many times in a row, an exclusive lock goes from one task of a client to
/// another in one script, before it is released for real so that waiters of other clients
/// (Java or Rust) get their chance. Which kinds hand over is listed at
/// [`LockClientBuilder::hand_off`](crate::LockClientBuilder::hand_off).
///
/// With hand-offs on, a release gives the lock to a waiting task of its own client only while
/// both bounds hold: fewer than [`max_in_row`](HandOff::max_in_row) hand-offs since the lock
/// was last free, and less than [`max_span`](HandOff::max_span) since the first hold of that
/// run was taken. The release after that frees the lock and publishes the unlock message, as
/// Redisson's does: every waiter, of any client, is woken and may take it.
///
/// The fair locks are not bounded by runs: they hand over only to a task first in their
/// queue in Redis, which other clients' waiters are in too, so the queue decides who is next.
///
/// # When to turn it on
/// When the tasks of one client queue on a hot lock, and other clients rarely want it: the
/// lock then changes hands in one round trip instead of three, and the client's waiters are
/// served in the order they asked. When several busy clients contend for the same lock, each
/// free moment decides which client gets the next run, and one client can win many runs in
/// a row: in the benchmarks, with two clients of 8 tasks each, a task waited up to 1.5 s
/// (11 ms with hand-offs off). A waiter of a client that is otherwise idle is served within
/// milliseconds.
///
/// # Default
/// [`HandOff::OFF`]: every last release frees the lock and publishes, as Redisson's.
/// [`HandOff::ON`] allows 16 hand-offs in a row within 50 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandOff {
    max_in_row: u32,
    max_span: Duration,
}

impl HandOff {
    /// 16 hand-offs in a row, within 50 ms.
    pub const ON: HandOff = HandOff {
        max_in_row: 16,
        max_span: Duration::from_millis(50),
    };

    /// Never hand over: every last release frees the lock and publishes (the default).
    pub const OFF: HandOff = HandOff {
        max_in_row: 0,
        max_span: Duration::ZERO,
    };

    /// At most `max_in_row` hand-offs in a row, and none once `max_span` has passed since
    /// the run's first hold was taken. Either zero turns hand-offs off.
    pub const fn new(max_in_row: u32, max_span: Duration) -> HandOff {
        HandOff {
            max_in_row,
            max_span,
        }
    }

    /// The most hand-offs in a row.
    pub const fn max_in_row(&self) -> u32 {
        self.max_in_row
    }

    /// The longest a run of hand-offs lasts, from its first hold on.
    pub const fn max_span(&self) -> Duration {
        self.max_span
    }

    /// Whether locks are ever handed over.
    pub(crate) fn is_on(&self) -> bool {
        self.max_in_row > 0 && !self.max_span.is_zero()
    }

    /// Whether a hold of run `run` may be handed to another task.
    pub(crate) fn allows(&self, run: Run) -> bool {
        run.handed < self.max_in_row && run.since.elapsed() < self.max_span
    }
}

impl Default for HandOff {
    fn default() -> HandOff {
        HandOff::OFF
    }
}

/// Where a hold stands in a run of hand-offs: since when the lock has gone from task to task
/// without being free, and how many times.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    since: Instant,
    handed: u32,
}

impl Run {
    /// A hold taken by an acquire script: the lock was free.
    pub(crate) fn start() -> Run {
        Run {
            since: Instant::now(),
            handed: 0,
        }
    }

    /// The run of a hold handed over by one of this run.
    pub(crate) fn next(self) -> Run {
        Run {
            handed: self.handed.saturating_add(1),
            ..self
        }
    }
}

/// A waiter that may take a hold handed over. Dropped when it is given nothing (the release
/// went otherwise), it goes on waiting as before.
pub(crate) trait Heir: Send + Sync + 'static {
    /// The owner the hold is handed to.
    fn owner(&self) -> &LockOwner;
    /// The lease in ms the hold gets.
    fn lease_ms(&self) -> i64;
    /// For a waiter of a kind whose waiters line up in Redis (the fair locks): its place
    /// there, which a hand-off takes it out of.
    fn queued(&self) -> Option<&Queued>;
    /// Whether the waiter stopped waiting.
    fn is_gone(&self) -> bool;
    /// Takes the waiter as a release's heir, unless it stopped waiting or its own acquire
    /// attempt is on the wire (that attempt would then re-enter the hold handed over, and
    /// Java would read a count of 2). Until [`unclaim`](Heir::unclaim)ed it makes no attempt.
    fn claim(&self) -> bool;
    /// The release handed nothing over: the waiter may attempt again.
    fn unclaim(&self);
    /// Gives the waiter the hold a script sent at `sent_at` handed over, next in run `run`,
    /// with the fencing `token` the script issued it (a fenced lock's). A waiter gone
    /// meanwhile releases it, so no hold is left that nobody owns. Not `confirmed` (no replica
    /// has the hand-off, which a failover could lose), the hold is released instead, and the
    /// waiter waits on.
    fn take(self: Box<Self>, sent_at: Instant, run: Run, confirmed: bool, token: Option<u64>);
}

/// How a waiter of a fair lock waits in the lock's queue in Redis: what a hand-off to it
/// writes as its own acquire would (see `lua/fair_release.lua`).
#[derive(Clone)]
pub(crate) struct Queued {
    /// The owner's trace key, which the hold handed over names the wait in.
    pub(crate) trace: Value,
    /// The wait's id.
    pub(crate) wait_id: Value,
    /// The waiter's wait in ms, as it joined the queue with.
    pub(crate) wait_ms: i64,
}

/// Which waiters a release may hand its lock to: those of the same lock key and kind.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Line {
    kind: &'static str,
    key: Str,
}

impl Line {
    pub(crate) fn new(kind: &'static str, key: &Str) -> Line {
        Line {
            kind,
            key: key.clone(),
        }
    }
}

/// The waiters of one line, with their ids, in the order they began to wait (ids grow).
type Heirs = VecDeque<(u64, Box<dyn Heir>)>;

/// The waiters of this client that may take a hold handed over, by line.
#[derive(Default)]
pub(crate) struct HandOffs {
    lines: Mutex<HashMap<Line, Heirs>>,
    /// How many waiters the lines hold: while none, a release or a `lock()` looks no further
    /// (no lock taken, nothing hashed).
    in_line: AtomicUsize,
    next_id: AtomicU64,
}

impl HandOffs {
    /// Puts `heir` at the back of `line`; the id takes it out again.
    pub(crate) fn join(&self, line: &Line, heir: Box<dyn Heir>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut lines = self.lines.lock();
        lines.entry(line.clone()).or_default().push_back((id, heir));
        self.in_line.fetch_add(1, Ordering::Relaxed);
        id
    }

    /// Takes the waiter `id` out of `line` (a no-op once a release took it).
    pub(crate) fn leave(&self, line: &Line, id: u64) {
        let mut lines = self.lines.lock();
        if let Some(heirs) = lines.get_mut(line) {
            if let Ok(at) = heirs.binary_search_by_key(&id, |(id, _)| *id) {
                let heir = heirs.remove(at);
                self.in_line.fetch_sub(1, Ordering::Relaxed);
                if heirs.is_empty() {
                    lines.remove(line);
                }
                // Dropped outside the lock: it may wake its waiter.
                drop(lines);
                drop(heir);
            }
        }
    }

    /// The first waiter of `line` that a release may claim (see [`Heir::claim`]), taken
    /// out of the line.
    pub(crate) fn first(&self, line: &Line) -> Option<(u64, Box<dyn Heir>)> {
        let mut lines = self.lines.lock();
        let heirs = lines.get_mut(line)?;
        let at = heirs.iter().position(|(_, heir)| heir.claim())?;
        let first = heirs.remove(at);
        self.in_line.fetch_sub(1, Ordering::Relaxed);
        if heirs.is_empty() {
            lines.remove(line);
        }
        first
    }

    /// Puts back a waiter [`first`](HandOffs::first) took, in its place, when the release
    /// handed nothing over.
    pub(crate) fn put_back(&self, line: &Line, id: u64, heir: Box<dyn Heir>) {
        heir.unclaim();
        if heir.is_gone() {
            return;
        }
        let mut lines = self.lines.lock();
        let heirs = lines.entry(line.clone()).or_default();
        let at = heirs.partition_point(|(other, _)| *other < id);
        heirs.insert(at, (id, heir));
        self.in_line.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether any waiter of this client is in line, for any lock.
    pub(crate) fn has_waiters(&self) -> bool {
        self.in_line.load(Ordering::Relaxed) > 0
    }

    /// Whether any waiter is in `line` (one may have stopped waiting since). Ask
    /// [`has_waiters`](HandOffs::has_waiters) first, which takes no lock.
    pub(crate) fn has_line(&self, line: &Line) -> bool {
        self.lines.lock().contains_key(line)
    }
}
