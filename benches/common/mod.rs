//! Set-up shared by the bench binaries (`lock.rs`, `kinds.rs`): the private redis-server,
//! the bare fred baseline (the Redisson hash protocol as two EVALSHA scripts), the
//! plain-lock workloads both binaries measure, timing and percentile helpers, and readers of
//! `INFO commandstats` and `/proc`.

// Each bench binary uses a different subset of this module.
#![allow(dead_code)]

#[path = "../../tests/support/lua.rs"]
pub mod lua;
#[path = "../../tests/support/server.rs"]
pub mod server;
#[path = "../../tests/support/topology.rs"]
pub mod topology;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, LuaInterface, PubsubInterface};
use fred::types::config::Config;
use fred::types::{Builder, ClusterHash, CustomCommand, InfoKind, Key, Value};
use redisson_lock::{Lock, LockClient, LockGuard, LockOwner};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

pub use server::RedisServer;

/// Live heap bytes of the process: what was allocated and not yet freed (requested sizes,
/// without the allocator's own overhead).
static LIVE_HEAP: AtomicIsize = AtomicIsize::new(0);
/// Heap allocations made so far (`alloc`, `alloc_zeroed` and `realloc` calls).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting [`LIVE_HEAP`] and [`ALLOCATIONS`].
struct Counting;

