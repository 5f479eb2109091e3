//! Waiting: the wait loop every lock kind shares (protocol §3.9, §3.10), and how a waiter
//! learns it may try again (pub/sub wake-ups, or spinning by a back-off, §8.1). Every
//! pause between two tries lives in [`backoff`](crate::base::backoff).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::base::backoff::{Backoff, Delays, OUTAGE_BACKOFF, POLL_WITHOUT_MESSAGES};
use crate::base::error::{Error, Result};
use crate::base::observe;
use crate::base::time::deadline_after;
use crate::core::attempt::Attempt;
use crate::engine::Engine;
use crate::topology::pubsub::{unlock_messages, Messages, Subscription};
use crate::topology::waiters::{Moment, Ticket};

/// How a waiting call (`lock`, `try_lock_for`) learns that it may try again.
///
/// Either way, a waiter only ever gets the lock by running the acquire script again, so
/// the choice never affects exclusion, only latency and load.
///
/// # Default
/// [`WaitStrategy::PubSub`], as Redisson's `RLock`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WaitStrategy {
    /// Subscribe to the lock's channel and try again when an unlock message arrives, or
    /// when the holder's lease runs out. Quick to wake, one shared subscription per lock
    /// name and client. A holder that frees the lock without publishing (a spin lock, a
    /// crashed client, a plain `DEL`) is noticed only when its lease would have ended.
    #[default]
    PubSub,
    /// Never subscribe: sleep by the back-off between attempts (never longer than the
    /// holder's remaining lease, nor past the caller's deadline), as Redisson's `RSpinLock`.
    /// Costs one script call per sleep, but needs no pub/sub at all and notices every
    /// release within one back-off step, published or not.
    Spin(Backoff),
}

/// How long an acquisition may wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// One attempt, no waiting.
    Once,
    /// Until the deadline; the duration is the whole wait it was made from (a fair waiter's
    /// wait in the queue, as Redisson's `waitTime`).
    Until(Instant, Duration),
    Forever,
}

impl Wait {
    /// A wait of at most `wait`; zero makes one attempt.
    pub(crate) fn from_limit(wait: Duration) -> Result<Wait> {
        if wait.is_zero() {
            Ok(Wait::Once)
        } else {
            deadline_after(wait).map(|deadline| Wait::Until(deadline, wait))
        }
    }
}

/// How a waiter learns that it may try again.
#[derive(Clone, Copy)]
pub(crate) enum Wake<'a> {
    /// Messages on this channel, read as the kind reads them, and the holder's lease
    /// running out.
    Messages(&'a str, Messages),
    /// Sleeps by the back-off between attempts, never subscribing (protocol §8.1).
    Spin(Backoff),
}

/// Takes a hold by Redisson's algorithm: try; subscribe to the channel of `wake`; then
/// until `deadline`: try again, and wait for an unlock message or for the holder's lease to
/// run out. The try right after subscribing only closes the gap before the subscription:
/// it is left out when the channel was subscribed already before the first try and no
/// message came since, as then every release after that try wakes a waiter. A spinning
/// waiter ([`Wake::Spin`]) never subscribes: it sleeps by its back-off (at most until the
/// holder's lease runs out) between attempts, as Redisson's spin lock.
///
/// `attempt` runs one acquire script; it must leave no hold behind when it is dropped
/// mid-flight (see [`InFlight`](crate::core::attempt::InFlight)). Returns `Ok(None)` when `deadline` passed.
///
/// Local waiters are woken in the order they began to wait, and keep their place until they
/// get the lock (see [`Waiters`](crate::topology::waiters::Waiters)). A wake-up is never lost: a waiter
/// woken by a message makes one more attempt even when its deadline has passed meanwhile,
/// and one that ends without an attempt after the wake-up (an error, the future dropped)
/// passes it on to another local waiter.
///
/// Errors of the first attempt are returned as they are (Redis down, wrong type). Once
/// waiting, transient errors are retried with back-off until Redis has been unreachable for
/// `outage_limit`; this is what lets a waiter ride out a Redis restart. On a single server
/// the outage counts from when the connection was lost, and the loss wakes the waiter.
pub(crate) async fn acquire<T, F, Fut>(
    engine: &Engine,
    wake: Wake<'_>,
    deadline: Option<Instant>,
    attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    acquire_or_handed(
        engine,
        (wake, true),
        deadline,
        attempt,
        std::future::pending,
    )
    .await
}

