//! The `redisson-lock` binary's `inspect` and `list` on semaphores and count-down latches:
//! each shown in its own words (permits, leases, waiters, a latch's count), told apart by
//! whose waiters listen or by `--kind`, never taken for a lock, and never guessed to be one
//! kind or the other when nothing tells.

mod support;
#[path = "support/tool.rs"]
mod tool;

use std::time::Duration;

use redisson_lock::fred::prelude::*;
use support::topology::Cluster;
use support::*;
use tool::*;

/// The listeners the inspection counted on `channel`.
fn listeners(state: &serde_json::Value, channel: &str) -> Option<u64> {
    let channels = state["channels"].as_array()?;
    let found = channels.iter().find(|c| c["channel"] == channel)?;
    found["listeners"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_semaphore_s_permits_and_its_waiters() {
    let server = RedisServer::start();
    let (holder, other) = (client(&server).await, client(&server).await);
    let sem = holder.semaphore("cli:sem").unwrap();
    assert!(sem.try_set_permits(3).await.unwrap());
    let channel = "redisson_sc:{cli:sem}";
    let latch_channel = "redisson_countdownlatch__channel__{cli:sem}";

    let (state, code) = tokio::task::block_in_place(|| run_json(&server, &["inspect", "cli:sem"]));
    assert_eq!(code, 0);
    assert_eq!(state["state"], "counter");
    assert_eq!(state["counter"], 3);
    assert_eq!(state["holders"].as_array().map(Vec::len), Some(0));
    assert_eq!(listeners(&state, channel), Some(0));
    assert_eq!(listeners(&state, latch_channel), Some(0));
    // Nothing tells a semaphore from a latch yet: not guessed.
    assert_eq!(state["object"], "counter");
    let human = String::from_utf8(
        tokio::task::block_in_place(|| run(&server, &["inspect", "cli:sem"])).stdout,
    )
    .unwrap();
    assert!(human.starts_with("counter   cli:sem"), "{human}");
    assert!(human.contains("does not tell which"), "{human}");
    // Named, it is shown as one.
    let (state, _) = tokio::task::block_in_place(|| {
        run_json(&server, &["inspect", "cli:sem", "--kind", "semaphore"])
    });
    assert_eq!(
        (state["object"].as_str(), state["permits"]["free"].as_i64()),
        (Some("semaphore"), Some(3))
    );

    // A waiter of another client wants more than there are: it listens on the channel.
    let waiter = other.semaphore("cli:sem").unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .try_acquire_many_for(5, Duration::from_secs(60))
            .await
    });
    subscribed(&server, channel).await;
    let (state, _) = tokio::task::block_in_place(|| run_json(&server, &["inspect", "cli:sem"]));
    assert_eq!(listeners(&state, channel), Some(1));
    assert_eq!(listeners(&state, latch_channel), Some(0));
    // Its waiter tells what it is.
    assert_eq!(state["object"], "semaphore");
    let human = String::from_utf8(
        tokio::task::block_in_place(|| run(&server, &["inspect", "cli:sem"])).stdout,
    )
    .unwrap();
    assert!(human.starts_with("semaphore cli:sem"), "{human}");
    assert!(human.contains("permits   3 free"), "{human}");
    assert!(
        human.contains(&format!(
            "waiters   1 connection(s) listening on {channel}  (a semaphore's waiters)"
        )),
        "{human}"
    );
    assert!(!human.contains("lock"), "{human}");

    sem.release(2).await.unwrap();
    assert!(within(WAKE, "the waiter", waiting).await.unwrap().unwrap());
    // Never freed as if it were a lock.
    let output =
        tokio::task::block_in_place(|| run(&server, &["force-unlock", "cli:sem", "--yes"]));
    assert_eq!(output.status.code(), Some(5));
    assert_eq!(server.command(&["GET", "cli:sem"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_latch_s_count_and_its_waiters() {
    let server = RedisServer::start();
    let (opener, other) = (client(&server).await, client(&server).await);
    let latch = opener.count_down_latch("cli:latch").unwrap();
    assert!(latch.try_set_count(2).await.unwrap());
    let channel = "redisson_countdownlatch__channel__{cli:latch}";
    let waiter = other.count_down_latch("cli:latch").unwrap();
    let waiting = tokio::spawn(async move { waiter.wait_for(Duration::from_secs(60)).await });
    subscribed(&server, channel).await;

    let (state, code) =
        tokio::task::block_in_place(|| run_json(&server, &["inspect", "cli:latch"]));
    assert_eq!(code, 0);
    assert_eq!(
        (state["state"].as_str(), state["counter"].as_i64()),
        (Some("counter"), Some(2))
    );
    assert_eq!(listeners(&state, channel), Some(1));
    assert_eq!(listeners(&state, "redisson_sc:{cli:latch}"), Some(0));
    assert_eq!(
        (state["object"].as_str(), state["count"].as_i64()),
        (Some("count_down_latch"), Some(2))
    );
    assert_eq!(state["open"], false);
    let human = String::from_utf8(
        tokio::task::block_in_place(|| run(&server, &["inspect", "cli:latch"])).stdout,
    )
    .unwrap();
    assert!(human.starts_with("count-down latch cli:latch"), "{human}");
    assert!(human.contains("count     2: closed"), "{human}");
    assert!(
        human.contains(&format!(
            "waiters   1 connection(s) listening on {channel}  (a count-down latch's waiters)"
        )),
        "{human}"
    );

    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    assert!(within(WAKE, "the waiter", waiting).await.unwrap().unwrap());
    // An open latch is no key at all.
    let (state, _) = tokio::task::block_in_place(|| run_json(&server, &["inspect", "cli:latch"]));
    assert_eq!(state["state"], "free");
    assert_eq!(state["counter"], serde_json::Value::Null);
    // Named a latch, no key is an open one.
    let args = ["inspect", "cli:latch", "--kind", "count-down-latch"];
    let (state, _) = tokio::task::block_in_place(|| run_json(&server, &args));
    assert_eq!(
        (state["count"].as_i64(), state["open"].as_bool()),
        (Some(0), Some(true))
    );
    let human =
        String::from_utf8(tokio::task::block_in_place(|| run(&server, &args)).stdout).unwrap();
    assert!(human.contains("count     0: open"), "{human}");
}

#[test]
fn list_counters_finds_semaphores_and_latches_and_no_lock_s_own_keys() {
    let server = RedisServer::start();
    // As Java writes them: a semaphore's permits and a latch's count are bare numbers.
    server.command(&["SET", "app1:jobs:sem", "4"]);
    server.command(&["SET", "app1:jobs:latch", "2"]);
    server.command(&["SET", "app1:jobs:text", "hello"]);
    java_hold(&server, "app1:jobs:lock", 57, 1);
    // Numbers a lock's own name makes: a fencing token, a read hold's timeout key.
    server.command(&["SET", "redisson_lock_token:{app1:jobs:lock}", "7"]);
    server.command(&[
        "SET",
        &format!("{{app1:jobs:rw}}:{}:rwlock_timeout:1", java_owner(1)),
        "1",
    ]);

    let (found, code) = run_json(
        &server,
        &["--prefix", "app1:", "list", "--counters", "jobs:*"],
    );
    assert_eq!(code, 0);
    let names: Vec<(&str, &str)> = (found["locks"].as_array().unwrap().iter())
        .map(|l| (l["name"].as_str().unwrap(), l["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("jobs:latch", "counter"),
            ("jobs:lock", "exclusive"),
            ("jobs:sem", "counter")
        ]
    );
    assert_eq!(found["locks"][2]["counter"], 4);

    // Without --counters only locks; with an empty prefix still none of the locks' own keys.
    let (found, _) = run_json(&server, &["--prefix", "app1:", "list", "jobs:*"]);
    assert_eq!(found["locks"].as_array().map(Vec::len), Some(1));
    let text = String::from_utf8(run(&server, &["list", "--counters"]).stdout).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("app1:jobs:sem\tcounter\tcount=4\tlisteners=0"),
        "{text}"
    );
}

/// On a cluster, the listeners of a latch whose channel Java braces into another slot than
/// its key (a name with a `}`) are counted on the channel's own master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_braced_latch_s_listeners_are_counted_where_they_are() {
    let cluster = tokio::task::block_in_place(Cluster::start);
    // A name whose key and channel have different masters.
    let (name, channel) = (0..)
        .map(|i| {
            let name = format!("{{cli{i}}}:latch");
            let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
            (name, channel)
        })
        .find(|(name, channel)| cluster.master_of(name).port() != cluster.master_of(channel).port())
        .unwrap();
    cluster.master_of(&name).command(&["SET", &name, "1"]);
    // A Java waiter's subscription on the channel's master: sharded where servers have it.
    let sharded = support::server::server_version() >= (7, 0);
    let master = cluster.master_of(&channel);
    let listener = Builder::from_config(Config::from_url(&master.url()).unwrap())
        .build_subscriber_client()
        .unwrap();
    listener.init().await.unwrap();
    if sharded {
        listener.ssubscribe(channel.as_str()).await.unwrap();
    } else {
        listener.subscribe(channel.as_str()).await.unwrap();
    }
    let _: Value = listener.ping(None).await.unwrap();

    let (state, code) =
        tokio::task::block_in_place(|| run_json_at(&cluster.url(), &["inspect", &name]));
    assert_eq!(code, 0);
    assert_eq!(state["counter"], 1);
    if sharded {
        assert_eq!(listeners(&state, &channel), Some(1), "{state}");
    } else {
        // Classic pub/sub: NUMSUB counts only the node it asks; no count is promised.
        assert!(listeners(&state, &channel).is_some(), "{state}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_a_permit_expirable_semaphore_s_leased_permits() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.permit_expirable_semaphore("cli:pes").unwrap();
    assert!(sem.try_set_permits(3).await.unwrap());
    let lasting = sem.acquire(None).await.unwrap();
    let leased = sem.acquire(Some(Duration::from_secs(600))).await.unwrap();
    // A permit whose lease ended, not reaped yet: taken by a Java client that died, say
    // (16 bytes, printable here for redis-cli).
    server.command(&["ZADD", "{cli:pes}:timeout", "1000", "java-permit-0001"]);
    let ended: String = "java-permit-0001"
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();

    let (state, code) = tokio::task::block_in_place(|| run_json(&server, &["inspect", "cli:pes"]));
    assert_eq!(code, 0);
    assert_eq!(
        (state["state"].as_str(), state["counter"].as_i64()),
        (Some("counter"), Some(1))
    );
    assert_eq!(state["object"], "permit_expirable_semaphore");
    assert_eq!(
        state["permits"],
        serde_json::json!({"free": 1, "taken": 3, "total": 4})
    );
    assert_eq!(state["leased_permits_len"], 3);
    let permits = state["leased_permits"].as_array().unwrap();
    let ids: Vec<&str> = permits.iter().map(|p| p["id"].as_str().unwrap()).collect();
    // Earliest expiry first: the ended one, the leased one, then the one without a lease.
    assert_eq!(ids, [&*ended, &leased.to_string(), &lasting.to_string()]);
    assert_eq!(permits[0]["expires_in_ms"], 0);
    assert!(permits[1]["expires_in_ms"].as_u64().unwrap() > 500_000);
    assert!(permits[2]["expires_epoch_ms"].is_null(), "no lease");

    let human = String::from_utf8(
        tokio::task::block_in_place(|| run(&server, &["inspect", "cli:pes"])).stdout,
    )
    .unwrap();
    assert!(
        human.starts_with("permit-expirable semaphore cli:pes"),
        "{human}"
    );
    assert!(
        human.contains("permits   1 free, 3 taken, 4 in all; 1 of them with an ended lease"),
        "{human}"
    );
    assert!(
        human.contains("leases    3 taken permit(s) listed in {cli:pes}:timeout"),
        "{human}"
    );
    assert!(
        human.contains("waiters   none: nobody listens on redisson_sc:{cli:pes}"),
        "{human}"
    );
    assert!(!human.contains("does not tell"), "{human}");
    assert!(
        human.contains(&format!("{ended}  lease ended: back in the pool")),
        "{human}"
    );
    assert!(
        human.contains(&format!("{lasting}  no lease: taken until released")),
        "{human}"
    );
    let list = String::from_utf8(
        tokio::task::block_in_place(|| run(&server, &["list", "--counters"])).stdout,
    )
    .unwrap();
    assert!(
        list.contains("cli:pes\tpermit_expirable_semaphore\tfree=1\ttaken=3\t"),
        "{list}"
    );
}
