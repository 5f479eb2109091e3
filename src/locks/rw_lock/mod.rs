//! The read-write lock: Redisson's `RReadWriteLock` (protocol §5): two sides over one hash,
//! the read side's shared holds (each with its own timeout key, renewed by the watchdog's
//! reader batch) and the write side's exclusive hold under the field `<owner>:write`.
//! [`ReadGuard`] and [`WriteGuard`] are [`LockGuard`]s of different types, so that the two
//! sides cannot be mixed up.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::owner::LockOwner;
use crate::core::guard::LockGuard;
use crate::core::handle::Handle;
use crate::core::kind::{sealed, HoldKind};
use crate::core::lease::Lease;
use crate::engine::Engine;

/// A distributed read-write lock, shared with Java's `RReadWriteLock` of the same name:
/// many readers at a time, or one writer.
///
/// # Policy (as Redisson's)
/// - **Readers never queue behind waiting writers.** While the lock is in read mode every
///   new reader gets in at once, so a steady stream of readers can starve writers.
/// - **Write to read (downgrade) is allowed.** A writer may also take read holds; when its
///   last write hold is released the lock stays in read mode, held by those read holds, and
///   other readers may join.
/// - **Read to write (upgrade) is refused.** An owner that holds read holds but no write
///   hold cannot take the write lock, even when it is the only reader. Java lets such a
///   `lock()` wait for itself forever; here [`write`](ReadWriteLock::write) and its
///   variants fail at once with [`Error::WouldDeadlock`](crate::Error::WouldDeadlock).
/// - Both sides are reentrant per [`LockOwner`]. Re-entering the write side adds the lease
///   to the remaining TTL; re-entering the read side keeps the larger of the two (Redisson's
///   rules).
/// - When the write side is freed every waiter (readers and writers, in every client) is
///   woken; when the read side is freed one waiter per client is.
///
/// Each read hold also leaves a timeout key in Redis, which the watchdog renews with the
/// lock: other clients' read unlocks use these keys to tell live readers from readers whose
/// process died, and delete the lock when no live reader is left.
///
/// A `ReadWriteLock` is a cheap handle (no I/O to make one, `Clone`, `Send + Sync`). It
/// holds no owner: every call names the [`LockOwner`] it acts for.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.read_write_lock("catalog")?;
/// let writing = lock.write(&me).await?;
/// let reading = lock.read(&me).await?; // downgrade: a writer may also read
/// writing.unlock().await?; // still read-locked by `reading`
/// reading.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    read: Handle,
    write: Handle,
}