impl Counting {
    fn grew(by: isize) {
        LIVE_HEAP.fetch_add(by, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() {
            Counting::grew(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc_zeroed(layout);
        if !ptr.is_null() {
            Counting::grew(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE_HEAP.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            Counting::grew(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live heap bytes now (see [`LIVE_HEAP`]).
pub fn live_heap() -> isize {
    LIVE_HEAP.load(Ordering::Relaxed)
}

/// Heap allocations made so far by the whole process.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Redisson's acquire, bare: HINCRBY + PEXPIRE and nil when taken or re-entered, the
/// holder's PTTL when busy.
pub const ACQUIRE: &str = r#"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;
/// Redisson's classic release, without this crate's unlock latch:
/// HINCRBY -1, then PEXPIRE (still held) or DEL + PUBLISH (freed).
pub const RELEASE: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
"#;
/// The lease of the bare baseline: the crate's default watchdog timeout.
pub const LEASE_MS: i64 = 30_000;
/// The task count of the parallel workloads.
pub const TASKS: usize = 64;

/// The Tokio runtime of every bench: multi-thread, 2 workers (the machines have 2 cores).
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `redis_version:...` of `server`, for the header line.
pub fn redis_version(server: &RedisServer) -> String {
    let info = server.command(&["INFO", "server"]);
    let version = info.lines().find(|l| l.starts_with("redis_version:"));
    version.unwrap_or("?").trim().to_owned()
}

/// The baseline: a fred client running the two scripts by EVALSHA, no waiting logic.
#[derive(Clone)]
pub struct Bare {
    pub redis: Client,
    acquire: String,
    release: String,
}

/// One lock as the bare baseline sees it: key, unlock channel, owner field.
#[derive(Clone)]
pub struct BareLock {
    pub key: Key,
    pub channel: Key,
    pub owner: Value,
}

impl Bare {
    pub async fn connect(url: &str) -> Bare {
        let redis = Builder::from_config(Config::from_url(url).unwrap())
            .build()
            .unwrap();
        redis.init().await.unwrap();
        let acquire = redis.script_load(ACQUIRE).await.unwrap();
        let release = redis.script_load(RELEASE).await.unwrap();
        Bare {
            redis,
            acquire,
            release,
        }
    }

    pub fn lock(&self, name: &str, owner: &str) -> BareLock {
        BareLock {
            key: name.into(),
            channel: format!("redisson_lock__channel:{{{name}}}").into(),
            owner: format!("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:{owner}").into(),
        }
    }

    /// One EVALSHA of the acquire script: `None` when taken, the holder's PTTL when busy.
    pub async fn acquire_for(&self, lock: &BareLock, lease_ms: i64) -> Option<i64> {
        let args = vec![Value::from(lease_ms), lock.owner.clone()];
        let sha = self.acquire.as_str();
        self.redis
            .evalsha(sha, lock.key.clone(), args)
            .await
            .unwrap()
    }

    pub async fn acquire(&self, lock: &BareLock) -> Option<i64> {
        self.acquire_for(lock, LEASE_MS).await
    }

    /// One EVALSHA of the release script; asserts that it freed the lock.
    pub async fn unlock(&self, lock: &BareLock) {
        let keys = vec![lock.key.clone(), lock.channel.clone()];
        let args = vec![Value::from(LEASE_MS), lock.owner.clone()];
        let sha = self.release.as_str();
        let freed: Option<i64> = self.redis.evalsha(sha, keys, args).await.unwrap();
        assert_eq!(freed, Some(1));
    }

    /// Acquire then release: two round trips, the same Redis work as a lock + unlock.
    pub async fn lock_unlock(&self, lock: &BareLock) {
        assert_eq!(self.acquire(lock).await, None, "the bare lock was busy");
        self.unlock(lock).await;
    }

    /// [`lock_unlock`](Self::lock_unlock) as Redisson does it on a master with replicas:
    /// each script pipelined with a `WAIT` for one replica.
    pub async fn lock_unlock_replicated(&self, lock: &BareLock) {
        let wait = || {
            let command = CustomCommand::new_static("WAIT", ClusterHash::FirstKey, false);
            let args: Vec<Value> = vec![1.into(), 1_000.into()];
            self.redis.custom::<i64, _>(command, args)
        };
        let (acquired, acked) = tokio::join!(self.acquire(lock), wait());
        assert_eq!(acquired, None, "the bare lock was busy");
        assert_eq!(acked.unwrap(), 1);
        let (_, acked) = tokio::join!(self.unlock(lock), wait());
        assert_eq!(acked.unwrap(), 1);
    }

    /// A lock held by someone else for the rest of the run, for [`round_trip`](Self::round_trip).
    pub async fn busy_lock(&self) -> BareLock {
        let holder = self.lock("bench:bare:busy", "1");
        let _ = self.acquire_for(&holder, 3_600_000).await; // None, or already ours
        self.lock("bench:bare:busy", "2")
    }

    /// One round trip, timed: the acquire script on a lock someone else holds (reads only,
    /// what a waiter's retry costs).
    pub async fn round_trip(&self, busy: &BareLock) -> Duration {
        let start = Instant::now();
        assert!(self.acquire(busy).await.is_some(), "the busy lock was free");
        start.elapsed()
    }

    /// `n` timed round trips, one after the other.
    pub async fn round_trips(&self, busy: &BareLock, n: usize) -> Vec<Duration> {
        let mut trips = Vec::with_capacity(n);
        for _ in 0..n {
            trips.push(self.round_trip(busy).await);
        }
        trips
    }
}

/// `iters` lock + unlock of one lock from one task.
pub async fn ours_sequential(lock: &Lock, owner: &LockOwner, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        lock.lock(owner).await.unwrap().unlock().await.unwrap();
    }
    start.elapsed()
}

pub async fn bare_sequential(bare: &Bare, lock: &BareLock, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        bare.lock_unlock(lock).await;
    }
    start.elapsed()
}

/// The share of `iters` operations that task `i` of `tasks` runs.
pub fn share(iters: u64, i: usize, tasks: usize) -> u64 {
    iters / tasks as u64 + u64::from((i as u64) < iters % tasks as u64)
}

/// Spawns `tasks` tasks, task `i` running `work(i, its share of iters)`; the time until all
/// end.
pub async fn spread<F, Fut>(iters: u64, tasks: usize, work: F) -> Duration
where
    F: Fn(usize, u64) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|i| tokio::spawn(work(i, share(iters, i, tasks))))
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    start.elapsed()
}

/// `iters` lock + unlock spread over the tasks, each on its own lock; the time until all end.
pub async fn ours_parallel(locks: &[(Lock, LockOwner)], iters: u64) -> Duration {
    spread(iters, locks.len(), |i, n| {
        let (lock, owner) = locks[i].clone();
        async move { ours_sequential(&lock, &owner, n).await }
    })
    .await
}

pub async fn bare_parallel(bare: &Bare, locks: &[BareLock], iters: u64) -> Duration {
    spread(iters, locks.len(), |i, n| {
        let (bare, lock) = (bare.clone(), locks[i].clone());
        async move { bare_sequential(&bare, &lock, n).await }
    })
    .await
}

/// One side of an interleaved comparison: `ops` operations, the time they took.
pub type Side<'a> = (
    &'a str,
    Box<dyn Fn(u64) -> Pin<Box<dyn Future<Output = Duration> + 'a>> + 'a>,
);

/// Boxes a closure as a [`Side`].
pub fn side<'a, F, Fut>(name: &'a str, run: F) -> Side<'a>
where
    F: Fn(u64) -> Fut + 'a,
    Fut: Future<Output = Duration> + 'a,
{
    (name, Box::new(move |ops| Box::pin(run(ops))))
}

/// Runs `rounds` rounds of `ops` operations of each side in turn and prints the median time
/// per operation of each side and its throughput relative to the last side (the baseline).
/// Returns the medians, in the order of `sides`.
pub fn interleaved(
    rt: &Runtime,
    name: &str,
    rounds: usize,
    ops: u64,
    sides: &[Side<'_>],
) -> Vec<Duration> {
    let mut times = vec![Vec::new(); sides.len()];
    rt.block_on(async {
        for _ in 0..rounds {
            for (side, times) in sides.iter().zip(&mut times) {
                times.push((side.1)(ops).await / ops as u32);
            }
        }
    });
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            t[rounds / 2]
        })
        .collect();
    let (baseline_name, baseline) = (sides[sides.len() - 1].0, medians[medians.len() - 1]);
    let per_op: Vec<String> = (sides.iter().zip(&medians))
        .map(|(s, m)| format!("{} {:.1} µs/op", s.0, micros(*m)))
        .collect();
    let ratios: Vec<String> = (sides.iter().zip(&medians))
        .take(sides.len() - 1)
        .map(|(s, m)| format!("{} {:.2}", s.0, baseline.as_secs_f64() / m.as_secs_f64()))
        .collect();
    println!(
        "{name} interleaved ({rounds} rounds of {ops} ops per side): {}; \
         throughput / {baseline_name}: {}",
        per_op.join(", "),
        ratios.join(", ")
    );
    medians
}

/// Every single measurement of one benchmark, warm-up included, for percentiles.
pub type Samples = Arc<Mutex<Vec<Duration>>>;

/// Runs `once` `iters` times; records every duration in `samples` and returns their sum.
pub async fn timed<F: Future<Output = Duration>>(
    iters: u64,
    samples: &Samples,
    mut once: impl FnMut() -> F,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let took = once().await;
        samples.lock().unwrap().push(took);
        total += took;
    }
    total
}

