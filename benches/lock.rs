//! `cargo bench --bench lock`: redisson-lock beside bare fred baselines measured in the same
//! run, on a private redis-server. Results and targets: `docs/benchmarks.md`.
//!
//! Groups:
//! - `uncontended`: one task, lock + unlock of a `Lock` (watchdog lease) vs the Redisson hash
//!   protocol as two bare EVALSHA calls on a fred `Client` (acquire, release).
//! - `parallel_64`: the same from 64 tasks, each on its own lock, one client for all.
//! - `handoff`: a waiter already waits in `lock()` on another `LockClient`; the time from
//!   just before the holder's `unlock()` to the waiter's `lock()` returning, vs one bare
//!   EVALSHA round trip, and vs the same handoff done with fred alone. Raw p50/p99 are
//!   printed at the end of the group.
//!
//! Criterion runs one benchmark after the other; on a machine shared with other work the load
//! drifts between them. So after `uncontended` and `parallel_64` the two sides are also run
//! in alternating batches and the medians printed ("interleaved"), and the handoff is
//! compared with round trips sampled between handoffs.

#[path = "../tests/support/server.rs"]
mod server;

use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{ClientLike, EventInterface, LuaInterface, PubsubInterface};
use fred::types::config::Config;
use fred::types::{Builder, Key, Value};
use redisson_lock::{Lock, LockClient, LockOwner};
use tokio::runtime::Runtime;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;

/// Redisson's acquire: the crate's own script (HINCRBY + PEXPIRE, or PTTL when busy).
const ACQUIRE: &str = include_str!("../lua/lock_acquire.lua");
/// Redisson's classic release, without this crate's unlock latch:
/// HINCRBY -1, then PEXPIRE (still held) or DEL + PUBLISH (freed).
const RELEASE: &str = r#"
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
const LEASE_MS: i64 = 30_000;
const TASKS: usize = 64;

/// The baseline: a fred client running the two scripts by EVALSHA, no waiting logic.
#[derive(Clone)]
struct Bare {
    redis: Client,
    acquire: String,
    release: String,
}

/// One lock as the bare baseline sees it: key, unlock channel, owner field.
#[derive(Clone)]
struct BareLock {
    key: Key,
    channel: Key,
    owner: Value,
}

impl Bare {
    async fn connect(url: &str) -> Bare {
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

    fn lock(&self, name: &str, owner: &str) -> BareLock {
        BareLock {
            key: name.into(),
            channel: format!("redisson_lock__channel:{{{name}}}").into(),
            owner: format!("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:{owner}").into(),
        }
    }

    /// One EVALSHA of the acquire script: `None` when taken, the holder's PTTL when busy.
    async fn acquire_for(&self, lock: &BareLock, lease_ms: i64) -> Option<i64> {
        let args = vec![Value::from(lease_ms), lock.owner.clone()];
        let sha = self.acquire.as_str();
        self.redis
            .evalsha(sha, lock.key.clone(), args)
            .await
            .unwrap()
    }

    async fn acquire(&self, lock: &BareLock) -> Option<i64> {
        self.acquire_for(lock, LEASE_MS).await
    }

    /// One EVALSHA of the release script; asserts that it freed the lock.
    async fn unlock(&self, lock: &BareLock) {
        let keys = vec![lock.key.clone(), lock.channel.clone()];
        let args = vec![Value::from(LEASE_MS), lock.owner.clone()];
        let sha = self.release.as_str();
        let freed: Option<i64> = self.redis.evalsha(sha, keys, args).await.unwrap();
        assert_eq!(freed, Some(1));
    }

    /// Acquire then release: two round trips, the same Redis work as a lock + unlock.
    async fn lock_unlock(&self, lock: &BareLock) {
        assert_eq!(self.acquire(lock).await, None, "the bare lock was busy");
        self.unlock(lock).await;
    }

    /// One round trip, timed: the acquire script on a lock someone else holds (reads only,
    /// what a waiter's retry costs).
    async fn round_trip(&self, busy: &BareLock) -> Duration {
        let start = Instant::now();
        assert!(self.acquire(busy).await.is_some(), "the busy lock was free");
        start.elapsed()
    }
}

/// `iters` lock + unlock of one lock from one task.
async fn ours_sequential(lock: &Lock, owner: &LockOwner, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        lock.lock(owner).await.unwrap().unlock().await.unwrap();
    }
    start.elapsed()
}

async fn bare_sequential(bare: &Bare, lock: &BareLock, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        bare.lock_unlock(lock).await;
    }
    start.elapsed()
}

/// The share of `iters` operations that task `i` of `TASKS` runs.
fn share(iters: u64, i: usize) -> u64 {
    iters / TASKS as u64 + u64::from((i as u64) < iters % TASKS as u64)
}

