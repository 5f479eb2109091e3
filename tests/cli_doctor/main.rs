//! The `redisson-lock doctor` command against real servers: what it finds on a healthy
//! deployment and on each planted fault, its exit codes, and its JSON.

#[path = "../support/mod.rs"]
mod support;
#[path = "../support/tool.rs"]
mod tool;

mod clients;
mod failover;
mod replication;
mod tls;

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
    // CLIENT LIST (@dangerous) refused: the connected clients are unknown, not guessed; and
    // the WAIT's cost too, without INFO to count the replicas.
    let connected = finding(&answer, "clients.connected");
    assert_eq!(connected["severity"], "warning", "{connected}");
    assert!(connected["what"]
        .as_str()
        .unwrap()
        .contains("CLIENT LIST was refused"));
    let wait = finding(&answer, "clients.replica_wait");
    assert!(wait["what"].as_str().unwrap().contains("unknown"), "{wait}");

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
    // Timings, which a loaded machine can slow.
    warnings.retain(|check| check != "clients.round_trip" && check != "clients.replica_wait");
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
