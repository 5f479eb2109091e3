//! `cargo bench --bench lock` (in `benches/`): redisson-lock beside bare fred baselines
//! measured in the same run, on a private redis-server. Results and targets:
//! `docs/benchmarks.md`.
//!
//! Groups:
//! - `cpu_per_op` (a measurement, not a criterion benchmark): what one lock + unlock costs
//!   the client process (CPU, heap allocations) and the redis-server (CPU, from `INFO
//!   cpu`), ours and the bare scripts in alternating rounds, from 1 task and from 64 tasks.
//! - `call_latency` (a measurement): one task, each call timed alone, in turn within every
//!   iteration: `lock()` and `unlock()`, the crate's two scripts sent by a bare fred client,
//!   and the bare scripts. It splits the one-task gap into the crate's own time per call and
//!   its scripts' extra time.
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
//!
//! The baseline, the workloads and the helpers are shared with `kinds/` (the other lock
//! kinds and the remaining figures of the targets) and `synchronizers.rs` in `common/`.

mod common;

use std::cell::Cell;
use std::time::{Duration, Instant};

use common::*;
use criterion::{Criterion, SamplingMode, Throughput};
use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, EventInterface, LuaInterface, PubsubInterface};
use fred::types::{Builder, Value};
use redisson_lock::LockClient;
use tokio::runtime::Runtime;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;

fn uncontended(c: &mut Criterion, rt: &Runtime, ours: &LockClient, bare: &Bare) {
    let mut group = c.benchmark_group("uncontended");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    let (lock, owner) = (ours.lock("bench:uncontended").unwrap(), ours.new_owner());
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
            &[
                side("redisson_lock", |n| ours_sequential(&lock, &owner, n)),
                side("bare_evalsha", |n| bare_sequential(bare, &bare_lock, n)),
            ],
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
        .map(|i| {
            (
                ours.lock(&format!("bench:p64:{i}")).unwrap(),
                ours.new_owner(),
            )
        })
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
            &[
                side("redisson_lock", |n| ours_parallel(&ours, n)),
                side("bare_evalsha", |n| bare_parallel(bare, &locks, n)),
            ],
        );
    }
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
    let busy = rt.block_on(bare.busy_lock());

    let (lock_a, lock_b) = (
        a.lock("bench:handoff").unwrap(),
        b.lock("bench:handoff").unwrap(),
    );
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
        let ratio = ours.p50.as_secs_f64() / trip.p50.as_secs_f64();
        println!(
            "handoff/redisson_lock p50 = {ratio:.2} round trips (p50 of those sampled between)"
        );
    }
}

