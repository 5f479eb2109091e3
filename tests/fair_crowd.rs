//! A fair lock with a long queue (run by hand: `cargo test --test fair_crowd -- --ignored
//! --nocapture`; heavy). Redisson's fair scripts walk the queue, so each costs more as it
//! grows; these tests measure that cost and check that a crowd of short waits leaves
//! nothing behind, however late the server answers.

mod support;

use std::time::{Duration, Instant};

use redisson_lock::{LockClient, LockOwner};
use support::*;

/// How long the server ran the last command (from its slow log, which keeps them all).
fn last_command_micros(server: &RedisServer) -> u64 {
    let log = server.command(&["SLOWLOG", "GET", "1"]);
    // An entry: id, timestamp, duration in µs, the arguments, ...
    log.lines().nth(2).unwrap().parse().unwrap()
}

/// The server's time per fair script with `len` waiters in line, in µs: a newcomer joining
/// at the tail, the head taking the free lock (every deadline moves up), a waiter leaving
/// from the head (every one behind it moves up).
fn script_costs(server: &RedisServer, len: usize) -> [u64; 3] {
    let (acquire, leave) = (lua("fair_acquire"), lua("fair_acquire_failed"));
    let name = format!("cost-{len}");
    let (queue, deadlines) = (
        queue_key(&name),
        format!("redisson_lock_timeout:{{{name}}}"),
    );
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let far = now_ms() + 3_600_000;
    let waiter = |i: usize| format!("{}:{i}", JAVA_CLIENT);
    let fill = |from: usize| {
        server.command(&["DEL", &queue, &deadlines, &name]);
        for i in from..len {
            server.command(&["RPUSH", &queue, &waiter(i)]);
            server.command(&[
                "ZADD",
                &deadlines,
                &(far + i as i64).to_string(),
                &waiter(i),
            ]);
        }
    };
    let now = now_ms().to_string();
    let acquire_as = |owner: &str| {
        let keys = [name.as_str(), &queue, &deadlines];
        let args = ["30000", owner, "60000", &now, "1"];
        server.command(&[&["EVAL", acquire.as_str(), "3"][..], &keys, &args].concat());
        last_command_micros(server)
    };
    // Held by someone, a newcomer joins at the tail.
    fill(0);
    server.command(&["HSET", &name, "holder", "1"]);
    let join = acquire_as("newcomer");
    // Free, the head takes it.
    fill(0);
    let take = acquire_as(&waiter(0));
    // The head leaves.
    fill(0);
    let keys = [queue.as_str(), &deadlines, &name, &channel];
    let args = [waiter(0), "60000".into(), "0".into(), "PUBLISH".into()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    server.command(&[&["EVAL", leave.as_str(), "4"][..], &keys, &args].concat());
    let exit = last_command_micros(server);
    server.command(&["DEL", &queue, &deadlines, &name]);
    [join, take, exit]
}

#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn what_a_fair_script_costs_by_queue_length() {
    let server = RedisServer::start();
    log_every_command(&server);
    println!("waiters | join µs | take µs | leave µs");
    for len in [0, 100, 1_000, 3_000, 10_000] {
        // The median of 5, each on a fresh queue.
        let mut runs: Vec<[u64; 3]> = (0..5).map(|_| script_costs(&server, len)).collect();
        let mut median = |i: usize| {
            runs.sort_by_key(|run| run[i]);
            runs[2][i]
        };
        println!("{len} | {} | {} | {}", median(0), median(1), median(2));
    }
}

