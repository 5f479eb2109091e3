//! Wire compatibility with Java's Redisson: holds and messages written exactly as Redisson
//! writes them are honoured, and ours look exactly like Redisson's.

mod support;

use std::time::{Duration, Instant};

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use redisson_lock::Lease;
use support::*;

/// A Redisson client id and thread id, as a Java `RedissonClient` writes them.
const JAVA_OWNER: &str = "8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:57";

/// A raw subscriber, standing in for a Java client listening on a lock channel.
async fn listener(
    server: &RedisServer,
    channel: &str,
) -> (SubscriberClient, tokio::sync::broadcast::Receiver<Message>) {
    let config = Config::from_url(&server.url()).unwrap();
    let subscriber = Builder::from_config(config)
        .build_subscriber_client()
        .unwrap();
    subscriber.init().await.unwrap();
    let messages = subscriber.message_rx();
    subscriber.subscribe(channel).await.unwrap();
    let _: Value = subscriber.ping(None).await.unwrap();
    (subscriber, messages)
}

#[tokio::test]
async fn a_hold_written_by_java_excludes_us_and_its_unlock_message_wakes_us() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| {
        b.watchdog_timeout(std::time::Duration::from_secs(30))
    })
    .await;
    let lock = c.lock("java-held");
    // Exactly what Redisson's acquire script leaves: one field, count 1, a 30 s TTL.
    server.command(&["HINCRBY", "java-held", JAVA_OWNER, "1"]);
    server.command(&["PEXPIRE", "java-held", "30000"]);

    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());
    assert!(lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    let waiter = tokio::spawn(lock.lock(&me));
    eventually(Duration::from_secs(5), "waiter subscribed", || {
        server
            .command(&["PUBSUB", "NUMSUB", "redisson_lock__channel:{java-held}"])
            .ends_with("\n1")
    })
    .await;

    // Java's release: the count reaches 0, the hash is deleted, "0" is published.
    let released = Instant::now();
    server.command(&["DEL", "java-held"]);
    assert_eq!(
        server.command(&["PUBLISH", "redisson_lock__channel:{java-held}", "0"]),
        "1"
    );
    let guard = within(Duration::from_secs(2), "waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_millis(200),
        "woken by the message, not the 30 s TTL"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_java_reentrant_hold_is_not_ours_to_release() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.command(&["HSET", "java-reentered", JAVA_OWNER, "2"]);
    server.command(&["PEXPIRE", "java-reentered", "30000"]);
    let lock = c.lock("java-reentered");
    assert!(lock.unlock(&c.new_owner()).await.is_err());
    assert_eq!(server.command(&["HGET", "java-reentered", JAVA_OWNER]), "2");
    // Acting for the Java owner (expert escape hatch) releases exactly its holds.
    let java = redisson_lock::LockOwner::from_parts(JAVA_OWNER[..36].parse().unwrap(), 57);
    assert_eq!(lock.hold_count(&java).await.unwrap(), 2);
    lock.unlock(&java).await.unwrap();
    assert_eq!(server.command(&["HGET", "java-reentered", JAVA_OWNER]), "1");
}

#[tokio::test]
async fn our_hold_looks_exactly_like_redissons() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let me = c.new_owner();
    let field = format!("{}:{}", c.id().hyphenated(), me.id());
    assert_eq!(me.to_string(), field);
    assert_eq!(c.id().hyphenated().to_string().len(), 36);

    let lock = c.lock("{user:7}:cart");
    let guard = lock.lock(&me).await.unwrap();
    assert_eq!(server.command(&["TYPE", "{user:7}:cart"]), "hash");
    assert_eq!(
        server.command(&["HGETALL", "{user:7}:cart"]),
        format!("{field}\n1")
    );
    let pttl: i64 = server.command(&["PTTL", "{user:7}:cart"]).parse().unwrap();
    assert!((29_900..=30_000).contains(&pttl));
    assert_eq!(
        server.command(&["DBSIZE"]),
        "1",
        "no other key while holding"
    );

    let fixed = c
        .lock("orders")
        .with_lease(Lease::Fixed(Duration::from_secs(10)));
    let g = fixed.lock(&me).await.unwrap();
    let pttl: i64 = server.command(&["PTTL", "orders"]).parse().unwrap();
    assert!((9_900..=10_000).contains(&pttl));
    g.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    // The unlock latches are deleted right after their release.
    eventually(Duration::from_secs(2), "latches deleted", || {
        server.command(&["DBSIZE"]) == "0"
    })
    .await;
}

