//! One acquire attempt: what its script answered, and the cancellation rule that goes with
//! it: a hold obtained after the caller gave up is released at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use fred::types::Value;

use crate::base::background::spawn_or;
use crate::base::boxed::BoxFuture;
use crate::base::error::{Error, Result};
use crate::topology::script::Script;

/// The outcome of one acquire script.
pub(crate) enum Attempt<T> {
    Acquired(T),
    /// Someone else holds it; `ttl` is their remaining lease (`None`: the key never expires).
    Busy {
        ttl: Option<Duration>,
    },
}

impl<T> Attempt<T> {
    /// Busy, with the wait a script reported: a PTTL (-1: the key never expires; -2: it
    /// vanished meanwhile, so try again at once) or a fair waiter's estimate.
    pub(crate) fn busy(ms: i64) -> Attempt<T> {
        match ms {
            ms if ms >= 0 => Attempt::Busy {
                ttl: Some(Duration::from_millis(ms as u64)),
            },
            -2 => Attempt::Busy {
                ttl: Some(Duration::ZERO),
            },
            _ => Attempt::Busy { ttl: None },
        }
    }
}

/// What an acquire script took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    /// Count 1: the owner held nothing before, so this is a new hold, not a re-entry.
    pub(crate) new_hold: bool,
    /// The fencing token of a fenced hold.
    pub(crate) token: Option<u64>,
}

/// What an acquire script answered. Every `lua/*_acquire.lua` replies `{1, count}` (fenced:
/// `{1, count, token}`) when it took or re-entered the hold, and `{0, ms}` when it did not.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Taken(Taken),
    /// Not taken; nothing was written. The holder's PTTL, or what the kind says instead.
    Busy(i64),
}

impl Reply {
    pub(crate) fn read(script: &'static Script, reply: Value) -> Result<Reply> {
        if let Value::Array(items) = &reply {
            match items.as_slice() {
                [Value::Integer(1), Value::Integer(count)] if *count > 0 => {
                    return Ok(Reply::Taken(Taken {
                        new_hold: *count == 1,
                        token: None,
                    }))
                }
                [Value::Integer(1), Value::Integer(count), Value::Integer(token)]
                    if *count > 0 && *token > 0 =>
                {
                    return Ok(Reply::Taken(Taken {
                        new_hold: *count == 1,
                        token: Some(*token as u64),
                    }))
                }
                [Value::Integer(0), Value::Integer(ms)] => return Ok(Reply::Busy(*ms)),
                _ => {}
            }
        }
        Err(Error::UnexpectedReply {
            script: script.name,
            detail: format!("{reply:?}"),
        })
    }

    /// The attempt this reply makes.
    pub(crate) fn attempt(self) -> Attempt<Taken> {
        match self {
            Reply::Taken(taken) => Attempt::Acquired(taken),
            Reply::Busy(ms) => Attempt::busy(ms),
        }
    }
}

/// What releases a hold an [`InFlight`] attempt took after its caller gave up.
pub(crate) trait Orphan<T>: FnOnce(T) -> BoxFuture<()> + Send + 'static {}

impl<T, F: FnOnce(T) -> BoxFuture<()> + Send + 'static> Orphan<T> for F {}

/// An acquire script on the wire. If the caller drops it before the reply arrives, the
/// reply is awaited in the background and a hold it took is handed to `orphan`, which
/// releases it. This keeps `tokio::time::timeout(lock.lock(..))` and `select!` safe.
pub(crate) struct InFlight<T: Send + 'static, O: Orphan<T>> {
    call: Option<BoxFuture<Result<Attempt<T>>>>,
    orphan: Option<O>,
}

impl<T: Send + 'static, O: Orphan<T>> InFlight<T, O> {
    pub(crate) fn new(call: BoxFuture<Result<Attempt<T>>>, orphan: O) -> Self {
        InFlight {
            call: Some(call),
            orphan: Some(orphan),
        }
    }
}

impl<T: Send + 'static, O: Orphan<T>> Future for InFlight<T, O> {
    type Output = Result<Attempt<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let call = self
            .call
            .as_mut()
            .expect("InFlight polled after completion");
        let reply = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        Poll::Ready(reply)
    }
}

impl<T: Send + 'static, O: Orphan<T>> Unpin for InFlight<T, O> {}

impl<T: Send + 'static, O: Orphan<T>> Drop for InFlight<T, O> {
    fn drop(&mut self) {
        let (Some(call), Some(orphan)) = (self.call.take(), self.orphan.take()) else {
            return;
        };
        let release = async move {
            if let Ok(Attempt::Acquired(hold)) = call.await {
                tracing::debug!("acquired after the caller gave up; giving it back");
                orphan(hold).await;
            }
        };
        spawn_or(release, || {
            tracing::warn!(
                "acquire dropped outside a Tokio runtime; what it may take is not given back \
                 (a lock's hold expires with its lease, a semaphore's permits stay taken)"
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::script::{FENCED_ACQUIRE, LOCK_ACQUIRE};

    fn read(items: Vec<Value>) -> Option<Reply> {
        Reply::read(&LOCK_ACQUIRE, Value::Array(items)).ok()
    }

    #[test]
    fn reads_every_reply_shape_and_rejects_others() {
        let taken = |new_hold, token| Some(Reply::Taken(Taken { new_hold, token }));
        assert_eq!(read(vec![1.into(), 1.into()]), taken(true, None));
        assert_eq!(read(vec![1.into(), 3.into()]), taken(false, None));
        assert_eq!(
            read(vec![1.into(), 1.into(), 7.into()]),
            taken(true, Some(7))
        );
        assert_eq!(read(vec![0.into(), 1500.into()]), Some(Reply::Busy(1500)));
        assert_eq!(read(vec![0.into(), (-1).into()]), Some(Reply::Busy(-1)));
        for bad in [
            vec![1.into(), 0.into()],
            vec![(-1).into(), 7.into()],
            vec![1.into()],
            vec![1.into(), 1.into(), 0.into()],
        ] {
            assert!(read(bad).is_none());
        }
        assert!(Reply::read(&FENCED_ACQUIRE, Value::Null).is_err());
    }

    #[test]
    fn a_busy_reply_becomes_a_wait() {
        let ttl = |ms| match Attempt::<()>::busy(ms) {
            Attempt::Busy { ttl } => ttl,
            Attempt::Acquired(()) => unreachable!(),
        };
        assert_eq!(ttl(1500), Some(Duration::from_millis(1500)));
        assert_eq!(ttl(-2), Some(Duration::ZERO));
        // A holder without a TTL: busy, with no end in sight.
        assert_eq!(ttl(-1), None);
    }
}
