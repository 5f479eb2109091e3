//! The load-and-faults run: worker processes, each with tasks on every kind of lock, work
//! against private Redis deployments while a schedule of faults plays. On one
//! `redis-server` (AOF, fsync on every write), through fault-injecting proxies: processes
//! killed and paused, connections killed, scripts flushed, the server crashed and put to
//! sleep, networks slowed, cut, black-holed and half-opened. On a cluster with replicas, or
//! a master with a replica and Sentinels (`--topology`): failovers, replicas paused,
//! connections killed, Sentinels restarted, processes killed and paused (see `topology.rs`).
//! About half the worker processes hand exclusive locks from task to task (`HandOff::ON`).
//! Every invariant of `tests/support/workload.rs` is checked during and after the run; the
//! parent process works a semaphore, a permit-expirable semaphore and count-down latches
//! meanwhile, under the same faults, and checks that no permit is lost or added and every
//! latch opens (see `tests/support/synchronizers.rs`). It prints the acquisitions, the faults injected by
//! kind, the invariant violations (there must be none; the exit code says so) and the wait
//! percentiles.
//!
//! ```sh
//! cargo run --release --example fault_run                  # 2 minutes
//! cargo run --release --example fault_run -- --duration 10m --processes 4 --tasks 8 --seed 7
//! cargo run --release --example fault_run -- --topology cluster --duration 1m
//! ```

#[path = "../../tests/support/mod.rs"]
mod support;
mod topology;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisson_lock::{HandOff, LockClient};
use support::synchronizers::Synchronizers;
use support::workload::{lost_updates, settle, Tally, Totals, Workload};
use support::{FaultProxy, Net};
use tokio::io::{AsyncBufReadExt, BufReader};
use topology::{Deployment, Probe, Topology};

/// The lease of watchdog holds: pauses and cuts in the schedule last longer.
const WATCHDOG: Duration = Duration::from_millis(1500);
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// Timed acquisitions' wait, and the fair queue's wait per waiter.
const WAIT: Duration = Duration::from_secs(1);
/// The longest pause or cut the schedule injects.
const LONGEST_FAULT: Duration = Duration::from_secs(3);
/// How long a replica may take to confirm a lock's write (the most the command timeout
/// allows).
const REPLICA_WAIT: Duration = Duration::from_millis(250);
/// How often a worker reports what it counted.
const REPORT_EVERY: Duration = Duration::from_millis(250);

struct Options {
    duration: Duration,
    processes: usize,
    tasks: usize,
    seed: u64,
    topology: Topology,
}

fn usage() -> ! {
    eprintln!(
        "usage: fault_run [--duration 2m] [--processes 3] [--tasks 6] [--seed N]\n\
         \x20                [--topology single|cluster|sentinel]\n\
         durations: 90s, 2m, 1h, or plain seconds"
    );
    std::process::exit(2)
}

fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text.split_at(text.trim_end_matches(char::is_alphabetic).len());
    let number: u64 = number.parse().ok()?;
    let seconds = match unit {
        "" | "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

fn options(args: &[String]) -> Options {
    let mut options = Options {
        duration: Duration::from_secs(120),
        processes: 3,
        tasks: 6,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        topology: Topology::Single,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--duration" => options.duration = parse_duration(value).unwrap_or_else(|| usage()),
            "--processes" => options.processes = value.parse().unwrap_or_else(|_| usage()),
            "--tasks" => options.tasks = value.parse().unwrap_or_else(|_| usage()),
            "--seed" => options.seed = value.parse().unwrap_or_else(|_| usage()),
            "--topology" => options.topology = Topology::parse(value).unwrap_or_else(|| usage()),
            _ => usage(),
        }
    }
    if options.processes == 0 || options.tasks == 0 {
        usage();
    }
    options
}

