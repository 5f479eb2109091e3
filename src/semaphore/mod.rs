//! Redisson's `RSemaphore` (protocol §13): a counter of free permits in a plain
//! Redis string, shared with Java clients, and its waiters woken by the new count published
//! on `redisson_sc:{name}`.
//!
//! Redisson's semaphore has no owner and no lease: permits taken by a process that dies
//! stay taken until someone releases or adds them. What this crate adds is on its own side
//! only: an acquire attempt whose reply never came (a timeout, a lost connection, the
//! future dropped while the script was on the wire) is undone, by a record each attempt
//! leaves under a key of its own for [`RECORD_KEPT`] (see `lua/semaphore_acquire.lua`).

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::KeysInterface;
use fred::types::Value;
use tokio::time::Instant;

use crate::attempt::{Attempt, InFlight};
use crate::backoff::OUTAGE_BACKOFF;
use crate::engine::Engine;
use crate::error::{map_redis_error, Error, Result};
use crate::guard::{release_in_background, Finishing};
use crate::keys::{self, Str};
use crate::script::{boxed_in_place, static_arg, Call, Script};
use crate::script::{
    SEMAPHORE_ACQUIRE, SEMAPHORE_ADD, SEMAPHORE_DRAIN, SEMAPHORE_RELEASE, SEMAPHORE_SET,
    SEMAPHORE_UNDO,
};
use crate::wait::{self, Wait, Wake};
use crate::waiters;

mod permits;
pub use permits::SemaphorePermits;

/// The most permits a semaphore counts, either way: the scripts count in Lua numbers,
/// which hold whole numbers exactly up to 2^53 - 1.
pub const MAX_PERMITS: i64 = (1 << 53) - 1;

/// How long a waiter whose attempt found too few permits waits for a message before it
/// looks again. Java waiters have no such fallback (a lost message costs them their whole
/// wait); this bounds what one costs here.
const RECHECK: Duration = Duration::from_secs(15);

/// How long an acquire attempt's record stays on the server: the time within which an
/// attempt whose reply was lost can still be undone.
pub(crate) const RECORD_KEPT: Duration = Duration::from_secs(120);

