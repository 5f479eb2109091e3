//! The wait loop every lock kind shares (protocol §3.9, §3.10), and the cancellation rule
//! that goes with it: a hold obtained after the caller gave up is released at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use fred::types::Value;

use crate::engine::{BoxFuture, Engine};
use crate::error::{Error, Result};
use crate::pubsub::Subscription;
use crate::script::Script;
use crate::wait::{Backoff, Delays};

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

/// What an acquire script answered. Every `lua/*_acquire.lua` replies `{1, count}` (fenced:
/// `{1, count, token}`) when it took or re-entered the hold, and `{0, ms}` when it did not.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Taken {
        /// Count 1: the owner held nothing before, so this is a new hold, not a re-entry.
        new_hold: bool,
        token: Option<u64>,
    },
    /// Not taken; nothing was written. The holder's PTTL, or what the kind says instead.
    Busy(i64),
}

impl Reply {
    pub(crate) fn read(script: &'static Script, reply: Value) -> Result<Reply> {
        if let Value::Array(items) = &reply {
            match items.as_slice() {
                [Value::Integer(1), Value::Integer(count)] if *count > 0 => {
                    return Ok(Reply::Taken {
                        new_hold: *count == 1,
                        token: None,
                    })
                }
                [Value::Integer(1), Value::Integer(count), Value::Integer(token)]
                    if *count > 0 && *token > 0 =>
                {
                    return Ok(Reply::Taken {
                        new_hold: *count == 1,
                        token: Some(*token as u64),
                    })
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
}

/// How a waiter learns that it may try again.
#[derive(Clone, Copy)]
pub(crate) enum Wake<'a> {
    /// Unlock messages on this channel, and the holder's lease running out.
    Messages(&'a str),
    /// Sleeps by the back-off between attempts, never subscribing (protocol §8.1).
    Spin(Backoff),
}

/// How long a waiter sleeps between attempts when no unlock message can reach it (the key
/// has no TTL, or subscribing failed).
const POLL_WITHOUT_MESSAGES: Duration = Duration::from_millis(500);
/// Back-off between attempts while Redis is unreachable during a wait.
const OUTAGE_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// Takes a hold by Redisson's algorithm: try; subscribe to the channel of `wake`; then
/// until `deadline`: try again, and wait for an unlock message or for the holder's lease to
/// run out. A spinning waiter ([`Wake::Spin`]) never subscribes: it sleeps by its back-off
/// (at most until the holder's lease runs out) between attempts, as Redisson's spin lock.
///
/// `attempt` runs one acquire script; it must leave no hold behind when it is dropped
/// mid-flight (see [`InFlight`]). Returns `Ok(None)` when `deadline` passed.
///
/// A wake-up is never lost: a waiter woken by a message makes one more attempt even when its
/// deadline has passed meanwhile, and one that ends without an attempt after the wake-up
/// (an error, the future dropped) passes it on to another local waiter (see [`Unanswered`]).
///
/// Errors of the first attempt are returned as they are (Redis down, wrong type). Once
/// waiting, transient errors are retried with back-off until Redis has been unreachable for
/// `outage_limit`; this is what lets a waiter ride out a Redis restart.
pub(crate) async fn acquire<T, F, Fut>(
    engine: &Engine,
    wake: Wake<'_>,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let ttl = match attempt().await? {
        Attempt::Acquired(hold) => return Ok(Some(hold)),
        Attempt::Busy { ttl } => ttl,
    };
    let (channel, mut spin) = match wake {
        Wake::Messages(channel) => (channel, None),
        // Only named in log lines: a spinning waiter never subscribes.
        Wake::Spin(backoff) => ("(spinning)", Some(backoff.delays())),
    };
    if let Some(delays) = spin.as_mut() {
        // Spinning: try, sleep, try, ... (no retry in between to close a subscribe gap).
        tokio::time::sleep(spin_pause(delays, ttl, deadline)).await;
    }
    let outage_limit = engine.settings.watchdog_timeout;
    let mut subscription: Option<Subscription> = None;
    let mut outage: Option<(Instant, Duration)> = None;
    let mut unanswered = Unanswered::default();
    loop {
        // Past the deadline, only a wake-up not yet answered earns a last attempt.
        let last = deadline.is_some_and(|d| Instant::now() >= d);
        if last && !unanswered.is_pending() {
            return Ok(None);
        }
        engine.check_open()?;
        if subscription.is_none() && spin.is_none() {
            let subscribing = engine.pubsub.subscribe(channel);
            let subscribed = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, subscribing).await {
                    Ok(result) => result,
                    Err(_) => return Ok(None),
                },
                None => subscribing.await,
            };
            match subscribed {
                Ok(sub) => subscription = Some(sub),
                Err(Error::Closed) => return Err(Error::Closed),
                // Waiting still works without messages, only slower: poll and retry later.
                Err(error) => tracing::debug!(%error, channel, "subscribing failed; polling"),
            }
        }

        // Register for the next message before trying, so one sent in between is kept.
        let mut notified = std::pin::pin!(None);
        if let Some(subscription) = &subscription {
            if register(notified.as_mut(), subscription.notify()) {
                unanswered.take(subscription.notify());
            }
        }

        let ttl = match attempt().await {
            Ok(Attempt::Acquired(hold)) => {
                unanswered.answer();
                return Ok(Some(hold));
            }
            Ok(Attempt::Busy { ttl }) => {
                // The lock was looked at after every wake-up taken so far.
                unanswered.answer();
                if last {
                    return Ok(None);
                }
                outage = None;
                ttl
            }
            // The last attempt failed: the wake-up goes on to another waiter.
            Err(error) if error.is_retryable() && last => return Ok(None),
            Err(error) if error.is_retryable() => {
                let (since, backoff) = outage.get_or_insert((Instant::now(), OUTAGE_BACKOFF.0));
                if since.elapsed() >= outage_limit {
                    return Err(error);
                }
                tracing::debug!(%error, channel, "attempt failed while waiting; retrying");
                let pause = *backoff;
                *backoff = (*backoff * 2).min(OUTAGE_BACKOFF.1);
                Some(pause)
            }
            Err(error) => return Err(error),
        };

        let mut wait = match (ttl, &subscription) {
            (Some(ttl), Some(_)) => ttl,
            (Some(ttl), None) => ttl.min(POLL_WITHOUT_MESSAGES),
            (None, _) => POLL_WITHOUT_MESSAGES,
        };
        if let Some(deadline) = deadline {
            wait = wait.min(deadline.saturating_duration_since(Instant::now()));
        }
        if outage.is_some() {
            // Messages are unreliable during an outage: back off, do not wait on them.
            tokio::time::sleep(wait).await;
            continue;
        }
        if let Some(delays) = spin.as_mut() {
            tokio::time::sleep(spin_pause(delays, ttl, deadline)).await;
            continue;
        }
        match (notified.as_mut().as_pin_mut(), &subscription) {
            (Some(notified), Some(subscription)) => {
                if tokio::time::timeout(wait, notified).await.is_ok() {
                    unanswered.take(subscription.notify());
                }
            }
            _ => tokio::time::sleep(wait).await,
        }
    }
}

/// Registers `slot` for the channel's next wake-up. A wake-up stored while no waiter was
/// registered is taken on the way (and a fresh registration made): returns whether one was.
/// The attempt that follows answers it.
fn register<'a>(mut slot: Pin<&mut Option<Notified<'a>>>, notify: &'a Notify) -> bool {
    let mut took = false;
    loop {
        slot.set(Some(notify.notified()));
        let notified = slot.as_mut().as_pin_mut().expect("just set");
        if !notified.enable() {
            return took;
        }
        took = true;
    }
}

