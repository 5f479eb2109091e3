//! `hot_lock`: one lock that the tasks of one client queue on, where a release hands the lock
//! to the next task in the same script (the builder's `hand_off`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redisson_lock::kind::HoldKind;
use redisson_lock::{HandOff, Lock, LockClient, LockGuard, LockOwner};
use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::common::*;

/// Each task's waits for the lock in one contention run.
type Waits = Vec<Vec<Duration>>;

/// `tasks` tasks, made by `task(i)`, each taking the lock once per call of its loop body
/// until `run` has passed: each task's waits.
async fn contending<F, Fut>(tasks: usize, run: Duration, task: F) -> Waits
where
    F: Fn(usize) -> Fut,
    Fut: FnMut() -> BoxedWait + Send + 'static,
{
    let until = Instant::now() + run;
    let running: Vec<_> = (0..tasks)
        .map(|i| {
            let mut take_once = task(i);
            tokio::spawn(async move {
                let mut waits = Vec::new();
                while Instant::now() < until {
                    waits.push(take_once().await);
                }
                waits
            })
        })
        .collect();
    let mut waits = Vec::new();
    for task in running {
        waits.push(task.await.unwrap());
    }
    waits
}

/// One acquisition and release; its wait for the lock.
type BoxedWait = std::pin::Pin<Box<dyn std::future::Future<Output = Duration> + Send>>;

/// `tasks` tasks of one client, each its own owner, lock and unlock `lock` in a loop for `run`.
async fn ours_contending(client: &LockClient, lock: &Lock, tasks: usize, run: Duration) -> Waits {
    cycling(
        client,
        tasks,
        run,
        cycle(lock.clone(), |lock, me| lock.lock(me)),
    )
    .await
}

/// One acquisition and release of a lock by an owner: its wait for the lock.
type Cycle = Arc<dyn Fn(LockOwner) -> BoxedWait + Send + Sync>;

/// The [`Cycle`] that takes `lock` by `take` and releases the guard it gives.
fn cycle<L, H, F, Fut>(lock: L, take: F) -> Cycle
where
    L: Clone + Send + Sync + 'static,
    H: HoldKind,
    F: Fn(&L, &LockOwner) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = redisson_lock::Result<LockGuard<H>>> + Send + 'static,
{
    Arc::new(move |me| {
        let asked = Instant::now();
        let taken = take(&lock, &me);
        Box::pin(async move {
            let guard = taken.await.unwrap();
            let waited = asked.elapsed();
            guard.unlock().await.unwrap();
            waited
        })
    })
}

/// `tasks` tasks of `client`, each its own owner, each taking and releasing a lock by `cycle`
/// in a loop for `run`.
async fn cycling(client: &LockClient, tasks: usize, run: Duration, cycle: Cycle) -> Waits {
    contending(tasks, run, |_| {
        let (cycle, me) = (cycle.clone(), client.new_owner());
        move || cycle(me.clone())
    })
    .await
}

/// `hot_two_clients`: two busy clients with hand-offs on, 8 tasks each, on one lock: each
/// client's share and the longest wait.
pub fn hot_two_clients(rt: &Runtime, server: &RedisServer, args: &Args) {
    if !args.runs("hot_two_clients") {
        return;
    }
    let (rounds, run) = if args.full {
        (3, Duration::from_secs(3))
    } else {
        (1, Duration::from_millis(300))
    };
    rt.block_on(two_clients(server, rounds, run));
    print_load("after hot_two_clients");
}

async fn two_clients(server: &RedisServer, rounds: usize, run: Duration) {
    for hand_off in [HandOff::ON, HandOff::OFF] {
        let connect = || {
            LockClient::builder()
                .url(&server.url())
                .hand_off(hand_off)
                .build()
        };
        let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (x, y) = (
                a.lock("bench:hot:two").unwrap(),
                b.lock("bench:hot:two").unwrap(),
            );
            let (x, y) = tokio::join!(
                ours_contending(&a, &x, 8, run),
                ours_contending(&b, &y, 8, run)
            );
            first.push(x);
            second.push(y);
        }
        let both: Vec<Waits> = (first.iter().zip(&second))
            .map(|(x, y)| x.iter().chain(y).cloned().collect())
            .collect();
        let (first, second, both) = (
            contention(&first, run),
            contention(&second, run),
            contention(&both, run),
        );
        println!(
            "hot_two_clients: 2 × 8 tasks, hand-offs {}: {:.0} and {:.0} acquisitions/s; per \
             task {}..{}; mean wait {:.2} ms; max wait {:.2} ms ({:.1} × the mean)",
            if hand_off == HandOff::ON { "on" } else { "off" },
            first.rate,
            second.rate,
            both.per_task.0,
            both.per_task.1,
            millis(both.mean),
            millis(both.max),
            both.max.as_secs_f64() / both.mean.as_secs_f64(),
        );
        a.shutdown().await;
        b.shutdown().await;
    }
}

