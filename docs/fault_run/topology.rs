//! The deployments the load-and-faults run works against, and the faults each one plays on
//! top of the workers' own: one server (behind a fault proxy per worker), a 3+3 cluster with
//! replicas in sync, or a master with a replica watched by three Sentinels.
//!
//! Failovers are graceful (`CLUSTER FAILOVER` on a replica; `SENTINEL FAILOVER`), and the
//! clients' replica check is on: an acquisition or release returns once a replica confirmed
//! it (`WAIT`). A master that is killed instead may lose writes it acknowledged, by Redis's
//! design: that is not a lock defect, and the run does not play it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redisson_lock::{Error, LockClient};
use tokio::runtime::Handle;

use crate::support::topology::{Cluster, ClusterNode, SentinelSetup, SERVICE};
use crate::support::workload::Store;
use crate::support::RedisServer;
use crate::{Rng, LONGEST_FAULT};

/// How long a deployment may take to recover from a fault on a loaded machine.
const RECOVER: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Single,
    Cluster,
    Sentinel,
}

impl Topology {
    pub fn parse(text: &str) -> Option<Topology> {
        match text {
            "single" => Some(Topology::Single),
            "cluster" => Some(Topology::Cluster),
            "sentinel" => Some(Topology::Sentinel),
            _ => None,
        }
    }

    /// The faults played on the deployment, with their weights.
    pub fn faults(self) -> &'static [(&'static str, u64)] {
        match self {
            Topology::Single => &[
                ("CLIENT KILL", 2),
                ("SCRIPT FLUSH", 1),
                ("crash and restart redis", 1),
                ("DEBUG SLEEP", 1),
            ],
            Topology::Cluster => &[
                ("graceful failover", 2),
                ("pause a replica (SIGSTOP)", 2),
                ("CLIENT KILL on a node", 2),
            ],
            Topology::Sentinel => &[
                ("SENTINEL FAILOVER", 2),
                ("pause a replica (SIGSTOP)", 2),
                ("restart a Sentinel", 2),
                ("CLIENT KILL on Sentinels", 2),
            ],
        }
    }
}

pub enum Deployment {
    Single(RedisServer),
    Cluster(Cluster),
    Sentinel(SentinelSetup),
}

impl Deployment {
    /// Starts the deployment and waits until it is ready: a cluster agreed, with every
    /// replica in sync and known to every node; the Sentinels knowing the replica and each
    /// other. Blocks the thread.
    pub fn start(topology: Topology) -> Deployment {
        match topology {
            Topology::Single => Deployment::Single(RedisServer::start_with(
                true,
                &["--enable-debug-command", "local"],
            )),
            Topology::Cluster => Deployment::Cluster(Cluster::start()),
            Topology::Sentinel => {
                let setup = SentinelSetup::start();
                // The key the setup wrote to see the replica in sync is none of the run's.
                setup.master.command(&["DEL", "replica-probe"]);
                Deployment::Sentinel(setup)
            }
        }
    }