/// Waits until `channel` has `n` subscribers on the server.
/// EVALSHA calls the server has counted so far.
pub async fn evalsha_calls(bare: &Bare) -> u64 {
    let info: String = bare.redis.info(Some(InfoKind::CommandStats)).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Waits until the server has counted at least `n` EVALSHA calls.
pub async fn await_evalsha_calls(bare: &Bare, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while evalsha_calls(bare).await < n {
        assert!(Instant::now() < deadline, "never {n} EVALSHA calls");
        tokio::task::yield_now().await;
    }
}

pub async fn await_subscribers(bare: &Bare, channel: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, count): (String, i64) = bare.redis.pubsub_numsub(channel).await.unwrap();
        if count == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{channel}: never {n} subscribers"
        );
        tokio::task::yield_now().await;
    }
}

/// One handoff: A holds, B waits in `lock()`, A releases; the time until B's lock() returns.
pub async fn handoff_once(
    a: &Lock,
    b: &Lock,
    owners: &(LockOwner, LockOwner),
    bare: &Bare,
) -> Duration {
    let (holder, waiter) = owners;
    let held = a.lock(holder).await.unwrap();
    // B's client still listens to the channel when a waiter left it less than 500 ms ago.
    let channel = format!("redisson_lock__channel:{{{}}}", b.name());
    let (_, listening): (String, i64) = bare.redis.pubsub_numsub(channel).await.unwrap();
    let before = evalsha_calls(bare).await;
    let (acquired_tx, acquired_rx) = oneshot::channel();
    let (b, waiter) = (b.clone(), waiter.clone());
    let waiting = tokio::spawn(async move {
        let guard = b.lock(&waiter).await.unwrap();
        acquired_tx.send(Instant::now()).unwrap();
        guard.unlock().await.unwrap();
    });
    // B made its first attempt and, on a channel it did not listen to, its second one once
    // subscribed (on one it listened to, with no message since, it waits right after the
    // first): it now waits for the message. Give that reply time to come back so that it
    // really waits.
    let attempts = if listening > 0 { 1 } else { 2 };
    await_evalsha_calls(bare, before + attempts).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let acquired = acquired_rx.await.unwrap();
    waiting.await.unwrap();
    acquired - released
}

