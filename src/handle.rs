//! The kind-agnostic core every lock handle wraps: acquiring (first attempt, subscribe,
//! wait loop, cancellation), the guard it hands out, releasing without a guard, force
//! release and the queries. It asks the lock's [`Protocol`] for everything kind-specific
//! and never looks at which kind it runs.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};
use fred::types::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempt::Taken;
use crate::attempt::{Attempt, InFlight};
use crate::engine::Engine;
use crate::error::{map_redis_error, Error, Result};
use crate::guard::{Finishing, Lease, LockGuard, Renewal};
use crate::keys::LockKeys;
use crate::observe::{self, Since};
use crate::owner::LockOwner;
use crate::protocol::{Answer, OnTheWire, Place, Protocol, Target};
use crate::release::{release, release_settled, replicated, By, Released};
use crate::script::boxed_in_place;
use crate::time::millis;
use crate::wait::{self, Wait, WaitStrategy, Wake};

/// One lock of one kind, with the lease and wait strategy of the holds it takes. Cheap to
/// clone; every public handle wraps one (two for the read-write lock).
#[derive(Clone)]
pub(crate) struct Handle {
    lock: Arc<Target>,
    lease: Lease,
    wait: WaitStrategy,
}

impl Handle {
    /// `name` is the user's name; the client's prefix is applied here.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name no lock can have (see `Engine::lock_keys`).
    pub(crate) fn new(engine: Arc<Engine>, name: &str, kind: impl Protocol) -> Result<Handle> {
        Handle::with_kind_of(engine, name, |_| kind)
    }

    /// As [`new`](Handle::new), for a kind made from the lock's keys (one that keeps names
    /// derived from them, so that its calls need not build them again).
    ///
    /// # Errors
    /// As [`new`](Handle::new).
    pub(crate) fn with_kind_of<P: Protocol>(
        engine: Arc<Engine>,
        name: &str,
        kind: impl FnOnce(&LockKeys) -> P,
    ) -> Result<Handle> {
        let keys = engine.lock_keys(name)?;
        let prefix = &engine.settings().name_prefix;
        let kind = kind(&keys);
        let wait = kind.default_wait();
        Ok(Handle {
            lock: Arc::new(Target {
                name: keys.raw.slice(prefix.len()..),
                engine,
                keys,
                kind: Box::new(kind),
                latches: Default::default(),
            }),
            lease: Lease::WATCHDOG,
            wait,
        })
    }

    pub(crate) fn with_lease(mut self, lease: Lease) -> Handle {
        self.lease = lease;
        self
    }

    pub(crate) fn with_wait_strategy(mut self, wait: WaitStrategy) -> Handle {
        self.wait = wait;
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.lock.name
    }

    pub(crate) fn lease(&self) -> Lease {
        self.lease
    }

    pub(crate) fn wait_strategy(&self) -> WaitStrategy {
        self.wait
    }

    pub(crate) fn target(&self) -> &Target {
        &self.lock
    }

    /// The server (or servers) this handle's client talks to, for ordering multi-lock
    /// members.
    pub(crate) fn server(&self) -> &str {
        self.lock.engine.server()
    }