fn workload() -> Arc<Workload> {
    // A timed acquisition may end later than its wait by the attempt on the wire (up to
    // three commands), a pause of its own process, and a loaded machine's delays.
    let slack = COMMAND_TIMEOUT * 3 + LONGEST_FAULT + Duration::from_secs(3);
    Arc::new(Workload::new("run", WAIT, slack))
}

async fn lock_client(url: &str) -> redisson_lock::Result<LockClient> {
    lock_client_handing(url, HandOff::OFF).await
}

async fn lock_client_handing(url: &str, hand_off: HandOff) -> redisson_lock::Result<LockClient> {
    LockClient::builder()
        .url(url)
        .watchdog_timeout(WATCHDOG)
        .command_timeout(COMMAND_TIMEOUT)
        .fair_wait_timeout(WAIT)
        .wait_for_replicas(Some(REPLICA_WAIT))
        .hand_off(hand_off)
        .build()
        .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return worker(&args[1..]).await;
    }
    let options = options(&args);
    let violations = run(&options).await;
    std::process::exit(if violations == 0 { 0 } else { 1 });
}

/// A worker process: `--worker <url> <tasks> <seconds>`. Runs the workload's tasks for the
/// given time, reporting on stdout, then shuts its client down and says `DONE`.
async fn worker(args: &[String]) {
    let [url, tasks, seconds] = args else { usage() };
    let (tasks, seconds): (usize, u64) = (tasks.parse().unwrap(), seconds.parse().unwrap());
    // About half the workers (by process id, so a restarted worker may change sides) hand
    // locks from task to task.
    let hand_off = match std::process::id() % 2 {
        0 => HandOff::ON,
        _ => HandOff::OFF,
    };
    let client = loop {
        // The server may be restarting, or the network cut, as this process starts.
        match lock_client_handing(url, hand_off).await {
            Ok(client) => break client,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let until = Instant::now() + Duration::from_secs(seconds);
    let tally = Arc::new(Tally::default());
    let workload = workload();
    let running: Vec<_> = (0..tasks)
        .map(|task| {
            tokio::spawn(
                workload
                    .clone()
                    .task(client.clone(), task, until, tally.clone()),
            )
        })
        .collect();
    let reporting = {
        let tally = tally.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REPORT_EVERY).await;
                report(&tally);
            }
        })
    };
    for task in running {
        let _ = task.await;
    }
    reporting.abort();
    client.shutdown().await;
    report(&tally);
    println!("DONE");
}

/// Prints what `tally` counted since the last report: violations first, one a line.
fn report(tally: &Tally) {
    let totals = tally.drain();
    for violation in &totals.violations {
        println!("VIOLATION {violation}");
    }
    println!("TALLY {}", totals.to_line());
}

/// A small seeded generator: the schedule of a run is reproduced by its seed.
#[derive(Clone, Copy)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = (high - low).as_millis() as u64;
        low + Duration::from_millis(self.below(span))
    }
}

/// What a fault of the schedule acts on.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// A worker process: 0 kill, 1 pause.
    Worker(usize),
    /// The deployment: that fault of [`Topology::faults`].
    Deployment(usize),
    /// A worker's proxy (single server only): that fault of [`NETWORK_FAULTS`].
    Network(usize),
}

/// The faults every topology plays on its workers, each with its weight.
const WORKER_FAULTS: [(&str, u64); 2] = [
    ("kill a worker (SIGKILL)", 2),
    ("pause a worker (SIGSTOP)", 2),
];

/// The faults played on a worker's proxy in front of a single server.
const NETWORK_FAULTS: [(&str, u64); 4] = [
    ("slow network", 2),
    ("drop connections", 2),
    ("black hole", 2),
    ("half-open connections", 1),
];