/// Client CPU, Redis CPU and allocations per lock + unlock, ours, raw and Redisson 4.7's own
/// scripts in alternating rounds, from 1 task and from 64 tasks (each its own lock).
///
/// For profiling one side (`perf record -p <pid>`): `PROFILE_SIDE=ours`, `raw` or `redisson`
/// runs only that side, 64 tasks (or `PROFILE_TASKS`), for 40 rounds.
fn cpu_per_op(rt: &Runtime, server: &RedisServer, ours: &LockClient, bare: &Bare, args: &Args) {
    if !args.runs("cpu_per_op") {
        return;
    }
    let profile = std::env::var("PROFILE_SIDE").ok();
    let (rounds, scale) = match (&profile, args.full) {
        (Some(_), _) => (40, 1),
        (None, true) => (15, 1),
        (None, false) => (1, 20),
    };
    let profiled_tasks = std::env::var("PROFILE_TASKS").map_or(TASKS, |n| n.parse().unwrap());
    let sizes: &[(usize, u64)] = match profile {
        Some(_) => &[(profiled_tasks, 200 * profiled_tasks as u64)],
        None => &[(1, 2_000), (TASKS, 12_800)],
    };
    let runs = |side: &str| profile.as_deref().is_none_or(|p| p == side);
    for &(tasks, ops) in sizes {
        let ops = ops / scale;
        let locks: Vec<_> = (0..tasks)
            .map(|i| {
                let lock = ours.lock(&format!("bench:cpu:{tasks}:{i}")).unwrap();
                (lock, ours.new_owner())
            })
            .collect();
        let bare_locks: Vec<_> = (0..tasks)
            .map(|i| bare.lock(&format!("bench:bare:cpu:{tasks}:{i}"), &i.to_string()))
            .collect();
        rt.block_on(ours_parallel(&locks, ops)); // warm-up
        rt.block_on(bare_parallel(bare, &bare_locks, ops));
        rt.block_on(redisson_parallel(bare, &bare_locks, ops));
        let (mut mine, mut raw, mut redisson) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            if runs("ours") {
                mine.push(cost_of(rt, server, ops, ours_parallel(&locks, ops)));
            }
            if runs("raw") {
                raw.push(cost_of(
                    rt,
                    server,
                    ops,
                    bare_parallel(bare, &bare_locks, ops),
                ));
            }
            if runs("redisson") {
                let sent = redisson_parallel(bare, &bare_locks, ops);
                redisson.push(cost_of(rt, server, ops, sent));
            }
        }
        if mine.is_empty() || raw.is_empty() || redisson.is_empty() {
            continue; // profiling one side
        }
        let (mine, raw) = (median_cost(&mine), median_cost(&raw));
        let redisson = median_cost(&redisson);
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        let client = ratio(mine.client_cpu, raw.client_cpu);
        println!(
            "cpu_per_op/{tasks}_tasks ({rounds} rounds of {ops} lock+unlock per side, medians): \
             redisson_lock {:.1} µs wall, {:.2} µs client CPU, {:.2} µs Redis CPU, {:.1} \
             allocations, {:.2} context switches; bare_evalsha {:.1} µs wall, {:.2} µs client \
             CPU, {:.2} µs Redis CPU, {:.1} allocations, {:.2} context switches; throughput × \
             raw {:.2}, client CPU × raw {client:.2}{}, Redis CPU × raw {:.2}",
            micros(mine.wall),
            micros(mine.client_cpu),
            micros(mine.redis_cpu),
            mine.allocations,
            mine.switches,
            micros(raw.wall),
            micros(raw.client_cpu),
            micros(raw.redis_cpu),
            raw.allocations,
            raw.switches,
            ratio(raw.wall, mine.wall),
            if tasks == 1 {
                format!(" (target ≤ 1.1: {})", verdict(client <= 1.1))
            } else {
                String::new()
            },
            ratio(mine.redis_cpu, raw.redis_cpu),
        );
        let throughput = ratio(redisson.wall, mine.wall);
        println!(
            "cpu_per_op/{tasks}_tasks against Redisson 4.7's own scripts (acquire; unlock with \
             its request's latch; the latch's DEL not waited for): redisson_scripts {:.1} µs \
             wall, {:.2} µs client CPU, {:.2} µs Redis CPU, {:.1} allocations; throughput × \
             redisson_scripts {throughput:.2} (target ≥ 0.95: {}); client CPU × redisson_scripts \
             {:.2}; allocations {:.1} (target ≤ 25: {})",
            micros(redisson.wall),
            micros(redisson.client_cpu),
            micros(redisson.redis_cpu),
            redisson.allocations,
            verdict(throughput >= 0.95),
            ratio(mine.client_cpu, redisson.client_cpu),
            mine.allocations,
            verdict(mine.allocations <= 25.0),
        );
        println!(
            "cpu_per_op/{tasks}_tasks server reads from client sockets per lock+unlock: \
             redisson_lock {:.2}, bare_evalsha {:.2}, redisson_scripts {:.2}",
            mine.reads, raw.reads, redisson.reads,
        );
    }
}

