//! Whether a single server's command connection is up, and what a call meets while it is
//! down: when the server refuses connections, the call fails at once, having sent nothing,
//! instead of waiting in the driver's queue for a reconnect until the command timeout.
//!
//! fred sends nothing while it reconnects: a command waits in its queue, behind the pauses
//! of its reconnect policy (up to 2 s), until the connection is back or the command timeout
//! has passed. So while the connection is known to be down, a call first tries a connection
//! of its own to the server: refused, the call fails with that refusal; accepted (the server
//! is back, or answers slowly), the call is sent as always and waits for fred's reconnect.
//! One try stands for every call made within [`LOOK_STANDS`]. On a cluster or behind
//! Sentinel nothing is held back: a master that refuses may be replaced by a failover within
//! the command timeout.
//!
//! On a single server the link also tells waiters when the connection is lost (see
//! [`lost`](Link::lost)) and since when it has been down, so that a waiter counts an outage
//! from the moment the server went away, not from its own next look, which may come a
//! recheck period later.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::base::error::REFUSED;
use fred::clients::{Client, WithOptions};
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::{Options, Server, ServerConfig};
use fred::types::ClientState;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{watch, Mutex, Notify};
use tokio::time::Instant;

/// How long one try of a connection answers for every call made meanwhile, so that calls
/// made while the server is down cost it one connection attempt per this time at most.
const LOOK_STANDS: Duration = Duration::from_millis(100);

/// The longest a try waits for the server: a refusal comes back at once, and a server that
/// does not answer at all is left to the command timeout.
const LOOK_TIMEOUT: Duration = Duration::from_millis(500);

/// The command connection's state, as fred's events tell it (see the module docs).
pub(crate) struct Link {
    /// The single server fred connects to; `None` on a cluster or behind Sentinel.
    server: Option<Server>,
    /// The client for reads (see [`reads`](Link::reads)).
    reads: WithOptions<Client>,
    /// Set when fred reports the connection lost or a reconnect failed; cleared when it
    /// reconnects.
    down: Arc<AtomicBool>,
    /// When fred first reported the connection lost, until it reconnects.
    down_since: Arc<parking_lot::Mutex<Option<Instant>>>,
    /// Told to every waiter when fred reports the connection lost.
    lost: Arc<Notify>,
    look_timeout: Duration,
    last_look: Mutex<Option<Look>>,
}

/// One try of a connection to the server, and when it was made.
struct Look {
    at: Instant,
    refused: Option<RedisError>,
}

impl Link {
    /// The link of `redis`, followed by a task until `shutdown` turns true.
    pub(crate) fn start(
        redis: &Client,
        command_timeout: Duration,
        mut shutdown: watch::Receiver<bool>,
    ) -> Link {
        let server = match &redis.client_config().server {
            ServerConfig::Centralized { server } => Some(server.clone()),
            _ => None,
        };
        let down = Arc::new(AtomicBool::new(false));
        let down_since = Arc::new(parking_lot::Mutex::new(None));
        let lost_news = Arc::new(Notify::new());
        if server.is_some() {
            let (mut errors, mut reconnects) = (redis.error_rx(), redis.reconnect_rx());
            let (down, down_since, lost_news) =
                (down.clone(), down_since.clone(), lost_news.clone());
            tokio::spawn(async move {
                loop {
                    let lost = tokio::select! {
                        error = errors.recv() => match error {
                            Ok(_) | Err(RecvError::Lagged(_)) => true,
                            Err(RecvError::Closed) => return,
                        },
                        reconnected = reconnects.recv() => match reconnected {
                            Ok(_) => false,
                            // Missed news: the next call tries the server, and clears it.
                            Err(RecvError::Lagged(_)) => true,
                            Err(RecvError::Closed) => return,
                        },
                        _ = shutdown.wait_for(|closing| *closing) => return,
                    };
                    down.store(lost, Ordering::Relaxed);
                    let mut since = down_since.lock();
                    match (lost, since.is_some()) {
                        (true, false) => {
                            *since = Some(Instant::now());
                            lost_news.notify_waiters();
                        }
                        (false, _) => *since = None,
                        (true, true) => {}
                    }
                }
            });
        }
        // Sent once on a single server: a read fred would resend after the reconnect waits
        // for it, and a server that refuses is only found by a failure.
        let reads = Options {
            max_attempts: server.as_ref().map(|_| 1),
            ..Default::default()
        };
        Link {
            server,
            reads: redis.with_options(&reads),
            down,
            down_since,
            lost: lost_news,
            look_timeout: (command_timeout / 2).min(LOOK_TIMEOUT),
            last_look: Mutex::new(None),
        }
    }

