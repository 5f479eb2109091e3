//! The builder of a [`LockClient`]: where to connect, the settings, and the build that
//! connects, probes the deployment and starts the engine.

use std::fmt;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ReconnectPolicy, ServerConfig};
use fred::types::{Builder, ConnectHandle};

use crate::base::error::{Error, Result};
use crate::client::LockClient;
use crate::core::lease::Lease;
use crate::engine::hand_offs::HandOff;
use crate::engine::{Engine, Settings};
#[cfg(doc)]
use crate::locks::fair_lock::FairLock;
use crate::topology::connection_name;
use crate::topology::connection_tasks::{self, Driven};
use crate::topology::link;
use crate::topology::pubsub::{sharded_supported, Choice, PubSubMode};
use crate::topology::redirect;
use crate::topology::url::{parse_url, servers_text, uses_tls};

impl LockClient {
    /// A builder for every other set-up.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }
}

enum Source {
    None,
    Url(String),
    Config(Box<Config>),
    Clients(Client, Option<SubscriberClient>),
}

/// Configures a [`LockClient`].
///
/// # Default
/// - `watchdog_timeout`: 30 s (Redisson's `lockWatchdogTimeout`); renewal every third of it.
/// - `name_prefix`: none (Redisson's identity name mapper).
/// - `command_timeout`: 3 s (Redisson's `timeout`).
/// - `fair_wait_timeout`: 5 min (Redisson's `fairLockWaitTimeout`).
/// - `group_renewals_by_slot`: on for clusters, off otherwise.
/// - `pubsub_mode`: [`PubSubMode::Auto`] (Redisson's `shardedSubscriptionMode` AUTO).
/// - `wait_for_replicas`: on, with a 1 s timeout (Redisson's `checkLockSyncedSlaves` and
///   `slavesSyncTimeout`).
/// - `hand_off`: [`HandOff::OFF`], every release frees the lock as Redisson's does.
#[must_use]
pub struct LockClientBuilder {
    source: Source,
    watchdog_timeout: Duration,
    name_prefix: String,
    command_timeout: Duration,
    fair_wait_timeout: Duration,
    renew_by_slot: Option<bool>,
    pubsub_mode: PubSubMode,
    replica_wait: Option<Duration>,
    hand_off: HandOff,
    database: Option<u8>,
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("name_prefix", &self.name_prefix)
            .field("command_timeout", &self.command_timeout)
            .field("fair_wait_timeout", &self.fair_wait_timeout)
            .field("hand_off", &self.hand_off)
            .finish_non_exhaustive()
    }
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            source: Source::None,
            watchdog_timeout: Duration::from_secs(30),
            name_prefix: String::new(),
            command_timeout: Duration::from_secs(3),
            fair_wait_timeout: Duration::from_secs(300),
            renew_by_slot: None,
            pubsub_mode: PubSubMode::Auto,
            replica_wait: Some(Duration::from_secs(1)),
            hand_off: HandOff::OFF,
            database: None,
        }
    }
}

impl LockClientBuilder {
    /// Connect to the server of a `redis://` or `rediss://` URL (or any URL fred accepts).
    pub fn url(mut self, url: &str) -> Self {
        self.source = Source::Url(url.to_owned());
        self
    }

    /// Connect to the master that the Sentinels at `sentinels` (`(host, port)` pairs) name
    /// for `service` (Redisson's `useSentinelServers().setMasterName(service)`); the same as
    /// a `redis-sentinel://host:port?sentinelServiceName=service&node=host2:port2` URL. The
    /// connections follow a failover: a command refused by a demoted master (READONLY)
    /// makes them ask the Sentinels again.
    pub fn sentinel(
        mut self,
        service: &str,
        sentinels: impl IntoIterator<Item = (impl Into<String>, u16)>,
    ) -> Self {
        let hosts: Vec<(String, u16)> = sentinels
            .into_iter()
            .map(|(host, port)| (host.into(), port))
            .collect();
        let config = Config {
            server: fred::types::config::ServerConfig::new_sentinel(hosts, service),
            ..Config::default()
        };
        self.source = Source::Config(Box::new(config));
        self
    }

