//! How a waiter waits between two attempts: pub/sub wake-ups, or spinning by a back-off
//! (protocol §3.9, §8.1).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    fn default_strategy_is_pub_sub_and_default_backoff_is_exponential() {
        assert_eq!(WaitStrategy::default(), WaitStrategy::PubSub);
        assert_eq!(Backoff::default(), Backoff::exponential());
    }
}
