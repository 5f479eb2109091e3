//! Cluster redirections of lock scripts, followed by this crate rather than by fred.
//!
//! fred follows a `MOVED` or `ASK` by writing the command again, which counts as another
//! attempt. A lock script gets one attempt (a resend after a dropped connection could run
//! it twice), so fred refuses to follow the redirection of one, and an `ASK` refused that
//! way stops fred's client for good. On a cluster the scripts therefore go through a
//! client of their own that follows no redirection: fred answers a redirected script with
//! [`is_redirected`] (after reading the new slot map on `MOVED`), and the script runner
//! sends it again itself, with `ASKING` to the importing master while the slot migrates.
//! A redirected script did not run, so sending it again is safe. Sending it with `ASKING`
//! is safe only after the master that serves the slot redirected it: that is an `ASK`,
//! which proves that master has none of its keys (and gets none while the slot migrates).

use fred::clients::Client;
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Options, Server};
use fred::types::{Builder, ClusterHash, ConnectHandle, CustomCommand, Value};

/// How many redirections of one script are followed: a move and a migration, with room.
pub(crate) const MAX_REDIRECTIONS: usize = 5;

/// The client that sends the lock scripts of a cluster: `redis`'s settings, following no
/// redirection itself; with its connection task.
///
/// # Errors
/// When the client cannot be built or connect.
pub(crate) async fn script_client(redis: &Client) -> Result<(Client, ConnectHandle), RedisError> {
    let mut connection = redis.connection_config().clone();
    connection.max_redirections = 0;
    let mut builder = Builder::from_config(redis.client_config());
    builder
        .set_connection_config(connection)
        .set_performance_config(redis.perf_config());
    if let Some(policy) = redis.client_reconnect_policy() {
        builder.set_policy(policy);
    }
    let client = builder.build()?;
    match client.init().await {
        Ok(task) => Ok((client, task)),
        Err(error) => {
            // Connected to some masters, perhaps: fred keeps those until QUIT.
            let _ = client.quit().await;
            Err(error)
        }
    }
}

/// Whether the cluster's slot map differs from `known` (a client's copy), by `CLUSTER SLOTS`
/// asked of one of its masters over `redis`'s open connection to it. fred's own reading of the
/// map (`sync_cluster`) opens a new connection each time, so a check once a second reads it
/// this way, and leaves fred to read it only when it changed. `true` when the map cannot be
/// read within `limit`, so that fred reads it.
pub(crate) async fn slot_map_changed(
    redis: &Client,
    known: Option<ClusterRouting>,
    limit: std::time::Duration,
) -> bool {
    let Some(known) = known else {
        return true;
    };
    let Some(node) = known.random_node().cloned() else {
        return true;
    };
    let command = CustomCommand::new_static("CLUSTER", ClusterHash::Random, false);
    let to_node = Options {
        cluster_node: Some(node.clone()),
        ..Default::default()
    };
    let asked = redis.with_options(&to_node);
    let reading = asked.custom::<Value, _>(command, vec![Value::from("SLOTS")]);
    let read = match tokio::time::timeout(limit, reading).await {
        Ok(Ok(slots)) => ClusterRouting::from_cluster_slots(slots, node.host.clone()),
        Ok(Err(error)) => Err(error),
        Err(_) => return true,
    };
    let primaries = |routing: &ClusterRouting| {
        let slots = routing.slots().iter();
        slots
            .map(|range| (range.start, range.end, range.primary.clone()))
            .collect::<Vec<_>>()
    };
    match read {
        Ok(read) => primaries(&read) != primaries(&known),
        Err(error) => {
            tracing::debug!(%error, %node, "reading the cluster's slots failed");
            true
        }
    }
}

pub(crate) use crate::base::error::{is_redirected, is_try_again};

/// How a master sees a slot: whether it serves it, and the node it migrates it to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotView {
    /// The master asked: the one fred's slot map names.
    pub(crate) node: Server,
    pub(crate) serves: bool,
    pub(crate) migrating_to: Option<Server>,
}

/// How the master that fred's slot map names for `slot` sees it (its `CLUSTER NODES`), or
/// `None` when fred knows no master for it or the master cannot be asked.
pub(crate) async fn slot_view(redis: &Client, slot: u16) -> Option<SlotView> {
    let node = redis.cached_cluster_state()?.get_server(slot)?.clone();
    slot_view_of(redis, node, slot).await
}

