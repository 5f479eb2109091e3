//! How many replicas a master has: read by INFO (on a cluster whose user may not run it,
//! from `CLUSTER NODES`), trusted for a moment, and kept wary of masters that lost their
//! replicas or were just promoted.

use std::collections::HashMap;
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, ClusterStateChange, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio::time::Instant;

use crate::base::boxed::BoxFuture;

/// How long a master's replica count is trusted before INFO is asked again.
const COUNT_TTL: Duration = Duration::from_secs(1);

/// A master's replicas, as the replica check counts them.
#[derive(Clone)]
pub(super) struct Count {
    /// The master (`None` outside a cluster: the client's one master).
    pub(super) master: Option<Server>,
    /// The replicas a write there must wait for: those connected, or 1 for a master that
    /// lost its replicas lately (see [`Cache::lost`]).
    pub(super) replicas: i64,
    /// A master without replicas that may gain one any moment: one just promoted (whose
    /// old master is about to replicate from it) or one that had replicas. A count of 0
    /// read before a write does not hold for it: the replica may have attached since, and
    /// be promoted before it has the write. So its count is read again right behind each
    /// script, on the connection that carried it.
    pub(super) wary: bool,
}

pub(super) struct Counts {
    /// How long a master that lost its replicas still has its writes confirmed.
    grace: Duration,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// Each master's count, and when it was read.
    counts: HashMap<Option<Server>, (Count, Instant)>,
    /// The masters that counted replicas, each with the moment this client first counted
    /// none there since (`None`: it counts some). A master that had replicas and counts none
    /// may be one whose replica was just promoted: the Sentinels (or a `CLUSTER FAILOVER`)
    /// leave it writable until they demote it, up to tens of seconds later, and a hold
    /// written there meanwhile is lost at the demotion while a second owner takes the lock
    /// on the new master. So its writes are still to be confirmed for a grace (a watchdog
    /// lease, thirty seconds at least) from the moment the loss was first seen: they fail
    /// with `NotReplicated` until the client follows the failover, or the master counts a
    /// replica again. Counted from that moment, not from the last count with replicas, so a
    /// client that was away (paused, blind to the Sentinels) when the loss began still waits
    /// a whole grace before it writes unconfirmed.
    lost: HashMap<MasterId, Option<Instant>>,
    /// A copy of the client's slot map, and when it was taken: fred hands out copies of the
    /// whole map, too costly for every lock operation.
    routing: Option<(Option<ClusterRouting>, Instant)>,
    /// fred's news of each reading of its slot map: the copy is taken again after one, so
    /// that a script goes to the master fred's map names.
    changes: Option<broadcast::Receiver<Vec<ClusterStateChange>>>,
}

/// A master as the replica check tells masters apart: the node serving the slot (`None`
/// outside a cluster, where the client's one master changes with a failover) and its
/// replication id where INFO was read. A promotion gives the new master a new id, so a
/// master that lost its replica to a promotion is never taken for the one promoted.
#[derive(Clone, PartialEq, Eq, Hash)]
struct MasterId {
    node: Option<Server>,
    replication_id: Option<String>,
}

/// What one reading of a master said.
struct Reading {
    replicas: i64,
    replication_id: Option<String>,
    /// The master was a replica once (it has a previous replication id).
    promoted: bool,
}

impl Reading {
    fn of_info(info: &str) -> Reading {
        let field = |name: &str| {
            (info.lines()).find_map(|line| Some(line.strip_prefix(name)?.strip_prefix(':')?.trim()))
        };
        Reading {
            replicas: field("connected_slaves")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0),
            replication_id: field("master_replid").map(str::to_owned),
            promoted: field("master_replid2").is_some_and(|id| id.bytes().any(|b| b != b'0')),
        }
    }
}

impl Cache {
    /// The master serving `slot` by a copy of the slot map at most [`COUNT_TTL`] old at
    /// `now`; `None` outside a cluster.
    fn master(&mut self, redis: &Client, slot: u16, now: Instant) -> Option<Server> {
        if !redis.is_clustered() {
            return None;
        }
        let changes = (self.changes).get_or_insert_with(|| redis.cluster_change_rx());
        let mut changed = false;
        while !matches!(
            changes.try_recv(),
            Err(TryRecvError::Empty | TryRecvError::Closed)
        ) {
            changed = true;
        }
        let fresh = (self.routing.as_ref()).is_some_and(|(_, read_at)| now - *read_at < COUNT_TTL);
        if changed || !fresh {
            self.routing = Some((redis.cached_cluster_state(), now));
        }
        let (routing, _) = self.routing.as_ref()?;
        routing.as_ref()?.get_server(slot).cloned()
    }
}

impl Counts {
    pub(super) fn new(grace: Duration) -> Counts {
        Counts {
            grace,
            cache: Mutex::default(),
        }
    }

