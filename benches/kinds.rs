//! `cargo bench --bench kinds`: the figures of the targets beyond the plain lock's latency
//! and throughput (those are `lock.rs`), each beside a baseline measured in the same run, on
//! private redis-servers. Results and targets: `docs/benchmarks.md`.
//!
//! Groups, in the order they run:
//! - `watchdog_10k` (a measurement, not a criterion benchmark; first, so that the process's
//!   memory is not yet shaped by the other groups): one `LockClient` with a 3 s watchdog
//!   holding 10,000 locks. Renewal scripts per renewal period (counted by `INFO
//!   commandstats` over two renewal rounds), CPU time of the process while it only holds
//!   (`/proc/self/task/*/schedstat`, and `/proc/self/stat` ticks), and memory per held lock
//!   (`VmRSS`, and the live heap counted by this binary's global allocator).
//! - `fair_handoff` (a measurement): a fair lock with N = 4 and 16 waiters from two
//!   `LockClient`s queued in order; each release to the next waiter's `lock()` returning,
//!   beside the plain lock's handoff and bare EVALSHA round trips sampled between the
//!   rounds. Then the fairness figure: 16 tasks contending in a loop on one fair lock with a
//!   1 ms hold; the longest wait vs 16 × (hold + 3 round trips), and every task's count.
//! - `read_throughput` (criterion): read lock + unlock from 64 tasks on one
//!   `ReadWriteLock` name, one `LockClient`, beside the plain lock's `parallel_64` workload
//!   (each task its own lock) and the bare scripts from 64 tasks; then each side's client
//!   CPU, Redis CPU and allocations per operation. `PROFILE_SIDE=read` (or `plain`) runs one
//!   side only, for a profiler.
//! - `commands_per_acquisition` (a measurement): 16 tasks on two `LockClient`s contending in
//!   a loop on one plain lock (1 ms hold); Redis commands per acquisition from `INFO
//!   commandstats`, beside one task's uncontended lock + unlock.
//! - `multi_lock` (criterion): `MultiLock` and `RedLock` lock + unlock over 3 and 5
//!   redis-servers (one `LockClient` each), uncontended, beside the bare scripts run on
//!   each server in turn; p50/p99 from an interleaved pass.
//! - `replica_ack` (a measurement): on a master with one replica (servers of its own), lock +
//!   unlock from 1 and from 64 tasks of one `LockClient`, with the replica acknowledgement
//!   (`WAIT` after each lock script) on and off, interleaved.
//!
//! Under `cargo test --benches` every group runs once, shortened (a smoke test).

mod common;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use fred::interfaces::{ClientLike, ListInterface};
use redisson_lock::{
    FairLock, Lock, LockClient, LockGuard, LockOwner, MultiLock, ReadWriteLock, RedLock,
};
use tokio::runtime::Runtime;

// ---------------------------------------------------------------------------------------
// watchdog_10k

/// CPU of this process over `window` of doing nothing on the bench's side; prints it and
/// returns the share of one core by schedstat, in %.
fn cpu_share(label: &str, window: Duration) -> f64 {
    let (cpu0, ticks0) = cpu_time();
    let start = Instant::now();
    std::thread::sleep(window);
    let (cpu1, ticks1) = cpu_time();
    let wall = start.elapsed();
    let share = (cpu1 - cpu0).as_secs_f64() / wall.as_secs_f64() * 100.0;
    println!(
        "watchdog_10k/{label}: CPU of the process over {:.2} s: {:.1} ms = {share:.3}% of one \
         core by schedstat ({:.0} ms by utime+stime ticks)",
        wall.as_secs_f64(),
        millis(cpu1 - cpu0),
        millis(ticks1 - ticks0),
    );
    share
}

