//! Replica acknowledgement on a master with a replica: every acquisition and release waits
//! until the replica has it, the tasks of a client sharing WAITs; when the replica does not
//! confirm (paused, or cut off by the network), an acquisition is undone and fails clearly,
//! and with the check off it goes ahead.

mod support;

use std::sync::Arc;
use std::time::Duration;

use redisson_lock::{Error, LockClient, LockClientBuilder};
use support::proxy::{FaultProxy, Net};
use support::topology::{replicated, start_replica_via, start_replicated_master};
use support::*;

async fn client_of(
    master: &RedisServer,
    configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    deployment_client(&master.url(), configure).await
}

/// Promotes `replica` (`REPLICAOF NO ONE`) and waits until `master` counts no replica.
async fn promote(replica: &RedisServer, master: &RedisServer) {
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    eventually(WAKE, "the old master to count no replica", || {
        (master.command(&["INFO", "replication"])).contains("connected_slaves:0")
    })
    .await;
}

/// Takes and releases `lock` for a new owner of `client`, which has then counted the
/// replicas of the lock's master.
async fn lock_and_unlock(client: &LockClient, lock: &redisson_lock::Lock) {
    let owner = client.new_owner();
    confirmed("a lock and unlock", || async {
        lock.lock(&owner).await?.unlock().await
    })
    .await;
}

/// Pauses `replica` for `seconds` in a thread of its own; joins when dropped.
struct Paused(Option<std::thread::JoinHandle<()>>);

impl Paused {
    fn pause(replica: &RedisServer, seconds: u32) -> Paused {
        let port = replica.port();
        let seconds = seconds.to_string();
        let paused = std::thread::spawn(move || {
            let mut connection = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            use std::io::{Read, Write};
            let command = format!(
                "*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n${}\r\n{seconds}\r\n",
                seconds.len()
            );
            connection.write_all(command.as_bytes()).unwrap();
            let _ = connection.read(&mut [0; 64]);
        });
        Paused(Some(paused))
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(paused) = self.0.take() {
            let _ = paused.join();
        }
    }
}

/// Seconds since the master's replica last acknowledged (`lag` in `INFO replication`).
fn replica_lag(master: &RedisServer) -> u64 {
    let info = master.command(&["INFO", "replication"]);
    let line = info
        .lines()
        .find(|l| l.starts_with("slave0:"))
        .expect("a replica");
    let lag = line
        .split(',')
        .find_map(|f| f.strip_prefix("lag="))
        .unwrap();
    lag.trim().parse().unwrap()
}

#[tokio::test]
async fn acquisitions_and_releases_wait_for_the_replica() {
    let (master, replica) = replicated();
    let client = client_of(&master, |b| b).await;
    let me = client.new_owner();
    // Load the scripts: a WAIT behind an EVALSHA refused with NOSCRIPT is sent again after it.
    let warm = client.lock("warm").unwrap().lock(&me).await.unwrap();
    assert_eq!(replica.command(&["EXISTS", "warm"]), "1");
    warm.unlock().await.unwrap();
    let lock = client.lock("acknowledged").unwrap();
    let before = command_calls(&master, "wait");
    let guard = lock.lock(&me).await.unwrap();
    // The acquisition returned after the replica confirmed it: it is there already.
    assert_eq!(replica.command(&["EXISTS", "acknowledged"]), "1");
    guard.unlock().await.unwrap();
    assert_eq!(replica.command(&["EXISTS", "acknowledged"]), "0");
    assert_eq!(command_calls(&master, "wait"), before + 2);
    assert!(lock.force_unlock().await.is_ok());
}

