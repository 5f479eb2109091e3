//! This client's fair waiters that may be in a queue, and their departures: sent together,
//! one script per queue at a time, so that a crowd of waiters giving up costs one walk of the
//! line per batch instead of one per waiter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::base::error::Error;
use crate::base::keys::Str;
use crate::topology::script::Call;

/// The most departures one script takes: bounds how long it runs and its argument list.
const MOST_PER_BATCH: usize = 500;

/// This client's fair waiters that may be in a queue, each with the script that takes it
/// out (`fair_acquire_failed.lua`): shutdown runs them all before it closes the connection.
/// A waiter is registered before its first acquire script and unregistered when it got
/// the lock or has left the queue.
#[derive(Default)]
pub(crate) struct QueueExits {
    next_id: AtomicU64,
    registry: Mutex<Registry>,
    /// Departures filed per queue; a queue listed has a sender.
    departures: Mutex<HashMap<Str, Vec<Departure>>>,
}

#[derive(Default)]
struct Registry {
    waiters: HashMap<u64, QueuedWaiter>,
    /// Shutdown took the waiters: from then on nobody can join a queue, and nothing is kept.
    taken: bool,
}

/// A waiter in a fair queue: the place it waits for (tasks sharing an owner share one), and
/// the script that takes that place out.
struct QueuedWaiter {
    place: Str,
    leave: Call,
    leaving: bool,
}

impl QueueExits {
    /// Registers a waiter about to join a queue at `place` (the queue and the owner); `leave`
    /// takes it out again.
    pub(crate) fn register(&self, place: Str, leave: Call) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut registry = self.registry.lock();
        if !registry.taken {
            let waiter = QueuedWaiter {
                place,
                leave,
                leaving: false,
            };
            registry.waiters.insert(id, waiter);
        }
        id
    }

    /// A new id, unique in this client, for a wait's fence (see `OnTheWire`).
    pub(crate) fn wait_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Waiter `id` gives up: whether its place must be taken out of the queue, which is so
    /// unless another task of the same owner still waits for it.
    pub(crate) fn leaving(&self, id: u64) -> bool {
        let mut registry = self.registry.lock();
        let Some(place) = registry.waiters.get_mut(&id).map(|waiter| {
            waiter.leaving = true;
            waiter.place.clone()
        }) else {
            return true;
        };
        !(registry.waiters.values()).any(|waiter| waiter.place == place && !waiter.leaving)
    }

    /// The waiter got the lock or left the queue.
    pub(crate) fn unregister(&self, id: u64) {
        self.registry.lock().waiters.remove(&id);
    }

    pub(super) fn take_all(&self) -> Vec<Call> {
        let mut registry = self.registry.lock();
        registry.taken = true;
        registry
            .waiters
            .drain()
            .map(|(_, waiter)| waiter.leave)
            .collect()
    }
}

/// One waiter's departure from a queue, filed to be sent with the others of the queue.
pub(crate) struct Departure {
    /// Its owner field, and its wait in ms (what it added to the deadlines behind it).
    pub(crate) owner: Str,
    pub(crate) wait_ms: i64,
    /// How its waiter is told; `None` for the sender's own.
    pub(crate) told: Option<oneshot::Sender<Told>>,
}

/// What a filed departure's waiter is told.
pub(crate) enum Told {
    /// How the script that took it out went.
    Left(Result<(), Error>),
    /// It sends the queue's departures now, its own first (see [`QueueExits::hand_over`]).
    Send,
}

impl QueueExits {
    /// Files the departure of `owner` (wait `wait_ms`) from `queue`: `None` when nobody
    /// sends that queue's departures, so the caller must, its own first (see
    /// [`next_departures`](Self::next_departures)); else what its waiter will be told.
    pub(crate) fn depart(
        &self,
        queue: &Str,
        owner: Str,
        wait_ms: i64,
    ) -> Option<oneshot::Receiver<Told>> {
        let mut departures = self.departures.lock();
        let Some(filed) = departures.get_mut(queue) else {
            let own = Departure {
                owner,
                wait_ms,
                told: None,
            };
            departures.insert(queue.clone(), vec![own]);
            return None;
        };
        let (told, telling) = oneshot::channel();
        filed.push(Departure {
            owner,
            wait_ms,
            told: Some(told),
        });
        Some(telling)
    }

    /// The departures from `queue` its sender sends next, in the order they were filed.
    pub(crate) fn next_departures(&self, queue: &Str) -> Vec<Departure> {
        let mut departures = self.departures.lock();
        let Some(filed) = departures.get_mut(queue) else {
            return Vec::new();
        };
        let batch = filed.len().min(MOST_PER_BATCH);
        filed.drain(..batch).collect()
    }

    /// The sender of `queue`'s departures had its own answered: the first departure filed
    /// since sends the rest, so that no waiter waits for others' departures to return.
    pub(crate) fn hand_over(&self, queue: &Str) {
        let mut departures = self.departures.lock();
        let Some(filed) = departures.get_mut(queue) else {
            return;
        };
        while let Some(next) = filed.first_mut() {
            let told = next
                .told
                .take()
                .expect("only the sender's own departure is untold");
            if told.send(Told::Send).is_ok() {
                return;
            }
            // Its waiter is gone (its task was cancelled): nobody to send it.
            filed.remove(0);
        }
        departures.remove(queue);
    }

    /// The sender of `queue`'s departures stopped before it was done (its task was
    /// cancelled): those still filed are told nothing, and try again on their own.
    pub(crate) fn abandon_departures(&self, queue: &Str) {
        self.departures.lock().remove(queue);
    }
}
