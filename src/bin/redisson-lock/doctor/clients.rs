//! Check 4, as a client sees each master: the round trip (p50 and p99 of 20 `PING`s), how
//! far this machine's clock is from the server's (`TIME`), which the fair lock's queue and
//! the permit-expirable semaphore's leases depend on (they are judged by clients' clocks),
//! the clients connected (`CLIENT LIST`), what a `WAIT` for a replica costs there; and, once
//! for the deployment, which pub/sub Java's Redisson and this crate use on it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::finding::{doc, Finding};
use super::node::{Node, DOCTOR_NAME};
use super::permissions::Shape;
use super::server;

/// How many `PING`s the round trip is measured over.
const PINGS: usize = 20;

/// A round trip above this is worth a warning: every acquisition, renewal and release takes
/// at least one, and a replica wait one more.
const SLOW_MS: f64 = 100.0;

/// A clock this far from the server's is worth a warning.
const SKEW_MS: i64 = 1_000;

/// The round-trip and clock findings of `node`.
pub(crate) async fn check(node: &Node) -> Vec<Finding> {
    let mut findings = Vec::new();
    let at = &node.address;
    let mut rtts = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let start = Instant::now();
        if let Err(why) = node.call(&["PING"]).await {
            findings.push(Finding::unknown(
                "clients.round_trip",
                format!("the round trip to {at} is unknown: PING failed ({why})"),
                "let the user run PING".into(),
                doc::LATENCY,
            ));
            break;
        }
        rtts.push(start.elapsed());
    }
    if rtts.len() == PINGS {
        rtts.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let p50 = ms(rtts[PINGS / 2]);
        let p99 = ms(rtts[(PINGS * 99 / 100).min(PINGS - 1)]);
        let what = format!(
            "the round trip to {at} is {p50:.2} ms (p50), {p99:.2} ms (p99) over {PINGS} PINGs"
        );
        findings.push(if p99 > SLOW_MS {
            Finding::warning(
                "clients.round_trip",
                format!("{what}: every acquisition, renewal and release takes at least one round trip, and the replica check one more"),
                "run the services close to the servers, or look at the network and the servers' load".into(),
                doc::LATENCY,
            )
        } else {
            Finding::fine("clients.round_trip", what, doc::LATENCY)
        });
    }
    findings.push(clock(node).await);
    findings.push(connected(node).await);
    findings.extend(replica_wait(node).await);
    findings
}

/// This machine's clock against `node`'s, corrected by half the round trip.
async fn clock(node: &Node) -> Finding {
    let at = &node.address;
    let before = SystemTime::now();
    let started = Instant::now();
    let reply = node.text(&["TIME"]).await;
    let rtt = started.elapsed();
    let reply = match reply {
        Ok(reply) => reply,
        Err(why) => {
            return Finding::unknown(
                "clients.clock",
                format!("the clock of {at} is unknown: TIME was refused ({why})"),
                "let the user run TIME".into(),
                doc::CLOCKS,
            )
        }
    };
    let mut parts = reply.lines().map(|part| part.trim().parse::<i64>());
    let (Some(Ok(secs)), Some(Ok(micros))) = (parts.next(), parts.next()) else {
        return Finding::unknown(
            "clients.clock",
            format!("the clock of {at} is unknown: TIME answered {reply:?}"),
            String::new(),
            doc::CLOCKS,
        );
    };
    let server_ms = secs * 1000 + micros / 1000;
    let local = before + rtt / 2;
    let local_ms = local
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let offset = local_ms - server_ms;
    let what = format!(
        "this machine's clock is {offset} ms from {at}'s (±{} ms)",
        rtt.as_millis() / 2 + 1
    );
    let why = "a permit-expirable semaphore's leases are ended by the clock of whichever client \
               looks, and a fair lock's queue deadlines by each waiter's: clients whose clocks \
               differ by more than a small part of the shortest lease end permits early";
    if offset.abs() > SKEW_MS {
        Finding::warning(
            "clients.clock",
            format!("{what}: {why}"),
            "synchronise the clocks of every client machine (NTP, chrony); run the doctor on \
             each to compare"
                .into(),
            doc::CLOCKS,
        )
    } else {
        Finding::fine(
            "clients.clock",
            format!("{what}; keep every client's clock this close: {why}"),
            doc::CLOCKS,
        )
    }
}

