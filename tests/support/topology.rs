//! Private deployments for the topology tests: a 3-master + 3-replica Redis Cluster, and a
//! master with one replica watched by three Sentinels. Every process runs on a free loopback
//! port and stops when its handle is dropped.

use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::server::{ensure_installed, RedisServer};

/// How long a deployment may take to settle (a cluster to agree, a replica to sync, a
/// failover to finish) on a loaded machine.
const SETTLE: Duration = Duration::from_secs(30);

/// Replication settings every replicated test server gets: Redis 7 otherwise waits 5 s
/// before a replica's first sync.
const REPLICATION: [&str; 4] = [
    "--repl-diskless-sync",
    "yes",
    "--repl-diskless-sync-delay",
    "0",
];

/// Polls `done` every 20 ms until it holds; panics after [`SETTLE`] naming `what`.
pub fn settle(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + SETTLE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {SETTLE:?}");
        sleep(Duration::from_millis(20));
    }
}

/// One node as `CLUSTER NODES` lists it.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    /// Slot ranges served, for a master.
    pub slots: Vec<(u16, u16)>,
}

/// A 3-master + 3-replica cluster.
pub struct Cluster {
    pub servers: Vec<RedisServer>,
}

impl Cluster {
    /// Starts six nodes, joins them with `redis-cli --cluster create` and waits until every
    /// node reports `cluster_state:ok` and every replica is in sync.
    pub fn start() -> Cluster {
        Cluster::start_with(|_| &[])
    }