/// Prints the renewal scripts per period and the process's CPU while `client` holds
/// `holds` locks and does nothing else.
fn renewal_figures(
    server: &RedisServer,
    client: &LockClient,
    label: &str,
    holds: usize,
    period: Duration,
) {
    // Start at the end of a renewal round, so that the count covers whole rounds.
    bursts(server, "evalsha", 1, period * 4);
    CommandStats::reset(server);
    let (calls, lengths) = bursts(server, "evalsha", 2, period * 6);
    let stats = CommandStats::read(server);
    let per_period = calls as f64 / 2.0;
    let per_100 = per_period / (holds as f64 / 100.0);
    let lengths: Vec<String> = (lengths.iter())
        .map(|b| format!("{:.0} ms", millis(*b)))
        .collect();
    println!(
        "watchdog_10k/{label}: {holds} holds; renewal scripts over 2 renewal rounds: {calls} \
         = {per_period:.0} per period = {per_100:.2} per 100 locks per period (target ≤ 1: \
         {}); rounds lasted {} (first call to last seen, 10 ms polling)",
        verdict(per_100 <= 1.0),
        lengths.join(", ")
    );
    println!(
        "watchdog_10k/{label}: commands counted meanwhile: {}",
        stats.breakdown()
    );
    // CPU while holding, with nothing else going on (no polling either).
    let share = cpu_share(&format!("{label}, holding, 3 renewal periods"), period * 3);
    // A round costs the same whatever the period: scale to the default 10 s period
    // (watchdog_timeout 30 s), which is what a deployment runs with.
    let default_period = Duration::from_secs(10);
    let at_default = share * period.as_secs_f64() / default_period.as_secs_f64();
    println!(
        "watchdog_10k/{label}: CPU while holding {holds} locks: {share:.3}% of one core with a \
         {:.0} s period; {at_default:.3}% at the default 10 s period (watchdog_timeout 30 s) \
         (target well under 1%, read as ≤ 0.5%: {} at the default period)",
        period.as_secs_f64(),
        verdict(at_default <= 0.5)
    );
    assert_eq!(client.renewed_holds(), holds);
}

fn watchdog_10k(rt: &Runtime, server: &RedisServer, args: &Args) {
    if !args.runs("watchdog_10k") {
        return;
    }
    print_load("before watchdog_10k");
    let holds = if args.full { 10_000 } else { 300 };
    let timeout = Duration::from_secs(3);
    let period = timeout / 3;
    let client = rt.block_on(async {
        let builder = LockClient::builder().url(&server.url());
        builder.watchdog_timeout(timeout).build().await.unwrap()
    });

    // Warm up the runtime, the connection and the allocator's arenas on other locks.
    rt.block_on(async {
        let locks: Vec<_> = (0..TASKS)
            .map(|i| {
                (
                    client.lock(&format!("bench:wd:warm:{i}")).unwrap(),
                    client.new_owner(),
                )
            })
            .collect();
        ours_parallel(&locks, 6_400).await;
        let warm = take_holds(&client, "bench:wd:warm:hold:", holds / 10).await;
        release_holds(warm).await;
    });
    await_quiet(server, "unlink");
    cpu_share("no holds (idle floor)", period);
    let (rss0, heap0) = (rss_bytes(), live_heap());
    let guards = rt.block_on(take_holds(&client, "bench:wd:", holds));
    let (rss_taken, heap_taken) = (rss_bytes(), live_heap());
    println!(
        "watchdog_10k: memory right after taking {holds} holds (renewal rounds may be under \
         way): VmRSS {:.1} → {:.1} MiB = {:.0} bytes per lock; live heap +{:.2} MiB",
        rss0 as f64 / 1048576.0,
        rss_taken as f64 / 1048576.0,
        (rss_taken as f64 - rss0 as f64) / holds as f64,
        (heap_taken - heap0) as f64 / 1048576.0,
    );
    // Read at the end of a renewal round, not amid one (a round allocates while it runs).
    bursts(server, "evalsha", 1, period * 4);
    let (rss1, heap1) = (rss_bytes(), live_heap());
    assert_eq!(client.renewed_holds(), holds);
    let rss_per = (rss1 as f64 - rss0 as f64) / holds as f64;
    let heap_per = (heap1 - heap0) as f64 / holds as f64;
    println!(
        "watchdog_10k: memory for {holds} held locks at the end of a renewal round (guards \
         kept in a Vec, {} bytes each): \
         VmRSS {:.1} → {:.1} MiB = {rss_per:.0} bytes per lock; live heap +{:.2} MiB = \
         {heap_per:.0} bytes per lock (target ≤ 1024: {} by VmRSS, {} by live heap)",
        std::mem::size_of::<LockGuard>(),
        rss0 as f64 / 1048576.0,
        rss1 as f64 / 1048576.0,
        (heap1 - heap0) as f64 / 1048576.0,
        verdict(rss_per <= 1024.0),
        verdict(heap_per <= 1024.0)
    );
    renewal_figures(server, &client, "distinct_names", holds, period);
    rt.block_on(release_holds(guards));
    await_quiet(server, "unlink");
    let (rss2, heap2) = (rss_bytes(), live_heap());
    println!(
        "watchdog_10k: after releasing them: VmRSS {:.1} MiB, live heap {:+.2} MiB over the \
         start (kept by the client after the holds are gone: capacity of maps and buffers)",
        rss2 as f64 / 1048576.0,
        (heap2 - heap0) as f64 / 1048576.0,
    );

    // The same holds with names that share one hash tag, so one cluster slot: context for
    // the batching of renewals, which groups holds by slot.
    let guards = rt.block_on(take_holds(&client, "{bench:wd}:", holds));
    renewal_figures(server, &client, "one_hash_tag", holds, period);
    rt.block_on(release_holds(guards));
    await_quiet(server, "unlink");
    rt.block_on(client.shutdown());
    print_load("after watchdog_10k");
}

