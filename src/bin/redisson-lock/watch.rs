//! `watch`: follows one lock, semaphore or count-down latch live. Acquisitions, releases,
//! re-entries, queue changes and counts are seen by reading the data every interval (Redis
//! tells nobody of an acquisition); the messages by listening on the channels (and each
//! queued waiter's own), each told in the words of its channel's kind.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redisson_lock::fred::clients::SubscriberClient;
use redisson_lock::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use redisson_lock::fred::types::config::{Config, ReconnectPolicy};
use redisson_lock::fred::types::Builder;
use redisson_lock::inspect::{LockState, Side};
use redisson_lock::LockClient;
use serde_json::{json, Value};

use crate::show::{print_json, print_state, state_json};
use crate::synchronizer::{self, What};
use crate::{Cli, Exit, Failure, Object, Outcome};

/// What one poll saw: holders by field (side, count), the queue in order, a counter's
/// count and how many permits the leases list.
#[derive(Default, PartialEq)]
struct Seen {
    holders: BTreeMap<String, (Side, i64)>,
    queue: Vec<String>,
    counter: Option<i64>,
    leased: u64,
}

impl Seen {
    fn of(state: &LockState) -> Seen {
        Seen {
            holders: (state.holders.iter())
                .map(|h| (h.field.clone(), (h.side, h.count)))
                .collect(),
            queue: state.queue.iter().map(|w| w.field.clone()).collect(),
            counter: state.counter,
            leased: state.leased_permits_len,
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

    /// The differences between two polls, of a name shown as `what`.
    fn changes(&self, what: What, before: &Seen, now: &Seen) {
        if let Some(text) = synchronizer::count_change(what, before.counter, now.counter) {
            // A latch deleted at 0 counts as 0 (open).
            let to = match (what, now.counter) {
                (What::Latch, None) => Some(0),
                (_, to) => to,
            };
            self.emit(
                "counter",
                json!({"object": what.name(), "from": before.counter, "to": to}),
                text,
            );
        }
        if before.leased != now.leased {
            let (from, to) = (before.leased, now.leased);
            self.emit(
                "leases",
                json!({"from": from, "to": to}),
                format!("taken permits listed in the leases {from} -> {to}"),
            );
        }
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
    // Reconnected and subscribed again whenever its connection drops (a restart; behind
    // Sentinel, the old master closing its clients as it is demoted): a subscriber without
    // a reconnect policy would go silent for good.
    let subscriber = Builder::from_config(config)
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2))
        .build_subscriber_client()
        .map_err(redis_error)?;
    subscriber.init().await.map_err(redis_error)?;
    subscriber.manage_subscriptions();
    Ok(subscriber)
}

pub(crate) async fn watch(
    cli: &Cli,
    client: &LockClient,
    name: &str,
    asked: Object,
    interval: Duration,
    duration: Option<Duration>,
) -> Outcome {
    // Where the client's own waiters would listen: sharded only where the servers have it.
    let sharded = client.listens_sharded();
    let subscriber = listen(&cli.global.url).await?;
    let mut messages = subscriber.message_rx();
    let mut subscribed = HashSet::new();
    // What the name is shown as; once the data tells a synchronizer, it stays one.
    let mut what = What::Lock;
    let events = Events {
        json: cli.global.json,
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
                    let meaning = synchronizer::meaning(&message.channel, &payload);
                    events.emit(
                        "message",
                        json!({"channel": &*message.channel, "payload": payload, "meaning": meaning}),
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
                if !matches!(what, What::Semaphore | What::Expirable | What::Latch) {
                    what = synchronizer::what(&state, asked);
                }
                match &seen {
                    None => {
                        let clients = crate::clients(client).await;
                        if cli.global.json {
                            let mut first = state_json(&state, &clients, what);
                            first["event"] = json!("state");
                            print_json(&first);
                        } else {
                            print_state(&state, &clients, what, false);
                            println!("--- watching {name}; Ctrl-C to stop");
                        }
                    }
                    Some(before) => events.changes(what, before, &now),
                }
                seen = Some(now);
            }
        }
    };
    let _ = subscriber.quit().await;
    outcome
}
