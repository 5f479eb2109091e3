//! The fair lock: Redisson's `RFairLock` (protocol §4): the reentrant lock's hash, with a
//! queue of waiters and their deadlines, each waiter woken on its own channel. Waiters take
//! a place in the line while they wait (paced retries, and an exit that takes them out of
//! the queue when they give up).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use fred::error::{Error as RedisError, ErrorKind};
use fred::types::Value;

use crate::base::background::spawn_or;
use crate::base::backoff::{queue_exit_pause, Pace};
use crate::base::boxed::BoxFuture;
use crate::base::error::Error;
use crate::base::keys::Str;
use crate::base::keys::{LockKeys, UNLOCK_MESSAGE};
use crate::base::owner::LockOwner;
use crate::base::time::{epoch_millis, millis};
#[cfg(doc)]
use crate::core::guard::LockGuard;
use crate::core::kind::{sealed, Kind, Plain};
use crate::core::protocol::{Exit, OnTheWire, Place, Protocol, Target, WaitMark};
use crate::core::release::latch_ttl;
use crate::core::wait::Wait;
use crate::engine::hand_offs::{Heir, Queued};
use crate::engine::queue_exits::{Departure, QueueExits, Told};
use crate::locks::exclusive::ExclusiveLock;
#[cfg(doc)]
use crate::locks::lock::Lock;
use crate::topology::script::{
    static_arg, Call, Script, FAIR_ACQUIRE, FAIR_ACQUIRE_FAILED, FAIR_FORCE_RELEASE,
    FAIR_LEAVE_MANY, FAIR_RELEASE,
};

/// A reentrant distributed lock granted in order of arrival: FIFO, with a per-waiter
/// timeout. Shared with Java's `RFairLock` of the same name.
///
/// Waiters line up in a queue kept in Redis. When the lock is freed only the first waiter
/// is told (on its own channel), and only it may take the lock, so waiters get it in the
/// order they asked, across processes and Java clients alike. [`try_lock`](FairLock::try_lock)
/// never joins the queue: it succeeds only when the lock is free and nobody waits.
///
/// Each waiter has a deadline in the queue: the deadline of the waiter before it plus its
/// own wait ([`LockClientBuilder::fair_wait_timeout`](crate::LockClientBuilder::fair_wait_timeout)
/// for [`lock`](FairLock::lock), the given wait for [`try_lock_for`](FairLock::try_lock_for)).
/// A waiter whose deadline passed while it was first in line counts as gone and is dropped
/// from the queue, so a waiter whose process died holds up the others for about its wait
/// at most, counted from when the hold it last saw would have ended. A waiter that keeps
/// asking never loses its place, however long the hold lasts: whenever it looks while first in line it moves its
/// deadline (and the ones behind it, by as much) to the holder's remaining lease plus its
/// wait from now. Java waiters do not (see the builder's `fair_wait_timeout`). A waiter that
/// gives up (its `try_lock_for` wait ran out, or its future was dropped) leaves the queue at
/// once.
///
/// Deadlines are compared with each client's wall clock: the clients of one lock need
/// roughly synchronised clocks, as with Redisson.
///
/// On a client with [`HandOff::ON`](crate::HandOff::ON), a last release whose first waiter
/// in the queue is a task of the same client gives that task the lock in the same script
/// (one round trip, no message), writing what the task's own acquire would. A waiter of
/// another client first in line is told as usual, so the queue's order holds across clients.
///
/// A `FairLock` is a cheap handle (no I/O to make one, `Clone`, `Send + Sync`). Holds are
/// the same [`LockGuard`]s as a [`Lock`]'s; every call names the [`LockOwner`] it acts for,
/// and the same owner re-enters at once, without queueing. [`unlock`](FairLock::unlock) of
/// a hold that is gone reports `NotHeld`, where Java reports success; the first waiter is
/// told all the same.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let me = client.new_owner();
/// let lock = client.fair_lock("printer")?;
/// let guard = lock.lock(&me).await?; // after everyone who asked before
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type FairLock = ExclusiveLock<Fair>;

/// The kind of [`FairLock`]: Redisson's `RFairLock` (protocol §4).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fair;

impl Kind for Fair {
    type Hold = Plain;
}

#[allow(private_interfaces)] // sealed: out of users' sight
impl sealed::Kind for Fair {
    const HANDLE: &'static str = "FairLock";

    fn protocol() -> impl Protocol {
        Fair
    }
}

impl Fair {
    /// A waiter's wait in the queue (protocol §4.1): the caller's limit for a timed wait,
    /// else the client's `fair_wait_timeout`.
    fn wait_ms(lock: &Target, wait: Wait) -> i64 {
        match wait {
            Wait::Until(_, limit) => millis(limit).max(1),
            Wait::Once | Wait::Forever => millis(lock.engine.settings().fair_wait_timeout),
        }
    }

