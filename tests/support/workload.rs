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

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::{KeysInterface, LuaInterface};
use redisson_lock::{Error, FencedGuard, LockClient, LockGuard, LockOwner, ReadGuard, WriteGuard};

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

/// The protected resource's write: refuses a writer that no longer holds the lock. It is
/// idempotent, as it must be: fred resends a command whose connection dropped before the
/// reply came (`max_command_attempts`), so one write may arrive twice.
///
/// KEYS: the value, the count of accepted writes, the highest fencing token accepted, the
/// id of the last accepted write, the lock's hash. ARGV: the new value, the writer's fencing
/// token ('' for a lock without tokens), the writer's field in the lock's hash (checked
/// when it has no token), the write's unique id.
/// Reply: 1 written (now or before), 0 refused.
const WRITE: &str = r"
if ARGV[4] ~= '' and redis.call('get', KEYS[4]) == ARGV[4] then
    return 1
end
if ARGV[2] ~= '' then
    if tonumber(ARGV[2]) < tonumber(redis.call('get', KEYS[3]) or '0') then
        return 0
    end
    redis.call('set', KEYS[3], ARGV[2])
elseif redis.call('hexists', KEYS[5], ARGV[3]) == 0 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('incr', KEYS[2])
if ARGV[4] ~= '' then
    redis.call('set', KEYS[4], ARGV[4])
end
return 1
";

/// The keys of the resource that lock `name` guards: value, accepted writes, highest
/// token, last write's id.
pub fn resource_keys(name: &str) -> [String; 4] {
    ["value", "accepted", "fence", "last"].map(|part| format!("resource:{{{name}}}:{part}"))
}

/// The protected resource's read for a read-modify-write under a fenced lock: the reader's
/// token reaches the resource before its data is read, so that a late holder's write cannot
/// land between this read and the write that follows it (the write would be checked against
/// the older, highest token the resource had seen, pass, and then be overwritten).
///
/// KEYS: the value, the highest fencing token accepted. ARGV: the reader's token.
/// Reply: `{1, value}` (value `false` when unset), or `{0}` refused for a lower token.
const FENCED_READ: &str = r"
if tonumber(ARGV[1]) < tonumber(redis.call('get', KEYS[2]) or '0') then
    return {0}
end
redis.call('set', KEYS[2], ARGV[1])
return {1, redis.call('get', KEYS[1])}
";

/// Reads the value of the resource of lock `name` for a read-modify-write, with the
/// reader's fencing token for a fenced lock. `Ok(None)` when the resource refused a stale
/// token; `Ok(Some(None))` when it has no value yet.
pub async fn read_resource(
    client: &LockClient,
    name: &str,
    token: Option<u64>,
) -> Result<Option<Option<String>>, fred::error::Error> {
    let [value, _, fence, _] = resource_keys(name);
    let Some(token) = token else {
        return client.redis().get(value).await.map(Some);
    };
    let reply: Vec<fred::types::Value> = client
        .redis()
        .eval(FENCED_READ, vec![value, fence], vec![token.to_string()])
        .await?;
    Ok(match reply.as_slice() {
        [read, value] if read.as_i64() == Some(1) => Some(value.as_string()),
        _ => None,
    })
}

/// One write to the resource of a lock.
pub struct Write<'a> {
    pub value: &'a str,
    /// The writer's fencing token, for a fenced lock.
    pub token: Option<u64>,
    /// The writer's field in the lock's hash, checked when there is no token.
    pub field: &'a str,
    /// Unique to this write; empty for a write that is never sent twice.
    pub id: &'a str,
}

/// Writes to the resource of lock `name`; `Ok(true)` when the resource accepted it.
pub async fn write_resource(
    client: &LockClient,
    name: &str,
    write: Write<'_>,
) -> Result<bool, fred::error::Error> {
    let [value, accepted, fence, last] = resource_keys(name);
    let token = write.token.map(|t| t.to_string()).unwrap_or_default();
    let written: i64 = client
        .redis()
        .eval(
            WRITE,
            vec![value, accepted, fence, last, name.to_owned()],
            vec![
                write.value.to_owned(),
                token,
                write.field.to_owned(),
                write.id.to_owned(),
            ],
        )
        .await?;
    Ok(written == 1)
}

/// What the tasks of one process saw; shared by its tasks, drained into report lines.
#[derive(Default)]
pub struct Tally {
    acquired: AtomicU64,
    timed_out: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    lost_at_unlock: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    violations: Mutex<Vec<String>>,
    /// How long each successful acquisition waited.
    waits: Mutex<Vec<Duration>>,
    /// `(lock, token)` of every fenced acquisition.
    tokens: Mutex<Vec<(String, u64)>>,
}

/// Totals over tallies, and the checks that need all of them.
#[derive(Default, Debug)]
pub struct Totals {
    pub acquired: u64,
    pub timed_out: u64,
    pub accepted: u64,
    pub refused: u64,
    pub lost_at_unlock: u64,
    pub errors: BTreeMap<String, u64>,
    pub violations: Vec<String>,
    pub waits: Vec<Duration>,
    pub tokens: Vec<(String, u64)>,
}

