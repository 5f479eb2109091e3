//! Every lock kind on a 3-master + 3-replica Redis Cluster: exclusion, wake-ups across
//! clients, the pub/sub modes, and holds and waiters that live through a slot migration, a
//! master failover and a node taken out of the cluster.

#[path = "../support/mod.rs"]
mod support;

mod locking;
mod pubsub_modes;
mod topology_changes;

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use redisson_lock::{LockClient, LockClientBuilder, PubSubMode};
use support::server::{has_redis_7, server_version};
use support::topology::{settle, shared_cluster, Cluster, ClusterNode};
use support::*;

/// Whether the servers have sharded pub/sub (Redis 7.0 and later), as the clients find.
fn has_sharded() -> bool {
    server_version() >= (7, 0)
}

/// A client of `cluster` whose holds outlive the test unless released: a waiter can only
/// learn of a release by its message.
async fn cluster_client(cluster: &Cluster, mode: PubSubMode) -> LockClient {
    cluster_client_with(cluster, |b| b.pubsub_mode(mode)).await
}

async fn cluster_client_with(
    cluster: &Cluster,
    configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    deployment_client(&cluster.url(), configure).await
}

/// How many connections the master serving `channel` counts as sharded subscribers.
fn sharded_subscribers(cluster: &Cluster, channel: &str) -> u64 {
    let reply = cluster
        .master_of(channel)
        .command(&["PUBSUB", "SHARDNUMSUB", channel]);
    reply.lines().last().unwrap().parse().unwrap()
}

/// Waits until the master serving `channel` has a sharded subscriber of it; before Redis 7.0,
/// where `Auto` listens classically, until a node has a subscriber of it.
async fn sharded_subscribed(cluster: &Cluster, channel: &str) {
    eventually(
        Duration::from_secs(10),
        &format!("a sharded subscriber of {channel}"),
        || match has_sharded() {
            true => sharded_subscribers(cluster, channel) >= 1,
            false => cluster.servers.iter().any(|s| subscribers(s, channel) >= 1),
        },
    )
    .await;
}
