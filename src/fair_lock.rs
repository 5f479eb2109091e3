//! The fair lock: Redisson's `RFairLock` (protocol §4).
//!
//! [`FairLock`] is a thin wrapper around a [`Lock`] of kind `Fair`: the handle, the guard,
//! the wait loop and the release logic are the shared ones, and only the scripts differ (see
//! the `*_call` methods of [`Lock`]). This module also holds the two pieces of the shared
//! acquire path that only the fair kind uses: the pacing of retries while another waiter is
//! next in line, and the guard that takes a waiter out of the queue when it gives up.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::acquire::Attempt;
use crate::error::{Error, Result};
use crate::guard::Lease;
use crate::lock::{Lock, LockGuard};
use crate::LockOwner;

/// A reentrant distributed lock granted in order of arrival: FIFO, with a per-waiter
/// timeout. Shared with Java's `RFairLock` of the same name.
///
/// Waiters line up in a queue kept in Redis. When the lock is freed only the first waiter
/// is told (on its own channel), and only it may take the lock, so waiters get it in the
/// order they asked, across processes and Java clients alike. [`try_lock`](FairLock::try_lock)
/// never joins the queue: it succeeds only when the lock is free and nobody waits.
///
/// Each waiter has a deadline in the queue: the deadline of the waiter before it plus its
/// own wait ([`LockClientBuilder::fair_wait_timeout`](crate::LockClientBuilder::fair_wait_timeout)
/// for [`lock`](FairLock::lock), the given wait for [`try_lock_for`](FairLock::try_lock_for)).
/// A waiter whose deadline passed while it was first in line counts as gone and is dropped
/// from the queue, so a waiter whose process died holds up the others for about its wait
/// at most, counted from when the hold it last saw would have ended. A waiter that keeps asking never loses its place,
/// however long the hold lasts: whenever it looks while first in line it moves its
/// deadline (and the ones behind it, by as much) to the holder's remaining lease plus its
/// wait from now. Java waiters do not (see the builder's `fair_wait_timeout`). A waiter that
/// gives up (its `try_lock_for` wait ran out, or its future was dropped) leaves the queue at
/// once.
///
/// Deadlines are compared with each client's wall clock: the clients of one lock need
/// roughly synchronised clocks, as with Redisson.
///
/// A `FairLock` is a cheap handle (no I/O to make one, `Clone`, `Send + Sync`). Holds are
/// the same [`LockGuard`]s as a [`Lock`]'s; every call names the [`LockOwner`] it acts for,
/// and the same owner re-enters.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.fair_lock("printer");
/// let guard = lock.lock(&me).await?; // after everyone who asked before
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    inner: Lock,
}

impl FairLock {
    pub(crate) fn new(inner: Lock) -> FairLock {
        FairLock { inner }
    }

    pub(crate) fn into_lock(self) -> Lock {
        self.inner
    }

    /// The same lock with another lease policy for the holds it takes from now on.
    /// [`Lease::Fixed`] disables the watchdog for those holds.
    pub fn with_lease(self, lease: Lease) -> FairLock {
        FairLock {
            inner: self.inner.with_lease(lease),
        }
    }

    /// The name as given to [`LockClient::fair_lock`](crate::LockClient::fair_lock).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The lease policy of this handle.
    pub fn lease(&self) -> Lease {
        self.inner.lease()
    }

