//! Which pub/sub commands carry unlock messages: the mode asked for, and the flavour the
//! client settles on once it has probed the servers.

use std::sync::atomic::{AtomicBool, Ordering};

use fred::clients::Client;
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::base::error::{is_transient, Error, Result};

/// Which pub/sub commands carry unlock messages: Redisson's `shardedSubscriptionMode`.
/// Set it with [`LockClientBuilder::pubsub_mode`](crate::LockClientBuilder::pubsub_mode).
///
/// Waiters and releasers must meet on the same kind of channel: a message sent by PUBLISH
/// reaches only SUBSCRIBE listeners, one sent by SPUBLISH only SSUBSCRIBE listeners.
///
/// # Default
/// [`PubSubMode::Auto`], as Redisson's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PubSubMode {
    /// On a cluster whose servers have sharded pub/sub (Redis 7 and later), releases publish
    /// with SPUBLISH (as Redisson's `AUTO`), and waiters listen to both kinds of channel, so
    /// Java clients in either mode wake them. Everywhere else, classic pub/sub.
    ///
    /// Decided when the client connects, by asking every master with `PUBSUB SHARDNUMSUB`
    /// as Redisson does, and again whenever the cluster's set of masters changes or the
    /// subscriber connection comes back (a rolling upgrade to Redis 7, or a master without
    /// sharded pub/sub joining).
    #[default]
    Auto,
    /// SSUBSCRIBE and SPUBLISH only (Redisson's `ON`). Needs Redis 7.
    Sharded,
    /// SUBSCRIBE and PUBLISH only (Redisson's `OFF`, and every Redisson before 3.22).
    Classic,
    /// Listen to and publish on both kinds: for a cluster whose Java clients run in both
    /// modes (during an upgrade, say). Every release publishes twice. Needs Redis 7.
    Both,
}

/// What this client does with pub/sub, decided from the mode and the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flavour {
    /// Waiters listen with SUBSCRIBE.
    pub(crate) classic: bool,
    /// Waiters listen with SSUBSCRIBE.
    pub(crate) sharded: bool,
    /// What the scripts are told to publish with (see `lua/publish.lua`).
    publish: &'static str,
}

impl Flavour {
    pub(crate) const CLASSIC: Flavour = Flavour {
        classic: true,
        sharded: false,
        publish: "publish",
    };

    /// `Auto` on a cluster whose masters all have sharded pub/sub.
    const AUTO_SHARDED: Flavour = Flavour {
        classic: true,
        sharded: true,
        publish: "spublish",
    };

    /// The flavour of `mode` on a deployment that is a cluster or not, whose servers have
    /// sharded pub/sub or not.
    pub(crate) fn of(
        mode: PubSubMode,
        clustered: bool,
        sharded_supported: bool,
    ) -> Result<Flavour> {
        let needs_sharded = || {
            Error::invalid(format!(
                "pub/sub mode {mode:?} needs sharded pub/sub, which the server lacks (Redis 7 or later)"
            ))
        };
        Ok(match mode {
            PubSubMode::Classic => Flavour::CLASSIC,
            PubSubMode::Auto if !(clustered && sharded_supported) => Flavour::CLASSIC,
            PubSubMode::Auto => Flavour::AUTO_SHARDED,
            PubSubMode::Sharded if sharded_supported => Flavour {
                classic: false,
                sharded: true,
                publish: "spublish",
            },
            PubSubMode::Both if sharded_supported => Flavour {
                classic: true,
                sharded: true,
                publish: "both",
            },
            PubSubMode::Sharded | PubSubMode::Both => return Err(needs_sharded()),
        })
    }

    /// What the lock scripts are told to publish with.
    pub(crate) fn publish_command(self) -> &'static str {
        self.publish
    }
}

/// The flavour in use: fixed by the mode, except `Auto` on a cluster, which the pub/sub
/// task decides again when the cluster's masters change.
pub(crate) struct Choice {
    fixed: Flavour,
    /// `Auto` on a cluster: the flavour follows `auto_sharded`.
    pub(super) redecided: bool,
    pub(super) auto_sharded: AtomicBool,
}

impl Choice {
    /// The choice of `mode` on a deployment that is a cluster or not, whose servers have
    /// sharded pub/sub or not.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a mode that needs sharded pub/sub the servers lack.
    pub(crate) fn new(
        mode: PubSubMode,
        clustered: bool,
        sharded_supported: bool,
    ) -> Result<Choice> {
        Ok(Choice {
            fixed: Flavour::of(mode, clustered, sharded_supported)?,
            redecided: mode == PubSubMode::Auto && clustered,
            auto_sharded: AtomicBool::new(sharded_supported),
        })
    }

    /// What this client listens to and publishes with now.
    pub(crate) fn current(&self) -> Flavour {
        match (self.redecided, self.auto_sharded.load(Ordering::Acquire)) {
            (false, _) => self.fixed,
            (true, true) => Flavour::AUTO_SHARDED,
            (true, false) => Flavour::CLASSIC,
        }
    }
}

/// Whether the servers have sharded pub/sub (Redis 7 and later), asked as Redisson's AUTO
/// mode does, with `PUBSUB SHARDNUMSUB`: on a cluster, every master by `redis`'s slot map.
///
/// # Errors
/// A connection error or timeout: no answer either way.
pub(crate) async fn sharded_supported(redis: &Client) -> Result<bool, RedisError> {
    let masters = match redis.cached_cluster_state() {
        Some(routing) if redis.is_clustered() => routing.unique_primary_nodes(),
        _ => Vec::new(),
    };
    if masters.is_empty() {
        return answers_shardnumsub(redis).await;
    }
    for master in masters {
        if !answers_shardnumsub(&redis.with_cluster_node(master)).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

pub(super) async fn answers_shardnumsub(server: &impl ClientLike) -> Result<bool, RedisError> {
    let probe = CustomCommand::new_static("PUBSUB", ClusterHash::Random, false);
    match server.custom::<Value, _>(probe, vec!["SHARDNUMSUB"]).await {
        Ok(_) => Ok(true),
        // An older server refuses the subcommand; a connection error is no answer.
        Err(error) if is_transient(&error) => Err(error),
        Err(_) => Ok(false),
    }
}
