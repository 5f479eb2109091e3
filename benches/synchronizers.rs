//! `cargo bench --bench synchronizers` (in `benches/`): the semaphore, the permit-expirable
//! semaphore and the count-down latch, beside Redisson's own scripts sent by a bare fred
//! client in the same run, on a private redis-server. Results and targets: `docs/benchmarks.md`.
//!
//! Groups (measurements printed, not criterion benchmarks):
//! - `semaphore_throughput`: acquire(1) + release(1), from 1 task and from 64 tasks (each on
//!   its own semaphore of 1 permit, and all on one semaphore of 64 permits), ours and
//!   Redisson's two scripts by EVALSHA in alternating rounds: wall time, client CPU, Redis
//!   CPU, heap allocations per operation.
//! - `expirable_throughput`: the same for the permit-expirable semaphore: acquire with a
//!   30 s lease, release by id.
//! - `semaphore_wakeup`: a waiter in `acquire` on a second `LockClient`; the time from
//!   just before the holder's release to the waiter's acquire returning, against bare
//!   EVALSHA round trips sampled between the rounds.
//! - `latch_wakeup`: the same for a waiter in `wait()` and a `count_down()` to zero.
//! - `latch_1000`: 1,000 waiters in `wait()`, in one client or spread over 4; the time from
//!   just before the `count_down()` to the last waiter returning, and the messages the
//!   server published.
//!
//! `cargo bench` (criterion's `--bench` flag) runs the published figures: about 3 minutes;
//! `cargo test --benches` a short smoke run.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::bare_sync::{BareSemaphore, BareSync};
use common::*;
use fred::interfaces::{ClientLike, PubsubInterface};
use fred::types::InfoKind;
use redisson_lock::{CountDownLatch, LockClient, Semaphore};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// The lease of the permit-expirable semaphore's permits.
const LEASE: Duration = Duration::from_secs(30);

