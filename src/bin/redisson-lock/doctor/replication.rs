//! Check 3, replication and persistence of one master: its replicas (online, lag, their
//! link), `min-replicas-to-write` and `min-replicas-max-lag`, the refused writes a diskless
//! sync's delay implies after a failover, and what a restart keeps.

use std::collections::BTreeMap;

use redisson_lock::fred::types::config::Config;

use super::finding::{doc, Finding};
use super::node::{info_fields, Node};

/// A replica that last acknowledged longer ago than this, in seconds, is behind (they
/// acknowledge every second).
const MAX_LAG: u64 = 5;

/// One replica as its master's `INFO replication` lists it (`slave0:ip=...,port=...`).
#[derive(Debug, Clone)]
struct Replica {
    address: String,
    state: String,
    /// Seconds since its last acknowledgement.
    lag: Option<u64>,
}

fn replicas(info: &BTreeMap<String, String>) -> Vec<Replica> {
    let mut found = Vec::new();
    for n in 0.. {
        let Some(line) = info.get(&format!("slave{n}")) else {
            break;
        };
        let fields: BTreeMap<&str, &str> = line
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .collect();
        let ip = fields.get("ip").copied().unwrap_or("?");
        let port = fields.get("port").copied().unwrap_or("?");
        found.push(Replica {
            address: format!("{ip}:{port}"),
            state: fields
                .get("state")
                .copied()
                .unwrap_or("unknown")
                .to_string(),
            lag: fields.get("lag").and_then(|lag| lag.parse().ok()),
        });
    }
    found
}

/// The replication and persistence findings of the server `node`, which the deployment
/// names as a master (`single`: the URL names it; a replica there is a problem).
pub(crate) async fn check(node: &Node, base: &Config, single: bool) -> Vec<Finding> {
    let mut findings = Vec::new();
    let at = &node.address;
    let info = match node.info("replication").await {
        Ok(info) => info,
        Err(why) => {
            findings.push(Finding::unknown(
                "replication.replicas",
                format!("the replicas of {at} are unknown: INFO replication was refused ({why})"),
                "let the user run INFO (+info), or run the doctor as a user who may".into(),
                doc::REPLICAS,
            ));
            findings.extend(persistence(node).await);
            return findings;
        }
    };
    let role = info.get("role").cloned().unwrap_or_default();
    if role == "slave" {
        let master = format!(
            "{}:{}",
            info.get("master_host").map_or("?", String::as_str),
            info.get("master_port").map_or("?", String::as_str)
        );
        if single {
            findings.push(Finding::problem(
                "replication.role",
                format!("{at} is a replica of {master}: every lock write there fails (READONLY)"),
                format!("connect to the master, {master}, or through Sentinel"),
                doc::REPLICAS,
            ));
        } else {
            findings.push(Finding::problem(
                "replication.role",
                format!("{at}, named as a master, says it is a replica of {master}"),
                "look at the Sentinels' or the cluster's view of the masters: a failover may \
                 be under way"
                    .into(),
                doc::REPLICAS,
            ));
        }
        return findings;
    }
    let listed = replicas(&info);
    findings.extend(replica_findings(at, &listed));
    for replica in &listed {
        findings.extend(link(base, &replica.address, at).await);
    }
    findings.extend(min_replicas(node, listed.len()).await);
    findings.extend(persistence(node).await);
    findings
}

