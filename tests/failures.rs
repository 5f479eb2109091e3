//! Failures: lost scripts, Redis down or restarted, a holder process killed outright. (Bad
//! input is tested in `faults/bad_input.rs`.)

mod support;

use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redisson_lock::{Error, LockClient};
use support::*;

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("flushed").unwrap();
    let me = c.new_owner();
    server.command(&["SCRIPT", "FLUSH"]);
    let guard = lock.lock(&me).await.unwrap();
    server.command(&["SCRIPT", "FLUSH"]);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    // Renewal too survives a flush.
    let guard = lock.lock(&me).await.unwrap();
    server.command(&["SCRIPT", "FLUSH"]);
    tokio::time::sleep(Duration::from_millis(1200)).await; // past the 900 ms lease
    assert!(!guard.is_lease_lost());
    assert!(lock.is_held_by(&me).await.unwrap());
    guard.unlock().await.unwrap();
}

/// A server that loses a script again between its load and its resend (a failover to a
/// replica that never had it, another flush) costs no call: the script is loaded again.
/// Releases met by that must happen, or a semaphore loses its permits for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_lost_again_right_after_their_load_are_loaded_again() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (sem, lock) = (
        c.semaphore("reflushed-sem").unwrap(),
        c.lock("reflushed").unwrap(),
    );
    assert!(sem.try_set_permits(2).await.unwrap());
    let flushing = Arc::new(AtomicBool::new(true));
    let flusher = {
        let (flushing, port) = (flushing.clone(), server.port());
        std::thread::spawn(move || flush_scripts_until_told(port, &flushing))
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let sem = sem.clone();
        tasks.spawn(async move {
            for _ in 0..150 {
                sem.acquire_many(1).await?;
                sem.release(1).await?;
            }
            Ok::<_, Error>(())
        });
        let (lock, me) = (lock.clone(), c.new_owner());
        tasks.spawn(async move {
            for _ in 0..150 {
                lock.lock(&me).await?.unlock().await?;
            }
            Ok(())
        });
    }
    let mut failed = Vec::new();
    while let Some(task) = within(60 * SECOND, "the calls", tasks.join_next()).await {
        failed.extend(task.unwrap().err().map(|error| error.to_string()));
    }
    flushing.store(false, Ordering::Relaxed);
    let flushes = flusher.join().unwrap();
    assert!(failed.is_empty(), "after {flushes} flushes: {failed:#?}");
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert!(!lock.is_locked().await.unwrap());
    // The flushes met the calls: the server refused their scripts again and again (error
    // counts by kind exist from Redis 6.2; counts by subcommand, as of SCRIPT LOAD, from 7.0).
    let errors = server.command(&["INFO", "errorstats"]);
    let refused: u64 = (errors.lines())
        .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
        .map_or(0, |n| n.trim().parse().unwrap());
    assert!(refused > 100, "{refused} NOSCRIPT in {flushes} flushes");
}

