//! What operators see of the locks: `tracing` spans around acquiring, waiting and releasing,
//! metrics through the `metrics` facade (with the `metrics` feature), and the name this
//! client gives its command connection. Call sites elsewhere take a line or two; without the
//! feature the metric calls compile to nothing and [`Since`] is empty.
//!
//! The names and labels are listed in `docs/operations.md`; `kind` is the lock kind's name
//! (what each kind's protocol names itself). Lock names are never labels (there
//! are too many); they are span fields. This module sits below every other: it takes names
//! and kinds as plain strings.

#[cfg(feature = "metrics")]
use crate::base::error::Error;
use crate::base::error::Result;

/// The metric names; `docs/operations.md` lists them with their labels.
#[cfg(feature = "metrics")]
mod name {
    /// Counter `{kind, outcome}`: acquisitions by outcome (`acquired`, `busy`, `error`).
    pub(super) const ACQUISITIONS: &str = "redisson_lock_acquisitions_total";
    /// Histogram `{kind, outcome}`, seconds: from the call to its outcome.
    pub(super) const WAIT_SECONDS: &str = "redisson_lock_wait_seconds";
    /// Histogram `{kind}`, seconds: from the acquisition to the guard's release (unlock or drop).
    pub(super) const HOLD_SECONDS: &str = "redisson_lock_hold_seconds";
    /// Gauge: waiters of this process now waiting (after a first attempt found the lock busy).
    pub(super) const WAITERS: &str = "redisson_lock_waiters";
    /// Counter: holds the watchdog renewed.
    pub(super) const RENEWALS: &str = "redisson_lock_renewals_total";
    /// Counter: renewal scripts that failed (Redis error or unexpected reply); retried.
    pub(super) const RENEWAL_FAILURES: &str = "redisson_lock_renewal_failures_total";
    /// Counter `{reason}`: holds found lost (`gone`, `unreachable`, `replaced`).
    pub(super) const LEASES_LOST: &str = "redisson_lock_leases_lost_total";
    /// Counter `{kind}`: release scripts sent again after their reply was lost.
    pub(super) const RELEASES_RESENT: &str = "redisson_lock_releases_resent_total";
    /// Counter `{kind}`: last releases that gave the lock to a waiting task of their client.
    pub(super) const HAND_OFFS: &str = "redisson_lock_hand_offs_total";
    /// Counter `{kind, error}`: releases that failed (`not_held`, `redis`, `closed`, `other`).
    pub(super) const UNLOCK_ERRORS: &str = "redisson_lock_unlock_errors_total";
    /// Counter: reconnects of the subscriber connection.
    pub(super) const PUBSUB_RECONNECTS: &str = "redisson_lock_pubsub_reconnects_total";
    /// Counter: channels subscribed again after a reconnect.
    pub(super) const RESUBSCRIPTIONS: &str = "redisson_lock_pubsub_resubscriptions_total";
    /// Counter `{connection}`: connection tasks of the driver started again after they ended
    /// (`commands`, `scripts`, `subscriber`).
    pub(super) const CONNECTION_RESTARTS: &str = "redisson_lock_connection_restarts_total";
}

/// When something began, for a duration metric; empty without the `metrics` feature.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Since {
    #[cfg(feature = "metrics")]
    at: std::time::Instant,
}

impl Since {
    #[inline]
    pub(crate) fn now() -> Since {
        Since {
            #[cfg(feature = "metrics")]
            at: std::time::Instant::now(),
        }
    }
}

/// The `acquire` span of one acquisition of the lock `name` of kind `kind`; the caller
/// runs the acquisition in it (`.instrument(span)`) and then reports with [`acquired`].
/// (Not a wrapper taking the future: an `async fn` keeps its argument beside the future
/// it awaits, which doubles the size of every acquisition's future.)
pub(crate) fn acquire_span(name: &str, kind: &'static str) -> tracing::Span {
    tracing::info_span!("acquire", lock = name, kind)
}

/// Counts the outcome of an acquisition of a lock of kind `kind` begun at `since`, and
/// how long it took.
#[inline]
pub(crate) fn acquired<T>(kind: &'static str, since: Since, outcome: &Result<Option<T>>) {
    #[cfg(feature = "metrics")]
    {
        let result = match outcome {
            Ok(Some(_)) => "acquired",
            Ok(None) => "busy",
            Err(_) => "error",
        };
        let labels = [("kind", kind), ("outcome", result)];
        metrics::counter!(name::ACQUISITIONS, &labels).increment(1);
        metrics::histogram!(name::WAIT_SECONDS, &labels).record(since.at.elapsed());
    }
    let _ = (kind, since, outcome);
}

