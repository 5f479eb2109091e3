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
use crate::engine::owed::Writing;
use crate::engine::Engine;
use crate::synchronizers::counter::{int_reply, Counter};
use crate::topology::script::{static_arg, Call};
use crate::topology::script::{
    SEMAPHORE_ADD, SEMAPHORE_DELETE, SEMAPHORE_DRAIN, SEMAPHORE_RELEASE,
};
use crate::topology::waiters;

mod acquire;
mod attempt;
mod permits;

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

    /// Sets the permits to `permits` if the semaphore has no counter yet, and tells waiters
    /// the new count. `true` when it was set; `false` when a counter existed, which is left
    /// as it was. `0` is a valid count.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds another type; [`Error::Redis`] when Redis
    /// cannot be reached; [`Error::NotReplicated`] when the client checks replicas and none
    /// confirmed the write; [`Error::Closed`] after shutdown.
    #[doc(alias = "trySetPermits")]
    pub fn try_set_permits(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.set_if_missing(permits.into(), None).await }
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
    #[doc(alias = "trySetPermits")]
    pub fn try_set_permits_with_ttl(
        &self,
        permits: u32,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let ttl = crate::core::lease::Lease::fixed(ttl).map_err(|_| {
                Error::invalid(format!(
                    "semaphore {:?}: a TTL must be between 1 ms and Lease::MAX_FIXED, not {ttl:?}",
                    &*inner.name
                ))
            })?;
            inner
                .set_if_missing(permits.into(), ttl.fixed_duration())
                .await
        }
    }

    /// Gives `permits` permits back and tells waiters the new count. Nothing checks that
    /// they were taken: releasing more than was taken raises the semaphore's capacity. A
    /// missing counter starts at 0; a TTL on it stays. `0` does nothing.
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
    /// [`Error::Redis`] when the count would pass [`MAX_PERMITS`], or Redis stayed
    /// unreachable for 100 s of resends (the permits may or may not have been given back);
    /// [`Error::WrongType`]; [`Error::NotReplicated`] after 100 s of resends no replica
    /// confirmed; [`Error::Closed`] when the client shut down first.
    pub fn release(&self, permits: u32) -> impl Future<Output = Result<()>> + Send + 'static {
        let inner = self.inner.clone();
        let writing = inner.engine.owed().writing();
        Finishing::new(|| async move {
            if permits == 0 {
                return Ok(());
            }
            let reply = inner.release(permits.into(), false, writing).await?;
            int_reply(&SEMAPHORE_RELEASE, reply).map(drop)
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
    #[doc(alias = "releaseIfExists")]
    pub fn release_if_exists(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        let writing = inner.engine.owed().writing();
        Finishing::new(|| async move {
            if permits == 0 {
                return Ok(true);
            }
            match inner.release(permits.into(), true, writing).await? {
                Value::Null => Ok(false),
                reply => int_reply(&SEMAPHORE_RELEASE, reply).map(|_| true),
            }
        })
    }

    /// The free permits now (Redisson's `availablePermits`): 0 when the counter is missing;
    /// negative when more were taken away than there were. (A semaphore keeps no count of
    /// the permits taken, in Redisson's layout either: so it has no `acquired_permits`,
    /// `permits` or `set_permits`, which a [`PermitExpirableSemaphore`] has.)
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or the value is not an integer;
    /// [`Error::WrongType`] when the key holds another type.
    ///
    /// [`PermitExpirableSemaphore`]: crate::PermitExpirableSemaphore
    #[doc(alias = "availablePermits")]
    pub fn available_permits(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let read = inner.engine.link().reads().clone();
            let key = inner.raw.clone();
            let reply = inner.engine.reach(async move { read.get(key).await }).await;
            let count: Option<i64> = reply.map_err(|e| map_redis_error(e, &inner.name))?;
            Ok(count.unwrap_or(0))
        }
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
    #[doc(alias = "drainPermits")]
    pub fn drain_permits(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let call = Call::of(&SEMAPHORE_DRAIN, [inner.key()], []);
            int_reply(&SEMAPHORE_DRAIN, inner.write(call).await?)
        }
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
    #[doc(alias = "addPermits")]
    pub fn add_permits(&self, delta: i64) -> impl Future<Output = Result<()>> + Send + 'static {
        let checked = self.check_delta(delta);
        let inner = self.inner.clone();
        let writing = inner.engine.owed().writing();
        Finishing::new(|| async move {
            checked?;
            let reply = inner
                .write_once(writing, |record, kept, done| {
                    let mut keys = vec![inner.key(), inner.channel(), record];
                    keys.extend(done);
                    let args = [Value::from(delta), inner.publish(), kept];
                    Call::of(&SEMAPHORE_ADD, keys, args)
                })
                .await?;
            int_reply(&SEMAPHORE_ADD, reply).map(drop)
        })
    }

    /// Deletes the semaphore's counter (Redisson's `delete`): `true` when there was one.
    /// Tells no one: waiters find no permits until it is set again.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::NotReplicated`];
    /// [`Error::Closed`] after shutdown.
    pub fn delete(&self) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let call = Call::of(&SEMAPHORE_DELETE, [inner.key()], []);
            Ok(int_reply(&SEMAPHORE_DELETE, inner.write(call).await?)? == 1)
        }
    }

    fn check_delta(&self, delta: i64) -> Result<()> {
        if (-MAX_PERMITS..=MAX_PERMITS).contains(&delta) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "semaphore {:?}: cannot add {delta} permits: a change of permits must be within \
             {MAX_PERMITS} either way",
            &*self.inner.name
        )))
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
