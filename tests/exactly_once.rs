//! Releases and count-downs happen exactly once while the server keeps closing the client's
//! connections (`CLIENT KILL TYPE normal`): a release whose connection dropped is sent again
//! until Redis answers it, and a copy that arrives after the first ran changes nothing. So a
//! semaphore ends with exactly the permits it started with, and every latch counted down
//! opens.

mod support;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

/// Kills every normal connection of `server` (not its own) every `every`, until `stop`.
fn keep_killing(
    server: &RedisServer,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u32> {
    let port = server.port();
    std::thread::spawn(move || {
        let mut kills = 0;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            let killed = support::server::raw_command(port, &["CLIENT", "KILL", "TYPE", "normal"]);
            kills += u32::from(killed.is_ok_and(|n| n != "0"));
        }
        kills
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_keeps_every_permit_through_killed_connections() {
    let server = RedisServer::start();
    let client = client_with(&server, |b| b.command_timeout(Duration::from_secs(2))).await;
    let name = "once-sem";
    let permits: i64 = 5;
    let semaphore = client.semaphore(name).unwrap();
    assert!(semaphore.try_set_permits(permits as u32).await.unwrap());

    let stop = Arc::new(AtomicBool::new(false));
    let killing = keep_killing(&server, Duration::from_millis(100), stop.clone());
    let holders = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let until = Instant::now() + Duration::from_secs(8);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (semaphore, holders, most) = (semaphore.clone(), holders.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let (mut released, mut failed_acquires) = (0, 0);
            while Instant::now() < until {
                match semaphore.try_acquire_many(1).await {
                    Ok(true) => {
                        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        holders.fetch_sub(1, Ordering::SeqCst);
                        semaphore
                            .release(1)
                            .await
                            .expect("a release is made, whatever the connection");
                        released += 1;
                    }
                    Ok(false) => tokio::time::sleep(Duration::from_millis(1)).await,
                    Err(error) => {
                        assert!(error.is_retryable(), "{error}");
                        failed_acquires += 1;
                    }
                }
            }
            (released, failed_acquires)
        }));
    }
    let done = all_finish(Duration::from_secs(120), "the tasks", tasks).await;
    stop.store(true, Ordering::Relaxed);
    let kills = tokio::task::spawn_blocking(move || killing.join().unwrap())
        .await
        .unwrap();
    let released: u32 = done.iter().map(|(released, _)| released).sum();
    let failed: u32 = done.iter().map(|(_, failed)| failed).sum();
    eprintln!("{released} releases, {failed} failed acquisitions, {kills} kills");
    assert!(kills > 10, "the connections were killed {kills} times");
    assert!(released > 20, "only {released} releases");
    assert!(
        most.load(Ordering::SeqCst) <= permits,
        "more holders than permits"
    );
    // Failed acquisitions are undone in the background.
    eventually(Duration::from_secs(30), "every permit back", || {
        server.command(&["GET", name]) == permits.to_string()
    })
    .await;
    // A read on a connection the last kill dropped fails at once (it is sent once on a single
    // server): read again, as a caller would.
    let free = loop {
        match semaphore.available_permits().await {
            Err(error) if error.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            read => break read.unwrap(),
        }
    };
    assert_eq!(free, permits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_latch_opens_through_killed_connections() {
    let server = RedisServer::start();
    let counting = client_with(&server, |b| b.command_timeout(Duration::from_secs(2))).await;
    let waiting = client(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let killing = keep_killing(&server, Duration::from_millis(20), stop.clone());
    for round in 0..40 {
        let name = format!("once-latch-{round}");
        let count = 1 + round % 2;
        let latch = counting.count_down_latch(&name).unwrap();
        // Set and checked without the kills' help: a set is sent once.
        while latch.count().await.ok() != Some(count as i64) {
            let _ = latch.try_set_count(count as u32).await;
        }
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let latch = waiting.count_down_latch(&name).unwrap();
                // A wait whose first look meets a killed connection fails at once: looked
                // again, as a caller would.
                tokio::spawn(async move {
                    loop {
                        match latch.wait_for(Duration::from_secs(60)).await {
                            Err(error) if error.is_retryable() => continue,
                            opened => return opened,
                        }
                    }
                })
            })
            .collect();
        for _ in 0..count {
            latch
                .count_down()
                .await
                .unwrap_or_else(|e| panic!("round {round}: a count-down failed: {e}"));
        }
        for opened in all_finish(Duration::from_secs(60), "the waiters", waiters).await {
            assert!(opened.unwrap(), "round {round}: a waiter did not open");
        }
        // Asked again when the kills close this connection too.
        let exists = std::iter::repeat_with(|| server.try_command(&["EXISTS", &name]))
            .find_map(Result::ok)
            .unwrap();
        assert_eq!(exists, "0", "round {round}");
    }
    stop.store(true, Ordering::Relaxed);
    let kills = tokio::task::spawn_blocking(move || killing.join().unwrap())
        .await
        .unwrap();
    assert!(kills > 10, "the connections were killed {kills} times");
}

/// Guards held when the client shuts down have their permits given back by the shutdown,
/// which says how many; dropping them afterwards gives nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_back_what_guards_hold() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.semaphore("once-shut-sem").unwrap();
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let first = semaphore.acquire_guard(1).await.unwrap();
    let second = semaphore.acquire_guard(1).await.unwrap();
    let expirable = client.permit_expirable_semaphore("once-shut-exp").unwrap();
    assert!(expirable.try_set_permits(1).await.unwrap());
    let leased = expirable.acquire_guard(1, None).await.unwrap();
    assert_eq!(server.command(&["GET", "once-shut-sem"]), "1");
    assert_eq!(server.command(&["GET", "once-shut-exp"]), "0");

    let report = client.shutdown().await;
    assert_eq!((report.given_back, report.unfinished), (3, 0), "{report:?}");
    assert_eq!(server.command(&["GET", "once-shut-sem"]), "3");
    assert_eq!(server.command(&["GET", "once-shut-exp"]), "1");
    assert_eq!(server.command(&["ZCARD", "{once-shut-exp}:timeout"]), "0");
    // Given back already: the drops and the release change nothing, and a second
    // shutdown reports the first one's work.
    drop(first);
    second.release().await.unwrap();
    drop(leased);
    assert_eq!(client.shutdown().await, report);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.command(&["GET", "once-shut-sem"]), "3");
    assert_eq!(server.command(&["GET", "once-shut-exp"]), "1");
}

/// The records that make writes exactly once do not pile up: the next script on the same
/// semaphore deletes those whose replies arrived, so after a busy loop the server keeps at
/// most those of the writes in flight and 32 answered ones waiting for the next script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_do_not_grow_with_throughput() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.semaphore("once-records").unwrap();
    assert!(semaphore.try_set_permits(4).await.unwrap());
    let until = Instant::now() + Duration::from_secs(3);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let semaphore = semaphore.clone();
            tokio::spawn(async move {
                let mut rounds = 0;
                while Instant::now() < until {
                    semaphore.acquire_many(1).await.unwrap();
                    semaphore.release(1).await.unwrap();
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let rounds: u32 = all_finish(Duration::from_secs(60), "the loops", tasks)
        .await
        .into_iter()
        .sum();
    let records = server
        .command(&["KEYS", "redisson_sc_attempt:*"])
        .lines()
        .count();
    eprintln!("{rounds} acquire+release rounds left {records} records");
    assert!(rounds > 500, "only {rounds} rounds");
    assert!(
        records <= 32 + 4,
        "{records} records left after {rounds} rounds"
    );
}
