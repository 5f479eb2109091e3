//! Holds, waiters and scripts through a slot migration (MOVED, ASK, TRYAGAIN), a master failover and a node taken out.

use super::*;

/// A lock held in one client (3 s lease, renewed every second) with a waiter in another,
/// through `change` of the master serving its slot: the holder keeps renewing on the new
/// master, and the waiter wakes on the release, not at the lease's end.
async fn a_hold_and_a_waiter_live_through(name: &str, change: impl FnOnce(&Cluster, u16)) {
    let cluster = Cluster::start();
    let holder = cluster_client_with(&cluster, |b| b.watchdog_timeout(3 * SECOND)).await;
    let waiter = cluster_client(&cluster, PubSubMode::Auto).await;
    let (me, other) = (holder.new_owner(), waiter.new_owner());
    let guard = holder.lock(name).unwrap().lock(&me).await.unwrap();
    let waiting = tokio::spawn(waiter.lock(name).unwrap().lock(&other));
    let channel = lock_channel(name);
    sharded_subscribed(&cluster, &channel).await;

    let slot = cluster.slot(name);
    let before = cluster.master_of_slot(slot);
    change(&cluster, slot);
    assert_ne!(cluster.master_of_slot(slot).id, before.id);
    // The waiter's subscription followed the slot to its new master.
    sharded_subscribed(&cluster, &channel).await;
    // Longer than the lease: the hold is still there only if renewals reached the new master.
    tokio::time::sleep(4 * SECOND).await;
    assert!(!guard.is_lease_lost());
    assert!(pttl(cluster.master_of(name), name) > 0);
    assert!(!waiting.is_finished());

    guard.unlock().await.unwrap();
    woken_and_released("the waiter after the change", waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_and_a_waiter_live_through_a_slot_migration() {
    a_hold_and_a_waiter_live_through("migrated", |cluster, slot| {
        cluster.migrate_slot(slot, &cluster.other_master(slot))
    })
    .await;
}

/// `CLUSTER FAILOVER` on the replica of the lock's master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_and_a_waiter_live_through_a_master_failover() {
    a_hold_and_a_waiter_live_through("failed-over", |cluster, slot| {
        cluster.failover(slot);
    })
    .await;
}

/// The master holding a classic subscriber of `channel` (classic subscriptions are local to
/// a node of a cluster).
fn classic_subscriber_node(cluster: &Cluster, channel: &str) -> Option<ClusterNode> {
    cluster.nodes().into_iter().filter(|n| n.master).find(|n| {
        let reply = cluster
            .server(n.port)
            .command(&["PUBSUB", "NUMSUB", channel]);
        reply.lines().last().unwrap().parse::<u64>().unwrap() >= 1
    })
}

/// A node taken out of the cluster: its slots move to another master, which makes it that
/// master's replica, and then it stops. The client keeps no connection to it and gets no
/// reconnect; classic subscriptions made on it are made again on a master, and the waiter
/// still wakes on the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_waiters_follow_their_subscriptions_off_a_node_taken_out() {
    let mut cluster = Cluster::start();
    let holder = cluster_client(&cluster, PubSubMode::Classic).await;
    let waiter = cluster_client(&cluster, PubSubMode::Classic).await;
    let (me, other) = (holder.new_owner(), waiter.new_owner());
    let name = "taken-out";
    let guard = holder.lock(name).unwrap().lock(&me).await.unwrap();
    let waiting = tokio::spawn(waiter.lock(name).unwrap().lock(&other));
    let channel = lock_channel(name);
    let mut node = None;
    eventually(WAKE, "a classic subscriber", || {
        node = classic_subscriber_node(&cluster, &channel);
        node.is_some()
    })
    .await;
    let node = node.unwrap();
    let to = (cluster.nodes().into_iter())
        .find(|n| n.master && n.id != node.id)
        .unwrap();
    cluster.empty_master(&node, &to);
    eventually(WAKE, "a subscriber on a master", || {
        classic_subscriber_node(&cluster, &channel).is_some_and(|n| n.id != node.id)
    })
    .await;
    let at = cluster.servers.iter().position(|s| s.port() == node.port);
    cluster.servers[at.unwrap()].kill();
    guard.unlock().await.unwrap();
    woken_and_released("the waiter after its node was taken out", waiting).await;
}