    /// `lua/fair_leave_many.lua`: takes the owners of `batch` out of the queue at once, as
    /// [`leave_call`](Self::leave_call) would one after the other without a fence.
    fn leave_many_call(lock: &Target, batch: &[Departure]) -> Call {
        let keys = &lock.keys;
        let mut args = Vec::with_capacity(2 + 2 * batch.len());
        args.extend([Value::from(UNLOCK_MESSAGE), lock.publish()]);
        for departure in batch {
            args.push(Value::String(departure.owner.clone()));
            args.push(Value::from(departure.wait_ms));
        }
        let (queue, deadlines) = (keys.fair_queue(), keys.fair_timeouts());
        Call::new(
            &FAIR_LEAVE_MANY,
            &[&queue, &deadlines, &keys.raw, &keys.channel],
            args,
        )
    }

    /// `lua/fair_acquire_failed.lua` (§4.5): sets the fence of the wait `mark` (an attempt
    /// of it still on the wire then does nothing) and undoes a hold an attempt of it took
    /// unanswered; then takes `owner` out of the queue; the waiters behind it move up by its
    /// wait `wait_ms`, and the next one is told if it is now first in line and the lock is
    /// free. With `keep`, the wait got the lock: its hold stays. Only a wait with an attempt
    /// whose answer never came (`fenced`) needs the fence and the undo: every other attempt
    /// is over, and a hold one of them took went to its caller or was released (see
    /// [`InFlight`](crate::core::attempt::InFlight)).
    fn leave_call(
        lock: &Target,
        owner: &LockOwner,
        wait_ms: i64,
        mark: &WaitMark,
        (fenced, keep): (bool, bool),
    ) -> Call {
        let keys = &lock.keys;
        let mut call = Call::new(
            &FAIR_ACQUIRE_FAILED,
            &[
                &keys.fair_queue(),
                &keys.fair_timeouts(),
                &keys.raw,
                &keys.channel,
            ],
            vec![
                owner.field_arg(),
                Value::from(wait_ms),
                Value::from(UNLOCK_MESSAGE),
                lock.publish(),
            ],
        );
        if !fenced {
            return call;
        }
        call.push_key(mark.fence.clone());
        call.push_key(mark.trace.clone());
        // A wait id no trace names undoes nothing.
        let id = if keep {
            static_arg("")
        } else {
            mark.id.clone()
        };
        call.push_args([id, Value::from(millis(fence_ttl(lock, wait_ms)))]);
        call
    }
}

/// A call of `script` with the keys every fair script but the leave starts with (the lock
/// hash, the queue, the deadlines), then `more`, then `args`.
fn fair_call(script: &'static Script, keys: &LockKeys, more: &[&str], args: Vec<Value>) -> Call {
    let (queue, deadlines) = (keys.fair_queue(), keys.fair_timeouts());
    let mut all: Vec<&str> = vec![&keys.raw, &queue, &deadlines];
    all.extend_from_slice(more);
    Call::new(script, &all, args)
}

/// How long a wait's fence stays: longer than any attempt of it can stay on the wire (it
/// is answered or times out within the command timeout, but the server may run it later, as
/// late as it runs the commands queued on the connection that carried it), and than the
/// wait itself.
fn fence_ttl(lock: &Target, wait_ms: i64) -> Duration {
    let settings = lock.engine.settings();
    let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
    (latch_ttl(&lock.engine) + settings.watchdog_timeout).max(wait)
}

impl Fair {}

