//! Redisson's `RCountDownLatch` (protocol §14): a count in a plain Redis string, shared with
//! Java clients, and its waiters woken by the messages published on
//! `redisson_countdownlatch__channel__{name}`.
//!
//! A latch is not a lock: it has no owner, no lease and nothing to undo. Waiting shares the
//! locks' wait loop (`wait.rs`): an "attempt" reads the count, and succeeds when it is 0.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{ClientLike, KeysInterface};
use fred::types::Value;

use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::{self};
use crate::core::attempt::Attempt;
use crate::core::guard::Finishing;
use crate::core::wait::{self, Wait};
use crate::engine::Engine;
use crate::synchronizers::counter::{int_reply, Counter};
use crate::topology::pubsub::Messages;
use crate::topology::script::{Call, LATCH_COUNT_DOWN, LATCH_DELETE, LATCH_SET};
use crate::topology::waiters;

/// How long a waiter that found the count above 0 waits for a message before it reads the
/// count again. Java waiters have no such fallback (a lost message costs them their whole
/// wait, or forever); this bounds what one costs here.
const RECHECK: Duration = Duration::from_secs(15);

/// A latch's messages (protocol §14.3): `0` (the count reached 0) and `1` (a new count was
/// set, or the latch was deleted) wake every local waiter, who each read the count again.
/// Anything else asks nothing, as Java ignores it.
pub(crate) fn latch_messages(payload: &str) -> Option<waiters::Wake> {
    match payload.trim().parse::<i64>() {
        Ok(0 | 1) => Some(waiters::Wake::All),
        _ => None,
    }
}

/// A handle on the count-down latch `name` (Redisson's `getCountDownLatch(name)`): cheap to
/// clone, no I/O until a method is called.
///
/// The count is the key `name` (after the client's name prefix), a string holding the count
/// in decimal, with no TTL; the latch is open when the key is missing. Its messages go to
/// `redisson_countdownlatch__channel__{name}` with the client's pub/sub flavour:
/// [`try_set_count`](Self::try_set_count) and [`delete`](Self::delete) publish `1`, and the
/// [`count_down`](Self::count_down) that reaches 0 publishes `0`. Java's `RCountDownLatch`
/// on the same name shares the count, and each side wakes the other's waiters.
///
/// # Waiting
/// A waiter reads the count again on every `0` or `1` message, and every 15 seconds in any
/// case, so a lost message delays it by that much at most (a Java waiter would wait out its
/// whole wait). It returns once the count is 0 or the latch is gone, so a
/// [`delete`](Self::delete) opens it for this crate's waiters; Java's waiters, which only
/// open on a `0`, see a delete only when they next read the count.
///
/// A waiter gives up once Redis has been unreachable for the watchdog timeout (30 s by
/// default). On a single server that counts from when the connection was lost, which wakes
/// the waiter; on a cluster or behind Sentinel, where one lost connection does not say the
/// latch's server is gone, it counts from the waiter's next read, so it fails up to 15 s
/// later.
///
/// # Cluster
/// Java names the channel by bracing the raw name, whatever it holds, so for a name with a
/// `}` the channel falls in another slot than the key, and every write fails with
/// `CROSSSLOT`, in Java too. On a cluster such a name is refused when the handle is made.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../docs/snippets/count_down_latch.rs")]
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    inner: Arc<Inner>,
}

/// The count, and its channel `redisson_countdownlatch__channel__{raw}`.
struct Inner(Counter);

impl std::ops::Deref for Inner {
    type Target = Counter;

    fn deref(&self) -> &Counter {
        &self.0
    }
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &&*self.inner.name)
            .finish()
    }
}

impl CountDownLatch {
    /// The largest count a latch's scripts handle, as another client (Java's `long`) may set
    /// it: they count in Lua numbers, which hold whole numbers exactly up to 2^53 - 1. This
    /// crate sets at most `u32::MAX`.
    pub const MAX_COUNT: i64 = (1 << 53) - 1;

    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Result<CountDownLatch> {
        if name.is_empty() {
            return Err(Error::invalid("a count-down latch name must not be empty"));
        }
        let raw = format!("{}{name}", engine.settings().name_prefix);
        if engine.redis().is_clustered() || engine.settings().renew_by_slot {
            if let Some(why) = keys::latch_split_slots(&raw) {
                return Err(Error::invalid(format!(
                    "the count-down latch name `{raw}` cannot be used on a Redis Cluster: \
                     {why}, so the latch's key and channel would fall in different slots and \
                     every write would fail with CROSSSLOT (Java's too). Give the latch a \
                     name without `}}`"
                )));
            }
        }
        let channel = keys::latch_channel(&raw).into();
        let inner = Inner(Counter {
            engine,
            name: name.into(),
            raw: raw.into(),
            channel,
            records: keys::latch_record,
        });
        Ok(CountDownLatch {
            inner: Arc::new(inner),
        })
    }