/// A waiter between its first attempt and its outcome: a `wait` span (a child of the
/// `acquire` span) and one in the waiters gauge, for as long as it lives.
pub(crate) struct Waiting {
    _span: tracing::Span,
}

impl Waiting {
    pub(crate) fn start() -> Waiting {
        #[cfg(feature = "metrics")]
        metrics::gauge!(name::WAITERS).increment(1.0);
        Waiting {
            _span: tracing::info_span!("wait"),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(name::WAITERS).decrement(1.0);
    }
}

/// A guard of a lock of kind `kind` taken at `since` gives up its hold (unlock or drop).
#[inline]
pub(crate) fn held(kind: &'static str, since: Since) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(name::HOLD_SECONDS, "kind" => kind).record(since.at.elapsed());
    let _ = (kind, since);
}

/// The `release` span of one release of the lock `name` of kind `kind` (its script,
/// resends included); the caller runs the release in it and then reports with
/// [`released`].
pub(crate) fn release_span(name: &str, kind: &'static str) -> tracing::Span {
    tracing::info_span!("release", lock = name, kind)
}

/// Counts a failed release of a lock of kind `kind`: an error, or a reply `not_held` says
/// held nothing.
#[inline]
pub(crate) fn released<R>(kind: &'static str, released: &Result<R>, not_held: impl Fn(&R) -> bool) {
    #[cfg(feature = "metrics")]
    {
        let error = match released {
            Ok(reply) if not_held(reply) => Some("not_held"),
            Ok(_) => None,
            Err(Error::Redis(_)) => Some("redis"),
            Err(Error::Closed) => Some("closed"),
            Err(_) => Some("other"),
        };
        if let Some(error) = error {
            let labels = [("kind", kind), ("error", error)];
            metrics::counter!(name::UNLOCK_ERRORS, &labels).increment(1);
        }
    }
    let _ = (kind, released, not_held);
}

/// A release of a lock of kind `kind` is sent again.
#[inline]
pub(crate) fn release_resent(kind: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(name::RELEASES_RESENT, "kind" => kind).increment(1);
    let _ = kind;
}

/// A last release of a lock of kind `kind` gave the lock to a waiting task of its client.
#[inline]
pub(crate) fn handed_off(kind: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(name::HAND_OFFS, "kind" => kind).increment(1);
    let _ = kind;
}

/// The watchdog renewed `holds` holds.
#[inline]
pub(crate) fn renewed(holds: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!(name::RENEWALS).increment(holds as u64);
    let _ = holds;
}

/// A renewal script failed.
#[inline]
pub(crate) fn renewal_failed() {
    #[cfg(feature = "metrics")]
    metrics::counter!(name::RENEWAL_FAILURES).increment(1);
}

/// Why a hold was found lost.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lost {
    /// A renewal found its field gone (expired, force-unlocked, data lost).
    Gone,
    /// Redis could not be reached before its lease ran out.
    Unreachable,
    /// The owner's new acquisition found no hold: the recorded one had been lost.
    Replaced,
}

/// A hold was found lost.
#[inline]
pub(crate) fn lease_lost(why: Lost) {
    #[cfg(feature = "metrics")]
    {
        let reason = match why {
            Lost::Gone => "gone",
            Lost::Unreachable => "unreachable",
            Lost::Replaced => "replaced",
        };
        metrics::counter!(name::LEASES_LOST, "reason" => reason).increment(1);
    }
    let _ = why;
}

/// The subscriber connection came back; `channels` are being subscribed again.
#[inline]
pub(crate) fn pubsub_reconnected(channels: usize) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(name::PUBSUB_RECONNECTS).increment(1);
        metrics::counter!(name::RESUBSCRIPTIONS).increment(channels as u64);
    }
    let _ = channels;
}

/// The driver's connection task of `connection` (`commands`, `scripts` or `subscriber`)
/// ended and was started again.
#[inline]
pub(crate) fn connection_restarted(connection: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(name::CONNECTION_RESTARTS, "connection" => connection).increment(1);
    let _ = connection;
}

/// A sharded subscription followed its slot to a new master.
#[inline]
pub(crate) fn resubscribed_after_slot_move() {
    #[cfg(feature = "metrics")]
    metrics::counter!(name::RESUBSCRIPTIONS).increment(1);
}