    /// [`start`](Cluster::start) with more `redis-server` arguments for node `n` (0 to 5;
    /// nodes 0 to 2 start as the masters).
    pub fn start_with(node_args: impl Fn(usize) -> &'static [&'static str]) -> Cluster {
        let redis_cli = ensure_installed("redis-cli", "redis-tools");
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ];
        args.extend(REPLICATION);
        let servers: Vec<RedisServer> = (0..6)
            .map(|n| RedisServer::start_with_args(&[&args[..], node_args(n)].concat()))
            .collect();
        let mut create = Command::new(redis_cli);
        create.arg("--cluster").arg("create");
        for server in &servers {
            create.arg(format!("127.0.0.1:{}", server.port()));
        }
        let output = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Cluster { servers };
        cluster.wait_healthy();
        cluster
    }

    /// Waits until every node says the cluster is ok, agrees on the masters, and every
    /// replica's link to its master is up.
    pub fn wait_healthy(&self) {
        settle("the cluster to be healthy", || {
            let views: Vec<Vec<ClusterNode>> = self
                .servers
                .iter()
                .map(|s| parse_nodes(&s.command(&["CLUSTER", "NODES"])))
                .collect();
            let masters = |view: &Vec<ClusterNode>| {
                let mut ports: Vec<u16> = view
                    .iter()
                    .filter(|n| n.master && !n.slots.is_empty())
                    .map(|n| n.port)
                    .collect();
                ports.sort_unstable();
                ports
            };
            self.servers.iter().all(|s| {
                s.command(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && (!s.command(&["ROLE"]).starts_with("slave")
                        || s.command(&["INFO", "replication"])
                            .contains("master_link_status:up"))
            }) && views.iter().all(|view| {
                masters(view) == masters(&views[0])
                    && view.iter().filter(|n| n.master_id.is_some()).count() == 3
            }) && masters(&views[0]).len() == 3
        });
    }

    /// The nodes as the first reachable node sees them.
    pub fn nodes(&self) -> Vec<ClusterNode> {
        parse_nodes(&self.servers[0].command(&["CLUSTER", "NODES"]))
    }

    /// A `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let first = self.servers[0].port();
        let rest: Vec<String> = self.servers[1..]
            .iter()
            .map(|s| format!("node=127.0.0.1:{}", s.port()))
            .collect();
        format!("redis-cluster://127.0.0.1:{first}?{}", rest.join("&"))
    }

    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .expect("a node of this cluster")
    }

    /// The hash slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        self.servers[0]
            .command(&["CLUSTER", "KEYSLOT", key])
            .parse()
            .unwrap()
    }

    /// The master serving `slot`.
    pub fn master_of_slot(&self, slot: u16) -> ClusterNode {
        self.nodes()
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .expect("every slot is served")
    }

    /// The master serving `key`'s slot.
    pub fn master_of(&self, key: &str) -> &RedisServer {
        self.server(self.master_of_slot(self.slot(key)).port)
    }

    /// Another master than the one serving `slot`.
    pub fn other_master(&self, slot: u16) -> ClusterNode {
        let owner = self.master_of_slot(slot);
        self.nodes()
            .into_iter()
            .find(|n| n.master && !n.slots.is_empty() && n.id != owner.id)
            .expect("three masters")
    }

    /// Moves `slot`, with its keys, to the master `to`, the way `redis-cli --cluster
    /// reshard` does, and waits until every node routes it there.
    pub fn migrate_slot(&self, slot: u16, to: &ClusterNode) {
        let from = self.begin_migration(slot, to);
        self.move_keys(slot, &from, to);
        self.end_migration(slot, &from, to);
    }

    /// Marks `slot` as migrating from its master to the master `to` (and importing there),
    /// moving no key: its master answers `ASK` for the keys it does not have. Returns the
    /// master it migrates from.
    pub fn begin_migration(&self, slot: u16, to: &ClusterNode) -> ClusterNode {
        let from = self.master_of_slot(slot);
        let slot_text = slot.to_string();
        let (source, target) = (self.server(from.port), self.server(to.port));
        target.command(&["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from.id]);
        source.command(&["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &to.id]);
        from
    }

    /// Moves the keys of a migrating `slot` from `from` to `to`.
    pub fn move_keys(&self, slot: u16, from: &ClusterNode, to: &ClusterNode) {
        let source = self.server(from.port);
        let slot_text = slot.to_string();
        loop {
            let keys = source.command(&["CLUSTER", "GETKEYSINSLOT", &slot_text, "100"]);
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1"];
            let port = to.port.to_string();
            migrate.extend([port.as_str(), "", "0", "5000", "KEYS"]);
            migrate.extend(keys.lines());
            let reply = source.command(&migrate);
            assert_eq!(reply, "OK", "MIGRATE of slot {slot}");
        }
    }

    /// Ends the migration of `slot` from `from`: `to` serves it, and every node says so.
    pub fn end_migration(&self, slot: u16, from: &ClusterNode, to: &ClusterNode) {
        let slot_text = slot.to_string();
        let (source, target) = (self.server(from.port), self.server(to.port));
        for server in [target, source] {
            let reply = server.command(&["CLUSTER", "SETSLOT", &slot_text, "NODE", &to.id]);
            assert_eq!(reply, "OK", "SETSLOT {slot} NODE on port {}", server.port());
        }
        for server in &self.servers {
            if server.port() != from.port && server.port() != to.port {
                server.command(&["CLUSTER", "SETSLOT", &slot_text, "NODE", &to.id]);
            }
        }
        settle("every node to route the slot to its new master", || {
            self.servers.iter().all(|s| {
                parse_nodes(&s.command(&["CLUSTER", "NODES"]))
                    .iter()
                    .any(|n| {
                        n.id == to.id && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
                    })
            })
        });
    }

    /// Moves every slot of the master `from` to the master `to` with `redis-cli --cluster
    /// reshard`, as when a node is taken out of a cluster, and waits until every node sees
    /// `from` without slots.
    pub fn empty_master(&self, from: &ClusterNode, to: &ClusterNode) {
        let slots: u32 = from.slots.iter().map(|(a, b)| u32::from(b - a) + 1).sum();
        let output = Command::new(ensure_installed("redis-cli", "redis-tools"))
            .args(["--cluster", "reshard", &format!("127.0.0.1:{}", from.port)])
            .args(["--cluster-from", &from.id, "--cluster-to", &to.id])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        // Valkey 8+ makes a master's `CLUSTER SETSLOT` wait for its replicas; when its last
        // slot leaves, its replica migrates away first and the wait ends in `NOREPLICAS`.
        // The slot has moved all the same (the new owner's epoch wins): valkey-cli ignores
        // that error, Redis's redis-cli stops on it. The settle below checks the outcome.
        assert!(
            output.status.success() || stdout.contains("NOREPLICAS"),
            "redis-cli --cluster reshard failed: {stdout}"
        );
        settle("every node to see the emptied master without slots", || {
            self.servers.iter().all(|s| {
                parse_nodes(&s.command(&["CLUSTER", "NODES"]))
                    .iter()
                    .any(|n| n.id == from.id && n.slots.is_empty())
            })
        });
    }

    /// Promotes the replica of the master serving `slot` with `CLUSTER FAILOVER` (the old
    /// master steps down in agreement) and waits until the cluster is healthy again.
    /// Returns the new master.
    pub fn failover(&self, slot: u16) -> ClusterNode {
        let master = self.master_of_slot(slot);
        let replica = self
            .nodes()
            .into_iter()
            .find(|n| n.master_id.as_deref() == Some(&master.id))
            .expect("every master has a replica");
        // Mid-failover a node's view may have no master for the slot for a moment.
        let took_over = || {
            self.nodes().iter().any(|n| {
                n.id == replica.id
                    && n.master
                    && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
        };
        // A manual failover that the master does not join within Redis's 5 s is dropped
        // without a word (a loaded machine can delay it): ask again until it happens.
        let deadline = Instant::now() + SETTLE;
        'asking: loop {
            assert_eq!(
                self.server(replica.port).command(&["CLUSTER", "FAILOVER"]),
                "OK"
            );
            let retry_at = Instant::now() + Duration::from_secs(7);
            while Instant::now() < retry_at {
                if took_over() {
                    break 'asking;
                }
                sleep(Duration::from_millis(20));
            }
            assert!(
                Instant::now() < deadline,
                "the replica to take over: not within {SETTLE:?}"
            );
        }
        self.wait_healthy();
        self.master_of_slot(slot)
    }
}

/// Parses `CLUSTER NODES`.
pub fn parse_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields[1].split('@').next().unwrap();
            let port = address.rsplit(':').next().unwrap().parse().unwrap();
            let master = fields[2].contains("master");
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (s.parse().unwrap(), s.parse().unwrap()),
                })
                .collect();
            ClusterNode {
                id: fields[0].to_string(),
                port,
                master,
                master_id: (fields[3] != "-").then(|| fields[3].to_string()),
                slots,
            }
        })
        .collect()
}