    /// `node` (by default the master serving `slot`) and its replicas, read at most once
    /// per [`COUNT_TTL`].
    pub(super) async fn count(
        &self,
        redis: &Client,
        slot: u16,
        node: Option<Server>,
    ) -> Result<Count, RedisError> {
        let master = {
            let now = Instant::now();
            let mut cache = self.cache.lock();
            let master = node.or_else(|| cache.master(redis, slot, now));
            if let Some((count, read_at)) = cache.counts.get(&master) {
                if now - *read_at < COUNT_TTL {
                    return Ok(count.clone());
                }
            }
            master
        };
        // Boxed: fred's command futures are large, and every lock operation's future would
        // carry (and move) this rare one's state.
        let reading = match Box::pin(info(redis, slot, master.clone())).await {
            Ok(text) => Reading::of_info(&text),
            // A user without `@dangerous` commands: the cluster's node list has the replicas.
            Err(error) if is_refused(&error) && redis.is_clustered() => Reading {
                replicas: Box::pin(listed_replicas(redis, slot, master.clone())).await?,
                replication_id: None,
                promoted: false,
            },
            Err(error) => return Err(explained(error)),
        };
        Ok(self.record(master, &reading))
    }

    /// INFO on `master`, to be sent right behind a script there (see [`Count::wary`]); its
    /// answer goes to [`after_script`](Self::after_script).
    pub(super) fn read_behind(
        redis: &Client,
        slot: u16,
        master: Option<Server>,
    ) -> BoxFuture<Result<String, RedisError>> {
        let redis = redis.clone();
        Box::pin(async move { info(&redis, slot, master).await })
    }

    /// Records what INFO sent behind a script on `master` answered, and returns the count
    /// as it was when the script had run; `None` when it could not be read (the count is
    /// then forgotten, so that the next one is read anew).
    pub(super) fn after_script(
        &self,
        master: Option<Server>,
        info: Option<Result<String, RedisError>>,
    ) -> Option<Count> {
        match info {
            Some(Ok(text)) => Some(self.record(master, &Reading::of_info(&text))),
            _ => {
                self.cache.lock().counts.remove(&master);
                None
            }
        }
    }

    fn record(&self, master: Option<Server>, reading: &Reading) -> Count {
        let id = MasterId {
            node: master.clone(),
            replication_id: reading.replication_id.clone(),
        };
        let now = Instant::now();
        let mut cache = self.cache.lock();
        let count = if reading.replicas > 0 {
            cache.lost.insert(id, None);
            Count {
                master: master.clone(),
                replicas: reading.replicas,
                wary: false,
            }
        } else {
            // Replicas lost lately: one must still confirm (see `Cache::lost`).
            let grace = self.grace;
            let had_replicas = cache.lost.get_mut(&id);
            let wary = reading.promoted || had_replicas.is_some();
            let lost_lately =
                had_replicas.is_some_and(|since| now - *since.get_or_insert(now) < grace);
            // Masters whose grace ran out are forgotten: one entry per failover would pile up.
            (cache.lost).retain(|_, since| since.is_none_or(|since| now - since < grace));
            Count {
                master: master.clone(),
                replicas: i64::from(lost_lately),
                wary,
            }
        };
        cache.counts.insert(master, (count.clone(), now));
        count
    }
}

/// `INFO replication` on `master` (`None`: where the slot map says).
async fn info(redis: &Client, slot: u16, master: Option<Server>) -> Result<String, RedisError> {
    let info = CustomCommand::new_static("INFO", ClusterHash::Custom(slot), false);
    let to_master = Options {
        cluster_node: master,
        ..Default::default()
    };
    let redis = redis.with_options(&to_master);
    redis.custom(info, vec![Value::from("replication")]).await
}

/// Whether the server refused a command to this user (ACL).
fn is_refused(error: &RedisError) -> bool {
    error.details().starts_with("NOPERM")
}

/// `error`, met reading a master's replica count, saying so, and what to do when the user
/// may not run INFO. Its first words stay the server's, which tell retryable errors.
fn explained(error: RedisError) -> RedisError {
    let advice = if is_refused(&error) {
        "; grant the user `+info`, or turn the check off with `wait_for_replicas(None)`"
    } else {
        ""
    };
    let details = format!(
        "{} (the replica check reads the master's replica count with `INFO replication`; \
         nothing was written{advice})",
        error.details()
    );
    RedisError::new(error.kind().clone(), details)
}

/// The replicas that `CLUSTER NODES`, asked of `master` (by default the one serving
/// `slot`), lists for it and does not mark failed.
async fn listed_replicas(
    redis: &Client,
    slot: u16,
    master: Option<Server>,
) -> Result<i64, RedisError> {
    let nodes = CustomCommand::new_static("CLUSTER", ClusterHash::Custom(slot), false);
    let to_master = Options {
        cluster_node: master,
        ..Default::default()
    };
    let redis = redis.with_options(&to_master);
    let nodes: String = redis.custom(nodes, vec![Value::from("NODES")]).await?;
    // Each line: id, address, flags, master's id, ...
    let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split(' ').collect()).collect();
    let flagged = |fields: &[&str], flag: &str| {
        fields
            .get(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == flag))
    };
    let Some(me) = lines.iter().find(|fields| flagged(fields, "myself")) else {
        return Ok(0);
    };
    let replicas = lines.iter().filter(|fields| {
        flagged(fields, "slave") && !flagged(fields, "fail") && fields.get(3) == me.first()
    });
    Ok(replicas.count() as i64)
}
