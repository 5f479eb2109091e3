//! `watchdog_10k`: renewal scripts, CPU and memory of a client holding 10,000 locks.

use std::time::{Duration, Instant};

use redisson_lock::{LockClient, LockGuard};
use tokio::runtime::Runtime;

use crate::common::*;

/// CPU of this process over `window` of doing nothing on the bench's side; prints it and
/// returns the share of one core by schedstat, in %.
fn cpu_share(label: &str, window: Duration) -> f64 {
    let (cpu0, ticks0) = cpu_time();
    let start = Instant::now();
    std::thread::sleep(window);
    let (cpu1, ticks1) = cpu_time();
    let wall = start.elapsed();
    let share = (cpu1 - cpu0).as_secs_f64() / wall.as_secs_f64() * 100.0;
    println!(
        "watchdog_10k/{label}: CPU of the process over {:.2} s: {:.1} ms = {share:.3}% of one \
         core by schedstat ({:.0} ms by utime+stime ticks)",
        wall.as_secs_f64(),
        millis(cpu1 - cpu0),
        millis(ticks1 - ticks0),
    );
    share
}

/// Prints the renewal scripts per period and the process's CPU while `client` holds
/// `holds` locks and does nothing else.
fn renewal_figures(
    server: &RedisServer,
    client: &LockClient,
    label: &str,
    holds: usize,
    period: Duration,
) {
    // Start at the end of a renewal round, so that the count covers whole rounds.
    bursts(server, "evalsha", 1, period * 4);
    CommandStats::reset(server);
    let (calls, lengths) = bursts(server, "evalsha", 2, period * 6);
    let stats = CommandStats::read(server);
    let per_period = calls as f64 / 2.0;
    let per_100 = per_period / (holds as f64 / 100.0);
    let lengths: Vec<String> = (lengths.iter())
        .map(|b| format!("{:.0} ms", millis(*b)))
        .collect();
    println!(
        "watchdog_10k/{label}: {holds} holds; renewal scripts over 2 renewal rounds: {calls} \
         = {per_period:.0} per period = {per_100:.2} per 100 locks per period (target ≤ 1: \
         {}); rounds lasted {} (first call to last seen, 10 ms polling)",
        verdict(per_100 <= 1.0),
        lengths.join(", ")
    );
    println!(
        "watchdog_10k/{label}: commands counted meanwhile: {}",
        stats.breakdown()
    );
    // CPU while holding, with nothing else going on (no polling either).
    let share = cpu_share(&format!("{label}, holding, 3 renewal periods"), period * 3);
    // A round costs the same whatever the period: scale to the default 10 s period
    // (watchdog_timeout 30 s), which is what a deployment runs with.
    let default_period = Duration::from_secs(10);
    let at_default = share * period.as_secs_f64() / default_period.as_secs_f64();
    println!(
        "watchdog_10k/{label}: CPU while holding {holds} locks: {share:.3}% of one core with a \
         {:.0} s period; {at_default:.3}% at the default 10 s period (watchdog_timeout 30 s) \
         (target well under 1%, read as ≤ 0.5%: {} at the default period)",
        period.as_secs_f64(),
        verdict(at_default <= 0.5)
    );
    assert_eq!(client.renewed_holds(), holds);
}

pub fn watchdog_10k(rt: &Runtime, server: &RedisServer, args: &Args) {
    if !args.runs("watchdog_10k") {
        return;
    }
    print_load("before watchdog_10k");
    let holds = if args.full { 10_000 } else { 300 };
    let timeout = Duration::from_secs(3);
    let period = timeout / 3;
    let client = rt.block_on(async {
        let builder = LockClient::builder().url(&server.url());
        builder.watchdog_timeout(timeout).build().await.unwrap()
    });

    // Warm up the runtime, the connection and the allocator's arenas on other locks.
    rt.block_on(async {
        let locks: Vec<_> = (0..TASKS)
            .map(|i| {
                (
                    client.lock(&format!("bench:wd:warm:{i}")).unwrap(),
                    client.new_owner(),
                )
            })
            .collect();
        ours_parallel(&locks, 6_400).await;
        let warm = take_holds(&client, "bench:wd:warm:hold:", holds / 10).await;
        release_holds(warm).await;
    });
    await_quiet(server, "unlink");
    cpu_share("no holds (idle floor)", period);
    let (rss0, heap0) = (rss_bytes(), live_heap());
    let guards = rt.block_on(take_holds(&client, "bench:wd:", holds));
    let (rss_taken, heap_taken) = (rss_bytes(), live_heap());
    println!(
        "watchdog_10k: memory right after taking {holds} holds (renewal rounds may be under \
         way): VmRSS {:.1} → {:.1} MiB = {:.0} bytes per lock; live heap +{:.2} MiB",
        rss0 as f64 / 1048576.0,
        rss_taken as f64 / 1048576.0,
        (rss_taken as f64 - rss0 as f64) / holds as f64,
        (heap_taken - heap0) as f64 / 1048576.0,
    );
    // Read at the end of a renewal round, not amid one (a round allocates while it runs).
    bursts(server, "evalsha", 1, period * 4);
    let (rss1, heap1) = (rss_bytes(), live_heap());
    assert_eq!(client.renewed_holds(), holds);
    let rss_per = (rss1 as f64 - rss0 as f64) / holds as f64;
    let heap_per = (heap1 - heap0) as f64 / holds as f64;
    println!(
        "watchdog_10k: memory for {holds} held locks at the end of a renewal round (guards \
         kept in a Vec, {} bytes each): \
         VmRSS {:.1} → {:.1} MiB = {rss_per:.0} bytes per lock; live heap +{:.2} MiB = \
         {heap_per:.0} bytes per lock (target ≤ 1024: {} by VmRSS, {} by live heap)",
        std::mem::size_of::<LockGuard>(),
        rss0 as f64 / 1048576.0,
        rss1 as f64 / 1048576.0,
        (heap1 - heap0) as f64 / 1048576.0,
        verdict(rss_per <= 1024.0),
        verdict(heap_per <= 1024.0)
    );
    renewal_figures(server, &client, "distinct_names", holds, period);
    rt.block_on(release_holds(guards));
    await_quiet(server, "unlink");
    let (rss2, heap2) = (rss_bytes(), live_heap());
    println!(
        "watchdog_10k: after releasing them: VmRSS {:.1} MiB, live heap {:+.2} MiB over the \
         start (kept by the client after the holds are gone: capacity of maps and buffers)",
        rss2 as f64 / 1048576.0,
        (heap2 - heap0) as f64 / 1048576.0,
    );

    // The same holds with names that share one hash tag, so one cluster slot: context for
    // the batching of renewals, which groups holds by slot.
    let guards = rt.block_on(take_holds(&client, "{bench:wd}:", holds));
    renewal_figures(server, &client, "one_hash_tag", holds, period);
    rt.block_on(release_holds(guards));
    await_quiet(server, "unlink");
    rt.block_on(client.shutdown());
    print_load("after watchdog_10k");
}
