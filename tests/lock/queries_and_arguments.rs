//! Queries, the name prefix, and arguments refused where they are given.

use super::*;

#[tokio::test]
async fn queries() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let lock = c.lock("queries").unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    assert_eq!(lock.hold_count(&me).await.unwrap(), 0);
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    let guard = lock.lock(&me).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.is_held_by(&me).await.unwrap());
    assert!(!lock.is_held_by(&other).await.unwrap());
    assert!(lock.remaining_lease().await.unwrap().unwrap() <= Duration::from_millis(900));
    assert_eq!(guard.name(), "queries");
    assert_eq!(guard.owner(), &me);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn name_prefix_maps_every_key_and_channel() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.name_prefix("app1:")).await;
    let me = c.new_owner();
    let lock = c.lock("orders").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    assert_eq!(guard.name(), "orders", "the name as the user gave it");
    assert_eq!(
        server.command(&["HGET", "app1:orders", &me.to_string()]),
        "1"
    );
    assert_eq!(server.command(&["EXISTS", "orders"]), "0");
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    subscribed(&server, &lock_channel("app1:orders")).await;
    assert_eq!(
        server.command(&["PUBSUB", "CHANNELS"]),
        lock_channel("app1:orders"),
        "the only channel"
    );
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn bad_arguments_are_refused_where_they_are_given() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let refused = |result: Result<(), Error>, what: &str| {
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{what}: {result:?}"
        );
    };
    refused(c.lock("").map(drop), "lock");
    refused(c.fair_lock("").map(drop), "fair_lock");
    refused(c.read_write_lock("").map(drop), "read_write_lock");
    refused(c.fenced_lock("").map(drop), "fenced_lock");
    refused(c.spin_lock("").map(drop), "spin_lock");
    refused(c.non_reentrant_lock("").map(drop), "non_reentrant_lock");
    refused(
        c.non_reentrant_fair_lock("").map(drop),
        "non_reentrant_fair_lock",
    );
    refused(
        c.multi_lock(Vec::<redisson_lock::Lock>::new()).map(drop),
        "multi_lock",
    );
    refused(
        c.red_lock(Vec::<redisson_lock::Lock>::new()).map(drop),
        "red_lock",
    );
    for lease in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        refused(Lease::fixed(lease).map(drop), &format!("{lease:?}"));
    }
    let lock = c.lock("args").unwrap();
    assert!(matches!(
        lock.try_lock_for(&me, Duration::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    for timeout in [Duration::ZERO, Duration::from_millis(2)] {
        let built = LockClient::builder()
            .url(&server.url())
            .watchdog_timeout(timeout)
            .build()
            .await;
        assert!(
            matches!(built, Err(Error::InvalidArgument(_))),
            "{timeout:?}"
        );
    }
    assert!(matches!(
        LockClient::builder().build().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        LockClient::builder()
            .url(&server.url())
            .command_timeout(Duration::ZERO)
            .build()
            .await,
        Err(Error::InvalidArgument(_))
    ));
    // Nothing reached Redis.
    assert_eq!(server.command(&["DBSIZE"]), "0");
}