/// One task: every iteration times `lock()`, `unlock()`, the crate's acquire and release
/// scripts sent by the bare fred client (the same KEYS and ARGV, the latch included), and the
/// bare scripts, one call after the other. Prints each call's p50 and p99, and the p50
/// differences: the crate's own time per call (its call − its script on fred) and its
/// scripts' extra time (its script on fred − the bare script).
fn call_latency(rt: &Runtime, ours: &LockClient, bare: &Bare, args: &Args) {
    if !args.runs("call_latency") {
        return;
    }
    let iterations = if args.full { 20_000 } else { 20 };
    let (lock, owner) = (ours.lock("bench:calls").unwrap(), ours.new_owner());
    let raw = bare.lock("bench:calls:raw", "1");
    let mine = bare.lock("bench:calls:scripts", "1");
    let latch = "redisson_unlock_latch:{bench:calls:scripts}:1";
    const CALLS: [&str; 6] = [
        "lock()",
        "unlock()",
        "crate's acquire script on fred",
        "crate's release script on fred",
        "bare acquire script",
        "bare release script",
    ];
    let mut times: [Vec<Duration>; 6] = Default::default();
    rt.block_on(async {
        let load = |name| bare.redis.script_load::<String, _>(lua::lua(name));
        let (acquire, release) = (load("lock_acquire").await, load("lock_release").await);
        let (acquire, release) = (acquire.unwrap(), release.unwrap());
        for i in 0..iterations {
            let mut at = [Instant::now(); 7];
            let guard = lock.lock(&owner).await.unwrap();
            at[1] = Instant::now();
            guard.unlock().await.unwrap();
            at[2] = Instant::now();
            let args = vec![Value::from(LEASE_MS), mine.owner.clone()];
            let taken: Value = bare
                .redis
                .evalsha(&acquire, mine.key.clone(), args)
                .await
                .unwrap();
            at[3] = Instant::now();
            let keys = vec![mine.key.clone(), mine.channel.clone(), latch.into()];
            let args = vec![
                Value::from("0"),
                Value::from(LEASE_MS),
                mine.owner.clone(),
                Value::from("publish"),
                Value::from(10_000),
                Value::from(i),
            ];
            let freed: i64 = bare.redis.evalsha(&release, keys, args).await.unwrap();
            at[4] = Instant::now();
            assert!(
                matches!(taken, Value::Array(_)) && freed == 1,
                "{taken:?} {freed}"
            );
            assert_eq!(bare.acquire(&raw).await, None);
            at[5] = Instant::now();
            bare.unlock(&raw).await;
            at[6] = Instant::now();
            for (call, times) in times.iter_mut().enumerate() {
                times.push(at[call + 1] - at[call]);
            }
        }
    });
    let p50: Vec<Duration> = (CALLS.iter().zip(&times))
        .map(|(call, times)| summary(&format!("call_latency/{call}"), times).unwrap().p50)
        .collect();
    let gap = |a: usize, b: usize| micros(p50[a]) - micros(p50[b]);
    println!(
        "call_latency at p50: the crate's own time {:.1} µs per lock(), {:.1} µs per unlock(); \
         its scripts' extra time {:.1} µs per acquire, {:.1} µs per release",
        gap(0, 2),
        gap(1, 3),
        gap(2, 4),
        gap(3, 5),
    );
}

fn main() {
    let args = Args::parse();
    let server = RedisServer::start();
    let rt = runtime();
    let url = server.url();
    let (a, b, bare) = rt.block_on(async {
        let a = LockClient::connect(&url).await.unwrap();
        let b = LockClient::connect(&url).await.unwrap();
        (a, b, Bare::connect(&url).await)
    });
    println!("private redis-server at {url} ({})", redis_version(&server));
    print_load("at the start");

    cpu_per_op(&rt, &server, &a, &bare, &args);
    call_latency(&rt, &a, &bare, &args);
    let mut c = Criterion::default().configure_from_args();
    uncontended(&mut c, &rt, &a, &bare);
    parallel(&mut c, &rt, &a, &bare);
    handoff(&mut c, &rt, (&a, &b), &bare);
    c.final_summary();
    print_load("at the end");
    rt.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
        let _ = bare.redis.quit().await;
    });
}
