//! What every guard shares: the lease policy, the link to the watchdog, and lease-lost
//! signalling.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::{BoxFuture, Engine};
use crate::error::{Error, Result};
use crate::watchdog::{millis, HoldKey, Leaving, LostSignal, Ticket};

/// How long a hold lasts without being released.
///
/// # Default
/// [`Lease::Watchdog`], as Redisson's `lock()` without a lease time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lease {
    /// The hold gets the client's `watchdog_timeout` (30 s by default) and the client's
    /// watchdog renews it every third of that for as long as the guard lives. If the process
    /// dies, the lock frees itself within `watchdog_timeout`.
    #[default]
    Watchdog,
    /// The hold expires after this long, unless released earlier. It is never renewed:
    /// after it runs out another owner may take the lock while this one still works.
    Fixed(Duration),
}

impl Lease {
    /// The longest fixed lease: 2^53 − 1 ms (about 285,000 years), the largest whole number
    /// the scripts handle exactly. Use [`Lease::Watchdog`] to hold without a time limit.
    pub const MAX_FIXED: Duration = Duration::from_millis((1 << 53) - 1);

    /// The lease in milliseconds as the scripts take it.
    pub(crate) fn millis(self, engine: &Engine) -> Result<i64> {
        match self {
            Lease::Watchdog => Ok(millis(engine.settings.watchdog_timeout)),
            Lease::Fixed(lease) if lease < Duration::from_millis(1) => Err(Error::invalid(
                "a fixed lease must be at least one millisecond",
            )),
            Lease::Fixed(lease) if lease > Lease::MAX_FIXED => Err(Error::invalid(
                "a fixed lease must be at most Lease::MAX_FIXED (2^53 - 1 ms); \
                 use Lease::Watchdog to hold without a time limit",
            )),
            Lease::Fixed(lease) => Ok(millis(lease)),
        }
    }
}

/// One guard's part in its hold: its entry in the client's registry of holds (renewed by
/// the watchdog, or with a fixed lease), and the news that the hold is lost.
pub(crate) struct Renewal {
    engine: Arc<Engine>,
    /// `None` once the guard gave up its part (released or detached).
    ticket: Option<Ticket>,
    lost: LostSignal,
    /// When a fixed lease ends; `None` for a watchdog lease.
    ends: Option<Instant>,
}

impl Renewal {
    /// Records a hold acquired by a command sent at `sent_at`; `new_hold` when the script
    /// found no hold of the owner (not a re-entry).
    pub(crate) fn start(
        engine: &Arc<Engine>,
        lease: Lease,
        hold: HoldKey,
        sent_at: Instant,
        new_hold: bool,
    ) -> Renewal {
        let ends = match lease {
            Lease::Watchdog => None,
            Lease::Fixed(lease) => Some(sent_at.checked_add(lease).unwrap_or_else(far_future)),
        };
        let (ticket, lost) = engine.watchdog.register(hold, sent_at, ends, new_hold);
        Renewal {
            engine: engine.clone(),
            ticket: Some(ticket),
            lost,
            ends,
        }
    }

    /// Gives up this guard's part (renewal stops with the hold's last renewed guard), first
    /// thing in unlock and drop. `None` when the hold is already known to be lost, or the
    /// part was given up before: the release must then touch nothing, since the owner may
    /// hold the lock again by a newer hold.
    pub(crate) fn finish(&mut self) -> Option<Leaving> {
        let ticket = self.ticket.take()?;
        self.engine.watchdog.leave(ticket)
    }

    /// Keeps the hold (and its renewal) after the guard is gone: the registration stays
    /// until [`Lock::unlock`](crate::Lock::unlock) releases the hold.
    pub(crate) fn detach(&mut self) {
        drop(self.ticket.take());
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
            || self.lost.has_changed().is_err()
            || self.ends.is_some_and(|ends| Instant::now() >= ends)
    }

    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let (mut lost, ends) = (self.lost.clone(), self.ends);
        async move {
            // A closed channel means the registration ended for good: the lease will run out.
            let signalled = async move { drop(lost.wait_for(|lost| *lost).await) };
            match ends {
                Some(ends) => tokio::select! {
                    _ = signalled => {}
                    _ = tokio::time::sleep_until(ends) => {}
                },
                None => signalled.await,
            }
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// A release that completes even when its caller stops waiting: dropped before it is done
/// (or before its first poll), it finishes on the runtime, as a dropped guard's release does.
pub(crate) struct Finishing<T: Send + 'static> {
    release: Option<BoxFuture<T>>,
}

impl<T: Send + 'static> Finishing<T> {
    pub(crate) fn new(release: impl Future<Output = T> + Send + 'static) -> Finishing<T> {
        Finishing {
            release: Some(Box::pin(release)),
        }
    }
}

impl<T: Send + 'static> Future for Finishing<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let release = self
            .release
            .as_mut()
            .expect("Finishing polled after completion");
        let done = std::task::ready!(release.as_mut().poll(cx));
        self.release = None;
        Poll::Ready(done)
    }
}

impl<T: Send + 'static> Drop for Finishing<T> {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release_in_background(async move { drop(release.await) });
        }
    }
}

/// Spawns `release` when a guard is dropped without `unlock`.
pub(crate) fn release_in_background(release: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(release)),
        Err(_) => tracing::warn!(
            "guard dropped outside a Tokio runtime; its hold expires with its lease instead"
        ),
    }
}
