//! `fair_herd`: a herd of one client's fair waiters with short waits on one held lock, all of
//! which run out, then the holder's release; on a quiet machine, then with CPU burners
//! beside it (a build running next to the service).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisson_lock::LockClient;
use tokio::runtime::Runtime;

use crate::common::*;

/// What one herd left and cost.
struct Herd {
    /// How long after its deadline each wait ended.
    late: Vec<Duration>,
    /// Calls that failed (every wait should end with `Ok(None)`).
    failed: usize,
    /// Entries in line (queue, deadlines) 1 s after the last waiter returned.
    left: (usize, usize),
    /// The holder's `unlock()`, and a fresh waiter's `lock()` returning, from the release.
    unlock: Duration,
    fresh: Duration,
}

/// `waiters` tasks of one client wait on `name` for 0.3–2 s each; all run out; then the
/// holder releases and a fresh waiter takes the lock.
async fn herd(server: &RedisServer, name: &str, waiters: usize) -> Herd {
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.fair_lock(name).unwrap();
    let holder = lock.lock(&client.new_owner()).await.unwrap();
    let tasks: Vec<_> = (0..waiters)
        .map(|i| {
            let (lock, owner) = (lock.clone(), client.new_owner());
            let wait = Duration::from_millis(300 + (i as u64 * 1_700) / waiters as u64);
            tokio::spawn(async move {
                let asked = Instant::now();
                let got = lock.try_lock_for(&owner, wait).await;
                (
                    asked.elapsed().saturating_sub(wait),
                    matches!(got, Ok(None)),
                )
            })
        })
        .collect();
    let mut late = Vec::new();
    let mut failed = 0;
    for task in tasks {
        let (lateness, timed_out) = task.await.unwrap();
        late.push(lateness);
        failed += usize::from(!timed_out);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let queue: usize = server
        .command(&["LLEN", &format!("redisson_lock_queue:{{{name}}}")])
        .parse()
        .unwrap();
    let deadlines = server.command(&["ZCARD", &format!("redisson_lock_timeout:{{{name}}}")]);
    let released = Instant::now();
    holder.unlock().await.unwrap();
    let unlock = released.elapsed();
    let fresh = lock.lock(&client.new_owner()).await.unwrap();
    let fresh_after = released.elapsed();
    fresh.unlock().await.unwrap();
    client.shutdown().await;
    Herd {
        late,
        failed,
        left: (queue, deadlines.parse().unwrap()),
        unlock,
        fresh: fresh_after,
    }
}

/// Threads that spin until dropped, as a build beside the service would.
struct Burners(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Burners {
    fn start(threads: usize) -> Burners {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        Burners(stop, handles)
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for handle in self.1.drain(..) {
            let _ = handle.join();
        }
    }
}

pub fn fair_herd(rt: &Runtime, server: &RedisServer, args: &Args) {
    if !args.runs("fair_herd") {
        return;
    }
    let waiters = if args.full { 3_000 } else { 300 };
    for (round, burners) in [(0, 0), (1, 0), (2, 3), (3, 3)] {
        let _load = Burners::start(burners);
        print_load(&format!("before fair_herd round {round}"));
        let mut herd = rt.block_on(herd(server, &format!("bench:herd:{round}"), waiters));
        herd.late.sort();
        let beside = match burners {
            0 => "quiet".to_owned(),
            n => format!("{n} CPU burners beside it"),
        };
        let late_max = *herd.late.last().unwrap();
        println!(
            "fair_herd/{waiters}_waiters ({beside}): waits ended late by p50 {:.0} ms, p99 {:.0} \
             ms, max {:.0} ms (target ≤ 1 s on a quiet machine: {}); failed calls {}; 1 s after \
             the last returned {} in line, {} deadlines (target 0: {}); the unlock took {:.1} ms, \
             a fresh waiter got the lock {:.1} ms after the release (target ≤ 1 s each: {})",
            millis(herd.late[herd.late.len() / 2]),
            millis(herd.late[herd.late.len() * 99 / 100]),
            millis(late_max),
            if burners == 0 {
                verdict(late_max <= Duration::from_secs(1))
            } else {
                "n/a"
            },
            herd.failed,
            herd.left.0,
            herd.left.1,
            verdict(herd.left == (0, 0)),
            millis(herd.unlock),
            millis(herd.fresh),
            verdict(herd.unlock.max(herd.fresh) <= Duration::from_secs(1)),
        );
    }
}