#[tokio::test]
async fn our_unlock_publishes_zero_on_the_exact_channel() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for (name, channel) in [
        ("orders", "redisson_lock__channel:{orders}"),
        ("{user:7}:cart", "redisson_lock__channel:{user:7}:cart"),
    ] {
        let (subscriber, mut messages) = listener(&server, channel).await;
        let me = c.new_owner();
        let lock = c.lock(name);
        let outer = lock.lock(&me).await.unwrap();
        let inner = lock.lock(&me).await.unwrap();
        inner.unlock().await.unwrap(); // a partial release publishes nothing
        outer.unlock().await.unwrap();
        let message = within(Duration::from_secs(2), "unlock message", messages.recv())
            .await
            .unwrap();
        assert_eq!(&*message.channel, channel);
        assert_eq!(message.value.as_str().as_deref(), Some("0"));
        assert!(
            messages.try_recv().is_err(),
            "exactly one message per release"
        );

        // force_unlock publishes the same message.
        let _held = lock.lock(&me).await.unwrap();
        assert!(lock.force_unlock().await.unwrap());
        let message = within(Duration::from_secs(2), "force message", messages.recv())
            .await
            .unwrap();
        assert_eq!(message.value.as_str().as_deref(), Some("0"));
        subscriber.quit().await.unwrap();
    }
}

#[tokio::test]
async fn the_watchdog_never_renews_a_hold_that_is_not_ours() {
    let server = RedisServer::start();
    let c = client(&server).await; // watchdog 900 ms, renewal every 300 ms
    let lock = c.lock("taken-over");
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    // Our hold vanishes and a Java client takes the lock with a 5 s lease.
    server.command(&["DEL", "taken-over"]);
    server.command(&["HSET", "taken-over", JAVA_OWNER, "1"]);
    server.command(&["PEXPIRE", "taken-over", "5000"]);
    within(Duration::from_secs(2), "lease_lost", guard.lease_lost()).await;
    assert_eq!(c.renewed_holds(), 0);
    let pttl: i64 = server.command(&["PTTL", "taken-over"]).parse().unwrap();
    assert!(pttl > 1000, "the Java hold kept its own lease: {pttl}");
    assert!(pttl <= 5000);
    assert_eq!(server.command(&["HGET", "taken-over", JAVA_OWNER]), "1");
    assert!(guard.unlock().await.is_err());
    assert_eq!(server.command(&["HGET", "taken-over", JAVA_OWNER]), "1");
}

#[tokio::test]
async fn the_unlock_latch_makes_a_resent_release_idempotent() {
    // Run the release script twice with one request id, as a resend after a lost reply
    // does: the second run replays the first outcome and releases nothing more.
    let server = RedisServer::start();
    let release = &lua("lock_release");
    server.command(&["HSET", "latched", "me:1", "2"]);
    let run = || {
        server.command(&[
            "EVAL",
            release,
            "3",
            "latched",
            "redisson_lock__channel:{latched}",
            "redisson_unlock_latch:{latched}:r1",
            "0",
            "30000",
            "me:1",
            "PUBLISH",
            "10000",
        ])
    };
    assert_eq!(run(), "0");
    assert_eq!(run(), "0", "replayed");
    assert_eq!(
        server.command(&["HGET", "latched", "me:1"]),
        "1",
        "released once"
    );
    assert_eq!(
        server.command(&["GET", "redisson_unlock_latch:{latched}:r1"]),
        "0"
    );
    let pttl: i64 = server
        .command(&["PTTL", "redisson_unlock_latch:{latched}:r1"])
        .parse()
        .unwrap();
    assert!(pttl > 9000 && pttl <= 10000);
    // Not the owner: nil, and no latch written.
    assert_eq!(
        server.command(&[
            "EVAL",
            release,
            "3",
            "latched",
            "c",
            "redisson_unlock_latch:{latched}:r2",
            "0",
            "30000",
            "stranger:1",
            "PUBLISH",
            "10000",
        ]),
        "(nil)"
    );
    assert_eq!(
        server.command(&["EXISTS", "redisson_unlock_latch:{latched}:r2"]),
        "0"
    );
}
