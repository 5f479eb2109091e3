//! Guards: [`LockGuard`] (one hold, released on unlock or drop), its part in the client's
//! registry of holds, and lease-lost signalling.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use std::fmt;

use crate::base::background::spawn_or;
use crate::base::boxed::{boxed_in_place, BoxFuture};
use crate::base::error::{Error, Result};
use crate::base::observe;
use crate::base::owner::LockOwner;
use crate::base::time::{lease_end, millis};
use crate::core::kind::{HoldKind, Plain};
use crate::core::lease::Lease;
use crate::core::protocol::Target;
use crate::core::release::{release_settled, By, Released};
use crate::engine::hand_offs::Run;
use crate::engine::watchdog::{HoldKey, Leaving, Ticket, Watchdog};
use crate::engine::Engine;

/// One guard's part in its hold: its entry in the client's registry of holds (renewed by
/// the watchdog, or with a fixed lease), and the news that the hold is lost. The guard
/// passes its client's watchdog to each call.
pub(crate) struct Renewal {
    ticket: Ticket,
    /// Whether the guard still has its part (it gives it up when released or detached).
    registered: bool,
}

impl Renewal {
    /// Records a hold acquired by a command sent at `sent_at`; `new_hold` when the script
    /// found no hold of the owner (not a re-entry).
    pub(crate) fn start(
        engine: &Arc<Engine>,
        lease: Lease,
        hold: HoldKey,
        sent_at: Instant,
        new_hold: bool,
    ) -> Renewal {
        let ends = lease
            .fixed_duration()
            .map(|lease| lease_end(sent_at, lease));
        let ticket = engine.watchdog().register(hold, sent_at, ends, new_hold);
        Renewal {
            ticket,
            registered: true,
        }
    }

    /// Gives up this guard's part (renewal stops with the hold's last renewed guard), first
    /// thing in unlock and drop. `None` when the hold is already known to be lost, or the
    /// part was given up before: the release must then touch nothing, since the owner may
    /// hold the lock again by a newer hold.
    pub(crate) fn finish(&mut self, watchdog: &Watchdog) -> Option<Leaving> {
        if !std::mem::take(&mut self.registered) {
            return None;
        }
        watchdog.leave(&self.ticket)
    }

    /// Keeps the hold (and its renewal) after the guard is gone: the registration stays
    /// until [`Lock::unlock`](crate::Lock::unlock) releases the hold.
    pub(crate) fn detach(&mut self) {
        self.registered = false;
    }

    /// Whether the hold is lost: the watchdog said so, or a lease's deadline passed.
    pub(crate) fn is_lost(&self, watchdog: &Watchdog) -> bool {
        watchdog.is_lost(&self.ticket)
    }

    pub(crate) fn lost(&self, watchdog: &Watchdog) -> impl Future<Output = ()> + Send + 'static {
        watchdog.lost(&self.ticket)
    }
}

/// A release that completes even when its caller stops waiting: dropped before it is done
/// (or before its first poll), it finishes on the runtime, as a dropped guard's release does.
pub(crate) struct Finishing<T: Send + 'static> {
    release: Option<BoxFuture<T>>,
}

impl<T: Send + 'static> Finishing<T> {
    /// The release `make` returns (made in its box: see [`boxed_in_place`]).
    pub(crate) fn new<F>(make: impl FnOnce() -> F) -> Finishing<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        Finishing {
            release: Some(boxed_in_place(make)),
        }
    }
}

impl<T: Send + 'static> Future for Finishing<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let release = self
            .release
            .as_mut()
            .expect("Finishing polled after completion");
        let done = std::task::ready!(release.as_mut().poll(cx));
        self.release = None;
        Poll::Ready(done)
    }
}

impl<T: Send + 'static> Drop for Finishing<T> {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release_in_background(async move { drop(release.await) });
        }
    }
}

