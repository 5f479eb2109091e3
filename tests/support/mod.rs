//! Helpers shared by the integration tests: private servers and clients, what the tests ask
//! the server, and the Java side of the wire.
#![allow(dead_code)]

pub mod fixtures;
pub mod listener;
pub mod lua;
pub mod process;
pub mod proxy;
pub mod resource;
pub mod server;
pub mod synchronizers;
pub mod tally;
pub mod tls;
pub mod topology;
pub mod workload;

use std::future::Future;
use std::time::Duration;

#[allow(unused_imports)] // Not every test binary uses them.
pub use fixtures::*;
use fred::prelude::KeysInterface;
#[allow(unused_imports)] // Not every test binary listens.
pub use listener::Listener;
#[allow(unused_imports)] // Only tests that run a script directly.
pub use lua::lua;
#[allow(unused_imports)] // Not every test binary runs child processes.
pub use process::TestProcess;
#[allow(unused_imports)] // Only the fault suite injects network faults.
pub use proxy::{FaultProxy, Net};
use redisson_lock::{Lease, LockClient, LockClientBuilder, LockGuard, LockOwner};
pub use server::RedisServer;
use tokio::task::JoinHandle;

/// One second, for limits written as multiples of it.
pub const SECOND: Duration = Duration::from_secs(1);

/// How long a woken waiter may take on a loaded machine; tests keep every other way in 30 s away.
pub const WAKE: Duration = Duration::from_secs(5);

macro_rules! java_client {
    () => {
        "8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13"
    };
}

/// A Java `RedissonClient`'s id; `<JAVA_CLIENT>:<thread id>` is a Java owner's hash field.
pub const JAVA_CLIENT: &str = java_client!();

/// Thread 57 of [`JAVA_CLIENT`], the Java owner the tests write holds for.
pub const JAVA_OWNER: &str = concat!(java_client!(), ":57");

/// The hash field of Java thread `thread` of [`JAVA_CLIENT`].
pub fn java_owner(thread: u64) -> String {
    format!("{JAVA_CLIENT}:{thread}")
}

/// Java thread `thread` of [`JAVA_CLIENT`] as an owner, to act for it.
pub fn java_lock_owner(thread: u64) -> LockOwner {
    LockOwner::from_parts(JAVA_CLIENT.parse().unwrap(), thread)
}

/// A client of `server` with a short watchdog, so that lease tests take seconds.
pub async fn client(server: &RedisServer) -> LockClient {
    client_with(server, |b| b).await
}

/// A client of `server`, configured further by `configure`.
pub async fn client_with(
    server: &RedisServer,
    configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    let builder = LockClient::builder()
        .url(&server.url())
        .watchdog_timeout(Duration::from_millis(900))
        .command_timeout(Duration::from_secs(2));
    configure(builder)
        .build()
        .await
        .expect("connect to the test server")
}

/// A client built from a fred client of `server` that has no reconnect policy, as a user may
/// give one: the subscriber the lock client makes for it has none either, so fred ends the
/// subscriber's connection task when its connection drops.
pub async fn client_without_reconnect_policy(server: &RedisServer) -> LockClient {
    let config = fred::prelude::Config::from_url(&server.url()).unwrap();
    let redis = fred::prelude::Builder::from_config(config).build().unwrap();
    fred::prelude::ClientLike::init(&redis).await.unwrap();
    LockClient::builder()
        .clients(redis, None)
        .build()
        .await
        .expect("connect to the test server")
}

/// A client of the deployment at `url` (a cluster, Sentinels, a replicated master) whose
/// holds outlive the test unless released (30 s watchdog), with time for a topology change
/// (5 s per command), configured further by `configure`.
pub async fn deployment_client(
    url: &str,
    configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    let builder = LockClient::builder()
        .url(url)
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_secs(5));
    configure(builder)
        .build()
        .await
        .expect("connect to the test deployment")
}

/// A client with a 30 s watchdog: holds outlive the test unless released; renewals every 10 s.
pub async fn long_watchdog_client(server: &RedisServer) -> LockClient {
    client_with(server, |b| b.watchdog_timeout(Duration::from_secs(30))).await
}

