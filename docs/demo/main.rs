//! Four tasks on two `LockClient`s take turns on one Redisson lock.
//!
//! `cargo run --example demo` starts a private redis-server (installing it when missing);
//! `REDIS_URL=redis://host:port cargo run --example demo` uses yours instead.

#[path = "../../tests/support/server.rs"]
mod server;

use std::fmt::Display;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::KeysInterface;
use redisson_lock::{LockClient, LockOwner, Result};

const LOCK: &str = "demo:lock";
const COUNTER: &str = "demo:counter";
const ROUNDS: i64 = 2;

/// The demo's clock and the handoff bookkeeping, shared by every task.
#[derive(Default)]
struct Shared {
    start: Option<Instant>,
    last_release: Mutex<Option<Instant>>,
    handoffs: Mutex<Vec<Duration>>,
}

impl Shared {
    /// One event line: time since start, task, its hold count, what happened.
    fn log(&self, who: &str, holds: u64, what: impl Display) {
        let t = ms(self.start.unwrap().elapsed());
        println!("{t:>7.1} ms  {who:<2}  holds={holds}  {what}");
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One task: ROUNDS times take the lock, re-enter it, bump the counter, release.
async fn task(who: &str, client: LockClient, owner: LockOwner, shared: Arc<Shared>) -> Result<()> {
    let (lock, redis) = (client.lock(LOCK)?, client.redis());
    for _ in 0..ROUNDS {
        shared.log(who, 0, "wants the lock");
        let asked = Instant::now();
        let outer = lock.lock(&owner).await?;
        let got = Instant::now();
        let how = match *shared.last_release.lock().unwrap() {
            // It was already waiting when the previous holder released: a handoff.
            Some(released) if released > asked => {
                shared.handoffs.lock().unwrap().push(got - released);
                let after = ms(got - released);
                format!("woken by the unlock message {after:.2} ms after the release")
            }
            _ => "it was free".to_string(),
        };
        let (waited, holds) = (ms(got - asked), lock.hold_count(&owner).await?);
        shared.log(who, holds, format!("ACQUIRED after {waited:.1} ms, {how}"));

        let inner = lock.lock(&owner).await?; // the same owner re-enters at once
        let holds = lock.hold_count(&owner).await?;
        shared.log(who, holds, "re-entered (nested lock() by the same owner)");

        // Non-atomic read-modify-write: only the lock keeps the tasks from losing updates.
        let value = redis.get::<Option<i64>, _>(COUNTER).await?.unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(5)).await;
        redis
            .set::<(), _, _>(COUNTER, value + 1, None, None, false)
            .await?;
        let work = format!("work: GET counter -> {value}, SET {}", value + 1);
        shared.log(who, holds, work);

        inner.unlock().await?;
        let holds = lock.hold_count(&owner).await?;
        shared.log(who, holds, "inner unlock, still held");
        *shared.last_release.lock().unwrap() = Some(Instant::now());
        outer.unlock().await?;
        shared.log(who, 0, "RELEASED: lock freed, unlock message published");
        tokio::time::sleep(Duration::from_millis(3)).await; // other work, outside the lock
    }
    Ok(())
}

async fn run(url: &str) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let a = LockClient::connect(url).await?;
    let b = LockClient::connect(url).await?;
    a.redis().del::<(), _>(COUNTER).await?;
    println!("client A = {}\nclient B = {}", a.id(), b.id());

    println!("\n== 4 tasks on 2 clients, {ROUNDS} rounds each, one lock {LOCK:?} ==");
    let mut owners = Vec::new();
    for (who, client) in [("A1", &a), ("B1", &b), ("A2", &a), ("B2", &b)] {
        let owner = client.new_owner();
        println!("task {who} = owner {owner}");
        owners.push((who, client.clone(), owner));
    }
    let start = Some(Instant::now());
    let shared = Arc::new(Shared {
        start,
        ..Shared::default()
    });
    let tasks: Vec<_> = (owners.into_iter())
        .map(|(who, client, owner)| tokio::spawn(task(who, client, owner, shared.clone())))
        .collect();
    for task in tasks {
        task.await??;
    }

    println!("\n== try_lock_for gives up while another owner holds the lock ==");
    let held = a.lock(LOCK)?.lock(&a.new_owner()).await?;
    shared.log("A", 1, "holds the lock (watchdog lease)");
    let t = Instant::now();
    let wait = Duration::from_millis(200);
    let attempt = b.lock(LOCK)?.try_lock_for(&b.new_owner(), wait).await?;
    assert!(attempt.is_none(), "B got a lock that A holds");
    let took = ms(t.elapsed());
    let line = format!("try_lock_for({wait:?}) gave up after {took:.1} ms: None");
    shared.log("B", 0, line);
    held.unlock().await?;
    shared.log("A", 0, "released");

    let counter = a.redis().get::<Option<i64>, _>(COUNTER).await?.unwrap_or(0);
    let expected = 4 * ROUNDS;
    let mut handoffs = shared.handoffs.lock().unwrap().clone();
    handoffs.sort();
    println!("\n== summary ==");
    println!("final counter    {counter} (expected {expected})");
    assert_eq!(counter, expected, "the counter lost updates");
    let n = handoffs.len();
    println!("handoffs         {n} of {expected} acquisitions went to a task already waiting");
    if let (Some(median), Some(max)) = (handoffs.get(n / 2), handoffs.last()) {
        let (median, max) = (ms(*median), ms(*max));
        println!("handoff latency  median {median:.2} ms, max {max:.2} ms");
    }
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    // `_server` keeps the private redis-server alive until the end of main.
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("using REDIS_URL={url}");
            (None, url)
        }
        Err(_) => {
            let binary = server::ensure_redis_server();
            let server = server::RedisServer::start();
            let (url, dir) = (server.url(), server.dir().display().to_string());
            let binary = binary.display();
            println!("started a private {binary} at {url} (data in {dir})");
            (Some(server), url)
        }
    };
    tokio::runtime::Runtime::new()?.block_on(run(&url))
}
