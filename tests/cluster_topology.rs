//! On a 3-master + 3-replica Redis Cluster: following the cluster's topology costs no new
//! connection while nothing changes, and a lock name whose keys would fall in different
//! slots is refused before anything is written.

mod support;

use redisson_lock::inspect::HoldMode;
use redisson_lock::{Error, LockClient, PubSubMode};
use support::topology::{shared_cluster, Cluster};
use support::*;

/// How many connections `server` has accepted since it started.
fn connections_received(server: &RedisServer) -> u64 {
    let info = server.command(&["INFO", "stats"]);
    let count = info
        .lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .expect("a connection count");
    count.trim().parse().unwrap()
}

/// A waiter in `Auto` mode, idle on a held lock, follows the topology (every second) without
/// opening a connection to any node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_waiter_opens_no_connections() {
    let cluster = Cluster::start();
    let url = cluster.url();
    let holder = deployment_client(&url, |b| b).await;
    let waiter = deployment_client(&url, |b| b.pubsub_mode(PubSubMode::Auto)).await;
    let name = "idle-waiter";
    let guard = held(&holder, name).await;
    let lock = waiter.lock(name).unwrap();
    let other = waiter.new_owner();
    let waiting = tokio::spawn(async move { lock.lock(&other).await });
    let channel = lock_channel(name);
    // Sharded where the servers have it (7.0 and later), classic before.
    let sharded = support::server::server_version() >= (7, 0);
    eventually(WAKE, "the waiter's subscription", || {
        if sharded {
            let master = cluster.master_of(&channel);
            let reply = master.command(&["PUBSUB", "SHARDNUMSUB", &channel]);
            reply.lines().last() == Some("1")
        } else {
            (cluster.servers.iter()).any(|node| subscribers(node, &channel) >= 1)
        }
    })
    .await;

    // Each reading opens one connection to the node it reads.
    let before: Vec<u64> = cluster.servers.iter().map(connections_received).collect();
    tokio::time::sleep(5 * SECOND).await;
    let after: Vec<u64> = cluster.servers.iter().map(connections_received).collect();
    let opened: Vec<u64> = (after.iter().zip(&before))
        .map(|(after, before)| after - before - 1)
        .collect();
    assert_eq!(opened, [0; 6], "connections opened in 5 s, by node");

    guard.unlock().await.unwrap();
    woken_and_released("the waiter", waiting).await;
}

/// Names whose braces are no hash tag: their keys would fall in different slots.
const SPLIT_NAMES: [&str; 5] = ["a{}b", "x{y", "{}", "a}b", "{}{z}"];

/// Every way of making a handle for `name` (and of reading its state): what each says.
async fn every_kind_of(client: &LockClient, name: &str) -> Vec<(&'static str, String)> {
    let said = |what: &'static str, result: redisson_lock::Result<()>| match result {
        Err(Error::InvalidArgument(message)) => (what, message.into_owned()),
        other => panic!("{what} {name:?}: expected InvalidArgument, got {other:?}"),
    };
    vec![
        said("lock", client.lock(name).map(drop)),
        said("fair_lock", client.fair_lock(name).map(drop)),
        said("fenced_lock", client.fenced_lock(name).map(drop)),
        said("spin_lock", client.spin_lock(name).map(drop)),
        said("read_write_lock", client.read_write_lock(name).map(drop)),
        said(
            "non_reentrant_lock",
            client.non_reentrant_lock(name).map(drop),
        ),
        said(
            "non_reentrant_fair_lock",
            client.non_reentrant_fair_lock(name).map(drop),
        ),
        said("inspect", client.inspect(name).await.map(drop)),
    ]
}

/// On a cluster, a name whose braces are no hash tag is refused where a handle is made,
/// with the rule in the message, and nothing is written; names with a tag work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_whose_braces_are_no_hash_tag_are_refused_on_a_cluster() {
    let cluster = shared_cluster();
    let client = deployment_client(&cluster.url(), |b| b).await;
    let keys_before: Vec<String> = (cluster.servers.iter())
        .map(|s| s.command(&["DBSIZE"]))
        .collect();
    for name in SPLIT_NAMES {
        for (what, message) in every_kind_of(&client, name).await {
            assert!(
                message.contains(name) && message.contains("hash tag"),
                "{what} {name:?}: {message}"
            );
        }
    }
    let keys_after: Vec<String> = (cluster.servers.iter())
        .map(|s| s.command(&["DBSIZE"]))
        .collect();
    assert_eq!(keys_after, keys_before, "nothing written");

    // A tag, however placed, keeps every key of the lock in its slot.
    for name in ["{tagged}-braces", "x}{tagged}", "{t}{}"] {
        let me = client.new_owner();
        let guard = client.lock(name).unwrap().lock(&me).await.unwrap();
        guard.unlock().await.unwrap();
        let fair = client.fair_lock(name).unwrap();
        fair.lock(&me).await.unwrap().unlock().await.unwrap();
        let rw = client.read_write_lock(name).unwrap();
        rw.read(&me).await.unwrap().unlock().await.unwrap();
        rw.write(&me).await.unwrap().unlock().await.unwrap();
        let fenced = client.fenced_lock(name).unwrap();
        let _held = fenced.lock(&me).await.unwrap();
        assert!(fenced.force_unlock().await.unwrap(), "{name}");
        let state = client.inspect(name).await.unwrap();
        assert_eq!(state.mode, HoldMode::Free, "{name}");
    }
}

/// On a single server every key lives on the one server: the same names work as any other,
/// as with Java.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_whose_braces_are_no_hash_tag_work_on_one_server() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for name in SPLIT_NAMES {
        let me = client.new_owner();
        let lock = client.lock(name).unwrap();
        lock.lock(&me).await.unwrap().unlock().await.unwrap();
        let rw = client.read_write_lock(name).unwrap();
        rw.read(&me).await.unwrap().unlock().await.unwrap();
        rw.write(&me).await.unwrap().unlock().await.unwrap();
        let fair = client.fair_lock(name).unwrap();
        fair.lock(&me).await.unwrap().unlock().await.unwrap();
        assert_eq!(server.command(&["EXISTS", name]), "0", "{name}");
    }
}