impl Protocol for Fair {
    fn kind(&self) -> &'static str {
        "fair_lock"
    }

    fn channel(&self, keys: &LockKeys, owner: &LockOwner) -> Str {
        keys.fair_waiter_channel(owner.field()).into()
    }

    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, wait: Wait) -> Call {
        let keys = &lock.keys;
        // The no-wait form (one attempt) never joins the queue.
        let join = if matches!(wait, Wait::Once) { "0" } else { "1" };
        fair_call(
            &FAIR_ACQUIRE,
            keys,
            &[],
            vec![
                Value::from(lease_ms),
                owner.field_arg(),
                Value::from(Fair::wait_ms(lock, wait)),
                Value::from(epoch_millis()),
                Value::from(join),
            ],
        )
    }

    fn release(&self, lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call {
        let keys = &lock.keys;
        fair_call(
            &FAIR_RELEASE,
            keys,
            &[&keys.channel, &keys.fair_trace(owner.field())],
            vec![
                Value::from(UNLOCK_MESSAGE),
                Value::from(lease_ms),
                owner.field_arg(),
                Value::from(epoch_millis()),
                lock.publish(),
            ],
        )
    }

    fn hands_off(&self) -> bool {
        true
    }

    fn hands_off_in_queue_order(&self) -> bool {
        true
    }

    /// Hands over only to a waiter first in the queue, with what its own acquire would
    /// write (see `lua/fair_release.lua`).
    fn hand_off(
        &self,
        lock: &Target,
        (owner, lease_ms): (&LockOwner, i64),
        heir: &dyn Heir,
    ) -> Call {
        let mut call = self.release(lock, owner, lease_ms);
        if let Some(queued) = heir.queued() {
            call.push_key(queued.trace.clone());
            call.push_args([
                heir.owner().field_arg(),
                Value::from(heir.lease_ms()),
                Value::from(queued.wait_ms),
                queued.wait_id.clone(),
            ]);
        }
        call
    }

    fn force_release(&self, lock: &Target) -> Call {
        let keys = &lock.keys;
        fair_call(
            &FAIR_FORCE_RELEASE,
            keys,
            &[&keys.channel],
            vec![
                Value::from(UNLOCK_MESSAGE),
                Value::from(epoch_millis()),
                lock.publish(),
            ],
        )
    }

    fn line_up(&self, lock: &Arc<Target>, owner: &LockOwner, wait: Wait) -> Option<Place> {
        let wait_ms = Fair::wait_ms(lock, wait);
        let (keys, field) = (&lock.keys, owner.field());
        let id = lock.engine.queue_exits().wait_id();
        let on_the_wire = OnTheWire::new(WaitMark {
            fence: Value::from(keys.fair_fence(field, id)),
            trace: Value::from(keys.fair_trace(field)),
            id: Value::from(id.to_string()),
        });
        let mark = on_the_wire.mark();
        let queued = Queued {
            trace: mark.trace.clone(),
            wait_id: mark.id.clone(),
            wait_ms,
        };
        let exit = QueueExit::arm(lock.clone(), owner.clone(), wait_ms, on_the_wire.clone());
        Some(Place {
            pace: Pace::new(wait_ms),
            exit: Box::new(exit),
            on_the_wire,
            queued,
        })
    }
}

/// Takes a queued waiter out of the queue unless disarmed: when the wait ran out
/// ([`Exit::leave`]) and when the waiting future is dropped or fails (in the background),
/// so that the waiters behind it move up at once instead of at its deadline. While armed,
/// the waiter is registered with the client, whose shutdown takes it out of the queue (it
/// can no longer leave on its own then).
///
/// The leave script is sent only once every acquire script of the waiter is answered, so it
/// runs after them, even one sent late (after reading the replica count, or after loading
/// its script again); if that one took the lock, it already left the queue, the leave
/// script finds nothing to do, and the attempt's [`InFlight`](crate::core::attempt::InFlight)
/// releases the hold.
struct QueueExit {
    armed: Option<Armed>,
}

struct Armed {
    lock: Arc<Target>,
    owner: LockOwner,
    wait_ms: i64,
    /// Its registration with the client (see `Engine::queue_exits`).
    id: u64,
    on_the_wire: OnTheWire,
}

impl QueueExit {
    /// Arms the exit of `owner`, which is about to join `lock`'s queue with wait `wait_ms`
    /// by the attempts `on_the_wire` follows.
    fn arm(lock: Arc<Target>, owner: LockOwner, wait_ms: i64, on_the_wire: OnTheWire) -> QueueExit {
        // Tasks sharing an owner share its place in the queue.
        let place = format!("{}\0{}", lock.keys.fair_queue(), owner).into();
        let leave = Fair::leave_call(&lock, &owner, wait_ms, on_the_wire.mark(), (false, false));
        let id = lock.engine.queue_exits().register(place, leave);
        QueueExit {
            armed: Some(Armed {
                lock,
                owner,
                wait_ms,
                id,
                on_the_wire,
            }),
        }
    }
}

impl Exit for QueueExit {
    fn disarm(mut self: Box<Self>) {
        if let Some(armed) = self.armed.take() {
            armed.lock.engine.queue_exits().unregister(armed.id);
        }
    }

    fn keep(mut self: Box<Self>) -> BoxFuture<()> {
        let armed = self.armed.take();
        Box::pin(async move {
            if let Some(armed) = armed {
                let (tried, first_try) = oneshot::channel();
                // In a task of its own, so that the exit completes even if the caller
                // stops waiting for it.
                tokio::spawn(async move { leave(&armed, true, tried).await });
                let _ = first_try.await;
            }
        })
    }

    fn leave(mut self: Box<Self>) -> BoxFuture<()> {
        let armed = self.armed.take();
        Box::pin(async move {
            if let Some(armed) = armed {
                let (tried, first_try) = oneshot::channel();
                tokio::spawn(async move { leave(&armed, false, tried).await });
                let _ = first_try.await;
            }
        })
    }
}

