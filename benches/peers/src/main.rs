//! `cargo run --release --manifest-path benches/peers/Cargo.toml [-- SECTION... [--quick]]`
//!
//! redisson-lock side by side with the Rust crates a user would otherwise pick (rslock,
//! rlock, a naive SET NX + 100 ms poll loop) and with raw (Redisson's hash protocol as two
//! bare EVALSHA scripts on fred, polling every millisecond when busy), on one private
//! redis-server that this program starts on loopback; then the scale figures of
//! redisson-lock alone. Each contender runs with its own defaults and waits with its own
//! API; every workload is the same for all.
//!
//! Sections (all of them when none is named):
//! - `handoff`: a waiter in another client already waits; the holder releases; the time
//!   until the waiter holds the lock.
//! - `throughput`: 1, 8, 64, 256 and 1024 tasks on one client, each task locking and
//!   unlocking its own lock; operations per second and p99 per lock + unlock. The
//!   contenders take turns, round after round. Here a sixth contender, redisson-scripts
//!   (raw with Redisson 4.7's own unlock script and its latch, as Java sends them), stands
//!   beside raw; each rate is also given relative to both.
//! - `contention`: 16 tasks (8 per client) lock and unlock one lock in a loop;
//!   acquisitions per second, each task's share, waits; then, in a second pass, the
//!   commands the clients sent per acquisition (`MONITOR`, commands run by scripts left out).
//! - `holds`: 10,000 and 100,000 held locks under the watchdog: renewal scripts per period,
//!   CPU, memory per hold.
//! - `waiters`: 10,000 waiters on 10,000 locks in one client: subscriptions on its one
//!   subscriber connection, memory per waiter, the time until all got their lock.
//! - `plot`: draws `docs/benchmarks/*.svg` from the CSV files the sections wrote there
//!   (run after every run).
//!
//! `--quick` shortens everything (a smoke run; its figures mean nothing).

#[path = "../../common/mod.rs"]
mod common;
mod peer;
mod plot;
mod scale;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{micros, print_load, RedisServer};
use peer::{Peer, Worker};

/// The configuration of one run.
pub struct Run {
    pub quick: bool,
    pub server: RedisServer,
    pub url: String,
}

impl Run {
    /// `normal`, or `quick` under `--quick`.
    pub fn pick<T>(&self, normal: T, quick: T) -> T {
        if self.quick {
            quick
        } else {
            normal
        }
    }
}

/// Where the CSV files and the plots go: `docs/benchmarks/` of the repository.
pub fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `rows` under `header` to `docs/benchmarks/<name>.csv`.
pub fn write_csv(name: &str, header: &str, rows: &[String]) {
    let text = format!("{header}\n{}\n", rows.join("\n"));
    std::fs::write(out_dir().join(format!("{name}.csv")), text).unwrap();
}

/// The value at quantile `q` of `sorted`.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut sections: Vec<&str> = (args.iter())
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    if sections.is_empty() {
        sections = vec![
            "handoff",
            "throughput",
            "contention",
            "holds",
            "waiters",
            "plot",
        ];
    }
    if sections != ["plot"] {
        let server = RedisServer::start();
        let url = server.url();
        let run = Run { quick, server, url };
        println!(
            "private redis-server at {} ({}); {}",
            run.url,
            common::redis_version(&run.server),
            if quick { "quick run" } else { "full run" }
        );
        let rt = common::runtime();
        for section in &sections {
            print_load(&format!("before {section}"));
            match *section {
                "handoff" => rt.block_on(handoff(&run)),
                "throughput" => rt.block_on(throughput(&run)),
                "contention" => rt.block_on(contention(&run)),
                "holds" => scale::holds(&rt, &run),
                "waiters" => scale::waiters(&rt, &run),
                "plot" => {}
                other => panic!("unknown section {other}"),
            }
        }
        print_load("at the end");
    }
    if sections.contains(&"plot") {
        plot::all();
    }
}

/// Connects every contender of `names` twice (holder and waiter sides in different
/// clients).
async fn contenders(url: &str, names: &[&str]) -> Vec<(Peer, Peer)> {
    let mut all = Vec::new();
    for &name in names {
        all.push((
            Peer::connect(name, url).await,
            Peer::connect(name, url).await,
        ));
    }
    all
}

async fn close(all: Vec<(Peer, Peer)>) {
    for (a, b) in all {
        a.close().await;
        b.close().await;
    }
}

// ---------------------------------------------------------------------------------------
// handoff

