//! Unlock latches of dropped lock handles: deleted by the client's latch cleaner as fast as
//! the handles are dropped, so that their number stays bounded by the live handles, not by
//! their TTL.

mod support;

use std::time::Duration;

use redisson_lock::LockClient;
use support::topology::Cluster;
use support::*;

/// A long command timeout: a latch's TTL ((timeout + 0.5 s) × 3 + 1 s, 47.5 s) outlives each
/// test, so only the cleaner can remove one.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

/// The number of unlock latch keys on `server`.
fn latch_keys(server: &RedisServer) -> usize {
    let keys = server.command(&["KEYS", "redisson_unlock_latch:*"]);
    keys.lines().filter(|line| !line.is_empty()).count()
}

/// `tasks` tasks each lock and unlock `rounds` locks of their own, each through a handle
/// made for it and dropped after its release (which retires its latch).
async fn churn(c: &LockClient, prefix: &str, tasks: usize, rounds: usize) {
    let tasks = (0..tasks)
        .map(|task| {
            let (c, prefix) = (c.clone(), prefix.to_owned());
            tokio::spawn(async move {
                let owner = c.new_owner();
                for round in 0..rounds {
                    let lock = c.lock(&format!("{prefix}-{task}-{round}")).unwrap();
                    lock.lock(&owner).await.unwrap().unlock().await.unwrap();
                }
            })
        })
        .collect();
    all_finish(Duration::from_secs(300), "the releases", tasks).await;
}

/// Every handle was dropped: the latches left are the ones the cleaner has not reached yet,
/// at most a tenth of those made (it deletes what a round of drops retired in a command or a
/// few); and it reaches all of them within a few seconds, long before they would expire.
async fn deleted(releases: usize, what: &str, count: impl Fn() -> usize) {
    let left = count();
    assert!(
        left <= releases / 10,
        "{what}: {left} of {releases} latches left"
    );
    eventually(Duration::from_secs(10), what, || count() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latches_of_dropped_handles_are_deleted_while_releases_go_on() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.command_timeout(COMMAND_TIMEOUT)).await;
    let (tasks, rounds) = (64, 300);
    churn(&c, "latched", tasks, rounds).await;
    deleted(tasks * rounds, "every latch deleted", || {
        latch_keys(&server)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_latches_of_dropped_handles_are_deleted_slot_by_slot() {
    let cluster = Cluster::start();
    let c = deployment_client(&cluster.url(), |b| b.command_timeout(COMMAND_TIMEOUT)).await;
    let (tasks, rounds) = (16, 200);
    churn(&c, "latched", tasks, rounds).await;
    let masters: Vec<u16> = (cluster.nodes().into_iter())
        .filter(|node| node.master)
        .map(|node| node.port)
        .collect();
    let count = || {
        let on = |port: &u16| latch_keys(cluster.server(*port));
        masters.iter().map(on).sum()
    };
    deleted(tasks * rounds, "every latch deleted on every master", count).await;
}
