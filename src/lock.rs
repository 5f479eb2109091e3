//! The reentrant lock: Redisson's `RLock` (protocol §3).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};
use fred::types::Value;
use tokio::time::Instant;

use crate::acquire::{self, deadline_after, Attempt, InFlight, Reply};
use crate::engine::{map_redis_error, nil_or_int, Engine, RELEASE_ATTEMPTS};
use crate::error::{Error, Result};
use crate::fair_lock::{epoch_millis, Pace, QueueExit};
use crate::guard::{release_in_background, Finishing, Lease, Renewal};
use crate::keys::{self, LockKeys, READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE};
use crate::script::{
    Script, FAIR_ACQUIRE, FAIR_ACQUIRE_FAILED, FAIR_FORCE_RELEASE, FAIR_RELEASE, LOCK_ACQUIRE,
    LOCK_FORCE_RELEASE, LOCK_RELEASE, READ_ACQUIRE, READ_FORCE_RELEASE, READ_LOCKED, READ_RELEASE,
    WRITE_ACQUIRE, WRITE_FORCE_RELEASE, WRITE_RELEASE,
};
use crate::watchdog::{millis, HoldKey, Renew};
use crate::LockOwner;
// Fenced, spin and non-reentrant locks (protocol §7, §8).
use crate::acquire::Wake;
use crate::keys::NON_REENTRANT_REACQUIRE;
use crate::script::{FENCED_ACQUIRE, SPIN_FORCE_RELEASE};
use crate::wait::WaitStrategy;

/// A reentrant distributed lock, shared with Java's `RLock` of the same name.
///
/// The lock is not fair: when it is freed, any waiter (in this process or another, Rust or
/// Java) may get it. Use a fair lock where the order matters.
///
/// A `Lock` is a cheap handle (no I/O to make one, `Clone`, `Send + Sync`). It holds no
/// owner: every call names the [`LockOwner`] it acts for, and the same owner re-enters.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.lock("orders:42");
/// let guard = lock.lock(&me).await?;
/// let again = lock.lock(&me).await?; // re-entered: hold count 2
/// again.unlock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    engine: Arc<Engine>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    lease: Lease,
    kind: Kind,
    wait: WaitStrategy,
    /// Redisson's non-reentrant variants (protocol §8.2, §8.3) of the reentrant and fair
    /// kinds: the acquire scripts get the extra argument and refuse a re-entry.
    refuse_reentry: bool,
}

/// Which Redisson lock a handle speaks. All of them keep their holds in the same hash
/// layout and share this module's handle, guard, waiting and release logic; they differ
/// only in the scripts they send (see the `*_call` methods of [`Lock`]) and in the hash
/// field of a hold (see [`Lock::field`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `RLock` (protocol §3).
    Reentrant,
    /// `RFairLock` (protocol §4): FIFO through a queue and a deadline set, each waiter woken
    /// on its own channel.
    Fair,
    /// The read side of `RReadWriteLock` (protocol §5): shared holds under the owner's
    /// field, each with its own timeout key, renewed by the watchdog's reader batch.
    Read,
    /// The write side of `RReadWriteLock` (protocol §5): an exclusive hold under the field
    /// `<owner>:write`.
    Write,
    /// `RFencedLock` (protocol §7): `RLock` whose every acquisition also takes a token.
    Fenced,
    /// `RSpinLock` (protocol §8.1): `RLock`'s acquire; releases publish nothing.
    Spin,
}

/// The write acquire's reply when the owner holds only read holds (see
/// `lua/write_acquire.lua`); no PTTL is ever negative beyond -2.
const UPGRADE_REFUSED: i64 = -3;

/// One script call, ready to send.
pub(crate) struct Call {
    script: &'static Script,
    keys: Vec<Value>,
    args: Vec<Value>,
}

/// How long an acquisition may wait.
#[derive(Clone, Copy)]
pub(crate) enum Wait {
    Once,
    /// Until the deadline; the duration is the whole wait it was made from (a fair waiter's
    /// wait in the queue, as Redisson's `waitTime`).
    Until(Instant, Duration),
    Forever,
}

impl Wait {
    pub(crate) fn from_limit(wait: Duration) -> Result<Wait> {
        if wait.is_zero() {
            Ok(Wait::Once)
        } else {
            deadline_after(wait).map(|deadline| Wait::Until(deadline, wait))
        }
    }
}

