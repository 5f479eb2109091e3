//! Sentinel and cluster: Sentinels down or refusing, a master they see down, a slot without
//! a master and a master without a replica.

use super::*;

/// Asserts that `answer` looked at the master on `port`.
fn names_the_master(answer: &Value, port: u16) {
    let address = answer["deployment"]["address"].as_str().unwrap();
    assert!(address.ends_with(&port.to_string()), "{answer:#}");
}

#[test]
fn a_sentinel_down_is_a_warning_with_the_quorum_kept() {
    let mut setup = support::topology::SentinelSetup::start();
    let down = setup.sentinels[2].port();
    setup.sentinels[2].stop();
    // Until the first Sentinel marks it down (after down-after-milliseconds), it sees it up.
    support::topology::settle("the first Sentinel to see the third down", || {
        let peers = setup.sentinels[0].command(&["SENTINEL", "SENTINELS", "mymaster"]);
        peers.contains("s_down")
    });
    let (answer, code) = run_json_at(&setup.url(), &["doctor"]);
    assert_eq!(answer["deployment"]["kind"], "sentinel", "{answer:#}");
    names_the_master(&answer, setup.master_port());
    let reachable = finding(&answer, "sentinel.reachable");
    assert_eq!(reachable["severity"], "warning", "{reachable}");
    let what = reachable["what"].as_str().unwrap();
    assert!(what.contains("2 of the 3"), "{what}");
    assert!(what.contains(&down.to_string()), "{what}");
    assert_eq!(finding(&answer, "sentinel.master")["severity"], "fine");
    assert_eq!(finding(&answer, "sentinel.quorum")["severity"], "fine");
    assert_eq!(finding(&answer, "sentinel.timings")["severity"], "fine");
    let peers = finding(&answer, "sentinel.peers");
    assert_eq!(peers["severity"], "warning", "{peers}");
    let what = peers["what"].as_str().unwrap();
    assert!(what.contains(&format!(":{down} (")), "{what}");
    assert_eq!(finding(&answer, "replication.replicas")["severity"], "fine");
    // Behind Sentinel: classic pub/sub on both sides, and the master's WAIT timed.
    let mode = finding(&answer, "clients.pubsub_mode");
    assert_eq!(mode["severity"], "fine", "{mode}");
    assert!(mode["what"].as_str().unwrap().contains("classic pub/sub"));
    let wait = finding(&answer, "clients.replica_wait");
    assert!(wait["what"].as_str().unwrap().contains("(p50)"), "{wait}");
    assert_eq!(code, 1, "{answer:#}");

    // Declared down only after longer than a hold's lease has left, at least.
    let set = [
        "SENTINEL",
        "SET",
        "mymaster",
        "down-after-milliseconds",
        "25000",
    ];
    assert_eq!(setup.sentinels[0].command(&set), "OK");
    let (answer, _) = run_json_at(&setup.url(), &["doctor"]);
    let timings = finding(&answer, "sentinel.timings");
    assert_eq!(timings["severity"], "warning", "{timings}");
    assert!(timings["what"].as_str().unwrap().contains("25000 ms"));

    // One more down: fewer than the quorum (2) answer.
    setup.sentinels[1].stop();
    let (answer, code) = run_json_at(&setup.url(), &["doctor"]);
    assert_eq!(
        finding(&answer, "sentinel.reachable")["severity"],
        "problem"
    );
    assert_eq!(code, 6, "{answer:#}");
}

