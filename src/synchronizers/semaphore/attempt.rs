//! One semaphore acquire attempt, and the undoing of one whose outcome its caller never
//! learnt (protocol §13.4).

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;

use crate::base::boxed::boxed_in_place;
use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::{self, Str};
use crate::core::attempt::{Attempt, InFlight};
use crate::core::guard::release_in_background;
use crate::synchronizers::counter::RECORD_KEPT;
use crate::topology::runner::OwnBox;
use crate::topology::script::{Call, SEMAPHORE_ACQUIRE, SEMAPHORE_UNDO};

use super::{Inner, RECHECK};

/// One acquire attempt, recorded under a key of its own (see `lua/semaphore_acquire.lua`).
/// Whatever keeps its outcome from the caller (a lost reply, the future dropped while the
/// script is on the wire, a replica that did not confirm) gives its permits back. Acquired,
/// it yields the record, which the caller files as done once it has the permits.
pub(super) fn attempt(
    inner: &Arc<Inner>,
    permits: i64,
) -> impl std::future::Future<Output = Result<Attempt<Str>>> + Send + 'static {
    let id = inner.engine.queue_exits().wait_id();
    let record: Str = keys::semaphore_attempt(&inner.raw, &inner.client, id).into();
    let undo = Undo {
        inner: inner.clone(),
        record,
        permits,
    };
    let mut keys = vec![
        Value::String(inner.raw.clone()),
        Value::String(undo.record.clone()),
    ];
    let done = inner.engine.done_records().take(&inner.raw);
    keys.extend(done.into_iter().map(Value::String));
    let args = [Value::from(permits), Value::from(millis(RECORD_KEPT))];
    let call = Call::of(&SEMAPHORE_ACQUIRE, keys, args);
    let sent = {
        let undo = undo.clone();
        boxed_in_place(|| async move {
            let inner = &undo.inner;
            let (engine, key, name) = (&inner.engine, &inner.raw, &inner.name);
            let (reply, confirmation) = engine.send_confirmed::<OwnBox>(call, key).await;
            let attempt = reply
                .map_err(|e| map_redis_error(e, name))
                .and_then(read_acquire)
                .map(|attempt| match attempt {
                    Attempt::Acquired(()) => Attempt::Acquired(undo.record.clone()),
                    Attempt::Busy { ttl } => Attempt::Busy { ttl },
                });
            match attempt {
                Ok(Attempt::Acquired(record)) => {
                    if let Err(error) = engine.confirm(confirmation, key, name).await {
                        // A failover could lose the write: give the permits back.
                        undo.in_background();
                        return Err(error);
                    }
                    Ok(Attempt::Acquired(record))
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
    InFlight::new(sent, move |_record| {
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
        let call = || {
            let keys = [
                inner.key(),
                inner.channel(),
                Value::String(self.record.clone()),
            ];
            let args = [
                Value::from(self.permits),
                Value::from(millis(RECORD_KEPT)),
                inner.publish(),
            ];
            Call::of(&SEMAPHORE_UNDO, keys, args)
        };
        match inner.undo_until_done(call).await {
            Ok(gave_back) => {
                if gave_back == Value::Integer(1) {
                    tracing::debug!(
                        semaphore = &*inner.name,
                        "gave back the permits of an unanswered acquire"
                    );
                }
            }
            Err(error) => tracing::warn!(
                %error,
                semaphore = &*inner.name,
                permits = self.permits,
                "could not undo an acquire whose reply was lost; the permits it may have taken stay taken"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
