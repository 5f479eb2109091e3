//! The blocking semaphore.

use super::*;

/// The blocking [`Semaphore`](crate::Semaphore): Redisson's `RSemaphore`, shared with Java.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../docs/snippets/blocking_semaphore.rs")]
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: crate::Semaphore,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Semaphore")
            .field(&self.inner)
            .finish()
    }
}

impl LockClient {
    /// A handle on the semaphore `name`, as
    /// [`LockClient::semaphore`](crate::LockClient::semaphore). No I/O.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name no lock can have (see
    /// [`LockClient::lock`](crate::LockClient::lock)).
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        Ok(Semaphore {
            inner: self.inner.semaphore(name)?,
            runtime: self.runtime.clone(),
        })
    }
}

same!(i64);

impl Semaphore {
    /// As [`Semaphore::name`](crate::Semaphore::name).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// As [`Semaphore::acquire_guard`](crate::Semaphore::acquire_guard); the guard gives
    /// the permits back before its `drop` returns.
    ///
    /// # Errors
    /// As [`Semaphore::acquire_guard`](crate::Semaphore::acquire_guard).
    pub fn acquire_guard(&self, permits: u32) -> Result<SemaphorePermits> {
        let taken = self.runtime.block_on(
            "blocking::Semaphore::acquire_guard",
            self.inner.acquire_guard(permits),
        )?;
        Ok(self.guard(taken))
    }

    /// As [`Semaphore::try_acquire_guard`](crate::Semaphore::try_acquire_guard).
    ///
    /// # Errors
    /// As [`Semaphore::try_acquire_guard`](crate::Semaphore::try_acquire_guard).
    pub fn try_acquire_guard(&self, permits: u32) -> Result<Option<SemaphorePermits>> {
        let taken = self.runtime.block_on(
            "blocking::Semaphore::try_acquire_guard",
            self.inner.try_acquire_guard(permits),
        )?;
        Ok(taken.map(|taken| self.guard(taken)))
    }

    /// As [`Semaphore::try_acquire_guard_for`](crate::Semaphore::try_acquire_guard_for).
    ///
    /// # Errors
    /// As [`Semaphore::try_acquire_guard_for`](crate::Semaphore::try_acquire_guard_for).
    pub fn try_acquire_guard_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<SemaphorePermits>> {
        let taken = (self.runtime).block_on(
            "blocking::Semaphore::try_acquire_guard_for",
            self.inner.try_acquire_guard_for(permits, wait),
        )?;
        Ok(taken.map(|taken| self.guard(taken)))
    }

    fn guard(&self, inner: crate::SemaphorePermits) -> SemaphorePermits {
        SemaphorePermits {
            inner: Some(inner),
            semaphore: self.clone(),
        }
    }