/// A wake-up this waiter took from its channel that no attempt has answered yet. If the
/// waiter ends before one does (an error, the future dropped), [`Drop`] passes the wake-up on
/// to another local waiter of the channel, which then looks at the lock in its place.
///
/// (A wake-up given to a registration that is dropped before it completed is passed on by
/// Tokio's `Notified` itself.)
#[derive(Default)]
struct Unanswered(Option<Arc<Notify>>);

impl Unanswered {
    fn take(&mut self, notify: &Arc<Notify>) {
        self.0 = Some(notify.clone());
    }

    /// An attempt made after the wake-up has looked at the lock.
    fn answer(&mut self) {
        self.0 = None;
    }

    fn is_pending(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(notify) = self.0.take() {
            notify.notify_one();
        }
    }
}

/// A spinning waiter's next sleep: the back-off's next step, cut short when the holder's
/// lease ends sooner or the deadline comes first.
fn spin_pause(delays: &mut Delays, ttl: Option<Duration>, deadline: Option<Instant>) -> Duration {
    let mut pause = delays.next_delay();
    if let Some(ttl) = ttl {
        pause = pause.min(ttl);
    }
    if let Some(deadline) = deadline {
        pause = pause.min(deadline.saturating_duration_since(Instant::now()));
    }
    pause
}

