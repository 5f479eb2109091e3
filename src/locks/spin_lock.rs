//! The spin lock: Redisson's `RSpinLock` (protocol §8.1): the reentrant lock's hold,
//! waited for by back-off instead of pub/sub, released without a message.

use crate::base::backoff::Backoff;
use crate::base::owner::LockOwner;
#[cfg(doc)]
use crate::core::guard::LockGuard;
use crate::core::kind::{sealed, Kind, Plain};
use crate::core::protocol::{Protocol, Target};
use crate::core::wait::{Wait, WaitStrategy};
use crate::engine::hand_offs::Heir;
use crate::locks::exclusive::ExclusiveLock;
#[cfg(doc)]
use crate::locks::lock::Lock;
use crate::locks::lock::{acquire_call, force_release_call, hand_off_call, release_call};
use crate::topology::script::Call;

/// A reentrant distributed lock without pub/sub: waiters poll with a back-off, and releases
/// publish nothing. Shared with Java's `RSpinLock` of the same name.
///
/// Made for deployments where pub/sub is unavailable or costly (many lock names, a proxy
/// without pub/sub, sharded pub/sub trouble): no subscription, no message per unlock, at
/// the price of one acquire script per back-off step while waiting, and of a wake-up up to
/// one step (at most 128 ms by default) after the release.
///
/// The hold is the reentrant lock's (same hash, same TTL, same renewal), so a `SpinLock` and
/// a [`Lock`] (or a Java `RLock`) of the same name exclude each other. But a spin unlock
/// tells no one: a [`Lock`] waiting with [`WaitStrategy::PubSub`] (and a Java `RLock`
/// waiter) notices it only when the old hold's lease would have ended. Give such waiters
/// [`WaitStrategy::Spin`], or do not mix the kinds.
///
/// A `SpinLock` is a cheap handle (no I/O to make one, `Clone`, `Send + Sync`); every call
/// names the [`LockOwner`] it acts for, and the same owner re-enters. Waiting tries again
/// after each back-off step, never sleeping past the holder's remaining lease; releases
/// (and force-unlocks, a plain `DEL`) publish nothing. On a client with
/// [`HandOff::ON`](crate::HandOff::ON), a release while a task of the same client spins for
/// the lock gives it to that task in the same script, without waiting for its next step.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// use std::time::Duration;
/// use redisson_lock::Backoff;
///
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client
///     .spin_lock("report")?
///     .with_backoff(Backoff::constant(Duration::from_millis(20)));
/// if let Some(guard) = lock.try_lock_for(&me, Duration::from_secs(2)).await? {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
pub type SpinLock = ExclusiveLock<Spin>;

impl ExclusiveLock<Spin> {
    /// The same lock with another back-off for the waits it makes from now on (the same as
    /// `with_wait_strategy(WaitStrategy::Spin(backoff))`).
    ///
    /// # Default
    /// [`Backoff::exponential()`], Redisson's default.
    pub fn with_backoff(self, backoff: Backoff) -> SpinLock {
        self.with_wait_strategy(WaitStrategy::Spin(backoff))
    }
}

/// The kind of [`SpinLock`]: Redisson's `RSpinLock` (protocol §8.1): `RLock`'s acquire, a
/// release that publishes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spin;

impl Kind for Spin {
    type Hold = Plain;
}

#[allow(private_interfaces)] // sealed: out of users' sight
impl sealed::Kind for Spin {
    const HANDLE: &'static str = "SpinLock";

    fn protocol() -> impl Protocol {
        Spin
    }
}

impl Protocol for Spin {
    fn kind(&self) -> &'static str {
        "spin_lock"
    }

    fn default_wait(&self) -> WaitStrategy {
        WaitStrategy::Spin(Backoff::default())
    }

    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, _wait: Wait) -> Call {
        acquire_call(lock, owner, lease_ms)
    }

    fn release(&self, lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call {
        release_call(lock, owner, lease_ms, false)
    }

    fn force_release(&self, lock: &Target) -> Call {
        force_release_call(lock, false)
    }

    fn hands_off(&self) -> bool {
        true
    }

    fn hand_off(&self, lock: &Target, holder: (&LockOwner, i64), heir: &dyn Heir) -> Call {
        hand_off_call(lock, holder, heir, None)
    }
}
