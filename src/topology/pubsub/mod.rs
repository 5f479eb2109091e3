//! Unlock notifications: one subscriber connection per client, shared by every waiter.
//!
//! Waiters hold a [`Subscription`] per channel; channels are reference-counted and one
//! background task (the only one that talks to the subscriber connection, so SUBSCRIBE and
//! UNSUBSCRIBE reach the server in the order they were decided) subscribes, confirms each
//! batch with a PING on the same connection (fred's `subscribe()` returns before the server
//! has processed it), unsubscribes channels nobody has waited on for a moment (`LINGER`),
//! and dispatches messages.
//!
//! A message is a hint, never a promise: waiters always bound their wait by the holder's
//! TTL. So whenever messages may have been missed (fred's broadcast buffer lagged, the
//! connection came back) every waiter is woken to check again. A subscriber connection can
//! also die without a word (half-open: a NAT or firewall dropped it while idle), so while a
//! channel is subscribed the task PINGs it now and then: a connection that does not answer
//! is closed and made again by fred, which counts as a reconnect.

mod mode;
mod task;
#[cfg(test)]
mod tests;

pub use mode::PubSubMode;
pub(crate) use mode::{sharded_supported, Choice, Flavour};
use task::{primaries, Task};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::Server;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::base::error::{Error, Result};
use crate::topology::waiters::{EventClock, Moment, Waiters, Wake};

/// How the waiters of one channel read its messages: what a payload asks of them, `None`
/// for one that asks nothing. Given by the kind whose waiters subscribe.
pub(crate) type Messages = fn(&str) -> Option<Wake>;

/// A lock's unlock messages (protocol §9): `0` wakes one waiter, `1` (a write unlock that
/// freed the read side) every waiter.
pub(crate) fn unlock_messages(payload: &str) -> Option<Wake> {
    match payload.trim() {
        "0" => Some(Wake::One),
        "1" => Some(Wake::All),
        _ => None,
    }
}

/// What `payload` asks of waiters that read it with `messages`.
fn wake_of(payload: &Value, messages: Messages) -> Option<Wake> {
    messages(payload.as_str().as_deref()?)
}

struct Channel {
    refs: usize,
    waiters: Arc<Waiters>,
    /// How its messages are read: by the kind of its first waiter (each kind's channels
    /// have names of their own).
    messages: Messages,
    /// Set once the server has confirmed the subscription.
    subscribed: bool,
    /// The master that holds the sharded subscription, as the routing table named it.
    node: Option<Server>,
    /// When the last reference went, if none was taken since.
    idle_since: Option<Instant>,
}

/// How long a channel stays subscribed after its last waiter left. A waiter that comes back
/// within this time (an owner taking the same lock in a loop, a fair waiter on its own
/// channel) finds the subscription confirmed: no SUBSCRIBE, PING and UNSUBSCRIBE again.
const LINGER: Duration = Duration::from_millis(500);

type Channels = Mutex<HashMap<Arc<str>, Channel>>;

/// How often a cluster client checks the slot map while it has sharded subscriptions (fred
/// drops the server's notice that a subscription moved, so this bounds how late a waiter
/// may learn of a release right after a slot move or failover) and, in `Auto`, always (to
/// decide again when the masters change).
const TOPOLOGY_CHECK: Duration = Duration::from_secs(1);

enum Request {
    Subscribe(Arc<str>, oneshot::Sender<Result<(), RedisError>>),
    /// The last reference to a channel was dropped.
    Release(Arc<str>),
}

pub(crate) struct PubSub {
    channels: Arc<Channels>,
    requests: mpsc::UnboundedSender<Request>,
    choice: Arc<Choice>,
    clock: Arc<EventClock>,
}