/// A client that still routes a slot to its old master follows the `MOVED` its scripts
/// get: the first release and the first acquire after a move run on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_follow_a_slot_moved_behind_the_clients_back() {
    let cluster = Cluster::start();
    let client = cluster_client(&cluster, PubSubMode::Auto).await;
    let me = client.new_owner();
    let name = "moved";
    let lock = client.lock(name).unwrap();
    let slot = cluster.slot(name);
    let guard = lock.lock(&me).await.unwrap();
    cluster.migrate_slot(slot, &cluster.other_master(slot));
    guard.unlock().await.expect("the release follows MOVED");
    assert_eq!(pttl(cluster.master_of(name), name), -2);

    cluster.migrate_slot(slot, &cluster.other_master(slot));
    let guard = lock.try_lock(&me).await.expect("the acquire follows MOVED");
    let guard = guard.expect("the lock is free");
    assert!(pttl(cluster.master_of(name), name) > 0);
    guard.unlock().await.unwrap();
}

/// While a slot migrates, its old master answers `ASK` for the keys it does not have (a
/// hold already moved, a lock never taken); scripts follow it to the importing master. A
/// hold taken there excludes another client's, and holds there are renewed and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_follow_ask_while_a_slot_migrates() {
    let cluster = Cluster::start();
    let client = cluster_client_with(&cluster, |b| b.watchdog_timeout(3 * SECOND)).await;
    let other = cluster_client(&cluster, PubSubMode::Auto).await;
    let (me, them) = (client.new_owner(), other.new_owner());
    let (moved, fresh) = ("{asked}held", "{asked}fresh");
    let held = client.lock(moved).unwrap().lock(&me).await.unwrap();
    let slot = cluster.slot(moved);
    let to = cluster.other_master(slot);
    let from = cluster.begin_migration(slot, &to);
    cluster.move_keys(slot, &from, &to);
    let keys_in_slot = |node: &ClusterNode| -> u64 {
        let count = ["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()];
        cluster.server(node.port).command(&count).parse().unwrap()
    };

    let fresh_lock = client.lock(fresh).unwrap();
    let taken = fresh_lock
        .try_lock(&me)
        .await
        .expect("the acquire follows ASK");
    let taken = taken.expect("the lock is free");
    let reentered = fresh_lock.try_lock(&me).await.unwrap().expect("a re-entry");
    assert_eq!((keys_in_slot(&from), keys_in_slot(&to) >= 2), (0, true));
    let theirs = other.lock(fresh).unwrap();
    assert!(theirs.try_lock(&them).await.unwrap().is_none());

    // Longer than the lease: the holds are still there only if renewals followed ASK.
    tokio::time::sleep(4 * SECOND).await;
    assert!(!held.is_lease_lost() && !taken.is_lease_lost());
    assert_eq!(keys_in_slot(&from), 0);

    // A release names keys that do not exist (its channel, its latch), which a migrating
    // slot's masters refuse with TRYAGAIN: it is sent again until the migration ends.
    let try_again_before = refused_with_try_again(&cluster, [&from, &to]);
    let releasing = tokio::spawn(reentered.unlock());
    refused_again(&cluster, [&from, &to], try_again_before + 4).await;
    cluster.end_migration(slot, &from, &to);
    releasing
        .await
        .unwrap()
        .expect("the release follows the migration");
    taken.unlock().await.unwrap();
    held.unlock().await.unwrap();
    let guard = theirs.try_lock(&them).await.unwrap().expect("released");
    guard.unlock().await.unwrap();
}

/// A release whose hash is still on a master that began to migrate its slot finds the hash
/// there but not its channel or latch, and the master refuses it with TRYAGAIN at once (no
/// ASK first). With a replica to confirm it, the release goes with a WAIT right behind it; it
/// is sent again until the migration ends, not only as often as a release resends a lost
/// reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_a_wait_behind_it_is_sent_again_while_refused_with_try_again() {
    let cluster = Cluster::start();
    let client = cluster_client(&cluster, PubSubMode::Auto).await;
    let me = client.new_owner();
    let name = "{split}held";
    let guard = client.lock(name).unwrap().lock(&me).await.unwrap();
    let slot = cluster.slot(name);
    let to = cluster.other_master(slot);
    let from = cluster.begin_migration(slot, &to);
    let try_again_before = refused_with_try_again(&cluster, [&from, &to]);

    let releasing = tokio::spawn(guard.unlock());
    refused_again(&cluster, [&from, &to], try_again_before + 5).await;
    // The migration is called off: the slot stays with the master that has the hash.
    let slot_text = slot.to_string();
    for node in [&to, &from] {
        let stable = ["CLUSTER", "SETSLOT", &slot_text, "STABLE"];
        assert_eq!(cluster.server(node.port).command(&stable), "OK");
    }
    releasing
        .await
        .unwrap()
        .expect("the release is sent again until the migration ends");
    assert_eq!(pttl(cluster.master_of(name), name), -2);
}

