//! What the kind-agnostic core asks of a lock kind. The core (first attempt, subscribe,
//! wait loop, cancellation, guard, release with resend, renewal) never looks at which kind
//! it runs; each kind's file implements [`Protocol`]: its scripts' KEYS and ARGV, what their
//! replies mean, the field it holds, the channel its waiters listen on and how it is
//! renewed.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fred::clients::{Client, WithOptions};
use fred::error::Error as RedisError;
use fred::interfaces::HashesInterface;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use crate::base::backoff::Pace;
use crate::base::boxed::BoxFuture;
use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::{LockKeys, Str};
use crate::base::owner::LockOwner;
use crate::core::attempt::{Attempt, Reply, Taken};
use crate::core::wait::{Wait, WaitStrategy};
use crate::engine::hand_offs::{Heir, Line, Queued};
use crate::engine::watchdog::{HoldKey, Renew};
use crate::engine::Engine;
use crate::topology::pubsub::{unlock_messages, Messages};
use crate::topology::script::{static_arg, Call, Script};

/// What an acquire attempt got: the script's `reply`, with what it was sent for, which
/// errors name.
pub(crate) struct Answer<'a> {
    pub(crate) lock: &'a Target,
    pub(crate) owner: &'a LockOwner,
    /// This kind's acquire script.
    pub(crate) script: &'static Script,
    pub(crate) reply: Result<Value, RedisError>,
}

/// One lock as the core sees it: the client it lives in, the name the user gave, the Redis
/// names derived from it, and the kind that speaks its protocol.
pub(crate) struct Target {
    pub(crate) engine: Arc<Engine>,
    /// The user's name (errors and logs name it): the end of the lock key, after the
    /// client's name prefix, sharing its text.
    pub(crate) name: Str,
    pub(crate) keys: LockKeys,
    pub(crate) kind: Box<dyn Protocol>,
    /// Unlock latch keys of this handle's earlier releases, free for the next ones (see
    /// `latches.rs`).
    pub(crate) latches: Mutex<Vec<Value>>,
}

impl Drop for Target {
    fn drop(&mut self) {
        let keys = std::mem::take(self.latches.get_mut());
        if !keys.is_empty() {
            self.engine.latches().retire(keys);
        }
    }
}

impl Target {
    /// The hold of `owner` as the registry of holds knows it.
    pub(crate) fn hold_key(&self, owner: &LockOwner) -> HoldKey {
        HoldKey {
            key: self.keys.raw.clone(),
            field: self.kind.field(owner),
            renew: self.kind.renew(&self.keys),
        }
    }

    /// The line of this lock's waiters that its releases may hand it to: the waiters of the
    /// same kind (a hand-off writes the kind's own layout, and a fenced one issues a token).
    pub(crate) fn hand_off_line(&self) -> Line {
        Line::new(self.kind.kind(), &self.keys.raw)
    }

    /// How the scripts must publish (see `lua/publish.lua`).
    pub(crate) fn publish(&self) -> Value {
        static_arg(self.engine.publish_command())
    }

    /// Runs `query` on the lock's key; a key of another type becomes
    /// [`Error::WrongType`](crate::Error::WrongType) naming the lock.
    pub(crate) fn query_key<T, Fut>(
        &self,
        query: impl FnOnce(WithOptions<Client>, Str) -> Fut,
    ) -> BoxFuture<Result<T>>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, RedisError>> + Send + 'static,
    {
        let reads = self.engine.link().reads().clone();
        let reply = query(reads, self.keys.raw.clone());
        let (engine, name) = (self.engine.clone(), self.name.clone());
        Box::pin(async move {
            let reply = engine.reach(reply).await;
            reply.map_err(|e| map_redis_error(e, &name))
        })
    }
}

