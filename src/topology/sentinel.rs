//! Following a Sentinel failover at once. After the Sentinels promote a replica, the old
//! master goes on accepting writes until they demote it, which can take them ten seconds
//! or more; renewals sent there meanwhile are lost, and a hold could expire on the new
//! master while its holder believes it renewed. So a client of a Sentinel-managed master
//! asks the Sentinels every half second which master is current, and reconnects its
//! connections the moment they are not on it (the connections ask the Sentinels again as
//! they connect).
//!
//! The watcher must not go blind: each Sentinel has a client of its own that reconnects
//! whenever its connection drops (a Sentinel restart, `CLIENT KILL`) and is made again if
//! its connection task ends; and each question has a time limit, after which the next
//! Sentinel is asked, so a Sentinel that stopped answering delays no failover for long.

use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, Options, ReconnectPolicy, Server, ServerConfig};
use fred::types::{Builder, ConnectHandle, CustomCommand, Value};
use tokio::sync::watch;

/// How often the Sentinels are asked.
const CHECK: Duration = Duration::from_millis(500);

/// How long one Sentinel may take to answer (at most the command timeout) before the next
/// is asked. Sentinels answer from memory: one that takes this long is stopped or cut off.
const ASK: Duration = Duration::from_secs(1);

/// Starts the watcher when `redis` is configured through Sentinels; it ends with `shutdown`.
/// `command_timeout` bounds each question to a Sentinel and each reconnection.
pub(crate) fn follow_failovers(
    redis: &Client,
    subscriber: &SubscriberClient,
    command_timeout: Duration,
    shutdown: watch::Receiver<bool>,
) {
    let config = redis.client_config();
    let ServerConfig::Sentinel {
        hosts,
        service_name,
        ..
    } = &config.server
    else {
        return;
    };
    // The Sentinels, each through a client of its own with the deployment's credentials,
    // TLS and connection settings, and a reconnect policy whatever the deployment's (fred
    // has none by default, and a client without one never reconnects).
    let sentinels: Vec<Sentinel> = hosts
        .iter()
        .filter_map(|host| {
            let config = Config {
                server: ServerConfig::Centralized {
                    server: host.clone(),
                },
                ..config.clone()
            };
            let mut builder = Builder::from_config(config);
            builder
                .set_connection_config(redis.connection_config().clone())
                .set_performance_config(redis.perf_config())
                .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2));
            let client = builder.build().ok()?;
            Some(Sentinel { client, task: None })
        })
        .collect();
    let watcher = Watcher {
        redis: redis.clone(),
        subscriber: subscriber.clone(),
        sentinels,
        service: service_name.clone(),
        ask: ASK.min(command_timeout),
        reconnect: command_timeout,
        first: 0,
        known: None,
    };
    tokio::spawn(watcher.run(shutdown));
}

struct Sentinel {
    client: Client,
    /// Its connection task, which runs until QUIT unless something ends it.
    task: Option<ConnectHandle>,
}

struct Watcher {
    redis: Client,
    subscriber: SubscriberClient,
    sentinels: Vec<Sentinel>,
    service: String,
    /// The time limit of one question to one Sentinel.
    ask: Duration,
    /// The time limit of one reconnection.
    reconnect: Duration,
    /// The Sentinel asked first: the last that answered.
    first: usize,
    /// The master the Sentinels named last, for connections whose server fred does not
    /// report.
    known: Option<(String, u16)>,
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
            let previous = self.known.replace(master.clone());
            // Whether a client's connection is on another server than the master named;
            // fred reports no server for a connection whose `CLIENT ID` was refused.
            let stale = |connections: Vec<Server>| {
                if connections.is_empty() {
                    previous.as_ref().is_some_and(|known| *known != master)
                } else {
                    !(connections.iter()).any(|s| *s.host == *master.0 && s.port == master.1)
                }
            };
            if stale(self.redis.active_connections()) {
                tracing::info!(?master, "the Sentinels name another master; reconnecting");
                let reconnecting = self.redis.force_reconnection();
                match tokio::time::timeout(self.reconnect, reconnecting).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::warn!(%error, "reconnecting to the master failed"),
                    Err(_) => tracing::warn!("reconnecting to the master timed out"),
                }
            }
            // The subscriber's reconnection makes the pub/sub task resubscribe and wake
            // every waiter.
            if stale(self.subscriber.active_connections()) {
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

    /// The master's address as the first Sentinel that answers in time names it, asking
    /// first the one that answered last.
    async fn current_master(&mut self) -> Option<(String, u16)> {
        let options = Options {
            timeout: Some(self.ask),
            // A Sentinel whose connection is down (reconnecting) is skipped at once.
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        };
        let count = self.sentinels.len();
        for n in 0..count {
            let index = (self.first + n) % count;
            let ask =
                CustomCommand::new_static("SENTINEL", fred::types::ClusterHash::Random, false);
            let args = vec![
                Value::from("GET-MASTER-ADDR-BY-NAME"),
                Value::from(self.service.as_str()),
            ];
            let sentinel = self.sentinels[index].client.with_options(&options);
            match sentinel.custom::<(String, u16), Value>(ask, args).await {
                Ok(address) => {
                    self.first = index;
                    return Some(address);
                }
                Err(error) => tracing::debug!(%error, "a Sentinel did not answer"),
            }
        }
        None
    }
}