    /// The latch's name, as given.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sets the count to `count` if the latch has none (Redisson's `trySetCount`), and tells
    /// waiters `1` ("a new count"). `true` when it was set; `false` when the latch had a
    /// count, which is left as it was. `0` is stored as is (a latch that reads as open).
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds another type; [`Error::Redis`] when Redis
    /// cannot be reached or the key holds text that is not a count; [`Error::NotReplicated`]
    /// when the client checks replicas and none confirmed the write; [`Error::Closed`] after
    /// shutdown.
    #[doc(alias = "trySetCount")]
    pub fn try_set_count(&self, count: u32) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let keys = [Value::String(inner.raw.clone()), inner.channel()];
            let args = [Value::from(count.to_string()), inner.publish()];
            let reply = inner.write(Call::of(&LATCH_SET, keys, args)).await?;
            Ok(int_reply(&LATCH_SET, reply)? == 1)
        }
    }

    /// Counts the latch down by one (Redisson's `countDown`). The count that reaches 0
    /// deletes the key and tells waiters `0`; below that the key is deleted silently, so a
    /// count-down of a missing or open latch leaves nothing behind.
    ///
    /// # Cancel safety
    /// The count-down starts when this is called and finishes even if the future is
    /// dropped. It happens exactly once: one whose connection drops, or that no replica
    /// confirmed, is sent again until Redis answers and a replica confirms, for up to 100 s,
    /// and a copy after the first counts nothing down.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds another type; [`Error::Redis`] when the key
    /// holds text that is not a count (or a count beyond 2^53 - 1 either way), or Redis
    /// stayed unreachable for 100 s of resends (the count may or may not have gone down);
    /// [`Error::NotReplicated`] after 100 s of resends no replica confirmed;
    /// [`Error::Closed`] after shutdown.
    #[doc(alias = "countDown")]
    pub fn count_down(&self) -> impl Future<Output = Result<()>> + Send + 'static {
        let inner = self.inner.clone();
        let writing = inner.engine.owed().writing();
        Finishing::new(|| async move {
            let reply = inner
                .write_once(writing, |record, kept, done| {
                    let mut keys = vec![inner.key(), inner.channel(), record];
                    keys.extend(done);
                    Call::of(&LATCH_COUNT_DOWN, keys, [inner.publish(), kept])
                })
                .await?;
            int_reply(&LATCH_COUNT_DOWN, reply).map(|_| ())
        })
    }

    /// The count now (Redisson's `getCount`): 0 when the latch is missing (open or never
    /// set). Negative only when something other than a latch wrote the key.
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or the value is not an integer;
    /// [`Error::WrongType`] when the key holds another type.
    #[doc(alias = "getCount")]
    pub fn count(&self) -> impl Future<Output = Result<i64>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.count().await }
    }

    /// Waits until the count is 0 (Redisson's `await`), as long as it takes; returns at once
    /// when it is 0 already. See [Waiting](CountDownLatch#waiting).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads, and dropped at any point it leaves nothing behind (its
    /// share of the channel's subscription is given up).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds another type; [`Error::Redis`] when Redis
    /// fails the first read, or stays unreachable while waiting (see [Waiting](CountDownLatch#waiting));
    /// [`Error::Closed`] after shutdown.
    #[doc(alias = "await")]
    pub fn wait(&self) -> impl Future<Output = Result<()>> + Send + 'static {
        let this = self.clone();
        async move { this.wait_within(Wait::Forever).await.map(|_| ()) }
    }

    /// Waits at most `timeout` for the count to reach 0 (Redisson's `await(timeout)`):
    /// `true` when it did, `false` when the time ran out. A zero timeout reads the count
    /// once.
    ///
    /// # Cancel safety
    /// As [`wait`](Self::wait).
    ///
    /// # Errors
    /// As [`wait`](Self::wait); [`Error::InvalidArgument`] also for a timeout too long to
    /// represent.
    #[doc(alias = "await")]
    pub fn wait_for(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let this = self.clone();
        async move { this.wait_within(Wait::from_limit(timeout)?).await }
    }

    /// Deletes the latch (Redisson's `delete`), and when there was one tells waiters `1`, as
    /// Java does: this crate's waiters then find the latch open, Java's do not wake. `true`
    /// when a latch was deleted. A key of another type, or text that is not a count, is
    /// left alone.
    ///
    /// # Cancel safety
    /// Dropped once sent, the script may or may not run; it runs at most once.
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key holds another type; [`Error::Redis`] when Redis
    /// cannot be reached or the key holds text that is not a count; [`Error::NotReplicated`];
    /// [`Error::Closed`] after shutdown.
    pub fn delete(&self) -> impl Future<Output = Result<bool>> + Send + 'static {
        let inner = self.inner.clone();
        async move {
            let keys = [Value::String(inner.raw.clone()), inner.channel()];
            let reply = inner
                .write(Call::of(&LATCH_DELETE, keys, [inner.publish()]))
                .await?;
            Ok(int_reply(&LATCH_DELETE, reply)? == 1)
        }
    }

    async fn wait_within(&self, wait: Wait) -> Result<bool> {
        let inner = &self.inner;
        let what = (&*inner.name, "count_down_latch");
        let wake = (&*inner.channel, latch_messages as Messages);
        let opened = wait::synchronizer(&inner.engine, what, wake, wait, || inner.look());
        Ok(opened.await?.is_some())
    }
}

impl Inner {
    async fn count(&self) -> Result<i64> {
        let read = self.engine.link().reads().clone();
        let key = self.raw.clone();
        let reply = self.engine.reach(async move { read.get(key).await }).await;
        let count: Option<i64> = reply.map_err(|e| map_redis_error(e, &self.name))?;
        Ok(count.unwrap_or(0))
    }

    /// One look for a waiter: open when the count is 0 or less (Java's `getCount() > 0`
    /// loop); otherwise look again on a message, or after [`RECHECK`] in any case.
    async fn look(&self) -> Result<Attempt<()>> {
        Ok(if self.count().await? <= 0 {
            Attempt::Acquired(())
        } else {
            Attempt::Busy { ttl: Some(RECHECK) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_one_wake_every_waiter_and_nothing_else_does() {
        for payload in ["0", "1", " 1 "] {
            assert!(matches!(latch_messages(payload), Some(waiters::Wake::All)));
        }
        for payload in ["", "2", "-1", "x", "0.0", "OK"] {
            assert!(latch_messages(payload).is_none(), "{payload}");
        }
    }
}
