//! The non-reentrant locks: Redisson's `getNonReentrantLock` and `getNonReentrantFairLock`
//! (protocol §8.2, §8.3): the reentrant or fair kind whose acquire scripts get Redisson's
//! extra argument, with which they refuse a second acquisition by the holder (an error reply
//! that the client maps to [`Error::WouldDeadlock`]). Everything else (hash, channel,
//! releases, renewal, waiting, the fair queue) is the base kind's.

use std::sync::Arc;

use fred::types::Value;

use crate::base::boxed::BoxFuture;
use crate::base::error::{Error, Result};
use crate::base::keys::Str;
use crate::base::keys::{LockKeys, NON_REENTRANT_REACQUIRE};
use crate::base::owner::LockOwner;
use crate::core::attempt::Attempt;
use crate::core::attempt::Taken;
use crate::core::kind::{sealed, Kind, Plain};
use crate::core::protocol::{Answer, Place, Protocol, Target};
use crate::core::wait::{Wait, WaitStrategy};
use crate::engine::hand_offs::Heir;
use crate::engine::watchdog::Renew;
use crate::locks::exclusive::ExclusiveLock;
use crate::locks::fair_lock::Fair;
#[cfg(doc)]
use crate::locks::lock::Lock;
use crate::locks::lock::Reentrant;
use crate::topology::script::Call;

/// A distributed lock that an owner can hold only once: taking it again while holding it
/// fails at once with [`Error::WouldDeadlock`], instead of re-entering. Shared with Java's
/// `getNonReentrantLock` (Redisson 4.4+) of the same name.
///
/// Useful where a second acquisition by the same owner is a bug (recursion into a critical
/// section that is not prepared for it): it shows up as an error, not as a silent re-entry
/// nor as a wait for oneself. Re-entry is judged by the [`LockOwner`], so a second handle on
/// the same name acting for the same owner is refused too.
///
/// The hold is the reentrant lock's (same hash, channel, unlock and renewal), always with a
/// count of 1, so one unlock frees it. A `NonReentrantLock` and a [`Lock`] of the same name
/// exclude each other. A cheap handle (no I/O to make one, `Clone`, `Send + Sync`). It is
/// handed from task to task of one client as a [`Lock`] is (see
/// [`HandOff`](crate::HandOff)).
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.non_reentrant_lock("import-job")?;
/// let guard = lock.lock(&me).await?;
/// assert!(matches!(
///     lock.try_lock(&me).await,
///     Err(redisson_lock::Error::WouldDeadlock(_))
/// ));
/// guard.unlock().await?; // one unlock frees it
/// # Ok(()) }
/// ```
pub type NonReentrantLock = ExclusiveLock<NonReentrant>;

/// A fair lock (see [`FairLock`](crate::FairLock)) that an owner can hold only once: taking
/// it again while holding it fails at once with [`Error::WouldDeadlock`]. Shared with
/// Java's `getNonReentrantFairLock` (Redisson 4.4+) of the same name.
///
/// Waiters get the lock in the order they asked, through the fair lock's queue, deadlines
/// and per-waiter channels; the hold always has a count of 1, so one unlock frees it.
/// Re-entry is judged by the [`LockOwner`]. A cheap handle (no I/O to make one, `Clone`,
/// `Send + Sync`).
pub type NonReentrantFairLock = ExclusiveLock<NonReentrantFair>;

/// The kind of [`NonReentrantLock`]: Redisson's `getNonReentrantLock` (protocol §8.2).
#[derive(Debug, Clone, Copy, Default)]
pub struct NonReentrant;

impl Kind for NonReentrant {
    type Hold = Plain;
}

#[allow(private_interfaces)] // sealed: out of users' sight
impl sealed::Kind for NonReentrant {
    const HANDLE: &'static str = "NonReentrantLock";

    fn protocol() -> impl Protocol {
        NoReentry(Reentrant, "non_reentrant_lock")
    }
}

/// The kind of [`NonReentrantFairLock`]: Redisson's `getNonReentrantFairLock` (protocol
/// §8.3).
#[derive(Debug, Clone, Copy, Default)]
pub struct NonReentrantFair;

impl Kind for NonReentrantFair {
    type Hold = Plain;
}

#[allow(private_interfaces)] // sealed: out of users' sight
impl sealed::Kind for NonReentrantFair {
    const HANDLE: &'static str = "NonReentrantFairLock";

    fn protocol() -> impl Protocol {
        NoReentry(Fair, "non_reentrant_fair_lock")
    }
}

/// A base kind whose acquire refuses a re-entry: its script gets the marker as its last
/// argument (§8.2, §8.3) and replies it as an error, which becomes
/// [`Error::WouldDeadlock`]. Everything else is the base kind's; the name is this kind's.
struct NoReentry<P>(P, &'static str);

impl<P: Protocol> Protocol for NoReentry<P> {
    fn kind(&self) -> &'static str {
        self.1
    }

    fn field(&self, owner: &LockOwner) -> Str {
        self.0.field(owner)
    }

    fn renew(&self, keys: &LockKeys) -> Renew {
        self.0.renew(keys)
    }

    fn channel(&self, keys: &LockKeys, owner: &LockOwner) -> Str {
        self.0.channel(keys, owner)
    }

    fn default_wait(&self) -> WaitStrategy {
        self.0.default_wait()
    }

    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, wait: Wait) -> Call {
        let mut call = self.0.acquire(lock, owner, lease_ms, wait);
        call.push_args([Value::from(NON_REENTRANT_REACQUIRE)]);
        call
    }

    fn read_acquire(&self, answer: Answer<'_>) -> Result<Attempt<Taken>> {
        match &answer.reply {
            Err(error) if error.details().contains(NON_REENTRANT_REACQUIRE) => {
                Err(Error::WouldDeadlock(
                    format!(
                        "{} already holds non-reentrant lock {:?}; taking it again would \
                         wait for itself",
                        answer.owner, answer.lock.name
                    )
                    .into(),
                ))
            }
            _ => self.0.read_acquire(answer),
        }
    }

    fn release(&self, lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call {
        self.0.release(lock, owner, lease_ms)
    }

    fn force_release(&self, lock: &Target) -> Call {
        self.0.force_release(lock)
    }

    fn hands_off(&self) -> bool {
        self.0.hands_off()
    }

    fn hands_off_in_queue_order(&self) -> bool {
        self.0.hands_off_in_queue_order()
    }

    fn hand_off(&self, lock: &Target, holder: (&LockOwner, i64), heir: &dyn Heir) -> Call {
        self.0.hand_off(lock, holder, heir)
    }

    fn held_by(&self, lock: &Target, owner: &LockOwner) -> bool {
        self.0.held_by(lock, owner)
    }

    fn is_locked(&self, lock: &Target) -> BoxFuture<Result<bool>> {
        self.0.is_locked(lock)
    }

    fn line_up(&self, lock: &Arc<Target>, owner: &LockOwner, wait: Wait) -> Option<Place> {
        self.0.line_up(lock, owner, wait)
    }
}