// ---------------------------------------------------------------------------------------
// fair_handoff

/// Waits until the list `key` is `n` long.
async fn await_len(bare: &Bare, key: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while bare.redis.llen::<i64, _>(key).await.unwrap() != n {
        assert!(Instant::now() < deadline, "{key}: never {n} long");
        tokio::task::yield_now().await;
    }
}

/// One round: a holder in client A; `n` waiters, alternately in B and A, queued one after
/// the other (each is in the queue and subscribed to its channel before the next comes);
/// the holder releases, and each waiter releases as soon as its `lock()` returns. Returns
/// the `n` handoffs (from just before a release to the next waiter's `lock()` returning)
/// and how many waiters got the lock out of their queue order.
async fn fair_round(
    locks: [&FairLock; 2],
    clients: [&LockClient; 2],
    n: usize,
    bare: &Bare,
) -> (Vec<Duration>, usize) {
    let name = locks[0].name();
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let held = locks[0].lock(&clients[0].new_owner()).await.unwrap();
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let (lock, client) = (locks[(i + 1) % 2].clone(), clients[(i + 1) % 2]);
        let owner = client.new_owner();
        let channel = format!("redisson_lock__channel:{{{name}}}:{owner}");
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock(&owner).await.unwrap();
            let acquired = Instant::now();
            let released = Instant::now();
            guard.unlock().await.unwrap();
            (i, acquired, released)
        }));
        await_len(bare, &queue, i as i64 + 1).await;
        await_subscribers(bare, &channel, 1).await;
    }
    // Give the last waiter's second attempt time to come back, as in `handoff`.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let mut got = Vec::with_capacity(n);
    for waiter in waiters {
        got.push(waiter.await.unwrap());
    }
    got.sort_by_key(|(_, acquired, _)| *acquired);
    let out_of_order = got
        .iter()
        .enumerate()
        .filter(|(k, (i, _, _))| k != i)
        .count();
    let mut previous = released;
    let handoffs = (got.iter())
        .map(|(_, acquired, released)| {
            let handoff = *acquired - previous;
            previous = *released;
            handoff
        })
        .collect();
    (handoffs, out_of_order)
}

/// What one task of [`fair_contention`] saw: per acquisition, the wait, and when the hold
/// began (`lock()` returned) and ended (just before `unlock()`).
#[derive(Default)]
struct Turns {
    waits: Vec<Duration>,
    holds: Vec<(Instant, Instant)>,
}

/// 16 tasks, alternately in A and B, each looping lock / hold / unlock on one fair lock
/// until `run` passes.
async fn fair_contention(
    locks: [&FairLock; 2],
    clients: [&LockClient; 2],
    run: Duration,
    hold: Duration,
) -> Vec<Turns> {
    let end = Instant::now() + run;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (lock, owner) = (locks[i % 2].clone(), clients[i % 2].new_owner());
            tokio::spawn(async move {
                let mut turns = Turns::default();
                while Instant::now() < end {
                    let asked = Instant::now();
                    let guard = lock.lock(&owner).await.unwrap();
                    let acquired = Instant::now();
                    turns.waits.push(acquired - asked);
                    tokio::time::sleep(hold).await;
                    turns.holds.push((acquired, Instant::now()));
                    guard.unlock().await.unwrap();
                }
                turns
            })
        })
        .collect();
    let mut results = Vec::with_capacity(16);
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

