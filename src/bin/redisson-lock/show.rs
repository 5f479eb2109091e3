//! How a lock's state is printed: for people, and as JSON for scripts.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redisson_lock::inspect::{FoundLocks, HoldMode, Holder, LockState, Side};
use redisson_lock::{LockOwner, Uuid};
use serde_json::{json, Value};

use crate::args::human_duration;
use crate::synchronizer::{self, What};

/// What the tool knows of the connected clients of this crate: by client id with their
/// addresses (see `connected_lock_clients`), or why they could not be listed.
pub(crate) type Clients = Result<HashMap<Uuid, String>, String>;

pub(crate) fn print_json(value: &Value) {
    println!("{value}");
}

fn millis(duration: Duration) -> Value {
    if duration == Duration::MAX {
        json!(-1)
    } else {
        json!(duration.as_millis() as u64)
    }
}

fn epoch_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn mode_name(mode: &HoldMode) -> &'static str {
    match mode {
        HoldMode::Free => "free",
        HoldMode::Exclusive => "exclusive",
        HoldMode::Read => "read",
        HoldMode::Write => "write",
        HoldMode::Counter => "counter",
        _ => "not_a_lock",
    }
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Read => "read",
        Side::Write => "write",
        _ => "exclusive",
    }
}

/// Which side an owner is on, as far as the data tells: a connected client of this crate
/// (its connection carries the client id), or unknown.
fn origin<'a>(owner: Option<&LockOwner>, clients: &'a Clients) -> Option<&'a String> {
    clients.as_ref().ok()?.get(&owner?.client_id())
}

fn owner_json(field: &str, owner: Option<&LockOwner>, clients: &Clients) -> Value {
    let client = origin(owner, clients);
    // "connected": a client of this crate holding a connection now; "unknown": anything
    // else, since a Java client, an unnamed connection and a dead client look alike.
    let liveness = if client.is_some() {
        "connected"
    } else {
        "unknown"
    };
    json!({
        "field": field,
        "client_id": owner.map(|o| o.client_id().to_string()),
        "owner_id": owner.map(|o| o.id()),
        "client": if client.is_some() { "redisson-lock" } else { "unknown" },
        "client_addr": client,
        "liveness": liveness,
        "clients_unlisted": clients.as_ref().err(),
    })
}

/// The state as one JSON object, with the fields of what it is shown as.
pub(crate) fn state_json(state: &LockState, clients: &Clients, what: What) -> Value {
    let now = SystemTime::now();
    let holders: Vec<Value> = state
        .holders
        .iter()
        .map(|h| {
            let mut holder = owner_json(&h.field, h.owner.as_ref(), clients);
            holder["side"] = json!(side_name(h.side));
            holder["count"] = json!(h.count);
            if h.side == Side::Read {
                let leases: Vec<Value> = h
                    .read_leases
                    .iter()
                    .map(|l| l.map_or(Value::Null, millis))
                    .collect();
                holder["read_leases_ms"] = json!(leases);
            }
            holder
        })
        .collect();
    let queue: Vec<Value> = state
        .queue
        .iter()
        .map(|w| {
            let mut waiter = owner_json(&w.field, w.owner.as_ref(), clients);
            waiter["deadline_epoch_ms"] = json!(w.deadline.map(epoch_millis));
            waiter["deadline_in_ms"] = json!(w.deadline.map(|d| {
                d.duration_since(now)
                    .map_or(0, |left| left.as_millis() as u64)
            }));
            waiter
        })
        .collect();
    let channels: Vec<Value> = state
        .channels
        .iter()
        .map(|c| json!({"channel": c.channel, "listeners": c.listeners}))
        .collect();
    let mut value = json!({
        "name": state.name,
        "key": state.key,
        "state": mode_name(&state.mode),
        "not_a_lock": match &state.mode { HoldMode::NotALock(why) => json!(why), _ => Value::Null },
        "ttl_ms": state.ttl.map_or(Value::Null, millis),
        "holders": holders,
        "queue": queue,
        "queue_len": state.queue_len,
        "fence_token": state.fence_token,
        "counter": state.counter,
        "leased_permits": state.leased_permits.iter().map(|p| json!({
            "id": p.id,
            "expires_epoch_ms": p.expires.map(epoch_millis),
            "expires_in_ms": p.expires.map(|at| at.duration_since(now).map_or(0, |left| left.as_millis() as u64)),
        })).collect::<Vec<_>>(),
        "leased_permits_len": state.leased_permits_len,
        "channels": channels,
    });
    synchronizer::json_fields(state, what, &mut value);
    value
}

/// Who an owner is, in words: never a guess about its language, nor about its liveness.
fn who(owner: Option<&LockOwner>, clients: &Clients) -> String {
    match (owner, origin(owner, clients), clients) {
        (_, Some(addr), _) => format!("a redisson-lock client, connected from {addr}"),
        (Some(owner), None, Ok(_)) => format!(
            "Java thread {} or a Rust owner; liveness unknown: no redisson-lock client with \
             this id is connected (Java clients never are, and a Rust client may be gone or \
             unable to name its connection)",
            owner.id()
        ),
        (Some(owner), None, Err(why)) => format!(
            "Java thread {} or a Rust owner; liveness unknown: the connected clients could \
             not be listed ({why})",
            owner.id()
        ),
        (None, None, _) => "not an owner field of the usual form".into(),
    }
}

