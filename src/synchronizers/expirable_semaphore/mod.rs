//! Redisson's `RPermitExpirableSemaphore` (protocol §15): free permits in a counter, as the
//! semaphore's, and each permit taken a member of a sorted set `{name}:timeout`, by an id
//! the caller makes, scored by when its lease ends. Expired permits go back to the pool when
//! any script reaps them; waiters are woken by counts published on `redisson_sc:{name}`.
//!
//! What this crate adds is on its own side only: an acquire attempt whose reply never came
//! is undone, exactly, by its ids (see `attempt.rs` and `lua/expirable_undo.lua`), and a
//! waiter looks again when the earliest lease ends and every 15 seconds in any case.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;

use crate::base::error::{Error, Result};
use crate::base::keys::{self, Str};
use crate::base::time::{epoch_millis, millis};
use crate::core::guard::Finishing;
use crate::engine::Engine;
use crate::synchronizers::counter::{int_reply, Counter};
use crate::synchronizers::semaphore::MAX_PERMITS;
use crate::topology::script::{static_arg, Call};
use crate::topology::script::{EXPIRABLE_ADD, EXPIRABLE_COUNT, EXPIRABLE_DELETE, EXPIRABLE_LEASE};
use crate::topology::script::{EXPIRABLE_RELEASE, EXPIRABLE_RELEASE_MANY, EXPIRABLE_SET};

mod acquire;
mod attempt;
mod id;
mod permits;

pub use id::PermitId;
pub use permits::ExpirablePermits;

/// The score of a permit whose lease never ends (Java's `nonExpirableTimeout`).
pub(crate) const NEVER: i64 = 922_337_203_685_477;

/// The most permits one acquisition takes: each is an id sent with the script.
pub const MAX_ACQUIRE: u32 = 10_000;

/// A handle on the permit-expirable semaphore `name` (Redisson's
/// `getPermitExpirableSemaphore(name)`): cheap to clone, no I/O until a method is called.
///
/// The free permits are the key `name` (after the client's name prefix), a string in
/// decimal, as the [`Semaphore`](crate::Semaphore)'s; each permit taken is a member of the
/// sorted set `{name}:timeout`: its [`PermitId`] as 16 raw bytes, scored by when its lease
/// ends (epoch ms by the acquirer's clock) or `922337203685477` for a lease that never ends.
/// Counts are published on `redisson_sc:{name}`. Java's `RPermitExpirableSemaphore` on the
/// same name shares the permits, can release the ids this crate took and the other way
/// round, and each side wakes the other's waiters.
///
/// # Leases end lazily
/// As in Redisson, nothing happens when a lease ends: the permit goes back to the pool the
/// next time any client reaps (an acquire, [`available_permits`](Self::available_permits),
/// [`permits`](Self::permits), [`acquired_permits`](Self::acquired_permits),
/// [`update_lease_time`](Self::update_lease_time), [`lease_time`](Self::lease_time)), judged
/// by that client's clock. A permit taken without a lease stays taken until released.
///
/// Do not give a [`Semaphore`](crate::Semaphore) the same name: it shares the counter but
/// not the leases.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../../docs/snippets/expirable_semaphore.rs")]
/// ```
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The counter of free permits, and its channel `redisson_sc:{raw}`.
    counter: Counter,
    /// `{raw}:timeout`.
    leases: Str,
    /// This client's id, in attempt records.
    client: String,
}

impl std::ops::Deref for Inner {
    type Target = Counter;

    fn deref(&self) -> &Counter {
        &self.counter
    }
}

impl std::fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitExpirableSemaphore")
            .field("name", &&*self.inner.name)
            .finish()
    }
}

