//! The blocking exclusive locks: one generic handle, as in the async API, and its aliases.

use super::*;

/// An exclusive lock of kind `K`: the blocking [`ExclusiveLock`](crate::ExclusiveLock).
pub struct ExclusiveLock<K: Kind> {
    inner: crate::ExclusiveLock<K>,
    runtime: Arc<Runtime>,
}

/// The blocking [`Lock`](crate::Lock): reentrant, not fair.
pub type Lock = ExclusiveLock<Reentrant>;
/// The blocking [`FairLock`](crate::FairLock): granted in order of arrival.
pub type FairLock = ExclusiveLock<Fair>;
/// The blocking [`FencedLock`](crate::FencedLock): a token with every hold.
pub type FencedLock = ExclusiveLock<Fenced>;
/// The blocking [`SpinLock`](crate::SpinLock): waits by back-off, without pub/sub.
pub type SpinLock = ExclusiveLock<Spin>;
/// The blocking [`NonReentrantLock`](crate::NonReentrantLock).
pub type NonReentrantLock = ExclusiveLock<NonReentrant>;
/// The blocking [`NonReentrantFairLock`](crate::NonReentrantFairLock).
pub type NonReentrantFairLock = ExclusiveLock<NonReentrantFair>;

impl LockClient {
    /// A handle on the exclusive lock `name` of kind `K`, as
    /// [`LockClient::exclusive_lock`](crate::LockClient::exclusive_lock). No I/O.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name no lock can have (see
    /// [`LockClient::lock`](crate::LockClient::lock)); so for each constructor below.
    pub fn exclusive_lock<K: Kind>(&self, name: &str) -> Result<ExclusiveLock<K>> {
        Ok(ExclusiveLock {
            inner: self.inner.exclusive_lock(name)?,
            runtime: self.runtime.clone(),
        })
    }

    /// As [`LockClient::lock`](crate::LockClient::lock). No I/O.
    ///
    /// # Errors
    /// As [`exclusive_lock`](LockClient::exclusive_lock).
    pub fn lock(&self, name: &str) -> Result<Lock> {
        self.exclusive_lock(name)
    }

    /// As [`LockClient::fair_lock`](crate::LockClient::fair_lock). No I/O.
    ///
    /// # Errors
    /// As [`exclusive_lock`](LockClient::exclusive_lock).
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        self.exclusive_lock(name)
    }

    /// As [`LockClient::fenced_lock`](crate::LockClient::fenced_lock). No I/O.
    ///
    /// # Errors
    /// As [`exclusive_lock`](LockClient::exclusive_lock).
    pub fn fenced_lock(&self, name: &str) -> Result<FencedLock> {
        self.exclusive_lock(name)
    }

    /// As [`LockClient::spin_lock`](crate::LockClient::spin_lock). No I/O.
    ///
    /// # Errors
    /// As [`exclusive_lock`](LockClient::exclusive_lock).
    pub fn spin_lock(&self, name: &str) -> Result<SpinLock> {
        self.exclusive_lock(name)
    }

    /// As [`LockClient::non_reentrant_lock`](crate::LockClient::non_reentrant_lock). No I/O.
    ///
    /// # Errors
    /// As [`exclusive_lock`](LockClient::exclusive_lock).
    pub fn non_reentrant_lock(&self, name: &str) -> Result<NonReentrantLock> {
        self.exclusive_lock(name)
    }

    /// As [`LockClient::non_reentrant_fair_lock`](crate::LockClient::non_reentrant_fair_lock).
    /// No I/O.
    ///
    /// # Errors
    /// As [`exclusive_lock`](LockClient::exclusive_lock).
    pub fn non_reentrant_fair_lock(&self, name: &str) -> Result<NonReentrantFairLock> {
        self.exclusive_lock(name)
    }
}

impl<K: Kind> From<&ExclusiveLock<K>> for MultiMember {
    fn from(lock: &ExclusiveLock<K>) -> MultiMember {
        MultiMember::from(&lock.inner)
    }
}