/// Calls of `command` the server counted so far.
async fn calls(bare: &Bare, command: &str) -> u64 {
    let info: String = bare.redis.info(Some(InfoKind::CommandStats)).await.unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Waits until the server counted at least `n` calls of `command`.
async fn await_calls(bare: &Bare, command: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while calls(bare, command).await < n {
        assert!(Instant::now() < deadline, "never {n} {command} calls");
        tokio::task::yield_now().await;
    }
}

/// Runs both sides `rounds` times in turn, each round measured by [`cost_of`]; prints the
/// medians and the ratios; returns ours / raw throughput.
fn compare<A, AF, B, BF>(
    (rt, server): (&Runtime, &RedisServer),
    name: &str,
    (rounds, ops): (usize, u64),
    ours: A,
    raw: B,
) -> f64
where
    A: Fn(u64) -> AF,
    AF: Future<Output = Duration>,
    B: Fn(u64) -> BF,
    BF: Future<Output = Duration>,
{
    rt.block_on(ours(ops)); // warm-up
    rt.block_on(raw(ops));
    let (mut mine, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        mine.push(cost_of(rt, server, ops, ours(ops)));
        bare.push(cost_of(rt, server, ops, raw(ops)));
    }
    let (mine, bare) = (median_cost(&mine), median_cost(&bare));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let throughput = ratio(bare.wall, mine.wall);
    let per_s = |c: &Cost| 1.0 / c.wall.as_secs_f64();
    println!(
        "{name} ({rounds} rounds of {ops} acquire+release per side, medians; load {}): \
         ours {:.0}/s, {:.1} µs wall, {:.2} µs client CPU, {:.2} µs Redis CPU, {:.1} \
         allocations; raw {:.0}/s, {:.1} µs wall, {:.2} µs client CPU, {:.2} µs Redis CPU, \
         {:.1} allocations; throughput × raw {throughput:.2} (target ≥ 0.9: {}), client CPU × \
         raw {:.2}, Redis CPU × raw {:.2}",
        load_average(),
        per_s(&mine),
        micros(mine.wall),
        micros(mine.client_cpu),
        micros(mine.redis_cpu),
        mine.allocations,
        per_s(&bare),
        micros(bare.wall),
        micros(bare.client_cpu),
        micros(bare.redis_cpu),
        bare.allocations,
        verdict(throughput >= 0.9),
        ratio(mine.client_cpu, bare.client_cpu),
        ratio(mine.redis_cpu, bare.redis_cpu),
    );
    throughput
}

/// The three shapes of every throughput case: (label, tasks, semaphores, permits each).
const SHAPES: [(&str, usize, usize, i64); 3] = [
    ("1_task", 1, 1, 1),
    ("64_tasks_own", TASKS, TASKS, 1),
    ("64_tasks_shared", TASKS, 1, TASKS as i64),
];

fn sizes(args: &Args, tasks: usize) -> (usize, u64) {
    let ops = if tasks == 1 { 2_000 } else { 12_800 };
    if args.full {
        (15, ops)
    } else {
        (1, ops / 20)
    }
}

/// Sets `key` to `permits` free permits, dropping what was there.
fn reset_permits(server: &RedisServer, key: &str, permits: i64) {
    server.command(&["DEL", key, &format!("{{{key}}}:timeout")]);
    server.command(&["SET", key, &permits.to_string()]);
}

fn semaphore_throughput(
    rt: &Runtime,
    server: &RedisServer,
    (ours, bare): (&LockClient, &BareSync),
    args: &Args,
) {
    if !args.runs("semaphore_throughput") {
        return;
    }
    for (label, tasks, count, permits) in SHAPES {
        let names: Vec<_> = (0..count)
            .map(|i| format!("bench:sem:{label}:{i}"))
            .collect();
        let bare_names: Vec<_> = (0..count)
            .map(|i| format!("bench:bare:sem:{label}:{i}"))
            .collect();
        for name in names.iter().chain(&bare_names) {
            reset_permits(server, name, permits);
        }
        let sems: Vec<Semaphore> = names.iter().map(|n| ours.semaphore(n).unwrap()).collect();
        let bare_sems: Vec<_> = bare_names.iter().map(|n| BareSemaphore::new(n)).collect();
        compare(
            (rt, server),
            &format!("semaphore_throughput/{label}"),
            sizes(args, tasks),
            |ops| {
                spread(ops, tasks, |i, n| {
                    let sem = sems[i % count].clone();
                    async move {
                        for _ in 0..n {
                            sem.acquire_many(1).await.unwrap();
                            sem.release(1).await.unwrap();
                        }
                    }
                })
            },
            |ops| {
                spread(ops, tasks, |i, n| {
                    bare.clone().semaphore_loop(bare_sems[i % count].clone(), n)
                })
            },
        );
        print_server_keys(server, &format!("semaphore_throughput/{label}"));
    }
}

/// Prints the keys and memory on the server: the crate's semaphore acquire leaves a record
/// per attempt, kept 120 s.
fn print_server_keys(server: &RedisServer, label: &str) {
    let keys = server.command(&["DBSIZE"]);
    let info = server.command(&["INFO", "memory"]);
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory_human:"));
    println!(
        "{label}: after it, {} keys on the server, {} used",
        keys.trim(),
        used.unwrap_or("?").trim()
    );
}

fn expirable_throughput(
    rt: &Runtime,
    server: &RedisServer,
    (ours, bare): (&LockClient, &BareSync),
    args: &Args,
) {
    if !args.runs("expirable_throughput") {
        return;
    }
    for (label, tasks, count, permits) in SHAPES {
        let names: Vec<_> = (0..count)
            .map(|i| format!("bench:pes:{label}:{i}"))
            .collect();
        let bare_names: Vec<_> = (0..count)
            .map(|i| format!("bench:bare:pes:{label}:{i}"))
            .collect();
        for name in names.iter().chain(&bare_names) {
            reset_permits(server, name, permits);
        }
        let sems: Vec<_> = (names.iter())
            .map(|n| ours.permit_expirable_semaphore(n).unwrap())
            .collect();
        let bare_sems: Vec<_> = bare_names.iter().map(|n| BareSemaphore::new(n)).collect();
        compare(
            (rt, server),
            &format!("expirable_throughput/{label}"),
            sizes(args, tasks),
            |ops| {
                spread(ops, tasks, |i, n| {
                    let sem = sems[i % count].clone();
                    async move {
                        for _ in 0..n {
                            let id = sem.acquire(Some(LEASE)).await.unwrap();
                            sem.release(id).await.unwrap();
                        }
                    }
                })
            },
            |ops| {
                spread(ops, tasks, |i, n| {
                    bare.clone()
                        .expirable_loop(bare_sems[i % count].clone(), LEASE, n)
                })
            },
        );
    }
}

/// Prints a wake-up's percentiles, in µs and in round trips.
fn report_wakeups(name: &str, wakeups: &[Duration], trips: &[Duration]) {
    let (Some(ours), Some(trip)) = (
        summary(&format!("{name} (load {})", load_average()), wakeups),
        summary(&format!("{name}: round trips sampled between"), trips),
    ) else {
        return;
    };
    let ratio = ours.p50.as_secs_f64() / trip.p50.as_secs_f64();
    println!(
        "{name}: p50 {ratio:.2} round trips (target ≤ 3: {}), p99 {:.3} ms",
        verdict(ratio <= 3.0),
        millis(ours.p99)
    );
}

/// One semaphore wake-up: A holds the only permit, B waits in `acquire`, A releases.
async fn semaphore_wakeup_once(a: &Semaphore, b: &Semaphore, bare: &Bare) -> Duration {
    a.acquire_many(1).await.unwrap();
    // B's client still listens to the channel a while after its last waiter left.
    let channel = format!("redisson_sc:{{{}}}", b.name());
    let (_, listening): (String, i64) = bare.redis.pubsub_numsub(channel).await.unwrap();
    let before = evalsha_calls(bare).await;
    let (acquired_tx, acquired_rx) = oneshot::channel();
    let waiter = b.clone();
    let waiting = tokio::spawn(async move {
        waiter.acquire_many(1).await.unwrap();
        acquired_tx.send(Instant::now()).unwrap();
        waiter.release(1).await.unwrap();
    });
    // As for the lock's handoff: one attempt on a channel listened to, two otherwise (the
    // second once subscribed); then time for the reply to come back.
    let attempts = if listening > 0 { 1 } else { 2 };
    await_evalsha_calls(bare, before + attempts).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let released = Instant::now();
    a.release(1).await.unwrap();
    let acquired = acquired_rx.await.unwrap();
    waiting.await.unwrap();
    acquired - released
}

/// One latch wake-up: the count is 1, B waits in `wait()`, A counts down.
async fn latch_wakeup_once(a: &CountDownLatch, b: &CountDownLatch, bare: &Bare) -> Duration {
    assert!(a.try_set_count(1).await.unwrap(), "the latch was set");
    let channel = format!("redisson_countdownlatch__channel__{{{}}}", b.name());
    let (_, listening): (String, i64) = bare.redis.pubsub_numsub(channel).await.unwrap();
    let before = calls(bare, "get").await;
    let (opened_tx, opened_rx) = oneshot::channel();
    let waiter = b.clone();
    let waiting = tokio::spawn(async move {
        waiter.wait().await.unwrap();
        opened_tx.send(Instant::now()).unwrap();
    });
    let looks = if listening > 0 { 1 } else { 2 };
    await_calls(bare, "get", before + looks).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let released = Instant::now();
    a.count_down().await.unwrap();
    let opened = opened_rx.await.unwrap();
    waiting.await.unwrap();
    opened - released
}

fn wakeups(rt: &Runtime, (a, b): (&LockClient, &LockClient), bare: &Bare, args: &Args) {
    let rounds = if args.full { 2_000 } else { 20 };
    let busy = rt.block_on(bare.busy_lock());
    if args.runs("semaphore_wakeup") {
        let name = "bench:sem:wakeup";
        let (sa, sb) = (a.semaphore(name).unwrap(), b.semaphore(name).unwrap());
        let (mut wakeups, mut trips) = (Vec::new(), Vec::new());
        rt.block_on(async {
            assert!(sa.try_set_permits(1).await.unwrap());
            for _ in 0..rounds {
                trips.push(bare.round_trip(&busy).await);
                wakeups.push(semaphore_wakeup_once(&sa, &sb, bare).await);
            }
        });
        report_wakeups("semaphore_wakeup", &wakeups, &trips);
    }
    if args.runs("latch_wakeup") {
        let name = "bench:latch:wakeup";
        let (la, lb) = (
            a.count_down_latch(name).unwrap(),
            b.count_down_latch(name).unwrap(),
        );
        let (mut wakeups, mut trips) = (Vec::new(), Vec::new());
        rt.block_on(async {
            for _ in 0..rounds {
                trips.push(bare.round_trip(&busy).await);
                wakeups.push(latch_wakeup_once(&la, &lb, bare).await);
            }
        });
        report_wakeups("latch_wakeup", &wakeups, &trips);
    }
}

/// 1,000 waiters on one latch, spread over `clients`; `rounds` openings. Prints the time
/// from just before the count-down to the last waiter returning (and to the median one),
/// and the messages published per opening.
fn latch_1000(
    rt: &Runtime,
    server: &RedisServer,
    clients: &[LockClient],
    bare: &Bare,
    args: &Args,
) {
    const WAITERS: usize = 1_000;
    let rounds = if args.full { 30 } else { 2 };
    let name = format!("bench:latch:1000:{}", clients.len());
    let latches: Vec<_> = (clients.iter())
        .map(|c| c.count_down_latch(&name).unwrap())
        .collect();
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    let (mut last, mut middle, mut published) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let before = rt.block_on(async {
            assert!(latches[0].try_set_count(1).await.unwrap());
            calls(bare, "get").await
        });
        let waiting: Vec<_> = (0..WAITERS)
            .map(|i| {
                let latch = latches[i % latches.len()].clone();
                rt.spawn(async move {
                    latch.wait().await.unwrap();
                    Instant::now()
                })
            })
            .collect();
        rt.block_on(async {
            await_subscribers(bare, &channel, clients.len() as i64).await;
            await_calls(bare, "get", before + WAITERS as u64).await;
        });
        await_quiet(server, "get"); // every waiter looked after subscribing: all wait
        let publishes = CommandStats::read(server).calls("publish");
        let released = Instant::now();
        let mut opened = rt.block_on(async {
            latches[0].count_down().await.unwrap();
            let mut opened = Vec::with_capacity(WAITERS);
            for waiter in waiting {
                opened.push(waiter.await.unwrap() - released);
            }
            opened
        });
        published.push(CommandStats::read(server).calls("publish") - publishes);
        opened.sort();
        last.push(opened[WAITERS - 1]);
        middle.push(opened[WAITERS / 2]);
    }
    let label = format!("latch_1000/{}_clients", clients.len());
    summary(&format!("{label}: median waiter"), &middle);
    if let Some(stats) = summary(
        &format!("{label}: last waiter (load {})", load_average()),
        &last,
    ) {
        published.sort();
        println!(
            "{label}: last waiter p50 {:.2} ms, max {:.2} ms (target ≤ 50 ms: {}); messages \
             published per opening {}–{}",
            millis(stats.p50),
            millis(stats.max),
            verdict(stats.max <= Duration::from_millis(50)),
            published[0],
            published[published.len() - 1],
        );
    }
}

fn main() {
    let args = Args::parse();
    let server = RedisServer::start();
    let rt = runtime();
    let url = server.url();
    let (a, b, bare, sync) = rt.block_on(async {
        let a = LockClient::connect(&url).await.unwrap();
        let b = LockClient::connect(&url).await.unwrap();
        (
            a,
            b,
            Bare::connect(&url).await,
            BareSync::connect(&url).await,
        )
    });
    println!("private redis-server at {url} ({})", redis_version(&server));
    print_load("at the start");

    semaphore_throughput(&rt, &server, (&a, &sync), &args);
    expirable_throughput(&rt, &server, (&a, &sync), &args);
    wakeups(&rt, (&a, &b), &bare, &args);
    if args.runs("latch_1000") {
        latch_1000(&rt, &server, std::slice::from_ref(&a), &bare, &args);
        let spread = rt.block_on(clients(&url, 4));
        latch_1000(&rt, &server, &spread, &bare, &args);
        rt.block_on(async {
            for client in spread {
                client.shutdown().await;
            }
        });
    }
    print_load("at the end");
    rt.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
        let _ = bare.redis.quit().await;
        let _ = sync.redis.quit().await;
    });
}