/// How long the undoing of an unanswered attempt is tried, well within [`RECORD_KEPT`].
const UNDO_FOR: Duration = Duration::from_secs(100);

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
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Arc<Engine>,
    /// The user's name, as errors name it.
    name: Str,
    /// The counter's key: the name after the client's prefix.
    raw: Str,
    /// `redisson_sc:{raw}`.
    channel: Str,
    /// This client's id, in attempt records.
    client: String,
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
            engine,
            name: name.into(),
            raw,
            channel,
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
    pub async fn try_set_permits(&self, permits: i64) -> Result<bool> {
        self.check("set", permits, 0)?;
        let inner = &self.inner;
        let keys = [Value::String(inner.raw.clone()), inner.channel()];
        let args = [Value::from(permits), inner.publish()];
        let reply = inner.write(Call::of(&SEMAPHORE_SET, keys, args)).await?;
        Ok(int_reply(&SEMAPHORE_SET, reply)? == 1)
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
    pub async fn acquire(&self, permits: i64) -> Result<()> {
        self.acquire_within(permits, Wait::Forever)
            .await
            .map(|_| ())
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
    pub async fn try_acquire(&self, permits: i64) -> Result<bool> {
        self.acquire_within(permits, Wait::Once).await
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
    pub async fn try_acquire_for(&self, permits: i64, wait: Duration) -> Result<bool> {
        self.acquire_within(permits, Wait::from_limit(wait)?).await
    }

    /// [`acquire`](Self::acquire), with a guard that gives the permits back when dropped.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire): the guard is made in the same poll that learns the
    /// permits were taken.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_guard(&self, permits: i64) -> Result<SemaphorePermits> {
        self.acquire(permits).await?;
        Ok(SemaphorePermits::new(self.clone(), permits))
    }

    /// [`try_acquire`](Self::try_acquire), with a guard: `None` when too few are free.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_guard(&self, permits: i64) -> Result<Option<SemaphorePermits>> {
        let taken = self.try_acquire(permits).await?;
        Ok(taken.then(|| SemaphorePermits::new(self.clone(), permits)))
    }

    /// [`try_acquire_for`](Self::try_acquire_for), with a guard: `None` when the wait ran
    /// out.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`try_acquire_for`](Self::try_acquire_for).
    pub async fn try_acquire_guard_for(
        &self,
        permits: i64,
        wait: Duration,
    ) -> Result<Option<SemaphorePermits>> {
        let taken = self.try_acquire_for(permits, wait).await?;
        Ok(taken.then(|| SemaphorePermits::new(self.clone(), permits)))
    }

    /// Gives `permits` permits back (Redisson's `release`) and tells waiters the new count.
    /// Nothing checks that they were taken: releasing more than was taken raises the
    /// semaphore's capacity. A missing counter starts at 0; a TTL on it stays. `0` does
    /// nothing.
    ///
    /// # Cancel safety
    /// The release starts when this is called and finishes even if the future is dropped.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative count or one over [`MAX_PERMITS`];
    /// [`Error::Redis`] when Redis cannot be reached (the permits may or may not have been
    /// given back) or the count would pass [`MAX_PERMITS`]; [`Error::WrongType`];
    /// [`Error::NotReplicated`].
    pub fn release(
        &self,
        permits: i64,
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let checked = self.check("release", permits, 0);
        let inner = self.inner.clone();
        Finishing::new(|| async move {
            checked?;
            if permits == 0 {
                return Ok(());
            }
            let keys = [Value::String(inner.raw.clone()), inner.channel()];
            let args = [Value::from(permits), inner.publish()];
            let reply = inner
                .write(Call::of(&SEMAPHORE_RELEASE, keys, args))
                .await?;
            int_reply(&SEMAPHORE_RELEASE, reply).map(|_| ())
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
    pub async fn available_permits(&self) -> Result<i64> {
        let inner = &self.inner;
        let read = inner.engine.link().reads().clone();
        let key = inner.raw.clone();
        let reply = inner.engine.reach(async move { read.get(key).await }).await;
        let count: Option<i64> = reply.map_err(|e| map_redis_error(e, &inner.name))?;
        Ok(count.unwrap_or(0))
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
    pub async fn drain_permits(&self) -> Result<i64> {
        let inner = &self.inner;
        let call = Call::of(&SEMAPHORE_DRAIN, [Value::String(inner.raw.clone())], []);
        int_reply(&SEMAPHORE_DRAIN, inner.write(call).await?)
    }

    /// Changes the free permits by `delta`, which may be negative (Redisson's `addPermits`),
    /// and tells waiters the new count, whatever it is. A missing counter counts as 0; the
    /// result may be 0 or negative (acquires then fail until enough are released); a TTL
    /// is dropped, as Java's does.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a delta beyond [`MAX_PERMITS`] either way;
    /// [`Error::Redis`] when Redis cannot be reached or the count would pass
    /// [`MAX_PERMITS`]; [`Error::WrongType`]; [`Error::NotReplicated`].
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        self.check("add", delta, -MAX_PERMITS)?;
        let inner = &self.inner;
        let keys = [Value::String(inner.raw.clone()), inner.channel()];
        let args = [Value::from(delta), inner.publish()];
        let reply = inner.write(Call::of(&SEMAPHORE_ADD, keys, args)).await?;
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
        inner.engine.check_open()?;
        if permits == 0 {
            return Ok(true);
        }
        let deadline = match wait {
            Wait::Once => {
                return Ok(matches!(
                    attempt(inner, permits).await?,
                    Attempt::Acquired(())
                ))
            }
            Wait::Until(deadline, _) => Some(deadline),
            Wait::Forever => None,
        };
        let wake = Wake::Messages(&inner.channel, semaphore_messages);
        let taken = wait::acquire(&inner.engine, wake, deadline, || attempt(inner, permits));
        Ok(taken.await?.is_some())
    }
}

impl Inner {
    fn channel(&self) -> Value {
        Value::String(self.channel.clone())
    }

    fn publish(&self) -> Value {
        static_arg(self.engine.publish_command())
    }

    /// Runs a script that writes, and waits for a replica where the client checks them.
    async fn write(&self, call: Call) -> Result<Value> {
        let (engine, key, name) = (&self.engine, &self.raw, &self.name);
        let (reply, confirmation) = engine.run_confirmed(call, key, name).await?;
        engine.confirm(confirmation, key, name).await?;
        Ok(reply)
    }
}

fn int_reply(script: &'static Script, reply: Value) -> Result<i64> {
    match reply {
        Value::Integer(n) => Ok(n),
        other => Err(Error::UnexpectedReply {
            script: script.name,
            detail: format!("{other:?}"),
        }),
    }
}

/// One acquire attempt, recorded under a key of its own (see `lua/semaphore_acquire.lua`).
/// Whatever keeps its outcome from the caller (a lost reply, the future dropped while the
/// script is on the wire, a replica that did not confirm) gives its permits back.
fn attempt(
    inner: &Arc<Inner>,
    permits: i64,
) -> impl std::future::Future<Output = Result<Attempt<()>>> + Send + 'static {
    let id = inner.engine.queue_exits().wait_id();
    let record: Str = keys::semaphore_attempt(&inner.raw, &inner.client, id).into();
    let undo = Undo {
        inner: inner.clone(),
        record,
        permits,
    };
    let call = Call::of(
        &SEMAPHORE_ACQUIRE,
        [
            Value::String(inner.raw.clone()),
            Value::String(undo.record.clone()),
        ],
        [Value::from(permits), Value::from(millis(RECORD_KEPT))],
    );
    let sent = {
        let undo = undo.clone();
        boxed_in_place(|| async move {
            let inner = &undo.inner;
            let (engine, key, name) = (&inner.engine, &inner.raw, &inner.name);
            let (reply, confirmation) = engine.send_confirmed(call, key).await;
            let attempt = reply
                .map_err(|e| map_redis_error(e, name))
                .and_then(read_acquire);
            match attempt {
                Ok(Attempt::Acquired(())) => {
                    if let Err(error) = engine.confirm(confirmation, key, name).await {
                        // A failover could lose the write: give the permits back.
                        undo.in_background();
                        return Err(error);
                    }
                    Ok(Attempt::Acquired(()))
                }
                Err(error) if error.is_retryable() => {
                    // The script may have run, or may still run: undo it either way.
                    undo.in_background();
                    Err(error)
                }
                other => other,
            }
        })
    };
    InFlight::new(sent, move |()| {
        Box::pin(async move { undo.until_done().await })
    })
}

/// Reads `lua/semaphore_acquire.lua`'s reply.
fn read_acquire(reply: Value) -> Result<Attempt<()>> {
    if let Value::Array(items) = &reply {
        match items.as_slice() {
            [Value::Integer(1), Value::Integer(_)] => return Ok(Attempt::Acquired(())),
            // Too few free: look again on a message, or after a while in any case. An
            // attempt undone before it ran (`-1`) cannot be answered to its caller.
            [Value::Integer(0), Value::Integer(_)] | [Value::Integer(-1)] => {
                return Ok(Attempt::Busy { ttl: Some(RECHECK) })
            }
            _ => {}
        }
    }
    Err(Error::UnexpectedReply {
        script: SEMAPHORE_ACQUIRE.name,
        detail: format!("{reply:?}"),
    })
}

fn millis(duration: Duration) -> i64 {
    duration.as_millis() as i64
}

/// Undoes one acquire attempt (`lua/semaphore_undo.lua`): gives back what it took, and
/// keeps it from taking anything should it still run.
#[derive(Clone)]
struct Undo {
    inner: Arc<Inner>,
    record: Str,
    permits: i64,
}

impl Undo {
    fn in_background(&self) {
        let undo = self.clone();
        release_in_background(async move { undo.until_done().await });
    }

    /// Tries until the script ran, or until the record it needs may be gone.
    async fn until_done(self) {
        let inner = &self.inner;
        let give_up = Instant::now() + UNDO_FOR;
        let mut pause = OUTAGE_BACKOFF.0;
        loop {
            let keys = [
                Value::String(inner.raw.clone()),
                inner.channel(),
                Value::String(self.record.clone()),
            ];
            let args = [
                Value::from(self.permits),
                Value::from(millis(RECORD_KEPT)),
                inner.publish(),
            ];
            let call = Call::of(&SEMAPHORE_UNDO, keys, args);
            let (reply, _) = inner.engine.send_confirmed(call, &inner.raw).await;
            match reply.map_err(|e| map_redis_error(e, &inner.name)) {
                Ok(gave_back) => {
                    if gave_back == Value::Integer(1) {
                        tracing::debug!(
                            semaphore = &*inner.name,
                            "gave back the permits of an unanswered acquire"
                        );
                    }
                    return;
                }
                Err(error) if error.is_retryable() && Instant::now() + pause < give_up => {
                    tracing::debug!(%error, "undoing an unanswered acquire failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(OUTAGE_BACKOFF.1);
                }
                Err(error) => {
                    tracing::warn!(
                        %error,
                        semaphore = &*inner.name,
                        permits = self.permits,
                        "could not undo an acquire whose reply was lost; the permits it may have taken stay taken"
                    );
                    return;
                }
            }
        }
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

    #[test]
    fn reads_the_acquire_reply() {
        let read = |items: Vec<Value>| read_acquire(Value::Array(items));
        assert!(matches!(
            read(vec![1.into(), 0.into()]),
            Ok(Attempt::Acquired(()))
        ));
        assert!(matches!(
            read(vec![0.into(), 1.into()]),
            Ok(Attempt::Busy { ttl: Some(RECHECK) })
        ));
        assert!(matches!(read(vec![(-1).into()]), Ok(Attempt::Busy { .. })));
        assert!(read(vec![2.into()]).is_err());
        assert!(read_acquire(Value::Null).is_err());
    }
}
