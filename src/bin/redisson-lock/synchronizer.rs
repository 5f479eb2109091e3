//! Semaphores, permit-expirable semaphores and count-down latches in the tool's own words:
//! which of them a name holds (given with `--kind`, or told from the data and from whose
//! waiters listen), their state (permits free, taken and in all; leases; waiters; a latch's
//! count), and what the messages on every channel mean.

use std::time::SystemTime;

use redisson_lock::inspect::{HoldMode, LockState};
use serde_json::{json, Value};

use crate::args::human_duration;
use crate::Object;

/// The start of a semaphore's channel (`redisson_sc:{name}`), either kind of semaphore.
const SEMAPHORE_CHANNEL: &str = "redisson_sc:";
/// The start of a count-down latch's channel.
const LATCH_CHANNEL: &str = "redisson_countdownlatch__channel__";

/// What a name is shown as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    /// A lock of any kind, or a name that holds nothing.
    Lock,
    /// A semaphore (`RSemaphore`).
    Semaphore,
    /// A permit-expirable semaphore (`RPermitExpirableSemaphore`).
    Expirable,
    /// A count-down latch (`RCountDownLatch`).
    Latch,
    /// A string holding a whole number that nothing tells apart: a semaphore's free
    /// permits or a latch's count.
    Counter,
}

impl What {
    /// Its name in JSON and in `list`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            What::Lock => "lock",
            What::Semaphore => "semaphore",
            What::Expirable => "permit_expirable_semaphore",
            What::Latch => "count_down_latch",
            What::Counter => "counter",
        }
    }

    /// Its name in sentences.
    pub(crate) fn words(self) -> &'static str {
        match self {
            What::Lock => "lock",
            What::Semaphore => "semaphore",
            What::Expirable => "permit-expirable semaphore",
            What::Latch => "count-down latch",
            What::Counter => "counter",
        }
    }

    /// Whether it is one of the synchronizers (or a counter that may be one).
    pub(crate) fn counts(self) -> bool {
        self != What::Lock
    }
}

/// How many connections listen on the channels starting with `start`.
fn listeners(state: &LockState, start: &str) -> u64 {
    (state.channels.iter())
        .filter(|c| c.channel.starts_with(start))
        .map(|c| c.listeners)
        .sum()
}

/// What `state` is shown as, when asked as `asked`. A hash (a lock) is always a lock; an
/// absent key or a counter is what was asked, or what the data tells: listed leases make
/// a permit-expirable semaphore, waiters on one kind's channel only make that kind.
pub(crate) fn what(state: &LockState, asked: Object) -> What {
    let counter_like = matches!(state.mode, HoldMode::Counter)
        || (state.mode == HoldMode::Free && state.holders.is_empty() && state.queue_len == 0);
    if !counter_like {
        return What::Lock;
    }
    match asked {
        Object::Lock => What::Lock,
        Object::Semaphore => What::Semaphore,
        Object::PermitExpirableSemaphore => What::Expirable,
        Object::CountDownLatch => What::Latch,
        Object::Auto => {
            let semaphore = listeners(state, SEMAPHORE_CHANNEL) > 0;
            let latch = listeners(state, LATCH_CHANNEL) > 0;
            match (state.leased_permits_len > 0, semaphore, latch) {
                (true, _, _) => What::Expirable,
                (false, true, false) => What::Semaphore,
                (false, false, true) => What::Latch,
                _ if state.mode == HoldMode::Counter => What::Counter,
                _ => What::Lock,
            }
        }
    }
}

/// The synchronizer's own fields of the JSON state: `permits` (free, and for a
/// permit-expirable semaphore taken and total) or the latch's `count` and whether it is
/// `open`.
pub(crate) fn json_fields(state: &LockState, what: What, into: &mut Value) {
    into["object"] = json!(what.name());
    let free = state.counter.unwrap_or(0);
    match what {
        What::Semaphore => into["permits"] = json!({"free": free}),
        What::Expirable => {
            let taken = state.leased_permits_len as i64;
            into["permits"] = json!({"free": free, "taken": taken, "total": free + taken});
        }
        What::Latch => {
            into["count"] = json!(free);
            into["open"] = json!(free <= 0);
        }
        What::Lock | What::Counter => {}
    }
}

