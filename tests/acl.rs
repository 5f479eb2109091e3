//! Least-privilege ACL users. The user `docs/operations.md` documents takes, releases and
//! waits for every kind of lock on a single server, on a master with a replica and on a
//! cluster; a user refused `INFO` gets an error that says so before anything is written.

mod support;

use std::time::Duration;

use redisson_lock::{Error, LockClient};
use support::topology::{start_replica_of, Cluster};
use support::workload::{acquire, Kind};
use support::*;

/// The least-privilege user of `docs/operations.md` for locks whose names start with
/// `prefix`: their keys and channels only, every command but the `@dangerous` ones, and
/// `INFO` for the replica check.
fn least_privilege(prefix: &str) -> Vec<String> {
    // The channels too: the scripts name them among their keys, as Redisson's do.
    let keys = [
        "",
        "{",
        "redisson_lock_queue:{",
        "redisson_lock_timeout:{",
        "redisson_lock_token:{",
        "redisson_unlock_latch:{",
        "redisson_lock_left:{",
        "redisson_lock_took:{",
        "redisson_lock__channel:{",
        "redisson_rwlock:{",
    ];
    let channels = ["redisson_lock__channel:{", "redisson_rwlock:{"];
    let mut rules: Vec<String> = keys.iter().map(|k| format!("~{k}{prefix}*")).collect();
    // Redis 6.2 gives a new user every channel (`acl-pubsub-default allchannels`).
    rules.push("resetchannels".into());
    rules.extend(channels.iter().map(|c| format!("&{c}{prefix}*")));
    rules.extend(["+@all", "-@dangerous", "+info"].map(String::from));
    rules
}

/// The same without `INFO`.
const NO_INFO: [&str; 4] = ["~*", "&*", "+@all", "-@dangerous"];

/// Adds the user `name` (password `pw`) with `rules` to `server`.
fn add_user(server: &RedisServer, name: &str, rules: &[&str]) {
    let mut acl = vec!["ACL", "SETUSER", name, "on", ">pw"];
    acl.extend(rules);
    assert_eq!(server.command(&acl), "OK");
}

/// A client of `server` logged in as `name`.
async fn client_as(server: &RedisServer, name: &str) -> LockClient {
    let url = format!("redis://{name}:pw@127.0.0.1:{}", server.port());
    client_with(server, |b| b.url(&url)).await
}

/// Takes and releases every kind of lock, named from `prefix`.
async fn every_kind_is_taken_and_released(c: &LockClient, prefix: &str) {
    for kind in Kind::ALL {
        let name = kind.lock_name(prefix);
        let held = acquire(c, &c.new_owner(), kind, &name, Some(Duration::ZERO)).await;
        let held = held.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        held.expect("a free lock").unlock().await.unwrap();
    }
}