/// Percentiles of a set of durations.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub n: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
    pub max: Duration,
}

/// Prints and returns p50/p99/mean/max of `samples`; `None` when there are none.
pub fn summary(name: &str, samples: &[Duration]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    let mut samples = samples.to_vec();
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let stats = Stats {
        n: samples.len(),
        p50: at(0.50),
        p99: at(0.99),
        mean: samples.iter().sum::<Duration>() / samples.len() as u32,
        max: at(1.0),
    };
    println!(
        "{name}: {} samples, p50 {:.1} µs, p99 {:.1} µs, mean {:.1} µs, max {:.1} µs",
        stats.n,
        micros(stats.p50),
        micros(stats.p99),
        micros(stats.mean),
        micros(stats.max)
    );
    Some(stats)
}

/// [`summary`] of shared samples.
pub fn percentiles(name: &str, samples: &Samples) -> Option<Stats> {
    summary(name, &samples.lock().unwrap())
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// "met" or "NOT met".
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// The three load averages of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Prints the load average, tagged with `when`.
pub fn print_load(when: &str) {
    println!("load average {when}: {}", load_average());
}

/// The command line as criterion reads it, for the measurements criterion does not run.
pub struct Args {
    /// `cargo bench` (criterion's `--bench` without `--test`): full measurements. Otherwise
    /// (`cargo test --benches`) a short smoke run.
    pub full: bool,
    /// `--list`: name the groups, measure nothing.
    pub list: bool,
    filter: Option<String>,
}

impl Args {
    pub fn parse() -> Args {
        // Criterion's options that take a value (criterion 0.5).
        const WITH_VALUE: &[&str] = &[
            "-c",
            "--color",
            "-s",
            "--save-baseline",
            "-b",
            "--baseline",
            "--baseline-lenient",
            "--format",
            "--profile-time",
            "--load-baseline",
            "--sample-size",
            "--warm-up-time",
            "--measurement-time",
            "--nresamples",
            "--noise-threshold",
            "--confidence-level",
            "--significance-level",
            "--plotting-backend",
            "--output-format",
        ];
        let args: Vec<String> = std::env::args().skip(1).collect();
        let has = |flag: &str| args.iter().any(|a| a == flag);
        let mut filter = None;
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if WITH_VALUE.contains(&arg.as_str()) {
                rest.next();
            } else if !arg.starts_with('-') && filter.is_none() {
                filter = Some(arg.clone());
            }
        }
        Args {
            full: has("--bench") && !has("--test"),
            list: has("--list"),
            filter,
        }
    }

    /// Whether the group `name` is to run: no filter, or the filter names (part of) it.
    /// A substring test, where criterion uses a regex: plain names behave the same.
    pub fn selected(&self, name: &str) -> bool {
        match &self.filter {
            None => true,
            Some(f) => name.contains(f.as_str()) || f.contains(name),
        }
    }

    /// [`selected`](Self::selected), and not in `--list` mode (where it prints the name).
    pub fn runs(&self, name: &str) -> bool {
        if self.list {
            if self.selected(name) {
                println!("{name}: bench");
            }
            return false;
        }
        self.selected(name)
    }
}

/// `INFO commandstats`: calls per command since the last `CONFIG RESETSTAT`.
pub struct CommandStats(pub Vec<(String, u64)>);

