//! The entry point: a connection to Redis shared by every lock made from it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use fred::clients::Client;
use uuid::Uuid;

#[cfg(doc)]
use crate::base::error::Error;
use crate::base::error::Result;
use crate::base::owner::LockOwner;
use crate::core::kind::Kind;
use crate::engine::Engine;
use crate::inspect::{self, FoundLocks, LockState};
use crate::locks::exclusive::ExclusiveLock;
use crate::locks::fair_lock::FairLock;
use crate::locks::fenced_lock::FencedLock;
use crate::locks::lock::Lock;
use crate::locks::multi_lock::{MultiLock, MultiMember, RedLock};
use crate::locks::non_reentrant::{NonReentrantFairLock, NonReentrantLock};
use crate::locks::rw_lock::ReadWriteLock;
use crate::locks::spin_lock::SpinLock;
use crate::synchronizers::count_down_latch::CountDownLatch;
use crate::synchronizers::expirable_semaphore::PermitExpirableSemaphore;
use crate::synchronizers::semaphore::Semaphore;

/// What [`LockClient::shutdown`] did with what the client owed Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Guards whose permits the shutdown gave back.
    pub given_back: usize,
    /// Guards' give-backs, releases and count-downs that did not finish within the
    /// shutdown's time limit (Redis unreachable, or refusing): each may or may not have
    /// been made. 0 when everything owed was given back.
    pub unfinished: usize,
}

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
    pub(crate) fn from_engine(engine: Arc<Engine>) -> LockClient {
        LockClient { engine }
    }

    /// Connects to one Redis server from a `redis://` or `rediss://` URL, with the default
    /// settings and automatic reconnection.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the URL names no Redis deployment (the message names
    /// the forms that work); [`Error::Unreachable`] when the server cannot be reached.
    pub async fn connect(url: &str) -> Result<LockClient> {
        LockClient::builder().url(url).build().await
    }

    /// This client's id: the `<client uuid>` part of its owners' fields.
    pub fn id(&self) -> Uuid {
        self.engine.client_id()
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
    #[doc(alias = "getLock")]
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Lock::new(self.engine.clone(), name)
    }

    /// A handle on the exclusive lock `name` of kind `K`, for code generic over the kinds:
    /// `client.exclusive_lock::<kind::Fair>(name)` is `client.fair_lock(name)`. No I/O.
    ///
    /// # Errors
    /// As [`lock`](LockClient::lock).
    pub fn exclusive_lock<K: Kind>(&self, name: &str) -> Result<ExclusiveLock<K>> {
        ExclusiveLock::new(self.engine.clone(), name)
    }

    /// A handle on the semaphore `name` (Redisson's `getSemaphore(name)`). No I/O.
    ///
    /// Its counter is the key `name` (after the client's name prefix), shared with Java's
    /// `RSemaphore`; see [`Semaphore`]. Names are checked as for [`lock`](LockClient::lock).
    /// Do not give a lock, a latch or a permit-expirable semaphore the same name.
    #[doc(alias = "getSemaphore")]
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        Semaphore::new(self.engine.clone(), name)
    }

    /// A handle on the count-down latch `name` (Redisson's `getCountDownLatch(name)`). No
    /// I/O.
    ///
    /// Its count is the key `name` (after the client's name prefix), shared with Java's
    /// `RCountDownLatch`; see [`CountDownLatch`]. Do not give a lock or a semaphore the
    /// same name.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name, and on a cluster for a name with a `}`
    /// (its channel would fall in another slot than its key: see [`CountDownLatch`]).
    #[doc(alias = "getCountDownLatch")]
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        CountDownLatch::new(self.engine.clone(), name)
    }

    /// A handle on the permit-expirable semaphore `name` (Redisson's
    /// `getPermitExpirableSemaphore(name)`). No I/O.
    ///
    /// Its counter is the key `name` (after the client's name prefix) and its leases the
    /// sorted set `{name}:timeout`, shared with Java's `RPermitExpirableSemaphore`; see
    /// [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore). Names are checked as
    /// for [`lock`](LockClient::lock). Do not give a lock, a latch or a
    /// [`semaphore`](LockClient::semaphore) the same name.
    #[doc(alias = "getPermitExpirableSemaphore")]
    pub fn permit_expirable_semaphore(&self, name: &str) -> Result<PermitExpirableSemaphore> {
        PermitExpirableSemaphore::new(self.engine.clone(), name)
    }

    /// A handle on the fair lock `name` (Redisson's `getFairLock(name)`). No I/O.
    ///
    /// Waiters get the lock in the order they asked for it, Java clients included; see
    /// [`FairLock`]. Names are formed as for [`lock`](LockClient::lock). A fair lock and a
    /// reentrant lock of the same name share the same hold: do not mix the two kinds on one
    /// name, as the reentrant one ignores the queue.
    #[doc(alias = "getFairLock")]
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        FairLock::new(self.engine.clone(), name)
    }

    /// A handle on the read-write lock `name` (Redisson's `getReadWriteLock(name)`). No I/O.
    ///
    /// Many readers or one writer, Java clients included; see [`ReadWriteLock`] for the
    /// policy. Names are formed as for [`lock`](LockClient::lock). Do not use the name for
    /// another kind of lock: the read-write lock keeps a `mode` field in the same hash.
    #[doc(alias = "getReadWriteLock")]
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        ReadWriteLock::new(self.engine.clone(), name)
    }

    /// A handle on the fenced lock `name` (Redisson's `getFencedLock(name)`). No I/O.
    ///
    /// A reentrant lock whose every acquisition returns a fencing token, larger than any
    /// before, that the protected resource can check; see [`FencedLock`]. Names are formed
    /// as for [`lock`](LockClient::lock); it shares its hold with a [`Lock`] of the same
    /// name.
    #[doc(alias = "getFencedLock")]
    pub fn fenced_lock(&self, name: &str) -> Result<FencedLock> {
        FencedLock::new(self.engine.clone(), name)
    }

    /// A handle on the spin lock `name` (Redisson's `getSpinLock(name)`). No I/O.
    ///
    /// A reentrant lock without pub/sub: waiters poll by a back-off and releases publish
    /// nothing; see [`SpinLock`]. Names are formed as for [`lock`](LockClient::lock); it
    /// shares its hold with a [`Lock`] of the same name.
    #[doc(alias = "getSpinLock")]
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
    #[doc(alias = "getMultiLock")]
    pub fn multi_lock(
        &self,
        members: impl IntoIterator<Item = impl Into<MultiMember>>,
    ) -> Result<MultiLock> {
        MultiLock::new(members)
    }

    /// A majority of locks on independent servers (Redisson's deprecated `getRedLock`); see
    /// [`RedLock`] for why a [`FencedLock`] is usually the better choice. No I/O.
    #[doc(alias = "getRedLock")]
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

    /// The counters (semaphores and count-down latches: strings holding a whole number; see
    /// [`HoldMode::Counter`](crate::inspect::HoldMode::Counter)) whose name (without the
    /// name prefix) matches the glob `pattern`, found by `SCAN` and each read by
    /// [`inspect`](LockClient::inspect). The strings that locks' own names make (fencing
    /// tokens, unlock latches, read holds' timeout keys, ...) are left out; any other string
    /// holding a whole number is listed, as the data cannot tell it from a semaphore or a
    /// latch. The scan stops after about `max_keys` keys (per node, on a cluster); the
    /// answer then says it is incomplete. Costs one script per string found.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a cluster for a key whose name no lock can have (see
    /// [`lock`](LockClient::lock)); [`Error::Redis`] when Redis cannot be reached;
    /// [`Error::Closed`] after shutdown.
    pub async fn find_counters(&self, pattern: &str, max_keys: u64) -> Result<FoundLocks> {
        inspect::find_counters(&self.engine, pattern, max_keys).await
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
        self.engine.redis()
    }

    /// Stops the watchdog and the pub/sub task, gives back what the client owes Redis, takes
    /// this client's fair lock waiters out of their queues, and closes the connections this
    /// client opened. Returns what it gave back and what it could not.
    ///
    /// Holds are not released, as in Redisson: they expire within their lease. Every
    /// guard's `lease_lost()` fires, waiting calls end with [`Error::Closed`], and so does
    /// every later call. Permits that are not leases are given back, though: every
    /// [`SemaphorePermits`](crate::SemaphorePermits) and
    /// [`ExpirablePermits`](crate::ExpirablePermits) guard still held has its permits
    /// released (its later drop or release then does nothing), and every release and
    /// count-down on its way is finished, for at most three command timeouts and a second;
    /// what did not finish by then is counted in [`ShutdownReport::unfinished`] (and goes on
    /// until the connections close).
    ///
    /// Fair acquire scripts already sent are answered first; no new one is sent. Then every
    /// waiter of this client still in a fair queue leaves it, as a waiter that gives up does,
    /// so the waiters behind move up at once and a free lock is not blocked until the
    /// deadlines of waiters that are gone (Redisson leaves them queued until then). When
    /// this returns, none of this client's waiters is in a queue, unless Redis could not be
    /// reached (such an entry is dropped at its deadline, and a warning is logged); while
    /// Redis is unreachable, this takes a few command timeouts.
    ///
    /// Dropping the last handle (clients, locks and guards all hold one) closes the client
    /// in the background, but there are no guards or fair waiters left then (each holds a
    /// handle).
    ///
    /// # Cancel safety
    /// Cancel-safe: once called, the shutdown runs to its end in a task of its own;
    /// dropping the future only stops waiting for it. Calling it again waits for the
    /// first call's work, and returns its report.
    pub async fn shutdown(&self) -> ShutdownReport {
        let settled = self.engine.shutdown().await;
        ShutdownReport {
            given_back: settled.finished,
            unfinished: settled.unfinished,
        }
    }

    /// Whether [`shutdown`](LockClient::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.engine.is_closed()
    }

    /// How many holds the watchdog is renewing.
    pub fn renewed_holds(&self) -> usize {
        self.engine.watchdog().renewed()
    }

    /// How many pub/sub channels this client listens to (each shared by all its waiters).
    pub fn subscribed_channels(&self) -> usize {
        self.engine.pubsub().channel_count()
    }

    /// Whether this client's waiters listen for unlock messages with sharded pub/sub
    /// (`SSUBSCRIBE`), as its [`PubSubMode`](crate::PubSubMode) and the servers decided (`Auto`: on a cluster
    /// whose masters all have sharded pub/sub, Redis 7 and later).
    pub fn listens_sharded(&self) -> bool {
        self.engine.pubsub().flavour().sharded
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.engine.client_id())
            .field("settings", self.engine.settings())
            .finish()
    }
}
