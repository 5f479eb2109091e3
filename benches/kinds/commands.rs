//! `commands_per_acquisition`: Redis commands per contended acquisition.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisson_lock::LockClient;
use tokio::runtime::Runtime;

use crate::common::*;

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

pub fn commands_per_acquisition(
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