impl CommandStats {
    pub fn reset(server: &RedisServer) {
        assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    }

    pub fn read(server: &RedisServer) -> CommandStats {
        let info = server.command(&["INFO", "commandstats"]);
        let mut stats: Vec<(String, u64)> = info
            .lines()
            .filter_map(|line| {
                let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.trim().parse().ok()?))
            })
            .filter(|(name, _)| !Self::ours(name))
            .collect();
        stats.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        CommandStats(stats)
    }

    /// The commands this bench sends to read and reset the statistics.
    fn ours(name: &str) -> bool {
        name == "info" || name.starts_with("config")
    }

    pub fn calls(&self, name: &str) -> u64 {
        (self.0.iter().find(|(n, _)| n == name)).map_or(0, |(_, calls)| *calls)
    }

    /// Every command counted (Redis 7 counts commands run by scripts too).
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, calls)| calls).sum()
    }

    /// The commands that clients sent: everything but those only the scripts of `lua/` run.
    pub fn sent(&self) -> u64 {
        let scripted = script_commands();
        (self.0.iter())
            .filter(|(name, _)| !scripted.contains(name.as_str()))
            .map(|(_, calls)| calls)
            .sum()
    }

    /// `name=calls` of every command, most called first.
    pub fn breakdown(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(n, c)| format!("{n}={c}")).collect();
        parts.join(" ")
    }
}

/// The Redis commands the scripts of `lua/` call (`redis.call('name'`), plus the publish
/// commands they call by variable. The crate sends none of them directly on the paths the
/// benches measure (only EVALSHA, UNLINK of latches, (UN)SUBSCRIBE and PING).
pub fn script_commands() -> HashSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
    let mut names: HashSet<String> = ["publish", "spublish"].map(String::from).into();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for call in text.split("redis.call(").skip(1) {
            let call = call.trim_start();
            if let Some(quoted) = call.strip_prefix('\'').or_else(|| call.strip_prefix('"')) {
                let name: String = quoted
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name.to_ascii_lowercase());
            }
        }
    }
    names
}

/// The resident set size of this process (`VmRSS` of `/proc/self/status`), in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// CPU time of this process: (sum of every live thread's run time from
/// `/proc/self/task/*/schedstat`, in ns; utime + stime of `/proc/self/stat`, in clock ticks
/// of 10 ms, exited threads included).
pub fn cpu_time() -> (Duration, Duration) {
    let mut ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let path = task.path().join("schedstat");
            if let Ok(text) = std::fs::read_to_string(path) {
                ns += text
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    (Duration::from_nanos(ns), Duration::from_millis(ticks * 10))
}

/// Connects `n` clients of the same server.
pub async fn clients(url: &str, n: usize) -> Vec<LockClient> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(LockClient::connect(url).await.unwrap());
    }
    clients
}

/// Context switches of this process's live threads so far (`/proc/self/task/*/status`).
pub fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut switches = 0;
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(value) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                switches += value.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    switches
}

/// CPU time `server` has used so far (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`).
pub fn redis_cpu(server: &RedisServer) -> Duration {
    let info = server.command(&["INFO", "cpu"]);
    let seconds: f64 = (info.lines())
        .filter_map(|line| {
            let value = line
                .strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))?;
            value.trim().parse::<f64>().ok()
        })
        .sum();
    Duration::from_secs_f64(seconds)
}

/// What one run of a workload cost, per operation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub wall: Duration,
    /// CPU of this process (every thread, by schedstat).
    pub client_cpu: Duration,
    /// CPU of the redis-server.
    pub redis_cpu: Duration,
    pub allocations: f64,
    /// Context switches of this process's threads (voluntary and not).
    pub switches: f64,
}