/// The cluster the non-disruptive tests of one binary share: started by the first test that
/// asks, stopped when the last test holding it is done.
pub fn shared_cluster() -> Arc<Cluster> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(Cluster::start());
    *shared = Arc::downgrade(&cluster);
    cluster
}

/// A master, its replica (and any further replicas) and three Sentinels watching them as
/// `mymaster`.
pub struct SentinelSetup {
    pub master: RedisServer,
    pub replica: RedisServer,
    /// Replicas beyond the first.
    pub others: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
}

pub const SERVICE: &str = "mymaster";

impl SentinelSetup {
    /// Starts the five processes and waits until the replica is in sync and every Sentinel
    /// knows the replica and the other Sentinels.
    pub fn start() -> SentinelSetup {
        SentinelSetup::start_with_replicas(1)
    }

    /// [`start`](Self::start) with `replicas` replicas (1 or more).
    pub fn start_with_replicas(replicas: usize) -> SentinelSetup {
        ensure_installed("redis-sentinel", "redis-sentinel");
        let master = RedisServer::start_with_args(&REPLICATION);
        let replica = start_replica_of(&master);
        let others = (1..replicas).map(|_| start_replica_of(&master)).collect();
        let config = format!(
            "sentinel monitor {SERVICE} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {SERVICE} 1000\n\
             sentinel failover-timeout {SERVICE} 5000\n",
            master.port()
        );
        // Each with an id of its own in its config file, which a restart keeps (with all
        // the Sentinel wrote there since).
        let sentinels: Vec<RedisServer> = (1..=3)
            .map(|n| RedisServer::start_sentinel(&format!("{config}sentinel myid {n:040x}\n")))
            .collect();
        let setup = SentinelSetup {
            master,
            replica,
            others,
            sentinels,
        };
        setup.wait_ready();
        setup
    }

    /// Every data server: the master, the replica and the others, as started (their roles
    /// change with failovers).
    pub fn servers(&self) -> Vec<&RedisServer> {
        let mut servers = vec![&self.master, &self.replica];
        servers.extend(self.others.iter());
        servers
    }

    /// The data server listening on `port`.
    pub fn server(&self, port: u16) -> &RedisServer {
        let servers = self.servers();
        servers.into_iter().find(|s| s.port() == port).unwrap()
    }

