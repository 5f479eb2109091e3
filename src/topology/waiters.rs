//! The local waiters of one lock channel, in the order they began to wait. An unlock message
//! wakes the longest-waiting waiter not woken already; a waiter keeps its place
//! through all its attempts, so one that was woken and lost the race (to another client, or
//! to a task that asked again at once) is woken first next time instead of going to the back.
//!
//! A wake-up is never lost: one that arrives while a waiter's attempt is in flight makes it
//! try again, and a waiter that leaves with a wake-up it has not answered passes it on.
//!
//! The pub/sub events of a client (messages, confirmed subscriptions, wake-ups of every
//! waiter) are stamped with [`Moment`]s of one [`EventClock`], so a waiter that joins can tell
//! whether a release may have happened unseen since it last looked at the lock.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Poll, Waker};

use parking_lot::Mutex;

/// What a message asks of the local waiters (each kind reads its own messages: see
/// [`Messages`](crate::topology::pubsub::Messages)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// One waiter may now succeed (a lock's `0`).
    One,
    /// Every waiter should try (a write unlock freed the read side).
    All,
}

/// A point in the order of one client's pub/sub events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Moment(u64);

/// Orders one client's pub/sub events: each gets a later [`Moment`] than every moment read
/// before it.
#[derive(Default)]
pub(crate) struct EventClock(AtomicU64);

impl EventClock {
    /// The moment now. An event stamped at or before it was seen before this call.
    pub(crate) fn now(&self) -> Moment {
        Moment(self.0.load(Ordering::SeqCst))
    }

