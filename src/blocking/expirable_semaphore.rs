//! The blocking permit-expirable semaphore.

use super::*;
use crate::PermitId;

/// The blocking [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore): Redisson's
/// `RPermitExpirableSemaphore`, shared with Java.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../docs/snippets/blocking_expirable_semaphore.rs")]
/// ```
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    inner: crate::PermitExpirableSemaphore,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::PermitExpirableSemaphore")
            .field(&self.inner)
            .finish()
    }
}

impl LockClient {
    /// A handle on the permit-expirable semaphore `name`, as
    /// [`LockClient::permit_expirable_semaphore`](crate::LockClient::permit_expirable_semaphore).
    /// No I/O.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name no lock can have (see
    /// [`LockClient::lock`](crate::LockClient::lock)).
    pub fn permit_expirable_semaphore(&self, name: &str) -> Result<PermitExpirableSemaphore> {
        Ok(PermitExpirableSemaphore {
            inner: self.inner.permit_expirable_semaphore(name)?,
            runtime: self.runtime.clone(),
        })
    }
}

same!(PermitId, Vec<PermitId>);

impl PermitExpirableSemaphore {
    /// As [`PermitExpirableSemaphore::name`](crate::PermitExpirableSemaphore::name).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// As [`PermitExpirableSemaphore::acquire_guard`](crate::PermitExpirableSemaphore::acquire_guard);
    /// the guard gives the permits back before its `drop` returns.
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::acquire_guard`](crate::PermitExpirableSemaphore::acquire_guard).
    pub fn acquire_guard(&self, permits: u32, lease: Option<Duration>) -> Result<ExpirablePermits> {
        let taken = (self.runtime).block_on(
            "blocking::PermitExpirableSemaphore::acquire_guard",
            self.inner.acquire_guard(permits, lease),
        )?;
        Ok(self.guard(taken))
    }

    /// As [`PermitExpirableSemaphore::try_acquire_guard`](crate::PermitExpirableSemaphore::try_acquire_guard).
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::try_acquire_guard`](crate::PermitExpirableSemaphore::try_acquire_guard).
    pub fn try_acquire_guard(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> Result<Option<ExpirablePermits>> {
        let taken = (self.runtime).block_on(
            "blocking::PermitExpirableSemaphore::try_acquire_guard",
            self.inner.try_acquire_guard(permits, lease),
        )?;
        Ok(taken.map(|taken| self.guard(taken)))
    }

    /// As [`PermitExpirableSemaphore::try_acquire_guard_for`](crate::PermitExpirableSemaphore::try_acquire_guard_for).
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::try_acquire_guard_for`](crate::PermitExpirableSemaphore::try_acquire_guard_for).
    pub fn try_acquire_guard_for(
        &self,
        permits: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<ExpirablePermits>> {
        let taken = self.runtime.block_on(
            "blocking::PermitExpirableSemaphore::try_acquire_guard_for",
            self.inner.try_acquire_guard_for(permits, wait, lease),
        )?;
        Ok(taken.map(|taken| self.guard(taken)))
    }

    /// As [`PermitExpirableSemaphore::try_release_many`](crate::PermitExpirableSemaphore::try_release_many).
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::try_release_many`](crate::PermitExpirableSemaphore::try_release_many).
    pub fn try_release_many(&self, ids: &[PermitId]) -> Result<bool> {
        self.runtime.block_on(
            "blocking::PermitExpirableSemaphore::try_release_many",
            self.inner.try_release_many(ids),
        )
    }

    fn guard(&self, inner: crate::ExpirablePermits) -> ExpirablePermits {
        ExpirablePermits {
            inner: Some(inner),
            semaphore: self.clone(),
        }
    }

    blocking_methods! {
        /// As [`PermitExpirableSemaphore::try_set_permits`](crate::PermitExpirableSemaphore::try_set_permits).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::try_set_permits`](crate::PermitExpirableSemaphore::try_set_permits).
        fn try_set_permits(&self, permits: u32) -> Result<bool>;
        /// As [`PermitExpirableSemaphore::acquire`](crate::PermitExpirableSemaphore::acquire).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::acquire`](crate::PermitExpirableSemaphore::acquire).
        fn acquire(&self, lease: Option<Duration>) -> Result<PermitId>;
        /// As [`PermitExpirableSemaphore::acquire_many`](crate::PermitExpirableSemaphore::acquire_many).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::acquire_many`](crate::PermitExpirableSemaphore::acquire_many).
        fn acquire_many(&self, permits: u32, lease: Option<Duration>) -> Result<Vec<PermitId>>;
        /// As [`PermitExpirableSemaphore::try_acquire`](crate::PermitExpirableSemaphore::try_acquire).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::try_acquire`](crate::PermitExpirableSemaphore::try_acquire).
        fn try_acquire(&self, lease: Option<Duration>) -> Result<Option<PermitId>>;
        /// As [`PermitExpirableSemaphore::try_acquire_many`](crate::PermitExpirableSemaphore::try_acquire_many).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::try_acquire_many`](crate::PermitExpirableSemaphore::try_acquire_many).
        fn try_acquire_many(&self, permits: u32, lease: Option<Duration>) -> Result<Option<Vec<PermitId>>>;
        /// As [`PermitExpirableSemaphore::try_acquire_for`](crate::PermitExpirableSemaphore::try_acquire_for).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::try_acquire_for`](crate::PermitExpirableSemaphore::try_acquire_for).
        fn try_acquire_for(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<PermitId>>;
        /// As [`PermitExpirableSemaphore::try_acquire_many_for`](crate::PermitExpirableSemaphore::try_acquire_many_for).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::try_acquire_many_for`](crate::PermitExpirableSemaphore::try_acquire_many_for).
        fn try_acquire_many_for(&self, permits: u32, wait: Duration, lease: Option<Duration>) -> Result<Option<Vec<PermitId>>>;
        /// As [`PermitExpirableSemaphore::release`](crate::PermitExpirableSemaphore::release).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::release`](crate::PermitExpirableSemaphore::release).
        fn release(&self, id: PermitId) -> Result<()>;
        /// As [`PermitExpirableSemaphore::try_release`](crate::PermitExpirableSemaphore::try_release).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::try_release`](crate::PermitExpirableSemaphore::try_release).
        fn try_release(&self, id: PermitId) -> Result<bool>;
        /// As [`PermitExpirableSemaphore::available_permits`](crate::PermitExpirableSemaphore::available_permits).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::available_permits`](crate::PermitExpirableSemaphore::available_permits).
        fn available_permits(&self) -> Result<i64>;
        /// As [`PermitExpirableSemaphore::acquired_permits`](crate::PermitExpirableSemaphore::acquired_permits).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::acquired_permits`](crate::PermitExpirableSemaphore::acquired_permits).
        fn acquired_permits(&self) -> Result<i64>;
        /// As [`PermitExpirableSemaphore::permits`](crate::PermitExpirableSemaphore::permits).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::permits`](crate::PermitExpirableSemaphore::permits).
        fn permits(&self) -> Result<i64>;
        /// As [`PermitExpirableSemaphore::set_permits`](crate::PermitExpirableSemaphore::set_permits).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::set_permits`](crate::PermitExpirableSemaphore::set_permits).
        fn set_permits(&self, permits: u32) -> Result<()>;
        /// As [`PermitExpirableSemaphore::add_permits`](crate::PermitExpirableSemaphore::add_permits).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::add_permits`](crate::PermitExpirableSemaphore::add_permits).
        fn add_permits(&self, delta: i64) -> Result<()>;
        /// As [`PermitExpirableSemaphore::update_lease_time`](crate::PermitExpirableSemaphore::update_lease_time).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::update_lease_time`](crate::PermitExpirableSemaphore::update_lease_time).
        fn update_lease_time(&self, id: PermitId, lease: Option<Duration>) -> Result<bool>;
        /// As [`PermitExpirableSemaphore::lease_time`](crate::PermitExpirableSemaphore::lease_time).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::lease_time`](crate::PermitExpirableSemaphore::lease_time).
        fn lease_time(&self, id: PermitId) -> Result<Option<Duration>>;
        /// As [`PermitExpirableSemaphore::delete`](crate::PermitExpirableSemaphore::delete).
        ///
        /// # Errors
        /// As [`PermitExpirableSemaphore::delete`](crate::PermitExpirableSemaphore::delete).
        fn delete(&self) -> Result<bool>;
    }
}

