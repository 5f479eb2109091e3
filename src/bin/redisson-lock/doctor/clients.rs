//! Check 4, as a client sees each master: the round trip (p50 and p99 of 20 `PING`s) and how
//! far this machine's clock is from the server's (`TIME`), which the fair lock's queue and
//! the permit-expirable semaphore's leases depend on (they are judged by clients' clocks).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::finding::{doc, Finding};
use super::node::Node;

/// How many `PING`s the round trip is measured over.
const PINGS: usize = 20;

/// A round trip above this is worth a warning: every acquisition, renewal and release takes
/// at least one, and a replica wait one more.
const SLOW_MS: f64 = 100.0;

/// A clock this far from the server's is worth a warning.
const SKEW_MS: i64 = 1_000;

/// The round-trip and clock findings of `node`.
pub(crate) async fn check(node: &Node) -> Vec<Finding> {
    let mut findings = Vec::new();
    let at = &node.address;
    let mut rtts = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let start = Instant::now();
        if let Err(why) = node.call(&["PING"]).await {
            findings.push(Finding::unknown(
                "clients.round_trip",
                format!("the round trip to {at} is unknown: PING failed ({why})"),
                "let the user run PING".into(),
                doc::LATENCY,
            ));
            break;
        }
        rtts.push(start.elapsed());
    }
    if rtts.len() == PINGS {
        rtts.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let p50 = ms(rtts[PINGS / 2]);
        let p99 = ms(rtts[(PINGS * 99 / 100).min(PINGS - 1)]);
        let what = format!(
            "the round trip to {at} is {p50:.2} ms (p50), {p99:.2} ms (p99) over {PINGS} PINGs"
        );
        findings.push(if p99 > SLOW_MS {
            Finding::warning(
                "clients.round_trip",
                format!("{what}: every acquisition, renewal and release takes at least one round trip, and the replica check one more"),
                "run the services close to the servers, or look at the network and the servers' load".into(),
                doc::LATENCY,
            )
        } else {
            Finding::fine("clients.round_trip", what, doc::LATENCY)
        });
    }
    findings.push(clock(node).await);
    findings
}

/// This machine's clock against `node`'s, corrected by half the round trip.
async fn clock(node: &Node) -> Finding {
    let at = &node.address;
    let before = SystemTime::now();
    let started = Instant::now();
    let reply = node.text(&["TIME"]).await;
    let rtt = started.elapsed();
    let reply = match reply {
        Ok(reply) => reply,
        Err(why) => {
            return Finding::unknown(
                "clients.clock",
                format!("the clock of {at} is unknown: TIME was refused ({why})"),
                "let the user run TIME".into(),
                doc::CLOCKS,
            )
        }
    };
    let mut parts = reply.lines().map(|part| part.trim().parse::<i64>());
    let (Some(Ok(secs)), Some(Ok(micros))) = (parts.next(), parts.next()) else {
        return Finding::unknown(
            "clients.clock",
            format!("the clock of {at} is unknown: TIME answered {reply:?}"),
            String::new(),
            doc::CLOCKS,
        );
    };
    let server_ms = secs * 1000 + micros / 1000;
    let local = before + rtt / 2;
    let local_ms = local
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let offset = local_ms - server_ms;
    let what = format!(
        "this machine's clock is {offset} ms from {at}'s (±{} ms)",
        rtt.as_millis() / 2 + 1
    );
    let why = "a permit-expirable semaphore's leases are ended by the clock of whichever client \
               looks, and a fair lock's queue deadlines by each waiter's: clients whose clocks \
               differ by more than a small part of the shortest lease end permits early";
    if offset.abs() > SKEW_MS {
        Finding::warning(
            "clients.clock",
            format!("{what}: {why}"),
            "synchronise the clocks of every client machine (NTP, chrony); run the doctor on \
             each to compare"
                .into(),
            doc::CLOCKS,
        )
    } else {
        Finding::fine(
            "clients.clock",
            format!("{what}; keep every client's clock this close: {why}"),
            doc::CLOCKS,
        )
    }
}