/// Waits until `nodes` have refused `count` commands with TRYAGAIN in all: more than a
/// release is resent after a lost reply, when `count` is taken high enough.
async fn refused_again(cluster: &Cluster, nodes: [&ClusterNode; 2], count: u64) {
    eventually(
        10 * SECOND,
        "a release refused more often than it is resent after a lost reply",
        || refused_with_try_again(cluster, nodes) >= count,
    )
    .await;
}

/// How many commands `nodes` refused with TRYAGAIN.
fn refused_with_try_again<'a>(
    cluster: &Cluster,
    nodes: impl IntoIterator<Item = &'a ClusterNode>,
) -> u64 {
    nodes
        .into_iter()
        .map(|node| {
            let stats = cluster.server(node.port).command(&["INFO", "errorstats"]);
            stats
                .lines()
                .find_map(|line| line.strip_prefix("errorstat_TRYAGAIN:count="))
                .map_or(0, |count| count.trim().parse().unwrap())
        })
        .sum()
}

/// A client whose slot map is behind a move, while the slot migrates back, is redirected
/// by the master it still knows, not by an `ASK`: the lock's new master still has the lock
/// and answers busy. Sending the script to the importing master would take it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_behind_a_move_never_takes_a_lock_on_the_importing_master() {
    let cluster = Cluster::start();
    let behind = cluster_client(&cluster, PubSubMode::Auto).await;
    let me = behind.new_owner();
    let name = "behind";
    let slot = cluster.slot(name);
    let lock = behind.lock(name).unwrap();
    take_and_release(&lock, &me).await;
    let (first, second) = (cluster.master_of_slot(slot), cluster.other_master(slot));
    cluster.migrate_slot(slot, &second);
    let holder = cluster_client(&cluster, PubSubMode::Auto).await;
    let guard = holder.lock(name).unwrap().lock(&holder.new_owner()).await;
    let guard = guard.unwrap();
    cluster.begin_migration(slot, &first);

    assert!(lock.try_lock(&me).await.unwrap().is_none());
    let count = ["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()];
    assert_eq!(cluster.server(first.port).command(&count), "0");
    drop(guard);
}

/// The driver's connection task stops for good when a command with no attempt left is
/// redirected by an `ASK` (a per-call `max_attempts` of 1 is enough): every later command of
/// that fred client would time out. The lock client starts the connections it made again,
/// so `redis()` and the locks go on working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_task_stopped_by_an_ask_is_started_again() {
    let cluster = Cluster::start();
    let client = cluster_client(&cluster, PubSubMode::Auto).await;
    let name = "stopped-by-ask";
    let slot = cluster.slot(name);
    let to = cluster.other_master(slot);
    let from = cluster.begin_migration(slot, &to);
    let once = Options {
        max_attempts: Some(1),
        ..Default::default()
    };
    let asked: Result<Option<String>, _> = client.redis().with_options(&once).get(name).await;
    assert!(asked.is_err(), "{asked:?}");
    cluster.end_migration(slot, &from, &to);

    let start = std::time::Instant::now();
    loop {
        let read: Result<Option<String>, _> = client.redis().get(name).await;
        if read.is_ok() {
            break;
        }
        assert!(
            start.elapsed() < 15 * SECOND,
            "redis() still fails: {read:?}"
        );
    }
    let lock = client.lock(name).unwrap();
    let guard = lock.try_lock(&client.new_owner()).await.unwrap().unwrap();
    assert!(lock.is_locked().await.unwrap());
    guard.unlock().await.unwrap();
}

/// Semaphores and latches worked all along failovers of the semaphore's master and a slot
/// migration: no permit lost or added, every release and count-down made once, every
/// latch's waiters open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_permit_or_count_down_is_lost_through_failovers_and_migrations() {
    let cluster = shared_cluster();
    let client = cluster_client_with(&cluster, |b| b.command_timeout(Duration::from_secs(2))).await;
    let until = std::time::Instant::now() + Duration::from_secs(12);
    let working = support::synchronizers::Synchronizers::start(&client, "c-churn:", until).await;
    let slot = cluster.slot("c-churn:sem");
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| {
        cluster.failover(slot);
        cluster.migrate_slot(slot, &cluster.other_master(slot));
        cluster.failover(slot);
    });
    let observer = cluster_client_with(&cluster, |b| b).await;
    let (violations, done) = working.finish(&observer).await;
    eprintln!("{done}");
    assert!(violations.is_empty(), "{violations:#?}");
    let report = client.shutdown().await;
    assert_eq!(report.unfinished, 0, "{report:?}");
}