/// The prefix of the name this crate's clients give every connection:
/// `redisson-lock:<client uuid>` (the library's `CONNECTION_NAME_PREFIX`).
const CONNECTION_NAME_PREFIX: &str = "redisson-lock:";

/// The connections of one `CLIENT LIST`, counted, the doctor's own left out.
#[derive(Debug, Default, PartialEq)]
struct Connections {
    /// The uuids of this crate's clients, each with its number of connections.
    lock_clients: BTreeMap<String, usize>,
    /// Connections without a name.
    unnamed: usize,
    /// Connections with another name (a Sentinel's, another application's).
    other: usize,
}

/// Counts the lines of `CLIENT LIST`, leaving out the connection `own` (the doctor's, by
/// `CLIENT ID`), those named [`DOCTOR_NAME`] and the replication links (flags `S`, `M`).
fn count(list: &str, own: Option<&str>) -> Connections {
    let mut counted = Connections::default();
    for line in list.lines().filter(|line| !line.trim().is_empty()) {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or("")
        };
        let flags = field("flags");
        if own == Some(field("id"))
            || field("name") == DOCTOR_NAME
            || flags.contains('S')
            || flags.contains('M')
        {
            continue;
        }
        let uuid = field("name")
            .strip_prefix(CONNECTION_NAME_PREFIX)
            .filter(|id| id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
        match (uuid, field("name")) {
            (Some(uuid), _) => *counted.lock_clients.entry(uuid.to_string()).or_default() += 1,
            (None, "") => counted.unnamed += 1,
            (None, _) => counted.other += 1,
        }
    }
    counted
}

/// The clients connected to `node`: this crate's by their connection names, the unnamed and
/// the otherwise named connections, the doctor's own left out.
async fn connected(node: &Node) -> Finding {
    let at = &node.address;
    let list =
        match node.text(&["CLIENT", "LIST"]).await {
            Ok(list) => list,
            Err(why) => return Finding::unknown(
                "clients.connected",
                format!(
                    "the clients connected to {at} are unknown: CLIENT LIST was refused ({why})"
                ),
                "let the user run CLIENT LIST (+client|list), or run the doctor as a user who may"
                    .into(),
                doc::CONNECTED,
            ),
        };
    let own = node.text(&["CLIENT", "ID"]).await.ok();
    let counted = count(&list, own.as_deref().map(str::trim));
    let connections: usize = counted.lock_clients.values().sum();
    let clients = counted.lock_clients.len();
    let named: Vec<&str> = counted.lock_clients.keys().map(String::as_str).collect();
    let ids = if named.is_empty() {
        String::new()
    } else {
        format!(" ({})", named.join(", "))
    };
    Finding::fine(
        "clients.connected",
        format!(
            "{at} has {clients} redisson-lock client(s){ids} over {connections} connection(s) \
             named redisson-lock:<uuid>, {} unnamed connection(s) and {} otherwise named, the \
             doctor's own and the replicas' links left out; an unnamed connection may be one \
             of this crate's pub/sub connections (it names only those it sends commands on), \
             this crate's where CLIENT SETNAME is refused, a Java Redisson client's (it names \
             none unless clientName is set) or another application's: the doctor cannot tell \
             which",
            counted.unnamed, counted.other
        ),
        doc::CONNECTED,
    )
}

/// How many `WAIT`s are timed on a master with replicas.
const WAITS: usize = 5;

/// How long each `WAIT` may wait for a replica, in ms: the replica check's default timeout
/// (`wait_for_replicas`, Redisson's `slavesSyncTimeout`).
const WAIT_LIMIT_MS: u64 = 1_000;

/// A `WAIT` slower than this (the slowest of them) is worth a warning.
const SLOW_WAIT_MS: f64 = 10.0;