fn fair_handoff(rt: &Runtime, (a, b): (&LockClient, &LockClient), bare: &Bare, args: &Args) {
    if !args.runs("fair_handoff") {
        return;
    }
    print_load("before fair_handoff");
    let busy = rt.block_on(bare.busy_lock());
    let (fair_a, fair_b) = (
        a.fair_lock("bench:fair").unwrap(),
        b.fair_lock("bench:fair").unwrap(),
    );
    let (plain_a, plain_b) = (
        a.lock("bench:kinds:handoff").unwrap(),
        b.lock("bench:kinds:handoff").unwrap(),
    );
    let target_samples = if args.full { 2_000 } else { 32 };
    for n in [4, 16] {
        let (mut fair, mut plain, mut trips, mut out_of_order) = (vec![], vec![], vec![], 0);
        rt.block_on(async {
            // One round without measuring: subscriptions, scripts and connections warm.
            fair_round([&fair_a, &fair_b], [a, b], n, bare).await;
            while fair.len() < target_samples {
                let (handoffs, wrong) = fair_round([&fair_a, &fair_b], [a, b], n, bare).await;
                fair.extend(handoffs);
                out_of_order += wrong;
                for _ in 0..(n / 4).max(1) {
                    let owners = (a.new_owner(), b.new_owner());
                    plain.push(handoff_once(&plain_a, &plain_b, &owners, bare).await);
                }
                trips.extend(bare.round_trips(&busy, n).await);
            }
        });
        let fair = summary(&format!("fair_handoff/{n}_waiters/fair_lock"), &fair).unwrap();
        let plain = summary(
            &format!("fair_handoff/{n}_waiters/plain_lock_handoff (interleaved)"),
            &plain,
        )
        .unwrap();
        let trip = summary(
            &format!("fair_handoff/{n}_waiters/bare_evalsha_round_trip (interleaved)"),
            &trips,
        )
        .unwrap();
        println!(
            "fair_handoff/{n}_waiters: fair handoff p50 = {:.2} round trips, {:.2}× the plain \
             lock's handoff; p99 {:.2} ms; waiters served out of queue order: {out_of_order} \
             (for reference, the plain handoff target: p50 ≤ 3 round trips: {}, p99 ≤ 1 ms: {})",
            fair.p50.as_secs_f64() / trip.p50.as_secs_f64(),
            fair.p50.as_secs_f64() / plain.p50.as_secs_f64(),
            millis(fair.p99),
            verdict(fair.p50 <= trip.p50 * 3),
            verdict(fair.p99 <= Duration::from_millis(1)),
        );
    }

    // Fairness: 16 tasks in a loop, 1 ms hold.
    let run = if args.full {
        Duration::from_secs(4)
    } else {
        Duration::from_millis(300)
    };
    let hold = Duration::from_millis(1);
    let fair_c = (
        a.fair_lock("bench:fairness").unwrap(),
        b.fair_lock("bench:fairness").unwrap(),
    );
    let (before, results, after) = rt.block_on(async {
        let before = bare.round_trips(&busy, 300).await;
        let results = fair_contention([&fair_c.0, &fair_c.1], [a, b], run, hold).await;
        let after = bare.round_trips(&busy, 300).await;
        (before, results, after)
    });
    let trip = summary(
        "fairness/bare_evalsha_round_trip (before and after)",
        &[before, after].concat(),
    )
    .unwrap();
    let waits: Vec<Duration> = results.iter().flat_map(|t| t.waits.clone()).collect();
    let mut spans: Vec<(Instant, Instant)> = results.iter().flat_map(|t| t.holds.clone()).collect();
    spans.sort();
    let holds: Vec<Duration> = spans.iter().map(|(from, to)| *to - *from).collect();
    // From just before one holder's unlock() to the next holder's lock() returning.
    let gaps: Vec<Duration> = spans.windows(2).map(|w| w[1].0 - w[0].1).collect();
    let wait = summary("fairness/wait for the lock", &waits).unwrap();
    let held = summary("fairness/hold (sleep of 1 ms, measured)", &holds).unwrap();
    let gap = summary(
        "fairness/handoff (release to the next lock() returning)",
        &gaps,
    )
    .unwrap();
    println!(
        "fairness: handoff in the loop p50 = {:.2} round trips (p50 {:.1} µs)",
        gap.p50.as_secs_f64() / trip.p50.as_secs_f64(),
        micros(trip.p50)
    );
    let counts: Vec<usize> = results.iter().map(|t| t.waits.len()).collect();
    let max_waits: Vec<Duration> = (results.iter())
        .map(|t| t.waits.iter().copied().max().unwrap_or_default())
        .collect();
    let bound = (held.mean + trip.p50 * 3) * 16;
    let starved = counts.iter().filter(|c| **c == 0).count();
    println!(
        "fairness: 16 tasks, {:.1} s, {} acquisitions; per task {}..{} (min..max); max wait \
         {:.2} ms (per task {:.2}..{:.2} ms) vs bound 16 × (mean hold {:.3} ms + 3 × round trip \
         p50 {:.1} µs) = {:.2} ms: {}; tasks without an acquisition: {starved}: {}",
        run.as_secs_f64(),
        waits.len(),
        counts.iter().min().unwrap(),
        counts.iter().max().unwrap(),
        millis(wait.max),
        millis(*max_waits.iter().min().unwrap()),
        millis(*max_waits.iter().max().unwrap()),
        millis(held.mean),
        micros(trip.p50),
        millis(bound),
        verdict(wait.max <= bound),
        verdict(starved == 0),
    );
    print_load("after fair_handoff");
}

