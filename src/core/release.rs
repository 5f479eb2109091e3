//! Releasing one hold: the kind's release script, resent with the same request id when
//! its reply is lost (the unlock latch replays the first outcome instead of releasing twice,
//! protocol §3.4; see `latches.rs`), and the registry of holds brought in line with the reply.

use std::time::Duration;

use fred::types::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::base::backoff::{release_resend_pause, RELEASE_SENDS};
use crate::base::error::{Error, Result};
use crate::base::observe;
use crate::base::owner::LockOwner;
use crate::base::time::millis;
use crate::core::protocol::Target;
use crate::engine::hand_offs::{Heir, Run};
use crate::engine::latches::Latch;
use crate::engine::Engine;
use crate::topology::replicas::Confirmation;
use crate::topology::runner::InPlace;
use crate::topology::script::{nil_or_int, Script};

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    NotHeld,
    Partly,
    Fully,
    /// The owner's last hold went to a waiter of this client (see `hand_off.rs`), with the
    /// fencing token the release issued it, for a kind that fences.
    Handed {
        token: Option<u64>,
    },
}

/// Who releases: a guard, which already gave up its part in the registry, or a release
/// without a guard (`unlock(&owner)`, Java style), which ends one of the owner's holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    Guard,
    Owner,
}

/// How long a release's latch is kept: long enough for every resend of the release.
pub(crate) fn latch_ttl(engine: &Engine) -> Duration {
    (engine.settings().command_timeout + Duration::from_millis(500)) * RELEASE_SENDS
        + Duration::from_secs(1)
}

/// Releases one hold of `owner` and brings the registry of holds in line with the reply.
/// `generation`: the owner's entry when the release was sent. A partial release by a guard
/// changes nothing more; one by the owner ends one hold of the entry. When the lock was
/// freed, handed over or not held, that entry is forgotten (its other guards lose their hold
/// with this one), never a newer one made by a later acquisition. Then waits for a replica
/// to have the release (see [`Replicas`](crate::topology::replicas::Replicas)).
///
/// `run`: for a guard's hold, where it stands in a run of hand-offs; the owner's last hold
/// then goes to a waiter of this client when the kind and the [`HandOff`](crate::HandOff)
/// bound allow (see `hand_off.rs`).
pub(crate) async fn release_settled(
    lock: &Target,
    owner: &LockOwner,
    lease_ms: i64,
    generation: Option<u64>,
    by: By,
    run: Option<Run>,
) -> Result<Released> {
    let hold = lock.hold_key(owner);
    let kind = lock.kind.kind();
    let span = observe::release_span(&lock.name, kind);
    let heirship = run.and_then(|run| Heirship::first(lock, run));
    let sent_at = Instant::now();
    let outcome = release_to(lock, owner, lease_ms, heirship.as_ref())
        .instrument(span)
        .await;
    observe::released(kind, &outcome, |(r, _)| *r == Released::NotHeld);
    // On an error the heir, dropped, waits in line again.
    let (released, confirmation) = outcome?;
    let watchdog = lock.engine.watchdog();
    match (released, by) {
        (Released::Partly, By::Owner) => watchdog.release_one(&hold, generation),
        (Released::Partly, By::Guard) => {}
        (Released::Fully | Released::Handed { .. } | Released::NotHeld, _) => {
            watchdog.forget(&hold, generation)
        }
    }
    let confirmed = match released {
        Released::NotHeld => Ok(()),
        _ => replicated(lock, confirmation).await,
    };
    if let Some(heirship) = heirship {
        heirship.settle(lock, released, sent_at, confirmed.is_ok());
    }
    confirmed.map(|()| released)
}

/// Returns once a replica has the write `confirmation` belongs to, giving a lagging replica
/// a second timeout before failing, as Redisson retries a release once.
pub(crate) async fn replicated(lock: &Target, confirmation: Confirmation) -> Result<()> {
    let (engine, key, name) = (&lock.engine, &lock.keys.raw, &lock.name);
    let again = confirmation.again();
    match engine.confirm(confirmation, key, name).await {
        Err(Error::NotReplicated { .. }) => engine.confirm(again, key, name).await,
        done => done,
    }
}

/// Runs the kind's release script, resending it with the same request id when the reply
/// is lost. Returns what it did and what confirms its write.
pub(crate) async fn release(
    lock: &Target,
    owner: &LockOwner,
    lease_ms: i64,
) -> Result<(Released, Confirmation)> {
    release_to(lock, owner, lease_ms, None).await
}