/// Sends `SCRIPT FLUSH` on one connection to `port`, about every millisecond, until `flushing`
/// is false; how many were sent.
fn flush_scripts_until_told(port: u16, flushing: &AtomicBool) -> u64 {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut replies = BufReader::new(stream.try_clone().unwrap());
    let mut flushes = 0;
    while flushing.load(Ordering::Relaxed) {
        (&stream)
            .write_all(b"*2\r\n$6\r\nSCRIPT\r\n$5\r\nFLUSH\r\n")
            .unwrap();
        let mut reply = String::new();
        replies.read_line(&mut reply).unwrap();
        assert_eq!(reply, "+OK\r\n");
        flushes += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    flushes
}

#[tokio::test]
async fn connecting_to_a_dead_server_fails_clearly() {
    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    let connecting = LockClient::builder()
        .url(&url)
        .command_timeout(Duration::from_millis(500))
        .build();
    let result = within(5 * SECOND, "connecting", connecting).await;
    let Err(error @ Error::Unreachable { .. }) = result else {
        panic!("{result:?}");
    };
    // What failed, where and why, in words.
    let text = error.to_string();
    let port = url.rsplit(':').next().unwrap();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("connection refused"), "{text}");
    assert!(!text.contains("Os {"), "{text}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn a_tls_url_against_a_plain_server_says_what_is_likely_wrong() {
    let server = RedisServer::start();
    let url = server.url().replace("redis://", "rediss://");
    let connecting = LockClient::builder()
        .url(&url)
        .command_timeout(Duration::from_millis(500))
        .build();
    let result = within(10 * SECOND, "connecting", connecting).await;
    let text = match result {
        Err(error @ Error::Unreachable { .. }) => error.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(text.contains("(TLS)"), "{text}");
    assert!(text.contains("does not speak TLS"), "{text}");
}

#[tokio::test]
async fn calls_fail_instead_of_hanging_while_redis_is_down() {
    let mut server = RedisServer::start();
    let c = client_with(&server, |b| b.command_timeout(Duration::from_millis(500))).await;
    let lock = c.lock("down").unwrap();
    let me = c.new_owner();
    server.kill();
    // Failed long before the wait it was given.
    let result = within(
        5 * SECOND,
        "try_lock_for",
        lock.try_lock_for(&me, Duration::from_secs(60)),
    )
    .await;
    assert!(matches!(&result, Err(e) if e.is_retryable()), "{result:?}");
    // The server refuses connections: said at once, naming it.
    let result = lock.lock(&me).await;
    assert!(
        matches!(&result, Err(Error::Unreachable { .. })),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_redis_restart_and_acquires() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("restarted").unwrap();
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    // The waiter takes a fixed 60 s lease: only its release can free the lock for the next.
    let waiter = tokio::spawn(lock.clone().with_lease(fixed(60_000)).lock(&c.new_owner()));
    subscribed(&server, &lock_channel("restarted")).await;

    server.restart(); // data lost: the holder's hold is gone
    let guard = within(Duration::from_secs(10), "waiter after restart", waiter)
        .await
        .unwrap()
        .expect("the waiter recovers and acquires");
    within(5 * SECOND, "holder learns of the loss", holder.lease_lost()).await;
    assert!(matches!(holder.unlock().await, Err(Error::NotHeld { .. })));
    assert!(lock.is_held_by(guard.owner()).await.unwrap());
    // Unlock messages flow again after the reconnect: nothing renews now, so the server's
    // script count is the next waiter's attempts.
    let before = evalsha_calls(&server);
    let next = tokio::spawn(lock.lock(&c.new_owner()));
    // At least its first attempt (one only while the last waiter's channel lingers).
    waiting(&server, &lock_channel("restarted"), before + 1).await;
    guard.unlock().await.unwrap();
    woken_and_released("next", next).await;
}

#[tokio::test]
async fn lease_lost_fires_when_redis_stays_unreachable() {
    let mut server = RedisServer::start();
    let c = client_with(&server, |b| b.command_timeout(Duration::from_millis(300))).await;
    let guard = c
        .lock("unreachable")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    // Right after a renewal, so the 900 ms lease has most of its time left at the kill.
    eventually(5 * SECOND, "a fresh renewal", || {
        pttl(&server, "unreachable") > 800
    })
    .await;
    let start = Instant::now();
    server.kill();
    within(5 * SECOND, "lease_lost", guard.lease_lost()).await;
    // Not before the lease could have run out (less the time since it was renewed).
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
    assert!(guard.is_lease_lost());
    assert_eq!(c.renewed_holds(), 0);
}

/// Run by `a_holder_killed_with_sigkill_frees_the_lock_after_the_watchdog_timeout` in a
/// child process: takes the lock, says so, and waits to be killed.
#[tokio::test]
#[ignore = "a child process of another test"]
async fn holder_process() {
    let Ok(url) = std::env::var("REDISSON_LOCK_HOLDER_URL") else {
        return;
    };
    let client = LockClient::builder()
        .url(&url)
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .await
        .unwrap();
    let guard = client
        .lock("killed")
        .unwrap()
        .lock(&client.new_owner())
        .await
        .unwrap();
    println!("HELD {}", guard.owner());
    std::future::pending::<()>().await;
}

#[tokio::test]
async fn a_holder_killed_with_sigkill_frees_the_lock_after_the_watchdog_timeout() {
    let server = RedisServer::start();
    let mut child = spawn_test_process("holder_process", "REDISSON_LOCK_HOLDER_URL", &server);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let owner = loop {
        let line = lines.next().expect("the holder said nothing").unwrap();
        // libtest prints "test holder_process ... " on the same line.
        if let Some((_, owner)) = line.split_once("HELD ") {
            break owner.trim().to_owned();
        }
    };
    // Let the holder's watchdog renew a few times: the hold outlives its 900 ms lease.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(server.command(&["HGET", "killed", &owner]), "1");

    // Right after a renewal, so the lease has most of its 900 ms left at the kill.
    eventually(5 * SECOND, "a fresh renewal", || {
        pttl(&server, "killed") > 700
    })
    .await;
    child.kill().unwrap(); // SIGKILL: no unlock, no goodbye
    child.wait().unwrap();
    let killed = Instant::now();
    let c = client(&server).await;
    // Freed by the lease running out (at most 900 ms after its last renewal): well within
    // the limit, and not sooner.
    let guard = within(
        5 * SECOND,
        "lock after the kill",
        c.lock("killed").unwrap().lock(&c.new_owner()),
    )
    .await
    .unwrap();
    let freed = killed.elapsed();
    assert!(
        freed > Duration::from_millis(250),
        "freed too soon: {freed:?}"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_timed_wait_through_an_outage_ends_near_its_deadline() {
    let mut server = RedisServer::start();
    // A 30 s watchdog: an outage ends a wait only after 30 s, so the deadline must end it.
    let c = client_with(&server, |b| {
        b.command_timeout(Duration::from_millis(150))
            .watchdog_timeout(Duration::from_secs(30))
    })
    .await;
    let lock = c.lock("outage-deadline").unwrap();
    // A short lease: the waiter looks again after 2 s, during the outage.
    let _holder = lock
        .clone()
        .with_lease(fixed(2_000))
        .lock(&c.new_owner())
        .await
        .unwrap();
    let waiter = c.new_owner();
    let wait = Duration::from_secs(4);
    let before = evalsha_calls(&server);
    let start = Instant::now();
    let pending = tokio::spawn(lock.try_lock_for(&waiter, wait));
    waiting(&server, &lock_channel("outage-deadline"), before + 2).await;
    server.kill();
    let outcome = within(Duration::from_secs(20), "the timed wait", pending)
        .await
        .unwrap();
    let took = start.elapsed();
    match outcome {
        Ok(None) => {}
        Err(error) => assert!(error.is_retryable(), "{error:?}"),
        Ok(Some(_)) => panic!("acquired from a dead server"),
    }
    // The back-off between failed attempts stops at the deadline, far from the 30 s an
    // outage may last before a wait gives up on it.
    assert!(took < wait + 3 * SECOND, "took {took:?}");
}