/// The schedule's faults for `topology`: name, weight, what it acts on.
fn faults(topology: Topology) -> Vec<(&'static str, u64, Target)> {
    let workers = (WORKER_FAULTS.iter().enumerate()).map(|(i, (n, w))| (*n, *w, Target::Worker(i)));
    let deployment =
        (topology.faults().iter().enumerate()).map(|(i, (n, w))| (*n, *w, Target::Deployment(i)));
    let network = (NETWORK_FAULTS.iter().enumerate())
        .filter(|_| topology == Topology::Single)
        .map(|(i, (n, w))| (*n, *w, Target::Network(i)));
    workers.chain(deployment).chain(network).collect()
}

/// The parent's side of one worker process.
struct Worker {
    child: Child,
    /// Its fault proxy, in front of a single server.
    proxy: Option<FaultProxy>,
}

impl Worker {
    /// The URL the worker connects with.
    fn url(&self, deployment: &str) -> String {
        self.proxy
            .as_ref()
            .map_or_else(|| deployment.to_owned(), FaultProxy::url)
    }
}

struct Run {
    deployment: Arc<Mutex<Deployment>>,
    probe: Arc<Mutex<Probe>>,
    url: String,
    workers: Vec<Worker>,
    tasks: usize,
    end: Instant,
    totals: Arc<Mutex<Totals>>,
    /// Workers that said `DONE`.
    done: Arc<Mutex<usize>>,
}

impl Run {
    /// Starts a worker process on `url`, working until the end of the run.
    fn spawn(&self, url: &str) -> Child {
        let seconds = self
            .end
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--worker",
                url,
                &self.tasks.to_string(),
                &seconds.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a worker");
        let stdout = tokio::process::ChildStdout::from_std(child.stdout.take().unwrap()).unwrap();
        let (totals, done) = (self.totals.clone(), self.done.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(violation) = line.strip_prefix("VIOLATION ") {
                    totals.lock().unwrap().violations.push(violation.to_owned());
                } else if let Some(tally) = line.strip_prefix("TALLY ") {
                    totals.lock().unwrap().add(Totals::from_line(tally));
                } else if line == "DONE" {
                    *done.lock().unwrap() += 1;
                }
            }
        });
        child
    }

    /// Injects one fault on worker `target` or the deployment; returns once it is healed.
    /// `Err` when the deployment did not recover from it.
    async fn inject(&mut self, fault: Target, target: usize, rng: &mut Rng) -> Result<(), String> {
        let signal = |child: &Child, signal: &str| {
            let _ = Command::new("kill")
                .args([format!("-{signal}"), child.id().to_string()])
                .status();
        };
        let proxy = self.workers[target].proxy.as_ref();
        match fault {
            Target::Worker(0) => {
                let worker = &mut self.workers[target];
                let _ = worker.child.kill();
                let _ = worker.child.wait();
                let child = self.spawn(&self.workers[target].url(&self.url));
                self.workers[target].child = child;
            }
            Target::Worker(_) => {
                let pause = rng.between(Duration::from_millis(300), LONGEST_FAULT);
                signal(&self.workers[target].child, "STOP");
                tokio::time::sleep(pause).await;
                signal(&self.workers[target].child, "CONT");
            }
            Target::Deployment(kind) => {
                // Blocking commands, on a thread of their own: the proxies live on this
                // runtime.
                let (deployment, probe) = (self.deployment.clone(), self.probe.clone());
                // The generator goes along and comes back: a seed plays the same schedule
                // whichever thread draws.
                let mut drawing = *rng;
                let (recovered, drawn) = tokio::task::spawn_blocking(move || {
                    let mut probe = probe.lock().unwrap();
                    let mut deployment = deployment.lock().unwrap();
                    (deployment.inject(kind, &mut drawing, &mut probe), drawing)
                })
                .await
                .unwrap();
                *rng = drawn;
                return recovered;
            }
            Target::Network(0) => {
                let base = rng.between(Duration::from_millis(1), Duration::from_millis(20));
                let jitter = rng.between(Duration::ZERO, Duration::from_millis(20));
                let proxy = proxy.expect("a proxy");
                proxy.set(Net::Slow { base, jitter });
                tokio::time::sleep(rng.between(Duration::from_secs(1), LONGEST_FAULT)).await;
                proxy.set(Net::Clear);
            }
            Target::Network(1) => proxy.expect("a proxy").drop_connections(),
            Target::Network(2) => {
                let proxy = proxy.expect("a proxy");
                proxy.set(Net::BlackHole);
                tokio::time::sleep(rng.between(Duration::from_millis(300), LONGEST_FAULT)).await;
                proxy.set(Net::Clear);
            }
            Target::Network(_) => proxy.expect("a proxy").half_open(),
        }
        Ok(())
    }
}

