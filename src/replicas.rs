//! Replica acknowledgement, as Redisson's `checkLockSyncedSlaves`: after a lock script
//! wrote on a master that has replicas, WAIT until at least one replica has the write, so
//! that a failover right after cannot lose it unnoticed.

use std::collections::HashMap;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::error::{map_redis_error, Error, Result};
use crate::time::millis;

/// How long a master's replica count is trusted before INFO is asked again.
const COUNT_TTL: Duration = Duration::from_secs(1);

pub(crate) struct Replicas {
    /// `None`: the check is off.
    timeout: Option<Duration>,
    cache: Mutex<Cache>,
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
    /// The master serving `slot` by a copy of the slot map at most [`COUNT_TTL`] old.
    fn master(&mut self, redis: &Client, slot: u16) -> Option<Server> {
        let fresh = self
            .routing
            .as_ref()
            .is_some_and(|(_, read_at)| read_at.elapsed() < COUNT_TTL);
        if !fresh {
            self.routing = Some((redis.cached_cluster_state(), Instant::now()));
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
        }
    }

    /// Waits until a replica of the master serving `key` has every write this client sent
    /// it so far; at once when the check is off or the master has no replica.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] naming `name` when no replica confirmed within the timeout;
    /// [`Error::Redis`] when the master cannot be asked.
    pub(crate) async fn acknowledged(&self, redis: &Client, key: &str, name: &str) -> Result<()> {
        let Some(timeout) = self.timeout else {
            return Ok(());
        };
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let replicas = self
            .count(redis, slot)
            .await
            .map_err(|e| map_redis_error(e, name))?;
        if replicas == 0 {
            return Ok(());
        }
        // Declared non-blocking, so fred keeps pipelining other commands meanwhile; the
        // server answers them after this one. Routed by the key's slot, it reaches the
        // master (and the connection) that ran the script.
        let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), false);
        let acknowledged: i64 = redis
            .custom(
                wait,
                vec![Value::from(replicas), Value::from(millis(timeout))],
            )
            .await
            .map_err(|e| map_redis_error(e, name))?;
        if acknowledged > 0 {
            Ok(())
        } else {
            Err(Error::NotReplicated {
                name: name.to_owned(),
                timeout,
            })
        }
    }

    /// The master's connected replicas, read by INFO at most once per [`COUNT_TTL`].
    async fn count(&self, redis: &Client, slot: u16) -> Result<i64, fred::error::Error> {
        let master = {
            let mut cache = self.cache.lock();
            let master = cache.master(redis, slot);
            if let Some((count, read_at)) = cache.counts.get(&master) {
                if read_at.elapsed() < COUNT_TTL {
                    return Ok(*count);
                }
            }
            master
        };
        let info = CustomCommand::new_static("INFO", ClusterHash::Custom(slot), false);
        let text: String = redis.custom(info, vec![Value::from("replication")]).await?;
        let count = text
            .lines()
            .find_map(|line| line.strip_prefix("connected_slaves:"))
            .and_then(|count| count.trim().parse().ok())
            .unwrap_or(0);
        self.cache
            .lock()
            .counts
            .insert(master, (count, Instant::now()));
        Ok(count)
    }
}
