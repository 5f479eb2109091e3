//! Every pause this crate takes between two tries of anything (a spinning waiter's
//! back-off, a queued waiter's pacing, a waiter's polls and outage back-off, a release's
//! resends, the watchdog's retries, a multi-lock's rounds, a script refused during a slot's
//! migration, a stopped connection task's restarts) and the one random generator
//! their jitter uses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The sleeps between the attempts of a spinning waiter, as Redisson's `LockOptions`
/// back-offs. The sequence starts over with each waiting call.
///
/// # Default
/// [`Backoff::exponential()`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exponential {
        initial_ms: u64,
        max_ms: u64,
        multiplier: u64,
    },
    Constant {
        delay_ms: u64,
    },
}

impl Backoff {
    /// Redisson's constant back-off delay.
    pub const DEFAULT_CONSTANT_DELAY: Duration = Duration::from_millis(64);

    /// Redisson's default back-off (`ExponentialBackOff`): 1 ms first, then each sleep is the
    /// previous one times 2 plus a random jitter of `[0, n)` ms after the `n`-th failed
    /// attempt, at most 128 ms. So roughly 1, 2, 4, 8, …, 128, 128, … ms.
    pub fn exponential() -> Backoff {
        Backoff::exponential_with(Duration::from_millis(1), Duration::from_millis(128), 2)
    }

    /// An exponential back-off from `initial` up to `max`, multiplied by `multiplier` each
    /// step, plus the same jitter as [`exponential`](Backoff::exponential). Durations are
    /// counted in whole milliseconds, at least 1 ms (`max` at least `initial`); a
    /// `multiplier` of 0 counts as 1 (a constant back-off with jitter).
    pub fn exponential_with(initial: Duration, max: Duration, multiplier: u32) -> Backoff {
        let initial_ms = whole_millis(initial);
        Backoff {
            kind: Kind::Exponential {
                initial_ms,
                max_ms: whole_millis(max).max(initial_ms),
                multiplier: u64::from(multiplier.max(1)),
            },
        }
    }

    /// The same sleep every time, without jitter (Redisson's `ConstantBackOff`, whose
    /// default is [`DEFAULT_CONSTANT_DELAY`](Backoff::DEFAULT_CONSTANT_DELAY), 64 ms).
    /// Counted in whole milliseconds, at least 1 ms.
    pub fn constant(delay: Duration) -> Backoff {
        Backoff {
            kind: Kind::Constant {
                delay_ms: whole_millis(delay),
            },
        }
    }

    /// A fresh sequence of sleeps.
    pub(crate) fn delays(self) -> Delays {
        let next_ms = match self.kind {
            Kind::Exponential { initial_ms, .. } => initial_ms,
            Kind::Constant { delay_ms } => delay_ms,
        };
        Delays {
            backoff: self,
            next_ms,
            failures: 0,
            rng: XorShift::seeded(),
        }
    }
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::exponential()
    }
}

fn whole_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// One waiting call's sequence of sleeps.
#[derive(Debug)]
pub(crate) struct Delays {
    backoff: Backoff,
    next_ms: u64,
    failures: u64,
    rng: XorShift,
}

impl Delays {
    /// The sleep after the next failed attempt. Redisson's recurrence: the first sleep is
    /// the initial delay; after the `n`-th one the next is `min(max, sleep * multiplier +
    /// random[0, n))`, and once at `max` it stays there.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let current = self.next_ms;
        if let Kind::Exponential {
            max_ms, multiplier, ..
        } = self.backoff.kind
        {
            if current < max_ms {
                self.failures += 1;
                let jitter = self.rng.below(self.failures);
                self.next_ms = current
                    .saturating_mul(multiplier)
                    .saturating_add(jitter)
                    .min(max_ms);
            }
        }
        Duration::from_millis(current)
    }
}

/// A tiny xorshift generator for the jitter: no dependency, seeded from the clock and a
/// counter, so that waiters started together do not share a sequence.
#[derive(Debug)]
struct XorShift(u64);

