//! Redis down after the client connected: while the server refuses connections, calls fail
//! at once, naming the refusal and the address, instead of waiting for the command timeout;
//! once the server is back, the same client works again.

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use redisson_lock::{Error, LockClient};
use support::*;

/// Far under the 3 s default command timeout that a waiting call would take (twice, for a
/// call that sends twice), and far over a refused connection on a loaded machine.
const PROMPT: Duration = Duration::from_millis(1500);

/// A client with the default settings: a 3 s command timeout, and a 30 s watchdog, so that
/// a guard's hold is not known lost before its release is tried.
async fn default_client(server: &RedisServer) -> LockClient {
    LockClient::builder()
        .url(&server.url())
        .build()
        .await
        .expect("connect to the test server")
}

/// Runs `call`, which must fail within [`PROMPT`] with an error that says the server at
/// `port` refused the connection. Returns how long it took.
async fn refused<T: std::fmt::Debug>(
    what: &str,
    port: u16,
    call: impl Future<Output = redisson_lock::Result<T>>,
) -> Duration {
    let start = Instant::now();
    let result = within(30 * SECOND, what, call).await;
    let took = start.elapsed();
    let error = match result {
        Err(error) => error,
        Ok(value) => panic!("{what}: succeeded against a stopped server: {value:?}"),
    };
    let text = error.to_string();
    assert!(took < PROMPT, "{what}: took {took:?} to fail with: {text}");
    assert!(
        matches!(error, Error::Unreachable { .. }),
        "{what}: {error:?}"
    );
    assert!(text.contains("refused"), "{what}: {text}");
    assert!(
        text.contains(&format!("127.0.0.1:{port}")),
        "{what}: {text}"
    );
    assert!(!text.contains("Os {"), "{what}: {text}");
    assert!(error.is_retryable(), "{what}: {error:?}");
    took
}

#[tokio::test]
async fn calls_fail_at_once_while_the_server_refuses_connections_and_work_once_it_is_back() {
    let mut server = RedisServer::start();
    let port = server.port();
    let c = default_client(&server).await;
    let lock = c.lock("refused").unwrap();
    let other = c.lock("refused-other").unwrap();
    let me = c.new_owner();
    let guard = lock.lock(&me).await.unwrap();
    server.stop();

    let mut took = Vec::new();
    took.push(refused("lock", port, other.lock(&c.new_owner())).await);
    took.push(refused("try_lock", port, other.try_lock(&c.new_owner())).await);
    took.push(refused("is_locked", port, lock.is_locked()).await);
    took.push(refused("force_unlock", port, other.force_unlock()).await);
    took.push(refused("a guard's unlock", port, guard.unlock()).await);
    // A second round, once the last try of a connection no longer stands for new calls.
    tokio::time::sleep(Duration::from_millis(300)).await;
    took.push(refused("lock again", port, other.lock(&c.new_owner())).await);
    took.push(refused("is_locked again", port, lock.is_locked()).await);
    println!("failed after {took:?}");

    // The same port again: the same client works, with no call of its own.
    server.restart();
    let start = Instant::now();
    let again = loop {
        match other.try_lock(&me).await {
            Ok(guard) => break guard,
            Err(error) if start.elapsed() < 10 * SECOND => {
                assert!(error.is_retryable(), "{error:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the client did not come back: {error}"),
        }
    };
    let again = again.expect("a free lock on a fresh server");
    assert!(other.is_locked().await.unwrap());
    again.unlock().await.unwrap();
    assert!(!other.is_locked().await.unwrap());
}

/// A call made while the client reconnects to a server that is back is sent, and answered:
/// only a server that refuses fails calls at once.
#[tokio::test]
async fn a_call_made_as_the_server_comes_back_waits_for_the_reconnect_and_succeeds() {
    let mut server = RedisServer::start();
    let port = server.port();
    // Room for fred's reconnect pause (up to 2 s) on a loaded machine.
    let c = client_with(&server, |b| b.command_timeout(10 * SECOND)).await;
    let lock = c.lock("comes-back").unwrap();
    assert!(!lock.is_locked().await.unwrap());
    server.stop();
    refused("is_locked while stopped", port, lock.is_locked()).await;
    server.restart();
    // A try of a connection answers for the calls of the next 100 ms: one made later finds
    // the server back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let guard = within(15 * SECOND, "try_lock", lock.try_lock(&c.new_owner())).await;
    let guard = guard.expect("answered once reconnected").expect("free");
    assert!(lock.is_locked().await.unwrap());
    guard.unlock().await.unwrap();
}

/// A `rediss://` URL against a server that speaks plain text: said at once, with the hint,
/// not after the 3 s command timeout.
#[tokio::test]
async fn a_tls_url_against_a_plain_server_is_said_at_once() {
    let server = RedisServer::start();
    let url = server.url().replace("redis://", "rediss://");
    let start = Instant::now();
    let result = within(30 * SECOND, "connecting", LockClient::connect(&url)).await;
    let took = start.elapsed();
    let error = match result {
        Err(error @ Error::Unreachable { .. }) => error,
        other => panic!("{other:?}"),
    };
    let text = error.to_string();
    assert!(took < PROMPT, "took {took:?} to fail with: {text}");
    assert!(
        text.contains(&format!("127.0.0.1:{} (TLS)", server.port())),
        "{text}"
    );
    assert!(text.contains("does not speak TLS"), "{text}");
    assert!(text.contains("redis://"), "{text}");
    // The server is left as it was: no client of ours stays connected.
    eventually(10 * SECOND, "the connections closed", || {
        server.command(&["CLIENT", "LIST"]).lines().count() == 1
    })
    .await;
}

/// A semaphore's and a latch's waiters give up the watchdog timeout after the server went
/// away, as a lock's `lease_lost()` fires, not a recheck period later: the loss of the
/// connection wakes them, and the outage counts from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronizer_waiters_give_up_the_watchdog_timeout_after_the_server_went_away() {
    let mut server = RedisServer::start();
    let watchdog = 3 * SECOND;
    let c = client_with(&server, |b| b.watchdog_timeout(watchdog)).await;
    let sem = c.semaphore("gone-sem").unwrap();
    assert!(sem.try_set_permits(0).await.unwrap());
    let latch = c.count_down_latch("gone-latch").unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let (s, l) = (sem.clone(), latch.clone());
    let sem_waiting = tokio::spawn(async move { s.acquire_many(1).await });
    let latch_waiting = tokio::spawn(async move { l.wait().await });
    subscribed(&server, "redisson_sc:{gone-sem}").await;
    subscribed(&server, "redisson_countdownlatch__channel__{gone-latch}").await;
    // Past the waiters' first looks: each now waits for a message or its 15 s recheck.
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill();
    let gone = Instant::now();
    for (what, waiting) in [("semaphore", sem_waiting), ("latch", latch_waiting)] {
        let result = within(40 * SECOND, what, waiting).await.unwrap();
        let took = gone.elapsed();
        let error = result.expect_err("no server, no permit and no open latch");
        assert!(error.is_retryable(), "{what}: {error:?}");
        assert!(
            took >= watchdog - Duration::from_millis(200) && took < watchdog + 4 * SECOND,
            "the {what}'s waiter gave up {took:?} after the server went away: {error}"
        );
    }
}