impl PubSub {
    /// Starts the task that owns `subscriber`; it ends when `shutdown` turns true. While a
    /// channel is subscribed, the connection is checked every `heartbeat`. `redis`, the
    /// command client, asks the masters whether they have sharded pub/sub when `choice`
    /// must be decided again.
    pub(crate) fn start(
        subscriber: SubscriberClient,
        redis: Client,
        choice: Choice,
        heartbeat: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> PubSub {
        let channels: Arc<Channels> = Arc::default();
        let clock: Arc<EventClock> = Arc::default();
        let choice = Arc::new(choice);
        let (requests, request_rx) = mpsc::unbounded_channel();
        let clustered = subscriber.is_clustered();
        let task = Task {
            lingering: VecDeque::new(),
            messages: subscriber.message_rx(),
            reconnects: subscriber.reconnect_rx(),
            cluster_changes: subscriber.cluster_change_rx(),
            watch_topology: clustered,
            masters: primaries(&subscriber),
            classic_master: None,
            resubscribe_failed: false,
            subscriber,
            redis,
            choice: choice.clone(),
            heartbeat,
            channels: channels.clone(),
            clock: clock.clone(),
        };
        tokio::spawn(task.run(request_rx, shutdown));
        PubSub {
            channels,
            requests,
            choice,
            clock,
        }
    }

    /// What this client listens to and publishes with now.
    pub(crate) fn flavour(&self) -> Flavour {
        self.choice.current()
    }

    /// Takes a reference to `channel`, subscribing when this is the first one. Returns
    /// once the server is known to deliver the channel's messages to this client.
    ///
    /// # Cancel safety
    /// Dropping the future drops the reference it took.
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        messages: Messages,
    ) -> Result<Subscription> {
        let (subscription, subscribed) = {
            let mut channels = self.channels.lock();
            let entry = channels.entry(channel.into()).or_insert_with(|| Channel {
                refs: 0,
                waiters: Arc::default(),
                messages,
                subscribed: false,
                node: None,
                idle_since: None,
            });
            entry.refs += 1;
            entry.idle_since = None;
            let subscription = Subscription {
                channel: channel.into(),
                waiters: entry.waiters.clone(),
                channels: self.channels.clone(),
                requests: self.requests.clone(),
            };
            (subscription, entry.subscribed)
        };
        if !subscribed {
            let (done, confirmed) = oneshot::channel();
            self.requests
                .send(Request::Subscribe(subscription.channel.clone(), done))
                .map_err(|_| Error::Closed)?;
            confirmed.await.map_err(|_| Error::Closed)??;
        }
        Ok(subscription)
    }

    /// The number of channels this client is subscribed to or about to be.
    pub(crate) fn channel_count(&self) -> usize {
        self.channels.lock().len()
    }

    /// Wakes every waiter, for example so that they notice a shutdown.
    pub(crate) fn wake_all(&self) {
        wake_all(&self.channels, self.clock.tick());
    }

    /// The moment now: read before looking at a lock, it tells a waiter that joins later
    /// whether it may have missed a release (see [`Waiters::join`]).
    pub(crate) fn now(&self) -> Moment {
        self.clock.now()
    }
}

/// One waiter's reference to a channel. Dropping it releases the reference.
pub(crate) struct Subscription {
    channel: Arc<str>,
    waiters: Arc<Waiters>,
    channels: Arc<Channels>,
    requests: mpsc::UnboundedSender<Request>,
}

impl Subscription {
    /// The channel's local waiters, whom its messages wake.
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.channels.lock();
        if let Some(entry) = channels.get_mut(&self.channel) {
            entry.refs -= 1;
            if entry.refs == 0 {
                // The task unsubscribes unless someone took a new reference meanwhile.
                let _ = self.requests.send(Request::Release(self.channel.clone()));
            }
        }
    }
}

fn wake_all(channels: &Channels, at: Moment) {
    for entry in channels.lock().values() {
        entry.waiters.wake(at, Wake::All);
    }
}

/// Marks `names` as no longer known to be subscribed (`None`), or confirmed at `at`.
fn set_confirmed(channels: &Channels, names: &[Arc<str>], at: Option<Moment>) {
    let channels = channels.lock();
    for name in names {
        if let Some(entry) = channels.get(name) {
            entry.waiters.set_confirmed(at);
        }
    }
}
