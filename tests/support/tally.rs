//! What the workload's tasks counted and saw, and the checks over the totals of every process.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What the tasks of one process saw; shared by its tasks, drained into report lines.
#[derive(Default)]
pub struct Tally {
    pub(super) acquired: AtomicU64,
    pub(super) timed_out: AtomicU64,
    pub(super) accepted: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) lost_at_unlock: AtomicU64,
    pub(super) errors: Mutex<BTreeMap<String, u64>>,
    pub(super) violations: Mutex<Vec<String>>,
    /// How long each successful acquisition waited.
    pub(super) waits: Mutex<Vec<Duration>>,
    /// `(lock, token)` of every fenced acquisition.
    pub(super) tokens: Mutex<Vec<(String, u64)>>,
}

/// Totals over tallies, and the checks that need all of them.
#[derive(Default, Debug)]
pub struct Totals {
    pub acquired: u64,
    pub timed_out: u64,
    pub accepted: u64,
    pub refused: u64,
    pub lost_at_unlock: u64,
    pub errors: BTreeMap<String, u64>,
    pub violations: Vec<String>,
    pub waits: Vec<Duration>,
    pub tokens: Vec<(String, u64)>,
}

impl Tally {
    pub fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    pub(super) fn error(&self, what: String) {
        *self.errors.lock().unwrap().entry(what).or_default() += 1;
    }

    /// Takes what was counted since the last call.
    pub fn drain(&self) -> Totals {
        let take = |n: &AtomicU64| n.swap(0, Ordering::Relaxed);
        Totals {
            acquired: take(&self.acquired),
            timed_out: take(&self.timed_out),
            accepted: take(&self.accepted),
            refused: take(&self.refused),
            lost_at_unlock: take(&self.lost_at_unlock),
            errors: std::mem::take(&mut *self.errors.lock().unwrap()),
            violations: std::mem::take(&mut *self.violations.lock().unwrap()),
            waits: std::mem::take(&mut *self.waits.lock().unwrap()),
            tokens: std::mem::take(&mut *self.tokens.lock().unwrap()),
        }
    }
}

impl Totals {
    pub fn add(&mut self, other: Totals) {
        self.acquired += other.acquired;
        self.timed_out += other.timed_out;
        self.accepted += other.accepted;
        self.refused += other.refused;
        self.lost_at_unlock += other.lost_at_unlock;
        for (error, n) in other.errors {
            *self.errors.entry(error).or_default() += n;
        }
        self.violations.extend(other.violations);
        self.waits.extend(other.waits);
        self.tokens.extend(other.tokens);
    }

    /// Violations found across all tallies: a fencing token issued twice.
    pub fn token_violations(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        (self.tokens.iter())
            .filter(|entry| !seen.insert(*entry))
            .map(|(lock, token)| format!("fencing token {token} of {lock} was issued twice"))
            .collect()
    }

    /// The `p`-th percentile of the waits (0 when there are none).
    pub fn wait_percentile(&mut self, p: f64) -> Duration {
        if self.waits.is_empty() {
            return Duration::ZERO;
        }
        self.waits.sort_unstable();
        let at = ((self.waits.len() - 1) as f64 * p / 100.0).round() as usize;
        self.waits[at]
    }

    /// One line of text, for a child process to report to its parent.
    pub fn to_line(&self) -> String {
        let mut line = format!(
            "acquired={} timed_out={} accepted={} refused={} lost_at_unlock={}",
            self.acquired, self.timed_out, self.accepted, self.refused, self.lost_at_unlock
        );
        let mut list = |name: &str, items: Vec<String>| {
            if !items.is_empty() {
                let _ = write!(line, " {name}={}", items.join(","));
            }
        };
        list(
            "errors",
            (self.errors.iter())
                .map(|(e, n)| format!("{}:{n}", e.replace(' ', "+")))
                .collect(),
        );
        list(
            "waits",
            self.waits
                .iter()
                .map(|w| w.as_micros().to_string())
                .collect(),
        );
        list(
            "tokens",
            (self.tokens.iter())
                .map(|(lock, t)| format!("{lock}:{t}"))
                .collect(),
        );
        line
    }

    /// Reads what [`to_line`](Totals::to_line) wrote (violations travel on lines of their
    /// own).
    pub fn from_line(line: &str) -> Totals {
        let mut totals = Totals::default();
        for field in line.split_whitespace() {
            let Some((name, value)) = field.split_once('=') else {
                continue;
            };
            let items = || value.split(',');
            match name {
                "acquired" => totals.acquired = value.parse().unwrap_or(0),
                "timed_out" => totals.timed_out = value.parse().unwrap_or(0),
                "accepted" => totals.accepted = value.parse().unwrap_or(0),
                "refused" => totals.refused = value.parse().unwrap_or(0),
                "lost_at_unlock" => totals.lost_at_unlock = value.parse().unwrap_or(0),
                "errors" => {
                    for item in items() {
                        if let Some((e, n)) = item.rsplit_once(':') {
                            totals
                                .errors
                                .insert(e.replace('+', " "), n.parse().unwrap_or(0));
                        }
                    }
                }
                "waits" => {
                    let micros = items().filter_map(|w| w.parse().ok());
                    totals.waits = micros.map(Duration::from_micros).collect();
                }
                "tokens" => {
                    for item in items() {
                        if let Some((lock, t)) = item.rsplit_once(':') {
                            totals
                                .tokens
                                .push((lock.to_owned(), t.parse().unwrap_or(0)));
                        }
                    }
                }
                _ => {}
            }
        }
        totals
    }
}
