//! The fenced lock: Redisson's `RFencedLock` (protocol §7).
//!
//! [`FencedLock`] is a thin wrapper around a [`Lock`] of kind `Fenced`: the hash, the
//! channel, the releases, the renewal and the waiting are the reentrant lock's; only the
//! acquire script differs, taking a token from `redisson_lock_token:{name}` with every hold.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::handle::delegate_to_lock;
use crate::lock::{Lock, LockGuard};
use crate::wait::WaitStrategy;
use crate::LockOwner;

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
/// accepted and rejects a write with a lower one. The second owner's token is larger than
/// the first's, so once the second owner wrote, the first one's writes bounce. (Limits: this
/// needs a resource that can check and store the token atomically with the write, and it
/// cannot help when the failover lost the very acquisition that issued a token, since the
/// promoted replica may then issue the same number again.)
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// /// The protected resource, e.g. a row with a `fence` column in a database, or a file
/// /// server: it keeps the highest token it has accepted next to the data.
/// struct Storage {
///     highest_token: u64,
///     contents: String,
/// }
///
/// impl Storage {
///     /// Accepts a write only with a token at least as high as any accepted before:
///     /// a lower one comes from a holder that lost the lock since.
///     fn write(&mut self, token: u64, contents: &str) -> Result<(), String> {
///         if token < self.highest_token {
///             return Err(format!("stale token {token} < {}", self.highest_token));
///         }
///         self.highest_token = token;
///         self.contents = contents.to_owned();
///         Ok(())
///     }
/// }
///
/// let mut storage = Storage { highest_token: 0, contents: String::new() };
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.fenced_lock("storage");
///
/// let guard = lock.lock(&me).await?;
/// // Send the token with every write; the resource does the check.
/// if let Err(stale) = storage.write(guard.token(), "new contents") {
///     // Someone took the lock over meanwhile: stop, and do not retry under this hold.
///     eprintln!("lost the lock: {stale}");
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// # Tokens
/// The counter is `redisson_lock_token:{name}` (with the name prefix applied), a plain
/// integer key. It is incremented by every successful acquisition, re-entries included (so
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
#[derive(Clone)]
pub struct FencedLock {
    inner: Lock,
}

delegate_to_lock!(FencedLock);

impl FencedLock {
    pub(crate) fn new(inner: Lock) -> FencedLock {
        FencedLock { inner }
    }

    pub(crate) fn into_lock(self) -> Lock {
        self.inner
    }

    /// The same lock with another way of waiting from now on; see [`WaitStrategy`].
    pub fn with_wait_strategy(self, wait: WaitStrategy) -> FencedLock {
        FencedLock {
            inner: self.inner.with_wait_strategy(wait),
        }
    }

    /// How this handle waits.
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.inner.wait_strategy()
    }

    /// Takes the lock for `owner` with a new token, waiting as long as it takes.
    ///
    /// If `owner` already holds it, this re-enters at once (the hold count grows by one, the
    /// key lives at least this lease from now, and the new guard has a new, larger token). Waiting works as for
    /// [`Lock::lock`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future at any point leaves no hold behind (a hold taken by
    /// a script already on the wire is released as soon as its reply arrives; its token is
    /// used up).
    ///
    /// # Errors
    /// As [`Lock::lock`]; [`Error::WrongType`] also when the token key is not an integer
    /// string.
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<FencedGuard>> + Send + 'static {
        let acquiring = self.inner.lock(owner);
        async move { FencedGuard::new(acquiring.await?) }
    }

    /// One attempt: takes (or re-enters) the lock with a new token if it is free for
    /// `owner`, without waiting. `Ok(None)` when someone else holds it.
    ///
    /// # Cancel safety
    /// As [`lock`](FencedLock::lock): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`lock`](FencedLock::lock).
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<FencedGuard>>> + Send + 'static {
        let acquiring = self.inner.try_lock(owner);
        async move { acquiring.await?.map(FencedGuard::new).transpose() }
    }

    /// Takes the lock for `owner` with a new token, waiting at most `wait`. `Ok(None)` when
    /// the wait ran out. A zero `wait` makes exactly one attempt.
    ///
    /// # Cancel safety
    /// As [`lock`](FencedLock::lock): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`lock`](FencedLock::lock); also [`Error::InvalidArgument`] when `wait` is too
    /// long to add to the current time.
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<FencedGuard>>> + Send + 'static {
        let acquiring = self.inner.try_lock_for(owner, wait);
        async move { acquiring.await?.map(FencedGuard::new).transpose() }
    }

    /// Releases one hold of `owner` without a guard, Java style (the counterpart of
    /// [`FencedGuard::detach`]). The token counter is left as it is.
    ///
    /// # Errors
    /// As [`Lock::unlock`].
    pub async fn unlock(&self, owner: &LockOwner) -> Result<()> {
        self.inner.unlock(owner).await
    }

    /// Frees the lock whoever holds it, and wakes its waiters. `true` when it was held. The
    /// token counter is left as it is, so the next holder's token is still larger than the
    /// evicted holder's.
    ///
    /// # Correctness
    /// This breaks mutual exclusion for the current holder, which goes on believing it holds
    /// the lock until its guard's [`lease_lost`](FencedGuard::lease_lost) fires; fencing is
    /// what keeps its late writes out.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::InvalidArgument`] for an
    /// empty name.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }

    /// The current value of the token counter: the token of the latest acquisition, or 0
    /// when the lock was never taken (Redisson's `getToken`).
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or the key is not an integer;
    /// [`Error::WrongType`] when it is not a string.
    pub async fn token(&self) -> Result<u64> {
        self.inner.current_fence_token().await
    }
}

/// One hold of a [`FencedLock`], with its fencing token. Release it with
/// [`unlock`](FencedGuard::unlock).
///
/// Dropping the guard without `unlock` stops its renewal at once and releases the hold in
/// the background, as for a [`LockGuard`].
#[must_use = "dropping the guard releases the lock in the background"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct FencedGuard {
    guard: LockGuard,
    token: u64,
}

impl FencedGuard {
    fn new(guard: LockGuard) -> Result<FencedGuard> {
        match guard.fence_token() {
            Some(token) => Ok(FencedGuard { guard, token }),
            // Not reached: every fenced acquisition replies its token.
            None => Err(Error::UnexpectedReply {
                script: "fenced_acquire",
                detail: "a hold without a token".to_owned(),
            }),
        }
    }

    /// The fencing token of this hold: larger than the token of every acquisition of this
    /// lock before it. Send it with every write to the protected resource.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Releases this hold (the lock is freed with its owner's last hold). The token counter
    /// is left as it is.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`].
    pub async fn unlock(self) -> Result<()> {
        self.guard.unlock().await
    }

    /// Gives up the guard but keeps the hold (and its watchdog renewal); release it later
    /// with [`FencedLock::unlock`], Java style.
    pub fn detach(self) {
        self.guard.detach()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &LockOwner {
        self.guard.owner()
    }

    /// Completes when the hold is known to be lost; see [`LockGuard::lease_lost`]. Writes
    /// made after that carry a token that the resource rejects once a newer holder wrote.
    ///
    /// # Cancel safety
    /// Cancel-safe; it only watches.
    pub fn lease_lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.guard.lease_lost()
    }

    /// Whether [`lease_lost`](FencedGuard::lease_lost) has completed.
    pub fn is_lease_lost(&self) -> bool {
        self.guard.is_lease_lost()
    }
}