    blocking_methods! {
        /// As [`Semaphore::try_set_permits`](crate::Semaphore::try_set_permits).
        ///
        /// # Errors
        /// As [`Semaphore::try_set_permits`](crate::Semaphore::try_set_permits).
        fn try_set_permits(&self, permits: u32) -> Result<bool>;
        /// As [`Semaphore::try_set_permits_with_ttl`](crate::Semaphore::try_set_permits_with_ttl).
        ///
        /// # Errors
        /// As [`Semaphore::try_set_permits_with_ttl`](crate::Semaphore::try_set_permits_with_ttl).
        fn try_set_permits_with_ttl(&self, permits: u32, ttl: Duration) -> Result<bool>;
        /// As [`Semaphore::acquire_many`](crate::Semaphore::acquire_many).
        ///
        /// # Errors
        /// As [`Semaphore::acquire_many`](crate::Semaphore::acquire_many).
        #[doc(alias = "acquire")]
        fn acquire_many(&self, permits: u32) -> Result<()>;
        /// As [`Semaphore::try_acquire_many`](crate::Semaphore::try_acquire_many).
        ///
        /// # Errors
        /// As [`Semaphore::try_acquire_many`](crate::Semaphore::try_acquire_many).
        #[doc(alias = "tryAcquire")]
        fn try_acquire_many(&self, permits: u32) -> Result<bool>;
        /// As [`Semaphore::try_acquire_many_for`](crate::Semaphore::try_acquire_many_for).
        ///
        /// # Errors
        /// As [`Semaphore::try_acquire_many_for`](crate::Semaphore::try_acquire_many_for).
        #[doc(alias = "tryAcquire")]
        fn try_acquire_many_for(&self, permits: u32, wait: Duration) -> Result<bool>;
        /// As [`Semaphore::acquire`](crate::Semaphore::acquire).
        ///
        /// # Errors
        /// As [`Semaphore::acquire`](crate::Semaphore::acquire).
        #[deprecated(since = "0.1.0", note = "use `acquire_many(permits)`")]
        fn acquire(&self, permits: i64) -> Result<()>;
        /// As [`Semaphore::try_acquire`](crate::Semaphore::try_acquire).
        ///
        /// # Errors
        /// As [`Semaphore::try_acquire`](crate::Semaphore::try_acquire).
        #[deprecated(since = "0.1.0", note = "use `try_acquire_many(permits)`")]
        fn try_acquire(&self, permits: i64) -> Result<bool>;
        /// As [`Semaphore::try_acquire_for`](crate::Semaphore::try_acquire_for).
        ///
        /// # Errors
        /// As [`Semaphore::try_acquire_for`](crate::Semaphore::try_acquire_for).
        #[deprecated(since = "0.1.0", note = "use `try_acquire_many_for(permits, wait)`")]
        fn try_acquire_for(&self, permits: i64, wait: Duration) -> Result<bool>;
        /// As [`Semaphore::release`](crate::Semaphore::release).
        ///
        /// # Errors
        /// As [`Semaphore::release`](crate::Semaphore::release).
        fn release(&self, permits: u32) -> Result<()>;
        /// As [`Semaphore::release_if_exists`](crate::Semaphore::release_if_exists).
        ///
        /// # Errors
        /// As [`Semaphore::release_if_exists`](crate::Semaphore::release_if_exists).
        fn release_if_exists(&self, permits: u32) -> Result<bool>;
        /// As [`Semaphore::available_permits`](crate::Semaphore::available_permits).
        ///
        /// # Errors
        /// As [`Semaphore::available_permits`](crate::Semaphore::available_permits).
        fn available_permits(&self) -> Result<i64>;
        /// As [`Semaphore::drain_permits`](crate::Semaphore::drain_permits).
        ///
        /// # Errors
        /// As [`Semaphore::drain_permits`](crate::Semaphore::drain_permits).
        fn drain_permits(&self) -> Result<i64>;
        /// As [`Semaphore::add_permits`](crate::Semaphore::add_permits).
        ///
        /// # Errors
        /// As [`Semaphore::add_permits`](crate::Semaphore::add_permits).
        fn add_permits(&self, delta: i64) -> Result<()>;
        /// As [`Semaphore::delete`](crate::Semaphore::delete).
        ///
        /// # Errors
        /// As [`Semaphore::delete`](crate::Semaphore::delete).
        fn delete(&self) -> Result<bool>;
    }
}

/// The blocking [`SemaphorePermits`](crate::SemaphorePermits): permits given back before
/// `drop` returns (in the background when dropped inside an async runtime).
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../docs/snippets/blocking_semaphore.rs")]
/// ```
#[must_use = "dropping the guard gives the permits back at once"]
pub struct SemaphorePermits {
    inner: Option<crate::SemaphorePermits>,
    semaphore: Semaphore,
}

impl fmt::Debug for SemaphorePermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::SemaphorePermits")
            .field(&self.inner)
            .finish()
    }
}

impl SemaphorePermits {
    fn taken(&self) -> &crate::SemaphorePermits {
        self.inner.as_ref().expect("held until consumed")
    }

    /// As [`SemaphorePermits::permits`](crate::SemaphorePermits::permits).
    pub fn permits(&self) -> u32 {
        self.taken().permits()
    }

    /// The semaphore they were taken from.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// As [`SemaphorePermits::forget`](crate::SemaphorePermits::forget).
    pub fn forget(mut self) -> u32 {
        let taken = self.inner.take().expect("held until consumed");
        taken.forget()
    }

    /// As [`SemaphorePermits::release`](crate::SemaphorePermits::release).
    ///
    /// # Errors
    /// As [`SemaphorePermits::release`](crate::SemaphorePermits::release).
    pub fn release(mut self) -> Result<()> {
        let taken = self.inner.take().expect("held until consumed");
        self.semaphore
            .runtime
            .block_on("blocking::SemaphorePermits::release", taken.release())
    }
}

impl Drop for SemaphorePermits {
    fn drop(&mut self) {
        if let Some(taken) = self.inner.take() {
            let name = self.semaphore.name().to_owned();
            let done = async move {
                if let Err(error) = taken.release().await {
                    tracing::warn!(%error, semaphore = %name, "giving back a dropped guard's permits failed; they stay taken");
                }
            };
            let runtime = &self.semaphore.runtime;
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(runtime.get().spawn(done));
            } else {
                runtime.block_on("dropping blocking::SemaphorePermits", done);
            }
        }
    }
}