impl XorShift {
    fn seeded() -> XorShift {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        // splitmix64 of the two, so that close seeds give unrelated states (never zero).
        let mut z = (nanos ^ count.rotate_left(32)).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        XorShift((z ^ (z >> 31)) | 1)
    }

    /// A number in `[0, bound)`; 0 when `bound` is 0 or 1.
    fn below(&mut self, bound: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        if bound <= 1 {
            0
        } else {
            x % bound
        }
    }
}

/// How long a waiter sleeps between attempts when no unlock message can reach it (the key
/// has no TTL, or subscribing failed).
pub(crate) const POLL_WITHOUT_MESSAGES: Duration = Duration::from_millis(500);
/// Back-off between attempts while Redis is unreachable during a wait.
pub(crate) const OUTAGE_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_secs(1));

/// First and longest pause between two attempts of a queued waiter whose reply gave no
/// time to wait (0 or negative: the lock is free but another waiter is first in line, or
/// the estimate is unknown). Java retries at once, over and over (protocol §4.8); a pause
/// keeps the order, since the first waiter is woken by its own message anyway.
const PACE: (u64, u64) = (4, 64);

/// Shapes a queued waiter's replies into its sleeps between attempts: a busy reply without
/// a positive wait becomes a doubling, bounded pause, and no sleep is longer than half the
/// waiter's wait in the queue. Looking again within half its wait keeps a waiter's place:
/// its deadline is refreshed whenever it looks while first in line (see
/// `lua/fair_acquire.lua`), and a waiter that becomes first in line without being woken
/// (the one before it took the lock) still looks again well before its deadline, whatever
/// the reply said (a holder's lease can be longer than the wait).
pub(crate) struct Pace {
    next_ms: AtomicU64,
    longest: Duration,
}

impl Pace {
    /// `wait_ms`: the waiter's wait in the queue.
    pub(crate) fn new(wait_ms: i64) -> Pace {
        Pace {
            next_ms: AtomicU64::new(PACE.0),
            longest: Duration::from_millis((wait_ms / 2).max(1) as u64),
        }
    }

    /// The sleep after a busy attempt whose reply said to wait `ttl`.
    pub(crate) fn sleep(&self, ttl: Option<Duration>) -> Duration {
        match ttl {
            Some(ttl) if !ttl.is_zero() => {
                self.next_ms.store(PACE.0, Ordering::Relaxed);
                ttl.min(self.longest)
            }
            _ => {
                let pause = self.next_ms.load(Ordering::Relaxed);
                self.next_ms
                    .store((pause * 2).min(PACE.1), Ordering::Relaxed);
                Duration::from_millis(pause).min(self.longest)
            }
        }
    }
}

/// First and longest pause before a script refused with TRYAGAIN (a slot's migration keeps
/// its keys apart) is sent again; doubled after each refusal.
pub(crate) const TRY_AGAIN_PAUSE: (Duration, Duration) =
    (Duration::from_millis(5), Duration::from_millis(100));

/// First and longest pause before a stopped connection task of the driver is started again;
/// doubled while the restarted task keeps stopping (a server that refuses connections ends
/// a fresh task at once).
pub(crate) const RESTART_PAUSE: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_secs(2));

/// `pause` doubled, at most `longest`.
pub(crate) fn doubled(pause: Duration, longest: Duration) -> Duration {
    (pause * 2).min(longest)
}

/// How many times a release is sent when its reply is lost (the unlock latch makes
/// resending safe).
pub(crate) const RELEASE_SENDS: u32 = 3;

/// The pause before resending a release for the `sent`-th time.
pub(crate) fn release_resend_pause(sent: u32) -> Duration {
    Duration::from_millis(100 * u64::from(sent))
}

/// The pause before sending a fair waiter's queue exit again after its `sent`-th send failed.
pub(crate) fn queue_exit_pause(sent: u32) -> Duration {
    Duration::from_millis(100 * u64::from(sent)).min(Duration::from_secs(1))
}

