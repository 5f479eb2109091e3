//! [`ExclusiveLock<K>`]: the one handle type of every exclusive lock kind. What the kinds
//! share is written here once; what differs (how waiters line up, whether the holder may
//! re-enter, a fencing token) is the kind's protocol, in the kind's own file, and its docs
//! are on the kind's alias ([`Lock`](crate::Lock), [`FairLock`](crate::FairLock), …).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::owner::LockOwner;
use crate::core::guard::LockGuard;
use crate::core::handle::Handle;
use crate::core::kind::Kind;
use crate::core::lease::Lease;
use crate::core::wait::WaitStrategy;
use crate::engine::Engine;

/// A distributed exclusive lock of kind `K`, shared with Java's Redisson lock of the same
/// name and kind. Everyday code names it by its alias: [`Lock`](crate::Lock),
/// [`FairLock`](crate::FairLock), [`FencedLock`](crate::FencedLock),
/// [`SpinLock`](crate::SpinLock), [`NonReentrantLock`](crate::NonReentrantLock),
/// [`NonReentrantFairLock`](crate::NonReentrantFairLock); code generic over the kinds takes
/// an `ExclusiveLock<K>` with `K:` [`Kind`] (see [`kind`](crate::kind)).
///
/// A cheap handle: no I/O to make one, `Clone`, `Send + Sync`. It holds no owner: every
/// call names the [`LockOwner`] it acts for. Holds are [`LockGuard`]s.
pub struct ExclusiveLock<K: Kind> {
    pub(crate) inner: Handle,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Clone for ExclusiveLock<K> {
    fn clone(&self) -> Self {
        ExclusiveLock {
            inner: self.inner.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Kind> ExclusiveLock<K> {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Result<ExclusiveLock<K>> {
        Ok(ExclusiveLock {
            inner: Handle::new(engine, name, K::protocol())?,
            kind: PhantomData,
        })
    }

    pub(crate) fn into_handle(self) -> Handle {
        self.inner
    }

    /// The same lock with another lease policy for the holds it takes from now on.
    /// A [fixed lease](crate::Lease::fixed) disables the watchdog for those holds.
    pub fn with_lease(self, lease: Lease) -> ExclusiveLock<K> {
        ExclusiveLock {
            inner: self.inner.with_lease(lease),
            kind: PhantomData,
        }
    }

    /// The same lock with another way of waiting from now on; see
    /// [`WaitStrategy`](crate::WaitStrategy).
    pub fn with_wait_strategy(self, wait: WaitStrategy) -> ExclusiveLock<K> {
        ExclusiveLock {
            inner: self.inner.with_wait_strategy(wait),
            kind: PhantomData,
        }
    }

    /// The lock's name, as given to the `LockClient` method that made the handle.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The lease policy of the holds this handle takes.
    pub fn lease(&self) -> Lease {
        self.inner.lease()
    }

    /// How this handle waits.
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.inner.wait_strategy()
    }

    /// Takes the lock for `owner`, waiting as long as it takes.
    ///
    /// Waiting is woken by the unlock message of whoever releases the lock, Java
    /// clients included, and in any case when the holder's lease runs out; with
    /// [`WaitStrategy::Spin`](crate::WaitStrategy::Spin) it polls by its back-off
    /// instead.
    /// What a holder's second acquisition does, and in which order waiters get the lock, is
    /// told on each kind's alias: [`Lock`](crate::Lock), [`FairLock`](crate::FairLock), ….
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future at any point leaves no hold behind (a hold
    /// taken by a script already on the wire is released as soon as its reply
    /// arrives) and no place in a queue. So `tokio::time::timeout(lock.lock(&owner),
    /// d)` is safe.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached at the
    /// first attempt (while waiting, transient errors are retried until Redis has
    /// been unreachable for `watchdog_timeout`);
    /// [`Error::WrongType`](crate::Error::WrongType) when the lock's keys hold
    /// another type; [`Error::WouldDeadlock`](crate::Error::WouldDeadlock)
    /// where the kind refuses a second acquisition by the holder;
    /// [`Error::Closed`](crate::Error::Closed) after shutdown. When the connection
    /// fails while the acquire script is on the wire, the script may still have
    /// taken the hold; it is then never renewed and frees itself when its lease
    /// runs out.
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<LockGuard<K::Hold>>> + Send + 'static {
        self.inner.lock(owner)
    }

    /// One attempt: takes the lock for `owner` if it can be had now, without
    /// waiting (and, for a kind with a queue, without joining it). `Ok(None)` when
    /// it cannot.
    ///
    /// # Cancel safety
    /// As [`lock`](ExclusiveLock::lock).
    ///
    /// # Errors
    /// As [`lock`](ExclusiveLock::lock).
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<LockGuard<K::Hold>>>> + Send + 'static {
        self.inner.try_lock(owner)
    }

    /// Takes the lock for `owner`, waiting at most `wait`; `Ok(None)` when the wait
    /// ran out (a queued waiter has then left the queue). A zero `wait` makes
    /// exactly one attempt, like [`try_lock`](ExclusiveLock::try_lock).
    ///
    /// # Cancel safety
    /// As [`lock`](ExclusiveLock::lock).
    ///
    /// # Errors
    /// As [`lock`](ExclusiveLock::lock); also
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `wait` is too
    /// long to add to the current time.
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard<K::Hold>>>> + Send + 'static {
        self.inner.try_lock_for(owner, wait)
    }

    /// Releases one hold of `owner` without a guard, Java style: the counterpart of
    /// a guard given up with `detach`. The lock is freed (and its waiters told)
    /// with the last hold; until then the key lives on for the owner's other holds.
    ///
    /// # Cancel safety
    /// Cancel-safe: the release starts when this is called, and a future dropped
    /// before it is done (even before its first poll) finishes it in the background,
    /// resends included.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when `owner` holds nothing (nothing
    /// changes on the server), at once and sending nothing when this client knows
    /// the hold is lost (its lease ran out unrenewed); [`Error::Redis`](crate::Error::Redis) when Redis
    /// could not be reached even after resending (resending is safe: the unlock
    /// latch makes the release happen at most once).
    pub fn unlock(&self, owner: &LockOwner) -> impl Future<Output = Result<()>> + Send + 'static {
        self.inner.unlock(owner)
    }