/// The instant a wait of `wait` from now ends, or an error when it cannot be represented.
pub(crate) fn deadline_after(wait: Duration) -> Result<Instant> {
    Instant::now().checked_add(wait).ok_or_else(|| {
        Error::invalid("wait is too long to represent; use lock() to wait without a limit")
    })
}

/// An acquire script on the wire. If the caller drops it before the reply arrives, the
/// reply is awaited in the background and a hold it took is handed to `orphan`, which
/// releases it. This keeps `tokio::time::timeout(lock.lock(..))` and `select!` safe.
pub(crate) struct InFlight<T: Send + 'static> {
    call: Option<BoxFuture<Result<Attempt<T>>>>,
    orphan: Option<Box<dyn FnOnce(T) -> BoxFuture<()> + Send>>,
}

impl<T: Send + 'static> InFlight<T> {
    pub(crate) fn new(
        call: BoxFuture<Result<Attempt<T>>>,
        orphan: impl FnOnce(T) -> BoxFuture<()> + Send + 'static,
    ) -> Self {
        InFlight {
            call: Some(call),
            orphan: Some(Box::new(orphan)),
        }
    }
}

impl<T: Send + 'static> Future for InFlight<T> {
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

impl<T: Send + 'static> Unpin for InFlight<T> {}

impl<T: Send + 'static> Drop for InFlight<T> {
    fn drop(&mut self) {
        let (Some(call), Some(orphan)) = (self.call.take(), self.orphan.take()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Ok(Attempt::Acquired(hold)) = call.await {
                        tracing::debug!("acquired after the caller gave up; releasing");
                        orphan(hold).await;
                    }
                });
            }
            Err(_) => tracing::warn!(
                "acquire dropped outside a Tokio runtime; a hold it may take expires with its lease"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{FENCED_ACQUIRE, LOCK_ACQUIRE};

    fn read(items: Vec<Value>) -> Option<Reply> {
        Reply::read(&LOCK_ACQUIRE, Value::Array(items)).ok()
    }

    #[test]
    fn reads_every_reply_shape_and_rejects_others() {
        let taken = |new_hold, token| Some(Reply::Taken { new_hold, token });
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

    #[test]
    fn registering_takes_a_stored_wake_up_and_stays_registered() {
        let notify = Notify::new();
        let mut slot = std::pin::pin!(None);
        assert!(!register(slot.as_mut(), &notify), "nothing stored yet");
        // Sent to the registration; re-registering drops it, which stores the wake-up,
        // and the fresh registration takes it.
        notify.notify_one();
        assert!(register(slot.as_mut(), &notify));
        assert!(!register(slot.as_mut(), &notify), "taken once only");
    }

    #[test]
    fn an_unanswered_wake_up_is_passed_on_and_an_answered_one_is_not() {
        let notify = Arc::new(Notify::new());
        let mut slot = std::pin::pin!(None);
        let mut answered = Unanswered::default();
        answered.take(&notify);
        answered.answer();
        drop(answered);
        assert!(!register(slot.as_mut(), &notify));

        let mut unanswered = Unanswered::default();
        unanswered.take(&notify);
        assert!(unanswered.is_pending());
        drop(unanswered);
        assert!(
            register(slot.as_mut(), &notify),
            "passed on to the next waiter"
        );
    }
}