/// A lock kind's protocol (see the module docs). Methods with a default serve every kind
/// that keeps Redisson's `RLock` hash layout.
pub(crate) trait Protocol: Send + Sync + 'static {
    /// The kind's name in tracing spans and metric labels (`lock`, `fair_lock`, ...).
    fn kind(&self) -> &'static str;

    /// The hash field of `owner`'s holds (protocol §1).
    fn field(&self, owner: &LockOwner) -> Str {
        owner.field().clone()
    }

    /// How the watchdog renews a hold.
    fn renew(&self, _keys: &LockKeys) -> Renew {
        Renew::Field
    }

    /// The channel a waiter of `owner` listens on.
    fn channel(&self, keys: &LockKeys, _owner: &LockOwner) -> Str {
        keys.channel.clone()
    }

    /// How its waiters read the messages of their channel.
    fn messages(&self) -> Messages {
        unlock_messages
    }

    /// How a new handle waits.
    fn default_wait(&self) -> WaitStrategy {
        WaitStrategy::PubSub
    }

    /// The script of one acquire attempt, within an acquisition that waits as `wait`.
    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, wait: Wait) -> Call;

    /// Reads what this kind's acquire answered.
    fn read_acquire(&self, answer: Answer<'_>) -> Result<Attempt<Taken>> {
        read_taken(answer.lock, answer.script, answer.reply)
    }

    /// The script releasing one hold of `owner`; a partial release resets the TTL to
    /// `lease_ms`. Without the unlock latch (protocol §3.4), which the caller appends: every
    /// release script takes it as its last KEY, and its TTL and request id as its last two
    /// ARGV.
    fn release(&self, lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call;

    /// The script freeing the lock whoever holds it; it replies 1 when it freed something.
    fn force_release(&self, lock: &Target) -> Call;

    /// Whether the kind's last release may give the lock to a waiter of the same client (see
    /// [`hand_off`](crate::core::hand_off)).
    fn hands_off(&self) -> bool {
        false
    }

    /// Whether the kind hands over only to the first waiter of a queue that other clients'
    /// waiters are in too (the fair locks): the queue then decides who is next, and the
    /// [`HandOff`](crate::HandOff) bound on runs has no other client's waiter to protect.
    fn hands_off_in_queue_order(&self) -> bool {
        false
    }

    /// For a kind that [`hands_off`](Protocol::hands_off): the script releasing one hold of
    /// `owner` as [`release`](Protocol::release)'s does, which gives the lock to the waiter
    /// `heir` of the same client, with its lease, when it would free it (a fair lock's only
    /// when `heir` is first in its queue). It replies as `release`'s, or 2 when it handed the
    /// lock over (`{2, token}` when the heir gets a fencing token). Without the unlock latch,
    /// which the caller appends as for `release`. A kind that never hands over releases.
    fn hand_off(
        &self,
        lock: &Target,
        (owner, lease_ms): (&LockOwner, i64),
        _heir: &dyn Heir,
    ) -> Call {
        self.release(lock, owner, lease_ms)
    }

    /// Whether this client holds the lock for `owner` in a way that a wait behind the
    /// client's other waiters would wait for (see
    /// [`queues_at_once`](crate::core::hand_off::queues_at_once)).
    fn held_by(&self, lock: &Target, owner: &LockOwner) -> bool {
        let watchdog = lock.engine.watchdog();
        watchdog.keep_alive(&lock.hold_key(owner)).is_some()
    }

    /// Whether anyone holds the lock in this kind's sense (a non-empty hash by default).
    fn is_locked(&self, lock: &Target) -> BoxFuture<Result<bool>> {
        // HLEN, not EXISTS: a key of another type is an error, as for `hold_count`.
        let fields = lock.query_key(|redis, key| async move { redis.hlen::<i64, _>(&*key).await });
        Box::pin(async move { Ok(fields.await? > 0) })
    }

    /// For a kind whose waiters line up (the fair locks): takes `owner`'s place in the line
    /// for an acquisition that waits as `wait` (never [`Wait::Once`]).
    fn line_up(&self, _lock: &Arc<Target>, _owner: &LockOwner, _wait: Wait) -> Option<Place> {
        None
    }
}

/// A waiter's place in a line (see [`Protocol::line_up`]): how it paces its attempts, and
/// what takes it out of the line when it gives up.
pub(crate) struct Place {
    pub(crate) pace: Pace,
    /// Takes the waiter out of the line unless disarmed: at once when awaited, in the
    /// background when dropped.
    pub(crate) exit: Box<dyn Exit>,
    /// The waiter's attempts on the wire, which its exit waits for.
    pub(crate) on_the_wire: OnTheWire,
    /// The place as a hand-off to the waiter names it.
    pub(crate) queued: Queued,
}