/// Spawns `release` when a guard is dropped without `unlock`.
pub(crate) fn release_in_background(release: impl Future<Output = ()> + Send + 'static) {
    spawn_or(release, || {
        tracing::warn!(
            "guard dropped outside a Tokio runtime; its hold expires with its lease instead"
        )
    });
}

/// One hold of an exclusive lock, or of one side of a read-write lock. Release it with
/// [`unlock`](LockGuard::unlock).
///
/// `H` says which hold it is and what it carries: [`Plain`] for [`Lock`](crate::Lock),
/// [`FairLock`](crate::FairLock), [`SpinLock`](crate::SpinLock) and the non-reentrant locks,
/// [`Token`](crate::kind::Token) for a [`FencedGuard`](crate::FencedGuard) (with its
/// fencing token), [`ReadHold`](crate::kind::ReadHold) and
/// [`WriteHold`](crate::kind::WriteHold) for a [`ReadGuard`](crate::ReadGuard) and a
/// [`WriteGuard`](crate::WriteGuard).
///
/// Dropping the guard without `unlock` stops its renewal at once and releases the hold in
/// the background; `unlock().await` is the way to release it now and learn of errors.
#[must_use = "dropping the guard releases the lock in the background"]
#[clippy::has_significant_drop]
pub struct LockGuard<H: HoldKind = Plain> {
    holding: Holding,
    hold: H,
}

impl<H: HoldKind> LockGuard<H> {
    /// The guard of `holding`, taken by an acquisition that answered `token`.
    pub(crate) fn new(holding: Holding, token: Option<u64>) -> LockGuard<H> {
        LockGuard {
            holding,
            hold: H::new(token),
        }
    }

    /// Releases this hold (the lock is freed with its owner's last hold). A guard releases
    /// only the hold it acquired: if that hold was lost, a newer hold of the same owner is
    /// left alone.
    ///
    /// # Cancel safety
    /// Cancel-safe: the guard gives up its part when `unlock` is called, and a future dropped
    /// before it is done (even before its first poll) finishes the release in the
    /// background, resends included, exactly as a dropped guard does.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold was lost before (lease expired, force-unlocked, data
    /// lost; nothing is sent when this client already knows it); [`Error::Redis`] when Redis
    /// could not be reached even after resending; [`Error::Closed`] after the client's
    /// shutdown. In the error case the hold, if it still exists, is no longer renewed and
    /// frees itself when its lease runs out.
    pub fn unlock(self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.holding.unlock()
    }

    /// Gives up the guard but keeps the hold (and its watchdog renewal); release it later
    /// with the handle's `unlock(&owner)` (`unlock_read`/`unlock_write` for a read-write
    /// lock), Java style.
    pub fn detach(mut self) {
        self.holding.active = false;
        self.holding.renewal.detach();
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.holding.lock.name
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &LockOwner {
        &self.holding.owner
    }

    /// The fencing token this hold was taken with: `Some` exactly for a fenced hold (see
    /// [`FencedGuard::token`](crate::FencedGuard::token)).
    pub fn fence_token(&self) -> Option<u64> {
        self.hold.token()
    }

    /// How long the lock's key lives unless renewed or released, as Redis reports it now;
    /// `None` when the key is gone (the hold is lost).
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.holding.lock.remaining_lease().await
    }

    /// Completes when the hold is known to be lost: the watchdog found it gone, or could not
    /// reach Redis before the lease ran out, or (for a fixed lease) the lease ended. A lease
    /// counts as ended 5 ms before the key can expire on the server (a margin for the timer's
    /// millisecond ticks), so this completes before another owner can take the lock, unless
    /// the process is not run for longer than that. It also completes when the hold ends by
    /// its release: the last of the owner's guards on this lock unlocked or dropped (a
    /// re-entry's release leaves the hold to the others). Meant for `tokio::select!` beside
    /// the work the lock protects; then [`unlock`](LockGuard::unlock) answers `NotHeld` at
    /// once. For a fenced hold, writes made after that carry a token that the resource
    /// rejects once a newer holder reached it.
    ///
    /// # Cancel safety
    /// Cancel-safe; it only watches.
    pub fn lease_lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let holding = &self.holding;
        holding.renewal.lost(holding.lock.engine.watchdog())
    }

    /// Whether [`lease_lost`](LockGuard::lease_lost) has completed.
    pub fn is_lease_lost(&self) -> bool {
        let holding = &self.holding;
        holding.renewal.is_lost(holding.lock.engine.watchdog())
    }
}