/// What a `WAIT 1` costs on `node` when it has replicas: p50 and max of [`WAITS`] of them.
/// Nothing when `node` is a replica (`replication.role` says so).
async fn replica_wait(node: &Node) -> Option<Finding> {
    let at = &node.address;
    let info = match node.info("replication").await {
        Ok(info) => info,
        Err(why) => {
            return Some(Finding::unknown(
                "clients.replica_wait",
                format!(
                    "what a WAIT for a replica costs on {at} is unknown: INFO replication was \
                     refused ({why})"
                ),
                "let the user run INFO (+info)".into(),
                doc::REPLICA_WAIT,
            ))
        }
    };
    if info.get("role").map(String::as_str) == Some("slave") {
        return None;
    }
    let replicas: u64 = (info.get("connected_slaves"))
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    if replicas == 0 {
        return Some(Finding::fine(
            "clients.replica_wait",
            format!("{at} has no replica: nothing to time, the replica check sends no WAIT there"),
            doc::REPLICA_WAIT,
        ));
    }
    let limit = WAIT_LIMIT_MS.to_string();
    let mut times = Vec::with_capacity(WAITS);
    for _ in 0..WAITS {
        let start = Instant::now();
        let reply = node.text(&["WAIT", "1", &limit]).await;
        let took = start.elapsed().as_secs_f64() * 1000.0;
        let acknowledged = match reply {
            Ok(text) => (text.trim().parse::<u64>()).map_err(|_| format!("WAIT answered {text:?}")),
            Err(why) => Err(format!("WAIT was refused ({why})")),
        };
        match acknowledged {
            Ok(0) => {
                return Some(Finding::warning(
                    "clients.replica_wait",
                    format!(
                        "WAIT 1 {limit} on {at} answered 0 after {took:.0} ms: none of its \
                         {replicas} replica(s) acknowledged within the limit, so every \
                         acquisition fails with NotReplicated (it is undone) and every release \
                         after it happened, while the replica check is on"
                    ),
                    "look at the replicas' link and load (INFO replication on them), or turn \
                     the check off knowingly (LockClientBuilder::wait_for_replicas(None))"
                        .into(),
                    doc::REPLICA_WAIT,
                ))
            }
            Ok(_) => times.push(took),
            Err(why) => {
                return Some(Finding::unknown(
                    "clients.replica_wait",
                    format!("what a WAIT for a replica costs on {at} is unknown: {why}"),
                    "let the user run WAIT (+wait)".into(),
                    doc::REPLICA_WAIT,
                ));
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let (p50, max) = (times[WAITS / 2], times[WAITS - 1]);
    let what = format!(
        "WAIT 1 {limit} on {at} ({replicas} replica(s)) took {p50:.2} ms (p50), {max:.2} ms \
         (max) over {WAITS}: the replica check (on by default, \
         LockClientBuilder::wait_for_replicas) adds a WAIT to every acquisition and release; \
         the doctor writes nothing, so the server answers from the acknowledgements it has, \
         and after a lock's write a WAIT also waits for a replica to receive it"
    );
    Some(if max > SLOW_WAIT_MS {
        Finding::warning(
            "clients.replica_wait",
            format!("{what}: more than {SLOW_WAIT_MS} ms"),
            "look at the network and the load between the clients, the master and its \
             replicas; a remote replica makes every acquisition and release wait for it"
                .into(),
            doc::REPLICA_WAIT,
        )
    } else {
        Finding::fine("clients.replica_wait", what, doc::REPLICA_WAIT)
    })
}

/// Which pub/sub a Java Redisson client with the default `shardedSubscriptionMode = AUTO` and
/// this crate's `PubSubMode::Auto` use on the deployment, and whether they hear each other.
pub(crate) async fn pubsub_mode(shape: Shape, masters: &[Node]) -> Finding {
    let check = "clients.pubsub_mode";
    if shape != Shape::Cluster {
        return Finding::fine(
            check,
            "outside a cluster, Java's Redisson (whatever its shardedSubscriptionMode) and this \
             crate (PubSubMode::Auto) both use classic pub/sub (PUBLISH, SUBSCRIBE): they hear \
             each other's releases"
                .into(),
            doc::PUBSUB_MODE,
        );
    }
    if masters.is_empty() {
        return Finding::unknown(
            check,
            "the pub/sub the clients use is unknown: no master of the cluster answered".into(),
            String::new(),
            doc::PUBSUB_MODE,
        );
    }
    let (mut sharded, mut classic, mut unknown) = (Vec::new(), Vec::new(), Vec::new());
    for master in masters {
        match server::identify(master).await {
            Ok(found) if found.has_7_0() => sharded.push(master.address.clone()),
            Ok(_) => classic.push(master.address.clone()),
            Err(why) => unknown.push(format!("{} ({why})", master.address)),
        }
    }
    pubsub_finding(&sharded, &classic, &unknown)
}

/// The pub/sub finding of a cluster whose masters have sharded pub/sub (7.0 and newer) or
/// not, or of an unknown version.
fn pubsub_finding(sharded: &[String], classic: &[String], unknown: &[String]) -> Finding {
    let check = "clients.pubsub_mode";
    if !unknown.is_empty() {
        return Finding::unknown(
            check,
            format!(
                "the pub/sub the clients use is unknown: the version of {} is unknown",
                unknown.join(", ")
            ),
            "let the user run INFO server or HELLO".into(),
            doc::PUBSUB_MODE,
        );
    }
    if sharded.is_empty() {
        return Finding::fine(
            check,
            "the cluster's masters have no sharded pub/sub (it comes with Redis 7.0): Java's \
             Redisson with shardedSubscriptionMode = AUTO and this crate (PubSubMode::Auto) \
             both use classic pub/sub (PUBLISH, SUBSCRIBE) and hear each other's releases"
                .into(),
            doc::PUBSUB_MODE,
        );
    }
    if !classic.is_empty() {
        return Finding::warning(
            check,
            format!(
                "some of the cluster's masters have sharded pub/sub ({}) and some not ({}): \
                 Java's AUTO switches sharding on when PUBSUB SHARDNUMSUB works on the first \
                 node it contacts, so Java clients may differ from one another, while this \
                 crate's PubSubMode::Auto stays classic until every master has it; a release \
                 published one way does not wake waiters listening the other way",
                sharded.join(", "),
                classic.join(", ")
            ),
            "finish the upgrade to Redis 7.0 or newer; until then set the Java clients' \
             shardedSubscriptionMode = OFF, which matches this crate's Auto"
                .into(),
            doc::PUBSUB_MODE,
        );
    }
    // The Java clients' settings cannot be read here: the defaults hear each other, and the
    // advice says what to do for the others.
    let fine = Finding::fine(
        check,
        "every master of the cluster has sharded pub/sub (Redis or Valkey 7.0 and newer): Java's \
         Redisson from 3.22 with shardedSubscriptionMode = AUTO (the default) or ON uses sharded \
         pub/sub (SPUBLISH, SSUBSCRIBE); this crate's PubSubMode::Auto publishes with SPUBLISH \
         and listens to both kinds, so the two hear each other. Java clients with \
         shardedSubscriptionMode = OFF, or Redisson before 3.22, use classic pub/sub: they wake \
         Auto's waiters, but do not hear its releases, and their waiters fall back to their \
         timers"
            .into(),
        doc::PUBSUB_MODE,
    );
    Finding {
        advice: "nothing to do if every Java client runs Redisson 3.22 or newer with AUTO or ON; if some \
         run OFF or an older Redisson, build this crate's clients with PubSubMode::Both (a mix) \
         or PubSubMode::Classic (all of them classic)"
            .into(),
        ..fine
    }
}

#[cfg(test)]
mod tests {
    use super::{count, pubsub_finding};
    use crate::doctor::finding::Severity;

    #[test]
    fn counts_connections_by_name() {
        let uuid = "8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13";
        let list = format!(
            "id=3 addr=a name=redisson-lock:{uuid} flags=N\n\
             id=4 addr=b name=redisson-lock:{uuid} flags=P\n\
             id=5 addr=c name= flags=N\n\
             id=6 addr=d name=redisson-lock-doctor flags=N\n\
             id=7 addr=e name= flags=N\n\
             id=8 addr=f name= flags=S\n\
             id=9 addr=g name=sentinel-1-cmd flags=N\n"
        );
        let counted = count(&list, Some("7"));
        assert_eq!(counted.lock_clients.len(), 1);
        assert_eq!(counted.lock_clients[uuid], 2);
        assert_eq!((counted.unnamed, counted.other), (1, 1));
    }

    #[test]
    fn rates_the_pubsub_modes() {
        let one = || vec!["h:1".to_string()];
        let none = Vec::new;
        assert_eq!(
            pubsub_finding(&none(), &one(), &none()).severity,
            Severity::Fine
        );
        let sharded = pubsub_finding(&one(), &none(), &none());
        assert_eq!(sharded.severity, Severity::Fine);
        assert!(sharded.advice.contains("PubSubMode::Both"));
        assert_eq!(
            pubsub_finding(&one(), &one(), &none()).severity,
            Severity::Warning
        );
        let unknown = pubsub_finding(&one(), &none(), &one());
        assert!(unknown.what.contains("unknown"));
    }
}
