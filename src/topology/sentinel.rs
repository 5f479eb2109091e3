//! Following a Sentinel failover at once. After the Sentinels promote a replica, the old
//! master goes on accepting writes until they demote it, which can take them ten seconds
//! or more; renewals sent there meanwhile are lost, and a hold could expire on the new
//! master while its holder believes it renewed. So a client of a Sentinel-managed master
//! asks every Sentinel, four times a second, which master is current, and reconnects its
//! connections the moment they are not on it (the connections ask the Sentinels again as
//! they connect). Until its command connection is on the master the Sentinels name, no
//! script is sent, and no script's reply is trusted (see [`NamedMaster::astray`]): a
//! master the Sentinels no longer name is not the master, even while it says it is.
//!
//! The Sentinels may disagree for a moment: the one that led the failover names the new
//! master first, the others learn it from its next announcement (within two seconds). The
//! answer with the highest configuration epoch wins, where the user may read it (`SENTINEL
//! MASTER`); else the answer of most of them.
//!
//! The watcher must not go blind: each Sentinel has a client of its own that reconnects
//! whenever its connection drops (a Sentinel restart, `CLIENT KILL`) and is made again if
//! its connection task ends; each question has a time limit; and a watcher that no
//! Sentinel answers says so in the log, with the reason.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::{Config, Options, ReconnectPolicy, Server, ServerConfig};
use fred::types::{Builder, ClusterHash, ConnectHandle, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How often the Sentinels are asked.
const CHECK: Duration = Duration::from_millis(250);

/// How long one Sentinel may take to answer (at most the command timeout). Sentinels answer
/// from memory: one that takes this long is stopped or cut off.
const ASK: Duration = Duration::from_secs(1);

/// How long no Sentinel may answer before the watcher says so in the log.
const BLIND_FOR: Duration = Duration::from_secs(5);

/// The master the Sentinels name, and where the client's command connection is: the gate
/// every script passes (see [`astray`](Self::astray)).
pub(crate) struct NamedMaster {
    state: Mutex<Named>,
}

struct Named {
    /// The master the Sentinels named last; `None` before they first answered.
    master: Option<Server>,
    /// The server the command connection was made to last; `None` when unknown.
    on: Option<Server>,
    /// fred's news of each connection the command client makes, and to which server.
    news: broadcast::Receiver<Server>,
}

/// Whether `a` and `b` are the same address (fred's servers also carry a TLS name).
fn same(a: &Server, b: &Server) -> bool {
    a.host == b.host && a.port == b.port
}

impl NamedMaster {
    /// The gate of `redis`'s scripts when it is configured through Sentinels.
    pub(crate) fn of(redis: &Client) -> Option<Arc<NamedMaster>> {
        if !matches!(redis.client_config().server, ServerConfig::Sentinel { .. }) {
            return None;
        }
        Some(Arc::new(NamedMaster {
            state: Mutex::new(Named {
                master: None,
                on: redis.active_connections().into_iter().next(),
                news: redis.reconnect_rx(),
            }),
        }))
    }

    /// Why a script may not be sent now, or its reply not be trusted: the command
    /// connection is on (or was last made to) a server that the Sentinels no longer name.
    /// Such a server may be an old master that still takes writes until the Sentinels
    /// demote it, and what it says is lost then. `None` when the connection is on the
    /// master they name, or nothing is known yet.
    pub(crate) fn astray(&self) -> Option<RedisError> {
        let mut named = self.state.lock();
        let named = &mut *named;
        loop {
            match named.news.try_recv() {
                Ok(server) => named.on = Some(server),
                // News missed: where the connection went is unknown until the next.
                Err(TryRecvError::Lagged(_)) => named.on = None,
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        let (master, on) = (named.master.as_ref()?, named.on.as_ref()?);
        if same(master, on) {
            return None;
        }
        Some(RedisError::new(
            ErrorKind::IO,
            format!(
                "the Sentinels name {}:{} as the master, and this client's connection is on \
                 {}:{}, which they no longer name: the client is moving to the new master, and \
                 sends nothing to the old one (nor trusts its replies) meanwhile",
                master.host, master.port, on.host, on.port
            ),
        ))
    }

    /// Records the master the Sentinels name; whether it is another than before.
    fn name(&self, master: Server) -> bool {
        let mut named = self.state.lock();
        let changed = named.master.as_ref().is_some_and(|old| !same(old, &master));
        named.master = Some(master);
        changed
    }

    /// Whether the command connection is (as far as is known) on another server than the
    /// one the Sentinels name.
    fn is_astray(&self) -> bool {
        self.astray().is_some()
    }
}

/// `reply`, unless the gate `named` (behind Sentinel) finds the command connection astray
/// (see [`NamedMaster::astray`]): then why.
pub(crate) fn checked<T>(
    named: &Option<Arc<NamedMaster>>,
    reply: Result<T, RedisError>,
) -> Result<T, RedisError> {
    match named.as_ref().and_then(|named| named.astray()) {
        Some(astray) => Err(astray),
        None => reply,
    }
}

/// Starts the watcher when `redis` is configured through Sentinels (`named` is then its
/// gate); it ends with `shutdown`. `command_timeout` bounds each question to a Sentinel and
/// each reconnection. After each move to another master, `renew_now` has the watchdog renew
/// every hold there at once.
pub(crate) fn follow_failovers(
    redis: &Client,
    subscriber: &SubscriberClient,
    named: Option<Arc<NamedMaster>>,
    renew_now: Arc<Notify>,
    command_timeout: Duration,
    shutdown: watch::Receiver<bool>,
) {
    let config = redis.client_config();
    let (
        Some(named),
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        },
    ) = (named, &config.server)
    else {
        return;
    };
    // The Sentinels, each through a client of its own with the deployment's credentials,
    // TLS and connection settings, and a reconnect policy whatever the deployment's (fred
    // has none by default, and a client without one never reconnects). Not its database: a
    // Sentinel has none, and refuses the SELECT a client sends for one as it connects.
    let sentinels: Vec<Client> = hosts
        .iter()
        .filter_map(|host| {
            let config = Config {
                server: ServerConfig::Centralized {
                    server: host.clone(),
                },
                database: None,
                ..config.clone()
            };
            let mut builder = Builder::from_config(config);
            builder
                .set_connection_config(redis.connection_config().clone())
                .set_performance_config(redis.perf_config())
                .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2));
            builder.build().ok()
        })
        .collect();
    let watcher = Watcher {
        redis: redis.clone(),
        subscriber: subscriber.clone(),
        named,
        renew_now,
        sentinels: sentinels.into_iter().map(Sentinel::new).collect(),
        service: service_name.clone(),
        ask: ASK.min(command_timeout),
        reconnect: command_timeout,
        answered_at: Instant::now(),
        warned: false,
    };
    tokio::spawn(watcher.run(shutdown));
}

