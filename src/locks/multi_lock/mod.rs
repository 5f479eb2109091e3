//! Multi-locks: several locks, possibly on different Redis servers, taken as one
//! (protocol §6). [`MultiLock`] needs every member; [`RedLock`] a majority.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::base::backoff::{between, failed_round_pause};
use crate::base::error::{Error, Result};
use crate::base::owner::LockOwner;
use crate::base::time::deadline_after;
use crate::core::guard::LockGuard;
use crate::core::handle::Handle;
use crate::core::kind::{Kind, Member};
use crate::core::lease::Lease;
use crate::core::wait::Wait;
use crate::locks::exclusive::ExclusiveLock;
#[cfg(doc)]
use crate::locks::fenced_lock::FencedLock;
use crate::locks::rw_lock::ReadWriteLock;

/// One lock of a multi-lock: any exclusive kind (plain, fair, fenced, spin, non-reentrant),
/// or the write side of a read-write lock, from any [`LockClient`](crate::LockClient).
#[derive(Clone)]
pub struct MultiMember(Handle);

impl MultiMember {
    /// The write side of a read-write lock (Redisson's multi-lock over a `writeLock()`).
    pub fn write_side(lock: &ReadWriteLock) -> MultiMember {
        MultiMember(lock.write_handle().clone())
    }
}

impl<K: Kind> From<ExclusiveLock<K>> for MultiMember {
    fn from(lock: ExclusiveLock<K>) -> Self {
        MultiMember(lock.into_handle())
    }
}

impl<K: Kind> From<&ExclusiveLock<K>> for MultiMember {
    fn from(lock: &ExclusiveLock<K>) -> Self {
        MultiMember(lock.clone().into_handle())
    }
}

impl fmt::Debug for MultiMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MultiMember").field(&self.0.name()).finish()
    }
}

/// How many members a multi-lock needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quorum {
    All,
    Majority,
}

/// Several locks taken as one, all or nothing: Redisson's `RedissonMultiLock`.
///
/// The members may live on different Redis servers and be of different kinds. They are
/// taken one after the other, in a fixed order (by server, then by name, whatever order
/// they were given in), so two multi-locks over overlapping sets always contend for their
/// shared members in the same order. If a member cannot be had within the wait, the members
/// already taken are released and the attempt starts again from the first member, as long as
/// the wait allows.
///
/// The members keep their own protocol on the wire: a Java client sees each hold as an
/// ordinary hold of that lock.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// use redisson_lock::{LockClient, MultiMember};
/// let east = LockClient::connect("redis://redis-east.internal:6379").await?;
/// let west = LockClient::connect("redis://redis-west.internal:6379").await?;
/// let accounts = east.multi_lock([
///     MultiMember::from(east.lock("account:17")?),
///     west.fair_lock("account:42")?.into(),
/// ])?;
/// let me = east.new_owner();
/// let both = accounts.lock(&me).await?; // all members, or none
/// // ... move money between the two accounts ...
/// both.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    members: Vec<Handle>,
    lease: Lease,
    quorum: Quorum,
}

/// A majority of independent locks: Redisson's deprecated `RedissonRedLock`, after the
/// Redlock algorithm.
///
/// The members should live on independent Redis servers. A hold needs `n / 2 + 1` of them;
/// each member gets at most `max(remaining wait / n, 1 ms)`; with a fixed lease, the hold is
/// valid for the lease minus the time acquiring took and a clock-drift allowance
/// (1% of the lease plus 2 ms), and is given up when nothing of it is left.
///
/// # Why it is deprecated
/// Redisson deprecates RedLock, and so do we: it assumes that the servers' clocks run at the
/// same rate and that a paused process notices its lease ran out, and it gives the protected
/// resource no way to tell a stale holder from the current one. Where correctness matters,
/// use a [`FencedLock`] and have the resource check its token.
#[derive(Clone)]
pub struct RedLock {
    inner: MultiLock,
}

impl MultiLock {
    /// A multi-lock over `members`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `members` is empty.
    pub fn new(members: impl IntoIterator<Item = impl Into<MultiMember>>) -> Result<MultiLock> {
        MultiLock::with_quorum(members, Quorum::All)
    }

