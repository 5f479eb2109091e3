//! The pub/sub modes: where each publishes, what `Auto` waiters hear, and `Auto` decided again when the masters change.

use super::*;

/// In `Auto`, a waiter hears a Java client of either sharded mode: one that publishes with
/// PUBLISH (`OFF`, or Redisson before 3.22) and one that publishes with SPUBLISH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_waiters_hear_classic_and_sharded_publishers() {
    let cluster = shared_cluster();
    let client = cluster_client(&cluster, PubSubMode::Auto).await;
    let redis = client.redis().clone();
    // Before Redis 7.0 there is no SPUBLISH to hear.
    for publish in ["PUBLISH", "SPUBLISH"]
        .into_iter()
        .take(1 + has_sharded() as usize)
    {
        let name = format!("java-{publish}");
        let channel = lock_channel(&name);
        // A Java hold that outlives the test unless released.
        let _: () = redis.hset(&name, (JAVA_OWNER, 1)).await.unwrap();
        let _: () = redis.pexpire(&name, 60_000, None).await.unwrap();
        let lock = client.lock(&name).unwrap();
        let me = client.new_owner();
        let waiting = tokio::spawn(async move { lock.lock(&me).await });
        sharded_subscribed(&cluster, &channel).await;
        eventually(Duration::from_secs(10), "a classic subscriber", || {
            cluster
                .servers
                .iter()
                .any(|s| subscribers(s, &channel) >= 1)
        })
        .await;
        // The Java release: the hold goes, then the message.
        let _: () = redis.del(&name).await.unwrap();
        let master = cluster.master_of(&name);
        master.command(&[publish, &channel, "0"]);
        woken_and_released(publish, waiting).await;
    }
}

