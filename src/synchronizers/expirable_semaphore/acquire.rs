//! Taking permits: the calls, and their wait (protocol §15.3).

use std::future::Future;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::time::epoch_millis;
use crate::core::wait::{self, Wait};
use crate::synchronizers::semaphore::semaphore_messages;
use crate::topology::pubsub::Messages;

use super::attempt::attempt;
use super::{ExpirablePermits, PermitExpirableSemaphore, PermitId};

impl PermitExpirableSemaphore {
    /// Takes one permit, waiting as long as it takes (Redisson's `acquire(leaseTime)`):
    /// its id. The permit goes back to the pool once `lease` has passed (`None`: never;
    /// release it by its id). See [`acquire_guard`](Self::acquire_guard) for permits given
    /// back when dropped.
    ///
    /// A waiter wakes on any count published on the semaphore's channel, by this crate or
    /// Java; when the earliest lease ends (it then reaps it); and every 15 seconds in any
    /// case, so a lost message delays it by that much at most.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, it leaves no permit taken. An attempt whose
    /// script was on the wire has its permits given back once its reply arrives, or by its
    /// ids when the reply was lost.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease under 1 ms or
    /// too long to represent; [`Error::WrongType`](crate::Error::WrongType) when a key holds
    /// another type; [`Error::Redis`](crate::Error::Redis) when Redis fails the first
    /// attempt, or stays unreachable while waiting for the watchdog timeout, as
    /// [`Semaphore::acquire_many`](crate::Semaphore::acquire_many) says (an attempt
    /// whose reply was lost is undone in the background);
    /// [`Error::Closed`](crate::Error::Closed) after shutdown.
    pub fn acquire(
        &self,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<PermitId>> + Send + 'static {
        let this = self.clone();
        async move {
            let ids = this.acquire_within(1, lease, Wait::Forever).await?;
            Ok(one(ids.expect("no deadline")))
        }
    }

    /// Takes `permits` permits at once, waiting as long as it takes (Redisson's
    /// `acquire(permits, leaseTime)`): their ids, each with the same lease.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) also for fewer than 1
    /// permit or more than [`MAX_ACQUIRE`](crate::MAX_ACQUIRE).
    #[doc(alias = "acquire")]
    pub fn acquire_many(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Vec<PermitId>>> + Send + 'static {
        let this = self.clone();
        async move {
            let ids = this
                .acquire_within(permits.into(), lease, Wait::Forever)
                .await?;
            Ok(ids.expect("no deadline"))
        }
    }

    /// One attempt to take a permit, without waiting (Redisson's `tryAcquire()` with a
    /// lease): its id, or `None` when none is free.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), without the waiting.
    #[doc(alias = "tryAcquire")]
    pub fn try_acquire(
        &self,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<PermitId>>> + Send + 'static {
        let this = self.clone();
        async move { Ok(this.acquire_within(1, lease, Wait::Once).await?.map(one)) }
    }

    /// One attempt to take `permits` permits at once, without waiting: their ids, or
    /// `None` when too few are free.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), without the waiting.
    #[doc(alias = "tryAcquire")]
    pub fn try_acquire_many(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Vec<PermitId>>>> + Send + 'static {
        let this = self.clone();
        async move { this.acquire_within(permits.into(), lease, Wait::Once).await }
    }

    /// Takes a permit, waiting at most `wait` (Redisson's `tryAcquire(waitTime,
    /// leaseTime)`): its id, or `None` when the wait ran out. A zero wait makes one attempt.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) also for a wait too long
    /// to represent.
    #[doc(alias = "tryAcquire")]
    pub fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<PermitId>>> + Send + 'static {
        let this = self.clone();
        async move {
            let ids = this
                .acquire_within(1, lease, Wait::from_limit(wait)?)
                .await?;
            Ok(ids.map(one))
        }
    }

    /// Takes `permits` permits at once, waiting at most `wait`: their ids, or `None` when
    /// the wait ran out.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many) and [`try_acquire_for`](Self::try_acquire_for).
    #[doc(alias = "tryAcquire")]
    pub fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Vec<PermitId>>>> + Send + 'static {
        let this = self.clone();
        async move {
            let wait = Wait::from_limit(wait)?;
            this.acquire_within(permits.into(), lease, wait).await
        }
    }

    /// [`acquire_many`](Self::acquire_many), with a guard that gives the permits back when
    /// dropped.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire): the guard is made in the same poll that learns the
    /// permits were taken.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn acquire_guard(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<ExpirablePermits>> + Send + 'static {
        let this = self.clone();
        async move {
            let ids = this
                .acquire_within(permits.into(), lease, Wait::Forever)
                .await?;
            Ok(ExpirablePermits::new(this, ids.expect("no deadline")))
        }
    }

    /// [`try_acquire_many`](Self::try_acquire_many), with a guard: `None` when too few are
    /// free.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`try_acquire_many`](Self::try_acquire_many).
    pub fn try_acquire_guard(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<ExpirablePermits>>> + Send + 'static {
        let this = self.clone();
        async move {
            let ids = this
                .acquire_within(permits.into(), lease, Wait::Once)
                .await?;
            Ok(ids.map(|ids| ExpirablePermits::new(this, ids)))
        }
    }

    /// [`try_acquire_many_for`](Self::try_acquire_many_for), with a guard: `None` when the
    /// wait ran out.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`try_acquire_many_for`](Self::try_acquire_many_for).
    pub fn try_acquire_guard_for(
        &self,
        permits: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<ExpirablePermits>>> + Send + 'static {
        let this = self.clone();
        async move {
            let wait = Wait::from_limit(wait)?;
            let ids = this.acquire_within(permits.into(), lease, wait).await?;
            Ok(ids.map(|ids| ExpirablePermits::new(this, ids)))
        }
    }

    /// Redisson's acquire loop: try; subscribe; try on each message, when the earliest
    /// lease ends, or after the re-check, until taken or the deadline passed.
    async fn acquire_within(
        &self,
        permits: i64,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<Vec<PermitId>>> {
        self.check("acquire", permits, 1)?;
        // Checked here; each attempt counts its lease from its own start.
        self.lease_end(lease, epoch_millis())?;
        let inner = &self.inner;
        let what = (&*inner.name, "permit_expirable_semaphore");
        let wake = (&*inner.channel, semaphore_messages as Messages);
        let attempt = || attempt(inner, permits, lease);
        wait::synchronizer(&inner.engine, what, wake, wait, attempt).await
    }
}

fn one(mut ids: Vec<PermitId>) -> PermitId {
    ids.pop().expect("one permit asked, one id")
}
