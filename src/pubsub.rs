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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, Pipeline, SubscriberClient};
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface, PubsubInterface};
use fred::types::config::Server;
use fred::types::{ClusterHash, ClusterStateChange, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::{is_transient, Error, Result};
use crate::observe;
use crate::redirect::slot_map_changed;
use crate::waiters::{EventClock, Moment, Waiters, Wake};

/// Which pub/sub commands carry unlock messages: Redisson's `shardedSubscriptionMode`.
/// Set it with [`LockClientBuilder::pubsub_mode`](crate::LockClientBuilder::pubsub_mode).
///
/// Waiters and releasers must meet on the same kind of channel: a message sent by PUBLISH
/// reaches only SUBSCRIBE listeners, one sent by SPUBLISH only SSUBSCRIBE listeners.
///
/// # Default
/// [`PubSubMode::Auto`], as Redisson's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PubSubMode {
    /// On a cluster whose servers have sharded pub/sub (Redis 7 and later), releases publish
    /// with SPUBLISH (as Redisson's `AUTO`), and waiters listen to both kinds of channel, so
    /// Java clients in either mode wake them. Everywhere else, classic pub/sub.
    ///
    /// Decided when the client connects, by asking every master with `PUBSUB SHARDNUMSUB`
    /// as Redisson does, and again whenever the cluster's set of masters changes or the
    /// subscriber connection comes back (a rolling upgrade to Redis 7, or a master without
    /// sharded pub/sub joining).
    #[default]
    Auto,
    /// SSUBSCRIBE and SPUBLISH only (Redisson's `ON`). Needs Redis 7.
    Sharded,
    /// SUBSCRIBE and PUBLISH only (Redisson's `OFF`, and every Redisson before 3.22).
    Classic,
    /// Listen to and publish on both kinds: for a cluster whose Java clients run in both
    /// modes (during an upgrade, say). Every release publishes twice. Needs Redis 7.
    Both,
}

/// What this client does with pub/sub, decided from the mode and the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flavour {
    /// Waiters listen with SUBSCRIBE.
    pub(crate) classic: bool,
    /// Waiters listen with SSUBSCRIBE.
    pub(crate) sharded: bool,
    /// What the scripts are told to publish with (see `lua/publish.lua`).
    publish: &'static str,
}

impl Flavour {
    pub(crate) const CLASSIC: Flavour = Flavour {
        classic: true,
        sharded: false,
        publish: "publish",
    };

    /// `Auto` on a cluster whose masters all have sharded pub/sub.
    const AUTO_SHARDED: Flavour = Flavour {
        classic: true,
        sharded: true,
        publish: "spublish",
    };

    /// The flavour of `mode` on a deployment that is a cluster or not, whose servers have
    /// sharded pub/sub or not.
    pub(crate) fn of(
        mode: PubSubMode,
        clustered: bool,
        sharded_supported: bool,
    ) -> Result<Flavour> {
        let needs_sharded = || {
            Error::invalid(format!(
                "pub/sub mode {mode:?} needs sharded pub/sub, which the server lacks (Redis 7 or later)"
            ))
        };
        Ok(match mode {
            PubSubMode::Classic => Flavour::CLASSIC,
            PubSubMode::Auto if !(clustered && sharded_supported) => Flavour::CLASSIC,
            PubSubMode::Auto => Flavour::AUTO_SHARDED,
            PubSubMode::Sharded if sharded_supported => Flavour {
                classic: false,
                sharded: true,
                publish: "spublish",
            },
            PubSubMode::Both if sharded_supported => Flavour {
                classic: true,
                sharded: true,
                publish: "both",
            },
            PubSubMode::Sharded | PubSubMode::Both => return Err(needs_sharded()),
        })
    }

    /// What the lock scripts are told to publish with.
    pub(crate) fn publish_command(self) -> &'static str {
        self.publish
    }
}

/// The flavour in use: fixed by the mode, except `Auto` on a cluster, which the pub/sub
/// task decides again when the cluster's masters change.
pub(crate) struct Choice {
    fixed: Flavour,
    /// `Auto` on a cluster: the flavour follows `auto_sharded`.
    redecided: bool,
    auto_sharded: AtomicBool,
}