    /// What runs, for the report's first line.
    pub fn describe(&self) -> String {
        let version = self.any_server().command(&["INFO", "server"]);
        let version = (version.lines())
            .find_map(|line| line.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim();
        match self {
            Deployment::Single(_) => format!("one redis {version} (AOF, fsync always)"),
            Deployment::Cluster(_) => {
                format!("a cluster of 3 masters + 3 replicas, redis {version}")
            }
            Deployment::Sentinel(_) => {
                format!("a master + a replica + 3 Sentinels, redis {version}")
            }
        }
    }

    fn any_server(&self) -> &RedisServer {
        match self {
            Deployment::Single(server) => server,
            Deployment::Cluster(cluster) => &cluster.servers[0],
            Deployment::Sentinel(setup) => &setup.master,
        }
    }

    /// The URL clients connect with (for a single server, the workers go through proxies).
    pub fn url(&self) -> String {
        match self {
            Deployment::Single(server) => server.url(),
            Deployment::Cluster(cluster) => cluster.url(),
            // With a database path, as many services write it: the Sentinels have none.
            Deployment::Sentinel(setup) => setup.url().replacen('?', "/0?", 1),
        }
    }

    /// The port the workers' proxies forward to: a single server's only.
    pub fn proxied_port(&self) -> Option<u16> {
        match self {
            Deployment::Single(server) => Some(server.port()),
            _ => None,
        }
    }

    /// Plays fault `kind` of this topology's [`faults`](Topology::faults) and returns once it
    /// is healed and the deployment has recovered; `Err` says what did not recover. Blocks
    /// the thread.
    pub fn inject(&mut self, kind: usize, rng: &mut Rng, probe: &mut Probe) -> Result<(), String> {
        match self {
            Deployment::Single(server) => {
                single_fault(server, kind, rng);
                Ok(())
            }
            Deployment::Cluster(cluster) => cluster_fault(cluster, kind, rng, probe),
            Deployment::Sentinel(setup) => sentinel_fault(setup, kind, rng, probe),
        }
    }
}

/// The parent's own client, which checks the replica check during each replica pause.
pub struct Probe {
    pub client: LockClient,
    pub runtime: Handle,
    /// Acquisitions tried while a replica was stopped, and those refused as they must be.
    pub tried: u64,
    pub refused: u64,
    /// Attempts that neither took the lock nor were refused for want of a replica.
    pub other: u64,
    pub violations: Vec<String>,
    /// Numbers the probe locks.
    pub names: u64,
}

impl Probe {
    /// One attempt on a free lock `name` of a master whose only replica is stopped: the
    /// replica cannot have the write, so the acquisition must fail with `NotReplicated`.
    fn expect_refused(&mut self, name: &str) {
        self.tried += 1;
        let client = self.client.clone();
        let lock = client.lock(name).expect("a valid name");
        let attempt = self.runtime.block_on(async move {
            let guard = lock.try_lock(&client.new_owner()).await?;
            let acquired = guard.is_some();
            if let Some(guard) = guard {
                let _ = guard.unlock().await;
            }
            Ok::<bool, Error>(acquired)
        });
        match attempt {
            Err(Error::NotReplicated { .. }) => self.refused += 1,
            Ok(true) => self.violations.push(format!(
                "{name} was acquired while the only replica of its master was stopped: \
                 the replica check confirmed a write no replica had"
            )),
            // A timeout or a reset, which says nothing either way.
            Ok(false) | Err(_) => self.other += 1,
        }
    }
}

fn single_fault(server: &mut RedisServer, kind: usize, rng: &mut Rng) {
    match kind {
        0 => {
            let which = ["normal", "pubsub"][rng.below(2) as usize];
            server.command(&["CLIENT", "KILL", "TYPE", which]);
        }
        1 => {
            server.command(&["SCRIPT", "FLUSH"]);
        }
        2 => {
            server.kill();
            server.restart();
        }
        _ => {
            let sleep = rng.between(Duration::from_millis(200), Duration::from_millis(1200));
            let seconds = format!("{:.3}", sleep.as_secs_f64());
            server.command(&["DEBUG", "SLEEP", &seconds]);
        }
    }
}

fn cluster_fault(
    cluster: &Cluster,
    kind: usize,
    rng: &mut Rng,
    probe: &mut Probe,
) -> Result<(), String> {
    let nodes = cluster.nodes();
    let pick =
        |rng: &mut Rng, of: Vec<ClusterNode>| of[rng.below(of.len() as u64) as usize].clone();
    match kind {
        0 => {
            let masters = nodes
                .into_iter()
                .filter(|n| n.master && !n.slots.is_empty());
            let master = pick(rng, masters.collect());
            // The replica steps up once it has every write of its master, which stops
            // taking writes meanwhile: nothing acknowledged is lost.
            let slot = master.slots[0].0;
            recovered("a graceful failover", || {
                cluster.failover(slot);
            })
        }
        1 => {
            let replica = pick(rng, nodes.iter().filter(|n| !n.master).cloned().collect());
            let master = (nodes.iter())
                .find(|n| Some(&n.id) == replica.master_id.as_ref())
                .expect("the replica's master");
            // A lock in a slot of that master.
            let name = loop {
                probe.names += 1;
                let name = format!("probe:{}", probe.names);
                let slot = cluster.slot(&name);
                if master.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)) {
                    break name;
                }
            };
            // Longer than the replica check's WAIT: acquisitions on its master are refused.
            let pause = rng.between(Duration::from_millis(500), LONGEST_FAULT);
            pause_server(cluster.server(replica.port), pause, || {
                probe.expect_refused(&name)
            });
            recovered("the cluster after a replica's pause", || {
                cluster.wait_healthy()
            })
        }
        _ => {
            let server = &cluster.servers[rng.below(cluster.servers.len() as u64) as usize];
            let which = ["normal", "pubsub"][rng.below(2) as usize];
            server.command(&["CLIENT", "KILL", "TYPE", which]);
            Ok(())
        }
    }
}

fn sentinel_fault(
    setup: &mut SentinelSetup,
    kind: usize,
    rng: &mut Rng,
    probe: &mut Probe,
) -> Result<(), String> {
    match kind {
        0 => sentinel_failover(setup, rng),
        1 => {
            let master = current_master(setup);
            let replica = if master == setup.master.port() {
                &setup.replica
            } else {
                &setup.master
            };
            let pause = rng.between(Duration::from_millis(500), LONGEST_FAULT);
            probe.names += 1;
            let name = format!("probe:{}", probe.names);
            pause_server(replica, pause, || probe.expect_refused(&name));
            wait_until("the paused replica to be back in sync", || in_sync(replica))
        }
        2 => {
            let which = rng.below(setup.sentinels.len() as u64) as usize;
            // It comes back with the configuration it rewrote (its id, the current master).
            let sentinel = &mut setup.sentinels[which];
            recovered("a Sentinel's restart", || sentinel.restart())
        }
        _ => {
            // Every client of each Sentinel: the lock clients' watchers among them.
            for sentinel in &setup.sentinels {
                sentinel.command(&["CLIENT", "KILL", "TYPE", "normal"]);
            }
            Ok(())
        }
    }
}

