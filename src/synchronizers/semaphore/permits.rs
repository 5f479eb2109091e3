//! The guard of permits taken from a [`Semaphore`].

use crate::base::error::Result;
use crate::core::guard::release_in_background;

use super::Semaphore;

/// Permits taken by [`Semaphore::acquire_guard`] and its `try_` forms, given back when the
/// guard is dropped (in the background), like `tokio::sync::SemaphorePermit`.
///
/// A process that dies while holding permits never gives them back: Redisson's semaphore
/// has no owner and no lease, so they stay taken until someone releases or adds permits.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../../docs/snippets/semaphore_permits.rs")]
/// ```
#[must_use = "dropping the guard gives the permits back, in the background: a moment after the drop"]
#[derive(Debug)]
pub struct SemaphorePermits {
    semaphore: Semaphore,
    permits: i64,
    armed: bool,
}

impl SemaphorePermits {
    pub(super) fn new(semaphore: Semaphore, permits: i64) -> SemaphorePermits {
        SemaphorePermits {
            semaphore,
            permits,
            armed: true,
        }
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> i64 {
        self.permits
    }

    /// The semaphore they were taken from.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// Keeps the permits taken: nothing is given back, now or on drop. Returns how many.
    pub fn forget(mut self) -> i64 {
        self.armed = false;
        self.permits
    }

    /// Gives the permits back now (as [`Semaphore::release`]).
    ///
    /// # Cancel safety
    /// The release starts when this is called and finishes even if the future is dropped.
    ///
    /// # Errors
    /// As [`Semaphore::release`]: the permits may or may not have been given back.
    pub fn release(mut self) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        self.armed = false;
        self.semaphore.release(self.permits)
    }
}

impl Drop for SemaphorePermits {
    fn drop(&mut self) {
        if self.armed && self.permits > 0 {
            let release = self.semaphore.release(self.permits);
            release_in_background(async move {
                if let Err(error) = release.await {
                    tracing::warn!(%error, "giving back a dropped guard's permits failed");
                }
            });
        }
    }
}
