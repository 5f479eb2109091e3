//! The guard of permits taken from a [`PermitExpirableSemaphore`].

use crate::base::error::Result;
use crate::core::guard::release_in_background;

use super::{PermitExpirableSemaphore, PermitId};

/// Permits taken by [`PermitExpirableSemaphore::acquire_guard`] and its `try_` forms, given
/// back when the guard is dropped (in the background).
///
/// Each permit keeps its own lease: one that ran out goes back to the pool whether or not
/// the guard still lives, and the guard's release then says so.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../../docs/snippets/expirable_semaphore.rs")]
/// ```
#[must_use = "dropping the guard gives the permits back, in the background: a moment after the drop"]
#[derive(Debug)]
pub struct ExpirablePermits {
    semaphore: PermitExpirableSemaphore,
    ids: Vec<PermitId>,
    armed: bool,
}

impl ExpirablePermits {
    pub(super) fn new(semaphore: PermitExpirableSemaphore, ids: Vec<PermitId>) -> Self {
        ExpirablePermits {
            semaphore,
            ids,
            armed: true,
        }
    }

    /// The ids of the permits this guard holds.
    pub fn ids(&self) -> &[PermitId] {
        &self.ids
    }

    /// The semaphore they were taken from.
    pub fn semaphore(&self) -> &PermitExpirableSemaphore {
        &self.semaphore
    }

    /// Keeps the permits taken: nothing is given back on drop. Returns their ids, to
    /// release later (until their leases end).
    pub fn forget(mut self) -> Vec<PermitId> {
        self.armed = false;
        std::mem::take(&mut self.ids)
    }

    /// Gives the permits back now, one by one (as
    /// [`PermitExpirableSemaphore::try_release`]): `true` when every one was still held
    /// with its lease running; `false` when one was not (given back already, or its lease
    /// ran out: an expired permit not yet reaped goes back to the pool all the same).
    ///
    /// # Cancel safety
    /// The release starts when this is called and finishes even if the future is dropped.
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::try_release`]: the permits may or may not have been
    /// given back.
    pub fn release(mut self) -> impl std::future::Future<Output = Result<bool>> + Send + 'static {
        self.armed = false;
        let releases: Vec<_> = (self.ids.iter())
            .map(|id| self.semaphore.try_release(*id))
            .collect();
        async move {
            let mut all = true;
            for release in releases {
                all &= release.await?;
            }
            Ok(all)
        }
    }
}

impl Drop for ExpirablePermits {
    fn drop(&mut self) {
        if self.armed && !self.ids.is_empty() {
            self.armed = false;
            let ids = std::mem::take(&mut self.ids);
            let releases: Vec<_> = ids
                .iter()
                .map(|id| self.semaphore.try_release(*id))
                .collect();
            release_in_background(async move {
                for release in releases {
                    if let Err(error) = release.await {
                        tracing::warn!(%error, "giving back a dropped guard's permit failed");
                    }
                }
            });
        }
    }
}