    /// Takes the lock for `owner` after every waiter queued before it, waiting as long as it
    /// takes.
    ///
    /// If `owner` already holds it, this re-enters at once (the hold count grows by one; the
    /// key lives at least this lease from now, never less than before). Otherwise `owner` joins the queue, with the client's
    /// `fair_wait_timeout` as its wait, and is woken by a message on its own channel when it
    /// is first in line and the lock is freed (by a Rust or Java client), and in any case
    /// when the holder's lease runs out.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future leaves no hold behind (a hold taken by a script that
    /// was already on the wire is released as soon as its reply arrives), and a queued
    /// waiter leaves the queue at once, so the waiters behind it are not held up.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached at the first
    /// attempt (while waiting, transient errors are retried until Redis has been
    /// unreachable for `watchdog_timeout`), [`Error::WrongType`](crate::Error::WrongType)
    /// when the key, the queue or the deadline set holds another type,
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty name or a bad
    /// lease, [`Error::Closed`](crate::Error::Closed) after shutdown. A waiter that fails
    /// leaves the queue in the background (at shutdown, before
    /// [`shutdown`](crate::LockClient::shutdown) returns).
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<LockGuard>> + Send + 'static {
        self.inner.lock(owner)
    }

    /// One attempt: takes (or re-enters) the lock if it is free for `owner`, without
    /// waiting. `Ok(None)` when someone holds it or another owner is first in line. It never
    /// joins the queue.
    ///
    /// # Cancel safety
    /// As [`lock`](FairLock::lock): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`lock`](FairLock::lock).
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock(owner)
    }

    /// Takes the lock for `owner`, waiting in the queue at most `wait`. `Ok(None)` when the
    /// wait ran out; the waiter has then left the queue. `wait` is also this waiter's wait in
    /// the queue (instead of `fair_wait_timeout`), as in Redisson. A zero `wait` makes
    /// exactly one attempt without queueing, like [`try_lock`](FairLock::try_lock).
    ///
    /// # Cancel safety
    /// As [`lock`](FairLock::lock): dropping the future leaves no hold behind and leaves the
    /// queue at once.
    ///
    /// # Errors
    /// As [`lock`](FairLock::lock); also
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `wait` is too long to
    /// add to the current time (use [`lock`](FairLock::lock) to wait without a limit).
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock_for(owner, wait)
    }

    /// Releases one hold of `owner` without a guard, Java style: the counterpart of a guard
    /// given up with [`LockGuard::detach`]. The lock is freed, and the first waiter told, when
    /// the last hold is released; until then the key lives on for the owner's other holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when `owner` holds nothing. Unlike Java,
    /// which reports success when the lock had already expired, this is an error too; the
    /// first waiter is told all the same. [`Error::Redis`](crate::Error::Redis) when Redis
    /// could not be reached even after resending (resending is safe: the unlock latch makes
    /// the release happen at most once).
    pub async fn unlock(&self, owner: &LockOwner) -> Result<()> {
        self.inner.unlock(owner).await
    }

    /// Frees the lock whoever holds it, and tells the first waiter. `true` when it was held.
    /// The queue is left as it is.
    ///
    /// # Correctness
    /// This breaks mutual exclusion for the current holder, which goes on believing it holds
    /// the lock until its guard's [`lease_lost`](LockGuard::lease_lost) fires.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty name.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }

    /// Whether anyone (in any process) holds the lock. Waiters do not count.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached,
    /// [`Error::WrongType`](crate::Error::WrongType) when the key is not a lock hash.
    pub async fn is_locked(&self) -> Result<bool> {
        self.inner.is_locked().await
    }

    /// Whether `owner` holds the lock.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached,
    /// [`Error::WrongType`](crate::Error::WrongType) when the key is not a lock hash.
    pub async fn is_held_by(&self, owner: &LockOwner) -> Result<bool> {
        self.inner.is_held_by(owner).await
    }

    /// How many times `owner` holds the lock (0 when it does not).
    ///
    /// # Errors
    /// As [`is_held_by`](FairLock::is_held_by).
    pub async fn hold_count(&self, owner: &LockOwner) -> Result<u64> {
        self.inner.hold_count(owner).await
    }

    /// How long the current hold lasts unless renewed or released; `None` when the lock is
    /// free. A hold without expiry reports `Duration::MAX`.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.inner.remaining_lease().await
    }
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.inner.name())
            .field("lease", &self.inner.lease())
            .finish()
    }
}

/// The caller's wall clock in epoch ms: the `now` of the fair scripts (protocol §4.1).
pub(crate) fn epoch_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(crate::watchdog::millis)
        .unwrap_or(0)
}

/// First and longest pause between two attempts of a queued waiter whose reply gave no
/// time to wait (0 or negative: the lock is free but another waiter is first in line, or
/// the estimate is unknown). Java retries at once, over and over (protocol §4.8); a pause
/// keeps the order, since the first waiter is woken by its own message anyway.
const PACE: (u64, u64) = (4, 64);

