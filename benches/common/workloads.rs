//! The plain-lock workloads (ours and bare, from 1 or many tasks), interleaved rounds, the handoff, and holds taken and released in bulk.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::PubsubInterface;
use redisson_lock::{Lock, LockClient, LockGuard, LockOwner};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

use super::*;

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

/// [`bare_parallel`] with Redisson 4.7's own scripts (see [`Bare::lock_unlock_redisson`]).
pub async fn redisson_parallel(bare: &Bare, locks: &[BareLock], iters: u64) -> Duration {
    spread(iters, locks.len(), |i, n| {
        let (bare, lock) = (bare.clone(), locks[i].clone());
        async move {
            let start = Instant::now();
            for _ in 0..n {
                bare.lock_unlock_redisson(&lock).await;
            }
            start.elapsed()
        }
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

/// Connects `n` clients of the same server.
pub async fn clients(url: &str, n: usize) -> Vec<LockClient> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(LockClient::connect(url).await.unwrap());
    }
    clients
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
