//! The reentrant lock: Redisson's `RLock` (protocol §3), the base every hash-based kind
//! shares: its acquire, release and force-release scripts.

use fred::types::Value;

use crate::base::keys::UNLOCK_MESSAGE;
use crate::base::owner::LockOwner;
#[cfg(doc)]
use crate::core::guard::LockGuard;
use crate::core::kind::{sealed, Kind, Plain};
use crate::core::protocol::{Protocol, Target};
use crate::core::wait::Wait;
use crate::engine::hand_offs::Heir;
use crate::locks::exclusive::ExclusiveLock;
use crate::topology::script::{
    static_arg, Call, LOCK_ACQUIRE, LOCK_FORCE_RELEASE, LOCK_HAND_OFF, LOCK_RELEASE,
};

/// A reentrant distributed lock, shared with Java's `RLock` of the same name.
///
/// The lock is not fair: when it is freed, any waiter (in this process or another, Rust or
/// Java) may get it, and a task that asks at that moment may get it first. A client's own
/// waiters are woken in the order they began to wait, and one that loses the race keeps its
/// place. Use a fair lock where the order matters. The same owner re-enters: the
/// hold count grows by one, and the key lives at least the new lease from then on (never
/// less than before).
///
/// On a client built with [`HandOff::ON`](crate::HandOff::ON), a guard's release that would
/// free the lock while a task of the same client waits for it gives the lock to the
/// longest-waiting such task in the same script: that task holds it one round trip after the
/// release began, with no unlock message in between. [`HandOff`](crate::HandOff) bounds how
/// many times in a row, and how long, and says when to turn it on.
///
/// A `Lock` is a cheap handle (no I/O to make one, `Clone`, `Send + Sync`). It holds no
/// owner: every call names the [`LockOwner`] it acts for. Holds are [`LockGuard`]s.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.lock("orders:42")?;
/// let guard = lock.lock(&me).await?;
/// let again = lock.lock(&me).await?; // re-entered: hold count 2
/// again.unlock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type Lock = ExclusiveLock<Reentrant>;

/// The kind of [`Lock`]: Redisson's `RLock` (protocol §3).
#[derive(Debug, Clone, Copy, Default)]
pub struct Reentrant;

impl Kind for Reentrant {
    type Hold = Plain;
}

#[allow(private_interfaces)] // sealed: out of users' sight
impl sealed::Kind for Reentrant {
    const HANDLE: &'static str = "Lock";

    fn protocol() -> impl Protocol {
        Reentrant
    }
}

impl Protocol for Reentrant {
    fn kind(&self) -> &'static str {
        "lock"
    }

    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, _wait: Wait) -> Call {
        acquire_call(lock, owner, lease_ms)
    }

    fn release(&self, lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call {
        release_call(lock, owner, lease_ms, true)
    }

    fn force_release(&self, lock: &Target) -> Call {
        force_release_call(lock, true)
    }

    fn hands_off(&self) -> bool {
        true
    }

    fn hand_off(&self, lock: &Target, holder: (&LockOwner, i64), heir: &dyn Heir) -> Call {
        hand_off_call(lock, holder, heir, None)
    }
}

/// `lua/lock_hand_off.lua`: the release of one hold of `owner` (a partial one resets the TTL
/// to `lease_ms`) that gives the lock to `heir` of the same client, with its lease, when it
/// would free it; a fenced lock's passes its token `counter`.
pub(crate) fn hand_off_call(
    lock: &Target,
    (owner, lease_ms): (&LockOwner, i64),
    heir: &dyn Heir,
    counter: Option<String>,
) -> Call {
    let mut call = Call::of(
        &LOCK_HAND_OFF,
        [Value::String(lock.keys.raw.clone())],
        [
            Value::from(lease_ms),
            owner.field_arg(),
            heir.owner().field_arg(),
            Value::from(heir.lease_ms()),
        ],
    );
    if let Some(counter) = counter {
        call.push_key(Value::from(counter));
    }
    call
}

/// `lua/lock_force_release.lua` (§3.6); `publish` as for [`release_call`].
pub(crate) fn force_release_call(lock: &Target, publish: bool) -> Call {
    let publish = if publish {
        lock.publish()
    } else {
        Value::from("")
    };
    Call::new(
        &LOCK_FORCE_RELEASE,
        &[&lock.keys.raw, &lock.keys.channel],
        vec![Value::from(UNLOCK_MESSAGE), publish],
    )
}

/// `lua/lock_acquire.lua` (§3.2).
pub(crate) fn acquire_call(lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call {
    Call::of(
        &LOCK_ACQUIRE,
        [Value::String(lock.keys.raw.clone())],
        [Value::from(lease_ms), owner.field_arg()],
    )
}

/// `lua/lock_release.lua` (§3.4); `publish`: whether the last release tells the waiters
/// (a spin lock's does not, §8.1).
pub(crate) fn release_call(lock: &Target, owner: &LockOwner, lease_ms: i64, publish: bool) -> Call {
    let publish = if publish {
        lock.publish()
    } else {
        static_arg("")
    };
    Call::of(
        &LOCK_RELEASE,
        [
            Value::String(lock.keys.raw.clone()),
            Value::String(lock.keys.channel.clone()),
        ],
        [
            static_arg(UNLOCK_MESSAGE),
            Value::from(lease_ms),
            owner.field_arg(),
            publish,
        ],
    )
}
