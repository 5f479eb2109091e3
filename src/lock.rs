//! The reentrant lock: Redisson's `RLock` (protocol §3).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};
use fred::types::Value;
use tokio::time::Instant;

use crate::acquire::{self, deadline_after, Attempt, InFlight};
use crate::engine::{map_redis_error, nil_or_int, Engine, RELEASE_ATTEMPTS};
use crate::error::{Error, Result};
use crate::fair_lock::{epoch_millis, Pace, QueueExit};
use crate::guard::{release_in_background, Lease, Renewal};
use crate::keys::{LockKeys, UNLOCK_MESSAGE};
use crate::script::{
    Script, FAIR_ACQUIRE, FAIR_ACQUIRE_FAILED, FAIR_FORCE_RELEASE, FAIR_RELEASE, FAIR_TRY_ACQUIRE,
    LOCK_ACQUIRE, LOCK_FORCE_RELEASE, LOCK_RELEASE,
};
use crate::watchdog::{millis, HoldKey};
use crate::LockOwner;

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
}

/// Which Redisson lock a handle speaks. All of them keep their holds in the same hash
/// layout and share this module's handle, guard, waiting and release logic; they differ
/// only in the scripts they send (see the `*_call` methods of [`Lock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `RLock` (protocol §3).
    Reentrant,
    /// `RFairLock` (protocol §4): FIFO through a queue and a deadline set, each waiter woken
    /// on its own channel.
    Fair,
}

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
    fn from_limit(wait: Duration) -> Result<Wait> {
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
        }
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
    /// If `owner` already holds it, this re-enters at once (the hold count grows by one and
    /// the lease starts over). Waiting is woken by the unlock message of whoever releases the
    /// lock, Java clients included, and in any case when the holder's lease runs out.
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
    /// last hold is released; until then the lease starts over.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when `owner` holds nothing (nothing changes on the server),
    /// [`Error::Redis`] when Redis could not be reached even after resending (resending is
    /// safe: Redisson's unlock latch makes the release happen at most once).
    pub async fn unlock(&self, owner: &LockOwner) -> Result<()> {
        self.check_name()?;
        let lease_ms = self.lease.millis(&self.engine)?;
        let hold = self.hold_key(owner);
        let generation = self.engine.watchdog.generation(&hold);
        match self.release(owner, lease_ms).await? {
            Released::Partly => self.engine.watchdog.release_one(&hold, generation),
            Released::Fully => self.engine.watchdog.forget(&hold, generation),
            Released::NotHeld => {
                self.engine.watchdog.forget(&hold, generation);
                return Err(self.not_held(owner));
            }
        }
        Ok(())
    }

    /// Frees the lock whoever holds it, and wakes its waiters. `true` when it was held.
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
        for (hold, generation) in registered {
            self.engine.watchdog.forget(&hold, Some(generation));
        }
        Ok(matches!(reply, Value::Integer(1)))
    }

    /// Whether anyone (in any process) holds the lock.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached.
    pub async fn is_locked(&self) -> Result<bool> {
        self.check_name()?;
        self.engine.check_open()?;
        let exists: i64 = self.engine.redis.exists(&*self.keys.raw).await?;
        Ok(exists > 0)
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
            .hget(&*self.keys.raw, &**owner.field())
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

    async fn acquire(&self, owner: &LockOwner, wait: Wait) -> Result<Option<LockGuard>> {
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
        match self.kind {
            Kind::Reentrant => acquire::acquire(&self.engine, &channel, deadline, attempt).await,
            Kind::Fair => {
                // Queued from the first attempt on: whatever ends the wait without the lock
                // (deadline, error, drop) takes the waiter out of the queue at once.
                let exit = QueueExit::arm(self.clone(), owner.clone(), self.fair_wait_ms(wait));
                let pace = &Pace::new();
                let attempt = move || pace.paced(attempt());
                match acquire::acquire(&self.engine, &channel, deadline, attempt).await {
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
        let in_flight = InFlight::new(
            Box::pin(async move {
                let reply = call.await.map_err(|e| map_redis_error(e, &raw))?;
                Ok(Attempt::from_pttl(nil_or_int(script, reply)?, ()))
            }),
            {
                let (lock, owner) = (self.clone(), owner.clone());
                move |()| Box::pin(async move { drop(lock.release(&owner, lease_ms).await) })
            },
        );
        let (lock, owner) = (self.clone(), owner.clone());
        async move {
            Ok(match in_flight.await? {
                Attempt::Acquired(()) => Attempt::Acquired(lock.guard(owner, sent_at)),
                Attempt::Busy { ttl } => Attempt::Busy { ttl },
            })
        }
    }

    /// The channel a waiter of `owner` listens on.
    fn wait_channel(&self, owner: &LockOwner) -> Arc<str> {
        match self.kind {
            Kind::Reentrant => self.keys.channel.clone(),
            Kind::Fair => self.keys.fair_waiter_channel(owner.field()).into(),
        }
    }

    /// The acquire script of this kind for one attempt of a wait of kind `wait`.
    fn acquire_call(&self, owner: &LockOwner, lease_ms: i64, wait: Wait) -> Call {
        match self.kind {
            Kind::Reentrant => Call {
                script: &LOCK_ACQUIRE,
                keys: vec![key(&self.keys.raw)],
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
                match wait {
                    // The no-wait form never queues; note its ARGV order.
                    Wait::Once => Call {
                        script: &FAIR_TRY_ACQUIRE,
                        keys,
                        args: vec![lease, owner, now, wait_ms],
                    },
                    Wait::Until(..) | Wait::Forever => Call {
                        script: &FAIR_ACQUIRE,
                        keys,
                        args: vec![lease, owner, wait_ms, now],
                    },
                }
            }
        }
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
            Kind::Reentrant => Call {
                script: &LOCK_RELEASE,
                keys: vec![key(&self.keys.raw), key(&self.keys.channel), key(latch)],
                args: vec![
                    Value::from(UNLOCK_MESSAGE),
                    Value::from(lease_ms),
                    Value::from(&**owner.field()),
                    Value::from(self.engine.publish_command()),
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
        }
    }

    /// The script that frees the lock whoever holds it.
    fn force_release_call(&self) -> Call {
        match self.kind {
            Kind::Reentrant => Call {
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
        }
    }

    fn guard(self, owner: LockOwner, sent_at: Instant) -> LockGuard {
        let renewal = Renewal::start(&self.engine, self.lease, self.hold_key(&owner), sent_at);
        LockGuard {
            lock: self,
            owner,
            renewal,
            active: true,
        }
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

    fn hold_key(&self, owner: &LockOwner) -> HoldKey {
        HoldKey {
            key: self.keys.raw.clone(),
            field: owner.field().clone(),
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
}

impl LockGuard {
    /// Releases this hold (the lock is freed with its owner's last hold).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold was lost before (lease expired, force-unlocked,
    /// data lost); [`Error::Redis`] when Redis could not be reached even after resending.
    /// In the error case the hold, if it still exists, is no longer renewed and frees
    /// itself when its lease runs out.
    pub async fn unlock(mut self) -> Result<()> {
        self.active = false;
        self.renewal.stop();
        let lease_ms = self.lock.lease.millis(&self.lock.engine)?;
        let hold = self.lock.hold_key(&self.owner);
        // Other guards of this owner share the registration; they lose their hold with this
        // one when the lock is freed.
        let generation = self.lock.engine.watchdog.generation(&hold);
        match self.lock.release(&self.owner, lease_ms).await? {
            Released::Partly => Ok(()),
            Released::Fully => {
                self.lock.engine.watchdog.forget(&hold, generation);
                Ok(())
            }
            Released::NotHeld => {
                self.lock.engine.watchdog.forget(&hold, generation);
                Err(self.lock.not_held(&self.owner))
            }
        }
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
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        self.renewal.stop();
        let (lock, owner) = (self.lock.clone(), self.owner.clone());
        let hold = lock.hold_key(&owner);
        let generation = lock.engine.watchdog.generation(&hold);
        release_in_background(async move {
            let Ok(lease_ms) = lock.lease.millis(&lock.engine) else {
                return;
            };
            match lock.release(&owner, lease_ms).await {
                Ok(Released::Fully | Released::NotHeld) => {
                    lock.engine.watchdog.forget(&hold, generation)
                }
                Ok(Released::Partly) => {}
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
