//! Replica acknowledgement, as Redisson's `checkLockSyncedSlaves`: after a lock script
//! wrote on a master that has replicas, WAIT until at least one replica has the write, so
//! that a failover right after cannot lose it unnoticed.
//!
//! WAIT covers every write its connection sent before it, and holds up that connection on
//! the server until it returns. So the tasks of one client share WAITs: at most one is in
//! flight per master, and every acknowledgement asked meanwhile is answered by the next one,
//! sent when that returns. When none is in flight, the WAIT goes right behind the lock
//! script (as Redisson pipelines them), which saves the caller a round trip.

mod count;
mod waits;

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as RedisError;
use fred::interfaces::EventInterface;
use fred::types::config::Server;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::broadcast::{self, error::TryRecvError};

use crate::base::boxed::BoxFuture;
use crate::base::error::{map_redis_error, Error, Result};
use crate::topology::runner::{Placement, ScriptRunner};
use crate::topology::script::{slot_of, Call};
use count::{Count, Counts};
use waits::{Acknowledged, Request, Waits};

pub(crate) struct Replicas {
    /// `None`: the check is off.
    timeout: Option<Duration>,
    counts: Counts,
    connections: Mutex<Connections>,
    waits: Arc<Waits>,
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

impl Replicas {
    /// `timeout`: how long a write waits for a replica (`None`: it does not);
    /// `lost_replicas_grace`: how long a master that lost its replicas still has its writes
    /// confirmed.
    pub(crate) fn new(timeout: Option<Duration>, lost_replicas_grace: Duration) -> Replicas {
        Replicas {
            timeout,
            counts: Counts::new(lost_replicas_grace),
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
    /// `P`: where the script's send is made (see [`Placement`]).
    pub(crate) async fn run<P: Placement>(
        &self,
        scripts: &ScriptRunner,
        call: Call,
        key: &str,
    ) -> (Result<Value, RedisError>, Confirmation) {
        let redis = scripts.client();
        let Some(timeout) = self.timeout else {
            return (scripts.run_placed::<P>(call).await, Confirmation::Needless);
        };
        let connections = self.connections_made(redis);
        let written = |node| Written { node, connections };
        let slot = slot_of(redis, key.as_bytes());
        let request = match self.counts.count(redis, slot, None).await {
            Ok(Count {
                replicas: 0,
                wary: false,
                ..
            }) => {
                return (scripts.run_placed::<P>(call).await, Confirmation::Needless);
            }
            // Boxed, as rare: see `count`.
            Ok(Count {
                replicas: 0,
                master,
                ..
            }) => return Box::pin(self.run_wary(scripts, call, slot, master, connections)).await,
            Ok(Count {
                master, replicas, ..
            }) => Request {
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

    /// [`run`](Self::run) on a master without replicas that may gain one any moment (see
    /// [`Count::wary`]): its count is read again right behind the script, so that the
    /// write is confirmed if a replica had attached by the time it ran.
    async fn run_wary(
        &self,
        scripts: &ScriptRunner,
        call: Call,
        slot: u16,
        master: Option<Server>,
        connections: u64,
    ) -> (Result<Value, RedisError>, Confirmation) {
        let redis = scripts.client();
        let behind = Counts::read_behind(redis, slot, master.clone());
        let sent = scripts.run_followed(call, master.clone(), behind).await;
        let written = Written {
            node: sent.node,
            connections,
        };
        let confirmation = match self.counts.after_script(master, sent.behind) {
            Some(Count { replicas: 0, .. }) => Confirmation::Needless,
            // A replica now, or a count unknown: it is read again, and waited for.
            _ => Confirmation::Later(written),
        };
        (sent.reply, confirmation)
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
        let Count {
            master, replicas, ..
        } = (self.counts.count(redis, slot, node).await).map_err(|e| map_redis_error(e, name))?;
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
}
