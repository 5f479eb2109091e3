//! The blocking guards: each wraps its async guard and releases its hold before `drop`
//! returns.

use super::*;

/// One hold: the blocking [`LockGuard`](crate::LockGuard), with the same `H` (see
/// [`kind`](crate::kind)).
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct LockGuard<H: HoldKind = Plain> {
    /// `None` once released or detached.
    inner: Option<crate::LockGuard<H>>,
    runtime: Arc<Runtime>,
}

/// One hold of a fenced lock, with its token: the blocking
/// [`FencedGuard`](crate::FencedGuard).
pub type FencedGuard = LockGuard<Token>;

/// One read hold: the blocking [`ReadGuard`](crate::ReadGuard).
pub type ReadGuard = LockGuard<ReadHold>;

/// One write hold: the blocking [`WriteGuard`](crate::WriteGuard).
pub type WriteGuard = LockGuard<WriteHold>;

impl<H: HoldKind> Blocking for crate::LockGuard<H> {
    type Out = LockGuard<H>;
    fn wrap(self, runtime: &Arc<Runtime>) -> LockGuard<H> {
        LockGuard {
            inner: Some(self),
            runtime: runtime.clone(),
        }
    }
}

impl<H: HoldKind> LockGuard<H> {
    fn get(&self) -> &crate::LockGuard<H> {
        self.inner.as_ref().expect("a guard is live until consumed")
    }

    /// Releases the hold now.
    ///
    /// # Errors
    /// As the async [`LockGuard::unlock`](crate::LockGuard::unlock).
    pub fn unlock(mut self) -> Result<()> {
        let guard = self.inner.take().expect("a guard is live until consumed");
        self.runtime
            .block_on("blocking::LockGuard::unlock", guard.unlock())
    }

    /// Gives up the guard but keeps the hold (and its renewal); release it later with the
    /// handle's `unlock(&owner)`.
    pub fn detach(mut self) {
        if let Some(guard) = self.inner.take() {
            guard.detach();
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.get().name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &LockOwner {
        self.get().owner()
    }

    /// As [`LockGuard::fence_token`](crate::LockGuard::fence_token).
    pub fn fence_token(&self) -> Option<u64> {
        self.get().fence_token()
    }

    /// How long the lock's key lives unless renewed or released; `None` when it is gone.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached.
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.runtime.block_on(
            "blocking::LockGuard::remaining_lease",
            self.get().remaining_lease(),
        )
    }

    /// Whether the hold is known to be lost (the watchdog found it gone or could not renew
    /// it in time, or a fixed lease ended).
    pub fn is_lease_lost(&self) -> bool {
        self.get().is_lease_lost()
    }

    /// Waits at most `timeout` for the hold to be lost; `true` when it was.
    pub fn wait_lease_lost(&self, timeout: Duration) -> bool {
        wait_lost(&self.runtime, self.get().lease_lost(), timeout)
    }
}

impl LockGuard<Token> {
    /// The fencing token of this hold; see [`FencedGuard::token`](crate::FencedGuard::token).
    pub fn token(&self) -> u64 {
        self.get().token()
    }
}

impl<H: HoldKind> Drop for LockGuard<H> {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            let name = guard.name().to_owned();
            release_now(&self.runtime, name, guard.unlock());
        }
    }
}

impl<H: HoldKind> fmt::Debug for LockGuard<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::LockGuard")
            .field(&self.inner)
            .finish()
    }
}

/// The members held by a multi-lock or RedLock: the blocking
/// [`MultiLockGuard`](crate::MultiLockGuard).
#[must_use = "dropping the guard releases the locks"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard {
    /// `None` once released.
    inner: Option<crate::MultiLockGuard>,
    runtime: Arc<Runtime>,
}

impl Blocking for crate::MultiLockGuard {
    type Out = MultiLockGuard;
    fn wrap(self, runtime: &Arc<Runtime>) -> MultiLockGuard {
        MultiLockGuard {
            inner: Some(self),
            runtime: runtime.clone(),
        }
    }
}

impl MultiLockGuard {
    fn get(&self) -> &crate::MultiLockGuard {
        self.inner.as_ref().expect("a guard is live until consumed")
    }

    /// Releases every member now.
    ///
    /// # Errors
    /// As the async [`MultiLockGuard::unlock`](crate::MultiLockGuard::unlock).
    pub fn unlock(mut self) -> Result<()> {
        let guard = self.inner.take().expect("a guard is live until consumed");
        self.runtime
            .block_on("blocking::MultiLockGuard::unlock", guard.unlock())
    }

    /// How many members are held.
    pub fn held(&self) -> usize {
        self.get().held()
    }

    /// The fencing tokens of the fenced members held, in member order.
    pub fn fence_tokens(&self) -> Vec<u64> {
        self.get().fence_tokens()
    }

    /// The names of the members held.
    pub fn names(&self) -> Vec<&str> {
        self.get().names()
    }

    /// As [`MultiLockGuard::validity`](crate::MultiLockGuard::validity).
    pub fn validity(&self) -> Option<Duration> {
        self.get().validity()
    }

    /// Whether the hold is known to be lost; see
    /// [`MultiLockGuard::is_lease_lost`](crate::MultiLockGuard::is_lease_lost).
    pub fn is_lease_lost(&self) -> bool {
        self.get().is_lease_lost()
    }

    /// Waits at most `timeout` for the hold to be lost; `true` when it was.
    pub fn wait_lease_lost(&self, timeout: Duration) -> bool {
        wait_lost(&self.runtime, self.get().lease_lost(), timeout)
    }
}

impl Drop for MultiLockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            let name = guard.names().join(", ");
            release_now(&self.runtime, name, guard.unlock());
        }
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::MultiLockGuard")
            .field(&self.inner)
            .finish()
    }
}

/// Waits at most `timeout` for `lost`; `true` when it completed.
fn wait_lost(
    runtime: &Runtime,
    lost: impl Future<Output = ()> + Send + 'static,
    timeout: Duration,
) -> bool {
    runtime.block_on("blocking::LockGuard::wait_lease_lost", async {
        tokio::time::timeout(timeout, lost).await.is_ok()
    })
}
