//! The entry point: a connection to Redis shared by every lock made from it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::{Builder, ConnectHandle};
use uuid::Uuid;

use crate::connection_name;
use crate::connection_tasks::{self, Driven};
use crate::engine::{Engine, Settings};
use crate::error::{Error, Result};
use crate::fair_lock::FairLock;
use crate::fenced_lock::FencedLock;
use crate::guard::Lease;
use crate::inspect::{self, FoundLocks, LockState};
use crate::lock::Lock;
use crate::multi_lock::{MultiLock, MultiMember, RedLock};
use crate::non_reentrant::{NonReentrantFairLock, NonReentrantLock};
use crate::owner::LockOwner;
use crate::pubsub::{sharded_supported, Choice, PubSubMode};
use crate::redirect;
use crate::rw_lock::ReadWriteLock;
use crate::spin_lock::SpinLock;
use crate::url::{parse_url, servers_text, uses_tls};

/// A connection to Redis for locks: one command connection, one subscriber connection, one
/// watchdog task and one pub/sub task, shared by every lock and guard made from it.
///
/// Cheap to clone (an `Arc`). Each `LockClient` has its own random client id, as each
/// `RedissonClient` does, so owners of different clients exclude each other.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// use std::time::Duration;
/// use redisson_lock::LockClient;
///
/// // The simple way: one server, default settings.
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
///
/// // Or with settings matching the Java side's Redisson `Config`.
/// let client = LockClient::builder()
///     .url("rediss://redis.internal:6380")
///     .watchdog_timeout(Duration::from_secs(30)) // lockWatchdogTimeout
///     .name_prefix("app1:")                        // a prefixing nameMapper
///     .command_timeout(Duration::from_secs(3))    // timeout
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    engine: Arc<Engine>,
}

impl LockClient {
    /// Connects to one Redis server from a `redis://` or `rediss://` URL, with the default
    /// settings and automatic reconnection.
    ///
    /// # Errors
    /// [`Error::Redis`] when the URL is invalid or the server cannot be reached.
    pub async fn connect(url: &str) -> Result<LockClient> {
        LockClient::builder().url(url).build().await
    }

    /// A builder for every other set-up.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// This client's id: the `<client uuid>` part of its owners' fields.
    pub fn id(&self) -> Uuid {
        self.engine.client_id
    }

    /// A fresh owner identity, distinct from every other owner of this client.
    pub fn new_owner(&self) -> LockOwner {
        self.engine.new_owner()
    }

