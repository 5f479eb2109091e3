//! Replica acknowledgement, as Redisson's `checkLockSyncedSlaves`: after a lock script
//! wrote on a master that has replicas, WAIT until at least one replica has the write, so
//! that a failover right after cannot lose it unnoticed.
//!
//! WAIT covers every write its connection sent before it, and holds up that connection on
//! the server until it returns. So the tasks of one client share WAITs: at most one is in
//! flight per master, and every acknowledgement asked meanwhile is answered by the next one,
//! sent when that returns. When none is in flight, the WAIT goes right behind the lock
//! script (as Redisson pipelines them), which saves the caller a round trip.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, ClusterStateChange, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{map_redis_error, Error, Result};
use crate::script::{slot_of, BoxFuture, Call, ScriptRunner};
use crate::time::millis;

/// How long a master's replica count is trusted before INFO is asked again.
const COUNT_TTL: Duration = Duration::from_secs(1);

pub(crate) struct Replicas {
    /// `None`: the check is off.
    timeout: Option<Duration>,
    /// How long a master that had replicas and now counts none still has its writes
    /// confirmed (see [`Cache::lost`]).
    lost_replicas_grace: Duration,
    cache: Mutex<Cache>,
    connections: Mutex<Connections>,
    waits: Arc<Waits>,
}

/// What one WAIT answered: how many replicas have every write sent before it.
type Acknowledged = Result<i64, RedisError>;

/// The WAITs of one client, by master (`None` outside a cluster).
#[derive(Default)]
struct Waits {
    masters: Mutex<HashMap<Option<Server>, Queue>>,
}

#[derive(Default)]
struct Queue {
    /// A WAIT to this master is in flight.
    sending: bool,
    /// Asked while it was: answered by the next WAIT.
    joined: Vec<oneshot::Sender<Acknowledged>>,
}

/// One WAIT to send: where, and for how many replicas.
#[derive(Clone)]
struct Request {
    redis: Client,
    master: Option<Server>,
    slot: u16,
    replicas: i64,
    timeout: Duration,
}

impl Request {
    async fn send(&self) -> Acknowledged {
        // Declared non-blocking, so fred keeps pipelining other commands meanwhile; the
        // server answers them after this one. Sent to the master the scripts it stands for
        // were sent to (on a cluster, named: fred's slot map may have changed since), on the
        // client's one connection to it, which carried them.
        let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(self.slot), false);
        let args = vec![
            Value::from(self.replicas),
            Value::from(millis(self.timeout)),
        ];
        // Sent once: resent on a new connection, which wrote nothing, a WAIT would count
        // replicas that never got the writes it stands for.
        let once = Options {
            max_attempts: Some(1),
            cluster_node: self.master.clone(),
            ..Default::default()
        };
        self.redis.with_options(&once).custom(wait, args).await
    }
}

/// What confirms a lock script's write, if it wrote (see [`Replicas::run`]).
pub(crate) enum Confirmation {
    /// The check is off, or the master has no replica.
    Needless,
    /// What the WAIT sent right behind the script answered.
    Answered(Acknowledged, Written),
    /// To be asked after the reply.
    Later(Written),
}

/// Where a script that must be confirmed went, and how many connections the client had
/// made before it was sent.
#[derive(Clone)]
pub(crate) struct Written {
    /// The master it was sent to last, when it was named (on a cluster; see
    /// [`Request::send`]).
    node: Option<Server>,
    connections: u64,
}

impl Confirmation {
    /// A second confirmation of the same write: a WAIT to the same master.
    pub(crate) fn again(&self) -> Confirmation {
        match self {
            Confirmation::Needless => Confirmation::Needless,
            Confirmation::Answered(_, written) | Confirmation::Later(written) => {
                Confirmation::Later(written.clone())
            }
        }
    }
}

/// fred's news of every connection the scripts' client made, counted.
#[derive(Default)]
struct Connections {
    news: Option<broadcast::Receiver<Server>>,
    made: u64,
}

impl Waits {
    /// Claims the next WAIT to `master` for the caller to send, unless one is in flight.
    fn lead(self: &Arc<Self>, request: &Request) -> Option<NextWait> {
        let mut masters = self.masters.lock();
        let queue = masters.entry(request.master.clone()).or_default();
        if queue.sending {
            return None;
        }
        queue.sending = true;
        Some(NextWait {
            waits: self.clone(),
            request: request.clone(),
        })
    }

    /// Sends a WAIT for `request`'s master now, or joins the next one when a WAIT is in
    /// flight there (it may have been sent before the caller's write).
    async fn acknowledged(self: &Arc<Self>, request: Request) -> Acknowledged {
        let joined = {
            let mut masters = self.masters.lock();
            let queue = masters.entry(request.master.clone()).or_default();
            if queue.sending {
                let (answer, answered) = oneshot::channel();
                queue.joined.push(answer);
                Some(answered)
            } else {
                queue.sending = true;
                None
            }
        };
        match joined {
            Some(answered) => answered.await.unwrap_or_else(|_| {
                Err(RedisError::new(
                    ErrorKind::Canceled,
                    "the shared WAIT was dropped",
                ))
            }),
            None => {
                // Whether this future finishes or is dropped, whoever joined meanwhile gets
                // the next WAIT.
                let _next = NextWait {
                    waits: self.clone(),
                    request: request.clone(),
                };
                request.send().await
            }
        }
    }
}

