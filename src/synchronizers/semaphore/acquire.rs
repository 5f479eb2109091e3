//! Taking permits: the calls, and their wait (protocol §13.2). The count forms are
//! `acquire_many`, as on [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore) and
//! tokio's semaphore; the guard forms take a count on both semaphores.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::core::wait::{self, Wait};
use crate::topology::pubsub::Messages;

use super::attempt::attempt;
use super::{semaphore_messages, Inner, Semaphore, SemaphorePermits};

impl Semaphore {
    /// Takes `permits` permits, waiting as long as it takes (Redisson's `acquire(permits)`).
    /// `0` returns at once without asking Redis. See [`acquire_guard`](Self::acquire_guard)
    /// for permits given back when dropped.
    ///
    /// A waiter wakes on any count published on the semaphore's channel, by this crate or
    /// Java, and looks again every 15 seconds in any case, so a lost message delays it by
    /// that much at most.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, it leaves no permit taken. An attempt whose
    /// script was on the wire has its permits given back once its reply arrives.
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds another type;
    /// [`Error::Redis`](crate::Error::Redis) when Redis fails the first attempt, or stays
    /// unreachable while waiting for the watchdog timeout (from when the connection was
    /// lost on a single server; from the next look, within 15 s, on a cluster or behind
    /// Sentinel); an attempt whose reply was lost is undone in the background;
    /// [`Error::Closed`](crate::Error::Closed) after shutdown.
    #[doc(alias = "acquire")]
    pub fn acquire_many(&self, permits: u32) -> impl Future<Output = Result<()>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            acquire_within(&inner, permits, Wait::Forever)
                .await
                .map(drop)
        }
    }

    /// One attempt to take `permits` permits, without waiting (Redisson's
    /// `tryAcquire(permits)`): `true` when they were taken. `0` is `true` without asking
    /// Redis.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while its script is on the wire, the permits it takes are given
    /// back once its reply arrives.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), without the waiting.
    #[doc(alias = "tryAcquire")]
    pub fn try_acquire_many(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move { acquire_within(&inner, permits, Wait::Once).await }
    }

    /// Takes `permits` permits, waiting at most `wait` (Redisson's `tryAcquire(permits,
    /// wait)`): `true` when they were taken, `false` when the wait ran out. A zero wait
    /// makes one attempt.
    ///
    /// # Cancel safety
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) also for a wait too long to
    /// represent.
    #[doc(alias = "tryAcquire")]
    pub fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move { acquire_within(&inner, permits, Wait::from_limit(wait)?).await }
    }

    /// [`acquire_many`](Self::acquire_many), with a guard that gives the permits back when
    /// dropped.
    ///
    /// # Cancel safety
    /// As [`acquire_many`](Self::acquire_many): the guard is made in the same poll that
    /// learns the permits were taken.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn acquire_guard(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<SemaphorePermits>> + Send + 'static {
        let this = self.clone();
        async move {
            acquire_within(&this.inner, permits, Wait::Forever).await?;
            Ok(SemaphorePermits::new(this, permits))
        }
    }

    /// [`try_acquire_many`](Self::try_acquire_many), with a guard: `None` when too few are
    /// free.
    ///
    /// # Cancel safety
    /// As [`try_acquire_many`](Self::try_acquire_many).
    ///
    /// # Errors
    /// As [`try_acquire_many`](Self::try_acquire_many).
    pub fn try_acquire_guard(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<Option<SemaphorePermits>>> + Send + 'static {
        let this = self.clone();
        async move {
            let taken = acquire_within(&this.inner, permits, Wait::Once).await?;
            Ok(taken.then(|| SemaphorePermits::new(this, permits)))
        }
    }

    /// [`try_acquire_many_for`](Self::try_acquire_many_for), with a guard: `None` when the
    /// wait ran out.
    ///
    /// # Cancel safety
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As [`try_acquire_many_for`](Self::try_acquire_many_for).
    pub fn try_acquire_guard_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<SemaphorePermits>>> + Send + 'static {
        let this = self.clone();
        async move {
            let taken = acquire_within(&this.inner, permits, Wait::from_limit(wait)?).await?;
            Ok(taken.then(|| SemaphorePermits::new(this, permits)))
        }
    }

    /// Renamed [`acquire_many`](Self::acquire_many), whose count is a `u32`.
    ///
    /// # Cancel safety
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a count that is
    /// negative or over `u32::MAX`.
    #[deprecated(
        since = "0.1.0",
        note = "use `acquire_many(permits)`, as on PermitExpirableSemaphore and tokio's \
                Semaphore; a later version makes `acquire()` take one permit"
    )]
    pub fn acquire(&self, permits: i64) -> impl Future<Output = Result<()>> + Send + 'static {
        let count = self.count(permits);
        let inner = self.inner.clone();
        async move {
            acquire_within(&inner, count?, Wait::Forever)
                .await
                .map(drop)
        }
    }

    /// Renamed [`try_acquire_many`](Self::try_acquire_many), whose count is a `u32`.
    ///
    /// # Cancel safety
    /// As [`try_acquire_many`](Self::try_acquire_many).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), without the waiting.
    #[deprecated(
        since = "0.1.0",
        note = "use `try_acquire_many(permits)`; a later version makes `try_acquire()` take \
                one permit"
    )]
    pub fn try_acquire(&self, permits: i64) -> impl Future<Output = Result<bool>> + Send + 'static {
        let count = self.count(permits);
        let inner = self.inner.clone();
        async move { acquire_within(&inner, count?, Wait::Once).await }
    }

    /// Renamed [`try_acquire_many_for`](Self::try_acquire_many_for), whose count is a `u32`.
    ///
    /// # Cancel safety
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire) and [`try_acquire_many_for`](Self::try_acquire_many_for).
    #[deprecated(
        since = "0.1.0",
        note = "use `try_acquire_many_for(permits, wait)`; a later version makes \
                `try_acquire_for(wait)` take one permit"
    )]
    pub fn try_acquire_for(
        &self,
        permits: i64,
        wait: Duration,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let count = self.count(permits);
        let inner = self.inner.clone();
        async move { acquire_within(&inner, count?, Wait::from_limit(wait)?).await }
    }

    /// A count of the deprecated forms, which took an `i64`.
    fn count(&self, permits: i64) -> Result<u32> {
        u32::try_from(permits).map_err(|_| {
            crate::Error::invalid(format!(
                "semaphore {:?}: cannot acquire {permits} permits: a number of permits must be \
                 0 or more, at most {}",
                &*self.inner.name,
                u32::MAX
            ))
        })
    }
}

/// Takes `permits`, waiting as `wait` says: `true` when taken, `false` when the wait ran
/// out.
async fn acquire_within(inner: &Arc<Inner>, permits: u32, wait: Wait) -> Result<bool> {
    if permits == 0 {
        inner.engine.check_open()?;
        return Ok(true);
    }
    let what = (&*inner.name, "semaphore");
    let wake = (&*inner.channel, semaphore_messages as Messages);
    let permits = i64::from(permits);
    let taken = wait::synchronizer(&inner.engine, what, wake, wait, || attempt(inner, permits));
    let Some(record) = taken.await? else {
        return Ok(false);
    };
    // The caller has the permits: the attempt's record is needed no more.
    inner.engine.done_records().done(&inner.raw, record);
    Ok(true)
}