/// Runs `work` (`ops` operations) and measures its [`Cost`] per operation.
pub fn cost_of<F: Future<Output = Duration>>(
    rt: &Runtime,
    server: &RedisServer,
    ops: u64,
    work: F,
) -> Cost {
    let (redis0, (cpu0, _), allocs0) = (redis_cpu(server), cpu_time(), allocations());
    let switches0 = context_switches();
    let wall = rt.block_on(work);
    let (cpu1, _) = cpu_time();
    let (allocs1, switches1) = (allocations(), context_switches());
    let redis1 = redis_cpu(server);
    let n = ops as u32;
    Cost {
        wall: wall / n,
        client_cpu: (cpu1 - cpu0) / n,
        redis_cpu: (redis1 - redis0) / n,
        allocations: (allocs1 - allocs0) as f64 / ops as f64,
        switches: switches1.saturating_sub(switches0) as f64 / ops as f64,
    }
}

/// The median of each field over `costs`.
pub fn median_cost(costs: &[Cost]) -> Cost {
    let median = |f: &dyn Fn(&Cost) -> f64| {
        let mut values: Vec<f64> = costs.iter().map(f).collect();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap());
        values[values.len() / 2]
    };
    Cost {
        wall: Duration::from_secs_f64(median(&|c| c.wall.as_secs_f64())),
        client_cpu: Duration::from_secs_f64(median(&|c| c.client_cpu.as_secs_f64())),
        redis_cpu: Duration::from_secs_f64(median(&|c| c.redis_cpu.as_secs_f64())),
        allocations: median(&|c| c.allocations),
        switches: median(&|c| c.switches),
    }
}

/// Takes `n` holds (watchdog lease) on the locks `<prefix><i>` from 64 tasks; one owner per
/// task.
pub async fn take_holds(client: &LockClient, prefix: &str, n: usize) -> Vec<LockGuard> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (client, prefix) = (client.clone(), prefix.to_owned());
            tokio::spawn(async move {
                let owner = client.new_owner();
                let mut guards = Vec::new();
                for i in (t..n).step_by(TASKS) {
                    let lock = client.lock(&format!("{prefix}{i}")).unwrap();
                    guards.push(lock.lock(&owner).await.unwrap());
                }
                guards
            })
        })
        .collect();
    let mut guards = Vec::with_capacity(n);
    for task in tasks {
        guards.extend(task.await.unwrap());
    }
    guards
}

/// Releases `guards` from 64 tasks.
pub async fn release_holds(mut guards: Vec<LockGuard>) {
    let per_task = guards.len().div_ceil(TASKS).max(1);
    let mut tasks = Vec::new();
    while !guards.is_empty() {
        let chunk = guards.split_off(guards.len().saturating_sub(per_task));
        tasks.push(tokio::spawn(async move {
            for guard in chunk {
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Polls the calls of `command` every 10 ms until `bursts` bursts of calls have started and
/// ended (no new call for 250 ms). Returns the calls counted at the end and each burst's
/// length (first call seen to last).
pub fn bursts(
    server: &RedisServer,
    command: &str,
    bursts: usize,
    limit: Duration,
) -> (u64, Vec<Duration>) {
    const QUIET: Duration = Duration::from_millis(250);
    let deadline = Instant::now() + limit;
    let mut last = CommandStats::read(server).calls(command);
    let mut last_change = Instant::now();
    let mut seen: Vec<(Instant, Instant)> = Vec::new();
    let mut in_burst = false;
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let now = Instant::now();
        let calls = CommandStats::read(server).calls(command);
        if calls != last {
            if !in_burst {
                seen.push((now, now));
                in_burst = true;
            }
            seen.last_mut().unwrap().1 = now;
            last = calls;
            last_change = now;
        } else if in_burst && now - last_change >= QUIET {
            in_burst = false;
            if seen.len() == bursts {
                return (calls, seen.iter().map(|(a, b)| *b - *a).collect());
            }
        }
        assert!(
            now < deadline,
            "fewer than {bursts} bursts of {command} within {limit:?}"
        );
    }
}

/// Waits until no `command` was counted for 250 ms (the latch task's UNLINKs after a wave of
/// releases, for example).
pub fn await_quiet(server: &RedisServer, command: &str) {
    let mut last = CommandStats::read(server).calls(command);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(250) {
        std::thread::sleep(Duration::from_millis(10));
        let calls = CommandStats::read(server).calls(command);
        if calls != last {
            (last, since) = (calls, Instant::now());
        }
    }
}
