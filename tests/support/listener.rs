//! A raw pub/sub connection standing in for a Java client's listener on lock channels.

use std::sync::atomic::{AtomicU64, Ordering};

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use tokio::sync::broadcast;

use super::{within, RedisServer, WAKE};

/// The channel of the markers that tell a listener it has seen everything published before.
const MARKERS: &str = "test-listener-markers";

/// A subscriber to some lock channels that reads their messages in order.
pub struct Listener<'a> {
    server: &'a RedisServer,
    subscriber: SubscriberClient,
    messages: broadcast::Receiver<Message>,
}

impl<'a> Listener<'a> {
    /// Listens on `channel`.
    pub async fn channel(server: &'a RedisServer, channel: &str) -> Listener<'a> {
        let listener = Listener::start(server).await;
        listener.subscriber.subscribe(channel).await.unwrap();
        listener.confirmed().await
    }

    /// Listens on every channel matching `pattern`.
    pub async fn pattern(server: &'a RedisServer, pattern: &str) -> Listener<'a> {
        let listener = Listener::start(server).await;
        listener.subscriber.psubscribe(pattern).await.unwrap();
        listener.confirmed().await
    }

    async fn start(server: &'a RedisServer) -> Listener<'a> {
        let config = Config::from_url(&server.url()).unwrap();
        let subscriber = Builder::from_config(config)
            .build_subscriber_client()
            .unwrap();
        subscriber.init().await.unwrap();
        let messages = subscriber.message_rx();
        subscriber.subscribe(MARKERS).await.unwrap();
        Listener {
            server,
            subscriber,
            messages,
        }
    }

    /// Returns once the server has answered a command sent after the subscriptions.
    async fn confirmed(self) -> Listener<'a> {
        let _: Value = self.subscriber.ping(None).await.unwrap();
        self
    }

    /// The next message on the lock channels: its channel and payload.
    pub async fn next(&mut self) -> (String, String) {
        loop {
            let (channel, payload) = self.receive().await;
            // A pattern matching the markers' channel delivers each marker once more.
            if channel != MARKERS {
                return (channel, payload);
            }
        }
    }

    /// Fails if anything published to the lock channels before this call is still unread.
    pub async fn no_more(&mut self) {
        // The server delivers a marker published now after all of that.
        static MARKER: AtomicU64 = AtomicU64::new(0);
        let marker = MARKER.fetch_add(1, Ordering::Relaxed).to_string();
        self.server.command(&["PUBLISH", MARKERS, &marker]);
        loop {
            match self.receive().await {
                (channel, payload) if channel == MARKERS => {
                    if payload == marker {
                        return;
                    }
                }
                unexpected => panic!("unexpected message {unexpected:?}"),
            }
        }
    }

    /// Closes the connection.
    pub async fn quit(self) {
        self.subscriber.quit().await.unwrap();
    }

    async fn receive(&mut self) -> (String, String) {
        let message = within(WAKE, "a message", self.messages.recv())
            .await
            .unwrap();
        (
            message.channel.to_string(),
            message.value.as_string().unwrap_or_default(),
        )
    }
}