/// Every kind taken and released, and a waiter in another client of the same user woken by
/// each release, on `server` (a master) as the least-privilege user.
async fn least_privilege_user_works_on(server: &RedisServer, prefix: &str) {
    let rules = least_privilege(prefix);
    add_user(
        server,
        "locker",
        &rules.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let (holder, waiter) = (
        client_as(server, "locker").await,
        client_as(server, "locker").await,
    );
    every_kind_is_taken_and_released(&holder, prefix).await;
    every_kind_wakes(&holder, &waiter, prefix, |channel| async move {
        subscribed(server, &channel).await
    })
    .await;
}

#[tokio::test]
async fn the_least_privilege_user_locks_on_a_single_server() {
    let server = RedisServer::start();
    least_privilege_user_works_on(&server, "acl-single").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_privilege_user_locks_on_a_master_with_a_replica() {
    let master = RedisServer::start();
    let replica = tokio::task::block_in_place(|| start_replica_of(&master));
    least_privilege_user_works_on(&master, "acl-replicated").await;
    // The acquisitions and releases waited for the replica.
    assert!(command_calls(&master, "wait") > 0);
    drop(replica);
}

#[tokio::test]
async fn a_user_refused_info_is_told_before_anything_is_written() {
    let server = RedisServer::start();
    add_user(&server, "no-info", &NO_INFO);
    let c = client_as(&server, "no-info").await;
    for kind in Kind::ALL {
        let name = kind.lock_name("acl-no-info");
        let result = acquire(&c, &c.new_owner(), kind, &name, Some(Duration::ZERO)).await;
        let error = match result.map(|held| held.is_some()) {
            Err(error @ Error::Redis(_)) => error,
            other => panic!("{kind:?}: {other:?}"),
        };
        let message = error.to_string();
        for words in [
            "NOPERM",
            "INFO replication",
            "+info",
            "wait_for_replicas(None)",
        ] {
            assert!(message.contains(words), "{kind:?}: {message}");
        }
        assert!(!error.is_retryable(), "{kind:?}: {message}");
    }
    // No script ran: no hold, no fencing token taken.
    assert_eq!(server.command(&["DBSIZE"]), "0");
    assert_eq!(command_calls(&server, "evalsha"), 0);

    // Without the replica check, the same user needs no INFO.
    let unchecked = client_with(&server, |b| {
        b.url(&format!("redis://no-info:pw@127.0.0.1:{}", server.port()))
            .wait_for_replicas(None)
    })
    .await;
    every_kind_is_taken_and_released(&unchecked, "acl-unchecked").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_info_locks_on_a_cluster_with_replicas_counted_from_the_node_list() {
    let test = "a_user_refused_info_locks_on_a_cluster_with_replicas_counted_from_the_node_list";
    // Before 7.0, `CLUSTER` as a whole is `@dangerous`: such a user cannot use a cluster.
    if !support::server::has_redis_7(test, "CLUSTER SLOTS outside @dangerous") {
        return;
    }
    let cluster = tokio::task::block_in_place(Cluster::start);
    for server in &cluster.servers {
        add_user(server, "no-info", &NO_INFO);
    }
    let url = cluster.url().replace("://", "://no-info:pw@");
    let c = deployment_client(&url, |b| b).await;
    let prefix = "acl-cluster";
    every_kind_is_taken_and_released(&c, prefix).await;
    // The replica count came from `CLUSTER NODES`: the scripts were followed by WAITs.
    let master = cluster.master_of(&Kind::Plain.lock_name(prefix));
    assert!(command_calls(master, "wait") > 0);
}

/// A user who may use a semaphore's or a latch's count but not its channel: the script is
/// refused as a whole, and the error names the script and every key it needs, where the
/// server names none.
#[tokio::test]
async fn a_refused_key_of_a_synchronizer_is_named_with_its_script() {
    let server = RedisServer::start();
    add_user(
        &server,
        "counts-only",
        &["~jobs*", "&*", "+@all", "-@dangerous"],
    );
    let c = client_with(&server, |b| {
        b.url(&format!(
            "redis://counts-only:pw@127.0.0.1:{}",
            server.port()
        ))
        .wait_for_replicas(None)
    })
    .await;
    let refused = |what: &str, result: redisson_lock::Result<bool>, channel: &str| {
        let error = result.expect_err("refused");
        let text = error.to_string();
        for words in ["NOPERM", channel, "nothing was written"] {
            assert!(text.contains(words), "{what}: {text}");
        }
        assert!(!error.is_retryable(), "{what}: {text}");
    };
    let semaphore = c.semaphore("jobs:sem").unwrap();
    refused(
        "semaphore",
        semaphore.try_set_permits(2).await,
        "redisson_sc:{jobs:sem}",
    );
    let latch = c.count_down_latch("jobs:latch").unwrap();
    refused(
        "latch",
        latch.try_set_count(2).await,
        "redisson_countdownlatch__channel__{jobs:latch}",
    );
    assert_eq!(server.command(&["DBSIZE"]), "0");
}
