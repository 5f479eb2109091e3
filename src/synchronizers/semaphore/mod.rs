//! Redisson's `RSemaphore` (protocol §13): a counter of free permits in a plain
//! Redis string, shared with Java clients, and its waiters woken by the new count published
//! on `redisson_sc:{name}`.
//!
//! Redisson's semaphore has no owner and no lease: permits taken by a process that dies
//! stay taken until someone releases or adds them. What this crate adds is on its own side
//! only: an acquire attempt whose reply never came (a timeout, a lost connection, the
//! future dropped while the script was on the wire) is undone, by a record each attempt
//! leaves under a key of its own (see `attempt.rs` and `lua/semaphore_acquire.lua`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::KeysInterface;
use fred::types::Value;

use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::{self};
use crate::core::guard::Finishing;
use crate::core::wait::{self, Wait};
use crate::engine::owed::Writing;
use crate::engine::Engine;
use crate::synchronizers::counter::{int_reply, Counter};
use crate::topology::pubsub::Messages;
use crate::topology::script::{static_arg, Call};
use crate::topology::script::{SEMAPHORE_ADD, SEMAPHORE_DRAIN, SEMAPHORE_RELEASE};
use crate::topology::waiters;

mod attempt;
mod permits;

use attempt::attempt;
pub use permits::SemaphorePermits;

/// The most permits a semaphore counts, either way: the scripts count in Lua numbers,
/// which hold whole numbers exactly up to 2^53 - 1.
pub const MAX_PERMITS: i64 = (1 << 53) - 1;

/// How long a waiter whose attempt found too few permits waits for a message before it
/// looks again. Java waiters have no such fallback (a lost message costs them their whole
/// wait); this bounds what one costs here.
const RECHECK: Duration = Duration::from_secs(15);

/// A semaphore's messages (protocol §13.3): any decimal count wakes every local waiter, who
/// each try again (Java wakes up to that many per JVM; waking all is never wrong, only a
/// little busier). Anything else asks nothing, as Java's decoder drops it.
pub(crate) fn semaphore_messages(payload: &str) -> Option<waiters::Wake> {
    payload
        .trim()
        .parse::<i64>()
        .ok()
        .map(|_| waiters::Wake::All)
}

/// A handle on the semaphore `name` (Redisson's `getSemaphore(name)`): cheap to clone, no
/// I/O until a method is called.
///
/// The counter is the key `name` (after the client's name prefix), a string holding the
/// free permits in decimal, with no TTL; releases, `try_set_permits` and `add_permits`
/// publish the new count on `redisson_sc:{name}`, with the client's pub/sub flavour. Java's
/// `RSemaphore` on the same name shares the permits, and each side wakes the other's
/// waiters.
///
/// # No owner, no lease
/// As in Redisson, permits belong to no one: anyone may release any number of them (a
/// double release silently raises the capacity), and permits held by a process that
/// crashes are gone until someone releases or adds them. Use a lock where a holder's crash
/// must free what it held.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../../docs/snippets/semaphore.rs")]
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The counter, and its channel `redisson_sc:{raw}`.
    counter: Counter,
    /// This client's id, in attempt records.
    client: String,
}

impl Inner {
    /// Gives `permits` back, exactly once (`lua/semaphore_release.lua`); with `if_exists`,
    /// only to an existing counter (the reply is then nil when there was none).
    async fn release(
        &self,
        permits: i64,
        if_exists: bool,
        writing: Result<Writing>,
    ) -> Result<Value> {
        self.write_once(writing, |record, kept, done| {
            let mut keys = vec![self.key(), self.channel(), record];
            keys.extend(done);
            let only = static_arg(if if_exists { "1" } else { "0" });
            let args = [Value::from(permits), self.publish(), kept, only];
            Call::of(&SEMAPHORE_RELEASE, keys, args)
        })
        .await
    }
}

impl std::ops::Deref for Inner {
    type Target = Counter;