/// Tasks of one client share WAITs (one in flight per master covers every write sent before
/// it), and each acquisition still returns only once the replica has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquisitions_share_waits() {
    let (master, replica) = replicated();
    let client = client_of(&master, |b| b).await;
    let replica = Arc::new(replica);
    let (tasks, rounds) = (16, 8);
    let before = command_calls(&master, "wait");
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (client, replica) = (client.clone(), replica.clone());
            tokio::spawn(async move {
                let name = format!("shared-wait-{task}");
                let lock = client.lock(&name).unwrap();
                let me = client.new_owner();
                for _ in 0..rounds {
                    let guard = lock.lock(&me).await.unwrap();
                    assert_eq!(replica.command(&["EXISTS", &name]), "1");
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    all_finish(Duration::from_secs(60), "the tasks", handles).await;
    let waits = command_calls(&master, "wait") - before;
    let operations = 2 * tasks * rounds;
    assert!(
        waits > 0 && waits < operations as u64,
        "{waits} WAITs for {operations} acquisitions and releases"
    );
}

#[tokio::test]
async fn an_acquisition_no_replica_confirms_is_undone() {
    let (master, replica) = replicated();
    let checked = client_of(&master, |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
    })
    .await;
    let unchecked = client_of(&master, |b| b.wait_for_replicas(None)).await;
    // Learn that the master has a replica while it still answers.
    lock_and_unlock(&checked, &checked.lock("warm").unwrap()).await;

    let held = checked.lock("released-unconfirmed").unwrap();
    let held_owner = checked.new_owner();
    let held_guard = confirmed("a hold", || held.lock(&held_owner)).await;

    let paused = Paused::pause(&replica, 5);
    // A replica acknowledges every second; one silent for longer is paused.
    eventually(
        Duration::from_secs(5),
        "the replica to stop confirming",
        || replica_lag(&master) >= 2,
    )
    .await;
    // Several at once: those that join a WAIT in flight learn its answer too.
    let others: Vec<_> = (0..4)
        .map(|i| {
            let lock = checked.lock(&format!("unconfirmed-{i}")).unwrap();
            let owner = checked.new_owner();
            tokio::spawn(async move { lock.try_lock(&owner).await.map(|guard| guard.is_some()) })
        })
        .collect();
    let me = checked.new_owner();
    let lock = checked.lock("unconfirmed").unwrap();
    let result = lock.try_lock(&me).await;
    for other in all_finish(Duration::from_secs(30), "the others", others).await {
        assert!(
            matches!(other, Err(Error::NotReplicated { .. })),
            "{other:?}"
        );
    }
    for i in 0..4 {
        assert_eq!(
            master.command(&["EXISTS", &format!("unconfirmed-{i}")]),
            "0"
        );
    }
    match result {
        Err(Error::NotReplicated { ref name, timeout }) => {
            assert_eq!(name, "unconfirmed");
            assert_eq!(timeout, Duration::from_millis(300));
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(result.unwrap_err().is_retryable());
    // Undone on the master: nobody holds the lock.
    assert_eq!(master.command(&["EXISTS", "unconfirmed"]), "0");
    assert!(!lock.is_held_by(&me).await.unwrap());
    assert_eq!(
        checked.renewed_holds(),
        1,
        "only the hold taken before the pause"
    );

    // A release no replica confirms happened on the master, and says so.
    let released = held_guard.unlock().await;
    assert!(
        matches!(released, Err(Error::NotReplicated { .. })),
        "{released:?}"
    );
    assert_eq!(master.command(&["EXISTS", "released-unconfirmed"]), "0");

    // With the check off, the same acquisition goes ahead.
    let other = unchecked.new_owner();
    let guard = unchecked
        .lock("unconfirmed")
        .unwrap()
        .try_lock(&other)
        .await
        .unwrap()
        .expect("free");
    drop(paused);
    guard.unlock().await.unwrap();
}

/// A replica cut off from its master by the network (its link open, nothing passing) does
/// not confirm: the acquisition is undone and fails clearly, and once the network heals
/// acquisitions go ahead. A replica that stops replicating for good is no longer waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_its_master_confirms_nothing() {
    let master = start_replicated_master();
    let link = FaultProxy::start(master.port()).await;
    let replica = tokio::task::block_in_place(|| start_replica_via(&master, link.port()));
    let client = client_of(&master, |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
            .watchdog_timeout(Duration::from_secs(2))
    })
    .await;
    let lock = client.lock("cut-off").unwrap();
    let me = client.new_owner();
    confirmed("a warm-up", || async {
        lock.lock(&me).await?.unlock().await
    })
    .await;

    link.set(Net::BlackHole);
    match lock.try_lock(&me).await {
        Err(Error::NotReplicated { name, .. }) => assert_eq!(name, "cut-off"),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert_eq!(master.command(&["EXISTS", "cut-off"]), "0", "undone");

    link.set(Net::Clear);
    let guard = within(WAKE, "an acquisition once the network healed", async {
        loop {
            match lock.try_lock(&me).await {
                Ok(guard) => return guard.expect("free"),
                Err(Error::NotReplicated { .. }) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
    })
    .await;
    assert_eq!(replica.command(&["EXISTS", "cut-off"]), "1");
    guard.unlock().await.unwrap();

    // Gone for good: the master counts no replica, and once the grace for a failover has
    // passed since the client first read that (thirty seconds with this short watchdog
    // lease), nothing is waited for.
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    within(WAKE * 9, "a lock + unlock without WAIT", async {
        loop {
            let waits = command_calls(&master, "wait");
            // Until the client reads the new count, its old one may still fail an operation.
            let done = match lock.try_lock(&me).await {
                Ok(guard) => guard.expect("free").unlock().await,
                Err(error) => Err(error),
            };
            match done {
                Ok(()) | Err(Error::NotReplicated { .. }) => {}
                Err(other) => panic!("{other:?}"),
            }
            if done.is_ok() && command_calls(&master, "wait") == waits {
                return;
            }
        }
    })
    .await;
}

/// `server`'s process id.
fn process_id(server: &RedisServer) -> String {
    let info = server.command(&["INFO", "server"]);
    let pid = info
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"));
    pid.unwrap().trim().to_owned()
}

/// Sends `signal` to the process `pid`: a replica stopped (`-STOP`) acknowledges nothing
/// from the moment this returns, until it is continued (`-CONT`).
fn signal(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status();
    assert!(status.unwrap().success());
}

/// The connection drops while a WAIT behind an acquisition is blocked on a stopped replica.
/// The WAIT is not sent again on the new connection: there, having written nothing, it
/// would be answered at once on Redis 7.2 and later, confirming a write no replica has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cut_off_by_a_reconnect_confirms_nothing() {
    let (master, replica) = replicated();
    let c = client_of(&master, |b| {
        b.wait_for_replicas(Some(Duration::from_secs(2)))
    })
    .await;
    let (lock, me) = (c.lock("cut-off-wait").unwrap(), c.new_owner());
    // Learn that the master has a replica.
    lock.lock(&me).await.unwrap().unlock().await.unwrap();

    let replica_pid = process_id(&replica);
    signal(&replica_pid, "-STOP");
    let attempt = tokio::spawn({
        let (lock, me) = (lock.clone(), me.clone());
        async move { lock.try_lock(&me).await }
    });
    let mut blocked = None;
    eventually(
        Duration::from_secs(5),
        "a WAIT blocked on the master",
        || {
            let clients = master.command(&["CLIENT", "LIST"]);
            blocked = (clients.lines())
                .find(|line| line.contains("cmd=wait"))
                .and_then(|line| line.strip_prefix("id="))
                .and_then(|line| line.split(' ').next())
                .map(String::from);
            blocked.is_some()
        },
    )
    .await;
    master.command(&["CLIENT", "KILL", "ID", &blocked.unwrap()]);
    let outcome = within(WAKE, "the acquisition", attempt).await.unwrap();
    signal(&replica_pid, "-CONT");
    assert!(
        !matches!(outcome, Ok(Some(_))),
        "held, though no replica has the write: {outcome:?}"
    );
}

/// A replica promoted (as the Sentinels promote one) leaves its old master writable with no
/// replica, until it is demoted. A hold written there meanwhile would be lost at the
/// demotion while a second owner takes the lock on the new master: so the old master's
/// writes are still refused as unconfirmed, and the two never both hold the lock.
#[tokio::test]
async fn a_master_whose_replica_was_just_promoted_confirms_nothing() {
    let (master, replica) = replicated();
    let old_side = client_of(&master, |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
    })
    .await;
    let lock = old_side.lock("promoted").unwrap();
    // The client has seen the master with its replica.
    lock_and_unlock(&old_side, &lock).await;
    promote(&replica, &master).await;
    // Past the client's cached count: it reads the master's count again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let new_side = client_of(&replica, |b| b).await;
    let second = new_side
        .lock("promoted")
        .unwrap()
        .try_lock(&new_side.new_owner())
        .await
        .unwrap()
        .expect("the lock is free on the new master");
    match lock.try_lock(&old_side.new_owner()).await {
        Err(Error::NotReplicated { name, .. }) => assert_eq!(name, "promoted"),
        other => panic!("two owners: the new master's and, on the old one, {other:?}"),
    }
    assert_eq!(master.command(&["EXISTS", "promoted"]), "0", "undone");
    second.unlock().await.unwrap();
}

/// The same promotion, met by a client that was away (idle, paused, blind to the Sentinels)
/// for longer than the grace since it last counted the replica: the grace runs from the
/// moment the client first sees the loss, so the old master's writes are still refused.
#[tokio::test]
async fn a_client_away_when_the_replica_was_promoted_still_confirms_nothing() {
    let (master, replica) = replicated();
    // A short watchdog: the grace is then its floor, thirty seconds.
    let old_side = client_of(&master, |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
            .watchdog_timeout(Duration::from_secs(1))
    })
    .await;
    let lock = old_side.lock("away").unwrap();
    lock_and_unlock(&old_side, &lock).await;
    // The client is away: no lock call for longer than a grace counted from its last
    // sight of the replica would last (ten seconds and more).
    tokio::time::sleep(Duration::from_secs(12)).await;
    promote(&replica, &master).await;
    match lock.try_lock(&old_side.new_owner()).await {
        Err(Error::NotReplicated { name, .. }) => assert_eq!(name, "away"),
        other => panic!("a hold the demotion would lose: {other:?}"),
    }
    assert_eq!(master.command(&["EXISTS", "away"]), "0", "undone");
}

/// A client that follows a failover to the promoted replica, which has no replica of its
/// own yet, writes there at once: the promotion gave it a replication id of its own, so it
/// is not taken for the master that lost its replica.
#[tokio::test]
async fn the_promoted_replica_is_not_taken_for_the_master_it_replaced() {
    let (master, replica) = replicated();
    let proxy = FaultProxy::start(master.port()).await;
    let client = deployment_client(&proxy.url(), |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
    })
    .await;
    let lock = client.lock("followed").unwrap();
    lock_and_unlock(&client, &lock).await;
    replica.command(&["REPLICAOF", "NO", "ONE"]);
    proxy.set_upstream(replica.port());
    proxy.drop_connections();
    // Past the client's cached count: it reads the new master's count.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let guard = within(WAKE, "an acquisition on the new master", async {
        loop {
            match lock.try_lock(&client.new_owner()).await {
                Ok(guard) => break guard.expect("the lock is free"),
                // The reconnect itself may cost a call.
                Err(Error::Redis(_) | Error::Unreachable { .. }) => continue,
                Err(other) => panic!("refused on the new master: {other}"),
            }
        }
    })
    .await;
    assert_eq!(replica.command(&["EXISTS", "followed"]), "1");
    assert_eq!(master.command(&["EXISTS", "followed"]), "0");
    guard.unlock().await.unwrap();
}