struct Sentinel {
    client: Client,
    /// Its connection task, which runs until QUIT unless something ends it.
    task: Option<ConnectHandle>,
    /// Whether it refused `SENTINEL MASTER` to this user: its epochs are not asked again.
    epochs_refused: bool,
}

impl Sentinel {
    fn new(client: Client) -> Sentinel {
        Sentinel {
            client,
            task: None,
            epochs_refused: false,
        }
    }
}

/// What one Sentinel answered.
struct Answer {
    index: usize,
    master: Result<Server, RedisError>,
    /// The configuration epoch of its view, where it gave it.
    epoch: Result<Option<u64>, RedisError>,
}

struct Watcher {
    redis: Client,
    subscriber: SubscriberClient,
    named: Arc<NamedMaster>,
    /// Has the watchdog renew every hold now.
    renew_now: Arc<Notify>,
    sentinels: Vec<Sentinel>,
    service: String,
    /// The time limit of one question to one Sentinel.
    ask: Duration,
    /// The time limit of one reconnection.
    reconnect: Duration,
    /// When a Sentinel last answered.
    answered_at: Instant,
    /// Whether the log was told that no Sentinel answers.
    warned: bool,
}

impl Watcher {
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            // Connects the Sentinel clients, and again any whose connection task ended.
            for sentinel in &mut self.sentinels {
                if sentinel.task.as_ref().is_none_or(|task| task.is_finished()) {
                    sentinel.task = Some(sentinel.client.connect());
                }
            }
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(CHECK) => {}
            }
            let Some(master) = self.current_master().await else {
                continue;
            };
            let changed = self.named.name(master.clone());
            if changed {
                tracing::info!(master = %master, "the Sentinels name another master");
            }
            if self.named.is_astray() || changed && self.redis.active_connections().is_empty() {
                tracing::info!(master = %master, "reconnecting to the master the Sentinels name");
                let reconnecting = self.redis.force_reconnection();
                match tokio::time::timeout(self.reconnect, reconnecting).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::warn!(%error, "reconnecting to the master failed"),
                    Err(_) => tracing::warn!("reconnecting to the master timed out"),
                }
                // The holds' copies on the new master live only as long as their last
                // renewal before the failover said: renewed there now, not at the next tick.
                if !self.named.is_astray() {
                    self.renew_now.notify_one();
                }
            }
            // The subscriber's reconnection makes the pub/sub task resubscribe and wake
            // every waiter. fred reports no server for a connection whose `CLIENT ID` was
            // refused: then it is moved when the Sentinels name another master.
            let connections = self.subscriber.active_connections();
            let stale = if connections.is_empty() {
                changed
            } else {
                !connections.iter().any(|s| same(s, &master))
            };
            if stale {
                let reconnecting = self.subscriber.force_reconnection();
                match tokio::time::timeout(self.reconnect, reconnecting).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::warn!(%error, "reconnecting the subscriber failed"),
                    Err(_) => tracing::warn!("reconnecting the subscriber timed out"),
                }
            }
        }
        for sentinel in &self.sentinels {
            let _ = sentinel.client.quit().await;
        }
    }

    /// The master the Sentinels name: by every Sentinel that answers in time, the one the
    /// answer with the highest configuration epoch names; where no epoch could be read,
    /// the one most of them name (none, when they are split evenly: the last stays).
    async fn current_master(&mut self) -> Option<Server> {
        let answers = self.ask_all().await;
        let mut named: Vec<(Server, Option<u64>)> = Vec::new();
        let mut last_error = None;
        for answer in answers {
            let sentinel = &mut self.sentinels[answer.index];
            let epoch = match answer.epoch {
                Ok(epoch) => epoch,
                Err(error) => {
                    if error.details().starts_with("NOPERM") {
                        sentinel.epochs_refused = true;
                    }
                    None
                }
            };
            match answer.master {
                Ok(master) => named.push((master, epoch)),
                Err(error) => last_error = Some(error),
            }
        }
        if named.is_empty() {
            if self.answered_at.elapsed() >= BLIND_FOR && !self.warned {
                self.warned = true;
                let error = last_error.map_or("no answer in time".to_owned(), |e| e.to_string());
                tracing::warn!(
                    %error,
                    service = %self.service,
                    "no Sentinel has named the master for {BLIND_FOR:?}: a failover now would \
                     not be followed until one answers"
                );
            }
            return None;
        }
        self.answered_at = Instant::now();
        self.warned = false;
        if let Some((master, _)) = (named.iter())
            .filter(|(_, epoch)| epoch.is_some())
            .max_by_key(|(_, epoch)| *epoch)
        {
            return Some(master.clone());
        }
        let votes = |master: &Server| named.iter().filter(|(m, _)| same(m, master)).count();
        let (master, _) = named.iter().max_by_key(|(master, _)| votes(master))?;
        (2 * votes(master) > named.len()).then(|| master.clone())
    }

    /// Asks every Sentinel at once for the master's address and the epoch of its view.
    async fn ask_all(&self) -> Vec<Answer> {
        let options = Options {
            timeout: Some(self.ask),
            // A Sentinel whose connection is down (reconnecting) is skipped at once.
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        };
        let mut asking = JoinSet::new();
        for (index, sentinel) in self.sentinels.iter().enumerate() {
            let client = sentinel.client.with_options(&options);
            let service = self.service.clone();
            let epochs = !sentinel.epochs_refused;
            asking.spawn(async move {
                let address = sentinel_command(&client, "GET-MASTER-ADDR-BY-NAME", &service);
                let view = async {
                    if epochs {
                        let view = sentinel_command(&client, "MASTER", &service).await?;
                        Ok(config_epoch(view))
                    } else {
                        Ok(None)
                    }
                };
                let (address, epoch) = tokio::join!(address, view);
                let master = address.and_then(|address| {
                    let (host, port): (String, u16) = address.convert()?;
                    Ok(Server::new(host, port))
                });
                Answer {
                    index,
                    master,
                    epoch,
                }
            });
        }
        let mut answers = Vec::with_capacity(self.sentinels.len());
        while let Some(answer) = asking.join_next().await {
            if let Ok(answer) = answer {
                answers.push(answer);
            }
        }
        answers
    }
}