impl Tally {
    pub fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn error(&self, what: String) {
        *self.errors.lock().unwrap().entry(what).or_default() += 1;
    }

    /// Takes what was counted since the last call.
    pub fn drain(&self) -> Totals {
        let take = |n: &AtomicU64| n.swap(0, Ordering::Relaxed);
        Totals {
            acquired: take(&self.acquired),
            timed_out: take(&self.timed_out),
            accepted: take(&self.accepted),
            refused: take(&self.refused),
            lost_at_unlock: take(&self.lost_at_unlock),
            errors: std::mem::take(&mut *self.errors.lock().unwrap()),
            violations: std::mem::take(&mut *self.violations.lock().unwrap()),
            waits: std::mem::take(&mut *self.waits.lock().unwrap()),
            tokens: std::mem::take(&mut *self.tokens.lock().unwrap()),
        }
    }
}

impl Totals {
    pub fn add(&mut self, other: Totals) {
        self.acquired += other.acquired;
        self.timed_out += other.timed_out;
        self.accepted += other.accepted;
        self.refused += other.refused;
        self.lost_at_unlock += other.lost_at_unlock;
        for (error, n) in other.errors {
            *self.errors.entry(error).or_default() += n;
        }
        self.violations.extend(other.violations);
        self.waits.extend(other.waits);
        self.tokens.extend(other.tokens);
    }

    /// Violations found across all tallies: a fencing token issued twice.
    pub fn token_violations(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        (self.tokens.iter())
            .filter(|entry| !seen.insert(*entry))
            .map(|(lock, token)| format!("fencing token {token} of {lock} was issued twice"))
            .collect()
    }

    /// The `p`-th percentile of the waits (0 when there are none).
    pub fn wait_percentile(&mut self, p: f64) -> Duration {
        if self.waits.is_empty() {
            return Duration::ZERO;
        }
        self.waits.sort_unstable();
        let at = ((self.waits.len() - 1) as f64 * p / 100.0).round() as usize;
        self.waits[at]
    }

    /// One line of text, for a child process to report to its parent.
    pub fn to_line(&self) -> String {
        let mut line = format!(
            "acquired={} timed_out={} accepted={} refused={} lost_at_unlock={}",
            self.acquired, self.timed_out, self.accepted, self.refused, self.lost_at_unlock
        );
        let mut list = |name: &str, items: Vec<String>| {
            if !items.is_empty() {
                let _ = write!(line, " {name}={}", items.join(","));
            }
        };
        list(
            "errors",
            (self.errors.iter())
                .map(|(e, n)| format!("{}:{n}", e.replace(' ', "+")))
                .collect(),
        );
        list(
            "waits",
            self.waits
                .iter()
                .map(|w| w.as_micros().to_string())
                .collect(),
        );
        list(
            "tokens",
            (self.tokens.iter())
                .map(|(lock, t)| format!("{lock}:{t}"))
                .collect(),
        );
        line
    }

    /// Reads what [`to_line`](Totals::to_line) wrote (violations travel on lines of their
    /// own).
    pub fn from_line(line: &str) -> Totals {
        let mut totals = Totals::default();
        for field in line.split_whitespace() {
            let Some((name, value)) = field.split_once('=') else {
                continue;
            };
            let items = || value.split(',');
            match name {
                "acquired" => totals.acquired = value.parse().unwrap_or(0),
                "timed_out" => totals.timed_out = value.parse().unwrap_or(0),
                "accepted" => totals.accepted = value.parse().unwrap_or(0),
                "refused" => totals.refused = value.parse().unwrap_or(0),
                "lost_at_unlock" => totals.lost_at_unlock = value.parse().unwrap_or(0),
                "errors" => {
                    for item in items() {
                        if let Some((e, n)) = item.rsplit_once(':') {
                            totals
                                .errors
                                .insert(e.replace('+', " "), n.parse().unwrap_or(0));
                        }
                    }
                }
                "waits" => {
                    let micros = items().filter_map(|w| w.parse().ok());
                    totals.waits = micros.map(Duration::from_micros).collect();
                }
                "tokens" => {
                    for item in items() {
                        if let Some((lock, t)) = item.rsplit_once(':') {
                            totals
                                .tokens
                                .push((lock.to_owned(), t.parse().unwrap_or(0)));
                        }
                    }
                }
                _ => {}
            }
        }
        totals
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
    match error.kind() {
        fred::error::ErrorKind::Unknown => {
            let details: String = error.details().chars().take(40).collect();
            format!("{during}: {}", details.replace(',', ";"))
        }
        kind => format!("{during}: {kind:?}"),
    }
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
        if key.starts_with("resource:") || key.starts_with("redisson_lock_token:") {
            continue;
        }
        let ttl: i64 = store.on_key(&key, &["PTTL", &key]).parse().unwrap_or(-2);
        // Unlock latches, and a fair waiter's fence and an owner's trace (left by a wait that
        // had an attempt go unanswered), expire by themselves.
        let expiring = [
            "redisson_unlock_latch:",
            "redisson_lock_left:",
            "redisson_lock_took:",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix));
        if !expiring || ttl == -1 {
            violations.push(format!("{key} is left behind (PTTL {ttl})"));
        }
    }
    violations
}