/// Whether the master has replicas, and whether they keep up.
fn replica_findings(at: &str, listed: &[Replica]) -> Vec<Finding> {
    if listed.is_empty() {
        return vec![Finding::warning(
            "replication.replicas",
            format!(
                "{at} has no replica: its locks survive no failover, and a restart without \
                 persistence loses them all"
            ),
            "add a replica (REPLICAOF on another server), behind Sentinel or in a cluster so \
             that it takes over"
                .into(),
            doc::REPLICAS,
        )];
    }
    let behind: Vec<String> = listed
        .iter()
        .filter(|replica| replica.state != "online" || replica.lag.is_none_or(|lag| lag > MAX_LAG))
        .map(|replica| {
            let lag = replica
                .lag
                .map_or("unknown".into(), |lag| format!("{lag} s"));
            format!("{} ({}, lag {lag})", replica.address, replica.state)
        })
        .collect();
    if behind.is_empty() {
        let names: Vec<&str> = listed
            .iter()
            .map(|replica| replica.address.as_str())
            .collect();
        vec![Finding::fine(
            "replication.replicas",
            format!(
                "{at} has {} replica(s), online and acknowledging within {MAX_LAG} s: {}",
                listed.len(),
                names.join(", ")
            ),
            doc::REPLICAS,
        )]
    } else {
        vec![Finding::warning(
            "replication.replicas",
            format!(
                "replicas of {at} are not keeping up: {}; a failover to one of them loses the \
                 locks it has not received, and each acquisition waits for its acknowledgement",
                behind.join(", ")
            ),
            "look at the replica's link and load (INFO replication on it)".into(),
            doc::REPLICAS,
        )]
    }
}

/// The link of the replica at `address` to its master `master`, seen from the replica.
async fn link(base: &Config, address: &str, master: &str) -> Vec<Finding> {
    let Some((host, port)) = super::node::host_port(address) else {
        return Vec::new();
    };
    let node = match Node::connect(base, &host, port).await {
        Ok(node) => node,
        Err(why) => {
            return vec![Finding::unknown(
                "replication.link",
                format!("the replica {address} of {master} could not be reached: {why}"),
                "check that this machine may reach it with the URL's user, or run the doctor \
                 where it can"
                    .into(),
                doc::REPLICAS,
            )]
        }
    };
    let finding = match node.text(&["INFO", "replication"]).await {
        Ok(reply) => {
            let info = info_fields(&reply);
            match info.get("master_link_status").map(String::as_str) {
                Some("up") => Finding::fine(
                    "replication.link",
                    format!("the replica {address}'s link to {master} is up"),
                    doc::REPLICAS,
                ),
                status => Finding::warning(
                    "replication.link",
                    format!(
                        "the replica {address}'s link to {master} is {}: it is not receiving \
                         the locks' writes",
                        status.unwrap_or("not reported")
                    ),
                    "look at the replica's log for why it cannot sync".into(),
                    doc::REPLICAS,
                ),
            }
        }
        Err(why) => Finding::unknown(
            "replication.link",
            format!("the link of the replica {address} is unknown: INFO was refused ({why})"),
            "let the user run INFO (+info)".into(),
            doc::REPLICAS,
        ),
    };
    node.close().await;
    vec![finding]
}