/// The other kinds that hand over, 16 tasks of one client on one lock: hand-offs on (`on`)
/// against off (`off`), in alternating runs of `run`.
async fn other_kinds(on: &LockClient, off: &LockClient, rounds: usize, run: Duration) {
    for kind in [
        "fenced_lock",
        "fair_lock",
        "spin_lock",
        "non_reentrant_lock",
        "write_lock",
    ] {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (client, waits) in [(on, &mut with), (off, &mut without)] {
                let name = format!("bench:hot:{kind}");
                let cycle = match kind {
                    "fenced_lock" => cycle(client.fenced_lock(&name).unwrap(), |l, me| l.lock(me)),
                    "fair_lock" => cycle(client.fair_lock(&name).unwrap(), |l, me| l.lock(me)),
                    "spin_lock" => cycle(client.spin_lock(&name).unwrap(), |l, me| l.lock(me)),
                    "non_reentrant_lock" => {
                        cycle(client.non_reentrant_lock(&name).unwrap(), |l, me| {
                            l.lock(me)
                        })
                    }
                    _ => cycle(client.read_write_lock(&name).unwrap(), |l, me| l.write(me)),
                };
                let run = cycling(client, 16, run, cycle).await;
                waits.push(run);
            }
        }
        let (with, without) = (contention(&with, run), contention(&without, run));
        println!(
            "hot_lock/{kind}: 16 tasks of one client: {:.0} acquisitions/s with hand-offs, {:.0} \
             without ({:.2} ×); max wait {:.1} × the mean with, {:.1} × without; per task \
             {}..{} with",
            with.rate,
            without.rate,
            with.rate / without.rate,
            with.max.as_secs_f64() / with.mean.as_secs_f64(),
            without.max.as_secs_f64() / without.mean.as_secs_f64(),
            with.per_task.0,
            with.per_task.1,
        );
    }
}

/// The same with raw: Redisson's scripts on one bare fred client, polling every millisecond.
async fn raw_contending(bare: &Bare, name: &str, tasks: usize, run: Duration) -> Waits {
    contending(tasks, run, |i| {
        let (bare, lock) = (bare.clone(), bare.lock(name, &format!("hot-{i}")));
        move || -> BoxedWait {
            let (bare, lock) = (bare.clone(), lock.clone());
            Box::pin(async move {
                let asked = Instant::now();
                while bare.acquire(&lock).await.is_some() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let waited = asked.elapsed();
                bare.unlock(&lock).await;
                waited
            })
        }
    })
    .await
}

/// What one side's contention runs gave: acquisitions per second, per task min..max, mean
/// and longest wait.
struct Contention {
    rate: f64,
    per_task: (usize, usize),
    mean: Duration,
    max: Duration,
}

fn contention(runs: &[Waits], run: Duration) -> Contention {
    let tasks = runs[0].len();
    let counts: Vec<usize> = (0..tasks)
        .map(|t| runs.iter().map(|waits| waits[t].len()).sum())
        .collect();
    let all: Vec<Duration> = runs.iter().flatten().flatten().copied().collect();
    let total: Duration = all.iter().sum();
    Contention {
        rate: all.len() as f64 / (run.as_secs_f64() * runs.len() as f64),
        per_task: (*counts.iter().min().unwrap(), *counts.iter().max().unwrap()),
        mean: total / all.len().max(1) as u32,
        max: all.iter().copied().max().unwrap_or_default(),
    }
}

fn print_contention(name: &str, side: &Contention) {
    println!(
        "hot_lock/{name}: {:.0} acquisitions/s; per task {}..{}; mean wait {:.2} ms; max wait \
         {:.2} ms ({:.1} × the mean)",
        side.rate,
        side.per_task.0,
        side.per_task.1,
        millis(side.mean),
        millis(side.max),
        side.max.as_secs_f64() / side.mean.as_secs_f64(),
    );
}

