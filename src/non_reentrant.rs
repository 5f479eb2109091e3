//! The non-reentrant locks: Redisson's `getNonReentrantLock` and `getNonReentrantFairLock`
//! (protocol §8.2, §8.3).
//!
//! Both are thin wrappers around a [`Lock`] of the reentrant or fair kind whose acquire
//! scripts get Redisson's extra argument, with which they refuse a second acquisition by the
//! holder (an error reply that the client maps to [`Error::WouldDeadlock`]). Everything else
//! (hash, channel, releases, renewal, waiting, the fair queue) is the base kind's.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::handle::delegate_to_lock;
use crate::lock::{Lock, LockGuard};
use crate::wait::WaitStrategy;
#[cfg(doc)]
use crate::Error;
use crate::LockOwner;

/// A distributed lock that an owner can hold only once: taking it again while holding it
/// fails at once with [`Error::WouldDeadlock`], instead of re-entering. Shared with Java's
/// `getNonReentrantLock` (Redisson 4.4+) of the same name.
///
/// Useful where a second acquisition by the same owner is a bug (recursion into a critical
/// section that is not prepared for it): it shows up as an error, not as a silent re-entry
/// nor as a wait for oneself. Re-entry is judged by the [`LockOwner`], so a second handle on
/// the same name acting for the same owner is refused too.
///
/// The hold is the reentrant lock's (same hash, channel, unlock and renewal), always with a
/// count of 1, so one unlock frees it. A `NonReentrantLock` and a [`Lock`] of the same name
/// exclude each other. A cheap handle (no I/O to make one, `Clone`, `Send + Sync`).
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.non_reentrant_lock("import-job");
/// let guard = lock.lock(&me).await?;
/// assert!(matches!(
///     lock.try_lock(&me).await,
///     Err(redisson_lock::Error::WouldDeadlock(_))
/// ));
/// guard.unlock().await?; // one unlock frees it
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NonReentrantLock {
    inner: Lock,
}

delegate_to_lock!(NonReentrantLock);

impl NonReentrantLock {
    pub(crate) fn new(inner: Lock) -> NonReentrantLock {
        NonReentrantLock { inner }
    }

    /// The same lock with another way of waiting from now on; see [`WaitStrategy`].
    pub fn with_wait_strategy(self, wait: WaitStrategy) -> NonReentrantLock {
        NonReentrantLock {
            inner: self.inner.with_wait_strategy(wait),
        }
    }

    /// How this handle waits.
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.inner.wait_strategy()
    }

    /// Takes the lock for `owner`, waiting as long as it takes (as [`Lock::lock`]).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future at any point leaves no hold behind.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] at once, without waiting and without changing anything, when
    /// `owner` already holds the lock. Otherwise as [`Lock::lock`].
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<LockGuard>> + Send + 'static {
        self.inner.lock(owner)
    }

    /// One attempt: takes the lock if it is free, without waiting. `Ok(None)` when another
    /// owner holds it.
    ///
    /// # Cancel safety
    /// As [`lock`](NonReentrantLock::lock).
    ///
    /// # Errors
    /// As [`lock`](NonReentrantLock::lock): [`Error::WouldDeadlock`] when `owner` already
    /// holds the lock.
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock(owner)
    }

    /// Takes the lock for `owner`, waiting at most `wait`. `Ok(None)` when the wait ran out.
    ///
    /// # Cancel safety
    /// As [`lock`](NonReentrantLock::lock).
    ///
    /// # Errors
    /// As [`lock`](NonReentrantLock::lock) (a held lock fails at once, whatever `wait`);
    /// also [`Error::InvalidArgument`] when `wait` is too long to add to the current time.
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock_for(owner, wait)
    }

    /// Releases the hold of `owner` without a guard, Java style (the counterpart of
    /// [`LockGuard::detach`]), which frees the lock and wakes a waiter.
    ///
    /// # Errors
    /// As [`Lock::unlock`].
    pub async fn unlock(&self, owner: &LockOwner) -> Result<()> {
        self.inner.unlock(owner).await
    }

    /// Frees the lock whoever holds it, and wakes its waiters. `true` when it was held.
    ///
    /// # Correctness
    /// This breaks mutual exclusion for the current holder, which goes on believing it holds
    /// the lock until its guard's [`lease_lost`](LockGuard::lease_lost) fires.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::InvalidArgument`] for an
    /// empty name.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }
}

/// A fair lock (see [`FairLock`](crate::FairLock)) that an owner can hold only once: taking
/// it again while holding it fails at once with [`Error::WouldDeadlock`]. Shared with
/// Java's `getNonReentrantFairLock` (Redisson 4.4+) of the same name.
///
/// Waiters get the lock in the order they asked, through the fair lock's queue, deadlines
/// and per-waiter channels; the hold always has a count of 1, so one unlock frees it.
/// Re-entry is judged by the [`LockOwner`]. A cheap handle (no I/O to make one, `Clone`,
/// `Send + Sync`).
#[derive(Clone)]
pub struct NonReentrantFairLock {
    inner: Lock,
}

delegate_to_lock!(NonReentrantFairLock);

impl NonReentrantFairLock {
    pub(crate) fn new(inner: Lock) -> NonReentrantFairLock {
        NonReentrantFairLock { inner }
    }

    /// Takes the lock for `owner` after every waiter queued before it, waiting as long as it
    /// takes (as [`FairLock::lock`](crate::FairLock::lock)).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future leaves no hold behind, and a queued waiter leaves
    /// the queue at once.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] at once, without waiting or queueing, when `owner` already
    /// holds the lock. Otherwise as [`FairLock::lock`](crate::FairLock::lock).
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<LockGuard>> + Send + 'static {
        self.inner.lock(owner)
    }

    /// One attempt, never queueing: takes the lock if it is free and nobody waits before
    /// `owner`. `Ok(None)` otherwise.
    ///
    /// # Cancel safety
    /// As [`lock`](NonReentrantFairLock::lock).
    ///
    /// # Errors
    /// As [`lock`](NonReentrantFairLock::lock): [`Error::WouldDeadlock`] when `owner`
    /// already holds the lock.
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock(owner)
    }

    /// Takes the lock for `owner`, waiting in the queue at most `wait` (also its wait in
    /// the queue, as [`FairLock::try_lock_for`](crate::FairLock::try_lock_for)). `Ok(None)`
    /// when the wait ran out; the waiter has then left the queue.
    ///
    /// # Cancel safety
    /// As [`lock`](NonReentrantFairLock::lock).
    ///
    /// # Errors
    /// As [`lock`](NonReentrantFairLock::lock) (a held lock fails at once, whatever `wait`);
    /// also [`Error::InvalidArgument`] when `wait` is too long to add to the current time.
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock_for(owner, wait)
    }

    /// Releases the hold of `owner` without a guard, Java style, which frees the lock and
    /// tells the first waiter.
    ///
    /// # Errors
    /// As [`FairLock::unlock`](crate::FairLock::unlock).
    pub async fn unlock(&self, owner: &LockOwner) -> Result<()> {
        self.inner.unlock(owner).await
    }

    /// Frees the lock whoever holds it, and tells the first waiter. `true` when it was held.
    ///
    /// # Correctness
    /// This breaks mutual exclusion for the current holder, which goes on believing it holds
    /// the lock until its guard's [`lease_lost`](LockGuard::lease_lost) fires.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::InvalidArgument`] for an
    /// empty name.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }
}
