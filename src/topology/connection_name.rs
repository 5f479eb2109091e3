//! The name a client gives its connections (`CLIENT SETNAME redisson-lock:<client uuid>`),
//! so that operators and the `redisson-lock` tool can tell a live holder of this crate from
//! one whose client is gone. Every connection the client sends commands on is named: each
//! master's on a cluster, and again after every reconnect, since a new connection starts
//! unnamed. The subscriber's connection is not: it carries no hold, only messages.

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface};
use fred::types::config::Server;
use fred::types::ClusterStateChange;
use fred::types::{ClusterHash, CustomCommand, Value};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::watch;
use uuid::Uuid;

/// The prefix of the connection name: `redisson-lock:<client uuid>`.
pub(crate) const CONNECTION_NAME_PREFIX: &str = "redisson-lock:";

/// The masters a command of `redis` can reach: every primary on a cluster (as the client's
/// slot map names them), else `None` (the one server).
pub(crate) fn masters(redis: &Client) -> Option<Vec<Server>> {
    if !redis.is_clustered() {
        return None;
    }
    let routing = redis.cached_cluster_state()?;
    Some(routing.unique_primary_nodes())
}

/// Names every connection of `clients` (the command client, and on a cluster the scripts'
/// client) now, then keeps naming the ones they open again, in one task for all of them,
/// until `shutdown`. Best effort: a server that refuses `CLIENT SETNAME` (an ACL without it)
/// leaves the connection unnamed, and the tool then says it cannot tell whether the holder
/// lives.
pub(crate) async fn keep_named(
    clients: Vec<Client>,
    client_id: Uuid,
    mut shutdown: watch::Receiver<bool>,
) {
    let name = format!("{CONNECTION_NAME_PREFIX}{}", client_id.hyphenated());
    // Subscribed before the first names are given, so that no reconnect is missed.
    let mut watched: Vec<Watched> = clients.into_iter().map(Watched::new).collect();
    for client in &watched {
        name_all(&client.redis, &name).await;
    }
    tokio::spawn(async move {
        while let Some((first, rest)) = watched.split_first_mut() {
            let second = async {
                match rest.first_mut() {
                    Some(client) => client.heard().await,
                    None => std::future::pending().await,
                }
            };
            let (redis, heard) = tokio::select! {
                _ = shutdown.wait_for(|closed| *closed) => break,
                heard = first.heard() => (first.redis.clone(), heard),
                heard = second => (rest[0].redis.clone(), heard),
            };
            match heard {
                Heard::Reconnected(server) if redis.is_clustered() => {
                    name_one(&redis, Some(server), &name).await
                }
                Heard::Reconnected(_) | Heard::Changed => name_all(&redis, &name).await,
                // The client was dropped: nothing is left to name.
                Heard::Closed => break,
            }
        }
    });
}

/// A client whose new connections are named.
struct Watched {
    redis: Client,
    reconnects: broadcast::Receiver<Server>,
    changes: broadcast::Receiver<Vec<ClusterStateChange>>,
}

enum Heard {
    /// The connection to this server was made again.
    Reconnected(Server),
    /// The cluster's nodes changed, or events were missed: name every connection.
    Changed,
    Closed,
}

impl Watched {
    fn new(redis: Client) -> Watched {
        Watched {
            reconnects: redis.reconnect_rx(),
            changes: redis.cluster_change_rx(),
            redis,
        }
    }

    async fn heard(&mut self) -> Heard {
        tokio::select! {
            reconnected = self.reconnects.recv() => match reconnected {
                Ok(server) => Heard::Reconnected(server),
                Err(RecvError::Lagged(_)) => Heard::Changed,
                Err(RecvError::Closed) => Heard::Closed,
            },
            changed = self.changes.recv() => match changed {
                Ok(_) | Err(RecvError::Lagged(_)) => Heard::Changed,
                Err(RecvError::Closed) => Heard::Closed,
            },
        }
    }
}

/// Names `redis`'s connection to every master it talks to.
async fn name_all(redis: &Client, name: &str) {
    match masters(redis) {
        Some(masters) => {
            for master in masters {
                name_one(redis, Some(master), name).await;
            }
        }
        None => name_one(redis, None, name).await,
    }
}

/// Names `redis`'s connection to `server` (its only one when `None`).
async fn name_one(redis: &Client, server: Option<Server>, name: &str) {
    let command = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
    let args = vec![Value::from("SETNAME"), Value::from(name)];
    let named = match server {
        Some(server) => {
            (redis.with_cluster_node(server))
                .custom::<Value, Value>(command, args)
                .await
        }
        None => redis.custom::<Value, Value>(command, args).await,
    };
    if let Err(error) = named {
        tracing::debug!(%error, "naming a connection failed");
    }
}
