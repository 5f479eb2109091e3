//! Replication: a healthy master with its replica, a master alone, `min-replicas-to-write`
//! and a URL that names a replica.

use super::*;

#[test]
fn a_healthy_master_with_a_replica_is_fine() {
    let (master, replica) = master_with_replica();
    master.command(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    master.command(&["CONFIG", "SET", "min-replicas-max-lag", "10"]);
    let (answer, code) = run_json(&master, &["doctor"]);
    assert!(checks(&answer, "problem").is_empty(), "{answer:#}");
    assert!(warnings(&answer).is_empty(), "{answer:#}");
    let tolerated = checks(&answer, "warning").len();
    assert_eq!(code, if tolerated == 0 { 0 } else { 1 }, "{answer:#}");
    if support::server::server_version() < (7, 0) {
        // No ACL DRYRUN: the default user's rules, read with ACL GETUSER, allow everything.
        assert_eq!(finding(&answer, "permissions.all")["severity"], "fine");
    } else {
        assert_eq!(finding(&answer, "permissions.locks")["severity"], "fine");
    }
    let replicas = finding(&answer, "replication.replicas");
    assert_eq!(replicas["severity"], "fine");
    let port = replica.port().to_string();
    assert!(
        replicas["what"].as_str().unwrap().contains(&port),
        "{replicas}"
    );
    assert_eq!(finding(&answer, "replication.link")["severity"], "fine");
    assert_eq!(
        finding(&answer, "replication.min_replicas")["severity"],
        "fine"
    );
    assert_eq!(finding(&answer, "persistence")["severity"], "fine");
    let clock = finding(&answer, "clients.clock");
    assert_eq!(clock["severity"], "fine", "{clock}");
    assert!(
        clock["what"]
            .as_str()
            .unwrap()
            .contains(" ms from 127.0.0.1:"),
        "{clock}"
    );
    let round_trip = finding(&answer, "clients.round_trip");
    assert!(
        round_trip["what"]
            .as_str()
            .unwrap()
            .contains("over 20 PINGs"),
        "{round_trip}"
    );

    // What a WAIT for the replica costs: timed, with its p50.
    let wait = finding(&answer, "clients.replica_wait");
    let what = wait["what"].as_str().unwrap();
    assert!(
        what.contains("(p50)") && what.contains("1 replica(s)"),
        "{wait}"
    );
    assert_eq!(wait["doc"], "docs/operations.md#the-cost-of-a-wait");

    // The same in words, grouped.
    let output = run(&master, &["doctor"]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("Fine ("), "{text}");
    assert!(!text.contains("Problems ("), "{text}");
    assert!(text.contains("[replication.replicas]"), "{text}");
}

#[test]
fn a_master_without_a_replica_is_a_warning() {
    let server = RedisServer::start_with_persistence();
    let (answer, code) = run_json(&server, &["doctor"]);
    assert_eq!(code, 1, "{answer:#}");
    assert_eq!(warnings(&answer), ["replication.replicas"], "{answer:#}");
    let alone = finding(&answer, "replication.replicas");
    assert!(
        alone["what"].as_str().unwrap().contains("no replica"),
        "{alone}"
    );
    assert_eq!(alone["doc"], "docs/topologies.md#a-master-with-replicas");
    let wait = finding(&answer, "clients.replica_wait");
    assert_eq!(wait["severity"], "fine", "{wait}");
    assert!(
        wait["what"].as_str().unwrap().contains("nothing to time"),
        "{wait}"
    );
}

#[test]
fn min_replicas_to_write_unset_too_high_or_a_replica_named_are_found() {
    let (master, replica) = master_with_replica();
    let (answer, code) = run_json(&master, &["doctor"]);
    let unset = finding(&answer, "replication.min_replicas");
    assert_eq!(unset["severity"], "warning", "{unset}");
    assert!(unset["what"]
        .as_str()
        .unwrap()
        .contains("min-replicas-to-write is 0"));
    assert!(unset["advice"]
        .as_str()
        .unwrap()
        .contains("CONFIG SET min-replicas-to-write 1"));
    assert_eq!(code, 1, "{answer:#}");

    // More replicas asked for than there are: every write is refused.
    master.command(&["CONFIG", "SET", "min-replicas-to-write", "2"]);
    let (answer, code) = run_json(&master, &["doctor"]);
    let refused = finding(&answer, "replication.min_replicas");
    assert_eq!(refused["severity"], "problem", "{refused}");
    assert!(refused["what"].as_str().unwrap().contains("NOREPLICAS"));
    assert_eq!(code, 6, "{answer:#}");

    // A delay before each full sync, while writes wait for a replica.
    master.command(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    master.command(&["CONFIG", "SET", "repl-diskless-sync-delay", "5"]);
    let (answer, _) = run_json(&master, &["doctor"]);
    let delay = finding(&answer, "replication.sync_delay");
    assert_eq!(delay["severity"], "warning", "{delay}");
    assert!(delay["what"].as_str().unwrap().contains("5 s"), "{delay}");

    // The URL names the replica.
    let (answer, code) = run_json(&replica, &["doctor"]);
    let role = finding(&answer, "replication.role");
    assert_eq!(role["severity"], "problem", "{role}");
    let master_port = master.port().to_string();
    assert!(
        role["advice"].as_str().unwrap().contains(&master_port),
        "{role}"
    );
    assert_eq!(code, 6, "{answer:#}");
}
