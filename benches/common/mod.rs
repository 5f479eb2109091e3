//! Set-up shared by the bench binaries (`lock.rs`, `kinds/`, `synchronizers.rs`, and the
//! `peers` crate): the private redis-server, the bare fred baselines (the Redisson hash
//! protocol as two EVALSHA scripts in `bare.rs`, Redisson's synchronizer scripts in
//! `bare_sync.rs`), the plain-lock workloads (`workloads.rs`), the counting allocator
//! (`alloc.rs`), readers of `INFO` and `/proc` (`measure.rs`), percentiles and verdicts
//! (`report.rs`) and the command line (`args.rs`).

// Each bench binary uses a different subset of this module.
#![allow(dead_code)]

mod alloc;
mod args;
mod bare;
pub mod bare_sync;
#[path = "../../tests/support/lua.rs"]
pub mod lua;
mod measure;
mod report;
#[path = "../../tests/support/server.rs"]
pub mod server;
#[path = "../../tests/support/topology.rs"]
pub mod topology;
mod workloads;

use tokio::runtime::Runtime;

// Each binary (the peers crate too) uses a subset of these.
#[allow(unused_imports)]
pub use {alloc::*, args::*, bare::*, measure::*, report::*, server::RedisServer, workloads::*};

/// The lease of the bare baseline: the crate's default watchdog timeout.
pub const LEASE_MS: i64 = 30_000;
/// The task count of the parallel workloads.
pub const TASKS: usize = 64;

/// The Tokio runtime of every bench: multi-thread, 2 workers (the machines have 2 cores).
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `redis_version:...` of `server`, for the header line.
pub fn redis_version(server: &RedisServer) -> String {
    let info = server.command(&["INFO", "server"]);
    let version = info.lines().find(|l| l.starts_with("redis_version:"));
    version.unwrap_or("?").trim().to_owned()
}
