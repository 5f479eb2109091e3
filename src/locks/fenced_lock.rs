//! The fenced lock: Redisson's `RFencedLock` (protocol §7): the reentrant lock's hash,
//! channel, releases, renewal and waiting, with an acquire script that also takes a token
//! from `redisson_lock_token:{name}` with every hold.

use fred::types::Value;

use crate::base::error::{Error, Result};
use crate::base::owner::LockOwner;
use crate::core::attempt::Attempt;
use crate::core::attempt::Taken;
use crate::core::guard::LockGuard;
use crate::core::kind::{sealed, HoldKind, Kind};
use crate::core::protocol::{read_taken, Answer, Protocol, Target};
use crate::core::wait::Wait;
use crate::engine::hand_offs::Heir;
use crate::locks::exclusive::ExclusiveLock;
#[cfg(doc)]
use crate::locks::lock::Lock;
use crate::locks::lock::{force_release_call, hand_off_call, release_call};
use crate::topology::script::{Call, FENCED_ACQUIRE};

/// A reentrant distributed lock whose every acquisition comes with a fencing token: a
/// number larger than the token of any earlier acquisition of the same lock. Shared with
/// Java's `RFencedLock` of the same name.
///
/// # What fencing is for
/// A lock with a lease cannot by itself stop a holder that no longer holds it from acting.
/// Two cases matter:
/// - **A holder paused past its lease.** A stop-the-world pause, a stalled VM, a slow
///   network or an overloaded runtime delays the holder (and its watchdog) until its lease
///   ran out; another owner takes the lock and writes; then the first one wakes up and,
///   still believing it holds the lock, writes too.
/// - **A failover that loses a hold.** Redis replicates asynchronously: a promoted replica
///   may lack the latest renewal, or the hold altogether, and grant the lock to a second
///   owner while the first goes on working.
///
/// Fencing makes the protected resource itself refuse the late writer. Every write carries
/// the token of the hold it was made under; the resource remembers the highest token it has
/// seen and rejects a write with a lower one. The second owner's token is larger than the
/// first's, so once the second owner reached the resource, the first one's writes bounce.
/// (Limits: this needs a resource that can check and store the token atomically with the
/// write, and it cannot help when the failover lost the very acquisition that issued a
/// token, since the promoted replica may then issue the same number again.)
///
/// **A read-modify-write must send the token with its read too.** If only writes carry it,
/// a late write can land between the new owner's read and its write: the resource has not
/// seen the newer token yet and accepts it, then the new owner's write, computed from the
/// value it read before, overwrites it. Both writes are accepted and one update is lost.
/// Have reads refuse a lower token and record a higher one, as in the example, or make the
/// whole update one conditional operation (`UPDATE … SET n = n + 1, fence = $token WHERE
/// fence <= $token`).
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// /// The protected resource, e.g. a row with a `fence` column in a database, or a file
/// /// server: it keeps the highest token it has seen next to the data.
/// struct Storage {
///     highest_token: u64,
///     contents: String,
/// }
///
/// impl Storage {
///     /// Lets in a token at least as high as any seen before, and remembers it: a lower
///     /// one comes from a holder that lost the lock since.
///     fn admit(&mut self, token: u64) -> Result<(), String> {
///         if token < self.highest_token {
///             return Err(format!("stale token {token} < {}", self.highest_token));
///         }
///         self.highest_token = token;
///         Ok(())
///     }
///
///     fn read(&mut self, token: u64) -> Result<String, String> {
///         self.admit(token)?;
///         Ok(self.contents.clone())
///     }
///
///     fn write(&mut self, token: u64, contents: String) -> Result<(), String> {
///         self.admit(token)?;
///         self.contents = contents;
///         Ok(())
///     }
/// }
///
/// let mut storage = Storage { highest_token: 0, contents: String::new() };
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.fenced_lock("storage")?;
///
/// let guard = lock.lock(&me).await?;
/// // Send the token with every read and write; the resource does the check.
/// let updated = storage
///     .read(guard.token())
///     .and_then(|contents| storage.write(guard.token(), contents + " and more"));
/// if let Err(stale) = updated {
///     // Someone took the lock over meanwhile: stop, and do not retry under this hold.
///     eprintln!("lost the lock: {stale}");
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// # Tokens
/// The counter is `redisson_lock_token:{name}` (with the name prefix applied), a plain
/// integer key. It is incremented by every successful acquisition (and by every hand-off to
/// a task of the same client, see [`HandOff`](crate::HandOff)), re-entries included (so
/// a re-entered owner's earlier tokens are then lower than its newest), never expires and
/// is never reset or deleted, neither by an unlock nor by a force-unlock, as in Redisson:
/// each fenced lock name leaves one small key behind for good. Tokens keep growing across a
/// Redis restart only when Redis persists its data (AOF, or RDB recent enough); a server
/// that loses its data starts the counter over, and the resource's memory must then be
/// reset too.
///
/// Everything else is as for [`Lock`]: the same hash layout, channel, unlock, renewal and
/// waiting, so a `FencedLock` and a [`Lock`] of the same name exclude each other (only the
/// fenced one takes tokens). A `FencedLock` is a cheap handle (no I/O to make one, `Clone`,
/// `Send + Sync`); every call names the [`LockOwner`] it acts for, and the same owner
/// re-enters.
pub type FencedLock = ExclusiveLock<Fenced>;