impl ReadWriteLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Result<ReadWriteLock> {
        Ok(ReadWriteLock {
            read: Handle::with_kind_of(engine.clone(), name, |keys| Read(RwNames::of(keys)))?,
            write: Handle::with_kind_of(engine, name, Write::of)?,
        })
    }

    /// The write side, as a multi-lock member.
    pub(crate) fn write_handle(&self) -> &Handle {
        &self.write
    }

    /// The same lock with another lease policy for the holds it takes from now on, on both
    /// sides. A [fixed lease](Lease::fixed) disables the watchdog for those holds.
    pub fn with_lease(self, lease: Lease) -> ReadWriteLock {
        ReadWriteLock {
            read: self.read.with_lease(lease),
            write: self.write.with_lease(lease),
        }
    }

    /// The name as given to
    /// [`LockClient::read_write_lock`](crate::LockClient::read_write_lock).
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The lease policy of this handle.
    pub fn lease(&self) -> Lease {
        self.read.lease()
    }

    /// Takes a read hold for `owner`, waiting as long as it takes.
    ///
    /// It is granted at once when the lock is free, in read mode (even while writers wait),
    /// or write-locked by `owner` itself (downgrade). Otherwise it waits for the writer's
    /// unlock message (Java writers included), and in any case for the writer's lease to run
    /// out.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future at any point leaves no hold behind. A hold taken by
    /// a script that was already on the wire is released as soon as its reply arrives.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached at the first
    /// attempt (while waiting, transient errors are retried until Redis has been
    /// unreachable for `watchdog_timeout`), [`Error::WrongType`](crate::Error::WrongType)
    /// when the key is not a lock hash, [`Error::Closed`](crate::Error::Closed) after
    /// shutdown.
    pub fn read(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<ReadGuard>> + Send + 'static {
        self.read.lock(owner)
    }

    /// One attempt at a read hold for `owner`, without waiting. `Ok(None)` when another
    /// owner holds the write side.
    ///
    /// # Cancel safety
    /// As [`read`](ReadWriteLock::read): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`read`](ReadWriteLock::read).
    pub fn try_read(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<ReadGuard>>> + Send + 'static {
        self.read.try_lock(owner)
    }

    /// Takes a read hold for `owner`, waiting at most `wait`. `Ok(None)` when the wait ran
    /// out. A zero `wait` makes exactly one attempt, like
    /// [`try_read`](ReadWriteLock::try_read).
    ///
    /// # Cancel safety
    /// As [`read`](ReadWriteLock::read): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`read`](ReadWriteLock::read); also
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `wait` is too long to
    /// add to the current time.
    pub fn try_read_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<ReadGuard>>> + Send + 'static {
        self.read.try_lock_for(owner, wait)
    }

    /// Takes the write hold for `owner`, waiting as long as it takes.
    ///
    /// It is granted at once when the lock is free or `owner` already writes (re-entry: the
    /// lease is added to the remaining TTL). Otherwise it waits for the readers' and
    /// writer's unlock messages (Java clients' included), and in any case for their lease to
    /// run out. Readers that keep coming can make it wait indefinitely. On a client with
    /// [`HandOff::ON`](crate::HandOff::ON), a writer of the same client that releases may
    /// give it the write hold in the same script.
    ///
    /// # Upgrade
    /// When `owner` holds read holds but no write hold this fails at once with
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock), and nothing changes: the write
    /// side could only be granted after `owner`'s own read holds are released. (Java's
    /// `writeLock().lock()` waits for itself forever in that case.) The check is made by the
    /// acquire script itself, at no extra cost; it also ends a wait during which `owner` took
    /// a read hold elsewhere.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future at any point leaves no hold behind. A hold taken by
    /// a script that was already on the wire is released as soon as its reply arrives.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) for an upgrade (above); the
    /// rest as [`read`](ReadWriteLock::read).
    pub fn write(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<WriteGuard>> + Send + 'static {
        self.write.lock(owner)
    }

    /// One attempt at the write hold for `owner`, without waiting. `Ok(None)` when another
    /// owner holds either side.
    ///
    /// # Cancel safety
    /// As [`write`](ReadWriteLock::write): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`write`](ReadWriteLock::write), including
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) when `owner` holds only read
    /// holds (an error, not `Ok(None)`: no wait could succeed).
    pub fn try_write(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<WriteGuard>>> + Send + 'static {
        self.write.try_lock(owner)
    }

    /// Takes the write hold for `owner`, waiting at most `wait`. `Ok(None)` when the wait
    /// ran out. A zero `wait` makes exactly one attempt, like
    /// [`try_write`](ReadWriteLock::try_write).
    ///
    /// # Cancel safety
    /// As [`write`](ReadWriteLock::write): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`write`](ReadWriteLock::write), including
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) at once (not after `wait`) when
    /// `owner` holds only read holds; also
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `wait` is too long to
    /// add to the current time.
    pub fn try_write_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<WriteGuard>>> + Send + 'static {
        self.write.try_lock_for(owner, wait)
    }

    /// Releases one read hold of `owner` without a guard, Java style: the counterpart of a
    /// guard given up with [`ReadGuard::detach`]. When no other hold is left the lock is
    /// freed and waiters are told; otherwise its TTL becomes the longest remaining reader's.
    ///
    /// # Cancel safety
    /// Cancel-safe: the release starts when this is called, and a future dropped before it
    /// is done finishes it in the background, resends included.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when `owner` holds no read hold (nothing
    /// changes on the server; at once, sending nothing, when this client knows the hold is
    /// lost), [`Error::Redis`](crate::Error::Redis) when Redis could not be
    /// reached even after resending (resending is safe: the unlock latch makes the release
    /// happen at most once).
    pub fn unlock_read(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.read.unlock(owner)
    }

    /// Releases one write hold of `owner` without a guard, Java style: the counterpart of a
    /// guard given up with [`WriteGuard::detach`]. With the last write hold the lock is
    /// freed and every waiter told, or, when `owner` still holds read holds, it goes to read
    /// mode (downgrade) and waiting readers are told. Until then the key lives on for the
    /// owner's other holds.
    ///
    /// # Cancel safety
    /// As [`unlock_read`](ReadWriteLock::unlock_read).
    ///
    /// # Errors
    /// As [`unlock_read`](ReadWriteLock::unlock_read), for the write side.
    pub fn unlock_write(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.write.unlock(owner)
    }

    /// Frees the lock if it is in read mode, whoever holds it, and wakes its waiters.
    /// `true` when it was; a write-locked lock is left alone (`false`).
    ///
    /// # Correctness
    /// This breaks mutual exclusion for the current readers, which go on believing they
    /// hold the lock until their guards' [`lease_lost`](ReadGuard::lease_lost) fires.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    pub async fn force_unlock_read(&self) -> Result<bool> {
        self.read.force_unlock().await
    }

    /// Frees the lock if it is in write mode, whoever holds it (with the writer's read
    /// holds), and wakes every waiter. `true` when it was; a read-locked lock is left alone
    /// (`false`).
    ///
    /// # Correctness
    /// As [`force_unlock_read`](ReadWriteLock::force_unlock_read), for the writer.
    ///
    /// # Errors
    /// As [`force_unlock_read`](ReadWriteLock::force_unlock_read).
    pub async fn force_unlock_write(&self) -> Result<bool> {
        self.write.force_unlock().await
    }

    /// Whether anyone holds the lock, in either mode.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached,
    /// [`Error::WrongType`](crate::Error::WrongType) when the key is not a lock hash.
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(self.read.is_locked().await? || self.write.is_locked().await?)
    }

    /// Whether the read side is held (Redisson's read `isLocked`): the lock is in read
    /// mode, or in write mode and the writer also holds read holds.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached,
    /// [`Error::WrongType`](crate::Error::WrongType) when the key is not a lock hash.
    pub async fn is_read_locked(&self) -> Result<bool> {
        self.read.is_locked().await
    }

    /// Whether the lock is in write mode.
    ///
    /// # Errors
    /// As [`is_read_locked`](ReadWriteLock::is_read_locked).
    pub async fn is_write_locked(&self) -> Result<bool> {
        self.write.is_locked().await
    }

    /// How many read holds `owner` has (0 when none).
    ///
    /// # Errors
    /// As [`is_read_locked`](ReadWriteLock::is_read_locked).
    pub async fn read_hold_count(&self, owner: &LockOwner) -> Result<u64> {
        self.read.hold_count(owner).await
    }

    /// How many write holds `owner` has (0 when none).
    ///
    /// # Errors
    /// As [`is_read_locked`](ReadWriteLock::is_read_locked).
    pub async fn write_hold_count(&self, owner: &LockOwner) -> Result<u64> {
        self.write.hold_count(owner).await
    }

    /// Whether `owner` has a read hold.
    ///
    /// # Errors
    /// As [`is_read_locked`](ReadWriteLock::is_read_locked).
    pub async fn is_read_held_by(&self, owner: &LockOwner) -> Result<bool> {
        Ok(self.read.hold_count(owner).await? > 0)
    }

    /// Whether `owner` has the write hold.
    ///
    /// # Errors
    /// As [`is_read_locked`](ReadWriteLock::is_read_locked).
    pub async fn is_write_held_by(&self, owner: &LockOwner) -> Result<bool> {
        Ok(self.write.hold_count(owner).await? > 0)
    }

    /// How long the lock (either side) lasts unless renewed or released; `None` when it is
    /// free. A lock without expiry reports `Duration::MAX`.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.read.remaining_lease().await
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.read.name())
            .field("lease", &self.read.lease())
            .finish()
    }
}

