//! What every guard shares: the lease policy, the link to the watchdog, and lease-lost
//! signalling.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::watchdog::{millis, HoldKey, LostSignal, Ticket};

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
    /// The lease in milliseconds as the scripts take it.
    pub(crate) fn millis(self, engine: &Engine) -> Result<i64> {
        match self {
            Lease::Watchdog => Ok(millis(engine.settings.watchdog_timeout)),
            Lease::Fixed(lease) if lease < Duration::from_millis(1) => Err(Error::invalid(
                "a fixed lease must be at least one millisecond",
            )),
            Lease::Fixed(lease) => i64::try_from(lease.as_millis()).map_err(|_| {
                Error::invalid("the fixed lease is too long to express in milliseconds")
            }),
        }
    }
}

/// One guard's view of its lease: renewed by the watchdog, or fixed.
pub(crate) enum Renewal {
    Watchdog {
        engine: Arc<Engine>,
        ticket: Option<Ticket>,
        lost: LostSignal,
    },
    Fixed {
        expires: Instant,
    },
}

impl Renewal {
    /// Starts what `lease` needs for a hold acquired by a command sent at `sent_at`.
    pub(crate) fn start(
        engine: &Arc<Engine>,
        lease: Lease,
        hold: HoldKey,
        sent_at: Instant,
    ) -> Renewal {
        match lease {
            Lease::Watchdog => {
                let (ticket, lost) = engine.watchdog.register(hold, sent_at);
                Renewal::Watchdog {
                    engine: engine.clone(),
                    ticket: Some(ticket),
                    lost,
                }
            }
            Lease::Fixed(lease) => Renewal::Fixed {
                expires: sent_at.checked_add(lease).unwrap_or_else(far_future),
            },
        }
    }

    /// Stops renewing (idempotent). Called first thing by unlock and drop.
    pub(crate) fn stop(&mut self) {
        if let Renewal::Watchdog { engine, ticket, .. } = self {
            if let Some(ticket) = ticket.take() {
                engine.watchdog.deregister(ticket);
            }
        }
    }

    /// Keeps renewing after the guard is gone (a detached hold).
    pub(crate) fn detach(&mut self) {
        if let Renewal::Watchdog { ticket, .. } = self {
            // The registration stays until Lock::unlock releases the hold.
            drop(ticket.take());
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Renewal::Watchdog { lost, .. } => *lost.borrow() || lost.has_changed().is_err(),
            Renewal::Fixed { expires } => Instant::now() >= *expires,
        }
    }

    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let signal = match self {
            Renewal::Watchdog { lost, .. } => Ok(lost.clone()),
            Renewal::Fixed { expires } => Err(*expires),
        };
        async move {
            match signal {
                // A closed channel means renewal ended for good: the lease will run out.
                Ok(mut lost) => drop(lost.wait_for(|lost| *lost).await),
                Err(expires) => tokio::time::sleep_until(expires).await,
            }
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
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
