//! The guard of permits taken from a [`PermitExpirableSemaphore`].

use crate::base::error::Result;
use crate::core::guard::release_in_background;

use super::{PermitExpirableSemaphore, PermitId};

/// Permits taken by [`PermitExpirableSemaphore::acquire_guard`] and its `try_` forms, given
/// back when the guard is dropped (in the background).
///
/// Each permit keeps its own lease: one that ran out goes back to the pool whether or not
/// the guard still lives, and the guard's release then says so. A guard still held when its
/// client shuts down has its permits given back by
/// [`LockClient::shutdown`](crate::LockClient::shutdown); its drop or release then does
/// nothing.
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
    /// Its entry among what the client owes, while it holds the permits (`None`: given
    /// back, kept, or taken by the shutdown).
    owed: Option<u64>,
}

impl ExpirablePermits {
    pub(super) fn new(semaphore: PermitExpirableSemaphore, ids: Vec<PermitId>) -> Self {
        let (giving, held) = (semaphore.clone(), ids.clone());
        let owed = (semaphore.inner.engine.owed()).hold(Box::new(move || {
            // Each id on its own, so that one whose lease ran out keeps none of the others
            // back; made now, so that the shutdown counts them among its writes.
            let releases: Vec<_> = (held.iter())
                .map(|id| giving.try_release_many(std::slice::from_ref(id)))
                .collect();
            Box::pin(async move {
                for release in releases {
                    release.await?;
                }
                Ok(())
            })
        }));
        ExpirablePermits {
            semaphore,
            ids,
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
        self.still_owed();
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
    /// given back. `Ok(true)` at once when the client's shutdown gave them back.
    pub fn release(mut self) -> impl std::future::Future<Output = Result<bool>> + Send + 'static {
        let releases: Vec<_> = match self.still_owed() {
            true => (self.ids.iter())
                .map(|id| self.semaphore.try_release(*id))
                .collect(),
            false => Vec::new(),
        };
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
        if self.still_owed() && !self.ids.is_empty() {
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