/// One handoff: `holder` holds `name`, `waiter` waits for it (given time to be waiting),
/// the holder releases; the time from just before the release to the waiter holding it.
async fn handoff_once(holder: &mut Worker, waiter: Worker, name: &str) -> (Duration, Worker) {
    let held = holder.acquire(name).await;
    let name_owned = name.to_owned();
    let waiting = tokio::spawn(async move {
        let mut waiter = waiter;
        let got = waiter.acquire(&name_owned).await;
        let at = Instant::now();
        waiter.release(got).await;
        (at, waiter)
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let released = Instant::now();
    holder.release(held).await;
    let (acquired, waiter) = waiting.await.unwrap();
    (acquired - released, waiter)
}

async fn handoff(run: &Run) {
    let all = contenders(&run.url, &Peer::NAMES).await;
    let mut rows = Vec::new();
    for (a, b) in &all {
        let samples = match a.name() {
            "redisson-lock" | "raw" => run.pick(300, 10),
            _ => run.pick(40, 3),
        };
        let (mut holder, mut waiter) = (a.worker(0), b.worker(1));
        let name = format!("peers:handoff:{}", a.name());
        let mut times = Vec::with_capacity(samples);
        handoff_once(&mut holder, waiter, &name).await; // warm-up
        waiter = b.worker(1);
        for _ in 0..samples {
            let (took, back) = handoff_once(&mut holder, waiter, &name).await;
            waiter = back;
            times.push(took);
        }
        times.sort();
        println!(
            "handoff/{}: {} samples; p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            a.name(),
            times.len(),
            micros(quantile(&times, 0.5)),
            micros(quantile(&times, 0.9)),
            micros(quantile(&times, 0.99)),
            micros(quantile(&times, 1.0)),
        );
        rows.extend(
            times
                .iter()
                .map(|t| format!("{},{:.1}", a.name(), micros(*t))),
        );
    }
    // A bare round trip, for scale: the acquire script on a lock someone else holds.
    let bare = common::Bare::connect(&run.url).await;
    let busy = bare.busy_lock().await;
    let mut trips = bare.round_trips(&busy, run.pick(1000, 20)).await;
    trips.sort();
    println!(
        "handoff/round trip (bare EVALSHA on a busy lock): p50 {:.1} µs, p99 {:.1} µs",
        micros(quantile(&trips, 0.5)),
        micros(quantile(&trips, 0.99))
    );
    rows.extend(
        trips
            .iter()
            .map(|t| format!("round trip,{:.1}", micros(*t))),
    );
    write_csv("handoff", "contender,micros", &rows);
    close(all).await;
}

// ---------------------------------------------------------------------------------------
// throughput

/// `tasks` tasks of `peer`, each locking and unlocking its own lock until `window` passes;
/// the lock + unlock count and every latency.
async fn throughput_window(peer: &Peer, tasks: usize, window: Duration) -> (u64, Vec<Duration>) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let (mut worker, stop) = (peer.worker(i), stop.clone());
            let name = format!("peers:tp:{}:{tasks}:{i}", peer.name());
            tokio::spawn(async move {
                let mut times = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    worker.cycle(&name).await;
                    times.push(start.elapsed());
                }
                times
            })
        })
        .collect();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    (all.len() as u64, all)
}

async fn throughput(run: &Run) {
    let all = contenders(&run.url, &Peer::THROUGHPUT_NAMES).await;
    let sizes = run.pick(vec![1, 8, 64, 256, 1024], vec![1, 8]);
    let rounds = run.pick(5, 1);
    let window = run.pick(Duration::from_secs(1), Duration::from_millis(100));
    let mut rows = Vec::new();
    for &tasks in &sizes {
        // Warm-up: every task's first lock + unlock (connections, scripts, handles).
        for (peer, _) in &all {
            throughput_window(peer, tasks, Duration::from_millis(50)).await;
        }
        let mut per_peer: Vec<(Vec<f64>, Vec<Duration>)> = vec![Default::default(); all.len()];
        for _ in 0..rounds {
            for ((peer, _), (rates, times)) in all.iter().zip(&mut per_peer) {
                let start = Instant::now();
                let (ops, mut t) = throughput_window(peer, tasks, window).await;
                // Tasks finish the lock + unlock they are in after the window: count it all.
                rates.push(ops as f64 / start.elapsed().as_secs_f64());
                times.append(&mut t);
            }
        }
        let rate_of = |name: &str| {
            let i = all.iter().position(|(peer, _)| peer.name() == name);
            median(&per_peer[i.unwrap()].0)
        };
        let (raw_rate, scripts_rate) = (rate_of("raw"), rate_of("redisson-scripts"));
        for ((peer, _), (rates, times)) in all.iter().zip(&mut per_peer) {
            times.sort();
            let rate = median(rates);
            let p99 = quantile(times, 0.99);
            println!(
                "throughput/{tasks}_tasks/{}: {rate:.0} lock+unlock/s ({:.2}× raw, {:.2}× \
                 redisson-scripts; rounds {}), p50 {:.1} µs, p99 {:.1} µs",
                peer.name(),
                rate / raw_rate,
                rate / scripts_rate,
                rates
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                micros(quantile(times, 0.5)),
                micros(p99),
            );
            rows.push(format!(
                "{},{tasks},{rate:.0},{:.1},{:.1}",
                peer.name(),
                micros(quantile(times, 0.5)),
                micros(p99)
            ));
        }
    }
    write_csv(
        "throughput",
        "contender,tasks,ops_per_s,p50_micros,p99_micros",
        &rows,
    );
    close(all).await;
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------
// contention

/// What 16 tasks contending on one lock saw: per task, each wait.
async fn contend(
    pair: &(Peer, Peer),
    name: &str,
    window: Duration,
) -> (Vec<Vec<Duration>>, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let peer = if i % 2 == 0 { &pair.0 } else { &pair.1 };
            let (mut worker, stop, name) = (peer.worker(i), stop.clone(), name.to_owned());
            tokio::spawn(async move {
                let mut waits = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let held = worker.acquire(&name).await;
                    waits.push(asked.elapsed());
                    worker.release(held).await;
                }
                waits
            })
        })
        .collect();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let mut per_task = Vec::new();
    for handle in handles {
        per_task.push(handle.await.unwrap());
    }
    (per_task, start.elapsed())
}