impl<K: Kind> Clone for ExclusiveLock<K> {
    fn clone(&self) -> Self {
        ExclusiveLock {
            inner: self.inner.clone(),
            runtime: self.runtime.clone(),
        }
    }
}

impl<K: Kind> fmt::Debug for ExclusiveLock<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::ExclusiveLock")
            .field(&self.inner)
            .finish()
    }
}

impl<K: Kind> ExclusiveLock<K> {
    /// The same lock with another lease policy for the holds it takes from now on.
    pub fn with_lease(self, lease: Lease) -> ExclusiveLock<K> {
        ExclusiveLock {
            inner: self.inner.with_lease(lease),
            runtime: self.runtime,
        }
    }

    /// The same lock with another way of waiting from now on.
    pub fn with_wait_strategy(self, wait: WaitStrategy) -> ExclusiveLock<K> {
        ExclusiveLock {
            inner: self.inner.with_wait_strategy(wait),
            runtime: self.runtime,
        }
    }

    /// The lock's name.
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

    blocking_methods! {
        /// Takes the lock for `owner`, waiting as long as it takes; as
        /// [`ExclusiveLock::lock`](crate::ExclusiveLock::lock).
        ///
        /// # Errors
        /// As [`ExclusiveLock::lock`](crate::ExclusiveLock::lock).
        fn lock(&self, owner: &LockOwner) -> Result<LockGuard<K::Hold>>;
        /// One attempt; `Ok(None)` when the lock is busy.
        ///
        /// # Errors
        /// As [`ExclusiveLock::try_lock`](crate::ExclusiveLock::try_lock).
        fn try_lock(&self, owner: &LockOwner) -> Result<Option<LockGuard<K::Hold>>>;
        /// Waits at most `wait`; `Ok(None)` when the wait ran out.
        ///
        /// # Errors
        /// As [`ExclusiveLock::try_lock_for`](crate::ExclusiveLock::try_lock_for).
        fn try_lock_for(&self, owner: &LockOwner, wait: Duration) -> Result<Option<LockGuard<K::Hold>>>;
        /// Releases one hold of `owner` without a guard, Java style.
        ///
        /// # Errors
        /// As [`ExclusiveLock::unlock`](crate::ExclusiveLock::unlock).
        fn unlock(&self, owner: &LockOwner) -> Result<()>;
        /// Frees the lock whoever holds it, and wakes its waiters; `true` when it was
        /// held. It breaks mutual exclusion for the current holder.
        ///
        /// # Errors
        /// [`Error::Redis`] when Redis cannot be reached.
        fn force_unlock(&self) -> Result<bool>;
        /// Whether anyone holds the lock.
        ///
        /// # Errors
        /// [`Error::Redis`], [`Error::WrongType`], as the async method.
        fn is_locked(&self) -> Result<bool>;
        /// Whether `owner` holds the lock.
        ///
        /// # Errors
        /// As [`is_locked`](Self::is_locked).
        fn is_held_by(&self, owner: &LockOwner) -> Result<bool>;
        /// How many times `owner` holds the lock.
        ///
        /// # Errors
        /// As [`is_locked`](Self::is_locked).
        fn hold_count(&self, owner: &LockOwner) -> Result<u64>;
        /// How long the current hold lasts; `None` when the lock is free.
        ///
        /// # Errors
        /// [`Error::Redis`] when Redis cannot be reached.
        fn remaining_lease(&self) -> Result<Option<Duration>>;
    }
}

impl ExclusiveLock<Fenced> {
    blocking_methods! {
        /// As [`FencedLock::latest_token`](crate::FencedLock::latest_token).
        ///
        /// # Errors
        /// As [`FencedLock::latest_token`](crate::FencedLock::latest_token).
        fn latest_token(&self) -> Result<u64>;
    }
}

impl ExclusiveLock<Spin> {
    /// The same lock with another back-off between its attempts, as
    /// [`SpinLock::with_backoff`](crate::SpinLock::with_backoff).
    pub fn with_backoff(self, backoff: crate::Backoff) -> SpinLock {
        SpinLock {
            inner: self.inner.with_backoff(backoff),
            runtime: self.runtime,
        }
    }
}
