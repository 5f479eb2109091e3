//! A cluster: every slot served (16384), every master with a replica, the cluster's state,
//! and `cluster-node-timeout` against the watchdog's lease. Returns the masters to look at.

use redisson_lock::fred::types::config::{Config, Server};
use serde_json::{json, Value};

use super::finding::{doc, Finding, LEASE_LEFT_MS, LEASE_MS};
use super::node::{host_port, info_fields, Node};

/// The number of slots of a Redis cluster.
const SLOTS: usize = 16384;

/// The masters that answered (the first is the node the URL led to, when it is a master;
/// findings name those that did not); the findings about the cluster; and its description.
pub(crate) struct Reached {
    pub(crate) masters: Vec<Node>,
    pub(crate) findings: Vec<Finding>,
    pub(crate) described: Value,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct ClusterNode {
    id: String,
    address: String,
    flags: String,
    master_id: Option<String>,
    slots: Vec<(usize, usize)>,
}

impl ClusterNode {
    fn is_master(&self) -> bool {
        self.flags.split(',').any(|flag| flag == "master")
    }

    fn failed(&self) -> bool {
        self.flags
            .split(',')
            .any(|flag| flag == "fail" || flag == "fail?")
    }
}

fn parse_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if parts.len() < 8 {
                return None;
            }
            // ip:port@cport[,hostname]
            let address = parts[1].split(['@', ',']).next()?.to_string();
            let slots = parts[8..]
                .iter()
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((from, to)) => Some((from.parse().ok()?, to.parse().ok()?)),
                    None => {
                        let slot = range.parse().ok()?;
                        Some((slot, slot))
                    }
                })
                .collect();
            Some(ClusterNode {
                id: parts[0].to_string(),
                address,
                flags: parts[2].to_string(),
                master_id: (parts[3] != "-").then(|| parts[3].to_string()),
                slots,
            })
        })
        .collect()
}

/// The slot ranges no master serves, as `from-to` text.
fn uncovered(nodes: &[ClusterNode]) -> Vec<String> {
    let mut served = vec![false; SLOTS];
    for node in nodes
        .iter()
        .filter(|node| node.is_master() && !node.failed())
    {
        for &(from, to) in &node.slots {
            if from < SLOTS {
                served[from..=to.min(SLOTS - 1)].fill(true);
            }
        }
    }
    let mut ranges = Vec::new();
    let mut slot = 0;
    while slot < SLOTS {
        if served[slot] {
            slot += 1;
            continue;
        }
        let from = slot;
        while slot < SLOTS && !served[slot] {
            slot += 1;
        }
        ranges.push(if slot - 1 == from {
            from.to_string()
        } else {
            format!("{from}-{}", slot - 1)
        });
    }
    ranges
}

/// Connects to the first node of the URL that answers, reads the cluster from it, then
/// connects to every master.
///
/// # Errors
/// Why no node of the URL answered `CLUSTER NODES`.
pub(crate) async fn reach(base: &Config, hosts: &[Server]) -> Result<Reached, String> {
    let mut why_not = Vec::new();
    let mut seed = None;
    for host in hosts {
        match Node::connect(base, &host.host, host.port).await {
            Ok(node) => match node.text(&["CLUSTER", "NODES"]).await {
                Ok(text) => {
                    seed = Some((node, text));
                    break;
                }
                Err(why) => {
                    why_not.push(format!("{}: CLUSTER NODES: {why}", node.address));
                    node.close().await;
                }
            },
            Err(why) => why_not.push(format!("{}:{}: {why}", host.host, host.port)),
        }
    }
    let Some((seed, text)) = seed else {
        return Err(format!(
            "no node of the cluster answered: {}",
            why_not.join("; ")
        ));
    };
    let nodes = parse_nodes(&text);
    let mut findings = vec![slots_finding(&nodes)];
    match seed.text(&["CLUSTER", "INFO"]).await {
        Ok(info) => {
            let state = info_fields(&info)
                .get("cluster_state")
                .cloned()
                .unwrap_or_default();
            if state != "ok" {
                findings.push(Finding::problem(
                    "cluster.state",
                    format!(
                        "{} says the cluster's state is {state:?}: it refuses commands",
                        seed.address
                    ),
                    "give every slot a master that is up (CLUSTER ADDSLOTS, or a failover)".into(),
                    doc::CLUSTER,
                ));
            }
        }
        Err(why) => findings.push(Finding::unknown(
            "cluster.state",
            format!("the cluster's state is unknown: CLUSTER INFO was refused ({why})"),
            "let the user run CLUSTER INFO".into(),
            doc::CLUSTER,
        )),
    }
    findings.extend(replicas_finding(&nodes));
    findings.push(node_timeout(&seed).await);
    let seed_address = seed.address.clone();
    seed.close().await;
    let mut masters = Vec::new();
    let mut listed = Vec::new();
    let mut serving: Vec<&ClusterNode> = nodes
        .iter()
        .filter(|node| node.is_master() && !node.failed() && !node.slots.is_empty())
        .collect();
    // The node the URL led to first, so that the server and permission checks run there.
    serving.sort_by_key(|node| node.address != seed_address);
    for node in serving {
        listed.push(node.address.clone());
        let Some((host, port)) = host_port(&node.address) else {
            continue;
        };
        match Node::connect(base, &host, port).await {
            Ok(connected) => masters.push(connected),
            Err(why) => findings.push(Finding::problem(
                "cluster.reachable",
                format!("the master {} could not be reached: {why}", node.address),
                "check that this machine reaches every node as the services do".into(),
                doc::CLUSTER,
            )),
        }
    }
    let described = json!({
        "masters": listed,
        "nodes": nodes.len(),
    });
    Ok(Reached {
        masters,
        findings,
        described,
    })
}

