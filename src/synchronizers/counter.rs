//! What the synchronizers (the semaphores and the count-down latch) share: Redisson keeps
//! each in a counter, a string key holding a whole number, and tells its waiters on a
//! channel. A [`Counter`] is that key and channel in one client, with the one way its
//! scripts write; and the undoing of an acquisition whose reply was lost, which both
//! semaphores need.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use tokio::time::Instant;

use crate::base::backoff::OUTAGE_BACKOFF;
use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::Str;
use crate::base::time::millis;
use crate::engine::owed::Writing;
use crate::engine::Engine;
use crate::topology::runner::OwnBox;
use crate::topology::script::{static_arg, Call, Script, SEMAPHORE_SET};

/// How long the undoing of an unanswered attempt is tried, well within [`RECORD_KEPT`].
pub(crate) const UNDO_FOR: Duration = Duration::from_secs(100);

/// How long an acquire attempt's record stays on the server: the time within which an
/// attempt whose reply was lost can still be undone.
pub(crate) const RECORD_KEPT: Duration = Duration::from_secs(120);

/// One synchronizer's counter and channel, in one client.
pub(crate) struct Counter {
    pub(crate) engine: Arc<Engine>,
    /// The user's name, as errors name it.
    pub(crate) name: Str,
    /// The counter's key: the name after the client's prefix.
    pub(crate) raw: Str,
    /// The channel its waiters listen on.
    pub(crate) channel: Str,
    /// The key of the record of a write (see [`write_once`](Self::write_once)), by the
    /// counter's key, the client's id and the write's.
    pub(crate) records: fn(&str, &str, u64) -> String,
}

impl Counter {
    /// The counter's key, as a script's KEY.
    pub(crate) fn key(&self) -> Value {
        Value::String(self.raw.clone())
    }

    /// The channel, as a script's KEY.
    pub(crate) fn channel(&self) -> Value {
        Value::String(self.channel.clone())
    }

    /// How the scripts must publish (see `lua/publish.lua`).
    pub(crate) fn publish(&self) -> Value {
        static_arg(self.engine.publish_command())
    }

    /// Runs a script that writes, and waits for a replica where the client checks them.
    pub(crate) async fn write(&self, call: Call) -> Result<Value> {
        let (engine, key, name) = (&self.engine, &self.raw, &self.name);
        let (reply, confirmation) = engine.run_confirmed::<OwnBox>(call, key, name).await?;
        engine.confirm(confirmation, key, name).await?;
        Ok(reply)
    }

    /// A write that must happen exactly once (a release, a count-down): `make` makes its
    /// call from its record key, how long the record is kept (ms) and the records of
    /// answered writes for the script to delete (see `lua/once.lua`). It is sent until Redis
    /// answers it and a replica confirms it, backing off between tries, for at most
    /// [`UNDO_FOR`]: every copy after the first finds the first one's record, writes nothing
    /// and answers the same; a copy that reaches a master promoted without the first one's
    /// write (a failover lost it) makes it again there. `writing` counts it among the writes
    /// a shutdown waits for (taken when the caller asked for the write); it is sent while the
    /// client shuts down, until the shutdown settled. Its reply.
    ///
    /// # Errors
    /// The first error that is not retryable (the write did not happen); a retryable one
    /// met after [`UNDO_FOR`] of tries, or when the shutdown settled: the write may or may
    /// not have happened.
    pub(crate) async fn write_once(
        &self,
        writing: Result<Writing>,
        make: impl Fn(Value, Value, Vec<Value>) -> Call,
    ) -> Result<Value> {
        let _writing = writing?;
        let (engine, key, name) = (&self.engine, &self.raw, &self.name);
        let id = engine.queue_exits().wait_id();
        let client = engine.client_id().to_string();
        let record: Str = (self.records)(key, &client, id).into();
        let give_up = Instant::now() + UNDO_FOR;
        let mut pause = OUTAGE_BACKOFF.0;
        loop {
            let done = engine.done_records().take(key);
            let call = make(
                Value::String(record.clone()),
                Value::from(millis(RECORD_KEPT)),
                done.into_iter().map(Value::String).collect(),
            );
            // Sent whether or not the client is closing: a shutdown waits for it.
            let written = async {
                let (reply, confirmation) = engine.send_confirmed::<OwnBox>(call, key).await;
                let reply = reply.map_err(|e| map_redis_error(e, name))?;
                engine.confirm(confirmation, key, name).await?;
                Ok::<_, Error>(reply)
            };
            match written.await {
                Ok(reply) => {
                    engine.done_records().done(key, record);
                    return Ok(reply);
                }
                Err(error)
                    if error.is_retryable()
                        && Instant::now() + pause < give_up
                        && !engine.owed().is_settled() =>
                {
                    tracing::debug!(%error, name = &**name, "a write went unanswered; sending it again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(OUTAGE_BACKOFF.1);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// A semaphore's `trySetPermits` (`lua/semaphore_set.lua`): sets the counter to
    /// `permits` (with a TTL, if given) unless it exists, and tells waiters; `true` when set.
    pub(crate) async fn set_if_missing(&self, permits: i64, ttl: Option<Duration>) -> Result<bool> {
        let mut args = vec![Value::from(permits), self.publish()];
        args.extend(ttl.map(|ttl| Value::from(millis(ttl))));
        let call = Call::of(&SEMAPHORE_SET, [self.key(), self.channel()], args);
        Ok(int_reply(&SEMAPHORE_SET, self.write(call).await?)? == 1)
    }

    /// Sends the undo script `call` makes until it ran and, where the client checks replicas,
    /// a replica confirmed it, or until [`UNDO_FOR`] has passed (after which the attempt
    /// record it needs may be gone), backing off between tries of transient errors. An undo
    /// a failover lost would leave the attempt's permits taken for good; sent again, it finds
    /// the record and gives back nothing twice. Its reply, or the error that ended the tries.
    pub(crate) async fn undo_until_done(&self, call: impl Fn() -> Call) -> Result<Value> {
        let (engine, key, name) = (&self.engine, &self.raw, &self.name);
        let give_up = Instant::now() + UNDO_FOR;
        let mut pause = OUTAGE_BACKOFF.0;
        loop {
            let (reply, confirmation) = engine.send_confirmed::<OwnBox>(call(), key).await;
            let undone = match reply.map_err(|e| map_redis_error(e, name)) {
                Ok(reply) => engine
                    .confirm(confirmation, key, name)
                    .await
                    .map(|()| reply),
                failed => failed,
            };
            match undone {
                Err(error) if error.is_retryable() && Instant::now() + pause < give_up => {
                    tracing::debug!(%error, "undoing an unanswered acquire failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(OUTAGE_BACKOFF.1);
                }
                done => return done,
            }
        }
    }
}

/// A script's integer reply; anything else is unexpected.
pub(crate) fn int_reply(script: &'static Script, reply: Value) -> Result<i64> {
    match reply {
        Value::Integer(n) => Ok(n),
        other => Err(Error::UnexpectedReply {
            script: script.name,
            detail: format!("{other:?}"),
        }),
    }
}