/// [`acquire`], for a waiter that may also be handed the hold (see
/// [`hand_off`](crate::core::hand_off)): once the first attempt found the lock busy, the
/// future `handed` makes completes with a hold handed over, which ends the wait. Whichever
/// comes first wins; the other is dropped, which undoes it (an attempt in flight, or a hold
/// handed over as the wait ended).
///
/// `look_first` false: the waiter makes no first attempt and waits at once, behind the
/// waiters already in line, which the holder's release wakes or hands the lock to. Only for
/// a waiter that cannot hold the lock already (no re-entry), while others of its client wait.
pub(crate) async fn acquire_or_handed<T, F, Fut, H>(
    engine: &Engine,
    (wake, look_first): (Wake<'_>, bool),
    deadline: Option<Instant>,
    mut attempt: F,
    handed: impl FnOnce() -> H,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
    H: Future<Output = T>,
{
    let looked = match wake {
        Wake::Messages(..) => Some(engine.pubsub().now()),
        Wake::Spin(_) => None,
    };
    // Not looked at, the holder's lease is unknown: the wait is bounded by the poll instead.
    let ttl = match look_first {
        true => match attempt().await? {
            Attempt::Acquired(hold) => return Ok(Some(hold)),
            Attempt::Busy { ttl } => ttl,
        },
        false => None,
    };
    let handed = handed();
    // The waiting state (subscription, timers, registrations) is kilobytes: boxed, so that
    // an acquisition that needs no wait neither carries nor moves it.
    Box::pin(async move {
        tokio::select! {
            biased;
            hold = handed => Ok(Some(hold)),
            waited = wait(engine, wake, deadline, attempt, looked, ttl) => waited,
        }
    })
    .await
}

/// What a synchronizer (a semaphore, a latch) waits for: one `attempt` for [`Wait::Once`],
/// else [`acquire`] woken by the messages of `channel`, read by `messages`, until the wait's
/// deadline. Runs in an `acquire` span of `name` and `kind` and counts its outcome, as a
/// lock's acquisition does (`kind` labels the metrics). `Ok(None)` when the wait ran out.
pub(crate) async fn synchronizer<T, F, Fut>(
    engine: &Engine,
    (name, kind): (&str, &'static str),
    (channel, messages): (&str, Messages),
    wait: Wait,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let since = observe::Since::now();
    let waited = async {
        engine.check_open()?;
        let deadline = match wait {
            Wait::Once => {
                return Ok(match attempt().await? {
                    Attempt::Acquired(taken) => Some(taken),
                    Attempt::Busy { .. } => None,
                })
            }
            Wait::Until(deadline, _) => Some(deadline),
            Wait::Forever => None,
        };
        acquire(engine, Wake::Messages(channel, messages), deadline, attempt).await
    };
    let outcome = waited.instrument(observe::acquire_span(name, kind)).await;
    observe::acquired(kind, since, &outcome);
    outcome
}

/// The rest of [`acquire`] after a first attempt, made after the pub/sub moment `looked`
/// (`None` when spinning), found the lock busy for `ttl`.
async fn wait<T, F, Fut>(
    engine: &Engine,
    wake: Wake<'_>,
    deadline: Option<Instant>,
    mut attempt: F,
    mut looked: Option<Moment>,
    ttl: Option<Duration>,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let _waiting = observe::Waiting::start();
    let (channel, messages, mut spin) = match wake {
        Wake::Messages(channel, messages) => (channel, messages, None),
        // Only named in log lines: a spinning waiter never subscribes.
        Wake::Spin(backoff) => (
            "(spinning)",
            unlock_messages as Messages,
            Some(backoff.delays()),
        ),
    };
    if let Some(delays) = spin.as_mut() {
        // Spinning: try, sleep, try, ... (no retry in between to close a subscribe gap).
        tokio::time::sleep(spin_pause(delays, ttl, deadline)).await;
    }
    let outage_limit = engine.settings().watchdog_timeout;
    let mut subscription: Option<Subscription> = None;
    // This waiter's place among the channel's local waiters, held from its first attempt
    // after subscribing: a waiter woken first is never sent to the back by losing a race.
    let mut ticket: Option<Ticket> = None;
    let mut outage: Option<(Instant, Duration)> = None;
    // The busy answer of the last attempt, while it still stands: no release can have
    // happened since without a message that wakes this waiter.
    let mut standing: Option<Option<Duration>> = None;
    loop {
        // Past the deadline, only a wake-up not yet answered earns a last attempt.
        let last = deadline.is_some_and(|d| Instant::now() >= d);
        if last && !ticket.as_ref().is_some_and(Ticket::is_pending) {
            return Ok(None);
        }
        engine.check_open()?;
        if subscription.is_none() && spin.is_none() {
            let subscribing = engine.pubsub().subscribe(channel, messages);
            let subscribed = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, subscribing).await {
                    Ok(result) => result,
                    Err(_) => return Ok(None),
                },
                None => subscribing.await,
            };
            match subscribed {
                Ok(sub) => {
                    // Joined before trying, so a message sent in between wakes this waiter.
                    let (joined, missed) = sub.waiters().join(looked.take());
                    if !missed {
                        // The channel was subscribed before the first attempt: a release
                        // since then sends a message that wakes this waiter or one ahead.
                        standing = Some(ttl);
                    }
                    ticket = Some(joined);
                    subscription = Some(sub);
                    // A shutdown marks the client closed before it wakes every waiter: one
                    // that woke the line before this waiter joined is seen here.
                    engine.check_open()?;
                }
                Err(Error::Closed) => return Err(Error::Closed),
                // Waiting still works without messages, only slower: poll and retry later.
                Err(error) => tracing::debug!(%error, channel, "subscribing failed; polling"),
            }
        }

        let ttl = match standing.take() {
            Some(ttl) => ttl,
            None => {
                // Only the first attempt's look is known to the channel's line.
                looked = None;
                if let Some(ticket) = &ticket {
                    ticket.start_attempt();
                }
                let attempted = attempt().await;
                if let (Ok(_), Some(ticket)) = (&attempted, &ticket) {
                    // The lock was looked at after every wake-up taken so far.
                    ticket.attempt_done();
                }
                match attempted {
                    Ok(Attempt::Acquired(hold)) => return Ok(Some(hold)),
                    Ok(Attempt::Busy { ttl }) => {
                        if last {
                            return Ok(None);
                        }
                        outage = None;
                        ttl
                    }
                    // The last attempt failed: the wake-up goes on to another waiter.
                    Err(error) if error.is_retryable() && last => return Ok(None),
                    Err(error) if error.is_retryable() => {
                        // Counted from when the server went away, where the link saw it.
                        let now = Instant::now();
                        let began = engine.link().down_since().map_or(now, |at| at.min(now));
                        let (since, backoff) = outage.get_or_insert((began, OUTAGE_BACKOFF.0));
                        if since.elapsed() >= outage_limit {
                            return Err(error);
                        }
                        tracing::debug!(%error, channel, "attempt failed while waiting; retrying");
                        let pause = *backoff;
                        *backoff = (*backoff * 2).min(OUTAGE_BACKOFF.1);
                        Some(pause)
                    }
                    Err(error) => return Err(error),
                }
            }
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
        // A lost connection wakes the waiter too: its next attempt starts the outage's
        // count, which then runs from when the server went away.
        let lost = engine.link().lost();
        match &ticket {
            Some(ticket) => {
                let _ = tokio::time::timeout(wait, async {
                    tokio::select! {
                        _ = ticket.woken() => {}
                        _ = lost => {}
                    }
                })
                .await;
            }
            None => {
                let _ = tokio::time::timeout(wait, lost).await;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_strategy_is_pub_sub() {
        assert_eq!(WaitStrategy::default(), WaitStrategy::PubSub);
    }
}