/// When the watchdog tries again after a failed renewal of a lease that ends at `expires`:
/// halfway there, but not sooner than 50 ms from `now`.
pub(crate) fn renewal_retry(now: Instant, expires: Instant) -> Instant {
    let halfway = now + expires.saturating_duration_since(now) / 2;
    halfway.max(now + Duration::from_millis(50))
}

/// The pause before a multi-lock's next round after one in which a member failed with an
/// error or no answer.
pub(crate) fn failed_round_pause() -> Duration {
    between(Duration::from_millis(20), Duration::from_millis(60))
}

/// A duration drawn from `[low, high)` (the multi-lock's pause between rounds).
pub(crate) fn between(low: Duration, high: Duration) -> Duration {
    let span = u64::try_from(high.saturating_sub(low).as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    low + Duration::from_millis(XorShift::seeded().below(span))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(delays: &mut Delays) -> u64 {
        delays.next_delay().as_millis() as u64
    }

    #[test]
    fn exponential_defaults_double_with_bounded_jitter_up_to_the_cap() {
        for _ in 0..200 {
            let mut delays = Backoff::exponential().delays();
            let mut previous = ms(&mut delays);
            assert_eq!(previous, 1);
            // Step n (n = 1, 2, ...) adds a jitter in [0, n).
            for n in 1..=12u64 {
                let next = ms(&mut delays);
                let low = (previous * 2).min(128);
                let high = (previous * 2 + n - 1).min(128);
                assert!(
                    (low..=high).contains(&next),
                    "step {n}: {next} not in {low}..={high} after {previous}"
                );
                previous = next;
            }
            assert_eq!(previous, 128);
            assert!((0..10).all(|_| ms(&mut delays) == 128));
        }
    }

    #[test]
    fn exponential_without_jitter_is_powers_of_two() {
        // The second sleep has a jitter in [0, 1), so it is always exactly 2.
        let mut delays = Backoff::exponential().delays();
        assert_eq!([ms(&mut delays), ms(&mut delays)], [1, 2]);
        // The lower bounds of the whole sequence: 1, 2, 4, ..., 128.
        let mut delays = Backoff::exponential().delays();
        let seq: Vec<u64> = (0..10).map(|_| ms(&mut delays)).collect();
        for (i, value) in seq.iter().enumerate() {
            assert!(*value >= (1u64 << i).min(128), "{seq:?}");
        }
    }

    #[test]
    fn redisson_lock_options_example() {
        // LockOptionsTest: initial 10, max 100, multiplier 3.
        let backoff =
            Backoff::exponential_with(Duration::from_millis(10), Duration::from_millis(100), 3);
        for _ in 0..100 {
            let mut delays = backoff.delays();
            let seq: Vec<u64> = (0..5).map(|_| ms(&mut delays)).collect();
            assert_eq!(seq[0], 10);
            assert_eq!(seq[1], 30);
            assert!((90..=91).contains(&seq[2]), "{seq:?}");
            assert_eq!(&seq[3..], [100, 100]);
        }
    }

    #[test]
    fn constant_never_changes() {
        let mut delays = Backoff::constant(Duration::from_millis(30)).delays();
        assert!((0..20).all(|_| ms(&mut delays) == 30));
        let mut delays = Backoff::constant(Backoff::DEFAULT_CONSTANT_DELAY).delays();
        assert_eq!(ms(&mut delays), 64);
        // Below a millisecond counts as one: never a busy loop.
        let mut delays = Backoff::constant(Duration::ZERO).delays();
        assert_eq!(ms(&mut delays), 1);
    }

    #[test]
    fn jitter_stays_below_its_bound_and_varies() {
        let mut rng = XorShift::seeded();
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.below(1), 0);
        let values: Vec<u64> = (0..1000).map(|_| rng.below(5)).collect();
        assert!(values.iter().all(|v| *v < 5));
        assert!((0..5).all(|v| values.contains(&v)));
    }

    #[test]
    fn default_backoff_is_exponential() {
        assert_eq!(Backoff::default(), Backoff::exponential());
    }
}
