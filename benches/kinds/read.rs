//! `read_throughput`: 64 readers of one read-write lock beside the plain lock's 64 tasks.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput};
use redisson_lock::{LockClient, LockOwner, ReadWriteLock};
use tokio::runtime::Runtime;

use crate::common::*;

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

pub fn read_throughput(
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