/// `WAITERS` (3,000 unless the environment says otherwise) fair waiters with short waits on
/// one held lock, spread over four clients; the lock is released while they wait. Every
/// waiter returns; none that gave up holds the lock or stays in line; a waiter that does not
/// give up is served soon after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "heavy: thousands of waiters saturate the server; run by hand"]
async fn a_crowd_of_short_fair_waits_leaves_nothing_behind() {
    let waiters: usize = std::env::var("WAITERS").map_or(3_000, |n| n.parse().unwrap());
    let server = RedisServer::start();
    let name = "crowd";
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(LockClient::connect(&server.url()).await.unwrap());
    }
    // The holder and a waiter that does not give up, with clients of their own that wait
    // long for answers: the crowd's clients keep the default command timeout (3 s).
    let patient_client = || {
        let builder = LockClient::builder().url(&server.url());
        builder.command_timeout(Duration::from_secs(60)).build()
    };
    let (holding, patient) = (
        patient_client().await.unwrap(),
        patient_client().await.unwrap(),
    );
    let holder = holding
        .fair_lock(name)
        .unwrap()
        .lock(&holding.new_owner())
        .await;
    let holder = holder.unwrap();
    server.command(&["CONFIG", "RESETSTAT"]);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let client = clients[i % clients.len()].clone();
        // Waits of 100 ms to 1.1 s.
        let wait = Duration::from_millis(100) + spread(i as u64, 1_000_000);
        tasks.push(tokio::spawn(async move {
            let lock = client.fair_lock(name).unwrap();
            let asked = Instant::now();
            let got = lock.try_lock_for(&client.new_owner(), wait).await;
            let late = asked.elapsed().saturating_sub(wait);
            // A first attempt that went unanswered is an error (one later is a wait
            // going on): nothing must be left behind either way.
            match got {
                Ok(Some(guard)) => {
                    guard.unlock().await.unwrap();
                    (late, Some(true))
                }
                Ok(None) => (late, Some(false)),
                Err(error) if error.is_retryable() => (late, None),
                Err(error) => panic!("waiter {i}: {error}"),
            }
        }));
    }
    // The waiter that does not give up, in line behind them.
    let patient_owner: LockOwner = patient.new_owner();
    let next = tokio::spawn(patient.fair_lock(name).unwrap().lock(&patient_owner));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    holder.unlock().await.unwrap();

    let outcomes = all_finish(Duration::from_secs(300), "the waiters", tasks).await;
    let returned = started.elapsed();
    let state = |server: &RedisServer| {
        let queue = queued(server, name);
        let head = queue.first().cloned();
        (
            server.command(&["HGETALL", name]),
            pttl(server, name),
            queue.len(),
            head,
        )
    };
    println!("all returned after {returned:?}: {:?}", state(&server));
    let served = within(Duration::from_secs(60), "the patient waiter", next).await;
    println!(
        "the patient waiter served {:?} after the crowd returned",
        started.elapsed() - returned
    );
    let served = served.unwrap().unwrap();
    let waited = released.elapsed();
    let fields = server.command(&["HKEYS", name]);
    assert_eq!(
        fields,
        patient_owner.to_string(),
        "only the patient waiter holds"
    );
    served.unlock().await.unwrap();
    let mut late: Vec<Duration> = outcomes.iter().map(|(late, _)| *late).collect();
    late.sort();
    let took = outcomes
        .iter()
        .filter(|(_, took)| *took == Some(true))
        .count();
    let failed = outcomes.iter().filter(|(_, took)| took.is_none()).count();
    let stats = server.command(&["INFO", "commandstats"]);
    let evalsha = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha"))
        .unwrap_or("");
    println!(
        "{waiters} waiters: {took} took the lock, {failed} failed (no answer at first); all returned {:?} after they began; \
         returned after their wait by: median {:?}, p99 {:?}, max {:?}; the patient waiter \
         was served {waited:?} after the release; {evalsha}",
        started.elapsed(),
        late[late.len() / 2],
        late[late.len() * 99 / 100],
        late[late.len() - 1],
    );
    // Exits that timed out are tried again in the background until they are answered.
    eventually(Duration::from_secs(60), "an empty queue", || {
        queued(&server, name).is_empty()
            && server.command(&["ZCARD", "redisson_lock_timeout:{crowd}"]) == "0"
    })
    .await;
    assert_eq!(
        server.command(&["EXISTS", name]),
        "0",
        "nothing holds the lock"
    );
}