    /// The moment of a new event, later than every moment read so far.
    pub(crate) fn tick(&self) -> Moment {
        Moment(self.0.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

/// The waiters of one channel. Shared by the channel's subscription and its tickets.
#[derive(Default)]
pub(crate) struct Waiters {
    state: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// In the order they joined; ids grow, so the queue is sorted by id.
    places: VecDeque<Place>,
    next_id: u64,
    /// When the server last confirmed that it sends the channel's messages to this client;
    /// `None` while that is not known (not yet subscribed, or being subscribed again).
    confirmed: Option<Moment>,
    /// The latest wake-up delivered.
    last_wake: Option<Moment>,
}

struct Place {
    id: u64,
    standing: Standing,
    waker: Option<Waker>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Waiting for a wake-up (or between attempts that no wake-up asked for).
    Idle,
    /// Woken; the waiter has not started the attempt that answers it.
    Woken,
    /// The waiter's attempt answering a wake-up is in flight.
    Trying,
}

impl Waiters {
    /// Joins the back of the queue. `looked`: when the waiter last read the clock before
    /// looking at the lock. Returns the ticket, and whether a release may have happened
    /// since without this waiter being woken: then it must look again. It need not when the
    /// channel was confirmed before that look (the server delivers every later release's
    /// message) and no wake-up came since (one still to come finds the waiter in line).
    pub(crate) fn join(self: &Arc<Self>, looked: Option<Moment>) -> (Ticket, bool) {
        let mut queue = self.state.lock();
        let id = queue.next_id;
        queue.next_id += 1;
        queue.places.push_back(Place {
            id,
            standing: Standing::Idle,
            waker: None,
        });
        let seen_all = looked.is_some_and(|looked| {
            queue.confirmed.is_some_and(|at| at <= looked)
                && queue.last_wake.is_none_or(|at| at <= looked)
        });
        let ticket = Ticket {
            waiters: self.clone(),
            id,
        };
        (ticket, !seen_all)
    }

    /// The server confirmed the subscription at `at` (or, `None`, it may not deliver the
    /// channel's messages until subscribed again).
    pub(crate) fn set_confirmed(&self, at: Option<Moment>) {
        self.state.lock().confirmed = at;
    }

    /// Delivers a wake-up received at `at`: a message, or the notice that messages may have
    /// been lost.
    pub(crate) fn wake(&self, at: Moment, wake: Wake) {
        let mut queue = self.state.lock();
        // Wake-ups from outside the pub/sub task (a shutdown) may arrive out of order.
        queue.last_wake = queue.last_wake.max(Some(at));
        match wake {
            Wake::One => queue.wake_one(),
            Wake::All => {
                for place in &mut queue.places {
                    place.wake();
                }
            }
        }
    }

    /// How many waiters are in the queue.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state.lock().places.len()
    }
}

impl Queue {
    /// Wakes the first waiter not woken already. One whose attempt is in flight tries again
    /// after it (that attempt may have reached Redis before the release), ahead of those
    /// behind it.
    fn wake_one(&mut self) {
        if let Some(place) = (self.places.iter_mut()).find(|p| p.standing != Standing::Woken) {
            place.wake();
        }
    }

    fn place(&mut self, id: u64) -> &mut Place {
        let at = self.places.binary_search_by_key(&id, |place| place.id);
        &mut self.places[at.expect("a ticket's place stays until it is dropped")]
    }
}

impl Place {
    fn wake(&mut self) {
        self.standing = Standing::Woken;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// One waiter's place in its channel's queue, from its first attempt after subscribing to its
/// end. Dropping it leaves the queue, passing on a wake-up not yet answered.
pub(crate) struct Ticket {
    waiters: Arc<Waiters>,
    id: u64,
}

impl Ticket {
    /// Called before each attempt: a wake-up received so far is answered by this attempt.
    pub(crate) fn start_attempt(&self) {
        let mut queue = self.waiters.state.lock();
        let place = queue.place(self.id);
        if place.standing == Standing::Woken {
            place.standing = Standing::Trying;
        }
    }

    /// Called when an attempt has looked at the lock: the wake-ups taken before it are
    /// answered. One received while it was in flight stays, to be answered by the next.
    pub(crate) fn attempt_done(&self) {
        let mut queue = self.waiters.state.lock();
        let place = queue.place(self.id);
        if place.standing == Standing::Trying {
            place.standing = Standing::Idle;
        }
    }

    /// Whether a wake-up this waiter received is not yet answered by an attempt that looked
    /// at the lock.
    pub(crate) fn is_pending(&self) -> bool {
        self.waiters.state.lock().place(self.id).standing != Standing::Idle
    }

    /// Completes once this waiter is woken (at once if it was woken already).
    ///
    /// # Cancel safety
    /// Cancel-safe: a wake-up that arrives after the future is dropped stays with the ticket.
    pub(crate) async fn woken(&self) {
        poll_fn(|cx| {
            let mut queue = self.waiters.state.lock();
            let place = queue.place(self.id);
            if place.standing == Standing::Woken {
                return Poll::Ready(());
            }
            match &mut place.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                waker => *waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut queue = self.waiters.state.lock();
        if let Ok(at) = queue
            .places
            .binary_search_by_key(&self.id, |place| place.id)
        {
            let place = queue.places.remove(at).expect("found");
            if place.standing != Standing::Idle {
                queue.wake_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::Context;

    fn is_woken(ticket: &Ticket) -> bool {
        let woken = std::pin::pin!(ticket.woken());
        let mut cx = Context::from_waker(Waker::noop());
        woken.poll(&mut cx).is_ready()
    }

    fn queue() -> Arc<Waiters> {
        Arc::new(Waiters::default())
    }

    fn join(waiters: &Arc<Waiters>) -> Ticket {
        waiters.join(None).0
    }

    #[test]
    fn a_message_wakes_the_longest_waiting_waiter() {
        let waiters = queue();
        let (first, second) = (join(&waiters), join(&waiters));
        waiters.wake(Moment(1), Wake::One);
        assert!(is_woken(&first));
        assert!(!is_woken(&second));
        waiters.wake(Moment(1), Wake::One);
        assert!(is_woken(&second), "the first is woken already");
    }

    #[test]
    fn a_woken_waiter_that_lost_keeps_its_place() {
        let waiters = queue();
        let (first, second) = (join(&waiters), join(&waiters));
        waiters.wake(Moment(1), Wake::One);
        first.start_attempt();
        first.attempt_done(); // busy: it lost the race
        assert!(!first.is_pending());
        let third = join(&waiters);
        waiters.wake(Moment(1), Wake::One);
        assert!(is_woken(&first), "still first in line");
        assert!(!is_woken(&second) && !is_woken(&third));
    }

    #[test]
    fn a_wake_up_during_an_attempt_is_answered_by_the_next() {
        let waiters = queue();
        let only = join(&waiters);
        // Woken by a message while its first attempt (asked for by nothing) is in flight.
        only.start_attempt();
        waiters.wake(Moment(1), Wake::One);
        only.attempt_done();
        assert!(only.is_pending() && is_woken(&only));
        // Woken again while answering a wake-up: its attempt may have run before the release.
        only.start_attempt();
        waiters.wake(Moment(1), Wake::One);
        only.attempt_done();
        assert!(is_woken(&only));
    }

    #[test]
    fn a_waiter_trying_keeps_its_turn_over_those_behind() {
        let waiters = queue();
        let (first, second) = (join(&waiters), join(&waiters));
        // Its attempt (asked for by nothing) is in flight when the lock is released.
        first.start_attempt();
        waiters.wake(Moment(1), Wake::One);
        assert!(!is_woken(&second));
        first.attempt_done();
        assert!(is_woken(&first), "tries again after its attempt");
    }

    #[test]
    fn a_waiter_that_leaves_passes_on_a_wake_up_it_did_not_answer() {
        let waiters = queue();
        let (first, second, third) = (join(&waiters), join(&waiters), join(&waiters));
        waiters.wake(Moment(1), Wake::One);
        first.start_attempt();
        drop(first); // its attempt failed or was dropped: the wake-up goes on
        assert!(is_woken(&second));
        assert!(!is_woken(&third));

        // An answered wake-up is not passed on.
        second.start_attempt();
        second.attempt_done();
        drop(second);
        assert!(!is_woken(&third));
        assert_eq!(waiters.len(), 1);
    }

    #[test]
    fn wake_all_wakes_every_waiter_even_one_trying() {
        let waiters = queue();
        let (first, second) = (join(&waiters), join(&waiters));
        first.start_attempt();
        waiters.wake(Moment(1), Wake::All);
        first.attempt_done();
        assert!(is_woken(&first) && is_woken(&second));
    }

    #[test]
    fn a_waiter_joining_knows_whether_a_release_may_have_gone_unseen() {
        let (clock, waiters) = (EventClock::default(), queue());
        let before_confirmed = clock.now();
        waiters.set_confirmed(Some(clock.tick()));
        let looked = clock.now();
        assert!(waiters.join(None).1, "no look taken: must look");
        assert!(
            waiters.join(Some(before_confirmed)).1,
            "looked before the subscription"
        );
        assert!(
            !waiters.join(Some(looked)).1,
            "subscribed, and no message since"
        );

        // A message since the look: it may tell of a release the look did not see.
        waiters.wake(clock.tick(), Wake::One);
        assert!(waiters.join(Some(looked)).1);
        assert!(!waiters.join(Some(clock.now())).1);

        // Wake-ups delivered out of order: the latest counts.
        let (earlier, later) = (clock.tick(), clock.tick());
        waiters.wake(later, Wake::All);
        waiters.wake(earlier, Wake::One);
        assert!(waiters.join(Some(earlier)).1, "woken after the look");

        // Being subscribed again: messages may not arrive.
        waiters.set_confirmed(None);
        assert!(waiters.join(Some(clock.now())).1);
    }

    #[tokio::test]
    async fn a_wake_up_completes_a_parked_waiter() {
        let waiters = queue();
        let ticket = join(&waiters);
        let woken = tokio::spawn(async move { ticket.woken().await });
        tokio::task::yield_now().await;
        waiters.wake(Moment(1), Wake::One);
        tokio::time::timeout(std::time::Duration::from_secs(10), woken)
            .await
            .expect("woken")
            .unwrap();
    }
}