/// `iters` lock + unlock spread over 64 tasks, each on its own lock; the time until all end.
async fn ours_parallel(locks: &[(Lock, LockOwner)], iters: u64) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (locks.iter().enumerate())
        .map(|(i, (lock, owner))| {
            let (lock, owner) = (lock.clone(), owner.clone());
            tokio::spawn(async move { ours_sequential(&lock, &owner, share(iters, i)).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

async fn bare_parallel(bare: &Bare, locks: &[BareLock], iters: u64) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (locks.iter().enumerate())
        .map(|(i, lock)| {
            let (bare, lock) = (bare.clone(), lock.clone());
            tokio::spawn(async move { bare_sequential(&bare, &lock, share(iters, i)).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

/// Runs `rounds` alternating batches of `ops` operations, ours then bare, and prints the
/// median time per operation of each side and the throughput ratio.
fn interleaved<A, FA, B, FB>(rt: &Runtime, name: &str, rounds: usize, ops: u64, ours: A, bare: B)
where
    A: Fn(u64) -> FA,
    FA: Future<Output = Duration>,
    B: Fn(u64) -> FB,
    FB: Future<Output = Duration>,
{
    let (mut a, mut b) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..rounds {
            a.push(ours(ops).await / ops as u32);
            b.push(bare(ops).await / ops as u32);
        }
    });
    a.sort();
    b.sort();
    let (a, b) = (a[rounds / 2], b[rounds / 2]);
    println!(
        "{name} interleaved ({rounds} rounds of {ops} ops per side): redisson_lock {:.1} µs/op, \
         bare_evalsha {:.1} µs/op, throughput ours/bare = {:.2}",
        micros(a),
        micros(b),
        b.as_secs_f64() / a.as_secs_f64()
    );
}

fn uncontended(c: &mut Criterion, rt: &Runtime, ours: &LockClient, bare: &Bare) {
    let mut group = c.benchmark_group("uncontended");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    let (lock, owner) = (ours.lock("bench:uncontended"), ours.new_owner());
    let measured = Cell::new(false); // false in test mode (one iteration) or when filtered out
    group.bench_function("redisson_lock", |b| {
        b.to_async(rt).iter_custom(|iters| {
            measured.set(measured.get() || iters > 1);
            ours_sequential(&lock, &owner, iters)
        })
    });
    let bare_lock = bare.lock("bench:bare:uncontended", "1");
    group.bench_function("bare_evalsha", |b| {
        b.to_async(rt)
            .iter_custom(|iters| bare_sequential(bare, &bare_lock, iters))
    });
    group.finish();
    if measured.get() {
        interleaved(
            rt,
            "uncontended",
            20,
            500,
            |n| ours_sequential(&lock, &owner, n),
            |n| bare_sequential(bare, &bare_lock, n),
        );
    }
}

fn parallel(c: &mut Criterion, rt: &Runtime, ours: &LockClient, bare: &Bare) {
    let mut group = c.benchmark_group("parallel_64");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    let ours: Vec<_> = (0..TASKS)
        .map(|i| (ours.lock(&format!("bench:p64:{i}")), ours.new_owner()))
        .collect();
    let measured = Cell::new(false);
    group.bench_function("redisson_lock", |b| {
        b.to_async(rt).iter_custom(|iters| {
            measured.set(measured.get() || iters > 1);
            ours_parallel(&ours, iters)
        })
    });
    let locks: Vec<_> = (0..TASKS)
        .map(|i| bare.lock(&format!("bench:bare:p64:{i}"), &i.to_string()))
        .collect();
    group.bench_function("bare_evalsha", |b| {
        b.to_async(rt)
            .iter_custom(|iters| bare_parallel(bare, &locks, iters))
    });
    group.finish();
    if measured.get() {
        interleaved(
            rt,
            "parallel_64",
            15,
            6_400,
            |n| ours_parallel(&ours, n),
            |n| bare_parallel(bare, &locks, n),
        );
    }
}

/// Every single measurement of one benchmark, warm-up included, for percentiles.
type Samples = Arc<Mutex<Vec<Duration>>>;

/// Runs `once` `iters` times; records every duration in `samples` and returns their sum.
async fn timed<F: Future<Output = Duration>>(
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
async fn await_subscribers(bare: &Bare, channel: &str, n: i64) {
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
async fn handoff_once(
    a: &Lock,
    b: &Lock,
    owners: &(LockOwner, LockOwner),
    bare: &Bare,
) -> Duration {
    let (holder, waiter) = owners;
    let channel = format!("redisson_lock__channel:{{{}}}", a.name());
    await_subscribers(bare, &channel, 0).await; // the previous waiter has unsubscribed
    let held = a.lock(holder).await.unwrap();
    let (acquired_tx, acquired_rx) = oneshot::channel();
    let (b, waiter) = (b.clone(), waiter.clone());
    let waiting = tokio::spawn(async move {
        let guard = b.lock(&waiter).await.unwrap();
        acquired_tx.send(Instant::now()).unwrap();
        guard.unlock().await.unwrap();
    });
    // B is subscribed; give its second attempt time to come back so that it really waits.
    await_subscribers(bare, &channel, 1).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let acquired = acquired_rx.await.unwrap();
    waiting.await.unwrap();
    acquired - released
}

/// The same handoff with fred alone: the waiter's subscriber is already subscribed, and the
/// waiter retries the acquire script on each message.
async fn bare_handoff_once(bare: &Bare, sub: &SubscriberClient, locks: &[BareLock; 2]) -> Duration {
    let [holder, waiter] = locks;
    assert_eq!(
        bare.acquire(holder).await,
        None,
        "the handoff lock was busy"
    );
    let (acquired_tx, acquired_rx) = oneshot::channel();
    let mut messages = sub.message_rx();
    let (bare_waiter, waiter) = (bare.clone(), waiter.clone());
    let waiting = tokio::spawn(async move {
        while bare_waiter.acquire(&waiter).await.is_some() {
            if let Err(RecvError::Closed) = messages.recv().await {
                panic!("the bare subscriber closed");
            }
        }
        acquired_tx.send(Instant::now()).unwrap();
        bare_waiter.unlock(&waiter).await;
    });
    tokio::time::sleep(Duration::from_millis(2)).await; // as above: the waiter really waits
    let released = Instant::now();
    bare.unlock(holder).await;
    let acquired = acquired_rx.await.unwrap();
    waiting.await.unwrap();
    acquired - released
}

fn handoff(c: &mut Criterion, rt: &Runtime, (a, b): (&LockClient, &LockClient), bare: &Bare) {
    let mut group = c.benchmark_group("handoff");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(50);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));

    // Held by someone else for the whole group: round trips run the acquire script on it.
    let busy = bare.lock("bench:bare:busy", "1");
    assert_eq!(rt.block_on(bare.acquire_for(&busy, 600_000)), None);
    let busy = bare.lock("bench:bare:busy", "2");

    let (lock_a, lock_b) = (a.lock("bench:handoff"), b.lock("bench:handoff"));
    let owners = (a.new_owner(), b.new_owner());
    let (ours, trips_between) = (Samples::default(), Samples::default());
    group.bench_function("redisson_lock", |bencher| {
        bencher.to_async(rt).iter_custom(|iters| {
            timed(iters, &ours, || async {
                let trip = bare.round_trip(&busy).await; // not part of the measurement
                trips_between.lock().unwrap().push(trip);
                handoff_once(&lock_a, &lock_b, &owners, bare).await
            })
        })
    });

    let trips = Samples::default();
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("bare_evalsha_round_trip", |bencher| {
        bencher
            .to_async(rt)
            .iter_custom(|iters| timed(iters, &trips, || bare.round_trip(&busy)))
    });

    let locks = [
        bare.lock("bench:bare:handoff", "1"),
        bare.lock("bench:bare:handoff", "2"),
    ];
    let sub = rt.block_on(async {
        let config = bare.redis.client_config();
        let sub = Builder::from_config(config)
            .build_subscriber_client()
            .unwrap();
        sub.init().await.unwrap();
        let channel = locks[0].channel.as_str().unwrap().to_owned();
        sub.subscribe(channel).await.unwrap();
        sub
    });
    let fred_only = Samples::default();
    group.measurement_time(Duration::from_secs(6));
    group.bench_function("bare_pubsub_handoff", |bencher| {
        bencher
            .to_async(rt)
            .iter_custom(|iters| timed(iters, &fred_only, || bare_handoff_once(bare, &sub, &locks)))
    });
    group.finish();
    rt.block_on(sub.quit()).unwrap();

    let ours = percentiles("handoff/redisson_lock", &ours);
    percentiles("handoff/bare_evalsha_round_trip", &trips);
    percentiles("handoff/bare_pubsub_handoff", &fred_only);
    let trip = percentiles("round trips sampled between the handoffs", &trips_between);
    if let (Some(ours), Some(trip)) = (ours, trip) {
        let ratio = ours.as_secs_f64() / trip.as_secs_f64();
        println!(
            "handoff/redisson_lock p50 = {ratio:.2} round trips (p50 of those sampled between)"
        );
    }
}

/// Prints p50/p99 of `samples`; returns the p50.
fn percentiles(name: &str, samples: &Samples) -> Option<Duration> {
    let mut samples = samples.lock().unwrap().clone();
    if samples.is_empty() {
        return None;
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let mean = micros(samples.iter().sum::<Duration>() / samples.len() as u32);
    println!(
        "{name}: {} samples, p50 {:.1} µs, p99 {:.1} µs, mean {mean:.1} µs, max {:.1} µs",
        samples.len(),
        micros(at(0.50)),
        micros(at(0.99)),
        micros(at(1.0))
    );
    Some(at(0.50))
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let server = server::RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = server.url();
    let (a, b, bare) = rt.block_on(async {
        let a = LockClient::connect(&url).await.unwrap();
        let b = LockClient::connect(&url).await.unwrap();
        (a, b, Bare::connect(&url).await)
    });
    let info = server.command(&["INFO", "server"]);
    let version = info.lines().find(|l| l.starts_with("redis_version:"));
    println!("private redis-server at {url} ({})", version.unwrap_or("?"));

    let mut c = Criterion::default().configure_from_args();
    uncontended(&mut c, &rt, &a, &bare);
    parallel(&mut c, &rt, &a, &bare);
    handoff(&mut c, &rt, (&a, &b), &bare);
    c.final_summary();
    rt.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
        let _ = bare.redis.quit().await;
    });
}