/// One read hold of a [`ReadWriteLock`]. Release it with [`unlock`](LockGuard::unlock), or
/// give it up with [`detach`](LockGuard::detach) and release it later with
/// [`ReadWriteLock::unlock_read`].
///
/// Dropping the guard without `unlock` stops its renewal at once and releases the hold in
/// the background; `unlock().await` is the way to release it now and learn of errors.
pub type ReadGuard = LockGuard<ReadHold>;

/// One write hold of a [`ReadWriteLock`]. Release it with [`unlock`](LockGuard::unlock), or
/// give it up with [`detach`](LockGuard::detach) and release it later with
/// [`ReadWriteLock::unlock_write`].
///
/// Dropping the guard without `unlock` stops its renewal at once and releases the hold in
/// the background; `unlock().await` is the way to release it now and learn of errors.
pub type WriteGuard = LockGuard<WriteHold>;

/// A read hold: the `H` of a [`ReadGuard`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadHold;

/// A write hold: the `H` of a [`WriteGuard`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteHold;

impl HoldKind for ReadHold {}
impl HoldKind for WriteHold {}

impl sealed::HoldKind for ReadHold {
    const GUARD: &'static str = "ReadGuard";

    fn new(_token: Option<u64>) -> ReadHold {
        ReadHold
    }
}

impl sealed::HoldKind for WriteHold {
    const GUARD: &'static str = "WriteGuard";

    fn new(_token: Option<u64>) -> WriteHold {
        WriteHold
    }
}

mod protocol;
use protocol::{Read, RwNames, Write};
