//! The guard of permits taken from a [`Semaphore`].

use crate::base::error::Result;
use crate::core::guard::release_in_background;

use super::Semaphore;

/// Permits taken by [`Semaphore::acquire_guard`] and its `try_` forms, given back when the
/// guard is dropped (in the background), like `tokio::sync::SemaphorePermit`.
///
/// A guard still held when its client shuts down has its permits given back by
/// [`LockClient::shutdown`](crate::LockClient::shutdown); its drop or release then does
/// nothing. A process that dies while holding permits never gives them back: Redisson's
/// semaphore has no owner and no lease, so they stay taken until someone releases or adds
/// permits.
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
    permits: u32,
    /// Its entry among what the client owes, while it holds the permits (`None`: given
    /// back, kept, or taken by the shutdown).
    owed: Option<u64>,
}

impl SemaphorePermits {
    pub(super) fn new(semaphore: Semaphore, permits: u32) -> SemaphorePermits {
        let giving = semaphore.clone();
        let owed = (semaphore.inner.engine.owed())
            .hold(Box::new(move || Box::pin(giving.release(permits))));
        SemaphorePermits {
            semaphore,
            permits,
            owed,
        }
    }

    /// Whether the permits are still this guard's to give back (not taken by a shutdown).
    fn still_owed(&mut self) -> bool {
        match self.owed.take() {
            Some(id) => self.semaphore.inner.engine.owed().take(id),
            None => false,
        }
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The semaphore they were taken from.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// Keeps the permits taken: nothing is given back, now, on drop or at shutdown.
    /// Returns how many.
    pub fn forget(mut self) -> u32 {
        self.still_owed();
        self.permits
    }

    /// Gives the permits back now (as [`Semaphore::release`]).
    ///
    /// # Cancel safety
    /// The release starts when this is called and finishes even if the future is dropped.
    ///
    /// # Errors
    /// As [`Semaphore::release`]. `Ok` at once when the client's shutdown gave them back.
    pub fn release(mut self) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let owed = self.still_owed();
        let release = owed.then(|| self.semaphore.release(self.permits));
        async move {
            match release {
                Some(release) => release.await,
                None => Ok(()),
            }
        }
    }
}

impl Drop for SemaphorePermits {
    fn drop(&mut self) {
        if self.still_owed() && self.permits > 0 {
            let release = self.semaphore.release(self.permits);
            release_in_background(async move {
                if let Err(error) = release.await {
                    tracing::warn!(%error, "giving back a dropped guard's permits failed");
                }
            });
        }
    }
}
