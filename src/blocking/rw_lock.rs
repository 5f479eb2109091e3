//! The blocking read-write lock.

use super::*;

/// The blocking [`ReadWriteLock`](crate::ReadWriteLock): many readers or one writer.
#[derive(Clone)]
pub struct ReadWriteLock {
    pub(super) inner: crate::ReadWriteLock,
    pub(super) runtime: Arc<Runtime>,
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::ReadWriteLock")
            .field(&self.inner)
            .finish()
    }
}

impl LockClient {
    /// A handle on the read-write lock `name`, as
    /// [`LockClient::read_write_lock`](crate::LockClient::read_write_lock). No I/O.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name no lock can have (see
    /// [`LockClient::lock`](crate::LockClient::lock)).
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        Ok(ReadWriteLock {
            inner: self.inner.read_write_lock(name)?,
            runtime: self.runtime.clone(),
        })
    }
}

impl ReadWriteLock {
    /// The same lock with another lease policy for the holds it takes from now on.
    pub fn with_lease(self, lease: Lease) -> ReadWriteLock {
        ReadWriteLock {
            inner: self.inner.with_lease(lease),
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

    blocking_methods! {
        /// Takes a read hold, waiting as long as it takes.
        ///
        /// # Errors
        /// As [`ReadWriteLock::read`](crate::ReadWriteLock::read).
        fn read(&self, owner: &LockOwner) -> Result<ReadGuard>;
        /// One attempt at a read hold.
        ///
        /// # Errors
        /// As [`ReadWriteLock::try_read`](crate::ReadWriteLock::try_read).
        fn try_read(&self, owner: &LockOwner) -> Result<Option<ReadGuard>>;
        /// A read hold within `wait`.
        ///
        /// # Errors
        /// As [`ReadWriteLock::try_read_for`](crate::ReadWriteLock::try_read_for).
        fn try_read_for(&self, owner: &LockOwner, wait: Duration) -> Result<Option<ReadGuard>>;
        /// Takes the write hold, waiting as long as it takes.
        ///
        /// # Errors
        /// As [`ReadWriteLock::write`](crate::ReadWriteLock::write).
        fn write(&self, owner: &LockOwner) -> Result<WriteGuard>;
        /// One attempt at the write hold.
        ///
        /// # Errors
        /// As [`ReadWriteLock::try_write`](crate::ReadWriteLock::try_write).
        fn try_write(&self, owner: &LockOwner) -> Result<Option<WriteGuard>>;
        /// The write hold within `wait`.
        ///
        /// # Errors
        /// As [`ReadWriteLock::try_write_for`](crate::ReadWriteLock::try_write_for).
        fn try_write_for(&self, owner: &LockOwner, wait: Duration) -> Result<Option<WriteGuard>>;
        /// Releases one read hold of `owner` without a guard.
        ///
        /// # Errors
        /// As [`ReadWriteLock::unlock_read`](crate::ReadWriteLock::unlock_read).
        fn unlock_read(&self, owner: &LockOwner) -> Result<()>;
        /// Releases one write hold of `owner` without a guard.
        ///
        /// # Errors
        /// As [`ReadWriteLock::unlock_write`](crate::ReadWriteLock::unlock_write).
        fn unlock_write(&self, owner: &LockOwner) -> Result<()>;
        /// Frees the lock if it is in read mode; `true` when it was.
        ///
        /// # Errors
        /// [`Error::Redis`] when Redis cannot be reached.
        fn force_unlock_read(&self) -> Result<bool>;
        /// Frees the lock if it is in write mode; `true` when it was.
        ///
        /// # Errors
        /// [`Error::Redis`] when Redis cannot be reached.
        fn force_unlock_write(&self) -> Result<bool>;
        /// Whether anyone holds the lock, in either mode.
        ///
        /// # Errors
        /// [`Error::Redis`], [`Error::WrongType`], as the async method.
        fn is_locked(&self) -> Result<bool>;
        /// How many read holds `owner` has.
        ///
        /// # Errors
        /// As [`is_locked`](Self::is_locked).
        fn read_hold_count(&self, owner: &LockOwner) -> Result<u64>;
        /// How many write holds `owner` has.
        ///
        /// # Errors
        /// As [`is_locked`](Self::is_locked).
        fn write_hold_count(&self, owner: &LockOwner) -> Result<u64>;
        /// As [`ReadWriteLock::is_read_locked`](crate::ReadWriteLock::is_read_locked).
        ///
        /// # Errors
        /// As the async method.
        fn is_read_locked(&self) -> Result<bool>;
        /// As [`ReadWriteLock::is_write_locked`](crate::ReadWriteLock::is_write_locked).
        ///
        /// # Errors
        /// As the async method.
        fn is_write_locked(&self) -> Result<bool>;
        /// As [`ReadWriteLock::is_read_held_by`](crate::ReadWriteLock::is_read_held_by).
        ///
        /// # Errors
        /// As the async method.
        fn is_read_held_by(&self, owner: &LockOwner) -> Result<bool>;
        /// As [`ReadWriteLock::is_write_held_by`](crate::ReadWriteLock::is_write_held_by).
        ///
        /// # Errors
        /// As the async method.
        fn is_write_held_by(&self, owner: &LockOwner) -> Result<bool>;
        /// As [`ReadWriteLock::remaining_lease`](crate::ReadWriteLock::remaining_lease).
        ///
        /// # Errors
        /// As the async method.
        fn remaining_lease(&self) -> Result<Option<Duration>>;
    }
}

impl From<&ReadWriteLock> for MultiMember {
    /// The write side, as [`MultiMember::write_side`].
    fn from(lock: &ReadWriteLock) -> MultiMember {
        MultiMember::write_side(&lock.inner)
    }
}
