//! The load-and-faults run: worker processes, each with tasks on every kind of lock, work
//! through fault-injecting proxies on one private `redis-server` (AOF, fsync on every write)
//! while a schedule of faults plays: processes killed and paused, connections killed,
//! scripts flushed, the server crashed and put to sleep, networks slowed, cut, black-holed
//! and half-opened. Every invariant of `tests/support/workload.rs` is checked during and
//! after the run. It prints the acquisitions, the faults injected by kind, the invariant
//! violations (there must be none; the exit code says so) and the wait percentiles.
//!
//! ```sh
//! cargo run --release --example fault_run                  # 2 minutes
//! cargo run --release --example fault_run -- --duration 10m --processes 4 --tasks 8 --seed 7
//! ```

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisson_lock::LockClient;
use support::workload::{lost_updates, settle, Tally, Totals, Workload};
use support::{FaultProxy, Net, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The lease of watchdog holds: pauses and cuts in the schedule last longer.
const WATCHDOG: Duration = Duration::from_millis(1500);
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// Timed acquisitions' wait, and the fair queue's wait per waiter.
const WAIT: Duration = Duration::from_secs(1);
/// The longest pause or cut the schedule injects.
const LONGEST_FAULT: Duration = Duration::from_secs(3);
/// How often a worker reports what it counted.
const REPORT_EVERY: Duration = Duration::from_millis(250);

struct Options {
    duration: Duration,
    processes: usize,
    tasks: usize,
    seed: u64,
}

fn usage() -> ! {
    eprintln!(
        "usage: fault_run [--duration 2m] [--processes 3] [--tasks 6] [--seed N]\n\
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
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--duration" => options.duration = parse_duration(value).unwrap_or_else(|| usage()),
            "--processes" => options.processes = value.parse().unwrap_or_else(|_| usage()),
            "--tasks" => options.tasks = value.parse().unwrap_or_else(|_| usage()),
            "--seed" => options.seed = value.parse().unwrap_or_else(|_| usage()),
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
    LockClient::builder()
        .url(url)
        .watchdog_timeout(WATCHDOG)
        .command_timeout(COMMAND_TIMEOUT)
        .fair_wait_timeout(WAIT)
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
    let client = loop {
        // The server may be restarting, or the network cut, as this process starts.
        match lock_client(url).await {
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

/// The faults of the schedule, each with its weight.
const FAULTS: [(&str, u64); 10] = [
    ("kill a worker (SIGKILL)", 2),
    ("pause a worker (SIGSTOP)", 2),
    ("CLIENT KILL", 2),
    ("SCRIPT FLUSH", 1),
    ("crash and restart redis", 1),
    ("DEBUG SLEEP", 1),
    ("slow network", 2),
    ("drop connections", 2),
    ("black hole", 2),
    ("half-open connections", 1),
];

/// The parent's side of one worker process.
struct Worker {
    child: Child,
    proxy: FaultProxy,
}

struct Run {
    server: Arc<Mutex<RedisServer>>,
    workers: Vec<Worker>,
    tasks: usize,
    end: Instant,
    totals: Arc<Mutex<Totals>>,
    /// Workers that said `DONE`.
    done: Arc<Mutex<usize>>,
}

impl Run {
    /// Starts a worker process behind `proxy`, working until the end of the run.
    fn spawn(&self, proxy: &FaultProxy) -> Child {
        let seconds = self
            .end
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--worker",
                &proxy.url(),
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

    /// Runs a blocking command on the server from a blocking thread (the proxies live on
    /// this runtime).
    async fn on_server<T: Send + 'static>(
        &self,
        action: impl FnOnce(&mut RedisServer) -> T + Send + 'static,
    ) -> T {
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || action(&mut server.lock().unwrap()))
            .await
            .unwrap()
    }

    /// Injects one fault of `kind` on worker `target`; returns once it is healed.
    async fn inject(&mut self, kind: usize, target: usize, rng: &mut Rng) {
        let signal = |child: &Child, signal: &str| {
            let _ = Command::new("kill")
                .args([format!("-{signal}"), child.id().to_string()])
                .status();
        };
        match kind {
            0 => {
                let worker = &mut self.workers[target];
                let _ = worker.child.kill();
                let _ = worker.child.wait();
                let child = self.spawn(&self.workers[target].proxy);
                self.workers[target].child = child;
            }
            1 => {
                let pause = rng.between(Duration::from_millis(300), LONGEST_FAULT);
                signal(&self.workers[target].child, "STOP");
                tokio::time::sleep(pause).await;
                signal(&self.workers[target].child, "CONT");
            }
            2 => {
                let which = ["normal", "pubsub"][rng.below(2) as usize];
                self.on_server(move |s| s.command(&["CLIENT", "KILL", "TYPE", which]))
                    .await;
            }
            3 => {
                self.on_server(|s| s.command(&["SCRIPT", "FLUSH"])).await;
            }
            4 => {
                self.on_server(|s| {
                    s.kill();
                    s.restart();
                })
                .await;
            }
            5 => {
                let sleep = rng.between(Duration::from_millis(200), Duration::from_millis(1200));
                let seconds = format!("{:.3}", sleep.as_secs_f64());
                self.on_server(move |s| s.command(&["DEBUG", "SLEEP", &seconds]))
                    .await;
            }
            6 => {
                let base = rng.between(Duration::from_millis(1), Duration::from_millis(20));
                let jitter = rng.between(Duration::ZERO, Duration::from_millis(20));
                let proxy = &self.workers[target].proxy;
                proxy.set(Net::Slow { base, jitter });
                tokio::time::sleep(rng.between(Duration::from_secs(1), LONGEST_FAULT)).await;
                proxy.set(Net::Clear);
            }
            7 => self.workers[target].proxy.drop_connections(),
            8 => {
                let proxy = &self.workers[target].proxy;
                proxy.set(Net::BlackHole);
                tokio::time::sleep(rng.between(Duration::from_millis(300), LONGEST_FAULT)).await;
                proxy.set(Net::Clear);
            }
            _ => self.workers[target].proxy.half_open(),
        }
    }
}

/// The parent: starts the server, the proxies and the workers, plays the schedule, waits
/// for the workers, checks what is left, and prints the report. Returns the number of
/// violations.
async fn run(options: &Options) -> usize {
    let server = RedisServer::start_with(true, &["--enable-debug-command", "local"]);
    let version = server.command(&["INFO", "server"]);
    let version = (version.lines())
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let url = server.url();
    println!(
        "load-and-faults run: {:?}, {} processes x {} tasks, seed {}, redis {version} (AOF, fsync always)",
        options.duration, options.processes, options.tasks, options.seed
    );
    let started = Instant::now();
    let mut run = Run {
        server: Arc::new(Mutex::new(server)),
        workers: Vec::new(),
        tasks: options.tasks,
        end: started + options.duration,
        totals: Arc::default(),
        done: Arc::default(),
    };
    for _ in 0..options.processes {
        let port = run.server.lock().unwrap().port();
        let proxy = FaultProxy::start(port).await;
        let child = run.spawn(&proxy);
        run.workers.push(Worker { child, proxy });
    }

    // The schedule: a fault at a time, a quiet spell of up to 1.5 s between two.
    let mut rng = Rng(options.seed | 1);
    let mut injected: BTreeMap<&str, u64> = BTreeMap::new();
    let total_weight: u64 = FAULTS.iter().map(|(_, weight)| weight).sum();
    // The last seconds are quiet, so that the last faults' effects settle before the end.
    while Instant::now() + LONGEST_FAULT * 2 < run.end {
        tokio::time::sleep(rng.between(Duration::from_millis(300), Duration::from_millis(1500)))
            .await;
        let mut pick = rng.below(total_weight);
        let kind = (FAULTS.iter())
            .position(|(_, weight)| {
                let hit = pick < *weight;
                pick = pick.saturating_sub(*weight);
                hit
            })
            .unwrap();
        let target = rng.below(options.processes as u64) as usize;
        run.inject(kind, target, &mut rng).await;
        *injected.entry(FAULTS[kind].0).or_default() += 1;
    }

    // Every worker ends by itself and says so; a worker that does not is stuck.
    let workload = workload();
    let limit = run.end + workload.stuck + Duration::from_secs(10);
    while *run.done.lock().unwrap() < options.processes && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = *run.done.lock().unwrap();
    let mut violations = Vec::new();
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

    // What is left once every lease has run out.
    let observer = lock_client(&url).await.expect("connect after the run");
    let server = Arc::try_unwrap(run.server)
        .ok()
        .expect("the schedule is over");
    let server = server.into_inner().unwrap();
    violations.extend(settle(&observer, &server, &workload, Duration::from_secs(30)).await);
    violations.extend(lost_updates(&server, &workload));
    observer.shutdown().await;

    let mut totals = std::mem::take(&mut *run.totals.lock().unwrap());
    violations.extend(totals.token_violations());
    violations.extend(std::mem::take(&mut totals.violations));
    print_report(&mut totals, &injected, &violations, elapsed);
    violations.len()
}

fn print_report(
    totals: &mut Totals,
    injected: &BTreeMap<&str, u64>,
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
    println!("invariant violations  {}", violations.len());
    for violation in violations {
        println!("  {violation}");
    }
}