/// Counts the commands clients send while it lives (`MONITOR`; script-run commands, shown
/// as coming from `lua`, are left out).
struct Monitor {
    child: std::process::Child,
    count: Arc<AtomicU64>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(port: u16) -> Monitor {
        let mut child = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "monitor"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("redis-cli runs MONITOR");
        let stdout = child.stdout.take().unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let counted = count.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains(" lua]") || line == "OK" {
                    continue;
                }
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        // MONITOR answers OK once it is on.
        std::thread::sleep(Duration::from_millis(200));
        Monitor {
            child,
            count,
            reader: Some(reader),
        }
    }

    fn stop(mut self) -> u64 {
        std::thread::sleep(Duration::from_millis(200)); // the last lines
        let counted = self.count.load(Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        counted
    }
}

async fn contention(run: &Run) {
    let all = contenders(&run.url, &Peer::NAMES).await;
    let window = run.pick(Duration::from_secs(4), Duration::from_millis(300));
    let mut rows = Vec::new();
    for pair in &all {
        let name = format!("peers:contention:{}", pair.0.name());
        contend(pair, &name, Duration::from_millis(200)).await; // warm-up
        let (per_task, took) = contend(pair, &name, window).await;
        let counts: Vec<usize> = per_task.iter().map(Vec::len).collect();
        let acquisitions: usize = counts.iter().sum();
        let mut waits: Vec<Duration> = per_task.concat();
        waits.sort();
        let mean = waits.iter().sum::<Duration>() / waits.len().max(1) as u32;
        let max = waits.last().copied().unwrap_or_default();
        // The second pass counts commands; MONITOR slows the server, so it is not timed.
        let monitor = Monitor::start(run.server.port());
        let (counted_tasks, _) = contend(pair, &name, window / 2).await;
        let sent = monitor.stop();
        let counted: usize = counted_tasks.iter().map(Vec::len).sum();
        let per_acquisition = sent as f64 / counted.max(1) as f64;
        let rate = acquisitions as f64 / took.as_secs_f64();
        println!(
            "contention/{}: {rate:.0} acquisitions/s; per task {}..{} (starved: {}); wait mean \
             {:.2} ms, max {:.2} ms = {:.1}× mean; {per_acquisition:.2} commands sent per \
             acquisition",
            pair.0.name(),
            counts.iter().min().unwrap(),
            counts.iter().max().unwrap(),
            counts.iter().filter(|c| **c == 0).count(),
            micros(mean) / 1e3,
            micros(max) / 1e3,
            max.as_secs_f64() / mean.as_secs_f64().max(1e-9),
        );
        rows.push(format!(
            "{},{rate:.0},{},{},{:.3},{:.3},{per_acquisition:.2}",
            pair.0.name(),
            counts.iter().min().unwrap(),
            counts.iter().max().unwrap(),
            micros(mean) / 1e3,
            micros(max) / 1e3,
        ));
    }
    write_csv(
        "contention",
        "contender,acquisitions_per_s,min_per_task,max_per_task,mean_wait_ms,max_wait_ms,commands_per_acquisition",
        &rows,
    );
    close(all).await;
}

/// Shared by the scale sections: a mutex-protected list of samples.
pub type Shared<T> = Arc<Mutex<Vec<T>>>;
