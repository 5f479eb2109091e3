//! The pub/sub task: the only one that talks to the subscriber connection. It subscribes,
//! confirms, lingers and unsubscribes channels, dispatches messages, keeps the connection
//! alive and, on a cluster, follows the slot map.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, Pipeline, SubscriberClient};
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, ClusterInterface, PubsubInterface};
use fred::types::config::Server;
use fred::types::{ClusterHash, ClusterStateChange, CustomCommand, Value};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use crate::base::error::Result;
use crate::base::observe;
use crate::topology::redirect::slot_map_changed;
use crate::topology::waiters::{EventClock, Wake};

use super::{
    set_confirmed, sharded_supported, wake_all, wake_of, Channels, Choice, Request, LINGER,
    TOPOLOGY_CHECK,
};

pub(super) struct Task {
    pub(super) subscriber: SubscriberClient,
    pub(super) redis: Client,
    /// Channels whose last waiter left, with when to unsubscribe them (in that order).
    pub(super) lingering: VecDeque<(Instant, Arc<str>)>,
    pub(super) choice: Arc<Choice>,
    pub(super) heartbeat: Duration,
    pub(super) channels: Arc<Channels>,
    pub(super) clock: Arc<EventClock>,
    pub(super) messages: broadcast::Receiver<fred::types::Message>,
    pub(super) reconnects: broadcast::Receiver<Server>,
    pub(super) cluster_changes: broadcast::Receiver<Vec<ClusterStateChange>>,
    /// Whether the cluster's slot map is followed: subscriptions live on masters, which a
    /// slot move, a failover or a node taken out of the cluster takes them from, and `Auto`
    /// is decided again when the masters change.
    pub(super) watch_topology: bool,
    /// The cluster's masters when `Auto` was last decided, sorted.
    pub(super) masters: Vec<Server>,
    /// On a cluster, the master the classic subscriptions were last made on.
    pub(super) classic_master: Option<Server>,
    /// Subscribing again after a reconnect failed: the next heartbeat tries again.
    pub(super) resubscribe_failed: bool,
}

/// The masters of the subscriber's slot map, sorted.
pub(super) fn primaries(subscriber: &SubscriberClient) -> Vec<Server> {
    let mut masters = subscriber
        .cached_cluster_state()
        .map(|routing| routing.unique_primary_nodes())
        .unwrap_or_default();
    masters.sort();
    masters
}

impl Task {
    pub(super) async fn run(
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
        let channel: &str = &message.channel;
        let listening = (self.channels.lock().get(channel))
            .map(|entry| (entry.waiters.clone(), entry.messages));
        let Some((waiters, messages)) = listening else {
            return;
        };
        if let Some(wake) = wake_of(&message.value, messages) {
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
pub(super) async fn sleep_until_first(lingering: &VecDeque<(Instant, Arc<str>)>) {
    if let Some((due, _)) = lingering.front() {
        tokio::time::sleep_until(*due).await;
    }
}
