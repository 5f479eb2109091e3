//! The engine shared by every lock kind of one client: script calls, the pub/sub
//! subscriptions, the watchdog, settings and owner ids.
//!
//! Topology (single server, sentinel, cluster), pub/sub flavour and slot grouping are
//! decided here and in `pubsub`/`watchdog`; lock kinds only ask for them.

pub(crate) mod hand_offs;
pub(crate) mod latches;
pub(crate) mod owed;
pub(crate) mod queue_exits;
pub(crate) mod records;
pub(crate) mod watchdog;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as RedisError;
use fred::interfaces::ClientLike;
use tokio::sync::{watch, OwnedRwLockReadGuard, RwLock};
use uuid::Uuid;

use crate::base::background::spawn_or;
use crate::base::error::{map_redis_error, Error, Result};
use crate::base::keys::{self, LockKeys};
use crate::base::owner::LockOwner;
use crate::engine::hand_offs::{HandOff, HandOffs};
use crate::engine::latches::Latches;
use crate::engine::queue_exits::QueueExits;
use crate::engine::watchdog::Watchdog;
use crate::topology::link::Link;
use crate::topology::pubsub::{Choice, PubSub};
use crate::topology::replicas::{Confirmation, Replicas};
use crate::topology::runner::{Placement, ScriptRunner};
use crate::topology::script::Call;
use crate::topology::sentinel::{self, NamedMaster};

/// The shortest time a master that counted replicas and counts none still has its writes
/// confirmed: longer than the Sentinels take to demote an old master that stayed up (they
/// read a replica's role every ten seconds, and wait eight more before they correct it).
const LOST_REPLICAS_GRACE: Duration = Duration::from_secs(30);

/// Settings fixed when the client is built.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) watchdog_timeout: Duration,
    pub(crate) name_prefix: String,
    pub(crate) command_timeout: Duration,
    /// The fair lock's per-waiter wait when the call gives none (Redisson's
    /// `fairLockWaitTimeout`).
    pub(crate) fair_wait_timeout: Duration,
    /// Whether each renewal script, and each deletion of unlock latches, covers keys of one
    /// cluster slot only.
    pub(crate) renew_by_slot: bool,
    /// How long a lock script's write waits for a replica; `None` when it does not.
    pub(crate) replica_wait: Option<Duration>,
    /// How often a lock may go from task to task of this client without being free.
    pub(crate) hand_off: HandOff,
}

pub(crate) struct Engine {
    redis: Client,
    /// Whether the lock scripts go through a client of their own (on a cluster), which this
    /// crate always made: `scripts.client()`.
    separate_script_client: bool,
    scripts: ScriptRunner,
    client_id: Uuid,
    settings: Settings,
    pubsub: PubSub,
    watchdog: Arc<Watchdog>,
    latches: Arc<Latches>,
    replicas: Replicas,
    /// The server (or servers) of this client's configuration, as text.
    server: String,
    /// Whether the command connection is up; holds calls back from a server that refuses.
    link: Link,
    next_owner: AtomicU64,
    closed: AtomicBool,
    shutdown: watch::Sender<bool>,
    /// Turns true when [`shutdown`](Engine::shutdown) has finished.
    /// Set when the shutdown is done, with what it gave back and could not.
    shut_down: watch::Sender<Option<owed::Settled>>,
    /// What this client owes Redis (guards' permits, releases and count-downs in flight).
    owed: Arc<owed::Owed>,
    /// Read by every fair acquire script from before it is sent until its reply; written
    /// by shutdown, which so waits for those on the wire and refuses later ones.
    queueing_attempts: Arc<RwLock<()>>,
    /// This client's fair waiters that may be in a queue.
    queue_exits: QueueExits,
    /// This client's waiters that may take a hold handed over by a release.
    hand_offs: HandOffs,
    /// Records of answered writes, for the next script on their object to delete.
    done_records: records::DoneRecords,
    /// Clients this crate built, and so quits on shutdown.
    owns_redis: bool,
}