    /// Connect with a fred [`Config`] (sentinel, TLS, credentials and so on). The client adds
    /// automatic reconnection and its command timeout.
    pub fn config(mut self, config: Config) -> Self {
        self.source = Source::Config(Box::new(config));
        self
    }

    /// Use database `database` of the server (`SELECT`), as a URL's path (`redis://h:6379/3`)
    /// or Redisson's `setDatabase` does; it overrides the URL's. Behind Sentinel it applies to
    /// the master (a Sentinel has no databases). A lock's Java clients must use the same
    /// database. Cluster nodes have only database 0. Not for [`clients`](Self::clients),
    /// which connect as they were built.
    pub fn database(mut self, database: u8) -> Self {
        self.database = Some(database);
        self
    }

    /// Use clients you built and connected yourself. `subscriber` receives the unlock
    /// messages and is dedicated to this client, which closes it at shutdown; when `None`,
    /// one is made with `redis`'s configuration and reconnect policy, and its connection
    /// task is watched for you (started again if it ends). Give `redis` a reconnect policy,
    /// or it will not reconnect, and an unresponsive timeout
    /// (`ConnectionConfig::unresponsive`), or a half-open connection is never replaced. Keep
    /// the handle of `redis`'s connection task (what `init()` returns), and of `subscriber`'s
    /// when you give one, and start it again if it ends: fred ends it for good on some
    /// errors (see the topology guide); the clients this crate makes are watched for you.
    /// `redis` stays open after [`LockClient::shutdown`]: it is yours.
    /// On a cluster the lock scripts go through one more client made with `redis`'s
    /// configuration, which this client closes at shutdown (see the topology guide).
    pub fn clients(mut self, redis: Client, subscriber: Option<SubscriberClient>) -> Self {
        self.source = Source::Clients(redis, subscriber);
        self
    }