/// The synchronizer's state for people: what it is, its count, its leases and its waiters.
pub(crate) fn print(state: &LockState, what: What, ttl: Option<String>) {
    let now = SystemTime::now();
    println!("{:<9} {}   (key {})", what.words(), state.name, state.key);
    let count = state.counter;
    match (what, count) {
        (What::Semaphore, Some(free)) => println!(
            "permits   {free} free (a semaphore stores only its free permits: how many are \
             taken is not known)"
        ),
        (What::Semaphore, None) => println!(
            "permits   none: the semaphore has no counter (try_set_permits or add_permits \
             makes it); an acquire waits"
        ),
        (What::Expirable, _) => {
            let (free, taken) = (count.unwrap_or(0), state.leased_permits_len as i64);
            let ended = (state.leased_permits.iter())
                .filter(|p| p.expires.is_some_and(|at| at <= now))
                .count();
            let ended = match ended {
                0 => String::new(),
                n => format!(
                    "; {n} of them with an ended lease, free again at the next acquire or count"
                ),
            };
            println!(
                "permits   {free} free, {taken} taken, {} in all{ended}",
                free + taken
            );
        }
        (What::Latch, Some(count)) if count > 0 => println!(
            "count     {count}: closed; its waiters return once {count} more count-down(s) \
             bring it to 0"
        ),
        (What::Latch, _) => println!(
            "count     0: open (a latch that reaches 0 is deleted; a wait returns at once, and \
             try_set_count may set a new count)"
        ),
        (_, Some(count)) => println!(
            "count     {count}: a semaphore's free permits or a count-down latch's count (the \
             data does not tell which, and no waiter listens; name it with --kind)"
        ),
        (_, None) => println!("count     none"),
    }
    if let Some(ttl) = ttl {
        println!("ttl       {ttl}");
    }
    if what == What::Expirable && state.leased_permits_len > 0 {
        println!(
            "leases    {} taken permit(s) listed in {{{}}}:timeout, earliest expiry first",
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
    let start = match what {
        What::Latch => LATCH_CHANNEL,
        _ => SEMAPHORE_CHANNEL,
    };
    let mut any = false;
    for channel in state.channels.iter().filter(|c| c.listeners > 0) {
        let whose = if channel.channel.starts_with(SEMAPHORE_CHANNEL) {
            "a semaphore's waiters"
        } else if channel.channel.starts_with(LATCH_CHANNEL) {
            "a count-down latch's waiters"
        } else {
            "a lock's waiters"
        };
        any |= channel.channel.starts_with(start);
        println!(
            "waiters   {} connection(s) listening on {}  ({whose})",
            channel.listeners, channel.channel
        );
    }
    if !any {
        let channel = state.channels.iter().find(|c| c.channel.starts_with(start));
        match (what, channel) {
            (What::Counter, _) => println!("waiters   nobody listens on either kind's channel"),
            (_, Some(channel)) => println!(
                "waiters   none: nobody listens on {} (a waiting client listens there)",
                channel.channel
            ),
            (_, None) => println!("waiters   none"),
        }
    }
}

/// What the message `payload` on `channel` means, in words.
pub(crate) fn meaning(channel: &str, payload: &str) -> String {
    if channel.starts_with(SEMAPHORE_CHANNEL) {
        return match payload.trim().parse::<i64>() {
            Ok(n) => format!(
                "permits came back or were set ({n}: the sender's count, the new free count \
                 or how many came back); every waiting acquire looks again"
            ),
            Err(_) => "not a semaphore message: nobody wakes".into(),
        };
    }
    if channel.starts_with(LATCH_CHANNEL) {
        return match payload {
            "0" => "the count reached 0: the latch is open, every waiter returns".into(),
            "1" => "a new count was set or the latch deleted: every waiter reads the count".into(),
            _ => "not a latch message: nobody wakes".into(),
        };
    }
    match payload {
        "0" => "unlocked: wakes one waiter".into(),
        "1" => "unlocked: wakes every waiter (a read-write lock's write unlock)".into(),
        _ => "not a lock message".into(),
    }
}

/// A change of a counter between two looks, in words: `None` when it did not change.
pub(crate) fn count_change(what: What, before: Option<i64>, now: Option<i64>) -> Option<String> {
    if before == now {
        return None;
    }
    let shown = |count: Option<i64>| count.map_or("none".to_owned(), |c| c.to_string());
    let (from, to) = (shown(before), shown(now));
    Some(match what {
        What::Semaphore | What::Expirable => match now {
            Some(_) => format!("free permits {from} -> {to}"),
            None => format!("free permits {from} -> none: the counter was deleted"),
        },
        What::Latch => match now {
            Some(_) if before.is_none() => format!("count none -> {to}: a new count was set"),
            Some(_) => format!("count {from} -> {to}"),
            None => format!("count {from} -> 0: the latch is open (its key is deleted)"),
        },
        What::Lock | What::Counter => format!("count {from} -> {to}"),
    })
}