    fn with_quorum(
        members: impl IntoIterator<Item = impl Into<MultiMember>>,
        quorum: Quorum,
    ) -> Result<MultiLock> {
        let mut members: Vec<Handle> = members.into_iter().map(|m| m.into().0).collect();
        if members.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one member"));
        }
        members.sort_by(|a, b| {
            let (a_key, b_key) = (&a.target().keys.raw, &b.target().keys.raw);
            (a.server(), a_key).cmp(&(b.server(), b_key))
        });
        Ok(MultiLock {
            members,
            lease: Lease::WATCHDOG,
            quorum,
        })
    }

    /// The same multi-lock with another lease for the holds it takes (each member's lease).
    pub fn with_lease(mut self, lease: Lease) -> MultiLock {
        self.lease = lease;
        self
    }

    /// The members' names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.name()).collect()
    }

    /// Takes every member for `owner`, waiting as long as it takes.
    ///
    /// Like Redisson's `lock()`, this repeats bounded attempts: each waits up to 1.5 s per
    /// member (with the watchdog lease), or a random part of a fixed lease.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future releases the members taken so far (in the
    /// background), and a member taken by a script already on the wire is released when its
    /// reply arrives.
    ///
    /// # Errors
    /// [`Error::Closed`] once a member's client was shut down. A member that cannot be
    /// reached counts as not acquired (the attempt is repeated), as in Redisson.
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<MultiLockGuard>> + Send + 'static {
        let (multi, owner) = (self.clone(), owner.clone());
        async move {
            loop {
                let wait = multi.attempt_wait();
                if let Some(guard) = multi.acquire(&owner, wait).await? {
                    return Ok(guard);
                }
            }
        }
    }

    /// One pass over the members without waiting on any. `Ok(None)` when one is busy (the
    /// members taken are released).
    ///
    /// # Cancel safety
    /// As [`lock`](MultiLock::lock).
    ///
    /// # Errors
    /// As [`lock`](MultiLock::lock).
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<MultiLockGuard>>> + Send + 'static {
        let (multi, owner) = (self.clone(), owner.clone());
        async move { multi.acquire(&owner, Duration::ZERO).await }
    }

    /// Takes every member for `owner` within `wait`; `Ok(None)` when the wait ran out (the
    /// members taken are released).
    ///
    /// # Cancel safety
    /// As [`lock`](MultiLock::lock).
    ///
    /// # Errors
    /// As [`lock`](MultiLock::lock); also [`Error::InvalidArgument`] when `wait` is too
    /// long to represent.
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<MultiLockGuard>>> + Send + 'static {
        let (multi, owner) = (self.clone(), owner.clone());
        async move { multi.acquire(&owner, wait).await }
    }

    /// Whether `owner` holds every member (a majority, for a [`RedLock`]).
    ///
    /// # Errors
    /// [`Error::Redis`] when a member's server cannot be reached.
    pub async fn is_held_by(&self, owner: &LockOwner) -> Result<bool> {
        let mut held = 0;
        for member in &self.members {
            if member.hold_count(owner).await? > 0 {
                held += 1;
            }
        }
        Ok(held >= self.needed())
    }

    fn needed(&self) -> usize {
        match self.quorum {
            Quorum::All => self.members.len(),
            Quorum::Majority => self.members.len() / 2 + 1,
        }
    }

    /// The wait of one bounded attempt of `lock()` (Redisson's choice).
    fn attempt_wait(&self) -> Duration {
        let base = Duration::from_millis(1500) * self.members.len() as u32;
        match self.lease.fixed_duration() {
            None => base,
            Some(lease) if lease <= base => between(lease / 2, lease),
            Some(lease) => between(base, lease),
        }
    }

    /// Redisson's acquisition (protocol §6.1): members in order, each with a bounded wait; a
    /// failure beyond the quorum's allowance releases what was taken and starts over while
    /// the wait lasts. A zero `wait` makes one pass.
    async fn acquire(&self, owner: &LockOwner, wait: Duration) -> Result<Option<MultiLockGuard>> {
        let n = self.members.len();
        let allowed_failures = n - self.needed();
        let deadline = if wait.is_zero() {
            None
        } else {
            Some(deadline_after(wait)?)
        };
        loop {
            // A fixed lease's validity counts from the start of the round that took it.
            let start = Instant::now();
            let mut taken: Vec<LockGuard<Member>> = Vec::with_capacity(n);
            let mut failures_left = allowed_failures;
            let mut round_failed = false;
            let mut member_failed = false;
            for member in &self.members {
                let member = member.clone().with_lease(self.lease);
                let outcome = match deadline {
                    None => bounded(member.acquire(owner, Wait::Once), None).await,
                    Some(deadline) => {
                        let remaining = deadline.saturating_duration_since(Instant::now());
                        let member_wait = match self.quorum {
                            Quorum::All => remaining,
                            Quorum::Majority => {
                                (remaining / n as u32).max(Duration::from_millis(1))
                            }
                        }
                        .min(remaining);
                        let limit = Wait::from_limit(member_wait)?;
                        bounded(member.acquire(owner, limit), Some(member_wait)).await
                    }
                };
                member_failed |= matches!(outcome, Err(Failure::Unreachable));
                match outcome {
                    Ok(Some(guard)) => taken.push(guard),
                    Ok(None) | Err(Failure::Unreachable) => {
                        // Redisson's `n - acquired == failedLocksLimit`: the quorum is
                        // already held, the rest are not needed.
                        if taken.len() >= self.needed() {
                            break;
                        }
                        if failures_left == 0 {
                            round_failed = true;
                            break;
                        }
                        failures_left -= 1;
                    }
                    Err(Failure::Fatal(error)) => {
                        release_all(taken).await;
                        return Err(error);
                    }
                }
                if deadline.is_some_and(|d| Instant::now() >= d) && taken.len() < self.needed() {
                    round_failed = true;
                    break;
                }
            }
            if !round_failed && taken.len() >= self.needed() {
                let fixed = self.lease.fixed_duration();
                let validity = match fixed {
                    None => None,
                    Some(lease) => {
                        let drift = lease / 100 + Duration::from_millis(2);
                        match lease.checked_sub(start.elapsed() + drift) {
                            Some(left) if !left.is_zero() => Some(Instant::now() + left),
                            _ => None,
                        }
                    }
                };
                if fixed.is_none() || validity.is_some() {
                    return Ok(Some(MultiLockGuard {
                        guards: taken,
                        needed: self.needed(),
                        valid_until: validity,
                    }));
                }
            }
            release_all(taken).await;
            match deadline {
                Some(deadline) if Instant::now() < deadline => {
                    if member_failed {
                        // An error comes back at once: pause, rather than go round as fast
                        // as the servers answer.
                        let left = deadline.saturating_duration_since(Instant::now());
                        tokio::time::sleep(failed_round_pause().min(left)).await;
                    }
                }
                _ => return Ok(None),
            }
        }
    }
}