/// On drop, sends the WAIT that answers those who joined the queue while one was in flight
/// (from a task of its own, so that no caller's cancellation strands them), or marks the
/// master idle.
struct NextWait {
    waits: Arc<Waits>,
    request: Request,
}

impl Drop for NextWait {
    fn drop(&mut self) {
        let joined = {
            let mut masters = self.waits.masters.lock();
            let queue = masters.entry(self.request.master.clone()).or_default();
            if queue.joined.is_empty() {
                queue.sending = false;
                return;
            }
            std::mem::take(&mut queue.joined)
        };
        let next = NextWait {
            waits: self.waits.clone(),
            request: self.request.clone(),
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left: the joined callers' answers are dropped, which fails them.
            return;
        };
        runtime.spawn(async move {
            let acknowledged = next.request.send().await;
            for answer in joined {
                let _ = answer.send(acknowledged.clone());
            }
            drop(next);
        });
    }
}

#[derive(Default)]
struct Cache {
    /// Each master's connected replicas, and when that was read. Keyed by the master
    /// serving the slot (`None` outside a cluster).
    counts: HashMap<Option<Server>, (i64, Instant)>,
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

impl Replicas {
    /// `timeout`: how long a write waits for a replica (`None`: it does not);
    /// `lost_replicas_grace`: how long a master that lost its replicas still has its writes
    /// confirmed.
    pub(crate) fn new(timeout: Option<Duration>, lost_replicas_grace: Duration) -> Replicas {
        Replicas {
            timeout,
            lost_replicas_grace,
            cache: Mutex::default(),
            connections: Mutex::default(),
            waits: Arc::default(),
        }
    }

    /// Runs `call`, a lock script on the lock `name` stored at `key`. When a replica must
    /// confirm writes to its master and no WAIT is in flight there, a WAIT goes right behind
    /// the script. Returns the script's reply and what confirms its write (see
    /// [`confirm`](Self::confirm)); the caller tells from the reply whether it wrote. When
    /// the master's replica count cannot be read, the script is not sent and the reply is
    /// that error, saying so.
    ///
    /// Every WAIT goes through `scripts`' own client, to the master the script was sent to:
    /// on the one connection that carried the script's write there. A WAIT on any other
    /// connection would be answered without regard to that write.
    pub(crate) async fn run(
        &self,
        scripts: &ScriptRunner,
        call: Call,
        key: &str,
    ) -> (Result<Value, RedisError>, Confirmation) {
        let redis = scripts.client();
        let Some(timeout) = self.timeout else {
            return (scripts.run(call).await, Confirmation::Needless);
        };
        let connections = self.connections_made(redis);
        let written = |node| Written { node, connections };
        let slot = slot_of(redis, key.as_bytes());
        let request = match self.count(redis, slot, None).await {
            Ok((_, 0)) => {
                return (scripts.run(call).await, Confirmation::Needless);
            }
            Ok((master, replicas)) => Request {
                redis: redis.clone(),
                master,
                slot,
                replicas,
                timeout,
            },
            // Nothing is sent: the write could not be confirmed.
            Err(error) => return (Err(error), Confirmation::Needless),
        };
        // The script goes to the master its WAIT goes to, whether it leads one or not.
        let master = request.master.clone();
        let behind: BoxFuture<Option<Acknowledged>> = match self.waits.lead(&request) {
            Some(next) => Box::pin(async move {
                let acknowledged = request.send().await;
                drop(next);
                Some(acknowledged)
            }),
            None => Box::pin(std::future::ready(None)),
        };
        let sent = scripts.run_followed(call, master, behind).await;
        match sent.behind {
            Some(Some(acknowledged)) => {
                let confirmation = Confirmation::Answered(acknowledged, written(sent.node));
                (sent.reply, confirmation)
            }
            // A WAIT is in flight there, or the one sent went behind an EVALSHA that was
            // redirected or refused, not the one that ran.
            _ => (sent.reply, Confirmation::Later(written(sent.node))),
        }
    }

    /// Returns once a replica has the write `confirmation` belongs to (see
    /// [`run`](Self::run)).
    ///
    /// # Errors
    /// As [`acknowledged`](Self::acknowledged).
    pub(crate) async fn confirm(
        &self,
        confirmation: Confirmation,
        scripts: &ScriptRunner,
        key: &str,
        name: &str,
    ) -> Result<()> {
        let redis = scripts.client();
        let written = match confirmation {
            Confirmation::Needless => return Ok(()),
            Confirmation::Answered(acknowledged, written) => {
                let acknowledged = acknowledged.map_err(|e| map_redis_error(e, name))?;
                self.check(acknowledged, name)?;
                written
            }
            Confirmation::Later(written) => {
                // Boxed, as rare: see `count`.
                let node = written.node.clone();
                Box::pin(self.acknowledged(redis, key, node, name)).await?;
                written
            }
        };
        // A connection made since the script was sent may have carried the WAIT, which
        // then stood for none of its write (fred announces a connection before it writes
        // on it, so the news is here by the time the WAIT's answer is).
        if self.connections_made(redis) == written.connections {
            Ok(())
        } else {
            self.check(0, name)
        }
    }

