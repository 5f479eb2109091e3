//! The `redisson-lock` binary end to end, against private servers: holds written exactly as
//! Java writes them and holds of this crate, of every kind.

mod support;
#[path = "support/tool.rs"]
mod tool;

use std::io::Write;
use std::process::{Command, Stdio};

use support::*;
use tool::*;

#[test]
fn inspect_shows_a_java_hold_and_its_fair_queue_in_order() {
    let server = RedisServer::start();
    java_hold(&server, "cli:fair", 57, 2);
    let now = epoch_ms();
    for (thread, deadline) in [(58, now + 300_000), (59, now + 600_000)] {
        server.command(&[
            "RPUSH",
            "redisson_lock_queue:{cli:fair}",
            &java_owner(thread),
        ]);
        let score = deadline.to_string();
        server.command(&[
            "ZADD",
            "redisson_lock_timeout:{cli:fair}",
            &score,
            &java_owner(thread),
        ]);
    }

    let (state, code) = run_json(&server, &["inspect", "cli:fair"]);
    assert_eq!(code, 0);
    assert_eq!(state["state"], "exclusive");
    let ttl = state["ttl_ms"].as_u64().unwrap();
    assert!((20_000..=30_000).contains(&ttl), "{ttl}");
    let holder = &state["holders"][0];
    assert_eq!(holder["field"], JAVA_OWNER);
    assert_eq!(holder["client_id"], JAVA_CLIENT);
    assert_eq!(
        (holder["owner_id"].as_u64(), holder["count"].as_u64()),
        (Some(57), Some(2))
    );
    // Nothing shows which language thread 57 belongs to: the tool does not guess.
    assert_eq!(holder["client"], "unknown");
    assert_eq!(state["queue_len"], 2);
    let queue = state["queue"].as_array().unwrap();
    assert_eq!(queue[0]["field"], java_owner(58));
    assert_eq!(queue[1]["field"], java_owner(59));
    assert_eq!(queue[0]["deadline_epoch_ms"].as_u64(), Some(now + 300_000));
    let channels: Vec<&str> = (state["channels"].as_array().unwrap().iter())
        .map(|c| c["channel"].as_str().unwrap())
        .collect();
    let head_channel = format!("redisson_lock__channel:{{cli:fair}}:{}", java_owner(58));
    assert!(channels.contains(&head_channel.as_str()), "{channels:?}");

    let human = String::from_utf8(run(&server, &["inspect", "cli:fair"]).stdout).unwrap();
    assert!(
        human.contains("held (fair lock)") && human.contains("Java thread 57 or a Rust owner"),
        "{human}"
    );
}