impl Choice {
    /// The choice of `mode` on a deployment that is a cluster or not, whose servers have
    /// sharded pub/sub or not.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a mode that needs sharded pub/sub the servers lack.
    pub(crate) fn new(
        mode: PubSubMode,
        clustered: bool,
        sharded_supported: bool,
    ) -> Result<Choice> {
        Ok(Choice {
            fixed: Flavour::of(mode, clustered, sharded_supported)?,
            redecided: mode == PubSubMode::Auto && clustered,
            auto_sharded: AtomicBool::new(sharded_supported),
        })
    }

    /// What this client listens to and publishes with now.
    pub(crate) fn current(&self) -> Flavour {
        match (self.redecided, self.auto_sharded.load(Ordering::Acquire)) {
            (false, _) => self.fixed,
            (true, true) => Flavour::AUTO_SHARDED,
            (true, false) => Flavour::CLASSIC,
        }
    }
}

/// Whether the servers have sharded pub/sub (Redis 7 and later), asked as Redisson's AUTO
/// mode does, with `PUBSUB SHARDNUMSUB`: on a cluster, every master by `redis`'s slot map.
///
/// # Errors
/// A connection error or timeout: no answer either way.
pub(crate) async fn sharded_supported(redis: &Client) -> Result<bool, RedisError> {
    let masters = match redis.cached_cluster_state() {
        Some(routing) if redis.is_clustered() => routing.unique_primary_nodes(),
        _ => Vec::new(),
    };
    if masters.is_empty() {
        return answers_shardnumsub(redis).await;
    }
    for master in masters {
        if !answers_shardnumsub(&redis.with_cluster_node(master)).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn answers_shardnumsub(server: &impl ClientLike) -> Result<bool, RedisError> {
    let probe = CustomCommand::new_static("PUBSUB", ClusterHash::Random, false);
    match server.custom::<Value, _>(probe, vec!["SHARDNUMSUB"]).await {
        Ok(_) => Ok(true),
        // An older server refuses the subcommand; a connection error is no answer.
        Err(error) if is_transient(&error) => Err(error),
        Err(_) => Ok(false),
    }
}

/// What a message's payload asks of the local waiters; `None` for a message that is not an
/// unlock message.
fn wake_of(payload: &Value) -> Option<Wake> {
    match payload.as_str().as_deref().map(str::trim) {
        Some("0") => Some(Wake::One),
        Some("1") => Some(Wake::All),
        _ => None,
    }
}

struct Channel {
    refs: usize,
    waiters: Arc<Waiters>,
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
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription> {
        let (subscription, subscribed) = {
            let mut channels = self.channels.lock();
            let entry = channels.entry(channel.into()).or_insert_with(|| Channel {
                refs: 0,
                waiters: Arc::default(),
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

struct Task {
    subscriber: SubscriberClient,
    redis: Client,
    /// Channels whose last waiter left, with when to unsubscribe them (in that order).
    lingering: VecDeque<(Instant, Arc<str>)>,
    choice: Arc<Choice>,
    heartbeat: Duration,
    channels: Arc<Channels>,
    clock: Arc<EventClock>,
    messages: broadcast::Receiver<fred::types::Message>,
    reconnects: broadcast::Receiver<Server>,
    cluster_changes: broadcast::Receiver<Vec<ClusterStateChange>>,
    /// Whether the cluster's slot map is followed: subscriptions live on masters, which a
    /// slot move, a failover or a node taken out of the cluster takes them from, and `Auto`
    /// is decided again when the masters change.
    watch_topology: bool,
    /// The cluster's masters when `Auto` was last decided, sorted.
    masters: Vec<Server>,
    /// On a cluster, the master the classic subscriptions were last made on.
    classic_master: Option<Server>,
    /// Subscribing again after a reconnect failed: the next heartbeat tries again.
    resubscribe_failed: bool,
}

/// The masters of the subscriber's slot map, sorted.
fn primaries(subscriber: &SubscriberClient) -> Vec<Server> {
    let mut masters = subscriber
        .cached_cluster_state()
        .map(|routing| routing.unique_primary_nodes())
        .unwrap_or_default();
    masters.sort();
    masters
}

impl Task {
    async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Request>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut topology = tokio::time::interval(TOPOLOGY_CHECK);
        topology.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval(self.heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                // Only ever set to true: any change means shut down.
                _ = shutdown.changed() => break,
                message = self.messages.recv() => match message {
                    Ok(message) => self.dispatch(&message),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "pub/sub receiver lagged; waking every waiter");
                        wake_all(&self.channels, self.clock.tick());
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                reconnect = self.reconnects.recv() => match reconnect {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        // The server may be another one now (restarted, upgraded).
                        self.decide_auto().await;
                        self.resubscribe().await;
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = topology.tick(), if self.watch_topology => self.follow_topology(true).await,
                // fred reads the slot map on a MOVED or a reconnect too (and announces every
                // read, ours included): look at the map it read, without reading it again.
                change = self.cluster_changes.recv(), if self.watch_topology => match change {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.follow_topology(false).await,
                    Err(broadcast::error::RecvError::Closed) => self.watch_topology = false,
                },
                _ = sleep_until_first(&self.lingering), if !self.lingering.is_empty() => {
                    self.expire_idle().await;
                }
                _ = heartbeat.tick() => {
                    if self.resubscribe_failed {
                        self.subscribe_again().await;
                    } else {
                        self.check_connection().await;
                    }
                }
                request = requests.recv() => match request {
                    Some(request) => {
                        let mut batch = vec![request];
                        while let Ok(more) = requests.try_recv() {
                            batch.push(more);
                        }
                        self.handle(batch).await;
                    }
                    None => break,
                },
            }
        }
        let _ = self.subscriber.quit().await;
        wake_all(&self.channels, self.clock.tick());
    }

    fn dispatch(&self, message: &fred::types::Message) {
        let Some(wake) = wake_of(&message.value) else {
            return;
        };
        let channel: &str = &message.channel;
        let waiters = (self.channels.lock().get(channel)).map(|entry| entry.waiters.clone());
        if let Some(waiters) = waiters {
            waiters.wake(self.clock.tick(), wake);
        }
    }

    /// Unsubscribes the channels that stayed without a waiter for LINGER.
    async fn expire_idle(&mut self) {
        let now = Instant::now();
        let mut expired = Vec::new();
        {
            let mut channels = self.channels.lock();
            while self.lingering.front().is_some_and(|(due, _)| *due <= now) {
                let (_, channel) = self.lingering.pop_front().expect("checked above");
                // Skip a channel taken again (or idle again since, with a later entry).
                let idle = channels.get(&channel).is_some_and(|entry| {
                    entry.refs == 0 && entry.idle_since.is_some_and(|since| since + LINGER <= now)
                });
                if idle {
                    let entry = channels.remove(&channel).expect("checked above");
                    if entry.subscribed {
                        expired.push(channel);
                    }
                }
            }
        }
        if !expired.is_empty() {
            if let Err(error) = self.unsubscribe(&expired).await {
                tracing::debug!(%error, "unsubscribe failed");
            }
        }
    }

    /// Applies a batch of requests in order, with one PING to confirm the subscriptions.
    async fn handle(&mut self, batch: Vec<Request>) {
        let mut to_subscribe = Vec::new();
        let mut waiting = Vec::new();
        {
            let mut channels = self.channels.lock();
            for request in batch {
                match request {
                    Request::Subscribe(channel, done) => match channels.get(&channel) {
                        Some(entry) if entry.subscribed => {
                            let _ = done.send(Ok(()));
                        }
                        Some(_) => {
                            if !to_subscribe.contains(&channel) {
                                to_subscribe.push(channel.clone());
                            }
                            waiting.push((channel, done));
                        }
                        // Every reference is gone already: nobody needs the answer.
                        None => {}
                    },
                    Request::Release(channel) => {
                        // Unsubscribed after LINGER, unless a waiter comes back meanwhile.
                        if let Some(entry) = channels.get_mut(&channel) {
                            if entry.refs == 0 && entry.idle_since.is_none() {
                                let now = Instant::now();
                                entry.idle_since = Some(now);
                                self.lingering.push_back((now + LINGER, channel));
                            }
                        }
                    }
                }
            }
        }

        if to_subscribe.is_empty() {
            for (_, done) in waiting {
                let _ = done.send(Ok(()));
            }
            return;
        }
        let result = self.subscribe_confirmed(&to_subscribe).await;
        if result.is_ok() {
            let at = self.clock.tick();
            let mut channels = self.channels.lock();
            for channel in &to_subscribe {
                if let Some(entry) = channels.get_mut(channel) {
                    entry.subscribed = true;
                    entry.waiters.set_confirmed(Some(at));
                }
            }
        }
        for (_, done) in waiting {
            let _ = done.send(result.clone());
        }
    }

    /// Subscribes `channels` and returns once the server confirmed it.
    async fn subscribe_confirmed(&mut self, channels: &[Arc<str>]) -> Result<(), RedisError> {
        let flavour = self.choice.current();
        if flavour.classic {
            self.subscribe_classic(channels).await?;
        }
        if flavour.sharded {
            // One channel a command: channels of different slots may live on different
            // masters. fred waits for each confirmation.
            for channel in channels {
                self.ssubscribe(channel).await?;
            }
        }
        Ok(())
    }

    /// SUBSCRIBEs `channels`, returning once the server confirmed it, and notes on which
    /// master of a cluster.
    async fn subscribe_classic(&mut self, channels: &[Arc<str>]) -> Result<(), RedisError> {
        let names: Vec<String> = channels.iter().map(|c| c.to_string()).collect();
        // fred answers SUBSCRIBE before the server does and drops the server's
        // confirmation; a refusal (a user without the channel) becomes the reply of the
        // next command queued on the connection, or is lost when none is queued yet. A PING
        // sent with it in one pipeline (fred sends classic pub/sub commands of a cluster to
        // one node) is queued before either reply arrives: it gets the refusal, or its
        // answer once the server has subscribed.
        let pipeline = Pipeline::from(self.subscriber.clone());
        let () = pipeline.subscribe(names).await?;
        let ping = CustomCommand::new_static("PING", self.classic_node(), false);
        let _: Value = pipeline.custom::<Value, Value>(ping, vec![]).await?;
        let _: Value = pipeline.last().await?;
        if let ClusterHash::Custom(slot) = self.classic_node() {
            let routing = self.subscriber.cached_cluster_state();
            self.classic_master = routing.and_then(|routing| routing.get_server(slot).cloned());
        }
        Ok(())
    }

    /// SSUBSCRIBEs `channel` on the master serving its slot, and notes which one that is.
    async fn ssubscribe(&self, channel: &str) -> Result<(), RedisError> {
        self.subscriber.ssubscribe(channel.to_string()).await?;
        let node = self.node_of(channel);
        if let Some(entry) = self.channels.lock().get_mut(channel) {
            entry.node = node;
        }
        Ok(())
    }

    async fn unsubscribe(&self, channels: &[Arc<str>]) -> Result<(), RedisError> {
        let flavour = self.choice.current();
        if flavour.classic {
            let names: Vec<String> = channels.iter().map(|c| c.to_string()).collect();
            self.subscriber.unsubscribe(names).await?;
        }
        if flavour.sharded {
            for channel in channels {
                self.subscriber.sunsubscribe(channel.to_string()).await?;
            }
        }
        Ok(())
    }

    /// Where fred sends this client's classic pub/sub commands.
    fn classic_node(&self) -> ClusterHash {
        if self.subscriber.is_clustered() {
            ClusterHash::Custom(fred::util::redis_keyslot(self.subscriber.id().as_bytes()))
        } else {
            ClusterHash::Random
        }
    }

    /// The master that serves `channel`'s slot, by the subscriber's routing table.
    fn node_of(&self, channel: &str) -> Option<Server> {
        let slot = fred::util::redis_keyslot(channel.as_bytes());
        let routing = self.subscriber.cached_cluster_state()?;
        routing.get_server(slot).cloned()
    }

    /// Reads the cluster's slot map again (when `read` and the map changed, see
    /// [`slot_map_changed`]); decides `Auto` again when the masters changed, and follows
    /// sharded subscriptions whose slot moved.
    async fn follow_topology(&mut self, read: bool) {
        let subscribed = self.channels.lock().values().any(|entry| entry.subscribed);
        if !subscribed && !self.choice.redecided {
            return;
        }
        let known = self.subscriber.cached_cluster_state();
        if read && slot_map_changed(&self.redis, known, TOPOLOGY_CHECK).await {
            if let Err(error) = self.subscriber.sync_cluster().await {
                tracing::debug!(%error, "reading the cluster's slots failed");
                return;
            }
        }
        let masters = primaries(&self.subscriber);
        if self.choice.redecided && masters != self.masters && self.decide_auto().await {
            self.masters = masters;
        }
        if subscribed && self.choice.current().sharded {
            self.follow_slots().await;
        }
        if subscribed && self.choice.current().classic {
            self.follow_classic_master().await;
        }
    }

    /// Subscribes again where the classic subscriptions' master is no master any more (a
    /// node taken out of the cluster: fred drops it without a reconnect), and wakes every
    /// waiter, who may have missed a release.
    async fn follow_classic_master(&mut self) {
        let Some(master) = &self.classic_master else {
            return;
        };
        if primaries(&self.subscriber).contains(master) {
            return;
        }
        tracing::debug!(%master, "the classic subscriptions' master left; subscribing again");
        let subscribed = self.subscribed();
        set_confirmed(&self.channels, &subscribed, None);
        match self.subscribe_classic(&subscribed).await {
            Ok(()) => {
                let at = self.clock.tick();
                set_confirmed(&self.channels, &subscribed, Some(at));
                wake_all(&self.channels, at);
            }
            // The next look at the cluster tries again.
            Err(error) => tracing::debug!(%error, "subscribing again failed; retrying"),
        }
    }

    /// The channels the server has confirmed.
    fn subscribed(&self) -> Vec<Arc<str>> {
        let channels = self.channels.lock();
        channels
            .iter()
            .filter(|(_, entry)| entry.subscribed)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// For `Auto` on a cluster: asks every master again whether it has sharded pub/sub. When
    /// the answer changed, makes or drops the sharded subscriptions and wakes every waiter
    /// (a release may have published the other way meanwhile). False when a master did not
    /// answer, so that the next check asks again.
    async fn decide_auto(&mut self) -> bool {
        if !self.choice.redecided {
            return true;
        }
        if let Err(error) = self.redis.sync_cluster().await {
            tracing::debug!(%error, "reading the cluster's slots failed");
            return false;
        }
        let supported = match sharded_supported(&self.redis).await {
            Ok(supported) => supported,
            Err(error) => {
                tracing::debug!(%error, "asking the masters for sharded pub/sub failed");
                return false;
            }
        };
        if supported == self.choice.auto_sharded.load(Ordering::Acquire) {
            return true;
        }
        tracing::info!(
            sharded = supported,
            "the cluster's masters changed: pub/sub mode Auto decided again"
        );
        let subscribed = self.subscribed();
        if supported {
            // Listen before publishing by SPUBLISH. A channel that fails here has no node
            // and is retried by `follow_slots`.
            for channel in &subscribed {
                if let Err(error) = self.ssubscribe(channel).await {
                    tracing::debug!(%error, %channel, "SSUBSCRIBE failed");
                    set_confirmed(&self.channels, std::slice::from_ref(channel), None);
                }
            }
            self.choice.auto_sharded.store(true, Ordering::Release);
        } else {
            self.choice.auto_sharded.store(false, Ordering::Release);
            for channel in &subscribed {
                let _ = self.subscriber.sunsubscribe(channel.to_string()).await;
                if let Some(entry) = self.channels.lock().get_mut(channel) {
                    entry.node = None;
                }
            }
        }
        wake_all(&self.channels, self.clock.tick());
        true
    }

    /// Moves sharded subscriptions whose slot changed masters (a slot migration or a
    /// failover: the old master drops them with a pushed SUNSUBSCRIBE that fred does not
    /// report) to the new master, and wakes their waiters, who may have missed a release.
    async fn follow_slots(&mut self) {
        let Some(routing) = self.subscriber.cached_cluster_state() else {
            return;
        };
        let moved: Vec<Arc<str>> = {
            let channels = self.channels.lock();
            channels
                .iter()
                .filter(|(name, entry)| {
                    let slot = fred::util::redis_keyslot(name.as_bytes());
                    entry.subscribed && entry.node.as_ref() != routing.get_server(slot)
                })
                .map(|(name, _)| name.clone())
                .collect()
        };
        set_confirmed(&self.channels, &moved, None);
        for channel in moved {
            tracing::debug!(%channel, "the channel's slot moved; subscribing on its new master");
            match self.ssubscribe(&channel).await {
                Ok(()) => {
                    observe::resubscribed_after_slot_move();
                    if let Some(entry) = self.channels.lock().get(&channel) {
                        let at = self.clock.tick();
                        entry.waiters.set_confirmed(Some(at));
                        entry.waiters.wake(at, Wake::All);
                    }
                }
                Err(error) => tracing::debug!(%error, %channel, "resubscribing failed; retrying"),
            }
        }
    }

    /// PINGs each connection that holds subscriptions, while a channel is subscribed. On a
    /// dead connection the PING gets no answer, fred closes the connection as unresponsive
    /// and makes a new one, and [`resubscribe`](Task::resubscribe) follows.
    async fn check_connection(&self) {
        let flavour = self.choice.current();
        let mut targets = Vec::new();
        {
            let channels = self.channels.lock();
            let subscribed: Vec<_> = channels.iter().filter(|(_, e)| e.subscribed).collect();
            if subscribed.is_empty() {
                return;
            }
            if !self.subscriber.is_clustered() {
                targets.push(ClusterHash::Random);
            } else {
                if flavour.classic {
                    targets.push(self.classic_node());
                }
                if flavour.sharded {
                    // One channel of each master that holds sharded subscriptions.
                    let mut masters = Vec::new();
                    for (name, entry) in subscribed {
                        if entry.node.is_some() && !masters.contains(&&entry.node) {
                            masters.push(&entry.node);
                            let slot = fred::util::redis_keyslot(name.as_bytes());
                            targets.push(ClusterHash::Custom(slot));
                        }
                    }
                }
            }
        }
        for target in targets {
            let ping = CustomCommand::new_static("PING", target, false);
            if let Err(error) = self.subscriber.custom::<Value, Value>(ping, vec![]).await {
                tracing::debug!(%error, "a subscriber connection did not answer a PING");
            }
        }
    }

    /// After a reconnect the server has forgotten our channels and messages may have been
    /// lost: subscribe again, then let every waiter check the lock.
    async fn resubscribe(&mut self) {
        observe::pubsub_reconnected(self.subscribed().len());
        self.subscribe_again().await;
    }

    /// Subscribes every subscribed channel again, then lets every waiter check the lock.
    /// When the server refuses (a permission, a cluster that is down), the next heartbeat
    /// tries again.
    async fn subscribe_again(&mut self) {
        let subscribed = self.subscribed();
        self.resubscribe_failed = false;
        if !subscribed.is_empty() {
            set_confirmed(&self.channels, &subscribed, None);
            match self.subscribe_confirmed(&subscribed).await {
                Ok(()) => set_confirmed(&self.channels, &subscribed, Some(self.clock.tick())),
                Err(error) => {
                    tracing::warn!(%error, "subscribing again after a reconnect failed; retrying");
                    self.resubscribe_failed = true;
                }
            }
        }
        wake_all(&self.channels, self.clock.tick());
    }
}

/// Sleeps until the first lingering channel is due.
async fn sleep_until_first(lingering: &VecDeque<(Instant, Arc<str>)>) {
    if let Some((due, _)) = lingering.front() {
        tokio::time::sleep_until(*due).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_choose_what_to_listen_to_and_publish_with() {
        let of = |mode, clustered, sharded| {
            Flavour::of(mode, clustered, sharded).map(|f| (f.classic, f.sharded, f.publish))
        };
        // Auto is Redisson's AUTO: sharded publishing only on a cluster that has it.
        assert_eq!(
            of(PubSubMode::Auto, false, true).unwrap(),
            (true, false, "publish")
        );
        assert_eq!(
            of(PubSubMode::Auto, true, false).unwrap(),
            (true, false, "publish")
        );
        assert_eq!(
            of(PubSubMode::Auto, true, true).unwrap(),
            (true, true, "spublish")
        );
        assert_eq!(
            of(PubSubMode::Classic, true, true).unwrap(),
            (true, false, "publish")
        );
        assert_eq!(
            of(PubSubMode::Sharded, true, true).unwrap(),
            (false, true, "spublish")
        );
        assert_eq!(
            of(PubSubMode::Both, true, true).unwrap(),
            (true, true, "both")
        );
        // Never a publish command the server lacks: a release must not fail after its writes.
        assert!(of(PubSubMode::Sharded, true, false).is_err());
        assert!(of(PubSubMode::Both, false, false).is_err());
    }

    #[test]
    fn decodes_redisson_messages() {
        assert_eq!(wake_of(&Value::from("0")), Some(Wake::One));
        assert_eq!(wake_of(&Value::from("1")), Some(Wake::All));
        assert_eq!(wake_of(&Value::from(1i64)), Some(Wake::All));
        assert_eq!(wake_of(&Value::from("2")), None);
        assert_eq!(wake_of(&Value::from("unlock")), None);
    }
}
