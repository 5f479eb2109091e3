//! The `redisson-lock` tool never calls a live holder dead: a holder of this crate is named
//! connected wherever the tool looks (`inspect`, `watch`, on a cluster, after reconnects),
//! and what it cannot tell it says it cannot tell. Also: bad arguments exit 2 with a word.

mod support;
#[path = "support/tool.rs"]
mod tool;

use std::process::Command;
use std::time::Duration;

use support::*;
use tool::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_names_a_live_holder_connected() {
    let server = RedisServer::start();
    let rust = client(&server).await;
    let me = rust.new_owner();
    let guard = rust.lock("live:watched").unwrap().lock(&me).await.unwrap();
    let watching = Running::start(&server, &["watch", "live:watched", "--for", "60s"]);
    let first = tokio::task::block_in_place(|| watching.next_event("state"));
    let holder = &first["holders"][0];
    assert_eq!(holder["field"], me.to_string());
    assert_eq!(holder["client"], "redisson-lock", "{first}");
    assert_eq!(holder["liveness"], "connected", "{first}");
    drop(watching);
    guard.unlock().await.unwrap();
    rust.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_holder_is_named_connected_after_its_connection_was_killed() {
    let server = RedisServer::start();
    let rust = client(&server).await;
    let me = rust.new_owner();
    let guard = rust.lock("live:killed").unwrap().lock(&me).await.unwrap();
    server.command(&["CLIENT", "KILL", "TYPE", "normal"]);
    // The client connects again by itself; its new connection must carry its name again.
    let name = format!("redisson-lock:{}", me.client_id());
    eventually(
        Duration::from_secs(10),
        "the new connection to be named",
        || server.command(&["CLIENT", "LIST"]).contains(&name),
    )
    .await;
    let (state, code) =
        tokio::task::block_in_place(|| run_json(&server, &["inspect", "live:killed"]));
    assert_eq!(code, 0);
    assert_eq!(state["holders"][0]["liveness"], "connected", "{state}");
    guard.unlock().await.unwrap();
    rust.shutdown().await;
}

/// On a cluster a client names its connection to every master, and the tool lists the
/// clients of every master: holders on each of the three masters are all named connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_holders_on_every_master_of_a_cluster_are_named_connected() {
    let cluster = tokio::task::block_in_place(support::topology::Cluster::start);
    let rust = deployment_client(&cluster.url(), |b| b).await;
    let me = rust.new_owner();
    // One lock on each master.
    let mut names = Vec::new();
    for master in cluster.nodes().iter().filter(|n| n.master) {
        let name = (0..10_000)
            .map(|i| format!("live:{i}"))
            .find(|name| cluster.master_of(name).port() == master.port)
            .unwrap();
        names.push(name);
    }
    assert_eq!(names.len(), 3);
    let mut guards = Vec::new();
    for name in &names {
        guards.push(rust.lock(name).unwrap().lock(&me).await.unwrap());
    }
    for name in &names {
        let (state, code) =
            tokio::task::block_in_place(|| run_json_at(&cluster.url(), &["inspect", name]));
        assert_eq!(code, 0, "{state}");
        assert_eq!(state["holders"][0]["field"], me.to_string(), "{state}");
        assert_eq!(
            state["holders"][0]["liveness"], "connected",
            "{name}: {state}"
        );
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    rust.shutdown().await;
}

/// A user who may not run `CLIENT LIST` (here no `CLIENT` at all, as Redis 6.2 cannot take
/// one subcommand away) is told that liveness is unknown, and why; never that the holder is
/// not connected.
#[test]
fn liveness_is_unknown_when_the_clients_cannot_be_listed() {
    let server = RedisServer::start();
    java_hold(&server, "live:java", 57, 1);
    server.command(&[
        "ACL", "SETUSER", "viewer", "on", ">pw", "~*", "&*", "+@all", "-client",
    ]);
    let url = format!("redis://viewer:pw@127.0.0.1:{}", server.port());
    let (state, code) = run_json_at(&url, &["inspect", "live:java"]);
    assert_eq!(code, 0, "{state}");
    let holder = &state["holders"][0];
    assert_eq!(holder["liveness"], "unknown", "{state}");
    assert!(holder["clients_unlisted"].is_string(), "{state}");
    let output = command_at(&url, &["inspect", "live:java"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("liveness unknown"), "{text}");
    assert!(text.contains("could not be listed"), "{text}");
}

#[test]
fn bad_arguments_exit_2_with_a_message() {
    let server = RedisServer::start();
    let bin = env!("CARGO_BIN_EXE_redisson-lock");
    let http = format!("http://127.0.0.1:{}", server.port());
    let cases: [&[&str]; 5] = [
        &["watch", "x", "--interval", "0"],
        &["hold", "x", "--lease", "0ms"],
        &["inspect", ""],
        &["--url", &http, "inspect", "x"],
        &["--url", "not a url", "inspect", "x"],
    ];
    for args in cases {
        let mut command = Command::new(bin);
        if args[0] != "--url" {
            command.args(["--url", &server.url()]);
        }
        let output = command.args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.trim().is_empty(), "{args:?} said nothing");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    for verb in ["inspect", "list", "force-unlock", "watch", "hold"] {
        let help = Command::new(bin).args([verb, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(help.contains("Exit codes: 0 done"), "{verb}: {help}");
        assert!(help.contains("250ms, 10s, 2m, 1h"), "{verb}: {help}");
    }
}
