//! The scale figures of redisson-lock alone: many holds under the watchdog, many waiters on
//! one subscriber connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redisson_lock::LockClient;
use tokio::runtime::Runtime;

use crate::common::{
    await_quiet, bursts, cpu_time, live_heap, micros, millis, release_holds, rss_bytes, take_holds,
    CommandStats, RedisServer,
};
use crate::{quantile, write_csv, Run, Shared};

/// The default watchdog period (watchdog timeout 30 s), to which CPU figures are scaled.
const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// CPU of this process over `window` of doing nothing here, as a share of one core (%).
fn cpu_share(window: Duration) -> f64 {
    let (before, _) = cpu_time();
    let start = Instant::now();
    std::thread::sleep(window);
    let (after, _) = cpu_time();
    (after - before).as_secs_f64() / start.elapsed().as_secs_f64() * 100.0
}

pub fn holds(rt: &Runtime, run: &Run) {
    let timeout = Duration::from_secs(3);
    let period = timeout / 3;
    let client = rt.block_on(async {
        let builder = LockClient::builder().url(&run.url);
        builder.watchdog_timeout(timeout).build().await.unwrap()
    });
    let idle = cpu_share(period);
    println!("holds: idle process CPU {idle:.3}% of a core");
    let mut rows = Vec::new();
    for n in run.pick(vec![10_000, 100_000], vec![300]) {
        let prefix = format!("peers:holds:{n}:");
        let (rss0, heap0) = (rss_bytes(), live_heap());
        let start = Instant::now();
        let guards = rt.block_on(take_holds(&client, &prefix, n));
        let took = start.elapsed();
        // Read at the end of a renewal round, not amid one.
        bursts(&run.server, "evalsha", 1, period * 4);
        let (rss1, heap1) = (rss_bytes(), live_heap());
        let heap_per = (heap1 - heap0) as f64 / n as f64;
        let rss_per = (rss1 as f64 - rss0 as f64) / n as f64;
        CommandStats::reset(&run.server);
        let (calls, lengths) = bursts(&run.server, "evalsha", 2, period * 8);
        let per_100 = calls as f64 / 2.0 / (n as f64 / 100.0);
        let round = lengths.iter().max().copied().unwrap_or_default();
        let share = cpu_share(period * 3);
        let at_default = share * period.as_secs_f64() / DEFAULT_PERIOD.as_secs_f64();
        assert_eq!(client.renewed_holds(), n);
        println!(
            "holds/{n}: taken in {:.2} s; {per_100:.2} renewal scripts per 100 holds per \
             period (rounds of up to {:.0} ms); process CPU {share:.2}% of a core with a 1 s \
             period = {at_default:.3}% at the default 10 s period; live heap {heap_per:.0} \
             bytes per hold (guards included), resident memory {rss_per:.0} bytes per hold",
            took.as_secs_f64(),
            millis(round),
        );
        rows.push(format!(
            "{n},{per_100:.2},{:.0},{at_default:.3},{heap_per:.0},{rss_per:.0}",
            millis(round)
        ));
        rt.block_on(release_holds(guards));
        await_quiet(&run.server, "unlink");
    }
    write_csv(
        "holds",
        "holds,scripts_per_100_per_period,round_ms,cpu_percent_at_default_period,heap_bytes_per_hold,rss_bytes_per_hold",
        &rows,
    );
    rt.block_on(client.shutdown());
}

/// Connections of the server that are subscribed to something, each with its count.
fn subscribed_connections(server: &RedisServer) -> Vec<u64> {
    let list = server.command(&["CLIENT", "LIST"]);
    (list.lines())
        .filter_map(|line| {
            let sub = line.split(' ').find_map(|f| f.strip_prefix("sub="))?;
            sub.parse::<u64>().ok().filter(|n| *n > 0)
        })
        .collect()
}

pub fn waiters(rt: &Runtime, run: &Run) {
    let n = run.pick(10_000, 200);
    let (holder, waiting) = rt.block_on(async {
        let holder = LockClient::connect(&run.url).await.unwrap();
        (holder, LockClient::connect(&run.url).await.unwrap())
    });
    let prefix = "peers:waiters:";
    let guards = rt.block_on(take_holds(&holder, prefix, n));
    let (rss0, heap0) = (rss_bytes(), live_heap());
    let acquired: Shared<Instant> = Default::default();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let lock = waiting.lock(&format!("{prefix}{i}")).unwrap();
            let (owner, acquired) = (waiting.new_owner(), acquired.clone());
            rt.spawn(async move {
                let guard = lock.lock(&owner).await.unwrap();
                acquired.lock().unwrap().push(Instant::now());
                guard.unlock().await.unwrap();
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while waiting.subscribed_channels() < n || subscribed_connections(&run.server) != [n as u64] {
        assert!(
            Instant::now() < deadline,
            "the waiters never all subscribed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every waiter made its attempt after subscribing.
    await_quiet(&run.server, "evalsha");
    let (rss1, heap1) = (rss_bytes(), live_heap());
    let heap_per = (heap1 - heap0) as f64 / n as f64;
    let rss_per = (rss1 as f64 - rss0 as f64) / n as f64;
    CommandStats::reset(&run.server);
    let start = Instant::now();
    rt.block_on(release_holds(guards));
    rt.block_on(async {
        for task in tasks {
            task.await.unwrap();
        }
    });
    let all = start.elapsed();
    let stats = CommandStats::read(&run.server);
    let mut after: Vec<Duration> = (acquired.lock().unwrap().iter())
        .map(|t| *t - start)
        .collect();
    after.sort();
    let evalsha_per = stats.calls("evalsha") as f64 / n as f64;
    println!(
        "waiters/{n}: one subscriber connection with {n} channels; live heap {heap_per:.0} \
         bytes per waiter, resident memory {rss_per:.0} bytes per waiter; after the holder \
         released all: every waiter held its lock within {:.2} s (p50 {:.1} ms, p99 {:.1} ms \
         after the releases began); {evalsha_per:.2} EVALSHA per lock (the holder's release, \
         the waiter's acquire and release)",
        all.as_secs_f64(),
        micros(quantile(&after, 0.5)) / 1e3,
        micros(quantile(&after, 0.99)) / 1e3,
    );
    write_csv(
        "waiters",
        "waiters,subscriber_connections,heap_bytes_per_waiter,rss_bytes_per_waiter,all_held_s,p50_ms,p99_ms,evalsha_per_lock",
        &[format!(
            "{n},1,{heap_per:.0},{rss_per:.0},{:.3},{:.1},{:.1},{evalsha_per:.2}",
            all.as_secs_f64(),
            micros(quantile(&after, 0.5)) / 1e3,
            micros(quantile(&after, 0.99)) / 1e3,
        )],
    );
    rt.block_on(async {
        holder.shutdown().await;
        waiting.shutdown().await;
    });
    let _ = Arc::strong_count(&acquired);
}
