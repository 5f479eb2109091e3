//! The engine shared by every lock kind of one client: script calls, the pub/sub
//! subscriptions, the watchdog, settings and owner ids.
//!
//! Topology (single server, sentinel, cluster), pub/sub flavour and slot grouping are
//! decided here and in `pubsub`/`watchdog`; lock kinds only ask for them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as RedisError;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};
use tokio::sync::watch;
use uuid::Uuid;

use crate::error::{is_noscript, is_wrong_type, Error, Result};
use crate::latches::Latches;
use crate::pubsub::{Flavour, PubSub};
use crate::script::Script;
use crate::watchdog::Watchdog;
use crate::LockOwner;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How many times a release is sent when the reply is lost (the latch makes resending safe).
pub(crate) const RELEASE_ATTEMPTS: u32 = 3;

/// Runs scripts by EVALSHA. Cheap to clone; its futures own what they need.
#[derive(Clone)]
pub(crate) struct ScriptRunner {
    redis: Client,
    timeout: Duration,
}

impl ScriptRunner {
    /// Sends `script` once. fred never resends it on its own: a lock script that reached
    /// the server may have run, and running it twice would take or release a second hold.
    /// Only NOSCRIPT (which proves the script did not run) leads to a load and one retry.
    ///
    /// The future is boxed: fred's command futures are large, and every lock future that
    /// awaits a script would otherwise carry (and copy) kilobytes of their state.
    pub(crate) fn run(
        &self,
        script: &'static Script,
        keys: Vec<Value>,
        args: Vec<Value>,
    ) -> BoxFuture<Result<Value, RedisError>> {
        let slot = keys
            .first()
            .and_then(|key| key.as_bytes())
            .map(fred::util::redis_keyslot)
            .unwrap_or(0);
        let options = Options {
            max_attempts: Some(1),
            timeout: Some(self.timeout),
            ..Default::default()
        };
        let redis = self.redis.clone();
        Box::pin(async move {
            let command = || CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false);
            let mut argv = Vec::with_capacity(2 + keys.len() + args.len());
            argv.push(Value::from(script.sha()));
            argv.push(Value::from(keys.len() as i64));
            argv.extend(keys);
            argv.extend(args);
            let client = redis.with_options(&options);
            match client.custom::<Value, Value>(command(), argv.clone()).await {
                Err(error) if is_noscript(&error) => {
                    tracing::debug!(
                        script = script.name,
                        "script not cached by Redis; loading it"
                    );
                    redis.script_load_cluster::<Value, _>(script.lua).await?;
                    client.custom::<Value, Value>(command(), argv).await
                }
                reply => reply,
            }
        })
    }
}

/// Settings fixed when the client is built.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) watchdog_timeout: Duration,
    pub(crate) name_prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) flavour: Flavour,
    /// The fair lock's per-waiter wait when the call gives none (Redisson's
    /// `fairLockWaitTimeout`).
    pub(crate) fair_wait_timeout: Duration,
    /// Whether each renewal script covers holds of one cluster slot only.
    pub(crate) renew_by_slot: bool,
}

pub(crate) struct Engine {
    pub(crate) redis: Client,
    pub(crate) scripts: ScriptRunner,
    pub(crate) client_id: Uuid,
    pub(crate) settings: Settings,
    pub(crate) pubsub: PubSub,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) latches: Arc<Latches>,
    /// The server (or servers) of this client's configuration, as text.
    pub(crate) server: String,
    next_owner: AtomicU64,
    closed: AtomicBool,
    shutdown: watch::Sender<bool>,
    /// Clients this crate built, and so quits on shutdown.
    owns_redis: bool,
}

impl Engine {
    /// Builds the engine and starts its two background tasks (pub/sub and watchdog).
    pub(crate) fn start(
        redis: Client,
        subscriber: fred::clients::SubscriberClient,
        settings: Settings,
        owns_redis: bool,
    ) -> Arc<Engine> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let scripts = ScriptRunner {
            redis: redis.clone(),
            timeout: settings.command_timeout,
        };
        let watchdog = Watchdog::new(settings.watchdog_timeout, settings.renew_by_slot);
        tokio::spawn(watchdog.clone().run(scripts.clone()));
        let latches = Latches::new();
        tokio::spawn(latches.clone().run(redis.clone(), shutdown_rx.clone()));
        let pubsub = PubSub::start(subscriber, settings.flavour, shutdown_rx);
        let server = format!("{:?}", redis.client_config().server);
        Arc::new(Engine {
            redis,
            scripts,
            client_id: Uuid::new_v4(),
            settings,
            pubsub,
            watchdog,
            latches,
            server,
            next_owner: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            shutdown,
            owns_redis,
        })
    }

    pub(crate) fn new_owner(&self) -> LockOwner {
        LockOwner::from_parts(
            self.client_id,
            self.next_owner.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Fails with [`Error::Closed`] once the client was shut down.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The PUBLISH or SPUBLISH command the scripts must use.
    pub(crate) fn publish_command(&self) -> &'static str {
        self.settings.flavour.publish_command()
    }

    /// How long a release's latch is kept: long enough for every resend of the release.
    pub(crate) fn latch_ttl(&self) -> Duration {
        (self.settings.command_timeout + Duration::from_millis(500)) * RELEASE_ATTEMPTS
            + Duration::from_secs(1)
    }

    /// Runs a script and maps a wrong-type key to [`Error::WrongType`].
    pub(crate) async fn run(
        &self,
        script: &'static Script,
        name: &str,
        keys: Vec<Value>,
        args: Vec<Value>,
    ) -> Result<Value> {
        self.check_open()?;
        self.scripts
            .run(script, keys, args)
            .await
            .map_err(|e| map_redis_error(e, name))
    }

    pub(crate) async fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.watchdog.close();
        self.shutdown.send_replace(true);
        self.pubsub.wake_all();
        if self.owns_redis {
            let _ = self.redis.quit().await;
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The last handle is gone: stop the background tasks (the pub/sub task closes the
        // subscriber connection), and close the command connection if this crate opened it:
        // fred keeps a connection open until QUIT.
        let already_closed = self.closed.swap(true, Ordering::AcqRel);
        self.watchdog.close();
        self.shutdown.send_replace(true);
        if self.owns_redis && !already_closed {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let redis = self.redis.clone();
                runtime.spawn(async move { drop(redis.quit().await) });
            }
        }
    }
}

/// Turns a fred error into ours, naming the key when it holds the wrong type.
pub(crate) fn map_redis_error(error: RedisError, key: &str) -> Error {
    if is_wrong_type(&error) {
        Error::WrongType {
            name: key.to_owned(),
        }
    } else {
        Error::Redis(error)
    }
}

/// Reads a script's nil-or-integer reply.
pub(crate) fn nil_or_int(script: &'static Script, reply: Value) -> Result<Option<i64>> {
    match reply {
        Value::Null => Ok(None),
        Value::Integer(n) => Ok(Some(n)),
        other => Err(Error::UnexpectedReply {
            script: script.name,
            detail: format!("{other:?}"),
        }),
    }
}