/// A master just promoted, with no replica yet, gains one: the old master, made its replica
/// (the Sentinels do so seconds after a failover), which could be promoted back at once.
/// A write there right after the replica attached must wait for it, even when the client
/// counted no replica a moment before: the count is read again behind the script.
#[tokio::test]
async fn a_replica_that_just_attached_to_a_promoted_master_must_confirm() {
    let (old_master, promoted) = replicated();
    promote(&promoted, &old_master).await;
    let client = client_of(&promoted, |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
    })
    .await;
    let lock = client.lock("attached").unwrap();
    let me = client.new_owner();
    // Past any count read before: the client counts no replica here, now.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    lock.lock(&me).await.unwrap().unlock().await.unwrap();
    // Within the second the client trusts that count: a replica attaches, in sync, and
    // stops acknowledging.
    let port = promoted.port().to_string();
    old_master.command(&["REPLICAOF", "127.0.0.1", &port]);
    eventually(WAKE, "the replica to attach", || {
        let info = old_master.command(&["INFO", "replication"]);
        info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
    })
    .await;
    let pid = process_id(&old_master);
    signal(&pid, "-STOP");
    let outcome = lock.try_lock(&me).await;
    signal(&pid, "-CONT");
    match outcome {
        Err(Error::NotReplicated { name, .. }) => assert_eq!(name, "attached"),
        other => panic!("a write its replica did not have was confirmed: {other:?}"),
    }
    assert_eq!(promoted.command(&["EXISTS", "attached"]), "0", "undone");
}