// ---------------------------------------------------------------------------------------
// read_throughput

/// `iters` read lock + unlock spread over the tasks, all on the same read-write lock.
async fn ours_read_parallel(readers: &[(ReadWriteLock, LockOwner)], iters: u64) -> Duration {
    spread(iters, readers.len(), |i, n| {
        let (lock, owner) = readers[i].clone();
        async move {
            for _ in 0..n {
                lock.read(&owner).await.unwrap().unlock().await.unwrap();
            }
        }
    })
    .await
}

/// Runs `work` for 40 rounds, for a profiler attached to this process.
fn profile_rounds<F: Future<Output = Duration>>(rt: &Runtime, work: impl Fn() -> F) {
    for _ in 0..40 {
        rt.block_on(work());
    }
}

fn read_throughput(
    c: &mut Criterion,
    rt: &Runtime,
    server: &RedisServer,
    ours: &LockClient,
    bare: &Bare,
) {
    let rw = ours.read_write_lock("bench:rw").unwrap();
    let readers: Vec<_> = (0..TASKS).map(|_| (rw.clone(), ours.new_owner())).collect();
    let plain: Vec<_> = (0..TASKS)
        .map(|i| {
            (
                ours.lock(&format!("bench:rt:p64:{i}")).unwrap(),
                ours.new_owner(),
            )
        })
        .collect();
    // For profiling one side (`perf record -p <pid>`): `PROFILE_SIDE=read` or `plain` runs
    // only that side's 64 tasks, 40 rounds of 6,400, and nothing else of this group.
    match std::env::var("PROFILE_SIDE").as_deref() {
        Ok("read") => return profile_rounds(rt, || ours_read_parallel(&readers, 6_400)),
        Ok("plain") => return profile_rounds(rt, || ours_parallel(&plain, 6_400)),
        _ => {}
    }
    let mut group = c.benchmark_group("read_throughput");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    let measured = Cell::new(false); // false in test mode (one iteration) or when filtered out
    group.bench_function("redisson_lock_read_one_name", |b| {
        b.to_async(rt).iter_custom(|iters| {
            measured.set(measured.get() || iters > 1);
            ours_read_parallel(&readers, iters)
        })
    });
    group.bench_function("redisson_lock_plain_own_locks", |b| {
        b.to_async(rt)
            .iter_custom(|iters| ours_parallel(&plain, iters))
    });
    let locks: Vec<_> = (0..TASKS)
        .map(|i| bare.lock(&format!("bench:bare:rt:{i}"), &i.to_string()))
        .collect();
    group.bench_function("bare_evalsha_own_locks", |b| {
        b.to_async(rt)
            .iter_custom(|iters| bare_parallel(bare, &locks, iters))
    });
    group.finish();
    if measured.get() {
        print_load("after read_throughput's criterion runs");
        interleaved(
            rt,
            "read_throughput",
            10,
            6_400,
            &[
                side("redisson_lock_read_one_name", |n| {
                    ours_read_parallel(&readers, n)
                }),
                side("redisson_lock_plain_own_locks", |n| {
                    ours_parallel(&plain, n)
                }),
                side("bare_evalsha_own_locks", |n| bare_parallel(bare, &locks, n)),
            ],
        );
        // Where the difference goes: each side's CPU per operation, in alternating rounds.
        let (mut read, mut own) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            read.push(cost_of(
                rt,
                server,
                6_400,
                ours_read_parallel(&readers, 6_400),
            ));
            own.push(cost_of(rt, server, 6_400, ours_parallel(&plain, 6_400)));
        }
        let (read, own) = (median_cost(&read), median_cost(&own));
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!(
            "read_throughput CPU per lock + unlock (10 alternating rounds of 6400, medians): \
             read {:.2} µs client, {:.2} µs Redis, {:.1} allocations; plain {:.2} µs client, \
             {:.2} µs Redis, {:.1} allocations; read / plain: client {:.2}, Redis {:.2}",
            micros(read.client_cpu),
            micros(read.redis_cpu),
            read.allocations,
            micros(own.client_cpu),
            micros(own.redis_cpu),
            own.allocations,
            ratio(read.client_cpu, own.client_cpu),
            ratio(read.redis_cpu, own.redis_cpu),
        );
    }
}