/// `min-replicas-to-write`, `min-replicas-max-lag`, and the refused writes the diskless
/// sync's delay implies when they are set.
async fn min_replicas(node: &Node, connected: usize) -> Vec<Finding> {
    let at = &node.address;
    let (to_write, max_lag) = match (
        node.config("min-replicas-to-write").await,
        node.config("min-replicas-max-lag").await,
    ) {
        (Ok(to_write), Ok(max_lag)) => (to_write, max_lag),
        (Err(why), _) | (_, Err(why)) => {
            return vec![Finding::unknown(
                "replication.min_replicas",
                format!("min-replicas-to-write on {at} is unknown: CONFIG GET was refused ({why})"),
                "let the user run CONFIG GET (+config|get), or read it in the server's \
                 redis.conf"
                    .into(),
                doc::MIN_REPLICAS,
            )]
        }
    };
    let to_write: usize = to_write.parse().unwrap_or(0);
    if connected == 0 && to_write == 0 {
        // Without replicas it could only refuse every write: nothing to advise here.
        return Vec::new();
    }
    if to_write == 0 {
        return vec![Finding::warning(
            "replication.min_replicas",
            format!(
                "min-replicas-to-write is 0 on {at}: cut off from its replicas, it goes on \
                 taking locks that a failover then drops, and a second holder takes them"
            ),
            format!(
                "CONFIG SET min-replicas-to-write 1 and min-replicas-max-lag 10 on {at} (and \
                 in its redis.conf); writes are then refused while no replica acknowledges"
            ),
            doc::MIN_REPLICAS,
        )];
    }
    if to_write > connected {
        return vec![Finding::problem(
            "replication.min_replicas",
            format!(
                "min-replicas-to-write is {to_write} on {at} but {connected} replica(s) are \
                 connected: it refuses every lock write (NOREPLICAS)"
            ),
            "bring the replicas back, or lower min-replicas-to-write".into(),
            doc::MIN_REPLICAS,
        )];
    }
    let mut findings = vec![Finding::fine(
        "replication.min_replicas",
        format!(
            "{at} refuses writes unless {to_write} replica(s) acknowledged within {max_lag} s \
             (min-replicas-to-write, min-replicas-max-lag)"
        ),
        doc::MIN_REPLICAS,
    )];
    let diskless = node.config("repl-diskless-sync").await;
    let delay = node.config("repl-diskless-sync-delay").await;
    if let (Ok(diskless), Ok(delay)) = (diskless, delay) {
        let delay: u64 = delay.parse().unwrap_or(0);
        if diskless == "yes" && delay > 0 {
            findings.push(Finding::warning(
                "replication.sync_delay",
                format!(
                    "repl-diskless-sync-delay is {delay} s on {at}: after a failover, or when a \
                     replica reconnects for a full sync, it waits {delay} s before sending the \
                     data, and with min-replicas-to-write every lock write is refused for about \
                     that long"
                ),
                format!("CONFIG SET repl-diskless-sync-delay 0 on {at} (and in its redis.conf)"),
                doc::MIN_REPLICAS,
            ));
        }
    }
    findings
}

/// What a restart of `node` keeps: AOF and its fsync, or RDB snapshots, or nothing.
async fn persistence(node: &Node) -> Vec<Finding> {
    let at = &node.address;
    let settings = (
        node.config("appendonly").await,
        node.config("appendfsync").await,
        node.config("save").await,
    );
    let (appendonly, fsync, save) = match settings {
        (Ok(appendonly), Ok(fsync), Ok(save)) => (appendonly, fsync, save),
        (Err(why), ..) | (_, Err(why), _) | (.., Err(why)) => {
            return vec![Finding::unknown(
                "persistence",
                format!("the persistence of {at} is unknown: CONFIG GET was refused ({why})"),
                "let the user run CONFIG GET (+config|get), or read appendonly in the server's \
                 redis.conf"
                    .into(),
                doc::PERSISTENCE,
            )]
        }
    };
    let finding = if appendonly == "yes" && fsync == "always" {
        Finding::fine(
            "persistence",
            format!("{at} writes every lock to its AOF before answering (appendfsync always)"),
            doc::PERSISTENCE,
        )
    } else if appendonly == "yes" {
        Finding::fine(
            "persistence",
            format!(
                "{at} keeps an AOF (appendfsync {fsync}): a crash loses at most about a second \
                 of lock writes"
            ),
            doc::PERSISTENCE,
        )
    } else if save.trim().is_empty() {
        Finding::warning(
            "persistence",
            format!(
                "{at} keeps nothing on disk (no AOF, no snapshots): restarted without a \
                 failover, it comes back empty, and every lock is free while its holders go on"
            ),
            format!("CONFIG SET appendonly yes on {at} (and in its redis.conf)"),
            doc::PERSISTENCE,
        )
    } else {
        Finding::warning(
            "persistence",
            format!(
                "{at} keeps only RDB snapshots (save {save}): restarted without a failover, it \
                 loses every lock taken since the last snapshot"
            ),
            format!("CONFIG SET appendonly yes on {at} (and in its redis.conf)"),
            doc::PERSISTENCE,
        )
    };
    vec![finding]
}