/// Which kinds of pub/sub a Java listener on `name`'s master hears our release of `name`
/// on: (classic, sharded).
async fn heard_release(cluster: &Cluster, client: &LockClient, name: &str) -> (bool, bool) {
    let channel = lock_channel(name);
    let master = cluster.master_of(name);
    let listener = Builder::from_config(Config::from_url(&master.url()).unwrap())
        .build_subscriber_client()
        .unwrap();
    listener.init().await.unwrap();
    let mut messages = listener.message_rx();
    listener.subscribe(channel.as_str()).await.unwrap();
    if has_sharded() {
        listener.ssubscribe(channel.as_str()).await.unwrap();
    }
    let _: Value = listener.ping(None).await.unwrap();

    let me = client.new_owner();
    let guard = client.lock(name).unwrap().lock(&me).await.unwrap();
    guard.unlock().await.unwrap();
    // A marker published after the release tells the listener it has seen everything.
    master.command(&["PUBLISH", &channel, "marker"]);
    let (mut heard_classic, mut heard_sharded) = (false, false);
    loop {
        let message = within(WAKE, "the marker", messages.recv()).await.unwrap();
        let payload: String = message.value.convert().unwrap();
        if payload == "marker" {
            break;
        }
        assert_eq!(payload, "0");
        match message.kind {
            fred::types::MessageKind::Message => heard_classic = true,
            fred::types::MessageKind::SMessage => heard_sharded = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    listener.quit().await.unwrap();
    (heard_classic, heard_sharded)
}

/// Which commands our release publishes with, by mode, as a Java listener of each kind
/// sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mode_publishes_where_it_says() {
    let cluster = shared_cluster();
    for (mode, classic, sharded) in [
        (PubSubMode::Auto, !has_sharded(), has_sharded()),
        (PubSubMode::Sharded, false, true),
        (PubSubMode::Classic, true, false),
        (PubSubMode::Both, true, true),
    ] {
        if sharded && !has_sharded() {
            // Before Redis 7.0 a mode that needs sharded pub/sub is refused when building.
            let refused = LockClient::builder()
                .url(&cluster.url())
                .pubsub_mode(mode)
                .build();
            assert!(matches!(
                refused.await,
                Err(redisson_lock::Error::InvalidArgument(_))
            ));
            continue;
        }
        let client = cluster_client(&cluster, mode).await;
        let heard = heard_release(&cluster, &client, &format!("published-{mode:?}")).await;
        assert_eq!(heard, (classic, sharded), "{mode:?}");
        client.shutdown().await;
    }
}

/// Arguments that make a Redis 7 node look like a Redis 6 one to pub/sub: no sharded
/// commands, and `PUBSUB` (whose `SHARDNUMSUB` tells them apart) under another name.
const WITHOUT_SHARDED_PUBSUB: &[&str] = &[
    "--rename-command",
    "SPUBLISH",
    "",
    "--rename-command",
    "SSUBSCRIBE",
    "",
    "--rename-command",
    "SUNSUBSCRIBE",
    "",
    "--rename-command",
    "PUBSUB",
    "PUBSUB-RENAMED",
];

/// `Auto` is decided again when the cluster's masters change, as in a rolling upgrade: while
/// one master lacks sharded pub/sub, classic; once a replica that has it took over, sharded
/// (and a waiter from before hears a Java SPUBLISH); once the old node is master again,
/// classic again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_is_decided_again_when_the_masters_change() {
    if !has_redis_7("auto_is_decided_again_when_the_masters_change", "SPUBLISH") {
        return;
    }
    let cluster = Cluster::start_with(|node| match node {
        0 => WITHOUT_SHARDED_PUBSUB,
        _ => &[],
    });
    let old = cluster.servers[0].port();
    let old_slot = cluster
        .nodes()
        .into_iter()
        .find(|n| n.port == old && n.master)
        .expect("node 0 starts as a master")
        .slots[0]
        .0;
    let client = cluster_client(&cluster, PubSubMode::Auto).await;
    // Locks on a master that has sharded pub/sub throughout.
    let on_a_modern_master = |prefix: &str| {
        (0..)
            .map(|i| format!("{prefix}-{i}"))
            .find(|name| cluster.master_of(name).port() != old)
            .unwrap()
    };
    let (name, waited) = (
        on_a_modern_master("redecided"),
        on_a_modern_master("waited"),
    );
    assert_eq!(heard_release(&cluster, &client, &name).await, (true, false));

    // A Java hold with a waiter that waits through the upgrade.
    let redis = client.redis().clone();
    let _: () = redis.hset(&waited, (JAVA_OWNER, 1)).await.unwrap();
    let _: () = redis.pexpire(&waited, 60_000, None).await.unwrap();
    let lock = client.lock(&waited).unwrap();
    let me = client.new_owner();
    let waiting = tokio::spawn(async move { lock.lock(&me).await });
    let channel = lock_channel(&waited);
    eventually(WAKE, "a classic subscriber", || {
        cluster.servers.iter().any(|s| {
            let pubsub = if s.port() == old {
                "PUBSUB-RENAMED"
            } else {
                "PUBSUB"
            };
            let reply = s.command(&[pubsub, "NUMSUB", &channel]);
            reply.lines().last().and_then(|n| n.parse().ok()) == Some(1u64)
        })
    })
    .await;

    // The upgrade: the old master's replica, which has sharded pub/sub, takes over.
    cluster.failover(old_slot);
    sharded_subscribed(&cluster, &channel).await;
    let _: () = redis.del(&waited).await.unwrap();
    cluster
        .master_of(&waited)
        .command(&["SPUBLISH", &channel, "0"]);
    woken_and_released("the waiter, by a sharded Java release", waiting).await;
    soon_heard(&cluster, &client, &name, (false, true)).await;

    // And back: the old node is master again.
    cluster.failover(old_slot);
    assert_eq!(cluster.master_of_slot(old_slot).port, old);
    soon_heard(&cluster, &client, &name, (true, false)).await;
    client.shutdown().await;
}

/// Waits until our release of `name` is heard as `expected` (see [`heard_release`]): the
/// client decides again within a topology check (a second) of the change.
async fn soon_heard(cluster: &Cluster, client: &LockClient, name: &str, expected: (bool, bool)) {
    let deadline = tokio::time::Instant::now() + WAKE;
    loop {
        let heard = heard_release(cluster, client, name).await;
        if heard == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "released as {heard:?}, not {expected:?}, {WAKE:?} after the change"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