/// The acquire attempts of one waiter in a line that are on the wire. Its exit waits for
/// them: an attempt sent late (after reading the replica count, or after loading its script
/// again) and answered after the exit would put the waiter back in the line for good.
///
/// An attempt whose answer never came (a command timeout, a lost connection) may still run
/// later, whatever the client waits for. So every attempt carries the waiter's
/// [`WaitMark`]: the exit sets the wait's fence, which makes such an attempt do nothing, and
/// undoes a hold one of them took (see `lua/fair_acquire.lua`).
#[derive(Clone)]
pub(crate) struct OnTheWire(Arc<Wire>);

struct Wire {
    gate: Arc<RwLock<()>>,
    mark: WaitMark,
    /// Whether an attempt's answer never came.
    unknown: AtomicBool,
}

/// What identifies one wait on the server: the keys and argument every attempt of it
/// carries, and its exit too.
pub(crate) struct WaitMark {
    /// The fence, set by the exit: an attempt of this wait that runs later does nothing.
    pub(crate) fence: Value,
    /// The owner's trace: which wait took the owner's last new hold.
    pub(crate) trace: Value,
    /// This wait's id.
    pub(crate) id: Value,
}

impl OnTheWire {
    pub(crate) fn new(mark: WaitMark) -> OnTheWire {
        OnTheWire(Arc::new(Wire {
            gate: Arc::default(),
            mark,
            unknown: AtomicBool::new(false),
        }))
    }

    /// Held by an attempt until its reply is in (in the background when its caller gave
    /// up); `None` once the exit has begun, when no attempt is made any more.
    pub(crate) fn enter(&self) -> Option<OwnedRwLockReadGuard<()>> {
        self.0.gate.clone().try_read_owned().ok()
    }

    /// Returns once no attempt is on the wire.
    pub(crate) async fn drained(&self) {
        drop(self.0.gate.write().await);
    }

    /// Adds the wait's fence and trace keys and its id to an acquire attempt (see
    /// `lua/fair_acquire.lua`); the attempt keeps the returned copy.
    pub(crate) fn sign(&self, call: &mut Call) -> OnTheWire {
        let mark = &self.0.mark;
        call.push_key(mark.fence.clone());
        call.push_key(mark.trace.clone());
        call.push_args([mark.id.clone()]);
        self.clone()
    }

    pub(crate) fn mark(&self) -> &WaitMark {
        &self.0.mark
    }

    /// Notes what an attempt answered: an error that may mean its answer never came (a
    /// timeout, a lost connection) leaves it unknown, and it may still run.
    pub(crate) fn note<T>(&self, attempt: &Result<T>) {
        if attempt.as_ref().is_err_and(Error::is_retryable) {
            self.0.unknown.store(true, Ordering::Relaxed);
        }
    }

    /// Whether an attempt's answer never came.
    pub(crate) fn had_unknown(&self) -> bool {
        self.0.unknown.load(Ordering::Relaxed)
    }
}

/// Takes a waiter out of its line; dropping it does so in the background.
pub(crate) trait Exit: Send {
    /// The waiter got the lock, which took it out of the line.
    fn disarm(self: Box<Self>);
    /// The waiter got the lock after an attempt whose answer never came: sets the wait's
    /// fence (an attempt still on the wire must not take the lock again once this hold is
    /// released), keeping the hold. Completes once the fence is set, or could not be.
    fn keep(self: Box<Self>) -> BoxFuture<()>;
    /// The waiter gave up: leave now. Completes after the first try; when that fails, the
    /// exit is tried again in the background.
    fn leave(self: Box<Self>) -> BoxFuture<()>;
}

/// Reads the acquire reply shape every kind's script shares (`lua/lock_acquire.lua`'s
/// header).
pub(crate) fn read_reply(
    lock: &Target,
    script: &'static Script,
    reply: Result<Value, RedisError>,
) -> Result<Reply> {
    let reply = reply.map_err(|e| map_redis_error(e, &lock.name))?;
    Reply::read(script, reply)
}

/// [`read_reply`], as the attempt it makes.
pub(crate) fn read_taken(
    lock: &Target,
    script: &'static Script,
    reply: Result<Value, RedisError>,
) -> Result<Attempt<Taken>> {
    read_reply(lock, script, reply).map(Reply::attempt)
}