/// The parent: starts the deployment, the proxies and the workers, plays the schedule,
/// waits for the workers, checks what is left, and prints the report. Returns the number
/// of violations.
async fn run(options: &Options) -> usize {
    let topology = options.topology;
    let deployment = tokio::task::spawn_blocking(move || Deployment::start(topology))
        .await
        .unwrap();
    let url = deployment.url();
    println!(
        "load-and-faults run: {:?}, {} processes x {} tasks, seed {}, {}",
        options.duration,
        options.processes,
        options.tasks,
        options.seed,
        deployment.describe()
    );
    let proxied = deployment.proxied_port();
    let probe = Probe {
        client: lock_client(&url).await.expect("connect the probe"),
        runtime: tokio::runtime::Handle::current(),
        tried: 0,
        refused: 0,
        other: 0,
        violations: Vec::new(),
        names: 0,
    };
    let started = Instant::now();
    // Its own client, on the deployment's URL (no proxy: the parent is never cut off).
    let synchronizing = lock_client(&url).await.expect("connect the synchronizers");
    let until = started + options.duration;
    let synchronizers = Synchronizers::start(&synchronizing, "run-sync:", until).await;
    let mut run = Run {
        deployment: Arc::new(Mutex::new(deployment)),
        probe: Arc::new(Mutex::new(probe)),
        url: url.clone(),
        workers: Vec::new(),
        tasks: options.tasks,
        end: started + options.duration,
        totals: Arc::default(),
        done: Arc::default(),
    };
    for _ in 0..options.processes {
        let proxy = match proxied {
            Some(port) => Some(FaultProxy::start(port).await),
            None => None,
        };
        let child = run.spawn(&proxy.as_ref().map_or_else(|| url.clone(), FaultProxy::url));
        run.workers.push(Worker { child, proxy });
    }

    // The schedule: a fault at a time, a quiet spell of up to 1.5 s between two.
    let faults = faults(topology);
    let mut rng = Rng(options.seed | 1);
    let mut injected: BTreeMap<&str, u64> = BTreeMap::new();
    let mut violations = Vec::new();
    let total_weight: u64 = faults.iter().map(|(_, weight, _)| weight).sum();
    // The last seconds are quiet, so that the last faults' effects settle before the end.
    while Instant::now() + LONGEST_FAULT * 2 < run.end {
        tokio::time::sleep(rng.between(Duration::from_millis(300), Duration::from_millis(1500)))
            .await;
        let mut pick = rng.below(total_weight);
        let (name, _, fault) = *(faults.iter())
            .find(|(_, weight, _)| {
                let hit = pick < *weight;
                pick = pick.saturating_sub(*weight);
                hit
            })
            .unwrap();
        let target = rng.below(options.processes as u64) as usize;
        if let Err(error) = run.inject(fault, target, &mut rng).await {
            violations.push(format!(
                "the deployment did not recover from {name}: {error}"
            ));
        }
        *injected.entry(name).or_default() += 1;
    }

    // Every worker ends by itself and says so; a worker that does not is stuck.
    let workload = workload();
    let limit = run.end + workload.stuck + Duration::from_secs(10);
    while *run.done.lock().unwrap() < options.processes && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = *run.done.lock().unwrap();
    if done < options.processes {
        violations.push(format!(
            "{} of {} workers did not finish",
            options.processes - done,
            options.processes
        ));
    }
    for worker in &mut run.workers {
        let _ = worker.child.kill();
        let _ = worker.child.wait();
    }
    let elapsed = started.elapsed();

    // What is left once every lease has run out, read from the masters of now.
    let observer = lock_client(&url).await.expect("connect after the run");
    let deployment = Arc::try_unwrap(run.deployment)
        .ok()
        .expect("the schedule is over");
    let deployment = deployment.into_inner().unwrap();
    let (synchronizer_violations, synchronized) = synchronizers.finish(&observer).await;
    violations.extend(synchronizer_violations);
    violations.extend(settle(&observer, &deployment, &workload, Duration::from_secs(30)).await);
    violations.extend(lost_updates(&deployment, &workload));
    let shut = synchronizing.shutdown().await;
    if shut.unfinished > 0 {
        violations.push(format!("the synchronizers' client shut down with {shut:?}"));
    }
    observer.shutdown().await;
    let probe = Arc::try_unwrap(run.probe)
        .ok()
        .expect("the schedule is over");
    let mut probe = probe.into_inner().unwrap();
    probe.client.shutdown().await;
    violations.append(&mut probe.violations);

    let mut totals = std::mem::take(&mut *run.totals.lock().unwrap());
    violations.extend(totals.token_violations());
    violations.extend(std::mem::take(&mut totals.violations));
    print_report(&mut totals, &injected, &probe, &violations, elapsed);
    println!("{synchronized}");
    violations.len()
}