/// `SENTINEL FAILOVER`, asked of a Sentinel until one takes it (right after a failover or
/// a pause, the replica may not be eligible yet) and goes through with it (a Sentinel that
/// said OK may still abort, finding no replica good enough: it is asked again), then waits
/// until every Sentinel names the new master and the old one follows it.
fn sentinel_failover(setup: &SentinelSetup, rng: &mut Rng) -> Result<(), String> {
    let old = current_master(setup);
    let old_port = old.to_string();
    let deadline = Instant::now() + RECOVER;
    let mut asked = rng.below(setup.sentinels.len() as u64) as usize;
    loop {
        let sentinel = &setup.sentinels[asked % setup.sentinels.len()];
        asked += 1;
        let reply = sentinel.command(&["SENTINEL", "FAILOVER", SERVICE]);
        if reply == "OK" {
            // Taken up: the Sentinel soon names another master, or it gave up.
            let gone = Instant::now() + Duration::from_secs(10);
            while Instant::now() < gone.min(deadline) {
                let named = sentinel.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
                if named.lines().nth(1) != Some(old_port.as_str()) {
                    break;
                }
                sleep(Duration::from_millis(50));
            }
            let named = sentinel.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
            if named.lines().nth(1) != Some(old_port.as_str()) {
                break;
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "SENTINEL FAILOVER refused or abandoned for {RECOVER:?}: {reply}"
            ));
        }
        sleep(Duration::from_millis(200));
    }
    let (new, old_server) = if old == setup.master.port() {
        (&setup.replica, &setup.master)
    } else {
        (&setup.master, &setup.replica)
    };
    let new_port = new.port().to_string();
    let names_new = |s: &RedisServer| {
        let reply = s.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
        reply.lines().nth(1) == Some(new_port.as_str())
    };
    let converged =
        || setup.sentinels.iter().all(names_new) && new.command(&["ROLE"]).starts_with("master");
    if wait_until("every Sentinel to name the new master", converged).is_err() {
        // What each Sentinel says, for the report: a failover a Sentinel aborted, or one
        // that never heard of it.
        let named: Vec<String> = (setup.sentinels.iter())
            .map(|s| {
                s.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])
                    .replace('\n', ":")
            })
            .collect();
        return Err(format!(
            "every Sentinel to name the new master {new_port}: not within {RECOVER:?} (they name {})",
            named.join(", ")
        ));
    }
    wait_until("the old master to follow the new one", || {
        in_sync(old_server)
    })
}

/// The master's port as the Sentinels name it (the first that answers).
fn current_master(setup: &SentinelSetup) -> u16 {
    (setup.sentinels.iter())
        .find_map(|s| {
            let reply = s
                .try_command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])
                .ok()?;
            reply.lines().nth(1)?.parse().ok()
        })
        .unwrap_or_else(|| setup.master.port())
}

fn in_sync(replica: &RedisServer) -> bool {
    replica
        .command(&["INFO", "replication"])
        .contains("master_link_status:up")
}

/// Stops the process of `server` (`SIGSTOP`) for `pause`, runs `during` meanwhile, then
/// lets it go on.
fn pause_server(server: &RedisServer, pause: Duration, during: impl FnOnce()) {
    let info = server.command(&["INFO", "server"]);
    let pid = (info.lines())
        .find_map(|line| line.strip_prefix("process_id:"))
        .expect("INFO names the process")
        .trim()
        .to_owned();
    let signal = |signal: &str| {
        let status = Command::new("kill").args([signal, &pid]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill {signal} {pid}");
    };
    signal("-STOP");
    let stopped = Instant::now();
    during();
    sleep(pause.saturating_sub(stopped.elapsed()));
    signal("-CONT");
}

/// Runs a support helper that panics when the deployment does not settle in time; `Err`
/// names `what` instead.
fn recovered(what: &str, action: impl FnOnce()) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(action)).map_err(|_| format!("{what} did not complete"))
}

/// Polls `done` every 50 ms for at most [`RECOVER`]; `Err` names `what`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + RECOVER;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("{what}: not within {RECOVER:?}"));
        }
        sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The checks after the run read each key from the master that holds it now.
impl Store for Deployment {
    fn keys(&self) -> Vec<String> {
        match self {
            Deployment::Single(server) => server.keys(),
            Deployment::Cluster(cluster) => (cluster.nodes().into_iter())
                .filter(|node| node.master && !node.slots.is_empty())
                .flat_map(|node| cluster.server(node.port).keys())
                .collect(),
            Deployment::Sentinel(setup) => sentinel_master(setup).keys(),
        }
    }

    fn on_key(&self, key: &str, args: &[&str]) -> String {
        match self {
            Deployment::Single(server) => server.command(args),
            Deployment::Cluster(cluster) => cluster.master_of(key).command(args),
            Deployment::Sentinel(setup) => sentinel_master(setup).command(args),
        }
    }
}

fn sentinel_master(setup: &SentinelSetup) -> &RedisServer {
    if current_master(setup) == setup.replica.port() {
        &setup.replica
    } else {
        &setup.master
    }
}