    /// The client for the reads of a lock's keys: on a single server, each is sent once, so
    /// that one on the connection as it drops fails at once, and is told as the refusal when
    /// the server refuses (see [`explain`](Link::explain)).
    pub(crate) fn reads(&self) -> &WithOptions<Client> {
        &self.reads
    }

    /// Since when the single server's connection has been down, as fred reported it;
    /// `None` while it is up, and always on a cluster or behind Sentinel.
    pub(crate) fn down_since(&self) -> Option<Instant> {
        *self.down_since.lock()
    }

    /// Completes when fred next reports the single server's connection lost (never on a
    /// cluster or behind Sentinel). Registered when called, so that a loss reported
    /// after the call and before the first poll is not missed.
    pub(crate) fn lost(&self) -> tokio::sync::futures::Notified<'_> {
        self.lost.notified()
    }

    /// Whether a call may be sent: the refusal when the connection is down and the server
    /// refuses a new one.
    pub(crate) async fn check(&self) -> Result<(), RedisError> {
        match &self.server {
            Some(server) if self.down.load(Ordering::Relaxed) => match self.look(server).await {
                Some(refused) => Err(refused),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// `error`, or the refusal when it is the loss of the connection and the server now
    /// refuses a new one.
    pub(crate) async fn explain(&self, error: RedisError) -> RedisError {
        match &self.server {
            Some(server) if lost_connection(&error) => match self.look(server).await {
                Some(refused) => refused,
                None => error,
            },
            _ => error,
        }
    }

    /// Tries a connection to `server`, unless a try made within [`LOOK_STANDS`] answers:
    /// the refusal, if it was refused.
    async fn look(&self, server: &Server) -> Option<RedisError> {
        let mut last = self.last_look.lock().await;
        if let Some(look) = &*last {
            if look.at.elapsed() < LOOK_STANDS {
                return look.refused.clone();
            }
        }
        let connecting = tokio::net::TcpStream::connect((&*server.host, server.port));
        let refused = match tokio::time::timeout(self.look_timeout, connecting).await {
            Ok(Err(error)) if error.kind() == io::ErrorKind::ConnectionRefused => Some(
                RedisError::new(ErrorKind::IO, format!("{REFUSED}{server}\n{error:?}")),
            ),
            _ => None,
        };
        // The server answers and fred is connected: the news of the reconnect was missed.
        if refused.is_none() && self.reads.state() == ClientState::Connected {
            self.down.store(false, Ordering::Relaxed);
            *self.down_since.lock() = None;
        }
        *last = Some(Look {
            at: Instant::now(),
            refused: refused.clone(),
        });
        refused
    }
}

/// Whether fred failed a command because its connection was lost or missing (not a
/// timeout, nor the server's answer).
fn lost_connection(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::IO | ErrorKind::Canceled => true,
        _ => {
            let details = error.details();
            details.contains("Failed to route command") || details.contains("Connection closed")
        }
    }
}

/// How long a TLS connection may take before [`plain_text`] looks at the server.
const PLAIN_TEXT_AFTER: Duration = Duration::from_millis(250);

/// Completes only when the first server of `config`, asked for a TLS connection, answers a
/// plain-text `PING` (a TLS handshake with it would wait for the command timeout): with
/// the error that says so. It asks after [`PLAIN_TEXT_AFTER`], so a TLS server that answers
/// in time never sees it, and never behind Sentinel, whose own connections may not use TLS.
pub(crate) async fn plain_text(config: &ServerConfig) -> RedisError {
    let server = match config {
        ServerConfig::Sentinel { .. } => None,
        _ => config.hosts().into_iter().next(),
    };
    if let Some(server) = server {
        tokio::time::sleep(PLAIN_TEXT_AFTER).await;
        let answered = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect((&*server.host, server.port))
                .await
                .ok()?;
            stream.write_all(b"PING\r\n").await.ok()?;
            // A RESP reply: `+PONG`, or an error such as `-NOAUTH`. A TLS server sends an
            // alert record (0x15) or closes the connection.
            let first = stream.read_u8().await.ok()?;
            matches!(first, b'+' | b'-').then_some(())
        };
        if let Ok(Some(())) = tokio::time::timeout(LOOK_TIMEOUT * 2, answered).await {
            // fred has its TLS error kind with its TLS feature only.
            #[cfg(feature = "tls")]
            let kind = ErrorKind::Tls;
            #[cfg(not(feature = "tls"))]
            let kind = ErrorKind::Config;
            return RedisError::new(
                kind,
                "the server answers in plain text, so it does not speak TLS: use a redis:// \
                 URL, or turn TLS on at the server",
            );
        }
    }
    std::future::pending().await
}
