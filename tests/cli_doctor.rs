//! The `redisson-lock doctor` command against real servers: what it finds on a healthy
//! deployment and on each planted fault, its exit codes, and its JSON.

mod support;
#[path = "support/tool.rs"]
mod tool;

use serde_json::Value;
use support::*;
use tool::*;

/// The findings of `answer` whose check is `check`.
fn findings<'a>(answer: &'a Value, check: &str) -> Vec<&'a Value> {
    answer["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings in {answer}"))
        .iter()
        .filter(|finding| finding["check"] == check)
        .collect()
}

/// The one finding of `check`, which must be there.
fn finding<'a>(answer: &'a Value, check: &str) -> &'a Value {
    let found = findings(answer, check);
    assert_eq!(found.len(), 1, "one {check} finding expected in {answer:#}");
    found[0]
}

/// The checks of `answer` with `severity`.
fn checks(answer: &Value, severity: &str) -> Vec<String> {
    answer["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|finding| finding["severity"] == severity)
        .map(|finding| finding["check"].as_str().unwrap().to_string())
        .collect()
}

/// `--url` with a user and password.
fn url_as(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}", server.port())
}

#[test]
fn the_server_is_named_with_its_version() {
    let server = RedisServer::start();
    let (answer, _) = run_json(&server, &["doctor"]);
    let info = server.command(&["INFO", "server"]);
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap()
        .trim();
    let valkey = info
        .lines()
        .find_map(|line| line.strip_prefix("valkey_version:"))
        .map(str::trim);
    assert_eq!(answer["deployment"]["kind"], "single");
    assert_eq!(
        answer["deployment"]["server"],
        if valkey.is_some() { "Valkey" } else { "Redis" }
    );
    assert_eq!(answer["deployment"]["version"], valkey.unwrap_or(version));
    let rated = finding(&answer, "server.version");
    assert_eq!(rated["severity"], "fine", "{rated}");
    assert!(rated["what"]
        .as_str()
        .unwrap()
        .contains(valkey.unwrap_or(version)));
    assert_eq!(rated["doc"], "docs/compatibility.md#servers");
    // The schema every finding follows.
    for finding in answer["findings"].as_array().unwrap() {
        for field in ["severity", "check", "what", "advice", "doc"] {
            assert!(finding[field].is_string(), "{field} in {finding}");
        }
        assert!(["problem", "warning", "fine"].contains(&finding["severity"].as_str().unwrap()));
        assert!(
            finding["doc"].as_str().unwrap().starts_with("docs/"),
            "{finding}"
        );
    }
    // Read-only: the doctor wrote no key.
    assert_eq!(server.command(&["DBSIZE"]), "0");
}

#[test]
fn a_user_refused_info_pexpire_and_the_channel_is_told_exactly_what_to_grant() {
    let test = "a_user_refused_info_pexpire_and_the_channel_is_told_exactly_what_to_grant";
    if !support::server::has_redis_7(test, "ACL DRYRUN") {
        return;
    }
    let server = RedisServer::start();
    let reply = server.command(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">pw",
        "~*",
        "resetchannels",
        "+@all",
        "-@dangerous",
        "+acl|dryrun",
        "+acl|whoami",
        "-pexpire",
    ]);
    assert_eq!(reply, "OK");
    let url = url_as(&server, "locker", "pw");
    let (answer, code) = run_json_at(&url, &["doctor", "--name", "orders:7"]);
    assert_eq!(code, 6, "{answer:#}");
    assert_eq!(answer["exit_code"], 6);
    assert_eq!(answer["deployment"]["user"], "locker");

    let locks = finding(&answer, "permissions.locks");
    assert_eq!(locks["severity"], "problem", "{locks}");
    let advice = locks["advice"].as_str().unwrap();
    assert!(advice.starts_with("ACL SETUSER locker "), "{advice}");
    assert!(advice.contains("+pexpire"), "{advice}");
    assert!(
        advice.contains("&redisson_lock__channel:{orders:7}"),
        "{advice}"
    );
    assert!(!advice.contains('~'), "every key is allowed: {advice}");

    let waiting = finding(&answer, "permissions.waiting");
    assert_eq!(waiting["severity"], "problem", "{waiting}");
    assert!(waiting["advice"]
        .as_str()
        .unwrap()
        .contains("&redisson_lock__channel:{orders:7}"));

    let replica_check = finding(&answer, "permissions.replica_check");
    assert_eq!(replica_check["severity"], "problem", "{replica_check}");
    assert!(replica_check["advice"].as_str().unwrap().contains("+info"));

    // INFO refused, the version still comes from HELLO.
    assert_eq!(finding(&answer, "server.version")["severity"], "fine");

    // The same user with what the doctor said granted: no permission problem left.
    let granted = server.command(&[
        "ACL",
        "SETUSER",
        "locker",
        "+pexpire",
        "+info",
        "&redisson_lock__channel:{orders:7}",
        "&redisson_rwlock:{orders:7}",
        "&redisson_sc:{orders:7}",
        "&redisson_countdownlatch__channel__{orders:7}",
    ]);
    assert_eq!(granted, "OK");
    let (answer, _) = run_json_at(&url, &["doctor", "--name", "orders:7"]);
    let problems = checks(&answer, "problem");
    assert!(
        !problems
            .iter()
            .any(|check| check.starts_with("permissions.")),
        "{answer:#}"
    );
}

