//! Following a Sentinel failover at once. After the Sentinels promote a replica, the old
//! master goes on accepting writes until they demote it, which can take them ten seconds
//! or more; renewals sent there meanwhile are lost, and a hold could expire on the new
//! master while its holder believes it renewed. So a client of a Sentinel-managed master
//! asks the Sentinels which master is current, and reconnects the moment the answer
//! changes (the connections ask the Sentinels again as they connect).

use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ServerConfig};
use fred::types::{Builder, CustomCommand, Value};
use tokio::sync::watch;

/// How often the Sentinels are asked.
const CHECK: Duration = Duration::from_millis(500);

/// Starts the watcher when `redis` is configured through Sentinels; it ends with `shutdown`.
pub(crate) fn follow_failovers(
    redis: &Client,
    subscriber: &SubscriberClient,
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
    // The Sentinels, each through a client of its own (with the deployment's credentials
    // and TLS settings), asked in turn until one answers.
    let sentinels: Vec<Client> = hosts
        .iter()
        .filter_map(|host| {
            let config = Config {
                server: ServerConfig::Centralized {
                    server: host.clone(),
                },
                ..config.clone()
            };
            let mut builder = Builder::from_config(config);
            builder.set_connection_config(redis.connection_config().clone());
            builder.build().ok()
        })
        .collect();
    let watcher = Watcher {
        redis: redis.clone(),
        subscriber: subscriber.clone(),
        sentinels,
        service: service_name.clone(),
    };
    tokio::spawn(watcher.run(shutdown));
}

struct Watcher {
    redis: Client,
    subscriber: SubscriberClient,
    sentinels: Vec<Client>,
    service: String,
}

impl Watcher {
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        for sentinel in &self.sentinels {
            // Reconnects on its own after a failure, like every client of this crate.
            sentinel.connect();
        }
        let mut known = None;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(CHECK) => {}
            }
            let Some(master) = self.current_master().await else {
                continue;
            };
            match &known {
                Some(previous) if *previous != master => {
                    tracing::info!(?master, "the Sentinels named a new master; reconnecting");
                    known = Some(master);
                    // The subscriber's reconnection makes the pub/sub task resubscribe
                    // and wake every waiter.
                    if let Err(error) = self.redis.force_reconnection().await {
                        tracing::warn!(%error, "reconnecting to the new master failed");
                    }
                    if let Err(error) = self.subscriber.force_reconnection().await {
                        tracing::warn!(%error, "reconnecting the subscriber failed");
                    }
                }
                _ => known = Some(master),
            }
        }
        for sentinel in &self.sentinels {
            let _ = sentinel.quit().await;
        }
    }

    /// The master's address as the first Sentinel that answers names it.
    async fn current_master(&self) -> Option<Value> {
        for sentinel in &self.sentinels {
            if !sentinel.is_connected() {
                continue;
            }
            let ask =
                CustomCommand::new_static("SENTINEL", fred::types::ClusterHash::Random, false);
            let args = vec![
                Value::from("GET-MASTER-ADDR-BY-NAME"),
                Value::from(self.service.as_str()),
            ];
            match sentinel.custom::<Value, Value>(ask, args).await {
                Ok(address @ Value::Array(_)) => return Some(address),
                Ok(_) => continue,
                Err(error) => tracing::debug!(%error, "a Sentinel did not answer"),
            }
        }
        None
    }
}
