//! The guard of a multi-lock: every member held, released together.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

#[cfg(doc)]
use crate::base::error::Error;
use crate::base::error::Result;
use crate::core::guard::LockGuard;
use crate::core::kind::Member;
#[cfg(doc)]
use crate::locks::multi_lock::RedLock;

/// The members held by a [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock). Release with
/// [`unlock`](MultiLockGuard::unlock).
///
/// Dropping the guard releases every member in the background.
#[must_use = "dropping the guard releases the locks in the background"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard {
    pub(super) guards: Vec<LockGuard<Member>>,
    pub(super) needed: usize,
    pub(super) valid_until: Option<Instant>,
}

impl MultiLockGuard {
    /// Releases every member, all at once, and reports the first error after trying them
    /// all.
    ///
    /// # Cancel safety
    /// Cancel-safe: every member's release starts when this is first polled, and one
    /// dropped before it is done finishes in the background, as a dropped
    /// [`LockGuard`]'s does; dropped before its first poll, the guard is dropped, which
    /// releases every member in the background.
    ///
    /// # Errors
    /// The first member's error: [`Error::NotHeld`] for a member whose hold was lost,
    /// [`Error::Redis`] for one that could not be reached.
    pub async fn unlock(self) -> Result<()> {
        let mut releases = JoinSet::new();
        for guard in self.guards {
            releases.spawn(guard.unlock());
        }
        let mut first_error = None;
        while let Some(joined) = releases.join_next().await {
            if let Ok(Err(error)) = joined {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// How many members are held (all of them, or a majority for a [`RedLock`]).
    pub fn held(&self) -> usize {
        self.guards.len()
    }

    /// The names of the members held.
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(|g| g.name()).collect()
    }

    /// The fencing tokens of the fenced members held, in member order.
    pub fn fence_tokens(&self) -> Vec<u64> {
        self.guards.iter().filter_map(|g| g.fence_token()).collect()
    }

    /// With a fixed lease: how long the hold is still valid (the lease, less the time
    /// acquiring took and the clock-drift allowance, less the time since). `None` with the
    /// watchdog lease, which keeps the hold valid while renewals succeed.
    pub fn validity(&self) -> Option<Duration> {
        self.valid_until
            .map(|until| until.saturating_duration_since(Instant::now()))
    }

    /// Completes when the hold is lost: a member's lease was lost (for a [`RedLock`]: so
    /// many that no majority is left), or a fixed lease's validity ran out.
    ///
    /// # Cancel safety
    /// Cancel-safe; it only watches.
    pub fn lease_lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let losses: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = self
            .guards
            .iter()
            .map(|g| Box::pin(g.lease_lost()) as Pin<Box<dyn Future<Output = ()> + Send>>)
            .collect();
        let tolerated = self.guards.len() - self.needed.min(self.guards.len());
        let valid_until = self.valid_until;
        async move {
            let members = LossCount {
                losses: losses.into_iter().map(Some).collect(),
                lost: 0,
                tolerated,
            };
            match valid_until {
                Some(until) => {
                    tokio::select! {
                        _ = members => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
                None => members.await,
            }
        }
    }

    /// Whether [`lease_lost`](MultiLockGuard::lease_lost) has completed.
    pub fn is_lease_lost(&self) -> bool {
        let lost = self.guards.iter().filter(|g| g.is_lease_lost()).count();
        let tolerated = self.guards.len() - self.needed.min(self.guards.len());
        lost > tolerated
            || self
                .valid_until
                .is_some_and(|until| Instant::now() >= until)
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("members", &self.names())
            .field("needed", &self.needed)
            .finish()
    }
}

/// Completes once more than `tolerated` of the futures completed.
struct LossCount {
    losses: Vec<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    lost: usize,
    tolerated: usize,
}

impl Future for LossCount {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        for slot in &mut this.losses {
            if let Some(loss) = slot {
                if loss.as_mut().poll(cx).is_ready() {
                    *slot = None;
                    this.lost += 1;
                }
            }
        }
        if this.lost > this.tolerated {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}