impl PermitExpirableSemaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Result<PermitExpirableSemaphore> {
        let raw = engine.lock_keys(name)?.raw;
        let inner = Inner {
            leases: keys::expirable_leases(&raw).into(),
            client: engine.client_id().to_string(),
            counter: Counter {
                channel: keys::semaphore_channel(&raw).into(),
                name: name.into(),
                raw,
                engine,
                records: keys::semaphore_attempt,
            },
        };
        Ok(PermitExpirableSemaphore {
            inner: Arc::new(inner),
        })
    }

    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sets the free permits to `permits` if the semaphore has no counter yet (Redisson's
    /// `trySetPermits`), and tells waiters. `true` when it was set; `false` when a counter
    /// existed, which is left as it was. `0` is a valid count.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::NotReplicated`] when the
    /// client checks replicas and none confirmed the write.
    #[doc(alias = "trySetPermits")]
    pub fn try_set_permits(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.set_if_missing(permits.into(), None).await }
    }

    /// Gives back the permit `id` (Redisson's `release`) and tells waiters the new count.
    ///
    /// # Cancel safety
    /// The release starts when this is called and finishes even if the future is dropped.
    ///
    /// # Errors
    /// [`Error::PermitNotHeld`] when the semaphore does not hold `id`: never taken there,
    /// released already, or its lease ran out (an expired permit no one reaped yet goes
    /// back to the pool all the same, as in Java); [`Error::WrongType`] when a key holds
    /// another type; [`Error::Redis`] when Redis cannot be reached (the permit may or may
    /// not have been given back); [`Error::NotReplicated`].
    pub fn release(&self, id: PermitId) -> impl Future<Output = Result<()>> + Send + 'static {
        let inner = self.inner.clone();
        Finishing::new(|| async move {
            match inner.release(id).await? {
                1 => Ok(()),
                held => Err(Error::PermitNotHeld {
                    name: inner.name.to_string(),
                    id: id.to_string(),
                    expired: held == 0,
                }),
            }
        })
    }

    /// Gives back the permit `id` if the semaphore holds it with its lease running
    /// (Redisson's `tryRelease(id)`): `true` when it did. As in Java, a permit whose lease
    /// ran out but that no one reaped yet goes back to the pool, and this says `false`.
    ///
    /// # Cancel safety
    /// As [`release`](Self::release).
    ///
    /// # Errors
    /// As [`release`](Self::release), without [`Error::PermitNotHeld`].
    #[doc(alias = "tryRelease")]
    pub fn try_release(&self, id: PermitId) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        Finishing::new(|| async move { Ok(inner.release(id).await? == 1) })
    }

    /// Gives back all of `ids`, or none (Redisson's `tryRelease(ids)`): `true` when every
    /// one was held with its lease running and all were given back; `false`, with nothing
    /// changed, when one was not. Tells waiters how many were given back, as Java.
    ///
    /// # Cancel safety
    /// As [`release`](Self::release).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list or one over [`MAX_ACQUIRE`]; otherwise
    /// as [`try_release`](Self::try_release).
    #[doc(alias = "tryRelease")]
    pub fn try_release_many(
        &self,
        ids: &[PermitId],
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let checked = self.check("release", ids.len() as i64, 1);
        let inner = self.inner.clone();
        let ids = ids.to_vec();
        let writing = inner.engine.owed().writing();
        Finishing::new(|| async move {
            checked?;
            let now = epoch_millis();
            let reply = inner
                .write_once(writing, |record, kept, done| {
                    let mut keys = inner.three_keys().to_vec();
                    keys.push(record);
                    keys.extend(done);
                    let mut args = vec![Value::from(now), inner.publish(), kept];
                    args.extend(ids.iter().map(PermitId::arg));
                    Call::of(&EXPIRABLE_RELEASE_MANY, keys, args)
                })
                .await?;
            Ok(int_reply(&EXPIRABLE_RELEASE_MANY, reply)? == 1)
        })
    }

    /// The free permits, after expired ones went back to the pool (Redisson's
    /// `availablePermits`; a write, as Java's): 0 when the counter is missing; negative
    /// when more were taken away than there were.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::WrongType`] when a key holds another type; [`Error::Redis`] when Redis
    /// cannot be reached; [`Error::NotReplicated`].
    #[doc(alias = "availablePermits")]
    pub fn available_permits(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.count("available").await }
    }

    /// The permits taken whose lease is running or never ends, after expired ones went back
    /// (Redisson's `acquiredPermits`).
    ///
    /// # Cancel safety
    /// As [`available_permits`](Self::available_permits).
    ///
    /// # Errors
    /// As [`available_permits`](Self::available_permits).
    #[doc(alias = "acquiredPermits")]
    pub fn acquired_permits(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.count("acquired").await }
    }

    /// All permits, free and taken, after expired ones went back (Redisson's
    /// `getPermits`): 0 when the counter is missing.
    ///
    /// # Cancel safety
    /// As [`available_permits`](Self::available_permits).
    ///
    /// # Errors
    /// As [`available_permits`](Self::available_permits).
    #[doc(alias = "getPermits")]
    pub fn permits(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.count("permits").await }
    }

    /// Makes the permits, free and taken, number `permits` (Redisson's `setPermits`): the
    /// free count moves by the difference, and may go below 0 while permits are taken.
    /// Tells waiters the target when anything changed. Expired permits are not reaped
    /// first, as in Java.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// As [`available_permits`](Self::available_permits).
    #[doc(alias = "setPermits")]
    pub fn set_permits(&self, permits: u32) -> impl Future<Output = Result<()>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let call = Call::of(
                &EXPIRABLE_SET,
                inner.three_keys(),
                [Value::from(permits), inner.publish()],
            );
            int_reply(&EXPIRABLE_SET, inner.write(call).await?).map(|_| ())
        }
    }

    /// Changes the free permits by `delta`, which may be negative (Redisson's
    /// `addPermits`). A missing counter counts as 0; a TTL on it is dropped, as Java's is.
    /// Tells waiters the delta when it is above 0, as Java.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a delta beyond [`MAX_PERMITS`] either way;
    /// [`Error::Redis`] also when the count would pass it; otherwise as
    /// [`available_permits`](Self::available_permits).
    #[doc(alias = "addPermits")]
    pub fn add_permits(&self, delta: i64) -> impl Future<Output = Result<()>> + Send + 'static {
        let this = self.clone();
        async move {
            this.check("add", delta, -MAX_PERMITS)?;
            let inner = &this.inner;
            let keys = [inner.key(), inner.channel()];
            let call = Call::of(&EXPIRABLE_ADD, keys, [Value::from(delta), inner.publish()]);
            int_reply(&EXPIRABLE_ADD, inner.write(call).await?).map(|_| ())
        }
    }

    /// Gives the permit `id` a new lease from now, or one that never ends for `None`
    /// (Redisson's `updateLeaseTime`): `true` when it was held; `false` when it was not
    /// (an expired permit is reaped first, and cannot be extended).
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 1 ms or too long to represent;
    /// otherwise as [`available_permits`](Self::available_permits).
    #[doc(alias = "updateLeaseTime")]
    pub fn update_lease_time(
        &self,
        id: PermitId,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let this = self.clone();
        async move {
            let now = epoch_millis();
            let end = this.lease_end(lease, now)?;
            Ok(this.inner.lease(id, now, Value::from(end)).await? == 1)
        }
    }

    /// What is left of the lease of permit `id` (Redisson's `getLeaseTime`): `None` for a
    /// lease that never ends. Expired permits are reaped first.
    ///
    /// # Cancel safety
    /// As [`available_permits`](Self::available_permits).
    ///
    /// # Errors
    /// [`Error::PermitNotHeld`] when `id` is not held; otherwise as
    /// [`available_permits`](Self::available_permits).
    #[doc(alias = "getLeaseTime")]
    pub fn lease_time(
        &self,
        id: PermitId,
    ) -> impl Future<Output = Result<Option<Duration>>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            match inner.lease(id, epoch_millis(), static_arg("")).await? {
                -1 => Ok(None),
                left if left >= 0 => Ok(Some(Duration::from_millis(left as u64))),
                _ => Err(Error::PermitNotHeld {
                    name: inner.name.to_string(),
                    id: id.to_string(),
                    expired: false,
                }),
            }
        }
    }

    /// Deletes the counter and the leases (Redisson's `delete`): `true` when either
    /// existed. Tells no one: waiters find no permits, and holders' releases fail.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::NotReplicated`].
    pub fn delete(&self) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let keys = [inner.key(), Value::String(inner.leases.clone())];
            let call = Call::of(&EXPIRABLE_DELETE, keys, []);
            Ok(int_reply(&EXPIRABLE_DELETE, inner.write(call).await?)? > 0)
        }
    }

    fn check(&self, what: &str, permits: i64, least: i64) -> Result<()> {
        let most = if least == 1 {
            i64::from(MAX_ACQUIRE)
        } else {
            MAX_PERMITS
        };
        if (least..=most).contains(&permits) {
            return Ok(());
        }
        let rule = match least {
            1 => format!("at least 1 permit, at most {most}, at a time"),
            0 => format!("a number of permits must be 0 or more, at most {most}"),
            _ => format!("a change of permits must be within {most} either way"),
        };
        Err(Error::invalid(format!(
            "permit-expirable semaphore {:?}: cannot {what} {permits} permits: {rule}",
            &*self.inner.name
        )))
    }

    /// The score of a lease of `lease` from `now`: its end, or [`NEVER`].
    fn lease_end(&self, lease: Option<Duration>, now: i64) -> Result<i64> {
        let Some(lease) = lease else {
            return Ok(NEVER);
        };
        let ms = millis(lease);
        let why = if ms < 1 {
            "a lease is at least 1 ms (None for one that never ends)"
        } else if now.saturating_add(ms) >= NEVER {
            "it would end past what Redisson counts as never"
        } else {
            return Ok(now + ms);
        };
        Err(Error::invalid(format!(
            "permit-expirable semaphore {:?}: cannot lease a permit for {lease:?}: {why}",
            &*self.inner.name
        )))
    }
}

