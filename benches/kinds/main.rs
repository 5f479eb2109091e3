//! `cargo bench --bench kinds` (in `benches/`): the figures of the targets beyond the plain
//! lock's latency and throughput (those are `lock.rs`), each beside a baseline measured in
//! the same run, on private redis-servers. Results and targets: `docs/benchmarks.md`.
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
//! - `fair_herd` (a measurement): 3,000 fair waiters of one `LockClient` with waits of
//!   0.3–2 s on one held lock, all of which run out, then the holder's release; twice on a
//!   quiet machine and twice with three CPU-burning threads beside it. How late the waits
//!   ended, what was left in line 1 s after the last returned, the holder's unlock and a
//!   fresh waiter's acquisition after the release.
//! - `hot_lock` (a measurement): a task of one `LockClient` waits in `lock()` while another
//!   task of the same client releases; the time to its `lock()` returning, in bare EVALSHA
//!   round trips sampled between. Then 16 tasks of one client lock and unlock one lock in a
//!   loop, beside raw (Redisson's scripts on a bare fred client, polling every millisecond)
//!   in alternating runs: acquisitions/s, per task, mean and longest wait. Then the same 16
//!   tasks on the other kinds that hand over (fenced, fair, spin, non-reentrant, write), hand-offs
//!   on against off. Then a waiter of a second client, while the 16 tasks go on: how long
//!   until it is served.
//! - `hot_two_clients` (a measurement): two clients with hand-offs on, 8 tasks each, lock and
//!   unlock one lock in a loop: each client's acquisitions/s, per task, mean and longest wait.
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

mod commands;
#[path = "../common/mod.rs"]
mod common;
mod fair;
mod herd;
mod hot;
mod multi;
mod read;
mod replica;
mod watchdog;

use common::*;
use criterion::Criterion;
use fred::interfaces::ClientLike;
use redisson_lock::LockClient;

use commands::commands_per_acquisition;
use fair::fair_handoff;
use herd::fair_herd;
use hot::{hot_lock, hot_two_clients};
use multi::multi_lock;
use read::read_throughput;
use replica::replica_ack;
use watchdog::watchdog_10k;

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
    fair_herd(&rt, &server, &args);
    hot_lock(&rt, &server, (&a, &b), &bare, &args);
    hot_two_clients(&rt, &server, &args);
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