/// How `node` sees `slot` (see [`slot_view`]).
pub(crate) async fn slot_view_of(redis: &Client, node: Server, slot: u16) -> Option<SlotView> {
    let command = CustomCommand::new_static("CLUSTER", ClusterHash::Custom(slot), false);
    let to_node = Options {
        cluster_node: Some(node.clone()),
        ..Default::default()
    };
    let nodes: String = match redis
        .with_options(&to_node)
        .custom(command, vec![Value::from("NODES")])
        .await
    {
        Ok(nodes) => nodes,
        Err(error) => {
            tracing::debug!(%error, slot, "reading how a master sees a slot failed");
            return None;
        }
    };
    let (serves, target) = own_view(&nodes, slot)?;
    let migrating_to = target.map(|(host, port)| known_server(redis, host, port));
    Some(SlotView {
        node,
        serves,
        migrating_to,
    })
}

/// fred's name for the master at `host`:`port` (its slot map may name nodes otherwise than
/// `CLUSTER NODES` does).
fn known_server(redis: &Client, host: String, port: u16) -> Server {
    let known = redis
        .cached_cluster_state()
        .map(|state| state.unique_primary_nodes())
        .unwrap_or_default();
    known
        .iter()
        .find(|server| server.port == port && *server.host == *host)
        .or_else(|| known.iter().find(|server| server.port == port))
        .cloned()
        .unwrap_or_else(|| Server::new(host, port))
}

/// From `CLUSTER NODES` as a master answers it: whether it serves `slot`, and the address
/// (host, port) of the node it migrates `slot` to (its own line lists `[<slot>->-<id>]`).
/// `None` when the answer has no line of its own.
fn own_view(nodes: &str, slot: u16) -> Option<(bool, Option<(String, u16)>)> {
    let own = nodes
        .lines()
        .find(|line| line.split(' ').nth(2).is_some_and(|f| f.contains("myself")))?;
    let mut serves = false;
    let mut target_id = None;
    let marker = format!("[{slot}->-");
    for field in own.split(' ').skip(8) {
        if let Some(id) = field.strip_prefix(&marker) {
            target_id = id.strip_suffix(']');
        } else if !field.starts_with('[') {
            let (first, last) = field.split_once('-').unwrap_or((field, field));
            if let (Ok(first), Ok(last)) = (first.parse::<u16>(), last.parse::<u16>()) {
                serves |= (first..=last).contains(&slot);
            }
        }
    }
    let Some(target_id) = target_id else {
        return Some((serves, None));
    };
    let target = nodes
        .lines()
        .find(|line| line.split(' ').next() == Some(target_id))?;
    // <ip>:<port>@<cluster bus port>[,<hostname>]
    let address = target.split(' ').nth(1)?.split('@').next()?;
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((serves, Some((host.to_owned(), port.parse().ok()?))))
}

/// Sends `command` with `args` to `target` right behind an `ASKING`, on one connection, as
/// a slot's importing master requires. `options`: the script's own (one attempt, its
/// timeout).
pub(crate) async fn send_asking(
    redis: &Client,
    options: &Options,
    target: Server,
    command: CustomCommand,
    args: Vec<Value>,
) -> Result<Value, RedisError> {
    let options = Options {
        cluster_node: Some(target),
        ..options.clone()
    };
    let pipeline = redis.pipeline();
    let queued = pipeline.with_options(&options);
    let asking = CustomCommand::new_static("ASKING", ClusterHash::FirstKey, false);
    queued.custom::<Value, Value>(asking, Vec::new()).await?;
    queued.custom::<Value, Value>(command, args).await?;
    let mut replies = pipeline.try_all::<Value>().await.into_iter();
    match (replies.next(), replies.next()) {
        (Some(Ok(_)), Some(reply)) => reply,
        (Some(Err(error)), _) => Err(error),
        _ => Err(RedisError::new(
            ErrorKind::Unknown,
            "no reply to a command sent after ASKING",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003,node-3 master - 0 1426238318243 3 connected 10923-16383 [93-<-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [77->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
";

    #[test]
    fn reads_how_a_master_sees_a_slot() {
        let to = |port| Some(("127.0.0.1".to_owned(), port));
        assert_eq!(own_view(NODES, 93), Some((true, to(30003))));
        assert_eq!(own_view(NODES, 77), Some((true, to(30002))));
        assert_eq!(own_view(NODES, 9), Some((true, None)));
        // Served by another master (and importing there, which is not this one's business).
        assert_eq!(own_view(NODES, 10923), Some((false, None)));
        assert_eq!(own_view(NODES, 5461), Some((false, None)));
        assert_eq!(own_view("", 9), None);
    }

    #[test]
    fn tells_a_refused_redirection() {
        let refused = RedisError::new(ErrorKind::Routing, "Too many redirections.");
        assert!(is_redirected(&refused));
        let other = RedisError::new(ErrorKind::Routing, "Max attempts reached.");
        assert!(!is_redirected(&other));
        let io = RedisError::new(ErrorKind::IO, "Too many redirections.");
        assert!(!is_redirected(&io));
    }
}
