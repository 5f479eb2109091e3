//! Replica acknowledgement on a 3-master + 3-replica Redis Cluster: with the replica of the
//! lock's master stopped, every acquisition (plain, fair, fenced, write), release and
//! force release is refused with `NotReplicated`, from one task and from many, and an
//! acquisition refused leaves no hold behind.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redisson_lock::{Error, LockClient, LockOwner, Result};
use support::topology::Cluster;
use support::*;

/// The kinds whose acquisitions wait for a replica, as the test drives them.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fair,
    Fenced,
    Write,
}

const KINDS: [Kind; 4] = [Kind::Plain, Kind::Fair, Kind::Fenced, Kind::Write];

type Unlock = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// A hold of any kind: what releases it.
struct Held(Box<dyn FnOnce() -> Unlock + Send>);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a hold")
    }
}

impl Held {
    async fn unlock(self) -> Result<()> {
        (self.0)().await
    }
}

/// Takes the lock `name` of `kind` for `owner` (waiting, as `lock` does).
async fn acquire(client: &LockClient, kind: Kind, name: &str, owner: &LockOwner) -> Result<Held> {
    fn held<G: Send + 'static, F: Future<Output = Result<()>> + Send + 'static>(
        guard: G,
        unlock: fn(G) -> F,
    ) -> Held {
        Held(Box::new(move || Box::pin(unlock(guard))))
    }
    Ok(match kind {
        Kind::Plain => held(client.lock(name)?.lock(owner).await?, |g| g.unlock()),
        Kind::Fair => held(client.fair_lock(name)?.lock(owner).await?, |g| g.unlock()),
        Kind::Fenced => held(client.fenced_lock(name)?.lock(owner).await?, |g| g.unlock()),
        Kind::Write => held(client.read_write_lock(name)?.write(owner).await?, |g| {
            g.unlock()
        }),
    })
}

/// Frees the lock `name` of `kind` whoever holds it.
async fn force_unlock(client: &LockClient, kind: Kind, name: &str) -> Result<bool> {
    match kind {
        Kind::Plain => client.lock(name)?.force_unlock().await,
        Kind::Fair => client.fair_lock(name)?.force_unlock().await,
        Kind::Fenced => client.fenced_lock(name)?.force_unlock().await,
        Kind::Write => client.read_write_lock(name)?.force_unlock_write().await,
    }
}

/// A server stopped by `SIGSTOP`: it acknowledges nothing until it is continued, which
/// happens on drop (a failing test's too).
struct Stopped(String);

impl Stopped {
    fn stop(server: &RedisServer) -> Stopped {
        let info = server.command(&["INFO", "server"]);
        let pid = info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .expect("a process id")
            .trim()
            .to_owned();
        signal(&pid, "-STOP");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(&self.0, "-CONT");
    }
}

fn signal(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status();
    assert!(status.unwrap().success(), "kill {signal} {pid}");
}

/// The replica of the master serving `key`.
fn replica_of<'c>(cluster: &'c Cluster, key: &str) -> &'c RedisServer {
    let master = cluster.master_of_slot(cluster.slot(key));
    let replica = (cluster.nodes().into_iter())
        .find(|n| n.master_id.as_deref() == Some(&master.id))
        .expect("every master has a replica");
    cluster.server(replica.port)
}

/// Whether `master`'s replica acknowledged every write `master` made.
fn acknowledged_all(master: &RedisServer) -> bool {
    let info = master.command(&["INFO", "replication"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| value.trim().to_owned())
    };
    let (Some(offset), Some(replica)) = (field("master_repl_offset:"), field("slave0:")) else {
        return false;
    };
    replica.contains(&format!("offset={offset},"))
}

/// Asserts that `outcome` is `NotReplicated` for the lock `name`.
fn refused<T: std::fmt::Debug>(outcome: &Result<T>, name: &str, what: &str) {
    match outcome {
        Err(Error::NotReplicated { name: refused, .. }) => assert_eq!(refused, name, "{what}"),
        other => panic!("{what}: expected NotReplicated, got {other:?}"),
    }
}