fn holder_line(holder: &Holder, clients: &Clients) -> String {
    let side = match holder.side {
        Side::Read => "reader",
        Side::Write => "writer",
        _ => "holder",
    };
    let mut line = format!(
        "  {side:<8}  {}  x{}  ({})",
        holder.field,
        holder.count,
        who(holder.owner.as_ref(), clients)
    );
    if holder.side == Side::Read {
        let leases: Vec<String> = holder
            .read_leases
            .iter()
            .enumerate()
            .map(|(i, l)| match l {
                Some(l) => format!("#{} {}", i + 1, human_duration(*l)),
                None => format!("#{} gone", i + 1),
            })
            .collect();
        line.push_str(&format!("\n            hold leases: {}", leases.join(", ")));
    }
    line
}

fn state_text(state: &LockState) -> String {
    match &state.mode {
        HoldMode::Free if state.queue_len > 0 => "free, with waiters queued".into(),
        HoldMode::Free => "free".into(),
        HoldMode::Exclusive if state.queue_len > 0 => "held (fair lock)".into(),
        HoldMode::Exclusive => {
            "held (exclusive: a lock, fenced, spin, non-reentrant or fair lock)".into()
        }
        HoldMode::Read => "read-locked (read-write lock)".into(),
        HoldMode::Write => "write-locked (read-write lock)".into(),
        HoldMode::NotALock(why) => format!("not a lock: {why}"),
        HoldMode::Counter => "a counter: a semaphore's free permits or a count-down latch's \
            count (the data does not tell which; the listeners below tell whose waiters wait)"
            .into(),
        _ => "unknown".into(),
    }
}

/// Prints the state, shown as `what`, for people or as JSON.
pub(crate) fn print_state(state: &LockState, clients: &Clients, what: What, json: bool) {
    if json {
        return print_json(&state_json(state, clients, what));
    }
    if what.counts() {
        return synchronizer::print(state, what, state.ttl.map(human_duration));
    }
    let now = SystemTime::now();
    println!("lock      {}   (key {})", state.name, state.key);
    println!("state     {}", state_text(state));
    if let Some(ttl) = state.ttl {
        println!("ttl       {}", human_duration(ttl));
    }
    for holder in &state.holders {
        println!("{}", holder_line(holder, clients));
    }
    if state.queue_len > 0 {
        println!(
            "queue     {} waiting, head first; each deadline is the one before it plus that \
             waiter's wait (Redisson's fair queue)",
            state.queue_len
        );
        for (i, waiter) in state.queue.iter().enumerate() {
            let deadline = match waiter.deadline {
                Some(at) => match at.duration_since(now) {
                    Ok(left) => format!("deadline in {}", human_duration(left)),
                    Err(_) => "deadline passed: dropped by the next fair script".into(),
                },
                None => "no deadline".into(),
            };
            println!(
                "  {:>3}. {}  {deadline}  ({})",
                i + 1,
                waiter.field,
                who(waiter.owner.as_ref(), clients)
            );
        }
    }
    if let Some(token) = state.fence_token {
        println!("token     {token}  (a fenced lock was taken under this name)");
    }
    if let Some(count) = state.counter {
        println!("count     {count}");
    }
    if state.leased_permits_len > 0 {
        println!(
            "leased    {} permit(s) listed in {{{}}}:timeout, as a permit-expirable semaphore \
             keeps them; earliest expiry first",
            state.leased_permits_len, state.key
        );
        for permit in &state.leased_permits {
            let expiry = match permit.expires {
                None => "no lease: taken until released".to_owned(),
                Some(at) => match at.duration_since(now) {
                    Ok(left) => format!("lease ends in {}", human_duration(left)),
                    Err(_) => "lease ended: back in the pool at the next acquire or count".into(),
                },
            };
            println!("  {}  {expiry}", permit.id);
        }
    }
    for channel in &state.channels {
        if channel.listeners > 0 {
            println!(
                "listening {}  {} connection(s){}",
                channel.channel,
                channel.listeners,
                channel_role(&channel.channel)
            );
        }
    }
    if state.channels.iter().all(|c| c.listeners == 0) {
        println!("listening nobody is subscribed to the lock's channels");
    }
}

/// Whose waiters listen on `channel`, for the channels of a counter: Java's and this crate's
/// semaphore and latch waiters subscribe while they wait (so may a subscription just ending).
fn channel_role(channel: &str) -> &'static str {
    if channel.starts_with("redisson_sc:") {
        "  (a semaphore's waiters)"
    } else if channel.starts_with("redisson_countdownlatch__channel__") {
        "  (a count-down latch's waiters)"
    } else {
        ""
    }
}

/// Prints one line a lock, or a JSON object with every lock.
pub(crate) fn print_list(found: &FoundLocks, clients: &Clients, json: bool) {
    let auto = |state: &LockState| synchronizer::what(state, crate::Object::Auto);
    if json {
        let locks: Vec<Value> = (found.locks.iter())
            .map(|s| state_json(s, clients, auto(s)))
            .collect();
        return print_json(&json!({"locks": locks, "incomplete": found.incomplete}));
    }
    for state in &found.locks {
        let ttl = state.ttl.map_or("-".into(), human_duration);
        if let Some(count) = state.counter {
            let listeners: u64 = state.channels.iter().map(|c| c.listeners).sum();
            // A permit-expirable semaphore's taken permits, when its leases list any.
            let what = auto(state);
            let count = match what {
                What::Semaphore => format!("free={count}"),
                What::Expirable => format!("free={count}\ttaken={}", state.leased_permits_len),
                _ => format!("count={count}"),
            };
            println!(
                "{}\t{}\t{count}\tlisteners={listeners}\tttl={ttl}",
                state.name,
                what.name()
            );
            continue;
        }
        let holders = state.holders.len();
        println!(
            "{}\t{}\tholders={holders}\tqueued={}\tttl={ttl}",
            state.name,
            mode_name(&state.mode),
            state.queue_len
        );
    }
}