fn print_report(
    totals: &mut Totals,
    injected: &BTreeMap<&str, u64>,
    probe: &Probe,
    violations: &[String],
    elapsed: Duration,
) {
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    println!("ran for            {:.1} s", elapsed.as_secs_f64());
    println!(
        "acquisitions       {} ({:.0}/s); timed out {}",
        totals.acquired,
        totals.acquired as f64 / elapsed.as_secs_f64(),
        totals.timed_out
    );
    println!(
        "protected writes   {} accepted, {} refused at the read or the write (every one after its guard reported the lease lost)",
        totals.accepted, totals.refused
    );
    println!(
        "unlocks of holds already lost (NotHeld)  {}",
        totals.lost_at_unlock
    );
    println!(
        "waits              p50 {}, p90 {}, p99 {}, max {}",
        ms(totals.wait_percentile(50.0)),
        ms(totals.wait_percentile(90.0)),
        ms(totals.wait_percentile(99.0)),
        ms(totals.wait_percentile(100.0))
    );
    println!("faults injected    {}", injected.values().sum::<u64>());
    for (fault, n) in injected {
        println!("  {fault:<26} {n}");
    }
    println!(
        "errors (expected under faults)  {}",
        totals.errors.values().sum::<u64>()
    );
    for (error, n) in &totals.errors {
        println!("  {error:<40} {n}");
    }
    if probe.tried > 0 {
        println!(
            "acquisitions tried while a replica was stopped  {}: refused (NotReplicated) {}, \
             timed out or reset {}, confirmed {}",
            probe.tried,
            probe.refused,
            probe.other,
            probe.tried - probe.refused - probe.other
        );
    }
    println!("invariant violations  {}", violations.len());
    // The first ones, and how many of each kind follow (one fault may break thousands).
    for violation in violations.iter().take(SHOWN) {
        println!("  {violation}");
    }
    let mut rest: BTreeMap<String, u64> = BTreeMap::new();
    for violation in violations.iter().skip(SHOWN) {
        let kind = violation.trim_start_matches(|c: char| !c.is_alphabetic());
        let kind: String = kind
            .split(char::is_numeric)
            .next()
            .unwrap_or_default()
            .into();
        *rest.entry(kind).or_default() += 1;
    }
    for (kind, n) in rest {
        println!("  … and {n} more like: {kind}…");
    }
}

/// How many violations the report lists one by one.
const SHOWN: usize = 20;
