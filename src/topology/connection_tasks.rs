//! Keeps the connection tasks of the fred clients this crate made running.
//!
//! fred drives each client's connections from one task, and ends that task for good on some
//! errors: an `ASK` redirection that reaches a command with no attempt left, for one (a
//! command sent with a per-call `max_attempts` of 1 is enough), or a dropped connection when
//! the client has no reconnect policy (the subscriber made for clients given without one).
//! Every later command of that client would then time out, and a subscriber would hear no
//! message again. One task per `LockClient` watches the connection tasks of the clients it
//! made and starts a stopped one again until the client shuts down. Clients given to
//! `LockClientBuilder::clients` are their owner's to watch.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::ConnectHandle;
use tokio::sync::watch;

use crate::base::backoff::{doubled, RESTART_PAUSE};
use crate::base::observe;

/// A task that ran this long was working: the next stop starts over at the first pause.
const WORKED: Duration = Duration::from_secs(10);

/// Starts a client's connection task: `ClientLike::connect` of a command client or a
/// subscriber.
type Connect = Box<dyn Fn() -> ConnectHandle + Send>;

/// A client, by what starts its connection task, with the handle of the running task.
pub(crate) struct Driven {
    /// Which of the client's connections this is, for logs and metrics: `commands`,
    /// `scripts` or `subscriber`.
    connection: &'static str,
    connect: Connect,
    task: ConnectHandle,
    started: Instant,
    pause: Duration,
}

impl Driven {
    /// `task`: what `client.init()` returned.
    pub(crate) fn new(
        connection: &'static str,
        client: impl ClientLike + 'static,
        task: ConnectHandle,
    ) -> Driven {
        Driven {
            connection,
            connect: Box::new(move || client.connect()),
            task,
            started: Instant::now(),
            pause: RESTART_PAUSE.0,
        }
    }
}

/// Starts the task that starts each of `clients`' connection tasks again when it stops,
/// until `shutdown` turns true.
pub(crate) fn keep_running(clients: Vec<Driven>, shutdown: watch::Receiver<bool>) {
    if !clients.is_empty() {
        tokio::spawn(watch_tasks(clients, shutdown));
    }
}

async fn watch_tasks(mut clients: Vec<Driven>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (index, ended) = tokio::select! {
            ended = first_to_end(&mut clients) => ended,
            _ = shutdown.wait_for(|closing| *closing) => return,
        };
        // Shutdown quits the clients: their tasks end, and stay ended.
        if *shutdown.borrow() {
            return;
        }
        let driven = &mut clients[index];
        let error = match ended {
            Ok(Ok(())) => "none".to_owned(),
            Ok(Err(error)) => error.to_string(),
            Err(join_error) => join_error.to_string(),
        };
        if driven.started.elapsed() >= WORKED {
            driven.pause = RESTART_PAUSE.0;
        }
        tracing::warn!(
            connection = driven.connection,
            %error,
            pause_ms = driven.pause.as_millis() as u64,
            "the driver's connection task stopped; starting it again"
        );
        tokio::select! {
            _ = tokio::time::sleep(driven.pause) => {}
            _ = shutdown.wait_for(|closing| *closing) => return,
        }
        driven.pause = doubled(driven.pause, RESTART_PAUSE.1);
        driven.task = (driven.connect)();
        driven.started = Instant::now();
        observe::connection_restarted(driven.connection);
    }
}

/// Which client's connection task ended first, and how.
async fn first_to_end(
    clients: &mut [Driven],
) -> (
    usize,
    Result<Result<(), fred::error::Error>, tokio::task::JoinError>,
) {
    poll_fn(|cx| {
        for (index, driven) in clients.iter_mut().enumerate() {
            if let Poll::Ready(ended) = Pin::new(&mut driven.task).poll(cx) {
                return Poll::Ready((index, ended));
            }
        }
        Poll::Pending
    })
    .await
}
