//! The fault suite: holders killed and paused, Redis crashed, restarted, put to sleep and
//! cut off, connections killed, networks slowed, black-holed and half-opened, clocks skewed,
//! and bad input. Each case asserts what is promised (`docs/reliability.md` lists them);
//! the storms run the shared workload (`support/workload.rs`) under a stream of faults and
//! check every invariant during and after the run.
//!
//! Faults covered elsewhere: a holder killed while holding, Redis down at start-up and while
//! waiting, a restart without persistence under a holder and a waiter, `SCRIPT FLUSH` under
//! a hold (`failures.rs`); futures dropped at every point (`cancellation.rs`); lost holds
//! and out-of-range leases (`holds.rs`); a lagging subscriber (`pubsub.rs`).

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod bad_setup;
mod clock;
mod network;
mod processes;
mod restarts;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use redisson_lock::{
    Backoff, Error, HandOff, LockClient, LockClientBuilder, PubSubMode, WaitStrategy,
};
use support::workload::{
    acquire, lost_updates, read_resource, settle, write_resource, Kind, Tally, Totals, Workload,
    Write,
};
use support::*;

/// The wait of the workloads' timed acquisitions.
const WAIT: Duration = Duration::from_secs(2);

/// How much later than its wait a timed acquisition may end: the attempt on the wire at the
/// deadline may take three command timeouts (SCRIPT LOAD after NOSCRIPT), on a loaded
/// machine.
const SLACK: Duration = Duration::from_secs(8);

/// Tasks per client in a storm.
const TASKS: usize = 4;

/// A client for workloads: 900 ms watchdog lease, 1 s command timeout, and `WAIT` in fair
/// queues, so that a gone waiter holds up a queue for seconds, not minutes.
async fn workload_client(url: &str) -> LockClient {
    workload_client_waiting(url, WAIT).await
}

/// A client for workloads whose fair waiters wait `wait` in the queue.
async fn workload_client_waiting(url: &str, wait: Duration) -> LockClient {
    workload_builder(url, wait)
        .build()
        .await
        .expect("connect to the test server")
}

/// A client for workloads whose tasks hand exclusive locks to each other (`HandOff::ON`).
async fn handing_workload_client(url: &str) -> LockClient {
    (workload_builder(url, WAIT).hand_off(HandOff::ON))
        .build()
        .await
        .expect("connect to the test server")
}

fn workload_builder(url: &str, wait: Duration) -> LockClientBuilder {
    LockClient::builder()
        .url(url)
        .watchdog_timeout(Duration::from_millis(900))
        .command_timeout(Duration::from_secs(1))
        .fair_wait_timeout(wait)
}

fn workload(prefix: &str) -> Arc<Workload> {
    Arc::new(Workload::new(prefix, WAIT, SLACK))
}

/// Runs `workload` on every client (`TASKS` tasks each) for `run` while `faults` plays (it
/// must end by then), then checks every invariant: none broken during the run, none after
/// it. Returns what the tasks counted.
async fn storm(
    server: &RedisServer,
    workload: &Arc<Workload>,
    clients: &[LockClient],
    run: Duration,
    faults: impl Future<Output = ()>,
) -> Totals {
    let until = Instant::now() + run;
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        for task in 0..TASKS {
            let work =
                workload
                    .clone()
                    .task(client.clone(), i * TASKS + task, until, tally.clone());
            tasks.push(tokio::spawn(work));
        }
    }
    faults.await;
    all_finish(run + workload.stuck, "the workload's tasks", tasks).await;
    let totals = tally.drain();
    assert_eq!(totals.violations, Vec::<String>::new(), "during the run");
    assert_eq!(totals.token_violations(), Vec::<String>::new());
    assert!(totals.acquired > 0, "no progress: {totals:?}");
    let observer = workload_client(&server.url()).await;
    let after = settle(&observer, server, workload, Duration::from_secs(20)).await;
    assert_eq!(after, Vec::<String>::new(), "after the run");
    assert_eq!(lost_updates(server, workload), Vec::<String>::new());
    totals
}

/// Calls `fault` at spread intervals of up to `every` until `until`; returns how often.
async fn repeatedly(until: Instant, every: Duration, mut fault: impl FnMut(u64)) -> u64 {
    let mut n = 0;
    while Instant::now() < until {
        let pause = spread(n, every.as_micros() as u64) + Duration::from_millis(20);
        tokio::time::sleep(pause).await;
        fault(n);
        n += 1;
    }
    n
}

/// One attempt at the lock `name` of every kind of the workload, for `owner`.
async fn attempts(c: &LockClient, name: &str) -> Vec<(Kind, redisson_lock::Result<bool>)> {
    let mut results = Vec::new();
    for kind in Kind::ALL {
        let owner = c.new_owner();
        let result = match acquire(c, &owner, kind, name, Some(Duration::ZERO)).await {
            Ok(Some(held)) => held.unlock().await.map(|()| true),
            Ok(None) => Ok(false),
            Err(error) => Err(error),
        };
        results.push((kind, result));
    }
    results
}
