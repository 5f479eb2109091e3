//! A Sentinel deployment: which Sentinels answer, whether they agree on the master, the
//! quorum, the master's and replicas' state as they see it, and `down-after-milliseconds`
//! and `failover-timeout` against the watchdog's lease. Returns the master to look at.

use std::collections::BTreeMap;

use redisson_lock::fred::types::config::{Config, Server};
use serde_json::{json, Value};

use super::finding::{doc, Finding, LEASE_LEFT_MS, LEASE_MS};
use super::node::{fields, Node};

/// The master the Sentinels name, connected; the findings about the Sentinels; and the
/// deployment's description.
pub(crate) struct Reached {
    /// The master, unless it does not answer (a finding says so).
    pub(crate) master: Option<Node>,
    pub(crate) findings: Vec<Finding>,
    pub(crate) described: Value,
}

/// What one Sentinel said of the service.
struct View {
    sentinel: String,
    master: BTreeMap<String, String>,
    replicas: Result<Vec<BTreeMap<String, String>>, String>,
    /// The other Sentinels watching the service, as this one sees them.
    peers: Result<Vec<BTreeMap<String, String>>, String>,
    /// Why the master's state (quorum, timings, flags) is missing, when it is.
    refused: Option<String>,
}

/// Asks every Sentinel of the URL about `service`, then connects to the master.
///
/// # Errors
/// Why no Sentinel answered about the service.
pub(crate) async fn reach(
    base: &Config,
    hosts: &[Server],
    service: &str,
) -> Result<Reached, String> {
    let mut sentinel_config = base.clone();
    // Sentinels have no databases.
    sentinel_config.database = None;
    let mut views = Vec::new();
    let mut silent = Vec::new();
    for host in hosts {
        let address = format!("{}:{}", host.host, host.port);
        let node = match Node::connect(&sentinel_config, &host.host, host.port).await {
            Ok(node) => node,
            Err(why) => {
                silent.push(format!("{address} ({why})"));
                continue;
            }
        };
        match node.call(&["SENTINEL", "MASTER", service]).await {
            Ok(reply) => {
                let replicas = node
                    .call(&["SENTINEL", "REPLICAS", service])
                    .await
                    .map(|reply| match reply {
                        redisson_lock::fred::types::Value::Array(items) => {
                            items.iter().map(fields).collect()
                        }
                        _ => Vec::new(),
                    });
                let peers = node
                    .call(&["SENTINEL", "SENTINELS", service])
                    .await
                    .map(|reply| match reply {
                        redisson_lock::fred::types::Value::Array(items) => {
                            items.iter().map(fields).collect()
                        }
                        _ => Vec::new(),
                    });
                views.push(View {
                    sentinel: address,
                    master: fields(&reply),
                    replicas,
                    peers,
                    refused: None,
                });
            }
            // The address alone, as the client reads it, when SENTINEL MASTER is refused.
            Err(refused) => match node
                .text(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", service])
                .await
            {
                Ok(reply) if reply.lines().count() == 2 => {
                    let mut lines = reply.lines();
                    let master = BTreeMap::from([
                        (
                            "ip".to_string(),
                            lines.next().unwrap_or_default().to_string(),
                        ),
                        (
                            "port".to_string(),
                            lines.next().unwrap_or_default().to_string(),
                        ),
                    ]);
                    let why = format!("SENTINEL MASTER was refused ({refused})");
                    views.push(View {
                        sentinel: address,
                        master,
                        replicas: Err(why.clone()),
                        peers: Err(why.clone()),
                        refused: Some(why),
                    });
                }
                Ok(_) => silent.push(format!("{address} (does not know {service:?})")),
                Err(why) => silent.push(format!(
                    "{address} (SENTINEL MASTER {service}: {refused}; \
                     SENTINEL GET-MASTER-ADDR-BY-NAME: {why})"
                )),
            },
        }
        node.close().await;
    }
    let Some(first) = views.first() else {
        return Err(format!(
            "no Sentinel answered about the service {service:?}: {}",
            silent.join(", ")
        ));
    };
    let named = |view: &View| {
        format!(
            "{}:{}",
            view.master.get("ip").map_or("?", String::as_str),
            view.master.get("port").map_or("?", String::as_str)
        )
    };
    let master_address = named(first);
    // The master's state, from a Sentinel that let SENTINEL MASTER be read, if any did.
    let state = views
        .iter()
        .find(|view| view.refused.is_none())
        .unwrap_or(first);
    let mut findings = Vec::new();
    let field = |name: &str| {
        state
            .master
            .get(name)
            .and_then(|value| value.parse::<u64>().ok())
    };
    let quorum = field("quorum");
    let known = field("num-other-sentinels").map(|others| others + 1);
    findings.push(reachable(hosts.len(), views.len(), &silent, quorum));
    let disagree: Vec<String> = views
        .iter()
        .filter(|view| named(view) != master_address)
        .map(|view| format!("{} names {}", view.sentinel, named(view)))
        .collect();
    if disagree.is_empty() {
        findings.push(Finding::fine(
            "sentinel.master",
            format!(
                "every Sentinel that answered names {master_address} as the master of {service:?}"
            ),
            doc::SENTINEL,
        ));
    } else {
        findings.push(Finding::problem(
            "sentinel.master",
            format!(
                "the Sentinels disagree on the master of {service:?}: {} names {master_address}, {}",
                first.sentinel,
                disagree.join(", ")
            ),
            "wait for the failover to end, then run the doctor again; if it lasts, look at the \
             Sentinels' logs"
                .into(),
            doc::SENTINEL,
        ));
    }
    let flags = state.master.get("flags").cloned().unwrap_or_default();
    if flags.contains("o_down") || flags.contains("s_down") {
        findings.push(Finding::problem(
            "sentinel.master_down",
            format!("the Sentinels see the master {master_address} as down (flags {flags})"),
            "a failover should follow; if none does, look at the replicas and the quorum".into(),
            doc::SENTINEL,
        ));
    }
    let why = state
        .refused
        .as_deref()
        .unwrap_or("SENTINEL MASTER did not report it");
    findings.push(quorum_finding(quorum, known, service, why));
    // Each Sentinel has its own timings: the slowest to declare the master down counts.
    let slowest = views
        .iter()
        .filter(|view| view.refused.is_none())
        .max_by_key(|view| {
            let down_after = view.master.get("down-after-milliseconds");
            down_after.and_then(|value| value.parse::<u64>().ok())
        })
        .unwrap_or(state);
    findings.push(timings(&slowest.master, service, why));
    findings.extend(replica_views(&state.replicas, &state.sentinel));
    findings.extend(peer_views(&state.peers, &state.sentinel, service));
    let (host, port) = super::node::host_port(&master_address)
        .ok_or_else(|| format!("the Sentinels named no usable master: {master_address:?}"))?;
    let master = match Node::connect(base, &host, port).await {
        Ok(master) => Some(master),
        Err(why) => {
            findings.push(Finding::problem(
                "sentinel.master_reachable",
                format!(
                    "the master the Sentinels name, {master_address}, does not answer this \
                     machine: {why}"
                ),
                "bring it back, or let the Sentinels fail over to a replica; if it answers \
                 the services, check this machine's network and the URL's credentials"
                    .into(),
                doc::SENTINEL,
            ));
            None
        }
    };
    let sentinels: Vec<String> = hosts
        .iter()
        .map(|host| format!("{}:{}", host.host, host.port))
        .collect();
    let described = json!({
        "service": service,
        "sentinels": sentinels,
        "sentinels_answering": views.len(),
        "quorum": quorum,
        "master": master_address,
    });
    Ok(Reached {
        master,
        findings,
        described,
    })
}

/// How many of the URL's Sentinels answered.
fn reachable(listed: usize, answering: usize, silent: &[String], quorum: Option<u64>) -> Finding {
    if silent.is_empty() {
        return Finding::fine(
            "sentinel.reachable",
            format!("all {listed} Sentinels of the URL answer"),
            doc::SENTINEL,
        );
    }
    let what = format!(
        "{answering} of the {listed} Sentinels of the URL answer; not: {}",
        silent.join(", ")
    );
    match quorum {
        Some(quorum) if (answering as u64) < quorum => Finding::problem(
            "sentinel.reachable",
            format!("{what}: fewer than the quorum ({quorum}), so no failover can start"),
            "bring the Sentinels back up, or fix the network between them".into(),
            doc::SENTINEL,
        ),
        _ => Finding::warning(
            "sentinel.reachable",
            format!(
                "{what}: a failover still has its quorum, but one more lost Sentinel may stop it"
            ),
            "bring the Sentinel back up (or remove it from the URL if it is gone for good)".into(),
            doc::SENTINEL,
        ),
    }
}

/// The quorum against the Sentinels that know each other.
fn quorum_finding(quorum: Option<u64>, known: Option<u64>, service: &str, why: &str) -> Finding {
    let (Some(quorum), Some(known)) = (quorum, known) else {
        return Finding::unknown(
            "sentinel.quorum",
            format!("the quorum of {service:?} is unknown: {why}"),
            "let the user run SENTINEL MASTER on the Sentinels, or run it as an administrator"
                .into(),
            doc::SENTINEL,
        );
    };
    if known < quorum {
        Finding::problem(
            "sentinel.quorum",
            format!("the quorum of {service:?} is {quorum} but only {known} Sentinels know each other: no failover can start"),
            "add Sentinels, or lower the quorum (SENTINEL SET <service> quorum)".into(),
            doc::SENTINEL,
        )
    } else if known < 3 {
        Finding::warning(
            "sentinel.quorum",
            format!("{known} Sentinel(s) watch {service:?} (quorum {quorum}): a failover needs a majority of them, so losing one may stop it"),
            "run at least three Sentinels, on separate machines".into(),
            doc::SENTINEL,
        )
    } else {
        Finding::fine(
            "sentinel.quorum",
            format!("{known} Sentinels watch {service:?}, with a quorum of {quorum}"),
            doc::SENTINEL,
        )
    }
}

/// `down-after-milliseconds` and `failover-timeout` against the lease: holds live through
/// the outage on their replicated TTL, at least two thirds of the lease.
fn timings(master: &BTreeMap<String, String>, service: &str, why: &str) -> Finding {
    let get = |name: &str| master.get(name).and_then(|value| value.parse::<u64>().ok());
    let (Some(down_after), Some(failover_timeout)) =
        (get("down-after-milliseconds"), get("failover-timeout"))
    else {
        return Finding::unknown(
            "sentinel.timings",
            format!("the failover timings of {service:?} are unknown: {why}"),
            "let the user run SENTINEL MASTER on the Sentinels, or run it as an administrator"
                .into(),
            doc::TIMEOUTS,
        );
    };
    let said = format!(
        "down-after-milliseconds is {down_after} ms and failover-timeout {failover_timeout} ms \
         for {service:?}"
    );
    if down_after >= LEASE_LEFT_MS {
        Finding::warning(
            "sentinel.timings",
            format!(
                "{said}: a master is declared down only after {down_after} ms, while a hold \
                 has {LEASE_LEFT_MS} ms of its {LEASE_MS} ms lease left, at least, when its \
                 master goes away: holds expire during the failover"
            ),
            format!(
                "SENTINEL SET {service} down-after-milliseconds 5000 (well under {LEASE_LEFT_MS} \
                 ms), or a longer watchdog lease in the services"
            ),
            doc::TIMEOUTS,
        )
    } else {
        Finding::fine(
            "sentinel.timings",
            format!("{said}: a failover starts well within the {LEASE_LEFT_MS} ms a hold has left"),
            doc::TIMEOUTS,
        )
    }
}

/// The replicas as a Sentinel sees them.
fn replica_views(
    replicas: &Result<Vec<BTreeMap<String, String>>, String>,
    sentinel: &str,
) -> Vec<Finding> {
    let replicas = match replicas {
        Ok(replicas) => replicas,
        Err(why) => {
            return vec![Finding::unknown(
                "sentinel.replicas",
                format!("the replicas as {sentinel} sees them are unknown: SENTINEL REPLICAS was refused ({why})"),
                "let the user run SENTINEL REPLICAS".into(),
                doc::SENTINEL,
            )]
        }
    };
    let down: Vec<String> = replicas
        .iter()
        .filter(|replica| {
            let flags = replica.get("flags").map_or("", String::as_str);
            flags.contains("s_down") || flags.contains("disconnected")
        })
        .map(|replica| {
            format!(
                "{}:{} ({})",
                replica.get("ip").map_or("?", String::as_str),
                replica.get("port").map_or("?", String::as_str),
                replica.get("flags").map_or("?", String::as_str)
            )
        })
        .collect();
    if replicas.is_empty() {
        vec![Finding::problem(
            "sentinel.replicas",
            format!("{sentinel} knows no replica of the master: there is nothing to fail over to"),
            "add a replica of the master".into(),
            doc::SENTINEL,
        )]
    } else if down.is_empty() {
        vec![Finding::fine(
            "sentinel.replicas",
            format!("{sentinel} sees {} replica(s), none down", replicas.len()),
            doc::SENTINEL,
        )]
    } else {
        vec![Finding::warning(
            "sentinel.replicas",
            format!("{sentinel} sees replicas down: {}", down.join(", ")),
            "bring them back: a failover can only promote a replica that is up".into(),
            doc::SENTINEL,
        )]
    }
}

/// The other Sentinels as one sees them: one it marks down (`s_down`, `disconnected`) will
/// not vote in a failover, whether or not the URL names it.
fn peer_views(
    peers: &Result<Vec<BTreeMap<String, String>>, String>,
    sentinel: &str,
    service: &str,
) -> Vec<Finding> {
    let peers = match peers {
        Ok(peers) => peers,
        // Already said: SENTINEL MASTER was refused too.
        Err(_) => return Vec::new(),
    };
    let down: Vec<String> = peers
        .iter()
        .filter(|peer| {
            let flags = peer.get("flags").map_or("", String::as_str);
            flags.contains("s_down") || flags.contains("o_down") || flags.contains("disconnected")
        })
        .map(|peer| {
            format!(
                "{}:{} ({})",
                peer.get("ip").map_or("?", String::as_str),
                peer.get("port").map_or("?", String::as_str),
                peer.get("flags").map_or("?", String::as_str)
            )
        })
        .collect();
    if down.is_empty() {
        vec![Finding::fine(
            "sentinel.peers",
            format!(
                "{sentinel} sees {} other Sentinel(s) watching {service:?}, none down",
                peers.len()
            ),
            doc::SENTINEL,
        )]
    } else {
        vec![Finding::warning(
            "sentinel.peers",
            format!(
                "{sentinel} sees Sentinels watching {service:?} down: {}; they take no part \
                 in a failover",
                down.join(", ")
            ),
            "bring them back up, or, if they are gone for good, SENTINEL RESET the service \
             on the others"
                .into(),
            doc::SENTINEL,
        )]
    }
}