/// `SENTINEL <subcommand> <service>`.
async fn sentinel_command(
    client: &fred::clients::WithOptions<Client>,
    subcommand: &'static str,
    service: &str,
) -> Result<Value, RedisError> {
    let ask = CustomCommand::new_static("SENTINEL", ClusterHash::Random, false);
    let args = vec![Value::from(subcommand), Value::from(service)];
    client.custom::<Value, Value>(ask, args).await
}

/// The `config-epoch` field of a `SENTINEL MASTER` reply (a flat list of names and values,
/// or a map under RESP3).
fn config_epoch(view: Value) -> Option<u64> {
    let pairs: Vec<(Value, Value)> = match view {
        Value::Array(values) => {
            let mut values = values.into_iter();
            std::iter::from_fn(|| Some((values.next()?, values.next()?))).collect()
        }
        Value::Map(map) => (map.inner().into_iter())
            .map(|(key, value)| (Value::from(key), value))
            .collect(),
        _ => return None,
    };
    let (_, epoch) =
        (pairs.into_iter()).find(|(name, _)| name.as_str().is_some_and(|n| n == "config-epoch"))?;
    epoch.as_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::config_epoch;
    use fred::types::Value;

    #[test]
    fn reads_the_config_epoch_of_a_master_view() {
        let flat = |pairs: &[(&str, &str)]| {
            Value::Array(
                (pairs.iter())
                    .flat_map(|(k, v)| [Value::from(*k), Value::from(*v)])
                    .collect(),
            )
        };
        let view = flat(&[("name", "mymaster"), ("config-epoch", "7"), ("quorum", "2")]);
        assert_eq!(config_epoch(view), Some(7));
        assert_eq!(config_epoch(flat(&[("name", "mymaster")])), None);
        assert_eq!(config_epoch(Value::Null), None);
    }
}