    /// The lease of holds taken without a fixed lease, renewed every third of it. If the
    /// process dies, its locks free themselves within this time.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// Put `prefix` in front of every lock name to form its Redis key, as Redisson's name
    /// mapper does; every derived key and channel follows. Give Java clients the same mapper.
    pub fn name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = prefix.into();
        self
    }

    /// How long one Redis command may take, waiting for a reconnect included.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Whether each watchdog renewal script, and each deletion of the unlock latches of
    /// dropped lock handles, covers keys of one cluster slot only. A cluster needs it and
    /// gets it by default. Turn it on for a proxy that fronts a cluster behind a single
    /// address (such proxies refuse scripts and commands whose keys span slots). Off, any
    /// 100 holds share a script: far fewer scripts when names differ.
    pub fn group_renewals_by_slot(mut self, by_slot: bool) -> Self {
        self.renew_by_slot = Some(by_slot);
        self
    }

    /// Which pub/sub commands carry unlock messages; see [`PubSubMode`]. Match the
    /// `shardedSubscriptionMode` of the Java clients that share the locks: `Auto` works
    /// with Java's `AUTO` and `ON` (and hears Java's `OFF`), `Classic` with `OFF` and with
    /// Redisson before 3.22, `Both` with a mix. Outside a cluster, `Auto` is classic
    /// pub/sub, as in Redisson.
    pub fn pubsub_mode(mut self, mode: PubSubMode) -> Self {
        self.pubsub_mode = mode;
        self
    }

    /// Whether every acquisition and release on a master with replicas waits until a
    /// replica has it (`WAIT`, for at most `timeout`), as Redisson's
    /// `checkLockSyncedSlaves` with `slavesSyncTimeout`. When no replica confirms, an
    /// acquisition is undone and fails with [`Error::NotReplicated`]; a release fails with
    /// the same error after it happened on the master. Without replicas nothing is waited
    /// for.
    ///
    /// While a replica lags, every command of this client waits behind the `WAIT` on the
    /// connection to that master, up to `timeout` (at most half the command timeout).
    /// `None` turns the check off: a failover
    /// right after an acquisition may then lose the hold without anyone noticing.
    pub fn wait_for_replicas(mut self, timeout: Option<Duration>) -> Self {
        self.replica_wait = timeout;
        self
    }

    /// A fair lock waiter's wait in the queue (Redisson's `fairLockWaitTimeout`): how long
    /// a waiter that stops asking (its process crashed or froze, or it lost Redis) can hold
    /// up the queue once it is first in line. It applies to [`FairLock::lock`]; a
    /// [`FairLock::try_lock_for`] uses its own wait instead, as Redisson does.
    ///
    /// Every waiter has a deadline in the queue: the one of the waiter before it plus its
    /// own wait (for the first one, the holder's remaining lease plus its wait). A waiter
    /// that is first in line when its deadline passes is dropped from the queue by the next
    /// script that looks at it. So a waiter that stopped asking delays the ones behind it by
    /// about this long at most, counted from when the hold it last saw would have ended, and
    /// N of them in a row by N times this; a shorter value bounds that stall.
    ///
    /// A waiter of this crate that keeps asking keeps its place however long the hold
    /// lasts: each time it looks while first in line (at the latest when the holder's lease
    /// would end, and at least every half wait), it pushes its deadline, and every deadline
    /// behind it by as much, back to the holder's remaining lease plus its wait from now
    /// (once it has come closer than that by more than a tolerance of a quarter of the
    /// wait, at most 1 s). So the wait only has to cover the time a live waiter may go
    /// without reaching Redis (an outage it rides out, a paused process) and the clock skew
    /// between clients.
    ///
    /// Java waiters never move their deadline: one that is first in line while a hold lasts
    /// longer than its deadline allows is dropped and joins again at the tail, as in
    /// Redisson (behind a waiter of this crate, its deadline moves with the others'). Give
    /// Java clients of the same locks the same value, longer than their longest hold if
    /// their waiters must keep their places.
    pub fn fair_wait_timeout(mut self, wait: Duration) -> Self {
        self.fair_wait_timeout = wait;
        self
    }

    /// How an exclusive lock goes from task to task of this client. When a last release
    /// finds a task of this client waiting for the same lock, of the same kind, it gives that
    /// task the lock in the same script: the waiter holds it one round trip after the release
    /// began, instead of after the unlock message and an acquire script of its own. While the
    /// lock goes from task to task it is never free, so nothing is published and waiters of
    /// other clients keep waiting; `hand_off` bounds how long that lasts (see [`HandOff`]).
    /// The data stays Redisson's: one owner field with count 1, the key's TTL the new
    /// holder's lease.
    ///
    /// The kinds that hand over: [`Lock`](crate::Lock), [`SpinLock`](crate::SpinLock),
    /// [`NonReentrantLock`](crate::NonReentrantLock), [`FencedLock`](crate::FencedLock) (the
    /// heir gets the next token, as its own acquisition would), the write side of
    /// [`ReadWriteLock`](crate::ReadWriteLock) (not when the writer keeps read holds, which
    /// exclude other writers), and [`FairLock`](crate::FairLock) and
    /// [`NonReentrantFairLock`](crate::NonReentrantFairLock) only to a task that is first in
    /// the lock's queue (which other clients' waiters are in too, so the queue's order holds
    /// and [`HandOff`]'s bound on runs does not apply to them). Readers share, and never wait
    /// for each other.
    ///
    /// Waiters of this client are given the lock in the order they began to wait, and a new
    /// `lock()` call waits behind them. Off by default; [`HandOff`] says when to turn it on.
    pub fn hand_off(mut self, hand_off: HandOff) -> Self {
        self.hand_off = hand_off;
        self
    }

    /// Connects and starts the client's background tasks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when no server was named, a database was given with
    /// [`clients`](Self::clients), or a duration is out of range
    /// (the watchdog timeout must be at least 3 ms, the command timeout and the fair wait
    /// timeout at least 1 ms; the watchdog and fair wait timeouts at most
    /// [`Lease::MAX_FIXED`](crate::Lease::MAX_FIXED), the command timeout at most a quarter
    /// of it), or when the pub/sub mode needs sharded pub/sub and the server does not offer
    /// it (to this user), or a URL names no Redis deployment; [`Error::Unreachable`] when a
    /// URL's or configuration's server cannot be reached, [`Error::Redis`] when Redis
    /// refuses what the build asks. A build that fails
    /// closes the connections it opened; clients given to [`clients`](Self::clients) stay
    /// as they were.
    pub async fn build(self) -> Result<LockClient> {
        if matches!(self.source, Source::Clients(..)) && self.database.is_some() {
            return Err(Error::invalid(
                "database() does not apply to clients(): they connect to the database they \
                 were configured with",
            ));
        }
        let max = Lease::MAX_FIXED.as_millis();
        check_millis("watchdog_timeout", self.watchdog_timeout, 3, max)?;
        // Unlock latches live for a few command timeouts.
        check_millis("command_timeout", self.command_timeout, 1, max / 4)?;
        check_millis("fair_wait_timeout", self.fair_wait_timeout, 1, max)?;
        if let Some(wait) = self.replica_wait {
            check_millis("the replica wait", wait, 1, max)?;
        }
        // A WAIT must be answered within the command timeout.
        let replica_wait = self
            .replica_wait
            .map(|wait| wait.min(self.command_timeout / 2));
        let command_timeout = self.command_timeout;
        let configure = |builder: &mut Builder| {
            builder
                .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
                .with_performance_config(|perf| {
                    perf.default_command_timeout = command_timeout;
                    // Messages beyond this are not lost for waiters, only coalesced.
                    perf.broadcast_channel_capacity = 1024;
                })
                .with_connection_config(|conn| {
                    conn.connection_timeout = command_timeout;
                    conn.internal_command_timeout = command_timeout;
                    // A connection that stops answering (a half-open one: the server or a
                    // middlebox dropped it without telling us) is closed and made again;
                    // otherwise every later command on it would time out, for good.
                    conn.unresponsive.max_timeout = Some(command_timeout);
                    conn.unresponsive.interval =
                        (command_timeout / 4).max(Duration::from_millis(2));
                });
        };
        // The clients this build makes, whose connection tasks it keeps running (the
        // subscriber's is added once the build succeeded), and the command clients among
        // them, which a failed build quits.
        let mut driven = Vec::new();
        let mut opened = Vec::new();
        let (redis, subscriber, subscriber_task, owns_redis) = match self.source {
            Source::None => {
                return Err(Error::invalid(
                    "no Redis server given: call url(), config() or clients()",
                ))
            }
            Source::Url(url) => {
                if uses_tls(&url) && !cfg!(feature = "tls") {
                    // fred would connect in plain text and only log a warning.
                    return Err(Error::invalid(
                        "a rediss:// URL needs this crate's `tls` feature (on by default)",
                    ));
                }
                let mut config = parse_url(&url)?;
                config.database = self.database.or(config.database);
                let tls = uses_tls(&url);
                let (redis, task, subscriber, subscriber_task) =
                    connect(config, tls, configure).await?;
                driven.push(Driven::new("commands", redis.clone(), task));
                opened.push(redis.clone());
                (redis, subscriber, Some(subscriber_task), true)
            }
            Source::Config(mut config) => {
                config.database = self.database.or(config.database);
                #[cfg(feature = "tls")]
                let tls = config.tls.is_some();
                #[cfg(not(feature = "tls"))]
                let tls = false;
                let (redis, task, subscriber, subscriber_task) =
                    connect(*config, tls, configure).await?;
                driven.push(Driven::new("commands", redis.clone(), task));
                opened.push(redis.clone());
                (redis, subscriber, Some(subscriber_task), true)
            }
            Source::Clients(redis, Some(subscriber)) => (redis, subscriber, None, false),
            Source::Clients(redis, None) => {
                let mut builder = Builder::from_config(redis.client_config());
                builder
                    .set_connection_config(redis.connection_config().clone())
                    .set_performance_config(redis.perf_config());
                if let Some(policy) = redis.client_reconnect_policy() {
                    builder.set_policy(policy);
                }
                let subscriber = builder.build_subscriber_client()?;
                let subscriber_task = subscriber.init().await?;
                (redis, subscriber, Some(subscriber_task), false)
            }
        };
        let clustered = redis.is_clustered();
        let probed = async {
            let script_client = if clustered {
                let (client, task) = redirect::script_client(&redis).await?;
                driven.push(Driven::new("scripts", client.clone(), task));
                opened.push(client.clone());
                Some(client)
            } else {
                None
            };
            let sharded_supported = match (self.pubsub_mode, clustered) {
                (PubSubMode::Classic, _) | (PubSubMode::Auto, false) => false,
                _ => sharded_supported(&redis).await?,
            };
            let pubsub = Choice::new(self.pubsub_mode, clustered, sharded_supported)?;
            Ok::<_, Error>((script_client, pubsub))
        }
        .await;
        let (script_client, pubsub) = match probed {
            Ok(probed) => probed,
            Err(error) => {
                // Close what this build opened: fred keeps a connection (and reconnects it)
                // until QUIT, whether or not anyone holds the client.
                for client in &opened {
                    let _ = client.quit().await;
                }
                if subscriber_task.is_some() {
                    let _ = subscriber.quit().await;
                }
                return Err(error);
            }
        };
        let settings = Settings {
            watchdog_timeout: self.watchdog_timeout,
            name_prefix: self.name_prefix,
            command_timeout,
            fair_wait_timeout: self.fair_wait_timeout,
            renew_by_slot: self.renew_by_slot.unwrap_or(clustered),
            replica_wait,
            hand_off: self.hand_off,
        };
        // Watched from here on: the subscriber is the engine's to quit at shutdown.
        if let Some(task) = subscriber_task {
            driven.push(Driven::new("subscriber", subscriber.clone(), task));
        }
        let engine = Engine::start(
            redis,
            script_client,
            subscriber,
            settings,
            pubsub,
            owns_redis,
        );
        connection_tasks::keep_running(driven, engine.watch_shutdown());
        // Connections this crate opened carry its name; a caller's clients keep theirs.
        let mut named = Vec::new();
        if owns_redis {
            named.push(engine.redis().clone());
        }
        if clustered {
            named.push(engine.scripts_client().clone());
        }
        connection_name::keep_named(named, engine.client_id(), engine.watch_shutdown()).await;
        Ok(LockClient::from_engine(engine))
    }
}

