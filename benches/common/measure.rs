//! What the server and the process report: `INFO commandstats`, `INFO cpu`, `/proc` CPU, memory and context switches; the cost of a workload per operation; waits on server state.

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use fred::interfaces::{ClientLike, PubsubInterface};
use fred::types::InfoKind;
use tokio::runtime::Runtime;

use super::*;

/// EVALSHA calls the server has counted so far.
pub async fn evalsha_calls(bare: &Bare) -> u64 {
    let info: String = bare.redis.info(Some(InfoKind::CommandStats)).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Waits until the server has counted at least `n` EVALSHA calls.
pub async fn await_evalsha_calls(bare: &Bare, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while evalsha_calls(bare).await < n {
        assert!(Instant::now() < deadline, "never {n} EVALSHA calls");
        tokio::task::yield_now().await;
    }
}

/// Waits until `channel` has `n` subscribers on the server.
pub async fn await_subscribers(bare: &Bare, channel: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, count): (String, i64) = bare.redis.pubsub_numsub(channel).await.unwrap();
        if count == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{channel}: never {n} subscribers"
        );
        tokio::task::yield_now().await;
    }
}

/// `INFO commandstats`: calls per command since the last `CONFIG RESETSTAT`.
pub struct CommandStats(pub Vec<(String, u64)>);

impl CommandStats {
    pub fn reset(server: &RedisServer) {
        assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    }

    pub fn read(server: &RedisServer) -> CommandStats {
        let info = server.command(&["INFO", "commandstats"]);
        let mut stats: Vec<(String, u64)> = info
            .lines()
            .filter_map(|line| {
                let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.trim().parse().ok()?))
            })
            .filter(|(name, _)| !Self::ours(name))
            .collect();
        stats.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        CommandStats(stats)
    }

    /// The commands this bench sends to read and reset the statistics.
    fn ours(name: &str) -> bool {
        name == "info" || name.starts_with("config")
    }

    pub fn calls(&self, name: &str) -> u64 {
        (self.0.iter().find(|(n, _)| n == name)).map_or(0, |(_, calls)| *calls)
    }

    /// Every command counted (Redis 7 counts commands run by scripts too).
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, calls)| calls).sum()
    }

    /// The commands that clients sent: everything but those only the scripts of `lua/` run.
    pub fn sent(&self) -> u64 {
        let scripted = script_commands();
        (self.0.iter())
            .filter(|(name, _)| !scripted.contains(name.as_str()))
            .map(|(_, calls)| calls)
            .sum()
    }

    /// `name=calls` of every command, most called first.
    pub fn breakdown(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(n, c)| format!("{n}={c}")).collect();
        parts.join(" ")
    }
}

/// The Redis commands the scripts of `lua/` call (`redis.call('name'`), plus the publish
/// commands they call by variable. The crate sends none of them directly on the paths the
/// benches measure (only EVALSHA, UNLINK of latches, (UN)SUBSCRIBE and PING).
pub fn script_commands() -> HashSet<String> {
    let dir = lua::repository_root().join("lua");
    let mut names: HashSet<String> = ["publish", "spublish"].map(String::from).into();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for call in text.split("redis.call(").skip(1) {
            let call = call.trim_start();
            if let Some(quoted) = call.strip_prefix('\'').or_else(|| call.strip_prefix('"')) {
                let name: String = quoted
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name.to_ascii_lowercase());
            }
        }
    }
    names
}

/// The resident set size of this process (`VmRSS` of `/proc/self/status`), in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// CPU time of this process: (sum of every live thread's run time from
/// `/proc/self/task/*/schedstat`, in ns; utime + stime of `/proc/self/stat`, in clock ticks
/// of 10 ms, exited threads included).
pub fn cpu_time() -> (Duration, Duration) {
    let mut ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let path = task.path().join("schedstat");
            if let Ok(text) = std::fs::read_to_string(path) {
                ns += text
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    (Duration::from_nanos(ns), Duration::from_millis(ticks * 10))
}

/// Context switches of this process's live threads so far (`/proc/self/task/*/status`).
pub fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut switches = 0;
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(value) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                switches += value.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    switches
}

/// CPU time `server` has used so far (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`).
pub fn redis_cpu(server: &RedisServer) -> Duration {
    let info = server.command(&["INFO", "cpu"]);
    let seconds: f64 = (info.lines())
        .filter_map(|line| {
            let value = line
                .strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))?;
            value.trim().parse::<f64>().ok()
        })
        .sum();
    Duration::from_secs_f64(seconds)
}