/// The blocking [`ExpirablePermits`](crate::ExpirablePermits): permits given back before
/// `drop` returns (in the background when dropped inside an async runtime).
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../docs/snippets/blocking_expirable_semaphore.rs")]
/// ```
#[must_use = "dropping the guard gives the permits back at once"]
pub struct ExpirablePermits {
    inner: Option<crate::ExpirablePermits>,
    semaphore: PermitExpirableSemaphore,
}

impl fmt::Debug for ExpirablePermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::ExpirablePermits")
            .field(&self.inner)
            .finish()
    }
}

impl ExpirablePermits {
    /// As [`ExpirablePermits::ids`](crate::ExpirablePermits::ids).
    pub fn ids(&self) -> &[PermitId] {
        self.inner.as_ref().expect("held until consumed").ids()
    }

    /// The semaphore they were taken from.
    pub fn semaphore(&self) -> &PermitExpirableSemaphore {
        &self.semaphore
    }

    /// As [`ExpirablePermits::forget`](crate::ExpirablePermits::forget).
    pub fn forget(mut self) -> Vec<PermitId> {
        let taken = self.inner.take().expect("held until consumed");
        taken.forget()
    }

    /// As [`ExpirablePermits::release`](crate::ExpirablePermits::release).
    ///
    /// # Errors
    /// As [`ExpirablePermits::release`](crate::ExpirablePermits::release).
    pub fn release(mut self) -> Result<bool> {
        let taken = self.inner.take().expect("held until consumed");
        self.semaphore
            .runtime
            .block_on("blocking::ExpirablePermits::release", taken.release())
    }
}

impl Drop for ExpirablePermits {
    fn drop(&mut self) {
        if let Some(taken) = self.inner.take() {
            let name = self.semaphore.name().to_owned();
            let done = async move {
                if let Err(error) = taken.release().await {
                    tracing::warn!(%error, semaphore = %name, "giving back a dropped guard's permits failed");
                }
            };
            let runtime = &self.semaphore.runtime;
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(runtime.get().spawn(done));
            } else {
                runtime.block_on("dropping blocking::ExpirablePermits", done);
            }
        }
    }
}