    /// Takes the lock, waiting until the hold is taken; `wrap` makes the kind's guard.
    /// (The wrapping is done here, in the one future, rather than by the caller awaiting
    /// this one: each layer of `async` that awaits a future it was given stores it twice.)
    pub(crate) fn lock<G>(
        &self,
        owner: &LockOwner,
        wrap: impl FnOnce(LockGuard) -> G + Send + 'static,
    ) -> impl Future<Output = Result<G>> + Send + 'static {
        let (handle, owner) = (self.clone(), owner.clone());
        async move {
            match handle.acquire(&owner, Wait::Forever).await? {
                Some(guard) => Ok(wrap(guard)),
                None => Err(Error::UnexpectedReply {
                    script: "acquire",
                    detail: "a wait without a deadline ended without a hold".into(),
                }),
            }
        }
    }

    /// One attempt; `wrap` makes the kind's guard.
    pub(crate) fn try_lock<G>(
        &self,
        owner: &LockOwner,
        wrap: impl FnOnce(LockGuard) -> G + Send + 'static,
    ) -> impl Future<Output = Result<Option<G>>> + Send + 'static {
        let (handle, owner) = (self.clone(), owner.clone());
        async move { Ok(handle.acquire(&owner, Wait::Once).await?.map(wrap)) }
    }

    /// Waits at most `wait`; `wrap` makes the kind's guard.
    pub(crate) fn try_lock_for<G>(
        &self,
        owner: &LockOwner,
        wait: Duration,
        wrap: impl FnOnce(LockGuard) -> G + Send + 'static,
    ) -> impl Future<Output = Result<Option<G>>> + Send + 'static {
        let (handle, owner) = (self.clone(), owner.clone());
        async move {
            let wait = Wait::from_limit(wait)?;
            Ok(handle.acquire(&owner, wait).await?.map(wrap))
        }
    }

    /// Takes a hold for `owner`, waiting as `wait` says: `Ok(None)` when the wait ran out.
    pub(crate) async fn acquire(&self, owner: &LockOwner, wait: Wait) -> Result<Option<LockGuard>> {
        let (since, kind) = (Since::now(), self.lock.kind.kind());
        let span = observe::acquire_span(&self.lock.name, kind);
        let outcome = self.acquire_observed(owner, wait).instrument(span).await;
        observe::acquired(kind, since, &outcome);
        outcome
    }

    async fn acquire_observed(&self, owner: &LockOwner, wait: Wait) -> Result<Option<LockGuard>> {
        let engine = &self.lock.engine;
        engine.check_open()?;
        let lease_ms = self.lease.millis(engine);
        let deadline = match wait {
            Wait::Once => {
                return Ok(match self.attempt(owner, lease_ms, wait, None).await? {
                    Attempt::Acquired(guard) => Some(guard),
                    Attempt::Busy { .. } => None,
                })
            }
            Wait::Until(deadline, _) => Some(deadline),
            Wait::Forever => None,
        };
        let channel = self.lock.kind.channel(&self.lock.keys, owner);
        let wake = match self.wait {
            WaitStrategy::PubSub => Wake::Messages(&channel, self.lock.kind.messages()),
            WaitStrategy::Spin(backoff) => Wake::Spin(backoff),
        };
        // A kind whose waiters line up is in the line from the first attempt on: whatever
        // ends the wait without the lock (deadline, error, drop) takes it out at once.
        let Some(Place {
            pace,
            exit,
            on_the_wire,
        }) = self.lock.kind.line_up(&self.lock, owner, wait)
        else {
            let attempt = || self.attempt(owner, lease_ms, wait, None);
            return wait::acquire(engine, wake, deadline, attempt).await;
        };
        let attempt = || async {
            let attempted = self.attempt(owner, lease_ms, wait, Some(&on_the_wire));
            Ok(match attempted.await? {
                Attempt::Busy { ttl } => Attempt::Busy {
                    ttl: Some(pace.sleep(ttl)),
                },
                acquired => acquired,
            })
        };
        match wait::acquire(engine, wake, deadline, attempt).await {
            Ok(Some(guard)) if on_the_wire.had_unknown() => {
                // An unanswered attempt may still run, after this hold's release.
                exit.keep().await;
                Ok(Some(guard))
            }
            Ok(Some(guard)) => {
                exit.disarm();
                Ok(Some(guard))
            }
            Ok(None) => {
                exit.leave().await;
                Ok(None)
            }
            // Dropping `exit` leaves the line in the background.
            Err(error) => Err(error),
        }
    }

    /// Sends one acquire script; on success registers the hold and builds its guard in the
    /// same poll, so no cancellation point separates the reply from the guard. `queued`:
    /// the attempt may put the owner in a line, so until its reply it holds the client's
    /// permit for that (see `Engine::queueing_permit`) and keeps the waiter's exit waiting.
    fn attempt(
        &self,
        owner: &LockOwner,
        lease_ms: i64,
        wait: Wait,
        queued: Option<&OnTheWire>,
    ) -> impl Future<Output = Result<Attempt<LockGuard>>> + Send + 'static {
        let sent_at = Instant::now();
        let lock = &self.lock;
        let permit = queued.map(|wire| {
            let client = lock.engine.queueing_permit();
            client.map(|client| (client, wire.enter()))
        });
        let mut call = lock.kind.acquire(lock, owner, lease_ms, wait);
        let wire = queued.map(|wire| wire.sign(&mut call));
        let script = call.script;
        let in_flight = InFlight::new(
            {
                let (lock, owner) = (lock.clone(), owner.clone());
                boxed_in_place(|| async move {
                    let _permit = permit.transpose()?;
                    let (engine, key) = (&lock.engine, &lock.keys.raw);
                    let (reply, confirmation) = engine.send_confirmed(call, key).await;
                    let attempt = lock.kind.read_acquire(Answer {
                        lock: &lock,
                        owner: &owner,
                        script,
                        reply,
                    });
                    wire.inspect(|wire| wire.note(&attempt));
                    let attempt = attempt?;
                    if let Attempt::Acquired(_) = attempt {
                        if let Err(error) = engine.confirm(confirmation, key, &lock.name).await {
                            // Undo exactly this acquisition: a failover could lose it.
                            // Boxed, as rare: it would double this future's size, whose
                            // box every acquisition allocates.
                            let keep_alive = engine.watchdog().keep_alive(&lock.hold_key(&owner));
                            let lease_ms = keep_alive.map_or(lease_ms, millis);
                            drop(Box::pin(release(&lock, &owner, lease_ms)).await);
                            return Err(error);
                        }
                    }
                    Ok(attempt)
                })
            },
            {
                // Nobody took this hold: release it, keeping the key alive for the owner's
                // other holds should it have been a re-entry.
                let (lock, owner) = (lock.clone(), owner.clone());
                move |_: Taken| {
                    Box::pin(async move {
                        let keep_alive = lock.engine.watchdog().keep_alive(&lock.hold_key(&owner));
                        let lease_ms = keep_alive.map_or(lease_ms, millis);
                        drop(release(&lock, &owner, lease_ms).await)
                    })
                }
            },
        );
        let (lock, owner, lease) = (lock.clone(), owner.clone(), self.lease);
        async move {
            Ok(match in_flight.await? {
                Attempt::Acquired(Taken { new_hold, token }) => {
                    let hold = lock.hold_key(&owner);
                    let renewal = Renewal::start(&lock.engine, lease, hold, sent_at, new_hold);
                    Attempt::Acquired(LockGuard::new(lock, owner, renewal, lease_ms, token))
                }
                Attempt::Busy { ttl } => Attempt::Busy { ttl },
            })
        }
    }

    /// Releases one hold of `owner` without a guard, Java style. The release starts when
    /// this is called and finishes even if the future is dropped.
    pub(crate) fn unlock(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let (handle, owner) = (self.clone(), owner.clone());
        Finishing::new(|| async move {
            let lock = &handle.lock;
            let lease_ms = handle.lease.millis(&lock.engine);
            let hold = lock.hold_key(&owner);
            if lock.engine.watchdog().forget_if_lost(&hold) {
                return Err(Error::not_held(&lock.name, &owner));
            }
            let (generation, keep_alive) = lock.engine.watchdog().plan_unlock(&hold);
            let lease_ms = keep_alive.map_or(lease_ms, millis);
            match release_settled(lock, &owner, lease_ms, generation, By::Owner).await? {
                Released::NotHeld => Err(Error::not_held(&lock.name, &owner)),
                Released::Partly | Released::Fully => Ok(()),
            }
        })
    }

    /// Frees the lock whoever holds it; `true` when it was held.
    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        let (lock, engine) = (&self.lock, &self.lock.engine);
        let registered = engine.watchdog().generations_of_key(&lock.keys.raw);
        let (reply, confirmation) = engine
            .run_confirmed(lock.kind.force_release(lock), &lock.keys.raw, &lock.name)
            .await?;
        let freed = matches!(reply, Value::Integer(1));
        // Nothing was deleted otherwise: a read-write lock held in the other mode keeps
        // its holds (and their renewal).
        if freed {
            for (hold, generation) in registered {
                engine.watchdog().forget(&hold, Some(generation));
            }
            replicated(lock, confirmation).await?;
        }
        Ok(freed)
    }

    pub(crate) async fn is_locked(&self) -> Result<bool> {
        self.lock.engine.check_open()?;
        self.lock.kind.is_locked(&self.lock).await
    }

    pub(crate) async fn hold_count(&self, owner: &LockOwner) -> Result<u64> {
        let lock = &self.lock;
        lock.engine.check_open()?;
        let field = lock.kind.field(owner);
        let count = lock
            .query_key(
                |redis, key| async move { redis.hget::<Option<i64>, _, _>(&*key, &*field).await },
            )
            .await?;
        Ok(count.unwrap_or(0).max(0) as u64)
    }

    pub(crate) async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.lock.remaining_lease().await
    }

    /// The integer stored at `key` (a missing key reads as 0).
    pub(crate) async fn read_counter(&self, key: &str) -> Result<u64> {
        let engine = &self.lock.engine;
        engine.check_open()?;
        let value: Option<i64> = engine
            .redis()
            .get(key)
            .await
            .map_err(|e| map_redis_error(e, &self.lock.name))?;
        Ok(value.unwrap_or(0).max(0) as u64)
    }
}

