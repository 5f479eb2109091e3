//! `multi_lock`: `MultiLock` and `RedLock` over 3 and 5 servers beside the bare scripts.

use std::cell::Cell;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use fred::interfaces::ClientLike;
use redisson_lock::{LockClient, LockOwner, MultiLock, RedLock};
use tokio::runtime::Runtime;

use crate::common::*;

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

pub fn multi_lock(c: &mut Criterion, rt: &Runtime, args: &Args) {
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
