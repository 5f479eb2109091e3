//! The kind-agnostic core every lock handle wraps: acquiring (first attempt, subscribe,
//! wait loop, cancellation), the guard it hands out, releasing without a guard, force
//! release and the queries. It asks the lock's [`Protocol`] for everything kind-specific
//! and never looks at which kind it runs.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};
use fred::types::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::base::boxed::boxed_in_place;
use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::LockKeys;
use crate::base::observe::{self, Since};
use crate::base::owner::LockOwner;
use crate::base::time::millis;
use crate::core::attempt::Taken;
use crate::core::attempt::{Attempt, InFlight};
use crate::core::guard::{Finishing, Holding, LockGuard, Renewal};
use crate::core::hand_off::{self, Turn};
use crate::core::kind::HoldKind;
use crate::core::lease::Lease;
use crate::core::protocol::{Answer, OnTheWire, Place, Protocol, Target};
use crate::core::release::{release, release_settled, replicated, By, Released};
use crate::core::wait::{self, Wait, WaitStrategy, Wake};
use crate::engine::hand_offs::Queued;
use crate::engine::Engine;
use crate::topology::runner::{InPlace, OwnBox};

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

    /// Takes the lock, waiting until the hold is taken.
    pub(crate) fn lock<H: HoldKind>(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<LockGuard<H>>> + Send + 'static {
        let (handle, owner) = (self.clone(), owner.clone());
        async move {
            match handle.acquire(&owner, Wait::Forever).await? {
                Some(guard) => Ok(guard),
                None => Err(Error::UnexpectedReply {
                    script: "acquire",
                    detail: "a wait without a deadline ended without a hold".into(),
                }),
            }
        }
    }

    /// One attempt.
    pub(crate) fn try_lock<H: HoldKind>(
        &self,
        owner: &LockOwner,
    ) -> impl Future<Output = Result<Option<LockGuard<H>>>> + Send + 'static {
        let (handle, owner) = (self.clone(), owner.clone());
        async move { handle.acquire(&owner, Wait::Once).await }
    }

    /// Waits at most `wait`.
    pub(crate) fn try_lock_for<H: HoldKind>(
        &self,
        owner: &LockOwner,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard<H>>>> + Send + 'static {
        let (handle, owner) = (self.clone(), owner.clone());
        async move {
            let wait = Wait::from_limit(wait)?;
            handle.acquire(&owner, wait).await
        }
    }

    /// Takes a hold for `owner`, waiting as `wait` says: `Ok(None)` when the wait ran out.
    pub(crate) async fn acquire<H: HoldKind>(
        &self,
        owner: &LockOwner,
        wait: Wait,
    ) -> Result<Option<LockGuard<H>>> {
        let (since, kind) = (Since::now(), self.lock.kind.kind());
        let span = observe::acquire_span(&self.lock.name, kind);
        let outcome = self.acquire_observed(owner, wait).instrument(span).await;
        observe::acquired(kind, since, &outcome);
        Ok(outcome?.map(|(holding, token)| LockGuard::new(holding, token)))
    }

    /// The hold taken, with its fencing token if the kind gives one.
    async fn acquire_observed(
        &self,
        owner: &LockOwner,
        wait: Wait,
    ) -> Result<Option<(Holding, Option<u64>)>> {
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
            queued,
        }) = self.lock.kind.line_up(&self.lock, owner, wait)
        else {
            let attempt = || self.attempt(owner, lease_ms, wait, None);
            if !self.hands_off() {
                return wait::acquire(engine, wake, deadline, attempt).await;
            }
            let look_first = !hand_off::queues_at_once(&self.lock, owner, wait);
            let wake = (wake, look_first);
            return self
                .acquire_or_handed(owner, lease_ms, wake, deadline, None, attempt)
                .await;
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
        let waited = if self.hands_off() {
            // It must be in the queue in Redis to be handed the lock: its first attempt
            // puts it there.
            let wake = (wake, true);
            self.acquire_or_handed(owner, lease_ms, wake, deadline, Some(queued), attempt)
                .await
        } else {
            wait::acquire(engine, wake, deadline, attempt).await
        };
        match waited {
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

    /// Whether a last release of this lock may go to a waiter of the same client.
    fn hands_off(&self) -> bool {
        self.lock.kind.hands_off() && self.lock.engine.settings().hand_off.is_on()
    }

    /// Waits as [`wait::acquire_or_handed`] does, by the acquire attempts `attempt` makes,
    /// also waiting in the client's line to be handed the lock (`queued`: the waiter's
    /// place in the lock's queue in Redis, for a fair lock). The two take turns (see
    /// [`Turn`]).
    async fn acquire_or_handed<F, Fut>(
        &self,
        owner: &LockOwner,
        lease_ms: i64,
        wake: (Wake<'_>, bool),
        deadline: Option<Instant>,
        queued: Option<Queued>,
        attempt: F,
    ) -> Result<Option<(Holding, Option<u64>)>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Attempt<(Holding, Option<u64>)>>>,
    {
        let turn: OnceLock<Arc<Turn>> = OnceLock::new();
        let attempt = || async {
            // Made only once it is this attempt's turn: an attempt made is sent, even when
            // dropped before it is polled (see `InFlight`).
            match turn.get() {
                Some(turn) => turn.attempt(&attempt).await,
                None => attempt().await,
            }
        };
        let handed = || {
            let turn = turn.get_or_init(Arc::<Turn>::default).clone();
            let lease = (self.lease, lease_ms);
            hand_off::handed(&self.lock, owner, lease, (turn, queued))
        };
        wait::acquire_or_handed(&self.lock.engine, wake, deadline, attempt, handed).await
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
    ) -> impl Future<Output = Result<Attempt<(Holding, Option<u64>)>>> + Send + 'static {
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
                    let (reply, confirmation) = engine.send_confirmed::<InPlace>(call, key).await;
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
                    Attempt::Acquired((Holding::new(lock, owner, renewal, lease_ms), token))
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
            match release_settled(lock, &owner, lease_ms, generation, By::Owner, None).await? {
                Released::NotHeld => Err(Error::not_held(&lock.name, &owner)),
                Released::Partly | Released::Fully | Released::Handed { .. } => Ok(()),
            }
        })
    }

    /// Frees the lock whoever holds it; `true` when it was held.
    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        let (lock, engine) = (&self.lock, &self.lock.engine);
        let registered = engine.watchdog().generations_of_key(&lock.keys.raw);
        let (reply, confirmation) = engine
            .run_confirmed::<OwnBox>(lock.kind.force_release(lock), &lock.keys.raw, &lock.name)
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