/// How many times `server` has read from its clients' sockets so far
/// (`total_reads_processed` of `INFO stats`): the fewer per command, the more each read
/// carried (a client that pipelines well).
pub fn redis_reads(server: &RedisServer) -> u64 {
    let info = server.command(&["INFO", "stats"]);
    (info.lines())
        .find_map(|line| line.strip_prefix("total_reads_processed:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// What one run of a workload cost, per operation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub wall: Duration,
    /// CPU of this process (every thread, by schedstat).
    pub client_cpu: Duration,
    /// CPU of the redis-server.
    pub redis_cpu: Duration,
    pub allocations: f64,
    /// Context switches of this process's threads (voluntary and not).
    pub switches: f64,
    /// The server's reads from client sockets.
    pub reads: f64,
}

/// Runs `work` (`ops` operations) and measures its [`Cost`] per operation.
pub fn cost_of<F: Future<Output = Duration>>(
    rt: &Runtime,
    server: &RedisServer,
    ops: u64,
    work: F,
) -> Cost {
    let (redis0, (cpu0, _), allocs0) = (redis_cpu(server), cpu_time(), allocations());
    let (switches0, reads0) = (context_switches(), redis_reads(server));
    let wall = rt.block_on(work);
    let (cpu1, _) = cpu_time();
    let (allocs1, switches1) = (allocations(), context_switches());
    let (redis1, reads1) = (redis_cpu(server), redis_reads(server));
    let n = ops as u32;
    Cost {
        wall: wall / n,
        client_cpu: (cpu1 - cpu0) / n,
        redis_cpu: (redis1 - redis0) / n,
        allocations: (allocs1 - allocs0) as f64 / ops as f64,
        switches: switches1.saturating_sub(switches0) as f64 / ops as f64,
        reads: reads1.saturating_sub(reads0) as f64 / ops as f64,
    }
}

/// The median of each field over `costs`.
pub fn median_cost(costs: &[Cost]) -> Cost {
    let median = |f: &dyn Fn(&Cost) -> f64| {
        let mut values: Vec<f64> = costs.iter().map(f).collect();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap());
        values[values.len() / 2]
    };
    Cost {
        wall: Duration::from_secs_f64(median(&|c| c.wall.as_secs_f64())),
        client_cpu: Duration::from_secs_f64(median(&|c| c.client_cpu.as_secs_f64())),
        redis_cpu: Duration::from_secs_f64(median(&|c| c.redis_cpu.as_secs_f64())),
        allocations: median(&|c| c.allocations),
        switches: median(&|c| c.switches),
        reads: median(&|c| c.reads),
    }
}

/// Polls the calls of `command` every 10 ms until `bursts` bursts of calls have started and
/// ended (no new call for 250 ms). Returns the calls counted at the end and each burst's
/// length (first call seen to last).
pub fn bursts(
    server: &RedisServer,
    command: &str,
    bursts: usize,
    limit: Duration,
) -> (u64, Vec<Duration>) {
    const QUIET: Duration = Duration::from_millis(250);
    let deadline = Instant::now() + limit;
    let mut last = CommandStats::read(server).calls(command);
    let mut last_change = Instant::now();
    let mut seen: Vec<(Instant, Instant)> = Vec::new();
    let mut in_burst = false;
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let now = Instant::now();
        let calls = CommandStats::read(server).calls(command);
        if calls != last {
            if !in_burst {
                seen.push((now, now));
                in_burst = true;
            }
            seen.last_mut().unwrap().1 = now;
            last = calls;
            last_change = now;
        } else if in_burst && now - last_change >= QUIET {
            in_burst = false;
            if seen.len() == bursts {
                return (calls, seen.iter().map(|(a, b)| *b - *a).collect());
            }
        }
        assert!(
            now < deadline,
            "fewer than {bursts} bursts of {command} within {limit:?}"
        );
    }
}

/// Waits until no `command` was counted for 250 ms (the latch task's UNLINKs after a wave of
/// releases, for example).
pub fn await_quiet(server: &RedisServer, command: &str) {
    let mut last = CommandStats::read(server).calls(command);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(250) {
        std::thread::sleep(Duration::from_millis(10));
        let calls = CommandStats::read(server).calls(command);
        if calls != last {
            (last, since) = (calls, Instant::now());
        }
    }
}
