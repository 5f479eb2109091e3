//! Hand-offs, the waiter's side (see [`hand_offs`](crate::engine::hand_offs)): a waiter of a
//! kind that hands over waits in its client's line for a hold as well as for an unlock
//! message; a guard's last release gives the lock to the first of that line (the release's
//! side is [`Heirship`](crate::core::release::Heirship)).
//!
//! A hold handed over is registered with the watchdog by the release that handed it, before
//! the waiter hears of it, and travels to the waiter as a [`Holding`]: a waiter gone by then
//! (its call dropped, its deadline passed) drops it, and the drop releases the hold as a
//! dropped guard's does. So a hold handed over is always either some task's guard or being
//! released, never left to its lease.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::base::owner::LockOwner;
use crate::core::guard::{Holding, Renewal};
use crate::core::lease::Lease;
use crate::core::protocol::Target;
use crate::core::wait::Wait;
use crate::engine::hand_offs::{Heir, Line, Queued, Run};

/// A waiter in its client's line for a hold handed over.
struct Waiting {
    lock: Arc<Target>,
    owner: LockOwner,
    lease: Lease,
    lease_ms: i64,
    queued: Option<Queued>,
    turn: Arc<Turn>,
    to: oneshot::Sender<(Holding, Option<u64>)>,
}

impl Heir for Waiting {
    fn owner(&self) -> &LockOwner {
        &self.owner
    }

    fn lease_ms(&self) -> i64 {
        self.lease_ms
    }

    fn queued(&self) -> Option<&Queued> {
        self.queued.as_ref()
    }

    fn is_gone(&self) -> bool {
        self.to.is_closed()
    }

    fn claim(&self) -> bool {
        !self.is_gone() && self.turn.claim()
    }

    fn unclaim(&self) {
        self.turn.unclaim();
    }

    fn take(self: Box<Self>, sent_at: Instant, run: Run, confirmed: bool, token: Option<u64>) {
        let Waiting {
            lock,
            owner,
            lease,
            lease_ms,
            to,
            ..
        } = *self;
        let renewal = Renewal::start(&lock.engine, lease, lock.hold_key(&owner), sent_at, true);
        let holding = Holding::new(lock, owner, renewal, lease_ms).in_run(run);
        if confirmed {
            // A waiter gone meanwhile drops it, and the drop releases the hold.
            let _ = to.send((holding, token));
        }
        // Else dropped here, which releases it: the waiter, told nothing, waits on.
    }
}

/// Whose move it is in one waiter's wait: its own acquire attempt's, or a release's that
/// took it as heir. Never both: an attempt the server ran after the hand-off would re-enter
/// the hold handed over.
#[derive(Default)]
pub(crate) struct Turn {
    state: AtomicU8,
    changed: Notify,
}

/// Neither an attempt nor a release is under way.
const IDLE: u8 = 0;
/// The waiter's attempt is on the wire.
const TRYING: u8 = 1;
/// A release took the waiter as its heir.
const CLAIMED: u8 = 2;

impl Turn {
    /// Makes and runs the acquire `attempt` once no release holds this waiter as heir.
    pub(crate) async fn attempt<T, F: Future<Output = T>>(&self, attempt: impl FnOnce() -> F) -> T {
        loop {
            // Made before the look: an unclaim after it wakes this call.
            let changed = self.changed.notified();
            if self.swap(IDLE, TRYING) {
                break;
            }
            changed.await;
        }
        let _done = Tried(self);
        attempt().await
    }

    fn claim(&self) -> bool {
        self.swap(IDLE, CLAIMED)
    }

    fn unclaim(&self) {
        if self.swap(CLAIMED, IDLE) {
            self.changed.notify_waiters();
        }
    }

    fn swap(&self, from: u8, to: u8) -> bool {
        let state = &self.state;
        state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Ends an attempt, answered or dropped.
struct Tried<'a>(&'a Turn);

impl Drop for Tried<'_> {
    fn drop(&mut self) {
        self.0.swap(TRYING, IDLE);
    }
}

/// Waits in `lock`'s line of its client for a hold handed over to `owner`, with the lease
/// `lease` (`lease_ms` in ms), taking turns with the waiter's attempts by `turn`; `queued`:
/// its place in the lock's queue in Redis, for a fair lock's waiter. Dropping the future
/// leaves the line; a hold handed over as it is dropped is released.
pub(crate) fn handed(
    lock: &Arc<Target>,
    owner: &LockOwner,
    (lease, lease_ms): (Lease, i64),
    (turn, queued): (Arc<Turn>, Option<Queued>),
) -> impl Future<Output = (Holding, Option<u64>)> + Send + 'static {
    let (lock, owner) = (lock.clone(), owner.clone());
    async move {
        loop {
            let (to, from) = oneshot::channel();
            let waiting = Waiting {
                lock: lock.clone(),
                owner: owner.clone(),
                lease,
                lease_ms,
                queued: queued.clone(),
                turn: turn.clone(),
                to,
            };
            let line = lock.hand_off_line();
            let id = lock.engine.hand_offs().join(&line, Box::new(waiting));
            let place = InLine {
                lock: &lock,
                line,
                id,
            };
            if let Ok(handed) = from.await {
                return handed;
            }
            // A release took this waiter and failed (its outcome may be unknown): wait in
            // line again. Should the lock have gone to this owner after all, its next
            // attempt finds it held (a re-entry), as after any release whose reply was lost.
            drop(place);
            turn.unclaim();
        }
    }
}

/// Whether a `lock()` of `owner` goes straight to the back of its client's line, without a
/// first attempt: when other tasks of the client wait for the lock (they are handed it in
/// turn, or woken by its release), and `owner` holds none of it that this client knows of
/// (a re-entry must not wait behind them, nor should a write lock's upgrade, refused at its
/// first attempt). Otherwise the stream of first attempts of tasks that just handed the lock
/// on would take it whenever it is freed, a round trip before any other client's waiter can,
/// and so starve them. Timed waits still look first.
pub(crate) fn queues_at_once(lock: &Target, owner: &LockOwner, wait: Wait) -> bool {
    let hand_offs = lock.engine.hand_offs();
    matches!(wait, Wait::Forever)
        && hand_offs.has_waiters()
        && hand_offs.has_line(&lock.hand_off_line())
        && !lock.kind.held_by(lock, owner)
}

/// A waiter's place in the line: dropping it leaves.
struct InLine<'a> {
    lock: &'a Target,
    line: Line,
    id: u64,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.lock.engine.hand_offs().leave(&self.line, self.id);
    }
}