fn slots_finding(nodes: &[ClusterNode]) -> Finding {
    let missing = uncovered(nodes);
    if missing.is_empty() {
        Finding::fine(
            "cluster.slots",
            format!("all {SLOTS} slots have a master that is up"),
            doc::CLUSTER,
        )
    } else {
        Finding::problem(
            "cluster.slots",
            format!(
                "slots without a master that is up: {}; every lock whose name hashes there fails",
                missing.join(", ")
            ),
            "assign them (CLUSTER ADDSLOTS, redis-cli --cluster fix) or bring their master back"
                .into(),
            doc::CLUSTER,
        )
    }
}

/// Every master serving slots should have a replica that is up.
fn replicas_finding(nodes: &[ClusterNode]) -> Vec<Finding> {
    let alone: Vec<&str> = nodes
        .iter()
        .filter(|node| node.is_master() && !node.slots.is_empty())
        .filter(|master| {
            !nodes.iter().any(|replica| {
                replica.master_id.as_deref() == Some(master.id.as_str()) && !replica.failed()
            })
        })
        .map(|master| master.address.as_str())
        .collect();
    if alone.is_empty() {
        vec![Finding::fine(
            "cluster.replicas",
            "every master serving slots has a replica that is up".into(),
            doc::CLUSTER,
        )]
    } else {
        vec![Finding::warning(
            "cluster.replicas",
            format!(
                "masters without a replica that is up: {}; their locks survive no failover",
                alone.join(", ")
            ),
            "give each master a replica (CLUSTER REPLICATE on a new node)".into(),
            doc::CLUSTER,
        )]
    }
}

/// `cluster-node-timeout`: how long a master is out before its replica takes over.
async fn node_timeout(seed: &Node) -> Finding {
    match seed.config("cluster-node-timeout").await {
        Ok(timeout) => {
            let Ok(timeout) = timeout.parse::<u64>() else {
                return Finding::unknown(
                    "cluster.node_timeout",
                    format!("cluster-node-timeout {timeout:?} does not parse"),
                    String::new(),
                    doc::TIMEOUTS,
                );
            };
            if timeout >= LEASE_LEFT_MS {
                Finding::warning(
                    "cluster.node_timeout",
                    format!(
                        "cluster-node-timeout is {timeout} ms: a failed master is replaced only \
                         after it, while a hold has {LEASE_LEFT_MS} ms of its {LEASE_MS} ms \
                         lease left, at least: holds expire during the failover"
                    ),
                    "CONFIG SET cluster-node-timeout 5000 on every node, or a longer watchdog \
                     lease in the services"
                        .into(),
                    doc::TIMEOUTS,
                )
            } else {
                Finding::fine(
                    "cluster.node_timeout",
                    format!(
                        "cluster-node-timeout is {timeout} ms, well within the {LEASE_LEFT_MS} ms \
                         a hold has left when its master fails"
                    ),
                    doc::TIMEOUTS,
                )
            }
        }
        Err(why) => Finding::unknown(
            "cluster.node_timeout",
            format!("cluster-node-timeout is unknown: CONFIG GET was refused ({why})"),
            "let the user run CONFIG GET (+config|get), or read it in the nodes' redis.conf".into(),
            doc::TIMEOUTS,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_nodes, uncovered};

    #[test]
    fn finds_uncovered_slots() {
        let text = "a 127.0.0.1:1@11 myself,master - 0 0 1 connected 0-100 102-16383\n\
                    b 127.0.0.1:2@12 slave a 0 0 1 connected\n";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 2);
        assert_eq!(uncovered(&nodes), vec!["101".to_string()]);
    }
}