impl<H: HoldKind> fmt::Debug for LockGuard<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut guard = f.debug_struct(H::GUARD);
        guard
            .field("name", &self.holding.lock.name)
            .field("owner", &self.holding.owner);
        if let Some(token) = self.fence_token() {
            guard.field("token", &token);
        }
        guard.finish()
    }
}

/// What every guard holds, whatever its kind: the hold of one owner on one lock, its part
/// in the registry of holds, and the release when it is unlocked or dropped.
pub(crate) struct Holding {
    lock: Arc<Target>,
    owner: LockOwner,
    renewal: Renewal,
    active: bool,
    /// The lease of the handle that took the hold, for a partial release when this client
    /// knows of no other hold of the owner.
    lease_ms: i64,
    held_since: observe::Since,
    /// Where the hold stands in a run of hand-offs between this client's tasks.
    run: Run,
}

impl Holding {
    pub(crate) fn new(
        lock: Arc<Target>,
        owner: LockOwner,
        renewal: Renewal,
        lease_ms: i64,
    ) -> Holding {
        Holding {
            lock,
            owner,
            renewal,
            active: true,
            lease_ms,
            held_since: observe::Since::now(),
            run: Run::start(),
        }
    }

    /// The hold, handed over as the next of run `run`.
    pub(crate) fn in_run(mut self, run: Run) -> Holding {
        self.run = run;
        self
    }

    fn unlock(mut self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.active = false;
        let departure = self.depart();
        Finishing::new(|| async move { departure?.release().await })
    }

    /// Gives up this guard's part and returns what releasing its hold takes, or `NotHeld` at
    /// once when the hold is already known to be lost: whatever the owner holds now is a
    /// newer hold, not this one, so nothing is sent.
    fn depart(&mut self) -> Result<Departure> {
        // After shutdown nothing is sent: the hold expires with its lease.
        self.lock.engine.check_open()?;
        observe::held(self.lock.kind.kind(), self.held_since);
        let Some(Leaving {
            generation,
            keep_alive,
        }) = self.renewal.finish(self.lock.engine.watchdog())
        else {
            return Err(Error::not_held(&self.lock.name, &self.owner));
        };
        Ok(Departure {
            lock: self.lock.clone(),
            owner: self.owner.clone(),
            // Long enough for the owner's other holds that this client knows of.
            lease_ms: keep_alive.map_or(self.lease_ms, millis),
            generation,
            run: self.run,
        })
    }
}

/// The release a guard that gave up its part calls for. Small: the release's own future
/// (kilobytes) is made where it is awaited, not carried in here.
struct Departure {
    lock: Arc<Target>,
    owner: LockOwner,
    lease_ms: i64,
    generation: u64,
    run: Run,
}

impl Departure {
    async fn release(self) -> Result<()> {
        let Departure {
            lock,
            owner,
            lease_ms,
            generation,
            run,
        } = self;
        let by = By::Guard;
        match release_settled(&lock, &owner, lease_ms, Some(generation), by, Some(run)).await? {
            Released::NotHeld => Err(Error::not_held(&lock.name, &owner)),
            Released::Partly | Released::Fully | Released::Handed { .. } => Ok(()),
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let Ok(departure) = self.depart() else {
            return;
        };
        let name = self.lock.name.clone();
        release_in_background(async move {
            match departure.release().await {
                Ok(()) | Err(Error::NotHeld { .. }) => {}
                Err(error) => {
                    tracing::warn!(%error, lock = %name, "releasing a dropped guard failed; the hold expires with its lease")
                }
            }
        });
    }
}