impl Engine {
    /// Builds the engine and starts its background tasks (pub/sub, watchdog, latches and,
    /// behind Sentinel, the failover watcher). `pubsub` is how waiters listen and releases
    /// publish.
    /// `script_client`: on a cluster, the client the lock scripts go through (see
    /// [`redirect`](crate::topology::redirect)), which this engine quits on shutdown.
    pub(crate) fn start(
        redis: Client,
        script_client: Option<Client>,
        subscriber: fred::clients::SubscriberClient,
        settings: Settings,
        pubsub: Choice,
        owns_redis: bool,
    ) -> Arc<Engine> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let separate_script_client = script_client.is_some();
        let named_master = NamedMaster::of(&redis);
        let scripts = ScriptRunner::new(
            script_client.unwrap_or_else(|| redis.clone()),
            settings.command_timeout,
            named_master.clone(),
        );
        let watchdog = Watchdog::new(settings.watchdog_timeout, settings.renew_by_slot);
        tokio::spawn(watchdog.clone().run(scripts.clone()));
        let latches = Latches::new();
        let by_slot = settings.renew_by_slot;
        tokio::spawn(
            latches
                .clone()
                .run(redis.clone(), by_slot, shutdown_rx.clone()),
        );
        sentinel::follow_failovers(
            &redis,
            &subscriber,
            named_master,
            watchdog.renew_now(),
            settings.command_timeout,
            shutdown_rx.clone(),
        );
        // The subscriber connection is checked as often as holds are renewed.
        let heartbeat = settings.watchdog_timeout / 3;
        let pubsub = PubSub::start(subscriber, redis.clone(), pubsub, heartbeat, shutdown_rx);
        // A master that lost its replicas is still asked for one for a watchdog lease, and at
        // least long enough for every client to follow a failover (see `replicas/count.rs`).
        let lost_replicas_grace = settings.watchdog_timeout.max(LOST_REPLICAS_GRACE);
        let replicas = Replicas::new(settings.replica_wait, lost_replicas_grace);
        let server = format!("{:?}", redis.client_config().server);
        let link = Link::start(&redis, settings.command_timeout, shutdown.subscribe());
        Arc::new(Engine {
            redis,
            separate_script_client,
            scripts,
            client_id: Uuid::new_v4(),
            settings,
            pubsub,
            watchdog,
            latches,
            replicas,
            server,
            link,
            next_owner: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            shutdown,
            shut_down: watch::channel(None).0,
            owed: Arc::default(),
            queueing_attempts: Arc::new(RwLock::new(())),
            queue_exits: QueueExits::default(),
            hand_offs: HandOffs::default(),
            done_records: records::DoneRecords::default(),
            owns_redis,
        })
    }

    /// The client's command connection(s).
    pub(crate) fn redis(&self) -> &Client {
        &self.redis
    }

    /// The client the lock scripts go through (on a cluster, one of their own).
    pub(crate) fn scripts_client(&self) -> &Client {
        self.scripts.client()
    }

    pub(crate) fn client_id(&self) -> Uuid {
        self.client_id
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn pubsub(&self) -> &PubSub {
        &self.pubsub
    }

    pub(crate) fn watchdog(&self) -> &Arc<Watchdog> {
        &self.watchdog
    }

    pub(crate) fn latches(&self) -> &Arc<Latches> {
        &self.latches
    }

    /// The server (or servers) of this client's configuration, as text.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// Whether the command connection is up (see `link.rs`).
    pub(crate) fn link(&self) -> &Link {
        &self.link
    }

    /// This client's fair waiters that may be in a queue.
    /// Records of this client's writes whose replies arrived (see [`records`]).
    pub(crate) fn done_records(&self) -> &records::DoneRecords {
        &self.done_records
    }

    pub(crate) fn hand_offs(&self) -> &HandOffs {
        &self.hand_offs
    }

    pub(crate) fn queue_exits(&self) -> &QueueExits {
        &self.queue_exits
    }

    pub(crate) fn new_owner(&self) -> LockOwner {
        LockOwner::from_parts(
            self.client_id,
            self.next_owner.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Turns true when the client begins to close.
    pub(crate) fn watch_shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// The keys of the lock `name` (the client's name prefix applied).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name, and on a cluster (or with renewals
    /// grouped by slot, as behind a proxy fronting one) for a name whose keys would fall in
    /// different slots: every script about it would then be refused (`CROSSSLOT`), its
    /// releases included, after an acquisition had taken the hold.
    pub(crate) fn lock_keys(&self, name: &str) -> Result<LockKeys> {
        if name.is_empty() {
            return Err(Error::invalid("a lock name must not be empty"));
        }
        let raw = format!("{}{name}", self.settings.name_prefix);
        if self.redis.is_clustered() || self.settings.renew_by_slot {
            if let Some(why) = keys::split_slots(&raw) {
                return Err(Error::invalid(format!(
                    "the lock name `{raw}` cannot be used on a Redis Cluster: {why}, so its \
                     keys would fall in different slots. A name with a `{{` needs a hash tag \
                     (a `{{`, then at least one character, then `}}`), and a name without \
                     `{{` must not contain `}}`"
                )));
            }
        }
        Ok(LockKeys::new(&raw))
    }

    /// Fails with [`Error::Closed`] once the client was shut down.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Leave to send one fair acquire script, to be held until its reply: refused with
    /// [`Error::Closed`] once shutdown has begun, and shutdown takes the client's waiters out
    /// of the queues only after every permit given before was dropped. So no acquire script
    /// can put a waiter back in a queue after shutdown took it out.
    pub(crate) fn queueing_permit(&self) -> Result<OwnedRwLockReadGuard<()>> {
        let permit = self
            .queueing_attempts
            .clone()
            .try_read_owned()
            .map_err(|_| Error::Closed)?;
        self.check_open()?;
        Ok(permit)
    }

    /// How the scripts must publish (see `lua/publish.lua`).
    pub(crate) fn publish_command(&self) -> &'static str {
        self.pubsub.flavour().publish_command()
    }

    /// Runs a script call for the lock `name`, mapping a wrong-type key to
    /// [`Error::WrongType`] naming it.
    pub(crate) async fn run(&self, call: Call, name: &str) -> Result<fred::types::Value> {
        self.check_open()?;
        let reply = self.reach(self.scripts.run(call)).await;
        reply.map_err(|e| map_redis_error(e, name))
    }

    /// Sends what `send` sends, unless the connection is down and the server refuses a
    /// new one: then that refusal, with nothing sent. A failure as the connection dropped
    /// is told as the refusal when the server now refuses (see [`Link`]).
    pub(crate) async fn reach<T>(
        &self,
        send: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, RedisError> {
        self.link.check().await?;
        match send.await {
            Err(error) => Err(self.link.explain(error).await),
            reply => reply,
        }
    }

    /// [`run`](Engine::run) for a lock script that writes to `key`, with a WAIT right
    /// behind it where a replica must confirm its writes: the reply, and what confirms the
    /// write (see [`confirm`](Engine::confirm)).
    pub(crate) async fn run_confirmed<P: Placement>(
        &self,
        call: Call,
        key: &str,
        name: &str,
    ) -> Result<(fred::types::Value, Confirmation)> {
        self.check_open()?;
        let (reply, confirmation) = self.send_confirmed::<P>(call, key).await;
        Ok((reply.map_err(|e| map_redis_error(e, name))?, confirmation))
    }

    /// [`run_confirmed`](Engine::run_confirmed) with the reply as Redis gave it: the one
    /// way every lock script that writes is sent (acquisitions, their undoing, releases,
    /// force releases), so that its WAIT follows it on the connection that carried it.
    /// `P`: where its send is made: [`InPlace`](crate::topology::runner::InPlace) when this
    /// future is itself made in a box (see [`Placement`]).
    pub(crate) async fn send_confirmed<P: Placement>(
        &self,
        call: Call,
        key: &str,
    ) -> (Result<fred::types::Value, RedisError>, Confirmation) {
        if let Err(refused) = self.link.check().await {
            return (Err(refused), Confirmation::Needless);
        }
        match self.replicas.run::<P>(&self.scripts, call, key).await {
            (Err(error), confirmation) => (Err(self.link.explain(error).await), confirmation),
            sent => sent,
        }
    }

    /// Returns once a replica has the write of a script run by
    /// [`run_confirmed`](Engine::run_confirmed).
    ///
    /// # Errors
    /// [`Error::NotReplicated`] when no replica confirmed within the configured wait.
    pub(crate) async fn confirm(
        &self,
        confirmation: Confirmation,
        key: &str,
        name: &str,
    ) -> Result<()> {
        (self.replicas)
            .confirm(confirmation, &self.scripts, key, name)
            .await
    }

    /// Closes the client (see [`LockClient::shutdown`](crate::LockClient::shutdown)) and
    /// returns when that is done. The work runs in a task of its own, so it finishes even
    /// if the caller stops waiting; a second call waits for the first one's.
    pub(crate) async fn shutdown(self: &Arc<Self>) -> owed::Settled {
        let mut finished = self.shut_down.subscribe();
        if !self.closed.swap(true, Ordering::AcqRel) {
            let engine = self.clone();
            tokio::spawn(async move {
                let settled = engine.close().await;
                engine.shut_down.send_replace(Some(settled));
            });
        }
        // The sender lives as long as `self`.
        let settled = finished.wait_for(Option::is_some).await;
        settled
            .ok()
            .and_then(|settled| *settled)
            .unwrap_or_default()
    }

    /// What this client owes Redis (see [`owed`]).
    pub(crate) fn owed(&self) -> &Arc<owed::Owed> {
        &self.owed
    }

    async fn close(&self) -> owed::Settled {
        self.watchdog.close();
        self.pubsub.wake_all();
        // Guards' permits given back, releases and count-downs finished, while the
        // connections (and the Sentinel watcher) still run.
        let settled = self
            .owed
            .settle(self.settings.command_timeout * 3 + Duration::from_secs(1))
            .await;
        self.shutdown.send_replace(true);
        // Fair acquire scripts on the wire (they could put a waiter in a queue) are
        // answered before the exits below are sent; later ones are refused. An attempt
        // whose reply takes longer than its three possible commands (EVALSHA, SCRIPT LOAD,
        // EVALSHA) is in a future its caller no longer polls; what it sent already ran.
        let _no_more_attempts = tokio::time::timeout(
            self.settings.command_timeout * 3 + Duration::from_secs(1),
            self.queueing_attempts.write(),
        )
        .await;
        let mut leaving = tokio::task::JoinSet::new();
        for call in self.queue_exits.take_all() {
            leaving.spawn(self.scripts.run(call));
        }
        while let Some(left) = leaving.join_next().await {
            match left {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => tracing::warn!(
                    %error,
                    "taking a fair waiter out of its queue at shutdown failed; it stays queued until its deadline"
                ),
                Err(error) => {
                    tracing::warn!(%error, "a fair waiter's exit at shutdown did not run")
                }
            }
        }
        if self.separate_script_client {
            let _ = self.scripts.client().quit().await;
        }
        if self.owns_redis {
            let _ = self.redis.quit().await;
        }
        settled
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The last handle is gone: stop the background tasks (the pub/sub task closes the
        // subscriber connection), and close the command connection if this crate opened it:
        // fred keeps a connection open until QUIT.
        let already_closed = self.closed.swap(true, Ordering::AcqRel);
        self.watchdog.close();
        self.shutdown.send_replace(true);
        if already_closed {
            return;
        }
        let mut clients = Vec::new();
        if self.separate_script_client {
            clients.push(self.scripts.client().clone());
        }
        if self.owns_redis {
            clients.push(self.redis.clone());
        }
        if clients.is_empty() {
            return;
        }
        let quit = async move {
            for client in clients {
                let _ = client.quit().await;
            }
        };
        // No runtime left: the connections close as the clients are dropped.
        spawn_or(quit, || {});
    }
}