impl Target {
    /// The key's PTTL now: `None` when it is gone, `Duration::MAX` when it never expires.
    pub(crate) async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.engine.check_open()?;
        let pttl = self
            .query_key(|redis, key| async move { redis.pttl::<i64, _>(&*key).await })
            .await?;
        Ok(match pttl {
            -2 => None,
            ms if ms < 0 => Some(Duration::MAX),
            ms => Some(Duration::from_millis(ms as u64)),
        })
    }
}

/// Writes the public surface every exclusive lock kind shares, once, over a handle
/// `struct $lock { inner: Handle }` running `$protocol`, whose holds are `$guard`s made from
/// a [`LockGuard`] by `$wrap`. What differs by kind (how waiters line up, whether the holder
/// may re-enter) is told in the kind's own type docs. Without `$guard`, holds are plain
/// [`LockGuard`]s.
macro_rules! exclusive_lock {
    ($lock:ident, $protocol:expr) => {
        $crate::handle::exclusive_lock!(
            $lock,
            $protocol,
            $crate::guard::LockGuard,
            std::convert::identity
        );
    };
    ($lock:ident, $protocol:expr, $guard:ty, $wrap:expr) => {
        impl $lock {
            pub(crate) fn new(
                engine: std::sync::Arc<$crate::engine::Engine>,
                name: &str,
            ) -> $crate::error::Result<$lock> {
                Ok($lock {
                    inner: $crate::handle::Handle::new(engine, name, $protocol)?,
                })
            }

            pub(crate) fn into_handle(self) -> $crate::handle::Handle {
                self.inner
            }

            /// The same lock with another lease policy for the holds it takes from now on.
            /// A [fixed lease](crate::Lease::fixed) disables the watchdog for those holds.
            pub fn with_lease(self, lease: $crate::guard::Lease) -> $lock {
                $lock {
                    inner: self.inner.with_lease(lease),
                }
            }

            /// The same lock with another way of waiting from now on; see
            /// [`WaitStrategy`](crate::WaitStrategy).
            pub fn with_wait_strategy(self, wait: $crate::wait::WaitStrategy) -> $lock {
                $lock {
                    inner: self.inner.with_wait_strategy(wait),
                }
            }

            /// The lock's name, as given to the `LockClient` method that made the handle.
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            /// The lease policy of the holds this handle takes.
            pub fn lease(&self) -> $crate::guard::Lease {
                self.inner.lease()
            }

            /// How this handle waits.
            pub fn wait_strategy(&self) -> $crate::wait::WaitStrategy {
                self.inner.wait_strategy()
            }

            /// Takes the lock for `owner`, waiting as long as it takes.
            ///
            /// Waiting is woken by the unlock message of whoever releases the lock, Java
            /// clients included, and in any case when the holder's lease runs out; with
            /// [`WaitStrategy::Spin`](crate::WaitStrategy::Spin) it polls by its back-off
            /// instead.
            #[doc = concat!("What a holder's second acquisition does, and in which order waiters get the lock, is told on [`", stringify!($lock), "`].")]
            ///
            /// # Cancel safety
            /// Cancel-safe: dropping the future at any point leaves no hold behind (a hold
            /// taken by a script already on the wire is released as soon as its reply
            /// arrives) and no place in a queue. So `tokio::time::timeout(lock.lock(&owner),
            /// d)` is safe.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached at the
            /// first attempt (while waiting, transient errors are retried until Redis has
            /// been unreachable for `watchdog_timeout`);
            /// [`Error::WrongType`](crate::Error::WrongType) when the lock's keys hold
            /// another type; [`Error::WouldDeadlock`](crate::Error::WouldDeadlock)
            /// where the kind refuses a second acquisition by the holder;
            /// [`Error::Closed`](crate::Error::Closed) after shutdown. When the connection
            /// fails while the acquire script is on the wire, the script may still have
            /// taken the hold; it is then never renewed and frees itself when its lease
            /// runs out.
            pub fn lock(
                &self,
                owner: &$crate::owner::LockOwner,
            ) -> impl std::future::Future<Output = $crate::error::Result<$guard>> + Send + 'static {
                self.inner.lock(owner, $wrap)
            }

            /// One attempt: takes the lock for `owner` if it can be had now, without
            /// waiting (and, for a kind with a queue, without joining it). `Ok(None)` when
            /// it cannot.
            ///
            /// # Cancel safety
            #[doc = concat!("As [`lock`](", stringify!($lock), "::lock).")]
            ///
            /// # Errors
            #[doc = concat!("As [`lock`](", stringify!($lock), "::lock).")]
            pub fn try_lock(
                &self,
                owner: &$crate::owner::LockOwner,
            ) -> impl std::future::Future<Output = $crate::error::Result<Option<$guard>>> + Send + 'static
            {
                self.inner.try_lock(owner, $wrap)
            }

            /// Takes the lock for `owner`, waiting at most `wait`; `Ok(None)` when the wait
            /// ran out (a queued waiter has then left the queue). A zero `wait` makes
            #[doc = concat!("exactly one attempt, like [`try_lock`](", stringify!($lock), "::try_lock).")]
            ///
            /// # Cancel safety
            #[doc = concat!("As [`lock`](", stringify!($lock), "::lock).")]
            ///
            /// # Errors
            #[doc = concat!("As [`lock`](", stringify!($lock), "::lock); also")]
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `wait` is too
            /// long to add to the current time.
            pub fn try_lock_for(
                &self,
                owner: &$crate::owner::LockOwner,
                wait: std::time::Duration,
            ) -> impl std::future::Future<Output = $crate::error::Result<Option<$guard>>> + Send + 'static
            {
                self.inner.try_lock_for(owner, wait, $wrap)
            }

            /// Releases one hold of `owner` without a guard, Java style: the counterpart of
            /// a guard given up with `detach`. The lock is freed (and its waiters told)
            /// with the last hold; until then the key lives on for the owner's other holds.
            ///
            /// # Cancel safety
            /// Cancel-safe: the release starts when this is called, and a future dropped
            /// before it is done (even before its first poll) finishes it in the background,
            /// resends included.
            ///
            /// # Errors
            /// [`Error::NotHeld`](crate::Error::NotHeld) when `owner` holds nothing (nothing
            /// changes on the server), at once and sending nothing when this client knows
            /// the hold is lost (its lease ran out unrenewed); [`Error::Redis`](crate::Error::Redis) when Redis
            /// could not be reached even after resending (resending is safe: the unlock
            /// latch makes the release happen at most once).
            pub fn unlock(
                &self,
                owner: &$crate::owner::LockOwner,
            ) -> impl std::future::Future<Output = $crate::error::Result<()>> + Send + 'static {
                self.inner.unlock(owner)
            }

            /// Frees the lock whoever holds it, and wakes its waiters. `true` when it was
            /// held.
            ///
            /// # Correctness
            /// This breaks mutual exclusion for the current holder, which goes on believing
            /// it holds the lock until its guard's `lease_lost()` fires (at the next watchdog
            /// renewal, when the holder is in this process or uses a watchdog).
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
            pub async fn force_unlock(&self) -> $crate::error::Result<bool> {
                self.inner.force_unlock().await
            }

            /// Whether anyone (in any process, with any kind sharing the name) holds the
            /// lock. Waiters do not count.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached,
            /// [`Error::WrongType`](crate::Error::WrongType) when the key is not a lock hash.
            pub async fn is_locked(&self) -> $crate::error::Result<bool> {
                self.inner.is_locked().await
            }

            /// Whether `owner` holds the lock.
            ///
            /// # Errors
            #[doc = concat!("As [`is_locked`](", stringify!($lock), "::is_locked).")]
            pub async fn is_held_by(&self, owner: &$crate::owner::LockOwner) -> $crate::error::Result<bool> {
                Ok(self.inner.hold_count(owner).await? > 0)
            }

            /// How many times `owner` holds the lock (0 when it does not).
            ///
            /// # Errors
            #[doc = concat!("As [`is_locked`](", stringify!($lock), "::is_locked).")]
            pub async fn hold_count(&self, owner: &$crate::owner::LockOwner) -> $crate::error::Result<u64> {
                self.inner.hold_count(owner).await
            }

            /// How long the current hold lasts unless renewed or released; `None` when the
            /// lock is free. A hold without expiry (possible only if something ran
            /// `PERSIST` on the key) reports `Duration::MAX`.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
            pub async fn remaining_lease(&self) -> $crate::error::Result<Option<std::time::Duration>> {
                self.inner.remaining_lease().await
            }
        }

        impl std::fmt::Debug for $lock {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($lock))
                    .field("name", &self.inner.name())
                    .field("lease", &self.inner.lease())
                    .field("wait_strategy", &self.inner.wait_strategy())
                    .finish()
            }
        }
    };
}

pub(crate) use exclusive_lock;