/// With the replica of the lock's master stopped, every kind's acquisition, release and
/// force release is refused, one task at a time and many at once; a refused acquisition
/// leaves nothing held on the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_refuses_every_kind() {
    let cluster = Cluster::start();
    let client = deployment_client(&cluster.url(), |b| {
        b.wait_for_replicas(Some(Duration::from_millis(500)))
    })
    .await;
    // Every name shares the slot of the tag: one master, one replica.
    let name = |what: &str| format!("{{stopped}}-{what}");
    let master = cluster.master_of(&name("any"));
    let replica = replica_of(&cluster, &name("any"));
    let me = client.new_owner();
    // Load the scripts and learn that the master has a replica, while it confirms.
    let (mut held, mut kept) = (Vec::new(), Vec::new());
    for kind in KINDS {
        let warm = name(&format!("warm-{kind:?}"));
        confirmed("a warm-up", || async {
            acquire(&client, kind, &warm, &me).await?;
            force_unlock(&client, kind, &warm).await
        })
        .await;
        let unlocked = name(&format!("unlocked-{kind:?}"));
        confirmed("an unlocked hold", || async {
            acquire(&client, kind, &unlocked, &me).await?.unlock().await
        })
        .await;
        // Held across the stop, to be released while it lasts.
        let released = name(&format!("released-{kind:?}"));
        let hold = confirmed("a hold", || acquire(&client, kind, &released, &me)).await;
        held.push((kind, released.clone(), hold));
        // Held across the stop, to be force-released while it lasts.
        let forced = name(&format!("forced-{kind:?}"));
        kept.push(confirmed("a hold", || acquire(&client, kind, &forced, &me)).await);
    }

    // The replica has every write so far: a WAIT that covers none of the writes to come
    // would be answered at once.
    eventually(WAKE, "the replica to acknowledge every write", || {
        acknowledged_all(master)
    })
    .await;
    let stopped = Stopped::stop(replica);
    for kind in KINDS {
        let lock = name(&format!("one-{kind:?}"));
        let outcome = within(
            WAKE * 2,
            "an acquisition",
            acquire(&client, kind, &lock, &me),
        )
        .await;
        refused(&outcome, &lock, &format!("{kind:?} acquisition"));
        assert_eq!(master.command(&["EXISTS", &lock]), "0", "{kind:?}: undone");
    }
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let (client, kind) = (client.clone(), KINDS[task % KINDS.len()]);
            let lock = name(&format!("many-{task}"));
            tokio::spawn(async move {
                let owner = client.new_owner();
                let outcome = acquire(&client, kind, &lock, &owner).await;
                (kind, lock, outcome.map(|_| ()))
            })
        })
        .collect();
    for (kind, lock, outcome) in all_finish(Duration::from_secs(60), "the tasks", tasks).await {
        refused(&outcome, &lock, &format!("{kind:?} acquisition among many"));
        assert_eq!(master.command(&["EXISTS", &lock]), "0", "{kind:?}: undone");
    }
    let releases: Vec<_> = held
        .into_iter()
        .map(|(kind, lock, held)| tokio::spawn(async move { (kind, lock, held.unlock().await) }))
        .collect();
    for (kind, lock, outcome) in all_finish(Duration::from_secs(60), "the releases", releases).await
    {
        refused(&outcome, &lock, &format!("{kind:?} release"));
    }
    for kind in KINDS {
        let lock = name(&format!("forced-{kind:?}"));
        let outcome = force_unlock(&client, kind, &lock).await;
        refused(&outcome, &lock, &format!("{kind:?} force release"));
    }
    drop(stopped);
    drop(kept);

    // Continued: the replica confirms again.
    let lock = name("after");
    within(WAKE * 2, "an acquisition once the replica is back", async {
        loop {
            match acquire(&client, Kind::Plain, &lock, &me).await {
                Ok(held) => return held.unlock().await.unwrap(),
                Err(Error::NotReplicated { .. }) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
    })
    .await;
}

/// The master of a lock is killed while its replica, stopped, lacks the acquisition's
/// write (48 MB of other writes queued ahead of it), and the replica takes over. The
/// acquisition was never told `Ok`, so a second owner taking the lock on the new master
/// breaks no exclusion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_after_an_unconfirmed_acquisition_makes_no_second_owner() {
    let mut cluster = Cluster::start();
    let url = cluster.url();
    let first = deployment_client(&url, |b| {
        b.wait_for_replicas(Some(Duration::from_millis(500)))
    })
    .await;
    let name = "{failover}-lock";
    let (master_port, replica_port) = {
        let master = cluster.master_of(name).port();
        (master, replica_of(&cluster, name).port())
    };
    let master = cluster.server(master_port);
    let me = first.new_owner();
    let warm = first.lock("{failover}-warm").unwrap();
    confirmed("a warm-up", || async {
        warm.lock(&me).await?.unlock().await
    })
    .await;
    eventually(WAKE, "the replica to acknowledge every write", || {
        acknowledged_all(master)
    })
    .await;

    let stopped = Stopped::stop(cluster.server(replica_port));
    // More than the sockets buffer: the acquisition's write stays on the master.
    let filler = "x".repeat(1 << 20);
    for i in 0..48 {
        master.command(&["SET", &format!("{{failover}}-filler-{i}"), &filler]);
    }
    let lock = first.lock(name).unwrap();
    let outcome = within(WAKE * 3, "the acquisition", lock.try_lock(&me)).await;
    let index = (cluster.servers.iter())
        .position(|s| s.port() == master_port)
        .unwrap();
    cluster.servers[index].kill();
    drop(stopped);
    let replica = cluster.server(replica_port);
    eventually(Duration::from_secs(30), "the replica to take over", || {
        replica.command(&["ROLE"]).starts_with("master")
            && (cluster.servers.iter())
                .filter(|s| s.port() != master_port)
                .all(|s| s.command(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    })
    .await;

    // Through the nodes alive.
    let live: Vec<String> = (cluster.servers.iter())
        .filter(|s| s.port() != master_port)
        .map(|s| format!("node=127.0.0.1:{}", s.port()))
        .collect();
    let live = format!(
        "redis-cluster://127.0.0.1:{replica_port}?{}",
        live.join("&")
    );
    let second = deployment_client(&live, |b| b).await;
    let other = second.new_owner();
    let taken = within(
        Duration::from_secs(30),
        "the second owner's attempt",
        async {
            loop {
                match second.lock(name).unwrap().try_lock(&other).await {
                    Ok(taken) => return taken,
                    Err(error) if error.is_retryable() => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    Err(error) => panic!("{error:?}"),
                }
            }
        },
    )
    .await;
    let told_ok = matches!(outcome, Ok(Some(_)));
    assert!(
        !(told_ok && taken.is_some()),
        "two owners: the first was told Ok, and the second took the lock after the failover"
    );
    assert!(!told_ok, "told Ok though no replica had the write");
    refused(&outcome, name, "the acquisition");
}

/// A lock whose slot migrates is taken on the importing master (after an `ASK`), whose
/// replica is stopped: the WAIT follows the script there, not to the slot's master by the
/// slot map, and the acquisition is refused and undone (once the migration ended: a release
/// waits for that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_follows_a_script_sent_to_the_importing_master() {
    let test = "the_wait_follows_a_script_sent_to_the_importing_master";
    if support::server::is_valkey() && support::server::server_version() >= (8, 0) {
        let why = "from Valkey 8.0 a master's CLUSTER SETSLOT waits for its replicas, and this \
                   test ends the migration while the importing master's replica is stopped";
        return support::server::skipped(test, why);
    }
    let cluster = Cluster::start();
    let client = deployment_client(&cluster.url(), |b| {
        b.wait_for_replicas(Some(Duration::from_millis(500)))
    })
    .await;
    let name = "{asked}-lock";
    let slot = cluster.slot(name);
    let importing = cluster.other_master(slot);
    let me = client.new_owner();
    // Load the scripts on the importing master, and learn that it has a replica.
    let there = (0..)
        .map(|i| format!("{{asked-{i}}}-warm"))
        .find(|warm| cluster.master_of_slot(cluster.slot(warm)).id == importing.id)
        .unwrap();
    let warm = client.lock(&there).unwrap();
    confirmed("a warm-up", || async {
        warm.lock(&me).await?.unlock().await
    })
    .await;
    let importer = cluster.server(importing.port);
    eventually(WAKE, "the replica to acknowledge every write", || {
        acknowledged_all(importer)
    })
    .await;

    let from = cluster.begin_migration(slot, &importing);
    let stopped = Stopped::stop(replica_of(&cluster, &there));
    let lock = client.lock(name).unwrap();
    let acquisition = tokio::spawn(async move { lock.try_lock(&me).await.map(|g| g.is_some()) });
    let slot_text = slot.to_string();
    eventually(WAKE, "the hold on the importing master", || {
        importer.command(&["CLUSTER", "COUNTKEYSINSLOT", &slot_text]) == "1"
    })
    .await;
    // Its undo, a release, names keys the migration keeps apart: it waits for the end
    // (told to both masters; the stopped replica answers nothing).
    for master in [importing.port, from.port] {
        let reply = (cluster.server(master)).command(&[
            "CLUSTER",
            "SETSLOT",
            &slot_text,
            "NODE",
            &importing.id,
        ]);
        assert_eq!(reply, "OK");
    }
    let outcome = within(Duration::from_secs(30), "the acquisition", acquisition).await;
    refused(
        &outcome.unwrap(),
        name,
        "an acquisition on the importing master",
    );
    drop(stopped);
    // Undone on the importing master, which serves the slot now.
    assert_eq!(importer.command(&["EXISTS", name]), "0", "undone");
}