    /// [`server`](Self::server), to stop or restart.
    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        let mut servers = vec![&mut self.master, &mut self.replica];
        servers.extend(self.others.iter_mut());
        servers.into_iter().find(|s| s.port() == port).unwrap()
    }

    /// Waits until every Sentinel knows the replica and the other Sentinels (after a start
    /// or a restart).
    pub fn wait_ready(&self) {
        settle("the Sentinels to know the replica and each other", || {
            self.sentinels.iter().all(|s| {
                let info = s.command(&["SENTINEL", "MASTER", SERVICE]);
                let fields: Vec<&str> = info.lines().collect();
                let value = |name: &str| {
                    fields
                        .iter()
                        .position(|f| *f == name)
                        .map(|i| fields[i + 1].to_string())
                        .unwrap_or_default()
                };
                value("num-slaves") == (1 + self.others.len()).to_string()
                    && value("num-other-sentinels") == "2"
            })
        });
    }

    /// A `redis-sentinel://` URL naming every Sentinel.
    pub fn url(&self) -> String {
        let first = self.sentinels[0].port();
        let rest: Vec<String> = self.sentinels[1..]
            .iter()
            .map(|s| format!("node=127.0.0.1:{}", s.port()))
            .collect();
        format!(
            "redis-sentinel://127.0.0.1:{first}?sentinelServiceName={SERVICE}&{}",
            rest.join("&")
        )
    }

    /// The port of the master as the first Sentinel names it.
    pub fn master_port(&self) -> u16 {
        self.master_port_by(0)
    }

    /// The port of the master as Sentinel `n` names it.
    pub fn master_port_by(&self, n: usize) -> u16 {
        let reply = self.sentinels[n].command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
        reply.lines().nth(1).unwrap().parse().unwrap()
    }

    /// `SENTINEL FAILOVER`, then waits until the replica is the master every Sentinel names
    /// and the old master replicates from it.
    pub fn failover(&self) {
        let (old, _) = self.begin_failover(None);
        self.wait_demoted(old);
    }

    /// `SENTINEL FAILOVER`, then waits until the replica is a master and every Sentinel but
    /// `paused` (a paused one answers nothing) names it. Returns the old master and the new.
    /// The Sentinels demote the old master some seconds later (see
    /// [`wait_demoted`](Self::wait_demoted)).
    pub fn begin_failover(&self, paused: Option<usize>) -> (&RedisServer, &RedisServer) {
        let live: Vec<&RedisServer> = (self.sentinels.iter().enumerate())
            .filter(|(n, _)| Some(*n) != paused)
            .map(|(_, s)| s)
            .collect();
        let old = self.server(self.master_port_by(if paused == Some(0) { 1 } else { 0 }));
        // A replica that just (re)joined is no candidate until the Sentinels have read its
        // state again (NOGOODSLAVE), which takes them up to ten seconds.
        settle("a Sentinel to start a failover", || {
            let reply = live[0].command(&["SENTINEL", "FAILOVER", SERVICE]);
            assert!(reply == "OK" || reply.contains("NOGOODSLAVE"), "{reply}");
            reply == "OK"
        });
        let new = self.await_new_master(old, &live);
        (old, new)
    }

    /// Waits until every Sentinel of `live` names one master other than `old`, and that
    /// server says it is a master; returns it.
    pub fn await_new_master(&self, old: &RedisServer, live: &[&RedisServer]) -> &RedisServer {
        let mut new = None;
        settle("the Sentinels to name the new master", || {
            let named: Vec<Option<u16>> = (live.iter())
                .map(|s| {
                    let reply = s.try_command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
                    reply.ok()?.lines().nth(1)?.parse().ok()
                })
                .collect();
            let Some(Some(port)) = named.first().copied() else {
                return false;
            };
            let agreed = port != old.port() && named.iter().all(|n| *n == Some(port));
            if agreed && self.server(port).command(&["ROLE"]).starts_with("master") {
                new = Some(port);
            }
            new.is_some()
        });
        self.server(new.unwrap())
    }

    /// Waits until the old master `old` replicates from the new one.
    pub fn wait_demoted(&self, old: &RedisServer) {
        settle("the old master to follow the new one", || {
            // The Sentinels close the old master's client connections as they demote it.
            old.try_command(&["INFO", "replication"])
                .is_ok_and(|info| info.contains("master_link_status:up"))
        });
    }
}

/// A master with the replication settings every replicated test server gets, for replicas
/// to follow.
pub fn start_replicated_master() -> RedisServer {
    RedisServer::start_with_args(&REPLICATION)
}

/// A master with one replica in sync.
pub fn replicated() -> (RedisServer, RedisServer) {
    let master = start_replicated_master();
    let replica = start_replica_of(&master);
    (master, replica)
}

/// A replica of `master`, in sync. `DEBUG SLEEP` pauses it.
pub fn start_replica_of(master: &RedisServer) -> RedisServer {
    start_replica_via(master, master.port())
}

/// A replica of `master` that reaches it through loopback port `via` (a proxy's), in sync.
/// Blocks the thread while it waits: from a Tokio test, call it in `block_in_place`.
pub fn start_replica_via(master: &RedisServer, via: u16) -> RedisServer {
    let port = via.to_string();
    let mut args = vec![
        "--replicaof",
        "127.0.0.1",
        port.as_str(),
        "--enable-debug-command",
        "yes",
    ];
    args.extend(REPLICATION);
    let replica = RedisServer::start_with_args(&args);
    settle("the replica to sync", || {
        replica
            .command(&["INFO", "replication"])
            .contains("master_link_status:up")
    });
    // After a first sync the master streams writes only once the replica has acknowledged
    // (up to a second later): wait until a write has reached it.
    master.command(&["SET", "replica-probe", &replica.port().to_string()]);
    let me = format!("port={}", replica.port());
    settle("the replica to acknowledge a write", || {
        let info = master.command(&["INFO", "replication"]);
        let offset = info
            .lines()
            .find_map(|line| line.strip_prefix("master_repl_offset:"))
            .unwrap_or_default()
            .trim()
            .to_string();
        info.lines()
            .any(|line| line.contains(&me) && line.contains(&format!("offset={offset},")))
    });
    replica
}