/// [`release`], giving the lock to the heir of `heirship` when it frees it.
async fn release_to(
    lock: &Target,
    owner: &LockOwner,
    lease_ms: i64,
    heirship: Option<&Heirship>,
) -> Result<(Released, Confirmation)> {
    let engine = &lock.engine;
    let latch = Latch {
        key: lock
            .latches
            .lock()
            .pop()
            .unwrap_or_else(|| engine.latches().new_key(&lock.keys)),
        request: engine.latches().request_id(),
    };
    let latch_ttl = Value::from(millis(latch_ttl(engine)));
    let mut sent = 1;
    let (reply, script) = loop {
        let mut call = match heirship {
            Some(Heirship { heir, .. }) => lock.kind.hand_off(lock, (owner, lease_ms), &**heir),
            None => lock.kind.release(lock, owner, lease_ms),
        };
        let script = call.script;
        call.push_key(latch.key.clone());
        call.push_args([latch_ttl.clone(), latch.request.clone()]);
        match engine
            .run_confirmed::<InPlace>(call, &lock.keys.raw, &lock.name)
            .await
        {
            Err(error) if error.is_retryable() && sent < RELEASE_SENDS => {
                tracing::debug!(%error, lock = %lock.name, "release failed; resending");
                observe::release_resent(lock.kind.kind());
                tokio::time::sleep(release_resend_pause(sent)).await;
                sent += 1;
            }
            reply => break (reply, script),
        }
    };
    if sent == 1 && reply.is_ok() {
        // Answered at its only send: nothing of this request can still run, so the key may
        // record the handle's next release.
        lock.latches.lock().push(latch.key);
    }
    let (reply, confirmation) = reply?;
    let released = match reply {
        Value::Array(handed) if heirship.is_some() => Released::Handed {
            token: Some(handed_token(script, handed)?),
        },
        reply => match nil_or_int(script, reply)? {
            None => Released::NotHeld,
            Some(0) => Released::Partly,
            Some(2) if heirship.is_some() => Released::Handed { token: None },
            Some(_) => Released::Fully,
        },
    };
    Ok((released, confirmation))
}

/// The fencing token of a hand-off's reply `{2, token}` (the token an integer, or the digits
/// the latch recorded when the reply is replayed).
fn handed_token(script: &'static Script, reply: Vec<Value>) -> Result<u64> {
    let token = match reply.as_slice() {
        [Value::Integer(2), Value::Integer(token)] => u64::try_from(*token).ok(),
        [Value::Integer(2), digits] => digits.as_str().and_then(|d| d.parse().ok()),
        _ => None,
    };
    token.ok_or_else(|| Error::UnexpectedReply {
        script: script.name,
        detail: format!("a hand-off replied {reply:?}"),
    })
}

/// The waiter a release may hand the lock to: the first of the line, taken out of it.
pub(crate) struct Heirship {
    pub(crate) heir: Box<dyn Heir>,
    id: u64,
    /// Where the hold handed over stands in its run.
    run: Run,
}

impl Heirship {
    /// The first waiter of `lock`'s line, when the kind hands over and the hold of run `run`
    /// may go to another task (see [`HandOff`](crate::HandOff); a kind that hands over in
    /// its queue's order is not bounded by runs, only turned on or off).
    pub(crate) fn first(lock: &Target, run: Run) -> Option<Heirship> {
        let engine = &lock.engine;
        if !engine.hand_offs().has_waiters() || !lock.kind.hands_off() {
            return None;
        }
        let hand_off = engine.settings().hand_off;
        let allowed = match lock.kind.hands_off_in_queue_order() {
            true => hand_off.is_on(),
            false => hand_off.allows(run),
        };
        if !allowed {
            return None;
        }
        let (id, heir) = engine.hand_offs().first(&lock.hand_off_line())?;
        Some(Heirship {
            heir,
            id,
            run: run.next(),
        })
    }

    /// After the release sent first at `sent_at` answered `released`: the heir takes the
    /// hold handed over, or (`confirmed` false: no replica has it, and a failover could lose
    /// it) releases it; when nothing was handed over it goes back to its place in the line.
    pub(crate) fn settle(
        self,
        lock: &Target,
        released: Released,
        sent_at: Instant,
        confirmed: bool,
    ) {
        match released {
            Released::Handed { token } => {
                observe::handed_off(lock.kind.kind());
                self.heir.take(sent_at, self.run, confirmed, token)
            }
            _ => (lock.engine.hand_offs()).put_back(&lock.hand_off_line(), self.id, self.heir),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::script::LOCK_HAND_OFF;

    #[test]
    fn a_hand_off_reply_gives_the_token_first_sent_or_replayed() {
        let read = |reply: Vec<Value>| handed_token(&LOCK_HAND_OFF, reply);
        assert_eq!(read(vec![2.into(), 8.into()]).unwrap(), 8);
        assert_eq!(
            read(vec![2.into(), "8".into()]).unwrap(),
            8,
            "from the latch"
        );
        assert!(read(vec![1.into(), 8.into()]).is_err());
        assert!(read(vec![2.into(), (-1).into()]).is_err());
        assert!(read(vec![2.into()]).is_err());
    }
}