impl Drop for QueueExit {
    fn drop(&mut self) {
        let Some(armed) = self.armed.take() else {
            return;
        };
        let name = armed.lock.name.clone();
        let (tried, _) = oneshot::channel();
        spawn_or(async move { leave(&armed, false, tried).await }, || {
            tracing::warn!(
                lock = %name,
                "fair waiter dropped outside a Tokio runtime; it stays queued until its deadline or the client's shutdown"
            )
        });
    }
}

/// Takes the waiter out of the queue, once its attempts are answered (`keep`: it got the
/// lock, only its fence is set); `tried` is told after the first send. A send that fails
/// (Redis unreachable or too busy to answer in time, the connection being made again) is
/// tried again for as long as a waiter rides out an outage (`watchdog_timeout`, or the
/// waiter's wait if longer): a place left in the queue would stall the waiters behind it
/// (by as much as the hold lasted, since the head keeps everyone's place while it asks), and
/// an attempt still on the wire must find the fence set. Running the exit twice is harmless
/// (the first run took the trace, so no later one undoes a hold).
async fn leave(armed: &Armed, keep: bool, tried: oneshot::Sender<()>) {
    let Armed {
        lock,
        owner,
        wait_ms,
        id,
        on_the_wire,
    } = armed;
    on_the_wire.drained().await;
    if !keep && !lock.engine.queue_exits().leaving(*id) {
        // Another task of the owner still waits for the place.
        lock.engine.queue_exits().unregister(*id);
        return;
    }
    let wait = Duration::from_millis(u64::try_from(*wait_ms).unwrap_or(0));
    let lapses = Instant::now() + wait.max(lock.engine.settings().watchdog_timeout);
    let mut tried = Some(tried);
    let mut sent = 1;
    loop {
        let fenced = on_the_wire.had_unknown();
        let outcome = if fenced || keep {
            let call = Fair::leave_call(lock, owner, *wait_ms, on_the_wire.mark(), (fenced, keep));
            lock.engine.run(call, &lock.name).await.map(drop)
        } else {
            depart_together(lock, owner, *wait_ms).await
        };
        if let Some(tried) = tried.take() {
            let _ = tried.send(());
        }
        match outcome {
            Ok(_) => break,
            // Shutting down: the shutdown takes the waiter out (it is still registered).
            Err(Error::Closed) => return,
            Err(error @ Error::Redis(_)) if Instant::now() + queue_exit_pause(sent) < lapses => {
                tracing::debug!(%error, lock = %lock.name, %owner, "leaving the fair queue failed; trying again");
                tokio::time::sleep(queue_exit_pause(sent)).await;
                sent += 1;
            }
            Err(error) => {
                tracing::warn!(%error, lock = %lock.name, %owner, "leaving the fair queue failed; the waiter stays queued until its deadline");
                break;
            }
        }
    }
    lock.engine.queue_exits().unregister(*id);
}

/// Takes `owner` out of `lock`'s queue together with the other waiters of this client that
/// leave it meanwhile: filed with them, and sent in one script (`lua/fair_leave_many.lua`)
/// by the first of them, while the script before it runs. Once its own departure is
/// answered, the sender hands the sending over to the next waiter filed. How the script
/// that took it out went.
async fn depart_together(lock: &Target, owner: &LockOwner, wait_ms: i64) -> Result<(), Error> {
    let exits = lock.engine.queue_exits();
    let queue: Str = lock.keys.fair_queue().into();
    if let Some(telling) = exits.depart(&queue, owner.field().clone(), wait_ms) {
        match telling.await {
            Ok(Told::Left(outcome)) => return outcome,
            Ok(Told::Send) => {}
            // A sender cancelled before it sent this departure: one more try, as after a
            // failure.
            Err(_) => return Err(lost_sender()),
        }
    }
    let mut sending = Sending {
        exits,
        queue: &queue,
        done: false,
    };
    let mut own = None;
    while own.is_none() {
        let batch = exits.next_departures(&queue);
        if batch.is_empty() {
            break;
        }
        let call = Fair::leave_many_call(lock, &batch);
        let sent = lock.engine.run(call, &lock.name).await.map(drop);
        for departure in batch {
            match departure.told {
                Some(told) => drop(told.send(Told::Left(sent.clone()))),
                None => own = Some(sent.clone()),
            }
        }
    }
    sending.done = true;
    exits.hand_over(&queue);
    own.unwrap_or_else(|| Err(lost_sender()))
}

/// A departure that no sender took out: tried again, as after a failure.
fn lost_sender() -> Error {
    let why = "the sender of the queue's departures stopped";
    Error::Redis(RedisError::new(ErrorKind::Canceled, why))
}

/// The sender of a queue's departures, while it sends: cancelled, it lets the others know.
struct Sending<'a> {
    exits: &'a QueueExits,
    queue: &'a Str,
    done: bool,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.exits.abandon_departures(self.queue);
        }
    }
}