impl Lock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, kind: Kind) -> Lock {
        let raw = format!("{}{name}", engine.settings.name_prefix);
        Lock {
            engine,
            name: name.into(),
            keys: Arc::new(LockKeys::new(&raw)),
            lease: Lease::Watchdog,
            kind,
            wait: match kind {
                Kind::Spin => WaitStrategy::Spin(Default::default()),
                _ => WaitStrategy::PubSub,
            },
            refuse_reentry: false,
        }
    }

    /// The non-reentrant variant of this reentrant or fair lock (protocol §8.2, §8.3).
    pub(crate) fn refusing_reentry(mut self) -> Lock {
        debug_assert!(matches!(self.kind, Kind::Reentrant | Kind::Fair));
        self.refuse_reentry = true;
        self
    }

    /// The same lock with another way of waiting for the holds it waits for from now on.
    /// [`WaitStrategy::Spin`] never subscribes and notices releases that publish nothing
    /// (spin-lock unlocks, plain `DEL`s) within one back-off step.
    pub fn with_wait_strategy(mut self, wait: WaitStrategy) -> Lock {
        self.wait = wait;
        self
    }

    /// How this handle waits.
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.wait
    }

    /// The same lock with another lease policy for the holds it takes from now on.
    /// [`Lease::Fixed`] disables the watchdog for those holds.
    pub fn with_lease(mut self, lease: Lease) -> Lock {
        self.lease = lease;
        self
    }

    /// The name as given to [`LockClient::lock`](crate::LockClient::lock).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease policy of this handle.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// Takes the lock for `owner`, waiting as long as it takes.
    ///
    /// If `owner` already holds it, this re-enters at once (the hold count grows by one; the
    /// key lives at least this lease from now, never less than before). Waiting is woken by the unlock message of whoever releases the
    /// lock, Java clients included, and in any case when the holder's lease runs out; with
    /// [`WaitStrategy::Spin`] it polls by its back-off instead.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future at any point leaves no hold behind. A hold taken by
    /// a script that was already on the wire is released as soon as its reply arrives. So
    /// `tokio::time::timeout(lock.lock(&owner), d)` is safe, though [`try_lock_for`]
    /// says what it means more directly.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached at the first attempt (while waiting,
    /// transient errors are retried until Redis has been unreachable for `watchdog_timeout`),
    /// [`Error::WrongType`] when the key is not a lock hash, [`Error::InvalidArgument`] for an
    /// empty name or a bad lease, [`Error::Closed`] after shutdown. When the connection fails
    /// while the acquire script is on the wire, the script may still have taken the hold; it
    /// is then never renewed and frees itself when its lease runs out.
    ///
    /// [`try_lock_for`]: Lock::try_lock_for
    pub fn lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<LockGuard>> + Send + 'static {
        let (lock, owner) = (self.clone(), owner.clone());
        async move {
            let guard = lock.acquire(&owner, Wait::Forever).await?;
            guard.ok_or_else(|| unreachable_wait("lock"))
        }
    }

    /// One attempt: takes (or re-enters) the lock if it is free for `owner`, without waiting.
    /// `Ok(None)` when someone else holds it.
    ///
    /// # Cancel safety
    /// As [`lock`](Lock::lock): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`lock`](Lock::lock).
    pub fn try_lock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        let (lock, owner) = (self.clone(), owner.clone());
        async move { lock.acquire(&owner, Wait::Once).await }
    }

    /// Takes the lock for `owner`, waiting at most `wait`. `Ok(None)` when the wait ran out.
    /// A zero `wait` makes exactly one attempt, like [`try_lock`](Lock::try_lock).
    ///
    /// # Cancel safety
    /// As [`lock`](Lock::lock): dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// As [`lock`](Lock::lock); also [`Error::InvalidArgument`] when `wait` is too long to
    /// add to the current time (use [`lock`](Lock::lock) to wait without a limit).
    pub fn try_lock_for(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'static {
        let (lock, owner) = (self.clone(), owner.clone());
        async move {
            let wait = Wait::from_limit(wait)?;
            lock.acquire(&owner, wait).await
        }
    }

    /// Releases one hold of `owner` without a guard, Java style: the counterpart of a guard
    /// given up with [`LockGuard::detach`]. The lock is freed (and its waiters told) when the
    /// last hold is released; until then the key lives on for the owner's other holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when `owner` holds nothing (nothing changes on the server),
    /// [`Error::Redis`] when Redis could not be reached even after resending (resending is
    /// safe: Redisson's unlock latch makes the release happen at most once).
    pub async fn unlock(&self, owner: &LockOwner) -> Result<()> {
        self.check_name()?;
        let lease_ms = self.lease.millis(&self.engine)?;
        let (generation, keep_alive) = self.engine.watchdog.plan_unlock(&self.hold_key(owner));
        let lease_ms = keep_alive.map_or(lease_ms, millis);
        match self
            .release_settled(owner, lease_ms, generation, false)
            .await?
        {
            Released::NotHeld => Err(self.not_held(owner)),
            Released::Partly | Released::Fully => Ok(()),
        }
    }

    /// Frees the lock whoever holds it, and wakes its waiters. `true` when it was held (for
    /// a read or write side: held in that mode).
    ///
    /// # Correctness
    /// This breaks mutual exclusion for the current holder, which goes on believing it holds
    /// the lock until its guard's [`lease_lost`](LockGuard::lease_lost) fires (at the next
    /// watchdog renewal, when the holder is in this process or uses a watchdog).
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::InvalidArgument`] for an empty
    /// name.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        let Call { script, keys, args } = self.force_release_call();
        let registered = self.engine.watchdog.generations_of_key(&self.keys.raw);
        let reply = self.engine.run(script, &self.keys.raw, keys, args).await?;
        let freed = matches!(reply, Value::Integer(1));
        // Nothing was deleted otherwise: a read-write lock held in the other mode keeps
        // its holds (and their renewal).
        if freed {
            for (hold, generation) in registered {
                self.engine.watchdog.forget(&hold, Some(generation));
            }
        }
        Ok(freed)
    }

    /// Whether anyone (in any process) holds the lock.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached, [`Error::WrongType`] when the key is
    /// not a lock hash.
    pub async fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        self.engine.check_open()?;
        let raw = &*self.keys.raw;
        match self.kind {
            // HLEN, not EXISTS: like `hold_count`, it fails on a key of another type; it is 0
            // only for a missing key.
            Kind::Reentrant | Kind::Fair | Kind::Fenced | Kind::Spin => {
                let fields: i64 = self
                    .engine
                    .redis
                    .hlen(raw)
                    .await
                    .map_err(|e| map_redis_error(e, raw))?;
                Ok(fields > 0)
            }
            // Read mode, or write mode where the writer also holds read holds (§5.7).
            Kind::Read => {
                let reply = self
                    .engine
                    .run(&READ_LOCKED, raw, vec![key(raw)], Vec::new())
                    .await?;
                Ok(matches!(reply, Value::Integer(1)))
            }
            Kind::Write => {
                let mode: Option<String> = self
                    .engine
                    .redis
                    .hget(raw, "mode")
                    .await
                    .map_err(|e| map_redis_error(e, raw))?;
                Ok(mode.as_deref() == Some("write"))
            }
        }
    }

    /// Whether `owner` holds the lock.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached, [`Error::WrongType`] when the key is
    /// not a lock hash.
    pub async fn is_held_by(&self, owner: &LockOwner) -> Result<bool> {
        Ok(self.hold_count(owner).await? > 0)
    }

    /// How many times `owner` holds the lock (0 when it does not).
    ///
    /// # Errors
    /// As [`is_held_by`](Lock::is_held_by).
    pub async fn hold_count(&self, owner: &LockOwner) -> Result<u64> {
        self.check_name()?;
        self.engine.check_open()?;
        let count: Option<i64> = self
            .engine
            .redis
            .hget(&*self.keys.raw, &*self.field(owner))
            .await
            .map_err(|e| map_redis_error(e, &self.keys.raw))?;
        Ok(count.unwrap_or(0).max(0) as u64)
    }

    /// How long the current hold lasts unless renewed or released; `None` when the lock is
    /// free. A hold without expiry (possible only if something ran `PERSIST` on the key)
    /// reports `Duration::MAX`.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.check_name()?;
        self.engine.check_open()?;
        let pttl: i64 = self.engine.redis.pttl(&*self.keys.raw).await?;
        Ok(match pttl {
            -2 => None,
            ms if ms < 0 => Some(Duration::MAX),
            ms => Some(Duration::from_millis(ms as u64)),
        })
    }

    /// The fenced lock's token counter (protocol §7: `GET`, a missing key reads as 0).
    pub(crate) async fn current_fence_token(&self) -> Result<u64> {
        self.check_name()?;
        self.engine.check_open()?;
        let counter = self.keys.fence_token();
        let token: Option<i64> = self
            .engine
            .redis
            .get(&counter)
            .await
            .map_err(|e| map_redis_error(e, &counter))?;
        Ok(token.unwrap_or(0).max(0) as u64)
    }

    /// The Redis key of the lock hash (the name after the client's prefix).
    pub(crate) fn raw_key(&self) -> &str {
        &self.keys.raw
    }

    /// The server this handle's client talks to, for ordering multi-lock members.
    pub(crate) fn server(&self) -> &str {
        &self.engine.server
    }

    pub(crate) async fn acquire(&self, owner: &LockOwner, wait: Wait) -> Result<Option<LockGuard>> {
        self.check_name()?;
        self.engine.check_open()?;
        let lease_ms = self.lease.millis(&self.engine)?;
        let attempt = || self.attempt(owner, lease_ms, wait);
        let deadline = match wait {
            Wait::Once => {
                return Ok(match attempt().await? {
                    Attempt::Acquired(guard) => Some(guard),
                    Attempt::Busy { .. } => None,
                })
            }
            Wait::Until(deadline, _) => Some(deadline),
            Wait::Forever => None,
        };
        let channel = self.wait_channel(owner);
        let wake = match self.wait {
            WaitStrategy::PubSub => Wake::Messages(&channel),
            WaitStrategy::Spin(backoff) => Wake::Spin(backoff),
        };
        match self.kind {
            Kind::Reentrant | Kind::Read | Kind::Write | Kind::Fenced | Kind::Spin => {
                acquire::acquire(&self.engine, wake, deadline, attempt).await
            }
            Kind::Fair => {
                // Queued from the first attempt on: whatever ends the wait without the lock
                // (deadline, error, drop) takes the waiter out of the queue at once.
                let exit = QueueExit::arm(self.clone(), owner.clone(), self.fair_wait_ms(wait));
                let pace = &Pace::new();
                let attempt = move || pace.paced(attempt());
                match acquire::acquire(&self.engine, wake, deadline, attempt).await {
                    Ok(Some(guard)) => {
                        exit.disarm();
                        Ok(Some(guard))
                    }
                    Ok(None) => {
                        exit.leave().await;
                        Ok(None)
                    }
                    // Dropping `exit` leaves the queue in the background.
                    Err(error) => Err(error),
                }
            }
        }
    }

    /// Sends one acquire script; on success registers the hold and builds its guard in the
    /// same poll, so no cancellation point separates the reply from the guard.
    fn attempt(
        &self,
        owner: &LockOwner,
        lease_ms: i64,
        wait: Wait,
    ) -> impl Future<Output = Result<Attempt<LockGuard>>> + Send + 'static {
        let sent_at = Instant::now();
        let Call { script, keys, args } = self.acquire_call(owner, lease_ms, wait);
        let call = self.engine.scripts.run(script, keys, args);
        let raw = self.keys.raw.clone();
        let upgrade = (self.kind == Kind::Write).then(|| (self.name.clone(), owner.clone()));
        let refusal = self
            .refuse_reentry
            .then(|| (self.name.clone(), owner.clone()));
        let in_flight = InFlight::new(
            Box::pin(async move {
                let reply = call.await.map_err(|e| match &refusal {
                    Some((name, owner)) if e.details().contains(NON_REENTRANT_REACQUIRE) => {
                        Error::WouldDeadlock(
                            format!(
                                "{owner} already holds non-reentrant lock {name:?}; \
                                 taking it again would wait for itself"
                            )
                            .into(),
                        )
                    }
                    _ => map_redis_error(e, &raw),
                })?;
                match (Reply::read(script, reply)?, upgrade) {
                    (Reply::Taken { new_hold, token }, _) => {
                        Ok(Attempt::Acquired((new_hold, token)))
                    }
                    (Reply::Busy(UPGRADE_REFUSED), Some((name, owner))) => {
                        Err(Error::WouldDeadlock(
                            format!(
                                "{owner} holds read-write lock {name:?} for reading only; \
                             upgrading to write is refused, as it would wait for itself"
                            )
                            .into(),
                        ))
                    }
                    (Reply::Busy(ms), _) => Ok(Attempt::busy(ms)),
                }
            }),
            {
                // Nobody took this hold: release it, keeping the key alive for the owner's
                // other holds should it have been a re-entry.
                let (lock, owner) = (self.clone(), owner.clone());
                move |_| {
                    Box::pin(async move {
                        let keep_alive = lock.engine.watchdog.keep_alive(&lock.hold_key(&owner));
                        let lease_ms = keep_alive.map_or(lease_ms, millis);
                        drop(lock.release(&owner, lease_ms).await)
                    })
                }
            },
        );
        let (lock, owner) = (self.clone(), owner.clone());
        async move {
            Ok(match in_flight.await? {
                Attempt::Acquired((new_hold, token)) => {
                    Attempt::Acquired(lock.guard(owner, sent_at, token, new_hold))
                }
                Attempt::Busy { ttl } => Attempt::Busy { ttl },
            })
        }
    }

    /// The channel a waiter of `owner` listens on.
    fn wait_channel(&self, owner: &LockOwner) -> Arc<str> {
        match self.kind {
            // A spin lock's waiters never subscribe (its releases publish nothing); a
            // `Lock` switched to spinning has the channel but does not use it either.
            Kind::Reentrant | Kind::Fenced | Kind::Spin => self.keys.channel.clone(),
            Kind::Fair => self.keys.fair_waiter_channel(owner.field()).into(),
            Kind::Read | Kind::Write => self.keys.rw_channel().into(),
        }
    }

    /// The acquire script of this kind for one attempt of a wait of kind `wait`.
    fn acquire_call(&self, owner: &LockOwner, lease_ms: i64, wait: Wait) -> Call {
        match self.kind {
            Kind::Reentrant | Kind::Spin => Call {
                script: &LOCK_ACQUIRE,
                keys: vec![key(&self.keys.raw)],
                args: self.with_refusal(vec![Value::from(lease_ms), Value::from(&**owner.field())]),
            },
            Kind::Fenced => Call {
                script: &FENCED_ACQUIRE,
                keys: vec![key(&self.keys.raw), key(&self.keys.fence_token())],
                args: vec![Value::from(lease_ms), Value::from(&**owner.field())],
            },
            Kind::Fair => {
                let keys = vec![
                    key(&self.keys.raw),
                    key(&self.keys.fair_queue()),
                    key(&self.keys.fair_timeouts()),
                ];
                let lease = Value::from(lease_ms);
                let owner = Value::from(&**owner.field());
                let now = Value::from(epoch_millis());
                let wait_ms = Value::from(self.fair_wait_ms(wait));
                // The no-wait form (one attempt) never joins the queue.
                let join = Value::from(if matches!(wait, Wait::Once) { "0" } else { "1" });
                Call {
                    script: &FAIR_ACQUIRE,
                    keys,
                    args: self.with_refusal(vec![lease, owner, wait_ms, now, join]),
                }
            }
            Kind::Read => Call {
                script: &READ_ACQUIRE,
                keys: vec![
                    key(&self.keys.raw),
                    key(&self.keys.read_timeout_prefix(owner.field())),
                ],
                args: vec![
                    Value::from(lease_ms),
                    Value::from(&*self.field(owner)),
                    Value::from(keys::write_field(owner.field())),
                ],
            },
            // The read field lets the script refuse an upgrade (UPGRADE_REFUSED).
            Kind::Write => Call {
                script: &WRITE_ACQUIRE,
                keys: vec![key(&self.keys.raw)],
                args: vec![
                    Value::from(lease_ms),
                    Value::from(&*self.field(owner)),
                    Value::from(&**owner.field()),
                ],
            },
        }
    }

    /// `args` of a reentrant or fair acquire, plus the error a non-reentrant variant makes
    /// the script reply to a re-entry (protocol §8.2, §8.3).
    fn with_refusal(&self, mut args: Vec<Value>) -> Vec<Value> {
        if self.refuse_reentry {
            args.push(Value::from(NON_REENTRANT_REACQUIRE));
        }
        args
    }

    /// A fair waiter's wait in the queue (protocol §4.1): the caller's limit for a timed
    /// wait, else the client's `fair_wait_timeout`.
    fn fair_wait_ms(&self, wait: Wait) -> i64 {
        match wait {
            Wait::Until(_, limit) => millis(limit).max(1),
            Wait::Once | Wait::Forever => millis(self.engine.settings.fair_wait_timeout),
        }
    }

    /// Takes `owner` out of this fair lock's queue (protocol §4.5): the waiters behind it
    /// move up by its wait `wait_ms`, and the next one is told if it is now first in line
    /// and the lock is free.
    pub(crate) async fn leave_queue(&self, owner: &LockOwner, wait_ms: i64) -> Result<()> {
        debug_assert_eq!(self.kind, Kind::Fair);
        let queue = self.keys.fair_queue();
        let keys = vec![
            key(&queue),
            key(&self.keys.fair_timeouts()),
            key(&self.keys.raw),
            key(&self.keys.channel),
        ];
        let args = vec![
            Value::from(&**owner.field()),
            Value::from(wait_ms),
            Value::from(UNLOCK_MESSAGE),
            Value::from(self.engine.publish_command()),
        ];
        self.engine
            .run(&FAIR_ACQUIRE_FAILED, &queue, keys, args)
            .await
            .map(drop)
    }

    /// The release script of this kind; `latch` names the request's unlock latch.
    fn release_call(&self, owner: &LockOwner, lease_ms: i64, latch: &str) -> Call {
        let latch_ttl = Value::from(crate::watchdog::millis(self.engine.latch_ttl()));
        match self.kind {
            // A spin lock's waiters poll: its empty publish command publishes nothing.
            Kind::Reentrant | Kind::Fenced | Kind::Spin => Call {
                script: &LOCK_RELEASE,
                keys: vec![key(&self.keys.raw), key(&self.keys.channel), key(latch)],
                args: vec![
                    Value::from(UNLOCK_MESSAGE),
                    Value::from(lease_ms),
                    Value::from(&**owner.field()),
                    Value::from(match self.kind {
                        Kind::Spin => "",
                        _ => self.engine.publish_command(),
                    }),
                    latch_ttl,
                ],
            },
            Kind::Fair => Call {
                script: &FAIR_RELEASE,
                keys: vec![
                    key(&self.keys.raw),
                    key(&self.keys.fair_queue()),
                    key(&self.keys.fair_timeouts()),
                    key(&self.keys.channel),
                    key(latch),
                ],
                args: vec![
                    Value::from(UNLOCK_MESSAGE),
                    Value::from(lease_ms),
                    Value::from(&**owner.field()),
                    Value::from(epoch_millis()),
                    Value::from(self.engine.publish_command()),
                    latch_ttl,
                ],
            },
            // A read release ignores the lease: the TTL shrinks to the longest live reader's.
            Kind::Read => Call {
                script: &READ_RELEASE,
                keys: vec![
                    key(&self.keys.raw),
                    key(&self.keys.rw_channel()),
                    key(&self.keys.read_timeout_prefix(owner.field())),
                    key(&self.keys.read_key_prefix()),
                    key(latch),
                ],
                args: vec![
                    Value::from(UNLOCK_MESSAGE),
                    Value::from(&*self.field(owner)),
                    Value::from(self.engine.publish_command()),
                    latch_ttl,
                ],
            },
            Kind::Write => Call {
                script: &WRITE_RELEASE,
                keys: vec![
                    key(&self.keys.raw),
                    key(&self.keys.rw_channel()),
                    key(latch),
                ],
                args: vec![
                    Value::from(READ_UNLOCK_MESSAGE),
                    Value::from(lease_ms),
                    Value::from(&*self.field(owner)),
                    Value::from(self.engine.publish_command()),
                    latch_ttl,
                ],
            },
        }
    }

    /// The script that frees the lock whoever holds it.
    fn force_release_call(&self) -> Call {
        match self.kind {
            Kind::Spin => Call {
                script: &SPIN_FORCE_RELEASE,
                keys: vec![key(&self.keys.raw)],
                args: Vec::new(),
            },
            Kind::Reentrant | Kind::Fenced => Call {
                script: &LOCK_FORCE_RELEASE,
                keys: vec![key(&self.keys.raw), key(&self.keys.channel)],
                args: vec![
                    Value::from(UNLOCK_MESSAGE),
                    Value::from(self.engine.publish_command()),
                ],
            },
            Kind::Fair => Call {
                script: &FAIR_FORCE_RELEASE,
                keys: vec![
                    key(&self.keys.raw),
                    key(&self.keys.fair_queue()),
                    key(&self.keys.fair_timeouts()),
                    key(&self.keys.channel),
                ],
                args: vec![
                    Value::from(UNLOCK_MESSAGE),
                    Value::from(epoch_millis()),
                    Value::from(self.engine.publish_command()),
                ],
            },
            Kind::Read | Kind::Write => Call {
                script: if self.kind == Kind::Read {
                    &READ_FORCE_RELEASE
                } else {
                    &WRITE_FORCE_RELEASE
                },
                keys: vec![key(&self.keys.raw), key(&self.keys.rw_channel())],
                args: vec![
                    Value::from(if self.kind == Kind::Read {
                        UNLOCK_MESSAGE
                    } else {
                        READ_UNLOCK_MESSAGE
                    }),
                    Value::from(self.engine.publish_command()),
                ],
            },
        }
    }

    fn guard(
        self,
        owner: LockOwner,
        sent_at: Instant,
        token: Option<u64>,
        new_hold: bool,
    ) -> LockGuard {
        let hold = self.hold_key(&owner);
        let renewal = Renewal::start(&self.engine, self.lease, hold, sent_at, new_hold);
        LockGuard {
            lock: self,
            owner,
            renewal,
            active: true,
            token,
        }
    }

    /// Releases one hold and brings the registry of holds in line with the reply.
    /// `generation`: the owner's entry when the release was sent. `by_guard`: the guard
    /// already gave up its part, so a partial release changes nothing more; otherwise
    /// (`Lock::unlock`) one hold of the entry goes. When the lock was freed or not held,
    /// that entry is forgotten (its other guards lose their hold with this one), never a
    /// newer one made by a later acquisition.
    async fn release_settled(
        &self,
        owner: &LockOwner,
        lease_ms: i64,
        generation: Option<u64>,
        by_guard: bool,
    ) -> Result<Released> {
        let hold = self.hold_key(owner);
        let released = self.release(owner, lease_ms).await?;
        match released {
            Released::Partly if !by_guard => self.engine.watchdog.release_one(&hold, generation),
            Released::Partly => {}
            Released::Fully | Released::NotHeld => self.engine.watchdog.forget(&hold, generation),
        }
        Ok(released)
    }

    /// Runs the release script, resending it with the same request id when the reply is
    /// lost (the latch replays the first outcome instead of releasing twice).
    async fn release(&self, owner: &LockOwner, lease_ms: i64) -> Result<Released> {
        let latch = self.keys.unlock_latch(&self.engine.latches.request_id());
        let Call { script, keys, args } = self.release_call(owner, lease_ms, &latch);
        let mut attempt = 1;
        let reply = loop {
            match self
                .engine
                .run(script, &self.keys.raw, keys.clone(), args.clone())
                .await
            {
                Err(error) if error.is_retryable() && attempt < RELEASE_ATTEMPTS => {
                    tracing::debug!(%error, lock = %self.name, "release failed; resending");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                    attempt += 1;
                }
                reply => break reply?,
            }
        };
        // The latch only serves resends of this request.
        self.engine.latches.answered(latch);
        Ok(match nil_or_int(script, reply)? {
            None => Released::NotHeld,
            Some(0) => Released::Partly,
            Some(_) => Released::Fully,
        })
    }

    /// The lease a partial release resets the key's TTL to: long enough for the owner's
    /// other holds that this client knows of, else this handle's lease.
    fn release_lease(&self, keep_alive: Option<Duration>) -> Result<i64> {
        match keep_alive {
            Some(keep_alive) => Ok(millis(keep_alive)),
            None => self.lease.millis(&self.engine),
        }
    }

    fn hold_key(&self, owner: &LockOwner) -> HoldKey {
        let renew = match self.kind {
            Kind::Reentrant | Kind::Fair | Kind::Write | Kind::Fenced | Kind::Spin => Renew::Field,
            Kind::Read => Renew::Reader {
                key_prefix: self.keys.read_key_prefix().into(),
            },
        };
        HoldKey {
            key: self.keys.raw.clone(),
            field: self.field(owner),
            renew,
        }
    }

    /// The hash field of `owner`'s holds of this kind: the owner's own field, or
    /// `<owner>:write` for a write hold (protocol §5.1). Every script and query of a hold
    /// names it through here.
    fn field(&self, owner: &LockOwner) -> Arc<str> {
        match self.kind {
            Kind::Reentrant | Kind::Fair | Kind::Read | Kind::Fenced | Kind::Spin => {
                owner.field().clone()
            }
            Kind::Write => keys::write_field(owner.field()).into(),
        }
    }

    fn not_held(&self, owner: &LockOwner) -> Error {
        Error::NotHeld {
            name: self.name.to_string(),
            owner: owner.clone(),
        }
    }

    fn check_name(&self) -> Result<()> {
        if self.name.is_empty() {
            Err(Error::invalid("a lock name must not be empty"))
        } else {
            Ok(())
        }
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish()
    }
}

/// What a release did.
enum Released {
    NotHeld,
    Partly,
    Fully,
}

fn key(name: &str) -> Value {
    Value::from(name)
}

fn unreachable_wait(method: &str) -> Error {
    Error::UnexpectedReply {
        script: "lock_acquire",
        detail: format!("{method} returned without a hold"),
    }
}

/// One hold of a [`Lock`]. Release it with [`unlock`](LockGuard::unlock).
///
/// Dropping the guard without `unlock` stops its renewal at once and releases the hold in
/// the background; `unlock().await` is the way to release it now and learn of errors.
#[must_use = "dropping the guard releases the lock in the background"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    lock: Lock,
    owner: LockOwner,
    renewal: Renewal,
    active: bool,
    /// The fencing token of a fenced hold, on its way to the [`FencedGuard`].
    ///
    /// [`FencedGuard`]: crate::FencedGuard
    token: Option<u64>,
}

impl LockGuard {
    /// Releases this hold (the lock is freed with its owner's last hold). A guard releases
    /// only the hold it acquired: if that hold was lost, a newer hold of the same owner is
    /// left alone.
    ///
    /// # Cancel safety
    /// Cancel-safe: the guard gives up its part when `unlock` is called, and a future dropped
    /// before it is done (even before its first poll) finishes the release in the
    /// background, resends included, exactly as a dropped guard does.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold was lost before (lease expired, force-unlocked, data
    /// lost; nothing is sent when this client already knows it); [`Error::Redis`] when Redis
    /// could not be reached even after resending. In the error case the hold, if it still
    /// exists, is no longer renewed and frees itself when its lease runs out.
    pub fn unlock(mut self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.active = false;
        let leaving = self.renewal.finish();
        let (lock, owner) = (self.lock.clone(), self.owner.clone());
        Finishing::new(async move {
            let Some(leaving) = leaving else {
                // Lost before: whatever the owner holds now is a newer hold, not this one.
                return Err(lock.not_held(&owner));
            };
            let lease_ms = lock.release_lease(leaving.keep_alive)?;
            let generation = Some(leaving.generation);
            match lock
                .release_settled(&owner, lease_ms, generation, true)
                .await?
            {
                Released::NotHeld => Err(lock.not_held(&owner)),
                Released::Partly | Released::Fully => Ok(()),
            }
        })
    }

    /// Gives up the guard but keeps the hold (and its watchdog renewal); release it later
    /// with [`Lock::unlock`], Java style.
    pub fn detach(mut self) {
        self.active = false;
        self.renewal.detach();
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &LockOwner {
        &self.owner
    }

    /// Completes when the hold is known to be lost: the watchdog found it gone, or could not
    /// reach Redis before the lease ran out, or (for a fixed lease) the lease ended.
    /// Meant for `tokio::select!` beside the work the lock protects.
    ///
    /// # Cancel safety
    /// Cancel-safe; it only watches.
    pub fn lease_lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.renewal.lost()
    }

    /// Whether [`lease_lost`](LockGuard::lease_lost) has completed.
    pub fn is_lease_lost(&self) -> bool {
        self.renewal.is_lost()
    }

    /// The fencing token this hold was taken with; `Some` exactly for fenced holds.
    pub(crate) fn fence_token(&self) -> Option<u64> {
        self.token
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let Some(leaving) = self.renewal.finish() else {
            // Lost before: the owner's newer hold, if any, is not this guard's to release.
            return;
        };
        let (lock, owner) = (self.lock.clone(), self.owner.clone());
        release_in_background(async move {
            let Ok(lease_ms) = lock.release_lease(leaving.keep_alive) else {
                return;
            };
            let generation = Some(leaving.generation);
            match lock
                .release_settled(&owner, lease_ms, generation, true)
                .await
            {
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, lock = %lock.name, "releasing a dropped guard failed; the hold expires with its lease")
                }
            }
        });
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lock.name)
            .field("owner", &self.owner)
            .finish()
    }
}