    fn deref(&self) -> &Counter {
        &self.counter
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &&*self.inner.name)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Result<Semaphore> {
        let raw = engine.lock_keys(name)?.raw;
        let channel = keys::semaphore_channel(&raw).into();
        let client = engine.client_id().to_string();
        let inner = Inner {
            counter: Counter {
                engine,
                name: name.into(),
                raw,
                channel,
                records: keys::semaphore_attempt,
            },
            client,
        };
        Ok(Semaphore {
            inner: Arc::new(inner),
        })
    }

    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sets the permits to `permits` if the semaphore has no counter yet (Redisson's
    /// `trySetPermits`), and tells waiters the new count. `true` when it was set; `false`
    /// when a counter existed, which is left as it was. `0` is a valid count.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative count or one over [`MAX_PERMITS`];
    /// [`Error::WrongType`] when the key holds another type; [`Error::Redis`] when Redis
    /// cannot be reached; [`Error::NotReplicated`] when the client checks replicas and none
    /// confirmed the write.
    pub fn try_set_permits(
        &self,
        permits: i64,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let this = self.clone();
        async move { this.try_set_permits_now(permits).await }
    }

    /// As [`try_set_permits`](Self::try_set_permits), with a TTL on the counter when it is
    /// set (Redisson's `trySetPermits(permits, ttl)`): the semaphore is gone `ttl` later,
    /// permits taken or not (releases keep the TTL; `drain_permits` and `add_permits` drop
    /// it, as Java's do).
    ///
    /// # Cancel safety
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits); [`Error::InvalidArgument`] also for a
    /// TTL under one millisecond or over [`Lease::MAX_FIXED`](crate::Lease::MAX_FIXED).
    pub fn try_set_permits_with_ttl(
        &self,
        permits: i64,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let this = self.clone();
        async move {
            let ttl = crate::core::lease::Lease::fixed(ttl).map_err(|_| {
                Error::invalid(format!(
                    "semaphore {:?}: a TTL must be between 1 ms and Lease::MAX_FIXED, not {ttl:?}",
                    &*this.inner.name
                ))
            })?;
            this.set_permits_if_missing(permits, ttl.fixed_duration())
                .await
        }
    }