impl Inner {
    /// The counter, the leases and the channel: the keys of most scripts.
    fn three_keys(&self) -> [Value; 3] {
        [
            self.key(),
            Value::String(self.leases.clone()),
            self.channel(),
        ]
    }

    /// `lua/expirable_release.lua`: 1 released, 0 expired but given back, -1 not held.
    async fn release(&self, id: PermitId) -> Result<i64> {
        let args = [id.arg(), Value::from(epoch_millis()), self.publish()];
        let call = Call::of(&EXPIRABLE_RELEASE, self.three_keys(), args);
        int_reply(&EXPIRABLE_RELEASE, self.write(call).await?)
    }

    async fn count(&self, what: &'static str) -> Result<i64> {
        let args = [
            Value::from(epoch_millis()),
            self.publish(),
            static_arg(what),
        ];
        let call = Call::of(&EXPIRABLE_COUNT, self.three_keys(), args);
        int_reply(&EXPIRABLE_COUNT, self.write(call).await?)
    }

    /// `lua/expirable_lease.lua`: a new end for the lease of `id` (`end`), or '' to read it.
    async fn lease(&self, id: PermitId, now: i64, end: Value) -> Result<i64> {
        let args = [Value::from(now), self.publish(), id.arg(), end];
        let call = Call::of(&EXPIRABLE_LEASE, self.three_keys(), args);
        int_reply(&EXPIRABLE_LEASE, self.write(call).await?)
    }
}
