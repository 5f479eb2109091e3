//! The blocking multi-lock and RedLock.

use super::*;

/// The blocking [`MultiLock`](crate::MultiLock) (or [`RedLock`](crate::RedLock), from
/// [`LockClient::red_lock`]): several locks taken as one.
#[derive(Clone)]
pub struct MultiLock {
    pub(super) inner: crate::MultiLock,
    pub(super) runtime: Arc<Runtime>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::MultiLock")
            .field(&self.inner)
            .finish()
    }
}

impl MultiLock {
    /// The same multi-lock with another lease for the holds it takes.
    pub fn with_lease(self, lease: Lease) -> MultiLock {
        MultiLock {
            inner: self.inner.with_lease(lease),
            runtime: self.runtime,
        }
    }

    /// The members' names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.inner.names()
    }

    blocking_methods! {
        /// Takes every member (a majority, for a RedLock), waiting as long as it takes.
        ///
        /// # Errors
        /// As [`MultiLock::lock`](crate::MultiLock::lock).
        fn lock(&self, owner: &LockOwner) -> Result<MultiLockGuard>;
        /// One pass over the members.
        ///
        /// # Errors
        /// As [`MultiLock::try_lock`](crate::MultiLock::try_lock).
        fn try_lock(&self, owner: &LockOwner) -> Result<Option<MultiLockGuard>>;
        /// Every member within `wait`.
        ///
        /// # Errors
        /// As [`MultiLock::try_lock_for`](crate::MultiLock::try_lock_for).
        fn try_lock_for(&self, owner: &LockOwner, wait: Duration) -> Result<Option<MultiLockGuard>>;
        /// Whether `owner` holds every member (a majority, for a RedLock).
        ///
        /// # Errors
        /// [`Error::Redis`] when a member's server cannot be reached.
        fn is_held_by(&self, owner: &LockOwner) -> Result<bool>;
    }
}