#[test]
fn inspect_shows_java_readers_with_their_leases_and_a_java_writer() {
    let server = RedisServer::start();
    server.command(&[
        "HSET",
        "cli:rw",
        "mode",
        "read",
        &java_owner(1),
        "2",
        &java_owner(2),
        "1",
    ]);
    server.command(&["PEXPIRE", "cli:rw", "30000"]);
    for (thread, hold, lease) in [(1, 1, "30000"), (1, 2, "20000"), (2, 1, "10000")] {
        let key = format!("{{cli:rw}}:{}:rwlock_timeout:{hold}", java_owner(thread));
        server.command(&["SET", &key, "1", "PX", lease]);
    }
    let (state, code) = run_json(&server, &["inspect", "cli:rw"]);
    assert_eq!((state["state"].as_str(), code), (Some("read"), 0));
    let reader = |thread| {
        let holders = state["holders"].as_array().unwrap();
        holders
            .iter()
            .find(|h| h["field"] == java_owner(thread))
            .unwrap()
            .clone()
    };
    let first = reader(1);
    assert_eq!(
        (first["side"].as_str(), first["count"].as_u64()),
        (Some("read"), Some(2))
    );
    let leases: Vec<u64> = first["read_leases_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_u64().unwrap())
        .collect();
    assert!(
        leases[0] > 20_000 && (10_000..=20_000).contains(&leases[1]),
        "{leases:?}"
    );
    assert!(reader(2)["read_leases_ms"][0].as_u64().unwrap() <= 10_000);

    let writer = format!("{}:write", java_owner(3));
    server.command(&["HSET", "cli:w", "mode", "write", &writer, "1"]);
    server.command(&["PEXPIRE", "cli:w", "30000"]);
    let (state, _) = run_json(&server, &["inspect", "cli:w"]);
    assert_eq!(state["state"], "write");
    assert_eq!(state["holders"][0]["side"], "write");
    assert_eq!(state["holders"][0]["owner_id"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_tells_a_connected_rust_owner_and_the_fencing_token() {
    let server = RedisServer::start();
    let rust = client(&server).await;
    let me = rust.new_owner();
    let guard = rust
        .fenced_lock("cli:fenced")
        .unwrap()
        .lock(&me)
        .await
        .unwrap();
    let (state, _) = tokio::task::block_in_place(|| run_json(&server, &["inspect", "cli:fenced"]));
    let holder = &state["holders"][0];
    assert_eq!(holder["field"], me.to_string());
    assert_eq!(holder["client"], "redisson-lock");
    assert!(holder["client_addr"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    assert_eq!(state["fence_token"].as_u64(), Some(guard.token()));
    guard.unlock().await.unwrap();
    rust.shutdown().await;
}

#[test]
fn a_key_that_is_not_a_lock_is_named_so() {
    let server = RedisServer::start();
    server.command(&["SET", "cli:string", "hello"]);
    server.command(&["HSET", "cli:hash", "colour", "blue"]);
    for key in ["cli:string", "cli:hash"] {
        let (state, code) = run_json(&server, &["inspect", key]);
        assert_eq!(
            (state["state"].as_str(), code),
            (Some("not_a_lock"), 5),
            "{key}"
        );
    }
    let output = run(&server, &["force-unlock", "cli:string", "--yes"]);
    assert_eq!(output.status.code(), Some(5));
    assert_eq!(server.command(&["GET", "cli:string"]), "hello");
}

#[test]
fn list_finds_held_and_queued_locks_by_pattern_and_prefix() {
    let server = RedisServer::start();
    java_hold(&server, "app1:orders:1", 57, 1);
    java_hold(&server, "app1:orders:2", 58, 1);
    java_hold(&server, "app2:orders:3", 59, 1);
    // A fair lock that is free, with a waiter stuck in its queue.
    server.command(&["RPUSH", "redisson_lock_queue:{app1:orders:4}", JAVA_OWNER]);
    server.command(&["HSET", "app1:orders:profile", "colour", "blue"]);
    server.command(&["SET", "app1:orders:string", "x"]);

    let (found, code) = run_json(&server, &["--prefix", "app1:", "list", "orders:*"]);
    assert_eq!(code, 0);
    let names: Vec<&str> = (found["locks"].as_array().unwrap().iter())
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders:1", "orders:2", "orders:4"]);
    assert_eq!(found["locks"][2]["state"], "free");
    assert_eq!(found["locks"][2]["queue_len"], 1);
    assert_eq!(found["incomplete"], false);

    let text = String::from_utf8(run(&server, &["list"]).stdout).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_asks_then_wakes_waiters_of_both_languages() {
    let server = RedisServer::start();
    java_hold(&server, "cli:stuck", 57, 1);
    let url = server.url();

    // Answered "no": nothing changes.
    let mut asking = Command::new(BIN)
        .args(["--url", &url, "force-unlock", "cli:stuck"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    asking.stdin.take().unwrap().write_all(b"n\n").unwrap();
    assert_eq!(asking.wait().unwrap().code(), Some(4));
    assert_eq!(server.command(&["HLEN", "cli:stuck"]), "1");

    // A Rust waiter, and a Java one standing as a listener on the unlock channel.
    let rust = long_watchdog_client(&server).await;
    let lock = rust.lock("cli:stuck").unwrap();
    let waiter = tokio::spawn({
        let (lock, me) = (lock.clone(), rust.new_owner());
        async move { lock.lock(&me).await }
    });
    subscribed(&server, &lock_channel("cli:stuck")).await;
    let mut java = Listener::channel(&server, &lock_channel("cli:stuck")).await;

    let (done, code) =
        tokio::task::block_in_place(|| run_json(&server, &["force-unlock", "cli:stuck", "--yes"]));
    assert_eq!(
        (done["freed"].as_bool(), done["as"].as_str(), code),
        (Some(true), Some("lock"), 0)
    );
    assert_eq!(
        java.next().await,
        (lock_channel("cli:stuck"), "0".to_string())
    );
    woken_and_released("the Rust waiter", waiter).await;
    java.quit().await;
    rust.shutdown().await;

    // Nothing left to free.
    let (done, code) = run_json(&server, &["force-unlock", "cli:stuck", "--yes"]);
    assert_eq!((done["freed"].as_bool(), code), (Some(false), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_uses_the_fair_and_write_releases() {
    let server = RedisServer::start();
    // Fair: the head of the queue is told on its own channel.
    java_hold(&server, "cli:fairstuck", 57, 1);
    server.command(&[
        "RPUSH",
        "redisson_lock_queue:{cli:fairstuck}",
        &java_owner(58),
    ]);
    let deadline = (epoch_ms() + 300_000).to_string();
    server.command(&[
        "ZADD",
        "redisson_lock_timeout:{cli:fairstuck}",
        &deadline,
        &java_owner(58),
    ]);
    let head = format!("{}:{}", lock_channel("cli:fairstuck"), java_owner(58));
    let mut head_listener = Listener::channel(&server, &head).await;
    let (done, code) = run_json(&server, &["force-unlock", "cli:fairstuck", "--yes"]);
    assert_eq!((done["as"].as_str(), code), (Some("fair_lock"), 0));
    assert_eq!(head_listener.next().await, (head.clone(), "0".to_string()));
    head_listener.quit().await;

    // Write mode: every waiter is told with "1" on the read-write channel.
    let writer = format!("{}:write", java_owner(3));
    server.command(&["HSET", "cli:wstuck", "mode", "write", &writer, "1"]);
    server.command(&["PEXPIRE", "cli:wstuck", "30000"]);
    let channel = "redisson_rwlock:{cli:wstuck}";
    let mut listener = Listener::channel(&server, channel).await;
    let (done, code) = run_json(&server, &["force-unlock", "cli:wstuck", "--yes"]);
    assert_eq!((done["as"].as_str(), code), (Some("write_lock"), 0));
    assert_eq!(
        listener.next().await,
        (channel.to_string(), "1".to_string())
    );
    assert_eq!(server.command(&["EXISTS", "cli:wstuck"]), "0");
    listener.quit().await;
}

#[test]
fn hold_takes_every_kind_and_releases_when_interrupted() {
    let server = RedisServer::start();
    for (kind, field_suffix) in [
        ("lock", ""),
        ("fair", ""),
        ("fenced", ""),
        ("spin", ""),
        ("non-reentrant", ""),
        ("non-reentrant-fair", ""),
        ("read", ""),
        ("write", ":write"),
    ] {
        let name = format!("cli:hold:{kind}");
        let holding = Running::start(&server, &["hold", &name, "--kind", kind, "--for", "60s"]);
        let acquired = holding.next_event("acquired");
        let owner = acquired["owner"].as_str().unwrap();
        let field = format!("{owner}{field_suffix}");
        assert_eq!(server.command(&["HGET", &name, &field]), "1", "{kind}");
        assert_eq!(acquired["token"].is_u64(), kind == "fenced", "{kind}");
        assert_eq!(holding.interrupt(), 130, "{kind}");
        assert_eq!(server.command(&["EXISTS", &name]), "0", "{kind} released");
    }
}

#[test]
fn hold_gives_up_after_its_wait_and_ends_after_its_time() {
    let server = RedisServer::start();
    java_hold(&server, "cli:busy", 57, 1);
    let (line, code) = run_json(&server, &["hold", "cli:busy", "--wait", "0"]);
    assert_eq!((line["event"].as_str(), code), (Some("not_acquired"), 1));
    assert_eq!(server.command(&["HGET", "cli:busy", JAVA_OWNER]), "1");

    let mut holding = Running::start(&server, &["hold", "cli:brief", "--for", "200ms"]);
    holding.next_event("acquired");
    holding.next_event("released");
    assert_eq!(holding.wait(), 0);
    assert_eq!(server.command(&["EXISTS", "cli:brief"]), "0");
}

#[test]
fn hold_exits_1_when_its_hold_was_force_unlocked() {
    let server = RedisServer::start();
    // Found lost at its release, when its time is up (the watchdog would find it only at its
    // next renewal, 10 s later) or when it is interrupted.
    for (name, interrupted) in [("cli:freed", false), ("cli:freed-interrupted", true)] {
        let mut holding = Running::start(&server, &["hold", name, "--for", "3s"]);
        holding.next_event("acquired");
        let (_, code) = run_json(&server, &["force-unlock", "--yes", name]);
        assert_eq!(code, 0, "{name}");
        let code = if interrupted {
            holding.interrupt()
        } else {
            holding.wait()
        };
        assert_eq!(code, 1, "{name}");
    }
    // The lost hold is told as such.
    let mut holding = Running::start(&server, &["hold", "cli:freed-told", "--for", "3s"]);
    holding.next_event("acquired");
    assert_eq!(server.command(&["DEL", "cli:freed-told"]), "1");
    let lost = holding.next_event("lease_lost");
    assert_eq!(lost["name"], "cli:freed-told");
    assert_eq!(holding.wait(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_acquisitions_releases_and_messages() {
    let server = RedisServer::start();
    let watching = Running::start(
        &server,
        &["watch", "cli:watched", "--interval", "20ms", "--for", "60s"],
    );
    let first = tokio::task::block_in_place(|| watching.next_event("state"));
    assert_eq!(first["state"], "free");
    // The watch listens once it has read the state: wait for its subscription.
    subscribed(&server, &lock_channel("cli:watched")).await;

    java_hold(&server, "cli:watched", 57, 1);
    let acquired = tokio::task::block_in_place(|| watching.next_event("acquired"));
    assert_eq!(acquired["field"], JAVA_OWNER);

    // A Rust unlock of the Java hold publishes the message the Java side would.
    let rust = client(&server).await;
    rust.lock("cli:watched")
        .unwrap()
        .unlock(&java_lock_owner(57))
        .await
        .unwrap();
    // The message and the state the watch reads come over two connections: either may be
    // reported first.
    let [message, released] =
        tokio::task::block_in_place(|| watching.next_events(["message", "released"]));
    assert_eq!(
        (message["channel"].as_str(), message["payload"].as_str()),
        (Some(lock_channel("cli:watched").as_str()), Some("0"))
    );
    assert_eq!(released["field"], JAVA_OWNER);
    assert_eq!(tokio::task::block_in_place(|| watching.interrupt()), 0);
    rust.shutdown().await;
}

/// Through a Cluster URL, `watch` listens where the unlock messages go: sharded pub/sub on
/// Redis 7.0 and later, classic pub/sub before (the servers have no `SSUBSCRIBE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_hears_a_cluster_s_messages_on_every_server() {
    let cluster = tokio::task::block_in_place(support::topology::Cluster::start);
    let (name, channel) = ("cli:cluster-watched", lock_channel("cli:cluster-watched"));
    let watching = Running::start_at(
        &cluster.url(),
        &["watch", name, "--interval", "20ms", "--for", "60s"],
    );
    let first = tokio::task::block_in_place(|| watching.next_event("state"));
    assert_eq!(first["state"], "free");
    let sharded = support::server::server_version() >= (7, 0);
    let listening = || {
        if sharded {
            let master = cluster.master_of(&channel);
            let reply = master.command(&["PUBSUB", "SHARDNUMSUB", &channel]);
            reply.lines().last() == Some("1")
        } else {
            cluster
                .servers
                .iter()
                .any(|node| subscribers(node, &channel) >= 1)
        }
    };
    eventually(10 * SECOND, "the watch to listen", listening).await;

    let rust = deployment_client(&cluster.url(), |b| b).await;
    let lock = rust.lock(name).unwrap();
    lock.lock(&rust.new_owner())
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let message = tokio::task::block_in_place(|| watching.next_event("message"));
    assert_eq!(
        (message["channel"].as_str(), message["payload"].as_str()),
        (Some(channel.as_str()), Some("0"))
    );
    assert_eq!(tokio::task::block_in_place(|| watching.interrupt()), 0);
    rust.shutdown().await;
}

#[test]
fn bad_arguments_and_an_unreachable_server_have_their_codes() {
    let output = Command::new(BIN)
        .args(["hold", "x", "--for", "soon"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    let output = Command::new(BIN)
        .args(["--url", &url, "inspect", "x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
}

/// With `--json` a failure is one JSON object on stdout, a refused argument included; a
/// negative duration is refused in words; the global options stay out of a command's help.
#[test]
fn arguments_are_refused_in_words_and_errors_in_json_are_json() {
    let json_error = |args: &[&str]| {
        let output = Command::new(BIN).args(args).output().unwrap();
        let error: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: no JSON ({e}): {output:?}"));
        assert!(output.stderr.is_empty(), "{output:?}");
        (error, output.status.code())
    };
    let (error, code) = json_error(&["--json", "watch", "x", "--interval", "-1s"]);
    assert_eq!((code, error["exit_code"].as_u64()), (Some(2), Some(2)));
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("\"-1s\" is negative"), "{message}");
    let output = Command::new(BIN)
        .args(["hold", "x", "--wait", "-5s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("is negative"), "{stderr}");

    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    // The global options after the command's name work as before it.
    let (error, code) = json_error(&["inspect", "x", "--url", &url, "--json"]);
    assert_eq!(code, Some(3));
    assert!(
        error["error"].as_str().unwrap().starts_with("connecting: "),
        "{error}"
    );

    let help = |args: &[&str]| {
        String::from_utf8(Command::new(BIN).args(args).output().unwrap().stdout).unwrap()
    };
    let top = help(&["--help"]);
    assert!(
        top.contains("--url <URL>") && top.contains("--json"),
        "{top}"
    );
    for command in ["inspect", "list", "force-unlock", "watch", "hold"] {
        let text = help(&[command, "--help"]);
        assert!(
            !text.contains("--url <") && !text.contains("--prefix <"),
            "{command}: {text}"
        );
    }
}

/// `--max-keys` bounds what `list` looks at, however small the database.
#[test]
fn list_stops_at_max_keys() {
    let server = RedisServer::start();
    for name in ["cli:max:a", "cli:max:b", "cli:max:c"] {
        java_hold(&server, name, 57, 1);
    }
    let (found, code) = run_json(&server, &["list", "cli:max:*"]);
    assert_eq!(code, 0);
    assert_eq!(found["locks"].as_array().map(Vec::len), Some(3));
    assert_eq!(found["incomplete"], false);
    let (found, _) = run_json(&server, &["list", "cli:max:*", "--max-keys", "1"]);
    assert!(found["locks"].as_array().unwrap().len() <= 1, "{found}");
    assert_eq!(found["incomplete"], true);
    let output = run(&server, &["list", "--max-keys", "0"]);
    assert_eq!(output.status.code(), Some(2));
}

/// `inspect`, `list` and `force-unlock` through a Cluster URL and a Sentinel URL, on a Java
/// hold written on the master that serves it.
#[test]
fn the_verbs_work_through_cluster_and_sentinel_urls() {
    let cluster = support::topology::Cluster::start();
    let sentinels = support::topology::SentinelSetup::start();
    let deployments = [
        (cluster.url(), cluster.master_of("{ops}:job")),
        (sentinels.url(), &sentinels.master),
    ];
    for (url, master) in deployments {
        java_hold(master, "{ops}:job", 57, 2);
        let (shown, code) = run_json_at(&url, &["inspect", "{ops}:job"]);
        assert_eq!(code, 0, "{url}: {shown}");
        assert_eq!(shown["holders"][0]["field"], JAVA_OWNER, "{url}: {shown}");
        assert_eq!(shown["holders"][0]["count"], 2, "{url}: {shown}");

        let (found, code) = run_json_at(&url, &["list", "{ops}:*"]);
        assert_eq!(code, 0, "{url}: {found}");
        assert_eq!(found["locks"][0]["name"], "{ops}:job", "{url}: {found}");

        let (_, code) = run_json_at(&url, &["force-unlock", "--yes", "{ops}:job"]);
        assert_eq!(code, 0, "{url}");
        assert_eq!(master.command(&["EXISTS", "{ops}:job"]), "0", "{url}");
    }
}

/// Ctrl-C while `watch` is busy reading the lock (here: the server asleep for a second) is
/// kept, not lost: the tool exits once the read ends, not at the end of `--for`.
#[test]
fn watch_exits_on_ctrl_c_that_comes_while_it_reads_the_lock() {
    let server = RedisServer::start_with_args(&["--enable-debug-command", "yes"]);
    let watching = Running::start(
        &server,
        &[
            "watch",
            "cli:busy-watched",
            "--interval",
            "20ms",
            "--for",
            "60s",
        ],
    );
    let first = watching.next_event("state");
    assert_eq!(first["state"], "free");
    let asleep = std::thread::spawn({
        let port = server.port();
        move || {
            let status = Command::new("redis-cli")
                .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "1"])
                .status();
            assert!(status.unwrap().success());
        }
    });
    // The tool reads the lock every 20 ms: within this time a read waits on the server.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(watching.interrupt(), 0);
    asleep.join().unwrap();
}
