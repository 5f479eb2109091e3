//! One acquire attempt, and the undoing of one whose outcome its caller never learnt
//! (protocol §15.4).

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;

use crate::base::boxed::boxed_in_place;
use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::{self, Str};
use crate::base::time::{epoch_millis, millis};
use crate::core::attempt::{Attempt, InFlight};
use crate::core::guard::release_in_background;
use crate::synchronizers::counter::RECORD_KEPT;
use crate::topology::runner::OwnBox;
use crate::topology::script::{Call, EXPIRABLE_ACQUIRE, EXPIRABLE_UNDO};

use super::{Inner, PermitId, NEVER};

/// How long a waiter that found too few permits, and no lease that ends, waits for a
/// message before it looks again. Java waiters have no such fallback.
pub(super) const RECHECK: Duration = Duration::from_secs(15);

/// The least a waiter told of a lease that already ended waits before it looks again.
const SOON: Duration = Duration::from_millis(10);

/// One acquire attempt under new ids (see `lua/expirable_acquire.lua`). Whatever keeps its
/// outcome from the caller (a lost reply, the future dropped while the script is on the
/// wire, a replica that did not confirm) gives back exactly those ids.
pub(super) fn attempt(
    inner: &Arc<Inner>,
    permits: i64,
    lease: Option<Duration>,
) -> impl std::future::Future<Output = Result<Attempt<Vec<PermitId>>>> + Send + 'static {
    let ids: Vec<PermitId> = (0..permits).map(|_| PermitId::random()).collect();
    let attempt_id = inner.engine.queue_exits().wait_id();
    let record = keys::semaphore_attempt(&inner.raw, &inner.client, attempt_id).into();
    let now = epoch_millis();
    let end = match lease {
        Some(lease) => now.saturating_add(millis(lease)).min(NEVER - 1),
        None => NEVER,
    };
    let mut args = vec![
        Value::from(permits),
        Value::from(end),
        Value::from(now),
        inner.publish(),
    ];
    args.extend(ids.iter().map(PermitId::arg));
    let keys = [
        inner.key(),
        Value::String(inner.leases.clone()),
        inner.channel(),
        Value::String(Str::clone(&record)),
    ];
    let call = Call::of(&EXPIRABLE_ACQUIRE, keys, args);
    let undo = Undo {
        inner: inner.clone(),
        record,
        ids: ids.into(),
    };
    let sent = {
        let undo = undo.clone();
        boxed_in_place(|| async move {
            let inner = &undo.inner;
            let (engine, key, name) = (&inner.engine, &inner.raw, &inner.name);
            let (reply, confirmation) = engine.send_confirmed::<OwnBox>(call, key).await;
            let attempt = reply
                .map_err(|e| map_redis_error(e, name))
                .and_then(|reply| read_acquire(reply, now));
            match attempt {
                Ok(Attempt::Acquired(())) => {
                    if let Err(error) = engine.confirm(confirmation, key, name).await {
                        // A failover could lose the write: give the permits back.
                        undo.in_background();
                        return Err(error);
                    }
                    Ok(Attempt::Acquired(undo.ids.to_vec()))
                }
                Ok(Attempt::Busy { ttl }) => Ok(Attempt::Busy { ttl }),
                Err(error) if error.is_retryable() => {
                    // The script may have run, or may still run: undo it either way.
                    undo.in_background();
                    Err(error)
                }
                Err(error) => Err(error),
            }
        })
    };
    InFlight::new(sent, move |_ids| {
        Box::pin(async move { undo.until_done().await })
    })
}

/// Reads `lua/expirable_acquire.lua`'s reply to an attempt made at `now` (epoch ms): `OK`
/// taken; `:<score>` busy until that lease ends (at most [`RECHECK`]); nil busy.
fn read_acquire(reply: Value, now: i64) -> Result<Attempt<()>> {
    let text = match &reply {
        Value::Null => return Ok(Attempt::Busy { ttl: Some(RECHECK) }),
        Value::String(text) => Some(&**text),
        Value::Bytes(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    };
    match text {
        Some("OK") => return Ok(Attempt::Acquired(())),
        Some(text) => {
            if let Some(score) = text.strip_prefix(':').and_then(|s| s.parse::<f64>().ok()) {
                // Wake when it ends (then the next attempt reaps it), by this clock; a
                // lease that ended already (more expired than one attempt reaps) soon.
                let left = (score as i64).saturating_sub(now);
                let left = left.clamp(millis(SOON), millis(RECHECK));
                let ttl = Duration::from_millis(left as u64);
                return Ok(Attempt::Busy { ttl: Some(ttl) });
            }
        }
        None => {}
    }
    Err(Error::UnexpectedReply {
        script: EXPIRABLE_ACQUIRE.name,
        detail: format!("{reply:?}"),
    })
}

/// Undoes one acquire attempt (`lua/expirable_undo.lua`): gives back those of its ids
/// still held, and keeps it from taking anything should it still run.
#[derive(Clone)]
struct Undo {
    inner: Arc<Inner>,
    record: Str,
    ids: Arc<[PermitId]>,
}

impl Undo {
    fn in_background(&self) {
        let undo = self.clone();
        release_in_background(async move { undo.until_done().await });
    }

    /// Tries until the script ran, or until the record it leaves may be gone.
    async fn until_done(self) {
        let inner = &self.inner;
        let call = || {
            let keys = [
                inner.key(),
                Value::String(inner.leases.clone()),
                inner.channel(),
                Value::String(self.record.clone()),
            ];
            let mut args = vec![Value::from(millis(RECORD_KEPT)), inner.publish()];
            args.extend(self.ids.iter().map(PermitId::arg));
            Call::of(&EXPIRABLE_UNDO, keys, args)
        };
        match inner.undo_until_done(call).await {
            Ok(given) => tracing::debug!(
                semaphore = &*inner.name,
                ?given,
                "undid an unanswered acquire"
            ),
            Err(error) => tracing::warn!(
                %error,
                semaphore = &*inner.name,
                ids = ?self.ids,
                "could not undo an acquire whose reply was lost; its permits stay taken until their leases end"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_acquire_reply() {
        let ttl = |reply: Value| match read_acquire(reply, 1_000) {
            Ok(Attempt::Busy { ttl }) => ttl,
            other => panic!("{:?}", other.map(|_| ())),
        };
        assert!(matches!(
            read_acquire(Value::from("OK"), 0),
            Ok(Attempt::Acquired(()))
        ));
        assert_eq!(ttl(Value::from(":1500")), Some(Duration::from_millis(500)));
        assert_eq!(ttl(Value::from(":900")), Some(SOON));
        assert_eq!(ttl(Value::from(":99999999")), Some(RECHECK));
        assert_eq!(ttl(Value::Null), Some(RECHECK));
        assert!(read_acquire(Value::from("x"), 0).is_err());
        assert!(read_acquire(Value::Integer(1), 0).is_err());
    }
}