#[test]
fn a_user_who_may_not_run_acl_dryrun_gets_unknown_permissions() {
    let server = RedisServer::start();
    let reply = server.command(&[
        "ACL",
        "SETUSER",
        "plain",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-@dangerous",
    ]);
    assert_eq!(reply, "OK");
    let (answer, code) = run_json_at(&url_as(&server, "plain", "pw"), &["doctor"]);
    let unknown = finding(&answer, "permissions.unknown");
    assert_eq!(unknown["severity"], "warning", "{unknown}");
    let what = unknown["what"].as_str().unwrap();
    if support::server::server_version() >= (7, 0) {
        assert!(what.contains("it may not run ACL DRYRUN"), "{what}");
        assert!(unknown["advice"].as_str().unwrap().contains("+acl|dryrun"));
    } else {
        // No ACL DRYRUN before 7.0, and the user may not read its rules either.
        assert!(what.contains("has no ACL DRYRUN"), "{what}");
        assert!(what.contains("ACL GETUSER was refused"), "{what}");
    }
    assert!(
        findings(&answer, "permissions.locks").is_empty(),
        "no guess: {answer:#}"
    );
    assert_ne!(code, 0, "{answer:#}");
}

#[test]
fn an_unreachable_server_is_a_redis_error() {
    let url = {
        let server = RedisServer::start();
        server.url()
    };
    let (answer, code) = run_json_at(&url, &["doctor"]);
    assert_eq!(code, 3, "{answer}");
    assert_eq!(answer["event"], "error");
}

/// The warnings of `answer` but the round trip's, which a loaded machine may slow.
fn warnings(answer: &Value) -> Vec<String> {
    let mut warnings = checks(answer, "warning");
    warnings.retain(|check| check != "clients.round_trip");
    warnings
}

/// A master with persistence and one replica in sync.
fn master_with_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start_with(
        true,
        &[
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ],
    );
    let replica = support::topology::start_replica_of(&master);
    (master, replica)
}

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
    let master = setup.master_port().to_string();
    assert!(
        answer["deployment"]["address"]
            .as_str()
            .unwrap()
            .ends_with(&master),
        "{answer:#}"
    );
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
    let master = setup.master_port().to_string();
    assert!(
        answer["deployment"]["address"]
            .as_str()
            .unwrap()
            .ends_with(&master),
        "{answer:#}"
    );
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

/// Runs `openssl` in `dir`.
#[cfg(feature = "tls")]
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let status =
        std::process::Command::new(support::server::ensure_installed("openssl", "openssl"))
            .args(args)
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run openssl");
    assert!(status.success(), "openssl {args:?} failed");
}

/// Whether the server can serve TLS, as `tests/tls.rs` tells it: Redis built without TLS has
/// no TLS settings; Valkey has them in every build, and one built without TLS crashes on
/// `CONFIG SET tls-port`, so a server started with a TLS port and missing files is asked
/// first ("Failed finding TLS support" where there is none).
#[cfg(feature = "tls")]
fn built_with_tls(server: &RedisServer) -> bool {
    if server.command(&["CONFIG", "GET", "tls-port"]).is_empty() {
        return false;
    }
    let missing = server.dir().join("no-such-file");
    let missing = missing.to_string_lossy();
    let probe = std::process::Command::new(support::server::ensure_redis_server())
        .args([
            "--port",
            "0",
            "--tls-port",
            "1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-cert-file", &missing, "--tls-key-file", &missing])
        .arg("--dir")
        .arg(server.dir())
        .output()
        .expect("run redis-server");
    !String::from_utf8_lossy(&probe.stdout).contains("Failed finding TLS support")
}

#[cfg(feature = "tls")]
#[test]
fn a_rediss_url_is_looked_at_over_tls() {
    let server = RedisServer::start();
    if !built_with_tls(&server) {
        let why = "the server was built without TLS";
        return support::server::skipped("a_rediss_url_is_looked_at_over_tls", why);
    }
    // A throw-away CA and a certificate for 127.0.0.1 signed by it.
    let dir = server.dir().to_path_buf();
    let subject = |name: &str| format!("/CN={name}");
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            &subject("doctor test CA"),
        ],
    );
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            &subject("localhost"),
        ],
    );
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1").unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    );
    let path = |file: &str| dir.join(file).to_string_lossy().into_owned();
    for (parameter, value) in [
        ("tls-cert-file", path("server.crt")),
        ("tls-key-file", path("server.key")),
        ("tls-ca-cert-file", path("ca.crt")),
        ("tls-auth-clients", "no".into()),
    ] {
        assert_eq!(server.command(&["CONFIG", "SET", parameter, &value]), "OK");
    }
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let set = server.command(&["CONFIG", "SET", "tls-port", &tls_port.to_string()]);
    assert_eq!(set, "OK");

    // The tool trusts the CA through SSL_CERT_FILE, as rustls' root store reads it.
    let output = command_at(
        &format!("rediss://localhost:{tls_port}"),
        &["--json", "doctor"],
    )
    .env("SSL_CERT_FILE", path("ca.crt"))
    .output()
    .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let answer: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(answer["deployment"]["tls"], true, "{answer:#}");
    assert_eq!(
        finding(&answer, "server.version")["severity"],
        "fine",
        "{answer:#}"
    );
    assert!(checks(&answer, "problem").is_empty(), "{answer:#}");
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
