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
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{map_redis_error, Error, Result};
use crate::script::{slot_of, Call, ScriptRunner};
use crate::time::millis;

/// How long a master's replica count is trusted before INFO is asked again.
const COUNT_TTL: Duration = Duration::from_secs(1);

pub(crate) struct Replicas {
    /// `None`: the check is off.
    timeout: Option<Duration>,
    cache: Mutex<Cache>,
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
        // server answers them after this one. Routed by a key's slot, it reaches the master
        // (and the connection) that ran the scripts.
        let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(self.slot), false);
        let args = vec![
            Value::from(self.replicas),
            Value::from(millis(self.timeout)),
        ];
        // Sent once: resent on a new connection, which wrote nothing, a WAIT would count
        // replicas that never got the writes it stands for.
        let once = Options {
            max_attempts: Some(1),
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
    Answered(Acknowledged),
    /// To be asked after the reply.
    Later,
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
    /// A copy of the client's slot map, and when it was taken: fred hands out copies of the
    /// whole map, too costly for every lock operation.
    routing: Option<(Option<ClusterRouting>, Instant)>,
}

impl Cache {
    /// The master serving `slot` by a copy of the slot map at most [`COUNT_TTL`] old at
    /// `now`; `None` outside a cluster.
    fn master(&mut self, redis: &Client, slot: u16, now: Instant) -> Option<Server> {
        if !redis.is_clustered() {
            return None;
        }
        let fresh = (self.routing.as_ref()).is_some_and(|(_, read_at)| now - *read_at < COUNT_TTL);
        if !fresh {
            self.routing = Some((redis.cached_cluster_state(), now));
        }
        let (routing, _) = self.routing.as_ref()?;
        routing.as_ref()?.get_server(slot).cloned()
    }
}

impl Replicas {
    pub(crate) fn new(timeout: Option<Duration>) -> Replicas {
        Replicas {
            timeout,
            cache: Mutex::default(),
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
    /// Every WAIT goes through `scripts`' own client, routed by the key's slot: the one
    /// connection that carried the script's write to that master. A WAIT on any other
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
        let slot = slot_of(redis, key.as_bytes());
        let request = match self.count(redis, slot).await {
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
        let Some(next) = self.waits.lead(&request) else {
            return (scripts.run(call).await, Confirmation::Later);
        };
        let behind = Box::pin(async move {
            let acknowledged = request.send().await;
            drop(next);
            acknowledged
        });
        match scripts.run_followed(call, behind).await {
            (reply, Some(acknowledged)) => (reply, Confirmation::Answered(acknowledged)),
            // The WAIT went behind a refused EVALSHA, not the one that ran.
            (reply, None) => (reply, Confirmation::Later),
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
        match confirmation {
            Confirmation::Needless => Ok(()),
            Confirmation::Answered(acknowledged) => {
                let acknowledged = acknowledged.map_err(|e| map_redis_error(e, name))?;
                self.check(acknowledged, name)
            }
            // Boxed, as rare: see `count`.
            Confirmation::Later => Box::pin(self.acknowledged(scripts.client(), key, name)).await,
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

    /// Waits until a replica of the master serving `key` has every write this client sent
    /// it so far; at once when the check is off or the master has no replica.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] naming `name` when no replica confirmed within the timeout;
    /// [`Error::Redis`] when the master cannot be asked.
    async fn acknowledged(&self, redis: &Client, key: &str, name: &str) -> Result<()> {
        let Some(timeout) = self.timeout else {
            return Ok(());
        };
        let slot = slot_of(redis, key.as_bytes());
        let (master, replicas) = self
            .count(redis, slot)
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

    /// The master serving `slot` and its connected replicas, read by INFO (on a cluster whose
    /// user may not run it, from `CLUSTER NODES`) at most once per [`COUNT_TTL`].
    async fn count(&self, redis: &Client, slot: u16) -> Result<(Option<Server>, i64), RedisError> {
        let master = {
            let now = Instant::now();
            let mut cache = self.cache.lock();
            let master = cache.master(redis, slot, now);
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
        let reading = redis.custom::<String, _>(info, vec![Value::from("replication")]);
        let count = match Box::pin(reading).await {
            Ok(text) => text
                .lines()
                .find_map(|line| line.strip_prefix("connected_slaves:"))
                .and_then(|count| count.trim().parse().ok())
                .unwrap_or(0),
            // A user without `@dangerous` commands: the cluster's node list has the replicas.
            Err(error) if is_refused(&error) && redis.is_clustered() => {
                Box::pin(listed_replicas(redis, slot)).await?
            }
            Err(error) => return Err(explained(error)),
        };
        self.cache
            .lock()
            .counts
            .insert(master.clone(), (count, Instant::now()));
        Ok((master, count))
    }
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
async fn listed_replicas(redis: &Client, slot: u16) -> Result<i64, RedisError> {
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