    /// Frees the lock whoever holds it, and wakes its waiters. `true` when it was
    /// held.
    ///
    /// # Correctness
    /// This breaks mutual exclusion for the current holder, which goes on believing
    /// it holds the lock until its guard's `lease_lost()` fires (at the next watchdog
    /// renewal, when the holder is in this process or uses a watchdog).
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }

    /// Whether anyone (in any process, with any kind sharing the name) holds the
    /// lock. Waiters do not count.
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
    /// As [`is_locked`](ExclusiveLock::is_locked).
    pub async fn is_held_by(&self, owner: &LockOwner) -> Result<bool> {
        Ok(self.inner.hold_count(owner).await? > 0)
    }

    /// How many times `owner` holds the lock (0 when it does not).
    ///
    /// # Errors
    /// As [`is_locked`](ExclusiveLock::is_locked).
    pub async fn hold_count(&self, owner: &LockOwner) -> Result<u64> {
        self.inner.hold_count(owner).await
    }

    /// How long the current hold lasts unless renewed or released; `None` when the
    /// lock is free. A hold without expiry (possible only if something ran
    /// `PERSIST` on the key) reports `Duration::MAX`.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.inner.remaining_lease().await
    }
}

impl<K: Kind> fmt::Debug for ExclusiveLock<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(K::HANDLE)
            .field("name", &self.inner.name())
            .field("lease", &self.inner.lease())
            .field("wait_strategy", &self.inner.wait_strategy())
            .finish()
    }
}