    /// A handle on the reentrant lock `name` (Redisson's `getLock(name)`). No I/O.
    ///
    /// The client's name prefix is put in front of `name` to form the Redis key.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (so is every constructor below) for an empty name, and on
    /// a Redis Cluster for a name whose keys would fall in different slots: a name with a
    /// `{` must contain a hash tag (a `{`, then at least one character, then `}`, as in
    /// `{user:7}:cart`), since every key of the lock is then named with the name as it is
    /// (Redisson's rule); a name without `{` must not contain `}`. On a single server (and
    /// behind Sentinel) every name works, as with Java.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Lock::new(self.engine.clone(), name)
    }

    /// A handle on the fair lock `name` (Redisson's `getFairLock(name)`). No I/O.
    ///
    /// Waiters get the lock in the order they asked for it, Java clients included; see
    /// [`FairLock`]. Names are formed as for [`lock`](LockClient::lock). A fair lock and a
    /// reentrant lock of the same name share the same hold: do not mix the two kinds on one
    /// name, as the reentrant one ignores the queue.
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        FairLock::new(self.engine.clone(), name)
    }

    /// A handle on the read-write lock `name` (Redisson's `getReadWriteLock(name)`). No I/O.
    ///
    /// Many readers or one writer, Java clients included; see [`ReadWriteLock`] for the
    /// policy. Names are formed as for [`lock`](LockClient::lock). Do not use the name for
    /// another kind of lock: the read-write lock keeps a `mode` field in the same hash.
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        ReadWriteLock::new(self.engine.clone(), name)
    }

    /// A handle on the fenced lock `name` (Redisson's `getFencedLock(name)`). No I/O.
    ///
    /// A reentrant lock whose every acquisition returns a fencing token, larger than any
    /// before, that the protected resource can check; see [`FencedLock`]. Names are formed
    /// as for [`lock`](LockClient::lock); it shares its hold with a [`Lock`] of the same
    /// name.
    pub fn fenced_lock(&self, name: &str) -> Result<FencedLock> {
        FencedLock::new(self.engine.clone(), name)
    }

    /// A handle on the spin lock `name` (Redisson's `getSpinLock(name)`). No I/O.
    ///
    /// A reentrant lock without pub/sub: waiters poll by a back-off and releases publish
    /// nothing; see [`SpinLock`]. Names are formed as for [`lock`](LockClient::lock); it
    /// shares its hold with a [`Lock`] of the same name.
    pub fn spin_lock(&self, name: &str) -> Result<SpinLock> {
        SpinLock::new(self.engine.clone(), name)
    }

    /// A handle on the non-reentrant lock `name` (Redisson's `getNonReentrantLock(name)`).
    /// No I/O.
    ///
    /// A second acquisition by the holder fails with [`Error::WouldDeadlock`]; see
    /// [`NonReentrantLock`]. Names are formed as for [`lock`](LockClient::lock); it shares
    /// its hold with a [`Lock`] of the same name.
    pub fn non_reentrant_lock(&self, name: &str) -> Result<NonReentrantLock> {
        NonReentrantLock::new(self.engine.clone(), name)
    }

    /// A handle on the non-reentrant fair lock `name` (Redisson's
    /// `getNonReentrantFairLock(name)`). No I/O.
    ///
    /// A [`FairLock`] whose holder gets [`Error::WouldDeadlock`] when it asks again; see
    /// [`NonReentrantFairLock`]. Names are formed as for [`lock`](LockClient::lock).
    pub fn non_reentrant_fair_lock(&self, name: &str) -> Result<NonReentrantFairLock> {
        NonReentrantFairLock::new(self.engine.clone(), name)
    }

    /// Several locks taken as one, all or nothing (Redisson's `getMultiLock`). The members
    /// may come from other `LockClient`s (other servers) and be of any exclusive kind; see
    /// [`MultiLock`]. No I/O.
    pub fn multi_lock(
        &self,
        members: impl IntoIterator<Item = impl Into<MultiMember>>,
    ) -> Result<MultiLock> {
        MultiLock::new(members)
    }

    /// A majority of locks on independent servers (Redisson's deprecated `getRedLock`); see
    /// [`RedLock`] for why a [`FencedLock`] is usually the better choice. No I/O.
    pub fn red_lock(
        &self,
        members: impl IntoIterator<Item = impl Into<MultiMember>>,
    ) -> Result<RedLock> {
        RedLock::new(members)
    }

    /// Reads what Redis holds for the lock `name` (its holders, TTL, fair queue, readers'
    /// leases, fencing token and channel listeners) in one script, writing nothing. The
    /// kind is told only as far as the data shows it; see [`LockState`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name no lock can have (see
    /// [`lock`](LockClient::lock)); [`Error::Redis`] when Redis cannot be reached;
    /// [`Error::Closed`] after shutdown.
    pub async fn inspect(&self, name: &str) -> Result<LockState> {
        inspect::inspect(&self.engine, name).await
    }

    /// The names (without the name prefix) of the locks that are held or have queued
    /// waiters and match the glob `pattern` (Redis `MATCH` syntax), found by `SCAN`, never
    /// `KEYS`. Each scan stops after about `max_keys` keys (per node, on a cluster); the
    /// answer then says it is incomplete. Costs one more script per candidate hash.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::Closed`] after shutdown.
    pub async fn find_locks(&self, pattern: &str, max_keys: u64) -> Result<FoundLocks> {
        inspect::find_locks(&self.engine, pattern, max_keys).await
    }

    /// The clients of this crate connected now, by client id, each with its address: every
    /// connection named `redisson-lock:<client uuid>`. A client names each connection it opens
    /// (to every master on a cluster, and again after a reconnect); on a cluster every master
    /// is asked. A holder whose client id is here is an owner of a live client of this crate;
    /// for one whose client is not, liveness is unknown: a Java thread, an owner of a client
    /// that is gone, and one whose server refused `CLIENT SETNAME` look alike.
    ///
    /// # Errors
    /// [`Error::Redis`] when Redis cannot be reached or refuses `CLIENT LIST`.
    pub async fn connected_lock_clients(&self) -> Result<HashMap<Uuid, String>> {
        inspect::connected_lock_clients(&self.engine).await
    }

    /// The fred client that runs this client's commands, for anything this crate does not
    /// cover. (On a cluster the lock scripts go through a client of their own, which
    /// follows the cluster's redirections the way they need.)
    pub fn redis(&self) -> &Client {
        &self.engine.redis
    }

    /// Stops the watchdog and the pub/sub task, takes this client's fair lock waiters out
    /// of their queues, and closes the connections this client opened.
    ///
    /// Holds are not released, as in Redisson: they expire within their lease. Every
    /// guard's `lease_lost()` fires, waiting calls end with [`Error::Closed`], and so does
    /// every later call. Fair acquire scripts already sent are answered first; no new one
    /// is sent. Then every waiter of this client still in a fair queue leaves it, as a
    /// waiter that gives up does, so the waiters behind move up at once and a free lock is
    /// not blocked until the deadlines of waiters that are gone (Redisson leaves them
    /// queued until then). When this returns, none of this client's waiters is in a queue,
    /// unless Redis could not be reached (such an entry is dropped at its deadline, and a
    /// warning is logged); while Redis is unreachable, this takes a few command timeouts.
    ///
    /// Dropping the last handle (clients, locks and guards all hold one) closes the client
    /// in the background, but there are no fair waiters left to take out then (each holds
    /// a handle).
    ///
    /// # Cancel safety
    /// Cancel-safe: once called, the shutdown runs to its end in a task of its own;
    /// dropping the future only stops waiting for it. Calling it again waits for the
    /// first call's work.
    pub async fn shutdown(&self) {
        self.engine.shutdown().await;
    }

    /// Whether [`shutdown`](LockClient::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.engine.is_closed()
    }

    /// How many holds the watchdog is renewing.
    pub fn renewed_holds(&self) -> usize {
        self.engine.watchdog.renewed()
    }

    /// How many pub/sub channels this client listens to (each shared by all its waiters).
    pub fn subscribed_channels(&self) -> usize {
        self.engine.pubsub.channel_count()
    }

    /// Whether this client's waiters listen for unlock messages with sharded pub/sub
    /// (`SSUBSCRIBE`), as its [`PubSubMode`] and the servers decided (`Auto`: on a cluster
    /// whose masters all have sharded pub/sub, Redis 7 and later).
    pub fn listens_sharded(&self) -> bool {
        self.engine.pubsub.flavour().sharded
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.engine.client_id)
            .field("settings", &self.engine.settings)
            .finish()
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
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("name_prefix", &self.name_prefix)
            .field("command_timeout", &self.command_timeout)
            .field("fair_wait_timeout", &self.fair_wait_timeout)
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

    /// Connects and starts the client's background tasks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when no server was named or a duration is out of range
    /// (the watchdog timeout must be at least 3 ms, the command timeout and the fair wait
    /// timeout at least 1 ms; the watchdog and fair wait timeouts at most
    /// [`Lease::MAX_FIXED`](crate::Lease::MAX_FIXED), the command timeout at most a quarter
    /// of it), or when the pub/sub mode needs sharded pub/sub and the server does not offer
    /// it (to this user); [`Error::Redis`] when Redis cannot be reached. A build that fails
    /// closes the connections it opened; clients given to [`clients`](Self::clients) stay
    /// as they were.
    pub async fn build(self) -> Result<LockClient> {
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
                let config = parse_url(&url)?;
                let tls = uses_tls(&url);
                let (redis, task, subscriber, subscriber_task) =
                    connect(config, tls, configure).await?;
                driven.push(Driven::new("commands", redis.clone(), task));
                opened.push(redis.clone());
                (redis, subscriber, Some(subscriber_task), true)
            }
            Source::Config(config) => {
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
            named.push(engine.redis.clone());
        }
        if clustered {
            named.push(engine.scripts.client().clone());
        }
        connection_name::keep_named(named, engine.client_id, engine.watch_shutdown()).await;
        Ok(LockClient { engine })
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
    let mut builder = Builder::from_config(config);
    configure(&mut builder);
    let redis = builder.build()?;
    let subscriber = builder.build_subscriber_client()?;
    let task = redis.init().await.map_err(unreachable)?;
    match subscriber.init().await {
        Ok(subscriber_task) => Ok((redis, task, subscriber, subscriber_task)),
        Err(error) => {
            let _ = redis.quit().await;
            Err(unreachable(error))
        }
    }
}

fn check_millis(what: &str, duration: Duration, min_ms: u128, max_ms: u128) -> Result<()> {
    let ms = duration.as_millis();
    if ms < min_ms || ms > max_ms {
        return Err(Error::InvalidArgument(
            format!("{what} must be from {min_ms} to {max_ms} ms, got {duration:?}").into(),
        ));
    }
    Ok(())
}