impl ExclusiveLock<Fenced> {
    /// The current value of the token counter: the token of the latest acquisition, or 0
    /// when the lock was never taken (Redisson's `getToken`). A [`FencedGuard`]'s
    /// [`token`](FencedGuard::token) is the token of its own acquisition.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or the key is not an integer;
    /// [`Error::WrongType`] when it is not a string.
    pub async fn latest_token(&self) -> Result<u64> {
        let counter = self.inner.target().keys.fence_token();
        self.inner.read_counter(&counter).await
    }
}

/// The kind of [`FencedLock`]: Redisson's `RFencedLock` (protocol §7): `RLock`'s protocol,
/// but every acquisition takes a token.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fenced;

impl Kind for Fenced {
    type Hold = Token;
}

#[allow(private_interfaces)] // sealed: out of users' sight
impl sealed::Kind for Fenced {
    const HANDLE: &'static str = "FencedLock";

    fn protocol() -> impl Protocol {
        Fenced
    }
}

impl Protocol for Fenced {
    fn kind(&self) -> &'static str {
        "fenced_lock"
    }

    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, _wait: Wait) -> Call {
        Call::new(
            &FENCED_ACQUIRE,
            &[&lock.keys.raw, &lock.keys.fence_token()],
            vec![Value::from(lease_ms), owner.field_arg()],
        )
    }

    fn read_acquire(&self, answer: Answer<'_>) -> Result<Attempt<Taken>> {
        let script = answer.script;
        match read_taken(answer.lock, script, answer.reply)? {
            Attempt::Acquired(Taken { token: None, .. }) => Err(Error::UnexpectedReply {
                script: script.name,
                detail: "a hold without a token".to_owned(),
            }),
            attempt => Ok(attempt),
        }
    }

    fn release(&self, lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call {
        release_call(lock, owner, lease_ms, true)
    }

    fn force_release(&self, lock: &Target) -> Call {
        force_release_call(lock, true)
    }

    /// The heir gets a new token, as its own acquisition would have.
    fn hands_off(&self) -> bool {
        true
    }

    fn hand_off(&self, lock: &Target, holder: (&LockOwner, i64), heir: &dyn Heir) -> Call {
        hand_off_call(lock, holder, heir, Some(lock.keys.fence_token()))
    }
}

/// One hold of a [`FencedLock`], with its fencing token (see
/// [`token`](LockGuard::token)). Release it with [`unlock`](LockGuard::unlock).
///
/// Dropping the guard without `unlock` stops its renewal at once and releases the hold in
/// the background, as for every [`LockGuard`].
pub type FencedGuard = LockGuard<Token>;

/// The hold of a [`FencedLock`]: its fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token(u64);

impl HoldKind for Token {}

impl sealed::HoldKind for Token {
    const GUARD: &'static str = "FencedGuard";

    fn new(token: Option<u64>) -> Token {
        // Every fenced acquisition has its token (see `Fenced::read_acquire`).
        Token(token.unwrap_or_default())
    }

    fn token(&self) -> Option<u64> {
        Some(self.0)
    }
}

impl LockGuard<Token> {
    /// The fencing token of this hold: larger than the token of every acquisition of this
    /// lock before it. Send it with every read and write of the protected resource.
    pub fn token(&self) -> u64 {
        self.fence_token().unwrap_or_default()
    }
}
