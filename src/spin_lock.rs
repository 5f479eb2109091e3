//! The spin lock: Redisson's `RSpinLock` (protocol §8.1).
//!
//! [`SpinLock`] is a thin wrapper around a [`Lock`] of kind `Spin`, which waits with
//! [`WaitStrategy::Spin`](crate::WaitStrategy::Spin) and whose releases publish nothing.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::handle::delegate_to_lock;
use crate::lock::{Lock, LockGuard};
use crate::wait::{Backoff, WaitStrategy};
use crate::LockOwner;

/// A reentrant distributed lock without pub/sub: waiters poll with a back-off, and releases
/// publish nothing. Shared with Java's `RSpinLock` of the same name.
///
/// Made for deployments where pub/sub is unavailable or costly (many lock names, a proxy
/// without pub/sub, sharded pub/sub trouble): no subscription, no message per unlock, at
/// the price of one acquire script per back-off step while waiting, and of a wake-up up to
/// one step (at most 128 ms by default) after the release.
///
/// The hold is the reentrant lock's (same hash, same TTL, same renewal), so a `SpinLock` and
/// a [`Lock`] (or a Java `RLock`) of the same name exclude each other. But a spin unlock
/// tells no one: a [`Lock`] waiting with [`WaitStrategy::PubSub`] (and a Java `RLock`
/// waiter) notices it only when the old hold's lease would have ended. Give such waiters
/// [`WaitStrategy::Spin`], or do not mix the kinds.
///
/// A `SpinLock` is a cheap handle (no I/O to make one, `Clone`, `Send + Sync`); every call
/// names the [`LockOwner`] it acts for, and the same owner re-enters.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// use std::time::Duration;
/// use redisson_lock::Backoff;
///
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client
///     .spin_lock("report")
///     .with_backoff(Backoff::constant(Duration::from_millis(20)));
/// if let Some(guard) = lock.try_lock_for(&me, Duration::from_secs(2)).await? {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SpinLock {
    inner: Lock,
}

delegate_to_lock!(SpinLock);

impl SpinLock {
    pub(crate) fn new(inner: Lock) -> SpinLock {
        SpinLock { inner }
    }

    /// The same lock with another back-off for the waits it makes from now on.
    ///
    /// # Default
    /// [`Backoff::exponential()`], Redisson's default.
    pub fn with_backoff(self, backoff: Backoff) -> SpinLock {
        SpinLock {
            inner: self.inner.with_wait_strategy(WaitStrategy::Spin(backoff)),
        }
    }

    /// Takes the lock for `owner`, trying again after each back-off step for as long as it
    /// takes.
    ///
    /// If `owner` already holds it, this re-enters at once (the hold count grows by one; the
    /// key lives at least this lease from now, never less than before). A step never sleeps past the holder's remaining lease.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future at any point leaves no hold behind. A hold taken by
    /// a script that was already on the wire is released as soon as its reply arrives.
    ///
    /// # Errors
    /// As [`Lock::lock`].
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<LockGuard>> + Send + 'static {
        self.inner.lock(owner)
    }

    /// One attempt: takes (or re-enters) the lock if it is free for `owner`, without
    /// waiting. `Ok(None)` when someone else holds it.
    ///
    /// # Cancel safety
    /// As [`lock`](SpinLock::lock): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`lock`](SpinLock::lock).
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock(owner)
    }

    /// Takes the lock for `owner`, trying after each back-off step until `wait` has passed.
    /// `Ok(None)` when the wait ran out. A zero `wait` makes exactly one attempt.
    ///
    /// # Cancel safety
    /// As [`lock`](SpinLock::lock): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`lock`](SpinLock::lock); also [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// when `wait` is too long to add to the current time.
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        self.inner.try_lock_for(owner, wait)
    }

    /// Releases one hold of `owner` without a guard, Java style (the counterpart of
    /// [`LockGuard::detach`]). The lock is freed with the last hold; nothing is published.
    ///
    /// # Errors
    /// As [`Lock::unlock`].
    pub async fn unlock(&self, owner: &LockOwner) -> Result<()> {
        self.inner.unlock(owner).await
    }

    /// Frees the lock whoever holds it (a plain `DEL`; nothing is published). `true` when it
    /// was held.
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
}