pub fn hot_lock(
    rt: &Runtime,
    server: &RedisServer,
    (off, b): (&LockClient, &LockClient),
    bare: &Bare,
    args: &Args,
) {
    if !args.runs("hot_lock") {
        return;
    }
    let handing = LockClient::builder()
        .url(&server.url())
        .hand_off(HandOff::ON)
        .build();
    let on = rt.block_on(handing).unwrap();
    let a = &on;
    let (handoffs, rounds, run, outsiders) = if args.full {
        (300, 3, Duration::from_secs(3), 20)
    } else {
        (5, 1, Duration::from_millis(300), 2)
    };

    // A task of the same client already waits in lock(); from just before the holder's
    // unlock() to its lock() returning, with round trips sampled between.
    let busy = rt.block_on(bare.busy_lock());
    let (lock, heir) = (
        a.lock("bench:hot:handoff").unwrap(),
        a.lock("bench:hot:handoff").unwrap(),
    );
    let owners = (a.new_owner(), a.new_owner());
    let (other, other_owners) = (
        b.lock("bench:hot:handoff").unwrap(),
        (a.new_owner(), b.new_owner()),
    );
    let (gaps, across, trips, idle_trips) = rt.block_on(async {
        let (mut gaps, mut across, mut trips, mut idle_trips) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..handoffs {
            trips.push(bare.round_trip(&busy).await);
            // As the handoff's release comes: after the same 2 ms pause.
            tokio::time::sleep(Duration::from_millis(2)).await;
            idle_trips.push(bare.round_trip(&busy).await);
            gaps.push(handoff_once(&lock, &heir, &owners, bare).await);
            across.push(handoff_once(&lock, &other, &other_owners, bare).await);
        }
        (gaps, across, trips, idle_trips)
    });
    let trip = summary("hot_lock/bare_evalsha_round_trip", &trips).unwrap();
    let idle = summary(
        "hot_lock/bare_evalsha_round_trip after a 2 ms pause",
        &idle_trips,
    )
    .unwrap();
    let gap = summary("hot_lock/same_client_handoff", &gaps).unwrap();
    let across = summary("hot_lock/handoff_to_another_client", &across).unwrap();
    println!(
        "hot_lock/same_client_handoff p50 = {:.2} round trips, {:.2} after the same pause \
         (target ≤ 1.5: {}); to another client's waiter {:.2} and {:.2}",
        gap.p50.as_secs_f64() / trip.p50.as_secs_f64(),
        gap.p50.as_secs_f64() / idle.p50.as_secs_f64(),
        verdict(gap.p50.as_secs_f64() <= 1.5 * idle.p50.as_secs_f64()),
        across.p50.as_secs_f64() / trip.p50.as_secs_f64(),
        across.p50.as_secs_f64() / idle.p50.as_secs_f64(),
    );

    // 16 tasks of one client on one lock, ours and raw in alternating runs.
    let hot = a.lock("bench:hot").unwrap();
    let hot_off = off.lock("bench:hot:off").unwrap();
    let (ours, ours_off, raw, published) = rt.block_on(async {
        let (mut ours, mut ours_off, mut raw, mut published) =
            (Vec::new(), Vec::new(), Vec::new(), 0);
        for _ in 0..rounds {
            let before = CommandStats::read(server).calls("publish");
            ours.push(ours_contending(a, &hot, 16, run).await);
            published += CommandStats::read(server).calls("publish") - before;
            ours_off.push(ours_contending(off, &hot_off, 16, run).await);
            raw.push(raw_contending(bare, "bench:bare:hot", 16, run).await);
        }
        (ours, ours_off, raw, published)
    });
    let (ours, ours_off, raw) = (
        contention(&ours, run),
        contention(&ours_off, run),
        contention(&raw, run),
    );
    print_contention("redisson_lock (hand-offs on)", &ours);
    print_contention("redisson_lock (hand-offs off)", &ours_off);
    print_contention("raw (1 ms poll)", &raw);
    println!(
        "hot_lock: hand-offs off: {:.2} × raw",
        ours_off.rate / raw.rate
    );
    let acquisitions = ours.rate * run.as_secs_f64() * rounds as f64;
    println!(
        "hot_lock: 16 tasks of one client, {rounds} × {:.1} s each side: {:.2} × raw (target ≥ \
         1.5: {}); max wait {:.1} × the mean (target ≤ 10: {}); starved tasks: {} ({}); about \
         {:.0}% of the acquisitions were hand-offs ({published} unlock messages)",
        run.as_secs_f64(),
        ours.rate / raw.rate,
        verdict(ours.rate >= 1.5 * raw.rate),
        ours.max.as_secs_f64() / ours.mean.as_secs_f64(),
        verdict(ours.max <= ours.mean * 10),
        usize::from(ours.per_task.0 == 0),
        verdict(ours.per_task.0 > 0),
        100.0 * (1.0 - (published as f64 / acquisitions).min(1.0)),
    );

    rt.block_on(other_kinds(a, off, rounds, run));

    // A waiter of another client, while the 16 tasks hand the lock around.
    let outsider = b.lock("bench:hot").unwrap();
    let waits = rt.block_on(async {
        let contending = {
            let (a, hot) = (a.clone(), hot.clone());
            let length = run * rounds as u32 + Duration::from_secs(outsiders as u64);
            tokio::spawn(async move { ours_contending(&a, &hot, 16, length).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut waits = Vec::new();
        for _ in 0..outsiders {
            let asked = Instant::now();
            let guard = outsider.lock(&b.new_owner()).await.unwrap();
            waits.push(asked.elapsed());
            guard.unlock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(contending.await);
        waits
    });
    let served = summary("hot_lock/another_client's_waiter", &waits).unwrap();
    println!(
        "hot_lock: a waiter of another client, {outsiders} times while 16 tasks hand the lock \
         around: served after p50 {:.1} ms, max {:.1} ms (the lock is freed at least every 16 \
         hand-offs or 50 ms)",
        millis(served.p50),
        millis(served.max),
    );
    rt.block_on(on.shutdown());
    print_load("after hot_lock");
}