    /// How many connections the scripts' client `redis` made since the first call.
    fn connections_made(&self, redis: &Client) -> u64 {
        let mut connections = self.connections.lock();
        let Connections { news, made } = &mut *connections;
        let news = news.get_or_insert_with(|| redis.reconnect_rx());
        loop {
            match news.try_recv() {
                Ok(_) => *made += 1,
                Err(TryRecvError::Lagged(missed)) => *made += missed,
                Err(TryRecvError::Empty | TryRecvError::Closed) => return *made,
            }
        }
    }

    fn check(&self, acknowledged: i64, name: &str) -> Result<()> {
        match self.timeout {
            Some(timeout) if acknowledged == 0 => Err(Error::NotReplicated {
                name: name.to_owned(),
                timeout,
            }),
            _ => Ok(()),
        }
    }

    /// Waits until a replica of `node` (by default the master serving `key`) has every
    /// write this client sent it so far; at once when the check is off or the master has no
    /// replica.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] naming `name` when no replica confirmed within the timeout;
    /// [`Error::Redis`] when the master cannot be asked.
    async fn acknowledged(
        &self,
        redis: &Client,
        key: &str,
        node: Option<Server>,
        name: &str,
    ) -> Result<()> {
        let Some(timeout) = self.timeout else {
            return Ok(());
        };
        let slot = slot_of(redis, key.as_bytes());
        let (master, replicas) = self
            .count(redis, slot, node)
            .await
            .map_err(|e| map_redis_error(e, name))?;
        if replicas == 0 {
            return Ok(());
        }
        let request = Request {
            redis: redis.clone(),
            master,
            slot,
            replicas,
            timeout,
        };
        let acknowledged = self
            .waits
            .acknowledged(request)
            .await
            .map_err(|e| map_redis_error(e, name))?;
        self.check(acknowledged, name)
    }

    /// `node` (by default the master serving `slot`) and its connected replicas, read by
    /// INFO (on a cluster whose user may not run it, from `CLUSTER NODES`) at most once per
    /// [`COUNT_TTL`].
    async fn count(
        &self,
        redis: &Client,
        slot: u16,
        node: Option<Server>,
    ) -> Result<(Option<Server>, i64), RedisError> {
        let master = {
            let now = Instant::now();
            let mut cache = self.cache.lock();
            let master = node.or_else(|| cache.master(redis, slot, now));
            if let Some((count, read_at)) = cache.counts.get(&master) {
                if now - *read_at < COUNT_TTL {
                    return Ok((master, *count));
                }
            }
            master
        };
        // Boxed: fred's command futures are large, and every lock operation's future would
        // carry (and move) this rare one's state.
        let info = CustomCommand::new_static("INFO", ClusterHash::Custom(slot), false);
        let to_master = Options {
            cluster_node: master.clone(),
            ..Default::default()
        };
        let redis = redis.with_options(&to_master);
        let reading = redis.custom::<String, _>(info, vec![Value::from("replication")]);
        let (count, replication_id) = match Box::pin(reading).await {
            Ok(text) => (
                field(&text, "connected_slaves")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0),
                field(&text, "master_replid").map(str::to_owned),
            ),
            // A user without `@dangerous` commands: the cluster's node list has the replicas.
            Err(error) if is_refused(&error) && redis.is_clustered() => {
                (Box::pin(listed_replicas(&redis, slot)).await?, None)
            }
            Err(error) => return Err(explained(error)),
        };
        let id = MasterId {
            node: master.clone(),
            replication_id,
        };
        let now = Instant::now();
        let mut cache = self.cache.lock();
        let count = if count > 0 {
            cache.lost.insert(id, None);
            count
        } else {
            // Replicas lost lately: one must still confirm (see `Cache::lost`).
            let grace = self.lost_replicas_grace;
            let lost_lately = cache
                .lost
                .get_mut(&id)
                .is_some_and(|since| now - *since.get_or_insert(now) < grace);
            // Masters whose grace ran out are forgotten: one entry per failover would pile up.
            cache
                .lost
                .retain(|_, since| since.is_none_or(|since| now - since < grace));
            i64::from(lost_lately)
        };
        cache.counts.insert(master.clone(), (count, now));
        Ok((master, count))
    }
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

/// The value of `name` in the text of INFO.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| Some(line.strip_prefix(name)?.strip_prefix(':')?.trim()))
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

/// The replicas that `CLUSTER NODES`, asked of the master serving `slot`, lists for it and
/// does not mark failed.
async fn listed_replicas(redis: &impl ClientLike, slot: u16) -> Result<i64, RedisError> {
    let nodes = CustomCommand::new_static("CLUSTER", ClusterHash::Custom(slot), false);
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