/// Shapes a fair waiter's replies into its sleeps between attempts: a busy reply without a
/// positive wait becomes a doubling, bounded pause, and no sleep is longer than half the
/// waiter's wait in the queue. Looking again within half its wait keeps a waiter's place:
/// its deadline is refreshed whenever it looks while first in line (see
/// `lua/fair_acquire.lua`), and a waiter that becomes first in line without being woken
/// (the one before it took the lock) still looks again well before its deadline, whatever
/// the reply said (a holder's lease can be longer than the wait).
pub(crate) struct Pace {
    next_ms: AtomicU64,
    longest: Duration,
}

impl Pace {
    /// `wait_ms`: the waiter's wait in the queue (the script's ARGV[3]).
    pub(crate) fn new(wait_ms: i64) -> Pace {
        Pace {
            next_ms: AtomicU64::new(PACE.0),
            longest: Duration::from_millis((wait_ms / 2).max(1) as u64),
        }
    }

    /// Runs one attempt; a busy reply becomes the next sleep.
    pub(crate) async fn paced<T>(
        &self,
        attempt: impl Future<Output = Result<Attempt<T>>>,
    ) -> Result<Attempt<T>> {
        Ok(match attempt.await? {
            Attempt::Busy { ttl: Some(ttl) } if !ttl.is_zero() => {
                self.next_ms.store(PACE.0, Ordering::Relaxed);
                Attempt::Busy {
                    ttl: Some(ttl.min(self.longest)),
                }
            }
            Attempt::Busy { .. } => {
                let pause = self.next_ms.load(Ordering::Relaxed);
                self.next_ms
                    .store((pause * 2).min(PACE.1), Ordering::Relaxed);
                Attempt::Busy {
                    ttl: Some(Duration::from_millis(pause).min(self.longest)),
                }
            }
            acquired => acquired,
        })
    }
}

/// Takes a queued waiter out of the queue unless disarmed: when the wait ran out
/// ([`leave`](QueueExit::leave)) and when the waiting future is dropped or fails (in the
/// background), so that the waiters behind it move up at once instead of at its deadline.
/// While armed, the waiter is registered with the client, whose shutdown takes it out of
/// the queue (it can no longer leave on its own then).
///
/// An acquire script still on the wire when the future is dropped is sent before the
/// leave script on the same connection, so it runs first; if it took the lock, it already
/// left the queue, the leave script finds nothing to do, and [`InFlight`] releases the hold.
///
/// [`InFlight`]: crate::acquire::InFlight
pub(crate) struct QueueExit {
    armed: Option<Armed>,
}

struct Armed {
    lock: Lock,
    owner: LockOwner,
    wait_ms: i64,
    /// Its registration with the client (see `Engine::queue_exits`).
    id: u64,
}

impl QueueExit {
    /// Arms the exit of `owner`, which is about to join `lock`'s queue with wait `wait_ms`.
    pub(crate) fn arm(lock: Lock, owner: LockOwner, wait_ms: i64) -> QueueExit {
        let id = lock
            .engine()
            .queue_exits
            .register(lock.leave_call(&owner, wait_ms));
        QueueExit {
            armed: Some(Armed {
                lock,
                owner,
                wait_ms,
                id,
            }),
        }
    }

    /// The waiter got the lock, which took it out of the queue.
    pub(crate) fn disarm(mut self) {
        if let Some(armed) = self.armed.take() {
            armed.lock.engine().queue_exits.unregister(armed.id);
        }
    }

    /// Leaves the queue now. Should the caller drop this future, the drop still leaves.
    pub(crate) async fn leave(mut self) {
        if let Some(armed) = &self.armed {
            leave(armed).await;
        }
        self.armed = None;
    }
}

impl Drop for QueueExit {
    fn drop(&mut self) {
        let Some(armed) = self.armed.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move { leave(&armed).await })),
            Err(_) => tracing::warn!(
                lock = armed.lock.name(),
                "fair waiter dropped outside a Tokio runtime; it stays queued until its deadline or the client's shutdown"
            ),
        }
    }
}

async fn leave(armed: &Armed) {
    let Armed {
        lock,
        owner,
        wait_ms,
        id,
    } = armed;
    match lock.leave_queue(owner, *wait_ms).await {
        Ok(()) => {}
        // Shutting down: the shutdown takes the waiter out (it is still registered).
        Err(Error::Closed) => return,
        Err(error) => {
            tracing::warn!(%error, lock = lock.name(), %owner, "leaving the fair queue failed; the waiter stays queued until its deadline")
        }
    }
    lock.engine().queue_exits.unregister(*id);
}
