//! The `redisson-lock` binary's `watch` on semaphores and count-down latches: their count
//! changes reported as they happen, and their messages told in their own kind's words.

mod support;
#[path = "support/tool.rs"]
mod tool;

use support::*;
use tool::*;

/// `watch NAME --kind KIND` on `server`, once it has read the state and listens on `channel`.
async fn watching(server: &RedisServer, name: &str, kind: &str, channel: &str) -> Running {
    let args = [
        "watch",
        name,
        "--kind",
        kind,
        "--interval",
        "20ms",
        "--for",
        "60s",
    ];
    let running = Running::start(server, &args);
    let first = tokio::task::block_in_place(|| running.next_event("state"));
    assert_eq!(first["object"], kind.replace('-', "_"), "{first}");
    subscribed(server, channel).await;
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_a_semaphore_s_free_permits_and_its_messages() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("cli:wsem").unwrap();
    assert!(sem.try_set_permits(3).await.unwrap());
    let channel = "redisson_sc:{cli:wsem}";
    let watch = watching(&server, "cli:wsem", "semaphore", channel).await;

    assert!(sem.try_acquire_many(3).await.unwrap());
    let taken = tokio::task::block_in_place(|| watch.next_event("counter"));
    assert_eq!(
        (taken["from"].as_i64(), taken["to"].as_i64()),
        (Some(3), Some(0))
    );
    assert_eq!(taken["object"], "semaphore");

    sem.release(3).await.unwrap();
    let [message, back] = tokio::task::block_in_place(|| watch.next_events(["message", "counter"]));
    assert_eq!(
        (message["channel"].as_str(), message["payload"].as_str()),
        (Some(channel), Some("3"))
    );
    let meaning = message["meaning"].as_str().unwrap();
    assert!(meaning.contains("permits came back"), "{meaning}");
    assert!(!meaning.contains("lock"), "{meaning}");
    assert_eq!(
        (back["from"].as_i64(), back["to"].as_i64()),
        (Some(0), Some(3))
    );
    assert_eq!(tokio::task::block_in_place(|| watch.interrupt()), 0);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_a_latch_opening() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let latch = c.count_down_latch("cli:wlatch").unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let channel = "redisson_countdownlatch__channel__{cli:wlatch}";
    let watch = watching(&server, "cli:wlatch", "count-down-latch", channel).await;

    latch.count_down().await.unwrap();
    let [message, opened] =
        tokio::task::block_in_place(|| watch.next_events(["message", "counter"]));
    assert_eq!(message["payload"], "0");
    let meaning = message["meaning"].as_str().unwrap();
    assert!(meaning.contains("the latch is open"), "{meaning}");
    // From 1 to no key at all: open.
    assert_eq!(
        (opened["from"].as_i64(), opened["to"].as_i64()),
        (Some(1), Some(0))
    );

    assert!(latch.try_set_count(2).await.unwrap());
    let [message, set] = tokio::task::block_in_place(|| watch.next_events(["message", "counter"]));
    assert!(
        message["meaning"]
            .as_str()
            .unwrap()
            .contains("a new count was set"),
        "{message}"
    );
    assert_eq!(set["to"], 2);
    assert_eq!(tokio::task::block_in_place(|| watch.interrupt()), 0);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_a_permit_expirable_semaphore_s_permits_and_leases() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.permit_expirable_semaphore("cli:wpes").unwrap();
    assert!(sem.try_set_permits(2).await.unwrap());
    let channel = "redisson_sc:{cli:wpes}";
    let watch = watching(&server, "cli:wpes", "permit-expirable-semaphore", channel).await;

    let id = sem.acquire(None).await.unwrap();
    let [free, leases] = tokio::task::block_in_place(|| watch.next_events(["counter", "leases"]));
    assert_eq!(
        (free["from"].as_i64(), free["to"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        (leases["from"].as_u64(), leases["to"].as_u64()),
        (Some(0), Some(1))
    );

    sem.release(id).await.unwrap();
    let [message, leases] =
        tokio::task::block_in_place(|| watch.next_events(["message", "leases"]));
    assert!(
        message["meaning"]
            .as_str()
            .unwrap()
            .contains("permits came back"),
        "{message}"
    );
    assert_eq!(leases["to"], 0);
    assert_eq!(tokio::task::block_in_place(|| watch.interrupt()), 0);
    c.shutdown().await;
}

/// Without `--kind`, a waiter on a semaphore's channel tells the watch what it follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_tells_a_semaphore_by_its_waiters() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("cli:wauto").unwrap();
    assert!(sem.try_set_permits(0).await.unwrap());
    let waiter = sem.clone();
    let waiting = tokio::spawn(async move { waiter.acquire_many(1).await });
    subscribed(&server, "redisson_sc:{cli:wauto}").await;
    let watch = Running::start(&server, &["watch", "cli:wauto", "--interval", "20ms"]);
    let first = tokio::task::block_in_place(|| watch.next_event("state"));
    assert_eq!(first["object"], "semaphore");
    sem.release(1).await.unwrap();
    within(WAKE, "the waiter", waiting).await.unwrap().unwrap();
    assert_eq!(tokio::task::block_in_place(|| watch.interrupt()), 0);
    c.shutdown().await;
}

/// A watch whose subscriber connection is closed (a restart; behind Sentinel, the old master
/// closing its clients as it is demoted) reconnects and listens again: the messages after it
/// are still reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_listens_again_after_its_subscriber_was_disconnected() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("cli:wkill").unwrap();
    assert!(sem.try_set_permits(1).await.unwrap());
    let channel = "redisson_sc:{cli:wkill}";
    let watch = watching(&server, "cli:wkill", "semaphore", channel).await;
    server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    // Listening again (nobody else listens on it).
    eventually(
        std::time::Duration::from_secs(10),
        "the watch listening again",
        || subscribers(&server, channel) >= 1,
    )
    .await;
    sem.release(2).await.unwrap();
    let message = tokio::task::block_in_place(|| watch.next_event("message"));
    assert_eq!(message["payload"], "3");
    assert_eq!(tokio::task::block_in_place(|| watch.interrupt()), 0);
}
