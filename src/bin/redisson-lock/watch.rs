//! `watch`: follows one lock live. Acquisitions, releases, re-entries and queue changes are
//! seen by reading the lock's data every interval (Redis tells nobody of an acquisition);
//! the unlock messages by listening on the lock's channels (and each queued waiter's own).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redisson_lock::fred::clients::SubscriberClient;
use redisson_lock::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use redisson_lock::fred::types::config::Config;
use redisson_lock::fred::types::Builder;
use redisson_lock::inspect::{LockState, Side};
use redisson_lock::LockClient;
use serde_json::{json, Value};

use crate::show::{print_json, print_state, state_json};
use crate::{Cli, Exit, Failure, Outcome};

/// What one poll saw: holders by field (side, count), and the queue in order.
#[derive(Default, PartialEq)]
struct Seen {
    holders: BTreeMap<String, (Side, i64)>,
    queue: Vec<String>,
}

impl Seen {
    fn of(state: &LockState) -> Seen {
        Seen {
            holders: (state.holders.iter())
                .map(|h| (h.field.clone(), (h.side, h.count)))
                .collect(),
            queue: state.queue.iter().map(|w| w.field.clone()).collect(),
        }
    }
}

fn side(side: Side) -> &'static str {
    match side {
        Side::Read => "read",
        Side::Write => "write",
        _ => "exclusive",
    }
}

/// Prints one event: a JSON line, or a line with the time since the watch began.
struct Events {
    json: bool,
    start: Instant,
}

impl Events {
    fn emit(&self, event: &str, mut fields: Value, text: String) {
        if self.json {
            fields["event"] = json!(event);
            fields["at_epoch_ms"] = json!(SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64));
            print_json(&fields);
        } else {
            let at = self.start.elapsed().as_secs_f64();
            println!("{at:>9.3}s  {event:<10} {text}");
        }
    }

    /// The differences between two polls.
    fn changes(&self, before: &Seen, now: &Seen) {
        for (field, (s, _)) in &before.holders {
            if !now.holders.contains_key(field) {
                self.emit(
                    "released",
                    json!({"field": field, "side": side(*s)}),
                    format!("{field} ({})", side(*s)),
                );
            }
        }
        for (field, (s, count)) in &now.holders {
            match before.holders.get(field) {
                None => self.emit(
                    "acquired",
                    json!({"field": field, "side": side(*s), "count": count}),
                    format!("{field} ({}) x{count}", side(*s)),
                ),
                Some((_, old)) if old != count => self.emit(
                    "count",
                    json!({"field": field, "side": side(*s), "count": count}),
                    format!("{field} ({}) x{old} -> x{count}", side(*s)),
                ),
                Some(_) => {}
            }
        }
        for (i, field) in now.queue.iter().enumerate() {
            if !before.queue.contains(field) {
                self.emit(
                    "queued",
                    json!({"field": field, "position": i + 1}),
                    format!("{field} at position {}", i + 1),
                );
            }
        }
        for field in &before.queue {
            if !now.queue.contains(field) {
                self.emit("dequeued", json!({"field": field}), field.clone());
            }
        }
    }
}

async fn listen(url: &str) -> Result<SubscriberClient, Failure> {
    let redis_error =
        |e: redisson_lock::fred::error::Error| Failure(Exit::RedisError, e.to_string());
    let config = Config::from_url(url).map_err(redis_error)?;
    let subscriber = Builder::from_config(config)
        .build_subscriber_client()
        .map_err(redis_error)?;
    subscriber.init().await.map_err(redis_error)?;
    Ok(subscriber)
}

pub(crate) async fn watch(
    cli: &Cli,
    client: &LockClient,
    name: &str,
    interval: Duration,
    duration: Option<Duration>,
) -> Outcome {
    // Where the client's own waiters would listen: sharded only where the servers have it.
    let sharded = client.listens_sharded();
    let subscriber = listen(&cli.url).await?;
    let mut messages = subscriber.message_rx();
    let mut subscribed = HashSet::new();
    let events = Events {
        json: cli.json,
        start: Instant::now(),
    };
    let stop = async {
        match duration {
            Some(duration) => tokio::time::sleep(duration).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    let mut interrupted = crate::interrupted();
    let mut ticks = tokio::time::interval(interval);
    let mut seen: Option<Seen> = None;
    let outcome = loop {
        tokio::select! {
            _ = &mut stop => break Ok(Exit::Done),
            _ = &mut interrupted => break Ok(Exit::Done),
            message = messages.recv() => {
                if let Ok(message) = message {
                    let payload = message.value.as_string().unwrap_or_default();
                    let meaning = match payload.as_str() {
                        "0" => "wakes one waiter",
                        "1" => "wakes every waiter (write unlock)",
                        _ => "not a lock message",
                    };
                    events.emit(
                        "message",
                        json!({"channel": &*message.channel, "payload": payload}),
                        format!("{payload:?} on {} ({meaning})", message.channel),
                    );
                }
            }
            _ = ticks.tick() => {
                let state = client.inspect(name).await?;
                let fresh: Vec<String> = (state.channels.iter())
                    .map(|c| c.channel.clone())
                    .filter(|c| !subscribed.contains(c))
                    .collect();
                if !fresh.is_empty() {
                    let subscribing = if sharded {
                        subscriber.ssubscribe(fresh.clone()).await
                    } else {
                        subscriber.subscribe(fresh.clone()).await
                    };
                    subscribing.map_err(|e| Failure(Exit::RedisError, e.to_string()))?;
                    subscribed.extend(fresh);
                }
                let now = Seen::of(&state);
                match &seen {
                    None => {
                        let clients = crate::clients(client).await;
                        if cli.json {
                            let mut first = state_json(&state, &clients);
                            first["event"] = json!("state");
                            print_json(&first);
                        } else {
                            print_state(&state, &clients, false);
                            println!("--- watching {name}; Ctrl-C to stop");
                        }
                    }
                    Some(before) => events.changes(before, &now),
                }
                seen = Some(now);
            }
        }
    };
    let _ = subscriber.quit().await;
    outcome
}
