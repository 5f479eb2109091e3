//! Percentiles, units, verdicts and the load average, as the benches print them.

use std::time::Duration;

use super::*;

/// Percentiles of a set of durations.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub n: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
    pub max: Duration,
}

/// Prints and returns p50/p99/mean/max of `samples`; `None` when there are none.
pub fn summary(name: &str, samples: &[Duration]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    let mut samples = samples.to_vec();
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let stats = Stats {
        n: samples.len(),
        p50: at(0.50),
        p99: at(0.99),
        mean: samples.iter().sum::<Duration>() / samples.len() as u32,
        max: at(1.0),
    };
    println!(
        "{name}: {} samples, p50 {:.1} µs, p99 {:.1} µs, mean {:.1} µs, max {:.1} µs",
        stats.n,
        micros(stats.p50),
        micros(stats.p99),
        micros(stats.mean),
        micros(stats.max)
    );
    Some(stats)
}

/// [`summary`] of shared samples.
pub fn percentiles(name: &str, samples: &Samples) -> Option<Stats> {
    summary(name, &samples.lock().unwrap())
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// "met" or "NOT met".
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// The three load averages of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Prints the load average, tagged with `when`.
pub fn print_load(when: &str) {
    println!("load average {when}: {}", load_average());
}