impl RedLock {
    /// A RedLock over `members`, which should live on independent servers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `members` is empty.
    pub fn new(members: impl IntoIterator<Item = impl Into<MultiMember>>) -> Result<RedLock> {
        Ok(RedLock {
            inner: MultiLock::with_quorum(members, Quorum::Majority)?,
        })
    }

    /// The multi-lock with a majority quorum underneath.
    #[cfg(feature = "blocking")]
    pub(crate) fn into_multi_lock(self) -> MultiLock {
        self.inner
    }

    /// The same RedLock with another lease for the holds it takes.
    pub fn with_lease(self, lease: Lease) -> RedLock {
        RedLock {
            inner: self.inner.with_lease(lease),
        }
    }

    /// The members' names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.inner.names()
    }

    /// Takes a majority of the members, waiting as long as it takes.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    ///
    /// # Errors
    /// As [`MultiLock::lock`]. Unreachable servers count as members not acquired.
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<MultiLockGuard>> + Send + 'static {
        self.inner.lock(owner)
    }

    /// One pass over the members; `Ok(None)` without a majority.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    ///
    /// # Errors
    /// As [`MultiLock::lock`].
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<MultiLockGuard>>> + Send + 'static {
        self.inner.try_lock(owner)
    }

    /// Takes a majority within `wait`; `Ok(None)` when the wait ran out.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    ///
    /// # Errors
    /// As [`MultiLock::try_lock_for`].
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<MultiLockGuard>>> + Send + 'static {
        self.inner.try_lock_for(owner, wait)
    }

    /// Whether `owner` holds a majority of the members.
    ///
    /// # Errors
    /// [`Error::Redis`] when a member's server cannot be reached.
    pub async fn is_held_by(&self, owner: &LockOwner) -> Result<bool> {
        self.inner.is_held_by(owner).await
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("members", &self.names())
            .field("lease", &self.lease)
            .field("needed", &self.needed())
            .finish()
    }
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("members", &self.inner.names())
            .field("lease", &self.inner.lease)
            .finish()
    }
}

/// Why a member was not taken.
enum Failure {
    /// Its server did not answer in time, or answered with an error: counts as a member
    /// not acquired.
    Unreachable,
    /// A mistake of the caller's (a wait too long to represent, a shut-down client, a
    /// non-reentrant member its owner holds already, a key of another type): stop.
    Fatal(Error),
}

/// Runs one member's acquisition, bounded by `limit` (plus a margin for the reply) so that
/// an unreachable server cannot stall the whole multi-lock.
async fn bounded(
    acquire: impl Future<Output = Result<Option<LockGuard<Member>>>>,
    limit: Option<Duration>,
) -> std::result::Result<Option<LockGuard<Member>>, Failure> {
    let outcome = match limit {
        Some(limit) => match tokio::time::timeout(limit + Duration::from_millis(50), acquire).await
        {
            Ok(outcome) => outcome,
            // Dropped mid-flight: a hold it may still take is released by the engine.
            Err(_) => return Err(Failure::Unreachable),
        },
        None => acquire.await,
    };
    match outcome {
        Ok(guard) => Ok(guard),
        Err(
            error @ (Error::InvalidArgument(_)
            | Error::Closed
            | Error::WrongType { .. }
            | Error::WouldDeadlock(_)
            | Error::UnexpectedReply { .. }),
        ) => Err(Failure::Fatal(error)),
        Err(error) => {
            tracing::debug!(%error, "multi-lock member not acquired");
            Err(Failure::Unreachable)
        }
    }
}

/// Releases members taken by an attempt that did not succeed; errors are ignored (the holds
/// expire with their leases).
async fn release_all(taken: Vec<LockGuard<Member>>) {
    let mut releases = JoinSet::new();
    for guard in taken {
        releases.spawn(guard.unlock());
    }
    while releases.join_next().await.is_some() {}
}

mod guard;
pub use guard::MultiLockGuard;