// ---------------------------------------------------------------------------------------
// replica_ack

fn replica_ack(rt: &Runtime, args: &Args) {
    if !args.runs("replica_ack") {
        return;
    }
    let master = RedisServer::start_with_args(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let _replica = topology::start_replica_of(&master);
    let (on, off, bare) = rt.block_on(async {
        let on = LockClient::connect(&master.url()).await.unwrap();
        let off = LockClient::builder()
            .url(&master.url())
            .wait_for_replicas(None)
            .build()
            .await
            .unwrap();
        (on, off, Bare::connect(&master.url()).await)
    });
    let owned = |client: &LockClient, label: &str, n: usize| -> Vec<(Lock, LockOwner)> {
        (0..n)
            .map(|i| {
                let lock = client.lock(&format!("bench:replica:{label}:{i}")).unwrap();
                (lock, client.new_owner())
            })
            .collect()
    };
    let (rounds, ops) = if args.full { (5, 2_000) } else { (1, 64) };
    print_load("before replica_ack");
    for tasks in [1, 64] {
        let (with, without) = (owned(&on, "on", tasks), owned(&off, "off", tasks));
        let bare_locks: Vec<BareLock> = (0..tasks)
            .map(|i| bare.lock(&format!("bench:replica:bare:{i}"), &i.to_string()))
            .collect();
        interleaved(
            rt,
            &format!("replica_ack, {tasks} task(s)"),
            rounds,
            ops,
            &[
                side("check_on", |n| ours_parallel(&with, n)),
                // The bare scripts each pipelined with a WAIT, as Redisson sends them.
                side("bare_with_wait", |n| {
                    spread(n, tasks, |i, n| {
                        let (bare, lock) = (bare.clone(), bare_locks[i].clone());
                        async move {
                            for _ in 0..n {
                                bare.lock_unlock_replicated(&lock).await;
                            }
                        }
                    })
                }),
                side("check_off", |n| ours_parallel(&without, n)),
            ],
        );
    }
    rt.block_on(async {
        on.shutdown().await;
        off.shutdown().await;
        let _ = bare.redis.quit().await;
    });
}

// ---------------------------------------------------------------------------------------
// commands_per_acquisition

/// 16 tasks, alternately in A and B, each looping lock / hold / unlock on one plain lock
/// until `total` acquisitions were made (tasks already waiting then still get theirs).
/// Returns the task of every acquisition, in order.
async fn plain_contention(
    clients: [&LockClient; 2],
    name: &str,
    total: usize,
    hold: Duration,
) -> Vec<usize> {
    let order = Arc::new(Mutex::new(Vec::with_capacity(total + 16)));
    let count = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (lock, owner) = (
                clients[i % 2].lock(name).unwrap(),
                clients[i % 2].new_owner(),
            );
            let (order, count) = (order.clone(), count.clone());
            tokio::spawn(async move {
                while count.load(Ordering::Relaxed) < total as u64 {
                    let guard = lock.lock(&owner).await.unwrap();
                    order.lock().unwrap().push(i);
                    count.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(order).unwrap().into_inner().unwrap()
}

fn commands_per_acquisition(
    rt: &Runtime,
    server: &RedisServer,
    (a, b): (&LockClient, &LockClient),
    bare: &Bare,
    args: &Args,
) {
    if !args.runs("commands_per_acquisition") {
        return;
    }
    print_load("before commands_per_acquisition");
    // The latch task deletes 2 ms after a release.
    let settle = Duration::from_millis(50);
    let per = |calls: u64, n: usize| calls as f64 / n as f64;
    // References, one task, uncontended: ours, and the bare two scripts.
    let solo_ops = if args.full { 1_000 } else { 50 };
    let (lock, owner) = (a.lock("bench:cmds:solo").unwrap(), a.new_owner());
    let bare_lock = bare.lock("bench:bare:cmds:solo", "1");
    rt.block_on(ours_sequential(&lock, &owner, 10));
    std::thread::sleep(settle);
    let mut references = Vec::new();
    for name in ["redisson_lock", "bare_evalsha"] {
        CommandStats::reset(server);
        rt.block_on(async {
            match name {
                "redisson_lock" => ours_sequential(&lock, &owner, solo_ops).await,
                _ => bare_sequential(bare, &bare_lock, solo_ops).await,
            }
        });
        std::thread::sleep(settle);
        let stats = CommandStats::read(server);
        let n = solo_ops as usize;
        println!(
            "commands_per_acquisition/uncontended/{name} (one task, {solo_ops} lock+unlock): \
             per lock+unlock {:.2} commands counted, {:.2} sent by the client, {:.2} EVALSHA; \
             counted: {}",
            per(stats.total(), n),
            per(stats.sent(), n),
            per(stats.calls("evalsha"), n),
            stats.breakdown()
        );
        references.push((per(stats.total(), n), per(stats.sent(), n)));
    }
    let solo = references[0];

    // 16 waiters in two clients.
    let total = if args.full { 1_000 } else { 64 };
    let hold = Duration::from_millis(1);
    rt.block_on(plain_contention([a, b], "bench:cmds", 32, hold)); // warm-up
    std::thread::sleep(settle);
    CommandStats::reset(server);
    let start = Instant::now();
    let order = rt.block_on(plain_contention([a, b], "bench:cmds", total, hold));
    let took = start.elapsed();
    std::thread::sleep(settle);
    let stats = CommandStats::read(server);
    let n = order.len();
    let mut counts = [0usize; 16];
    for task in &order {
        counts[*task] += 1;
    }
    let again = order.windows(2).filter(|w| w[0] == w[1]).count();
    let (all, sent, evalsha) = (
        per(stats.total(), n),
        per(stats.sent(), n),
        per(stats.calls("evalsha"), n),
    );
    println!(
        "commands_per_acquisition/16_waiters: {n} acquisitions in {:.2} s (1 ms hold); per task \
         {}..{}; the releasing task took it again {:.1}% of the time",
        took.as_secs_f64(),
        counts.iter().min().unwrap(),
        counts.iter().max().unwrap(),
        again as f64 / (n - 1) as f64 * 100.0
    );
    println!(
        "commands_per_acquisition/16_waiters: per acquisition {all:.2} commands counted by INFO \
         commandstats (those run inside scripts included; target ≤ 6: {}), {sent:.2} sent by \
         clients (target ≤ 6: {}), {evalsha:.2} EVALSHA (a thundering herd would show ~16); \
         uncontended lock+unlock: {:.2} counted, {:.2} sent",
        verdict(all <= 6.0),
        verdict(sent <= 6.0),
        solo.0,
        solo.1,
    );
    println!(
        "commands_per_acquisition/16_waiters: counted: {}",
        stats.breakdown()
    );
    print_load("after commands_per_acquisition");
}

// ---------------------------------------------------------------------------------------
// multi_lock

async fn multi_sequential(multi: &MultiLock, owner: &LockOwner, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        multi.lock(owner).await.unwrap().unlock().await.unwrap();
    }
    start.elapsed()
}

async fn red_sequential(red: &RedLock, owner: &LockOwner, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        red.lock(owner).await.unwrap().unlock().await.unwrap();
    }
    start.elapsed()
}

/// The bare scripts on every server in turn: acquire on each, then release on each (2 × N
/// EVALSHA round trips, one after the other).
async fn bare_multi_sequential(bares: &[(Bare, BareLock)], iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        for (bare, lock) in bares {
            assert_eq!(bare.acquire(lock).await, None, "the bare lock was busy");
        }
        for (bare, lock) in bares {
            bare.unlock(lock).await;
        }
    }
    start.elapsed()
}

fn multi_lock(c: &mut Criterion, rt: &Runtime, args: &Args) {
    if !args.selected("multi_lock") {
        return;
    }
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let (clients, bares) = rt.block_on(async {
        let (mut clients, mut bares) = (Vec::new(), Vec::new());
        for server in &servers {
            clients.push(LockClient::connect(&server.url()).await.unwrap());
            bares.push(Bare::connect(&server.url()).await);
        }
        (clients, bares)
    });
    let mut group = c.benchmark_group("multi_lock");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(30);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    let owner = clients[0].new_owner();
    let mut setups = Vec::new();
    let measured = Cell::new(false);
    for n in [3, 5] {
        let multi = clients[0]
            .multi_lock(clients[..n].iter().map(|c| c.lock("bench:multi").unwrap()))
            .unwrap();
        let red = clients[0]
            .red_lock(clients[..n].iter().map(|c| c.lock("bench:red").unwrap()))
            .unwrap();
        let bare: Vec<_> = (bares[..n].iter())
            .map(|b| (b.clone(), b.lock("bench:bare:multi", "1")))
            .collect();
        group.bench_function(BenchmarkId::new("multi_lock", n), |b| {
            b.to_async(rt).iter_custom(|iters| {
                measured.set(measured.get() || iters > 1);
                multi_sequential(&multi, &owner, iters)
            })
        });
        group.bench_function(BenchmarkId::new("red_lock", n), |b| {
            b.to_async(rt)
                .iter_custom(|iters| red_sequential(&red, &owner, iters))
        });
        group.bench_function(BenchmarkId::new("bare_evalsha_2n", n), |b| {
            b.to_async(rt)
                .iter_custom(|iters| bare_multi_sequential(&bare, iters))
        });
        setups.push((n, multi, red, bare));
    }
    group.finish();
    if !measured.get() {
        return;
    }
    print_load("after multi_lock's criterion runs");
    // Percentiles: one of each in turn, so that the three see the same load, with a pause
    // after each so that none runs during the background work of the one before (the
    // latches' UNLINK, 2 ms after a release).
    let pause = Duration::from_millis(5);
    for (n, multi, red, bare) in &setups {
        let (mut m, mut r, mut b) = (Vec::new(), Vec::new(), Vec::new());
        rt.block_on(async {
            for _ in 0..500 {
                m.push(multi_sequential(multi, &owner, 1).await);
                tokio::time::sleep(pause).await;
                r.push(red_sequential(red, &owner, 1).await);
                tokio::time::sleep(pause).await;
                b.push(bare_multi_sequential(bare, 1).await);
                tokio::time::sleep(pause).await;
            }
        });
        let m = summary(&format!("multi_lock/{n}/multi_lock (interleaved)"), &m).unwrap();
        let r = summary(&format!("multi_lock/{n}/red_lock (interleaved)"), &r).unwrap();
        let b = summary(&format!("multi_lock/{n}/bare_evalsha_2n (interleaved)"), &b).unwrap();
        let trip = b.p50 / (2 * *n as u32);
        println!(
            "multi_lock/{n}: p50 per lock+unlock: MultiLock {:.1} µs = {:.2}× the bare 2×{n} \
             EVALSHA = {:.1} round trips; RedLock {:.1} µs = {:.2}× = {:.1} round trips (a round \
             trip here = bare p50 / {}: {:.1} µs; {n} round trips = {:.1} µs)",
            micros(m.p50),
            m.p50.as_secs_f64() / b.p50.as_secs_f64(),
            m.p50.as_secs_f64() / trip.as_secs_f64(),
            micros(r.p50),
            r.p50.as_secs_f64() / b.p50.as_secs_f64(),
            r.p50.as_secs_f64() / trip.as_secs_f64(),
            2 * n,
            micros(trip),
            micros(trip * *n as u32),
        );
    }
    rt.block_on(async {
        for client in &clients {
            client.shutdown().await;
        }
        for bare in &bares {
            let _ = bare.redis.quit().await;
        }
    });
}

fn main() {
    let args = Args::parse();
    let server = RedisServer::start();
    let rt = runtime();
    let url = server.url();
    println!(
        "private redis-server at {url} ({}); {}",
        redis_version(&server),
        if args.full { "full run" } else { "smoke run" }
    );
    print_load("at the start");

    // First, in a process whose heap the other groups have not shaped yet.
    watchdog_10k(&rt, &server, &args);

    let (a, b, bare) = rt.block_on(async {
        let a = LockClient::connect(&url).await.unwrap();
        let b = LockClient::connect(&url).await.unwrap();
        (a, b, Bare::connect(&url).await)
    });
    fair_handoff(&rt, (&a, &b), &bare, &args);
    let mut c = Criterion::default().configure_from_args();
    read_throughput(&mut c, &rt, &server, &a, &bare);
    commands_per_acquisition(&rt, &server, (&a, &b), &bare, &args);
    multi_lock(&mut c, &rt, &args);
    replica_ack(&rt, &args);
    c.final_summary();
    print_load("at the end");
    rt.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
        let _ = bare.redis.quit().await;
    });
}
