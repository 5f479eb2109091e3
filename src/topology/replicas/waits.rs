//! The WAITs of one client: at most one in flight per master, and every acknowledgement
//! asked meanwhile answered by the next one, sent when that returns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::base::background::spawn_or;
use crate::base::time::millis;

/// What one WAIT answered: how many replicas have every write sent before it.
pub(super) type Acknowledged = Result<i64, RedisError>;

/// The WAITs of one client, by master (`None` outside a cluster).
#[derive(Default)]
pub(super) struct Waits {
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
pub(super) struct Request {
    pub(super) redis: Client,
    pub(super) master: Option<Server>,
    pub(super) slot: u16,
    pub(super) replicas: i64,
    pub(super) timeout: Duration,
}

impl Request {
    pub(super) async fn send(&self) -> Acknowledged {
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

impl Waits {
    /// Claims the next WAIT to `master` for the caller to send, unless one is in flight.
    pub(super) fn lead(self: &Arc<Self>, request: &Request) -> Option<NextWait> {
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
    pub(super) async fn acknowledged(self: &Arc<Self>, request: Request) -> Acknowledged {
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
pub(super) struct NextWait {
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
        let send = async move {
            let acknowledged = next.request.send().await;
            for answer in joined {
                let _ = answer.send(acknowledged.clone());
            }
            drop(next);
        };
        // No runtime left: the joined callers' answers are dropped, which fails them.
        spawn_or(send, || {});
    }
}
