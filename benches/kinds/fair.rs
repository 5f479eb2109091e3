//! `fair_handoff`: the fair lock's handoffs to queued waiters, and 16 tasks contending in a loop.

use std::time::{Duration, Instant};

use fred::interfaces::ListInterface;
use redisson_lock::{FairLock, LockClient};
use tokio::runtime::Runtime;

use crate::common::*;

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

pub fn fair_handoff(rt: &Runtime, (a, b): (&LockClient, &LockClient), bare: &Bare, args: &Args) {
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