    /// Takes `permits` permits, waiting as long as it takes (Redisson's `acquire`). `0`
    /// returns at once without asking Redis. See [`acquire_guard`](Self::acquire_guard) for
    /// permits given back when dropped.
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
    /// [`Error::InvalidArgument`] for a negative count or one over [`MAX_PERMITS`];
    /// [`Error::WrongType`] when the key holds another type; [`Error::Redis`] when Redis
    /// fails the first attempt, or stays unreachable for the watchdog timeout while
    /// waiting (an attempt whose reply was lost is undone in the background);
    /// [`Error::Closed`] after shutdown.
    pub fn acquire(&self, permits: i64) -> impl Future<Output = Result<()>> + Send + 'static {
        let this = self.clone();
        async move { this.acquire_now(permits).await }
    }

    /// One attempt to take `permits` permits, without waiting (Redisson's `tryAcquire`):
    /// `true` when they were taken. `0` is `true` without asking Redis.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while its script is on the wire, the permits it takes are given
    /// back once its reply arrives.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), without the waiting.
    pub fn try_acquire(&self, permits: i64) -> impl Future<Output = Result<bool>> + Send + 'static {
        let this = self.clone();
        async move { this.try_acquire_now(permits).await }
    }

    /// Takes `permits` permits, waiting at most `wait` (Redisson's `tryAcquire(permits,
    /// wait)`): `true` when they were taken, `false` when the wait ran out. A zero wait
    /// makes one attempt.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); [`Error::InvalidArgument`] also for a wait too long
    /// to represent.
    pub fn try_acquire_for(
        &self,
        permits: i64,
        wait: Duration,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let this = self.clone();
        async move { this.try_acquire_for_now(permits, wait).await }
    }

    /// [`acquire`](Self::acquire), with a guard that gives the permits back when dropped.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire): the guard is made in the same poll that learns the
    /// permits were taken.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_guard(
        &self,
        permits: i64,
    ) -> impl Future<Output = Result<SemaphorePermits>> + Send + 'static {
        let this = self.clone();
        async move { this.acquire_guard_now(permits).await }
    }

    /// [`try_acquire`](Self::try_acquire), with a guard: `None` when too few are free.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    pub fn try_acquire_guard(
        &self,
        permits: i64,
    ) -> impl Future<Output = Result<Option<SemaphorePermits>>> + Send + 'static {
        let this = self.clone();
        async move { this.try_acquire_guard_now(permits).await }
    }

    /// [`try_acquire_for`](Self::try_acquire_for), with a guard: `None` when the wait ran
    /// out.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`try_acquire_for`](Self::try_acquire_for).
    pub fn try_acquire_guard_for(
        &self,
        permits: i64,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<SemaphorePermits>>> + Send + 'static {
        let this = self.clone();
        async move { this.try_acquire_guard_for_now(permits, wait).await }
    }

    /// Gives `permits` permits back (Redisson's `release`) and tells waiters the new count.
    /// Nothing checks that they were taken: releasing more than was taken raises the
    /// semaphore's capacity. A missing counter starts at 0; a TTL on it stays. `0` does
    /// nothing.
    ///
    /// # Exactly once
    /// A release whose connection drops, or that no replica confirmed, is sent again until
    /// Redis answers it and a replica confirms it, for up to 100 s; a copy that arrives after
    /// the first ran gives nothing back twice (each release leaves a record for a while, see
    /// the protocol document).
    ///
    /// # Cancel safety
    /// The release starts when this is called and finishes even if the future is dropped.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative count or one over [`MAX_PERMITS`];
    /// [`Error::Redis`] when the count would pass [`MAX_PERMITS`], or Redis stayed
    /// unreachable for 100 s of resends (the permits may or may not have been given back);
    /// [`Error::WrongType`]; [`Error::NotReplicated`] after 100 s of resends no replica
    /// confirmed; [`Error::Closed`] when the client shut down first.
    pub fn release(&self, permits: i64) -> impl Future<Output = Result<()>> + Send + 'static {
        let checked = self.check("release", permits, 0);
        let inner = self.inner.clone();
        let writing = inner.engine.owed().writing();
        Finishing::new(|| async move {
            checked?;
            if permits == 0 {
                return Ok(());
            }
            let reply = inner.release(permits, false, writing).await?;
            int_reply(&SEMAPHORE_RELEASE, reply).map(|_| ())
        })
    }

    /// As [`release`](Self::release), but only to a semaphore that exists (Redisson's
    /// `releaseIfExists`): `false`, changing nothing and telling no one, when there is no
    /// counter (never set, deleted, or its TTL ran out). `0` is `true` without asking Redis.
    ///
    /// # Cancel safety
    /// As [`release`](Self::release).
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub fn release_if_exists(
        &self,
        permits: i64,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let checked = self.check("release", permits, 0);
        let inner = self.inner.clone();
        let writing = inner.engine.owed().writing();
        Finishing::new(|| async move {
            checked?;
            if permits == 0 {
                return Ok(true);
            }
            match inner.release(permits, true, writing).await? {
                Value::Null => Ok(false),
                reply => int_reply(&SEMAPHORE_RELEASE, reply).map(|_| true),
            }
        })
    }

    /// The free permits now (Redisson's `availablePermits`): 0 when the counter is missing;
    /// negative when more were taken away than there were.
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or the value is not an integer;
    /// [`Error::WrongType`] when the key holds another type.
    pub fn available_permits(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let this = self.clone();
        async move { this.available_permits_now().await }
    }

    /// Takes every free permit (Redisson's `drainPermits`): the counter becomes 0 (a
    /// missing counter stays missing; a TTL is dropped, as Java's does). Returns the count
    /// before. Tells no one.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or the value is not an integer;
    /// [`Error::WrongType`]; [`Error::NotReplicated`].
    pub fn drain_permits(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let this = self.clone();
        async move { this.drain_permits_now().await }
    }

    /// Changes the free permits by `delta`, which may be negative (Redisson's `addPermits`),
    /// and tells waiters the new count, whatever it is. A missing counter counts as 0; the
    /// result may be 0 or negative (acquires then fail until enough are released); a TTL
    /// is dropped, as Java's does.
    ///
    /// # Cancel safety
    /// The change starts when this is called and finishes even if the future is dropped;
    /// it happens exactly once (see [`release`](Self::release)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a delta beyond [`MAX_PERMITS`] either way;
    /// [`Error::Redis`] when the count would pass [`MAX_PERMITS`], or Redis stayed
    /// unreachable for 100 s of resends (the change may or may not have been made);
    /// [`Error::WrongType`]; [`Error::NotReplicated`] after 100 s of resends no replica
    /// confirmed.
    pub fn add_permits(&self, delta: i64) -> impl Future<Output = Result<()>> + Send + 'static {
        let this = self.clone();
        let writing = this.inner.engine.owed().writing();
        Finishing::new(|| async move { this.add_permits_now(delta, writing).await })
    }

    async fn try_set_permits_now(&self, permits: i64) -> Result<bool> {
        self.set_permits_if_missing(permits, None).await
    }

    async fn set_permits_if_missing(&self, permits: i64, ttl: Option<Duration>) -> Result<bool> {
        self.check("set", permits, 0)?;
        self.inner.set_if_missing(permits, ttl).await
    }

    async fn acquire_now(&self, permits: i64) -> Result<()> {
        self.acquire_within(permits, Wait::Forever)
            .await
            .map(|_| ())
    }

    async fn try_acquire_now(&self, permits: i64) -> Result<bool> {
        self.acquire_within(permits, Wait::Once).await
    }

    async fn try_acquire_for_now(&self, permits: i64, wait: Duration) -> Result<bool> {
        self.acquire_within(permits, Wait::from_limit(wait)?).await
    }

    async fn acquire_guard_now(&self, permits: i64) -> Result<SemaphorePermits> {
        self.acquire(permits).await?;
        Ok(SemaphorePermits::new(self.clone(), permits))
    }

    async fn try_acquire_guard_now(&self, permits: i64) -> Result<Option<SemaphorePermits>> {
        let taken = self.try_acquire(permits).await?;
        Ok(taken.then(|| SemaphorePermits::new(self.clone(), permits)))
    }

    async fn try_acquire_guard_for_now(
        &self,
        permits: i64,
        wait: Duration,
    ) -> Result<Option<SemaphorePermits>> {
        let taken = self.try_acquire_for(permits, wait).await?;
        Ok(taken.then(|| SemaphorePermits::new(self.clone(), permits)))
    }

    async fn available_permits_now(&self) -> Result<i64> {
        let inner = &self.inner;
        let read = inner.engine.link().reads().clone();
        let key = inner.raw.clone();
        let reply = inner.engine.reach(async move { read.get(key).await }).await;
        let count: Option<i64> = reply.map_err(|e| map_redis_error(e, &inner.name))?;
        Ok(count.unwrap_or(0))
    }

    async fn drain_permits_now(&self) -> Result<i64> {
        let inner = &self.inner;
        let call = Call::of(&SEMAPHORE_DRAIN, [Value::String(inner.raw.clone())], []);
        int_reply(&SEMAPHORE_DRAIN, inner.write(call).await?)
    }

    async fn add_permits_now(&self, delta: i64, writing: Result<Writing>) -> Result<()> {
        self.check("add", delta, -MAX_PERMITS)?;
        let inner = &self.inner;
        let reply = inner
            .write_once(writing, |record, kept, done| {
                let mut keys = vec![inner.key(), inner.channel(), record];
                keys.extend(done);
                Call::of(
                    &SEMAPHORE_ADD,
                    keys,
                    [Value::from(delta), inner.publish(), kept],
                )
            })
            .await?;
        int_reply(&SEMAPHORE_ADD, reply).map(|_| ())
    }

    fn check(&self, what: &str, permits: i64, least: i64) -> Result<()> {
        if (least..=MAX_PERMITS).contains(&permits) {
            return Ok(());
        }
        let rule = if least == 0 {
            "a number of permits must be 0 or more"
        } else {
            "a change of permits must be within the bounds"
        };
        Err(Error::invalid(format!(
            "semaphore {:?}: cannot {what} {permits} permits: {rule}, at most {MAX_PERMITS}",
            &*self.inner.name
        )))
    }

    async fn acquire_within(&self, permits: i64, wait: Wait) -> Result<bool> {
        self.check("acquire", permits, 0)?;
        let inner = &self.inner;
        if permits == 0 {
            inner.engine.check_open()?;
            return Ok(true);
        }
        let what = (&*inner.name, "semaphore");
        let wake = (&*inner.channel, semaphore_messages as Messages);
        let taken = wait::synchronizer(&inner.engine, what, wake, wait, || attempt(inner, permits));
        let Some(record) = taken.await? else {
            return Ok(false);
        };
        // The caller has the permits: the attempt's record is needed no more.
        inner.engine.done_records().done(&inner.raw, record);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_count_wakes_every_waiter_and_other_text_none() {
        for payload in ["0", "1", "7", "-3", " 12 "] {
            assert!(matches!(
                semaphore_messages(payload),
                Some(waiters::Wake::All)
            ));
        }
        for payload in ["", "x", "1.5", "OK"] {
            assert!(semaphore_messages(payload).is_none(), "{payload}");
        }
    }
}
