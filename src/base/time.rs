//! Time as the scripts and the waits count it: whole milliseconds, the wall clock of the
//! fair scripts, and instants on the monotonic clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::base::error::{Error, Result};

/// A duration in whole milliseconds, as the scripts take it (saturating).
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The caller's wall clock in epoch ms: the `now` of the fair scripts (protocol §4.1).
pub(crate) fn epoch_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// The instant a wait of `wait` from now ends, or an error when it cannot be represented.
pub(crate) fn deadline_after(wait: Duration) -> Result<Instant> {
    Instant::now().checked_add(wait).ok_or_else(|| {
        Error::invalid(
            "wait is too long to represent; to wait without a limit, call the form without a \
             wait (lock(), acquire(), wait())",
        )
    })
}

/// How much sooner than a lease's end its holder counts it as ended. `lease_lost()` sleeps
/// on Tokio's timer, which counts whole milliseconds and fires at the first tick after the
/// instant asked for, and the woken task needs a moment more: asleep until the very end, it
/// could complete after the key expired on the server and another owner took the lock.
pub(crate) const TIMER_MARGIN: Duration = Duration::from_millis(5);

/// When the holder counts a lease of `lease` that started at `start` as ended:
/// [`TIMER_MARGIN`] before its end (a lease shorter than that has ended from the start). A
/// lease too long for the clock ends a century from now, which no process outlives.
pub(crate) fn lease_end(start: Instant, lease: Duration) -> Instant {
    match start.checked_add(lease) {
        Some(end) => end.checked_sub(TIMER_MARGIN).unwrap_or(start),
        None => Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600),
    }
}