/// A fixed lease of `ms` milliseconds.
pub fn fixed(ms: u64) -> Lease {
    Lease::fixed(Duration::from_millis(ms)).unwrap()
}

/// A cheap deterministic spread of delays below `max_micros` µs (no RNG dependency needed).
pub fn spread(i: u64, max_micros: u64) -> Duration {
    Duration::from_micros(i.wrapping_mul(2_654_435_761) % max_micros)
}

/// Awaits `future` for `after`, to the microsecond, then drops it: `Err(())`. Tokio's timer
/// counts whole milliseconds, so a `timeout` shorter than one lasts until the next tick
/// whatever it asks for, and on a fast machine a round trip always beats it. This looks at
/// the clock on every poll instead, polling again at once while the time is not up.
pub async fn cut_off<T>(after: Duration, future: impl Future<Output = T>) -> Result<T, ()> {
    let deadline = std::time::Instant::now() + after;
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(cx) {
            return std::task::Poll::Ready(Ok(value));
        }
        if std::time::Instant::now() >= deadline {
            return std::task::Poll::Ready(Err(()));
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}

/// Runs `step` again while it is refused with `NotReplicated`: before a replica is
/// stopped, a confirmation that comes late only means a loaded machine.
pub async fn confirmed<T, F, Fut>(what: &str, mut step: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redisson_lock::Result<T>>,
{
    within(WAKE * 4, what, async {
        loop {
            match step().await {
                Err(redisson_lock::Error::NotReplicated { .. }) => continue,
                outcome => return outcome.unwrap(),
            }
        }
    })
    .await
}

/// Awaits a spawned acquisition for at most [`WAKE`] and releases the hold it took.
pub async fn woken_and_released(what: &str, waiter: JoinHandle<redisson_lock::Result<LockGuard>>) {
    let guard = within(WAKE, what, waiter).await.unwrap().unwrap();
    guard.unlock().await.unwrap();
}

/// Awaits every task, failing the test if they take longer than `limit` together.
pub async fn all_finish<T>(limit: Duration, what: &str, tasks: Vec<JoinHandle<T>>) -> Vec<T> {
    within(limit, what, async {
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    })
    .await
}

/// Polls a cheap query until it holds, for what only Redis's clock makes true (a TTL running out).
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check() {
        if start.elapsed() > limit {
            panic!("{what} did not happen within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Adds one to the counter at `key` by a read-modify-write that loses updates without a lock.
pub async fn racy_increment(client: &LockClient, key: &str) {
    let value: Option<i64> = client.redis().get(key).await.unwrap();
    tokio::task::yield_now().await;
    let _: () = client
        .redis()
        .set(key, value.unwrap_or(0) + 1, None, None, false)
        .await
        .unwrap();
}

/// The keys of `server` but the write records this crate leaves for a while (acquire
/// attempts, releases, count-downs: `redisson_sc_attempt:` and
/// `redisson_countdownlatch_attempt:` keys), sorted; each record must have a TTL.
pub fn keys_but_records(server: &RedisServer) -> Vec<String> {
    let keys = server.command(&["KEYS", "*"]);
    let mut left = Vec::new();
    for key in keys.lines().filter(|key| !key.is_empty()) {
        let record = ["redisson_sc_attempt:", "redisson_countdownlatch_attempt:"];
        if record.iter().any(|prefix| key.starts_with(prefix)) {
            assert!(pttl(server, key) > 0, "the record {key} has no TTL");
        } else {
            left.push(key.to_owned());
        }
    }
    left.sort();
    left
}

/// The key's `PTTL` in ms (-2: no such key, -1: no expiry).
pub fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.command(&["PTTL", key]).parse().unwrap()
}

/// How often `command` (lower case) succeeded since the server started or the last RESETSTAT.
pub fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:");
    let stats = server.command(&["INFO", "commandstats"]);
    let Some(line) = stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
    else {
        return 0;
    };
    // `calls` counts the failed ones too, such as an EVALSHA answered NOSCRIPT.
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .map_or(0, |n| n.parse().unwrap())
    };
    field("calls") - field("failed_calls")
}

/// How many lock scripts (all sent by `EVALSHA`) the server ran without an error.
pub fn evalsha_calls(server: &RedisServer) -> u64 {
    command_calls(server, "evalsha")
}

/// Makes the server's slow log keep every command from now on (see [`script_key_counts`]).
pub fn log_every_command(server: &RedisServer) {
    server.command(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    server.command(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    server.command(&["SLOWLOG", "RESET"]);
}

/// How many keys each script run since [`log_every_command`] was given, from the slow log.
pub fn script_key_counts(server: &RedisServer) -> Vec<usize> {
    let log = server.command(&["SLOWLOG", "GET", "-1"]);
    let lines: Vec<&str> = log.lines().collect();
    // Each entry lists the command's arguments: EVALSHA, the SHA, the number of keys, ...
    (lines.windows(3))
        .filter(|entry| entry[0].eq_ignore_ascii_case("evalsha"))
        .map(|entry| entry[2].parse().unwrap())
        .collect()
}

/// The unlock channel of the plain, fenced and spin locks named `name` (without a hash tag).
pub fn lock_channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// The fair lock `name`'s queue key.
pub fn queue_key(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

/// The fair lock `name`'s queue, head first.
pub fn queued(server: &RedisServer, name: &str) -> Vec<String> {
    server
        .command(&["LRANGE", &queue_key(name), "0", "-1"])
        .lines()
        .filter(|line| !line.is_empty())
        .map(String::from)
        .collect()
}

/// The wall clock in epoch ms, as the fair scripts take it.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// How many connections the server counts as subscribed to `channel` (`PUBSUB NUMSUB`).
pub fn subscribers(server: &RedisServer, channel: &str) -> u64 {
    let reply = server.command(&["PUBSUB", "NUMSUB", channel]);
    reply.lines().last().unwrap().parse().unwrap()
}

/// Whether the server has no subscribed channel at all.
pub fn no_channels(server: &RedisServer) -> bool {
    server.command(&["PUBSUB", "CHANNELS"]).is_empty()
}

/// Waits until the server confirms a subscription to `channel`.
pub async fn subscribed(server: &RedisServer, channel: &str) {
    eventually(
        Duration::from_secs(10),
        &format!("a subscriber of {channel}"),
        || subscribers(server, channel) >= 1,
    )
    .await;
}

/// Waits until the server has run `calls` scripts in all (see [`evalsha_calls`]).
pub async fn scripts_reach(server: &RedisServer, calls: u64) {
    eventually(Duration::from_secs(10), &format!("{calls} scripts"), || {
        evalsha_calls(server) >= calls
    })
    .await;
}

/// Waits until waiters on `channel` wait: subscribed, and `calls` scripts run.
pub async fn waiting(server: &RedisServer, channel: &str, calls: u64) {
    // `calls` is an `evalsha_calls` reading from before the waiters started plus, for each
    // waiter, two where its client did not listen to the channel yet (its first attempt,
    // and its attempt after subscribing, made once it is registered for wake-ups) and one
    // where it did and no message came since (then it waits right after its first attempt;
    // a release before it is registered makes it look again). Exact only while no watchdog
    // renews anything meanwhile.
    subscribed(server, channel).await;
    scripts_reach(server, calls).await;
}

/// Runs this binary's ignored test `test` in a child process, `var` set to the server's URL.
pub fn spawn_test_process(test: &str, var: &str, server: &RedisServer) -> std::process::Child {
    process::test_process_command(test)
        .env(var, server.url())
        .spawn()
        .unwrap()
}

/// For each kind that waits by message (plain, fenced, fair, read-write): `waiter` waits on a
/// lock `holder` holds, and wakes on the release. `subscribed(channel)` returns once the
/// deployment reports a subscriber of `channel`. Names start with `prefix`.
pub async fn every_kind_wakes<F, Fut>(
    holder: &LockClient,
    waiter: &LockClient,
    prefix: &str,
    subscribed: F,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let (me, other) = (holder.new_owner(), waiter.new_owner());
    let name = |kind: &str| format!("{prefix}-{kind}");

    let plain = name("plain");
    let guard = holder.lock(&plain).unwrap().lock(&me).await.unwrap();
    let waiting = tokio::spawn(waiter.lock(&plain).unwrap().lock(&other));
    subscribed(lock_channel(&plain)).await;
    guard.unlock().await.unwrap();
    woken_and_released("plain waiter", waiting).await;

    let fenced = name("fenced");
    let guard = holder
        .fenced_lock(&fenced)
        .unwrap()
        .lock(&me)
        .await
        .unwrap();
    let waiting = tokio::spawn(waiter.fenced_lock(&fenced).unwrap().lock(&other));
    subscribed(lock_channel(&fenced)).await;
    let token = guard.token();
    guard.unlock().await.unwrap();
    let woken = within(WAKE, "fenced waiter", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(woken.token() > token);
    woken.unlock().await.unwrap();

    let fair = name("fair");
    let guard = holder.fair_lock(&fair).unwrap().lock(&me).await.unwrap();
    let waiting = tokio::spawn(waiter.fair_lock(&fair).unwrap().lock(&other));
    // A fair waiter listens on its own channel.
    subscribed(format!(
        "{}:{}:{}",
        lock_channel(&fair),
        other.client_id(),
        other.id()
    ))
    .await;
    guard.unlock().await.unwrap();
    woken_and_released("fair waiter", waiting).await;

    let rw = name("rw");
    let writing = holder
        .read_write_lock(&rw)
        .unwrap()
        .write(&me)
        .await
        .unwrap();
    let reader = waiter.read_write_lock(&rw).unwrap();
    let reading = tokio::spawn(async move { reader.read(&other).await });
    subscribed(format!("redisson_rwlock:{{{rw}}}")).await;
    writing.unlock().await.unwrap();
    let read = within(WAKE, "reader", reading).await.unwrap().unwrap();
    read.unlock().await.unwrap();
}

/// `tasks` tasks in each client add 1, `rounds` times each, to a counter next to the lock
/// `name` by a read-modify-write that loses updates unless the lock excludes; returns the
/// counter.
pub async fn count_under_lock(
    clients: &[LockClient],
    name: &str,
    tasks: usize,
    rounds: usize,
) -> i64 {
    use fred::interfaces::KeysInterface;
    let counter = format!("{{{name}}}:counter");
    let redis = clients[0].redis().clone();
    let mut running = Vec::new();
    for client in clients {
        for _ in 0..tasks {
            let (lock, redis) = (client.lock(name).unwrap(), redis.clone());
            let (me, counter) = (client.new_owner(), counter.clone());
            running.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.lock(&me).await.unwrap();
                    let value: Option<i64> = redis.get(&counter).await.unwrap();
                    tokio::task::yield_now().await;
                    let _: () = redis
                        .set(&counter, value.unwrap_or(0) + 1, None, None, false)
                        .await
                        .unwrap();
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    for task in running {
        within(60 * SECOND, "the counting tasks", task)
            .await
            .unwrap();
    }
    redis.get(&counter).await.unwrap()
}

/// Pauses `replica` (`DEBUG SLEEP` for `seconds`) and returns once `master` sees it silent
/// for 2 s or more (a replica acknowledges every second); join the handle to wait it out.
pub async fn paused_replica(
    master: &RedisServer,
    replica: &RedisServer,
    seconds: u64,
) -> std::thread::JoinHandle<std::io::Result<String>> {
    let paused = replica.command_on_thread(&["DEBUG", "SLEEP", &seconds.to_string()]);
    eventually(Duration::from_secs(5), "the replica paused", || {
        let info = master.command(&["INFO", "replication"]);
        let lag = info.lines().find_map(|l| l.split(",lag=").nth(1));
        // Valkey lists more fields after the lag.
        let lag = lag.and_then(|lag| lag.split(',').next()?.trim().parse::<u64>().ok());
        lag.is_some_and(|lag| lag >= 2)
    })
    .await;
    paused
}
