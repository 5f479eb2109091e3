//! A workload of lock holders, and the invariants it keeps whatever faults are injected.
//! The fault suite's storms and the load-and-faults run (`docs/fault_run`) share it.
//!
//! Every lock guards a resource in Redis: a counter that holders bump by a read-modify-write
//! (a read, then a write). The write is a script that refuses a holder that no longer holds
//! the lock (a stale fencing token, or the holder's field gone from the lock's hash), as a
//! resource must to be safe from holders paused past their lease; under a fenced lock the
//! read carries the token too, so that a late write cannot land between a newer holder's
//! read and its write. The invariants:
//! - **no lost update**: each counter equals its count of accepted writes (two holders at
//!   once would both write the same value);
//! - **no hold claimed after it was lost**: a read or write refused for want of the lock
//!   finds the guard already reporting its lease lost;
//! - **readers see no writes**: a reader reads twice, and a change while its guard still
//!   claims the hold is a violation;
//! - **fencing tokens are never issued twice**;
//! - **every wait ends as asked**: a timed acquisition returns within its wait plus a
//!   slack, an untimed one within a generous limit;
//! - **no error that points at corrupted state** (a wrong type, an unexpected reply);
//! - once every lease has run out: **nothing is left behind** (see [`settle`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::interfaces::KeysInterface;
use redisson_lock::{Error, FencedGuard, LockClient, LockGuard, LockOwner, ReadGuard, WriteGuard};

pub use super::resource::{read_resource, resource_keys, write_resource, Write};
#[allow(unused_imports)] // Not every binary that runs the workload totals it.
pub use super::tally::{Tally, Totals};
use super::RedisServer;

/// The lock kinds a workload mixes; `Read` and `Write` are the two sides of one
/// read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Plain,
    Fair,
    Fenced,
    Spin,
    Write,
    Read,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Plain,
        Kind::Fair,
        Kind::Fenced,
        Kind::Spin,
        Kind::Write,
        Kind::Read,
    ];

    /// The lock name this kind uses in a workload named `prefix`.
    pub fn lock_name(self, prefix: &str) -> String {
        let kind = match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Fenced => "fenced",
            Kind::Spin => "spin",
            Kind::Write | Kind::Read => "rw",
        };
        format!("{prefix}:{kind}")
    }
}

/// A hold of any kind the workload takes.
pub enum Held {
    Guard(LockGuard),
    Fenced(FencedGuard),
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Held {
    pub fn is_lost(&self) -> bool {
        match self {
            Held::Guard(g) => g.is_lease_lost(),
            Held::Fenced(g) => g.is_lease_lost(),
            Held::Read(g) => g.is_lease_lost(),
            Held::Write(g) => g.is_lease_lost(),
        }
    }

    pub fn token(&self) -> Option<u64> {
        match self {
            Held::Fenced(g) => Some(g.token()),
            _ => None,
        }
    }

    pub async fn unlock(self) -> redisson_lock::Result<()> {
        match self {
            Held::Guard(g) => g.unlock().await,
            Held::Fenced(g) => g.unlock().await,
            Held::Read(g) => g.unlock().await,
            Held::Write(g) => g.unlock().await,
        }
    }
}

/// Takes the lock `name` of `kind` for `owner`: waiting at most `wait`, or as long as it
/// takes.
pub async fn acquire(
    client: &LockClient,
    owner: &LockOwner,
    kind: Kind,
    name: &str,
    wait: Option<Duration>,
) -> redisson_lock::Result<Option<Held>> {
    macro_rules! take {
        ($timed:expr, $untimed:expr, $held:path) => {
            match wait {
                Some(wait) => ($timed)(wait).await.map(|g| g.map($held)),
                None => $untimed.await.map(|g| Some($held(g))),
            }
        };
    }
    match kind {
        Kind::Plain => {
            let lock = client.lock(name)?;
            take!(
                |w| lock.try_lock_for(owner, w),
                lock.lock(owner),
                Held::Guard
            )
        }
        Kind::Fair => {
            let lock = client.fair_lock(name)?;
            take!(
                |w| lock.try_lock_for(owner, w),
                lock.lock(owner),
                Held::Guard
            )
        }
        Kind::Fenced => {
            let lock = client.fenced_lock(name)?;
            take!(
                |w| lock.try_lock_for(owner, w),
                lock.lock(owner),
                Held::Fenced
            )
        }
        Kind::Spin => {
            let lock = client.spin_lock(name)?;
            take!(
                |w| lock.try_lock_for(owner, w),
                lock.lock(owner),
                Held::Guard
            )
        }
        Kind::Write => {
            let lock = client.read_write_lock(name)?;
            take!(
                |w| lock.try_write_for(owner, w),
                lock.write(owner),
                Held::Write
            )
        }
        Kind::Read => {
            let lock = client.read_write_lock(name)?;
            take!(
                |w| lock.try_read_for(owner, w),
                lock.read(owner),
                Held::Read
            )
        }
    }
}

/// A mix of tasks on one lock of each kind, and the limits its waits must keep.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Every lock name of the workload, with the kinds that use it.
    pub locks: Vec<(Kind, String)>,
    /// The wait of a timed acquisition.
    pub wait: Duration,
    /// How much later than its wait a timed acquisition may return: the attempt under way
    /// at the deadline may take up to three commands, and the process may be paused.
    pub slack: Duration,
    /// How long an untimed acquisition may take before it counts as stuck.
    pub stuck: Duration,
    /// How long a holder works between reading its resource and writing it: the window in
    /// which a pause or a cut makes it a late writer.
    pub work: Duration,
}