/// The command client and the subscriber, both connected, each with its connection task.
///
/// # Errors
/// [`Error::Unreachable`] naming the servers of `config` when either cannot connect.
async fn connect(
    config: Config,
    tls: bool,
    configure: impl Fn(&mut Builder),
) -> Result<(Client, ConnectHandle, SubscriberClient, ConnectHandle)> {
    let server = servers_text(&config.server, tls);
    let unreachable = |source| Error::Unreachable {
        server: server.clone(),
        source,
    };
    let servers = config.server.clone();
    let sentinel = matches!(servers, ServerConfig::Sentinel { .. });
    let mut builder = Builder::from_config(config);
    configure(&mut builder);
    if sentinel {
        // A master that went away is replaced by a failover within seconds: look for the
        // new one at least twice a second, not after the 2 s pauses of a lone server.
        builder.set_policy(ReconnectPolicy::new_exponential(
            0,
            50,
            SENTINEL_RECONNECT_MAX,
            2,
        ));
    }
    let redis = builder.build()?;
    let subscriber = builder.build_subscriber_client()?;
    let task = if tls {
        // Dropped, the connecting ends on its own: its failure ends fred's task.
        tokio::select! {
            task = redis.init() => task.map_err(unreachable)?,
            plain = link::plain_text(&servers) => return Err(unreachable(plain)),
        }
    } else {
        redis.init().await.map_err(unreachable)?
    };
    match subscriber.init().await {
        Ok(subscriber_task) => Ok((redis, task, subscriber, subscriber_task)),
        Err(error) => {
            let _ = redis.quit().await;
            Err(unreachable(error))
        }
    }
}

/// The longest pause between reconnection attempts behind Sentinel, in ms.
const SENTINEL_RECONNECT_MAX: u32 = 500;

fn check_millis(what: &str, duration: Duration, min_ms: u128, max_ms: u128) -> Result<()> {
    let ms = duration.as_millis();
    if ms < min_ms || ms > max_ms {
        return Err(Error::InvalidArgument(
            format!("{what} must be from {min_ms} to {max_ms} ms, got {duration:?}").into(),
        ));
    }
    Ok(())
}
