//! Time as the scripts and the waits count it: whole milliseconds, the wall clock of the
//! fair scripts, and instants on the monotonic clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::error::{Error, Result};

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
        Error::invalid("wait is too long to represent; use lock() to wait without a limit")
    })
}

/// When a lease of `lease` that started at `start` ends; a lease too long for the clock
/// ends a century from now, which no process outlives.
pub(crate) fn lease_end(start: Instant, lease: Duration) -> Instant {
    start
        .checked_add(lease)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600))
}