impl Workload {
    /// One lock of each kind, named after `prefix`.
    pub fn new(prefix: &str, wait: Duration, slack: Duration) -> Workload {
        Workload {
            locks: (Kind::ALL.iter())
                .map(|kind| (*kind, kind.lock_name(prefix)))
                .collect(),
            wait,
            slack,
            stuck: Duration::from_secs(60),
            work: Duration::from_millis(2),
        }
    }

    /// The distinct lock names.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.locks.iter().map(|(_, name)| name.clone()).collect();
        names.dedup();
        names
    }

    /// The fair locks' names.
    pub fn fair_names(&self) -> Vec<String> {
        (self.locks.iter())
            .filter(|(kind, _)| *kind == Kind::Fair)
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// Task `task`'s loop until `until`: one round after the other, on each lock in turn;
    /// every fourth acquisition waits without a limit. After a round that failed, the task
    /// goes on as a new owner: an acquisition whose reply was lost may have taken a hold
    /// that nobody knows of, and a second acquisition by its owner would re-enter it (or,
    /// after a read hold, be refused a write hold) until its lease runs out.
    pub async fn task(
        self: Arc<Self>,
        client: LockClient,
        task: usize,
        until: Instant,
        tally: Arc<Tally>,
    ) {
        let mut owner = client.new_owner();
        let mut round = task;
        while Instant::now() < until {
            let (kind, name) = &self.locks[round % self.locks.len()];
            let wait = (round % 4 != 3).then_some(self.wait);
            if !self.round(&client, &owner, *kind, name, wait, &tally).await {
                owner = client.new_owner();
            }
            round += 1;
        }
    }

    /// One round: take the lock, work on its resource, release. Counts what happens in
    /// `tally`, and what breaks an invariant as a violation; `false` when a call failed.
    async fn round(
        &self,
        client: &LockClient,
        owner: &LockOwner,
        kind: Kind,
        name: &str,
        wait: Option<Duration>,
        tally: &Tally,
    ) -> bool {
        let asked = Instant::now();
        let limit = wait.map_or(self.stuck, |wait| wait + self.slack);
        let acquired = tokio::time::timeout(limit, acquire(client, owner, kind, name, wait)).await;
        let took = asked.elapsed();
        let held = match acquired {
            Err(_) => {
                let how = if wait.is_some() {
                    "a timed"
                } else {
                    "an untimed"
                };
                tally.violation(format!(
                    "{how} {kind:?} acquisition of {name} took over {limit:?}"
                ));
                return false;
            }
            Ok(Ok(Some(held))) => held,
            Ok(Ok(None)) => {
                tally.timed_out.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            Ok(Err(error)) => {
                count_error(tally, &format!("{kind:?} acquire"), &error);
                return false;
            }
        };
        tally.acquired.fetch_add(1, Ordering::Relaxed);
        tally.waits.lock().unwrap().push(took);
        if let Some(token) = held.token() {
            tally.tokens.lock().unwrap().push((name.to_owned(), token));
        }
        let worked = if kind == Kind::Read {
            read_twice(client, name, &held, tally).await
        } else {
            bump(client, owner, kind, name, &held, self.work, tally).await
        };
        match held.unlock().await {
            Ok(()) => worked,
            Err(Error::NotHeld { .. }) => {
                tally.lost_at_unlock.fetch_add(1, Ordering::Relaxed);
                worked
            }
            Err(error) => {
                count_error(tally, &format!("{kind:?} unlock"), &error);
                false
            }
        }
    }
}

/// Numbers the writes of this process (with the owner's field, unique everywhere).
static WRITES: AtomicU64 = AtomicU64::new(0);

/// The read-modify-write that only a working lock keeps whole; `false` when a call failed.
async fn bump(
    client: &LockClient,
    owner: &LockOwner,
    kind: Kind,
    name: &str,
    held: &Held,
    work: Duration,
    tally: &Tally,
) -> bool {
    let value = match read_resource(client, name, held.token()).await {
        Ok(Some(value)) => value.map(|value| value.parse::<i64>().expect("a counter")),
        Ok(None) => return refused(kind, name, held, tally),
        Err(error) => {
            tally.error(redis_error("read", &error));
            return false;
        }
    };
    // The work, during which a second holder would read the same value.
    tokio::time::sleep(work).await;
    let field = match kind {
        Kind::Write => format!("{owner}:write"),
        _ => owner.to_string(),
    };
    let next = (value.unwrap_or(0) + 1).to_string();
    let id = format!("{field}:{}", WRITES.fetch_add(1, Ordering::Relaxed));
    let write = Write {
        value: &next,
        token: held.token(),
        field: &field,
        id: &id,
    };
    match write_resource(client, name, write).await {
        Ok(true) => {
            tally.accepted.fetch_add(1, Ordering::Relaxed);
            true
        }
        Ok(false) => refused(kind, name, held, tally),
        Err(error) => {
            tally.error(redis_error("write", &error));
            false
        }
    }
}

/// A read or write the resource refused for want of the lock: by now the guard must know.
fn refused(kind: Kind, name: &str, held: &Held, tally: &Tally) -> bool {
    tally.refused.fetch_add(1, Ordering::Relaxed);
    if !held.is_lost() {
        tally.violation(format!(
            "{kind:?} {name}: the resource refused a holder whose guard still claimed the hold"
        ));
    }
    true
}

/// A reader's check: no write lands while it holds the read lock; `false` when a call
/// failed.
async fn read_twice(client: &LockClient, name: &str, held: &Held, tally: &Tally) -> bool {
    let [value_key, ..] = resource_keys(name);
    let read = || async {
        let value = client.redis().get::<Option<i64>, _>(&value_key).await;
        value.map_err(|error| tally.error(redis_error("GET", &error)))
    };
    let Ok(first) = read().await else {
        return false;
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    let Ok(second) = read().await else {
        return false;
    };
    if first != second && !held.is_lost() {
        tally.violation(format!(
            "a reader of {name} saw {first:?} change to {second:?} under its hold"
        ));
    }
    true
}

/// A fred error, as counted: its kind, and for the kind `Unknown` its message.
fn redis_error(during: &str, error: &fred::error::Error) -> String {
    use fred::error::ErrorKind;
    let details = error.details();
    let known = [
        (
            "NOSCRIPT",
            "the server had lost the script (restarted or failed over)",
        ),
        (
            "Failed to route command",
            "no connection to send it on (reconnecting; or its slot moving)",
        ),
        (
            "READONLY",
            "a replica refused the write (a failover under way)",
        ),
        ("LOADING", "the server was loading its data"),
        ("MASTERDOWN", "the replica's master was down"),
        ("CLUSTERDOWN", "the cluster was down"),
        ("TRYAGAIN", "its keys were split by a slot migration"),
        (
            "Too many redirections",
            "a slot moved more often than followed",
        ),
        (
            "Connection closed",
            "the connection closed before the reply",
        ),
    ];
    let words = match error.kind() {
        ErrorKind::Timeout => "no answer within the command timeout".to_owned(),
        ErrorKind::IO => "the connection failed".to_owned(),
        ErrorKind::Canceled => "canceled as its connection dropped".to_owned(),
        kind => match known.iter().find(|(start, _)| details.contains(start)) {
            Some((_, words)) => (*words).to_owned(),
            None if *kind == ErrorKind::Unknown => {
                let details: String = details.chars().take(40).collect();
                format!("Redis answered {details}")
            }
            None => format!("{kind:?} error"),
        },
    };
    format!("{during}: {}", words.replace(',', ";"))
}

/// Counts an error; the ones that point at corrupted state are violations. A refused
/// upgrade is not one: a read hold whose reply was lost makes its owner a reader unawares.
fn count_error(tally: &Tally, during: &str, error: &Error) {
    match error {
        Error::Redis(e) => tally.error(redis_error(during, e)),
        Error::NotHeld { .. } => tally.error(format!("{during}: not held")),
        Error::Closed => tally.error(format!("{during}: closed")),
        Error::WouldDeadlock(_) => tally.error(format!("{during}: would deadlock")),
        // No replica confirmed in time (one is paused, or a failover is under way): the
        // acquisition was undone, or the release happened on the master only.
        Error::NotReplicated { .. } => tally.error(format!("{during}: not replicated")),
        other => tally.violation(format!("{during}: {other}")),
    }
}

/// Where the checks after a run read the workload's keys: one server, or the masters of a
/// replicated deployment as they are at the time of the call (after failovers).
pub trait Store {
    /// Every key, on every master.
    fn keys(&self) -> Vec<String>;
    /// Sends `args`, a command on `key` alone, to the master that holds `key`.
    fn on_key(&self, key: &str, args: &[&str]) -> String;
}

impl Store for RedisServer {
    fn keys(&self) -> Vec<String> {
        let keys = self.command(&["KEYS", "*"]);
        (keys.lines())
            .filter(|key| !key.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn on_key(&self, _key: &str, args: &[&str]) -> String {
        self.command(args)
    }
}

/// The data invariant: every resource's value equals its count of accepted writes.
pub fn lost_updates(store: &impl Store, workload: &Workload) -> Vec<String> {
    let mut violations = Vec::new();
    for name in workload.names() {
        let [value, accepted, ..] = resource_keys(&name);
        let read = |key: &str| match store.on_key(key, &["GET", key]).as_str() {
            "(nil)" => 0,
            n => n.parse::<i64>().unwrap(),
        };
        let (value, accepted) = (read(&value), read(&accepted));
        if value != accepted {
            violations.push(format!(
                "{name}: {accepted} accepted writes left the counter at {value}: lost updates"
            ));
        }
    }
    violations
}

/// Waits until every hold of the workload is gone (released, or its lease ran out; at most
/// `limit`; read holds' timeout keys included); lets one fresh owner take each fair lock,
/// whose attempts drop every waiter that is gone and past its deadline (at most `limit`
/// more than the waits of those gone); then checks what is left: only the resources and
/// the token counters may remain, and keys that expire by themselves (unlock latches, fair
/// waiters' fences and owners' traces) must have a TTL. Returns the violations.
pub async fn settle(
    client: &LockClient,
    store: &impl Store,
    workload: &Workload,
    limit: Duration,
) -> Vec<String> {
    let mut violations = Vec::new();
    let start = Instant::now();
    // The locks' hashes, and the read holds' timeout keys, which expire with them.
    let held = || {
        let names = workload.names();
        (store.keys().into_iter())
            .filter(|key| names.contains(key) || key.contains(":rwlock_timeout"))
            .collect::<Vec<_>>()
    };
    while !held().is_empty() && start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for key in held() {
        violations.push(format!("{key} is still there {limit:?} after the run"));
    }
    let owner = client.new_owner();
    for name in workload.fair_names() {
        let lock = client.fair_lock(&name).unwrap();
        // Each waiter left in the queue by a killed process holds it up for its wait (the
        // workload's, which its clients also give their fair waiters).
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let gone: u32 = store.on_key(&queue, &["LLEN", &queue]).parse().unwrap_or(0);
        match lock
            .try_lock_for(&owner, limit + workload.wait * gone)
            .await
        {
            Ok(Some(guard)) => {
                if let Err(error) = guard.unlock().await {
                    violations.push(format!("releasing {name} after the run: {error}"));
                }
            }
            other => violations.push(format!(
                "{name} could not be taken after the run: {other:?}"
            )),
        }
    }
    violations.extend(leftovers(store));
    violations
}

/// What is left that should not be: keys other than the resources and token counters,
/// except those that expire by themselves; no key of a lock may live without a TTL.
pub fn leftovers(store: &impl Store) -> Vec<String> {
    let mut violations = Vec::new();
    for key in store.keys() {
        // The synchronizers' counters (the fault run's, which it checks itself) stay.
        let kept = [
            "resource:",
            "redisson_lock_token:",
            "run-sync:",
            "{run-sync:",
        ];
        if kept.iter().any(|prefix| key.starts_with(prefix)) {
            continue;
        }
        let ttl: i64 = store.on_key(&key, &["PTTL", &key]).parse().unwrap_or(-2);
        // Unlock latches, a fair waiter's fence and an owner's trace (left by a wait that
        // had an attempt go unanswered), and the synchronizers' write records expire by
        // themselves.
        let expiring = [
            "redisson_unlock_latch:",
            "redisson_lock_left:",
            "redisson_lock_took:",
            "redisson_sc_attempt:",
            "redisson_countdownlatch_attempt:",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix));
        if !expiring || ttl == -1 {
            violations.push(format!("{key} is left behind (PTTL {ttl})"));
        }
    }
    violations
}
