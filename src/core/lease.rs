//! The lease policy of the holds a handle takes.

use std::fmt;
use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::base::time::millis;
use crate::engine::Engine;

/// How long a hold lasts without being released: renewed by the watchdog, or a fixed
/// time. A `Lease` is checked when it is made, so every value is one the scripts accept.
///
/// # Default
/// [`Lease::WATCHDOG`], as Redisson's `lock()` without a lease time.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Lease {
    /// `None` for the watchdog lease.
    fixed: Option<Duration>,
}

impl Lease {
    /// The hold gets the client's `watchdog_timeout` (30 s by default) and the client's
    /// watchdog renews it every third of that for as long as the guard lives. If the process
    /// dies, the lock frees itself within `watchdog_timeout`.
    pub const WATCHDOG: Lease = Lease { fixed: None };

    /// The longest fixed lease: 2^53 − 1 ms (about 285,000 years), the largest whole number
    /// the scripts handle exactly. Use [`Lease::WATCHDOG`] to hold without a time limit.
    pub const MAX_FIXED: Duration = Duration::from_millis((1 << 53) - 1);

    /// A hold that expires after `lease` unless released earlier (Redisson's `leaseTime`).
    /// It is never renewed: after it runs out another owner may take the lock while this one
    /// still works. Counted in whole milliseconds. Its guard counts it as ended 5 ms early
    /// (see [`LockGuard::lease_lost`](crate::LockGuard::lease_lost)); a lease that short is lost as soon as it is taken.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `lease` is under one millisecond or longer than
    /// [`MAX_FIXED`](Lease::MAX_FIXED).
    pub fn fixed(lease: Duration) -> Result<Lease> {
        if lease < Duration::from_millis(1) {
            Err(Error::invalid(
                "a fixed lease must be at least one millisecond",
            ))
        } else if lease > Lease::MAX_FIXED {
            Err(Error::invalid(
                "a fixed lease must be at most Lease::MAX_FIXED (2^53 - 1 ms); \
                 use Lease::WATCHDOG to hold without a time limit",
            ))
        } else {
            Ok(Lease { fixed: Some(lease) })
        }
    }

    /// The fixed lease's duration; `None` for [`Lease::WATCHDOG`].
    pub fn fixed_duration(self) -> Option<Duration> {
        self.fixed
    }

    /// The lease in milliseconds as the scripts take it.
    pub(crate) fn millis(self, engine: &Engine) -> i64 {
        millis(self.fixed.unwrap_or(engine.settings().watchdog_timeout))
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fixed {
            None => f.write_str("Lease::WATCHDOG"),
            Some(lease) => write!(f, "Lease::fixed({lease:?})"),
        }
    }
}