#[test]
fn a_cluster_slot_without_a_master_or_a_master_without_a_replica_is_found() {
    let mut cluster = support::topology::Cluster::start();
    let (answer, code) = run_json_at(&cluster.url(), &["doctor"]);
    assert_eq!(answer["deployment"]["kind"], "cluster", "{answer:#}");
    assert_eq!(
        finding(&answer, "cluster.slots")["severity"],
        "fine",
        "{answer:#}"
    );
    assert_eq!(finding(&answer, "cluster.replicas")["severity"], "fine");
    assert_eq!(finding(&answer, "cluster.node_timeout")["severity"], "fine");
    assert_eq!(
        findings(&answer, "replication.replicas").len(),
        3,
        "{answer:#}"
    );
    assert!(checks(&answer, "problem").is_empty(), "{answer:#}");
    assert_ne!(code, 6);
    // Sharded pub/sub for Java's AUTO and this crate's Auto where the servers have it.
    let mode = finding(&answer, "clients.pubsub_mode");
    let what = mode["what"].as_str().unwrap();
    if support::server::server_version() >= (7, 0) {
        // Fine: Java's default and this crate's hear each other; the advice covers the rest.
        assert_eq!(mode["severity"], "fine", "{mode}");
        assert!(what.contains("uses sharded pub/sub"), "{mode}");
        assert!(mode["advice"]
            .as_str()
            .unwrap()
            .contains("PubSubMode::Both"));
    } else {
        assert_eq!(mode["severity"], "fine", "{mode}");
        assert!(what.contains("classic pub/sub"), "{mode}");
    }
    // Each master's WAIT, timed.
    let waits = findings(&answer, "clients.replica_wait");
    assert_eq!(waits.len(), 3, "{answer:#}");
    for wait in waits {
        assert!(wait["what"].as_str().unwrap().contains("(p50)"), "{wait}");
    }

    // Slot 100 forgotten by every node.
    for server in &cluster.servers {
        assert_eq!(server.command(&["CLUSTER", "DELSLOTS", "100"]), "OK");
    }
    let (answer, code) = run_json_at(&cluster.url(), &["doctor"]);
    let slots = finding(&answer, "cluster.slots");
    assert_eq!(slots["severity"], "problem", "{slots}");
    assert!(
        slots["what"].as_str().unwrap().contains(": 100;"),
        "{slots}"
    );
    assert_eq!(code, 6, "{answer:#}");

    // A replica stopped: once the nodes suspect it, its master is alone.
    let replica = cluster
        .nodes()
        .into_iter()
        .find(|node| !node.master)
        .unwrap();
    let master = (cluster.nodes().into_iter())
        .find(|node| Some(&node.id) == replica.master_id.as_ref())
        .unwrap();
    let at = cluster
        .servers
        .iter()
        .position(|s| s.port() == replica.port);
    cluster.servers[at.unwrap()].stop();
    let seen_failing = format!("127.0.0.1:{}@", replica.port);
    // The doctor reads the cluster from whichever node of the URL answers first.
    support::topology::settle("every node to suspect the stopped replica", || {
        (cluster.servers.iter())
            .filter(|server| server.port() != replica.port)
            .all(|server| {
                let nodes = server.command(&["CLUSTER", "NODES"]);
                (nodes.lines()).any(|line| line.contains(&seen_failing) && line.contains("fail"))
            })
    });
    let (answer, _) = run_json_at(&cluster.url(), &["doctor"]);
    let alone = finding(&answer, "cluster.replicas");
    assert_eq!(alone["severity"], "warning", "{alone}");
    let what = alone["what"].as_str().unwrap();
    assert!(
        what.contains(&format!("127.0.0.1:{}", master.port)),
        "{what}"
    );
}

#[test]
fn a_user_refused_sentinel_master_gets_the_quorum_unknown_not_guessed() {
    let test = "a_user_refused_sentinel_master_gets_the_quorum_unknown_not_guessed";
    // Before 7.0 an ACL rule cannot take one subcommand away.
    if !support::server::has_redis_7(test, "-sentinel|master") {
        return;
    }
    let setup = support::topology::SentinelSetup::start();
    let url = setup.url();
    // Every Sentinel refuses SENTINEL MASTER to the default user, which still reads the
    // master's address as the client does.
    for sentinel in &setup.sentinels {
        let reply = sentinel.command(&["ACL", "SETUSER", "default", "-sentinel|master"]);
        assert_eq!(reply, "OK");
    }
    let (answer, _) = run_json_at(&url, &["doctor"]);
    names_the_master(&answer, setup.master_port());
    assert_eq!(finding(&answer, "sentinel.reachable")["severity"], "fine");
    for check in ["sentinel.quorum", "sentinel.timings"] {
        let unknown = finding(&answer, check);
        assert_eq!(unknown["severity"], "warning", "{unknown}");
        let what = unknown["what"].as_str().unwrap();
        assert!(
            what.contains("unknown: SENTINEL MASTER was refused"),
            "{what}"
        );
    }
}

#[test]
fn a_master_the_sentinels_see_down_is_a_problem_and_the_sentinels_are_still_reported() {
    // One Sentinel, quorum 1, watching a master without replicas: no failover can follow.
    let mut master = RedisServer::start();
    let config = format!(
        "sentinel monitor lonely 127.0.0.1 {} 1\n\
         sentinel down-after-milliseconds lonely 1000\n",
        master.port()
    );
    let sentinel = RedisServer::start_sentinel(&config);
    master.stop();
    support::topology::settle("the Sentinel to see the master down", || {
        let state = sentinel.command(&["SENTINEL", "MASTER", "lonely"]);
        state.contains("o_down")
    });
    let url = format!(
        "redis-sentinel://127.0.0.1:{}?sentinelServiceName=lonely",
        sentinel.port()
    );
    let (answer, code) = run_json_at(&url, &["doctor"]);
    assert_eq!(code, 6, "{answer:#}");
    assert!(answer["deployment"]["address"].is_null(), "{answer:#}");
    let down = finding(&answer, "sentinel.master_down");
    assert_eq!(down["severity"], "problem", "{down}");
    let unreachable = finding(&answer, "sentinel.master_reachable");
    assert_eq!(unreachable["severity"], "problem", "{unreachable}");
    let port = master.port().to_string();
    assert!(unreachable["what"].as_str().unwrap().contains(&port));
    assert_eq!(finding(&answer, "sentinel.replicas")["severity"], "problem");
    assert_eq!(finding(&answer, "sentinel.quorum")["severity"], "warning");
    assert!(findings(&answer, "server.version").is_empty(), "{answer:#}");

    let output = command_at(&url, &["doctor"]).output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("sentinel deployment: no master answered"),
        "{text}"
    );
}
