//! Releasing: by a non-owner, detached Java-style, by a dropped guard, and forced.

use super::*;

#[tokio::test]
async fn unlock_by_a_non_owner_is_not_held_and_changes_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (owner, stranger) = (c.new_owner(), c.new_owner());
    let lock = c.lock("owned").unwrap();
    let guard = lock.lock(&owner).await.unwrap();
    let before = server.command(&["HGETALL", "owned"]);

    match lock.unlock(&stranger).await {
        Err(Error::NotHeld { name, owner }) => {
            assert_eq!(name, "owned");
            assert_eq!(owner, stranger);
        }
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert_eq!(server.command(&["HGETALL", "owned"]), before);
    assert!(lock.is_held_by(&owner).await.unwrap());
    // No stray unlock message either: the holder still holds after a round trip.
    assert!(!guard.is_lease_lost());
    guard.unlock().await.unwrap();
    // Unlocking a free lock is NotHeld too.
    assert!(matches!(
        lock.unlock(&owner).await,
        Err(Error::NotHeld { .. })
    ));
}

#[tokio::test]
async fn java_style_detach_and_unlock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("java-style").unwrap();
    lock.lock(&me).await.unwrap().detach();
    lock.lock(&me).await.unwrap().detach();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 2);
    assert_eq!(c.renewed_holds(), 1, "one renewal per hold, however deep");
    lock.unlock(&me).await.unwrap();
    assert_eq!(c.renewed_holds(), 1);
    lock.unlock(&me).await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(c.renewed_holds(), 0);
}

#[tokio::test]
async fn dropping_a_guard_releases_it_in_the_background() {
    let server = RedisServer::start();
    // A 30 s lease: only the release can free the lock in time.
    let c = long_watchdog_client(&server).await;
    let lock = c.lock("dropped").unwrap();
    let me = c.new_owner();
    drop(lock.lock(&me).await.unwrap());
    assert_eq!(c.renewed_holds(), 0, "renewal stops at drop, synchronously");
    // The release runs in the background: a waiter is woken by its message.
    let other = within(WAKE, "next owner", lock.lock(&c.new_owner()))
        .await
        .unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 0);
    other.unlock().await.unwrap();
}

#[tokio::test]
async fn force_unlock_frees_wakes_and_reports_the_loss() {
    let server = RedisServer::start();
    // A 30 s lease, renewed every 10 s: only the forced unlock's message wakes the waiter in
    // time, and the server's script count is the waiter's attempts.
    let c = long_watchdog_client(&server).await;
    let lock = c.lock("forced").unwrap();
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    waiting(&server, &lock_channel("forced"), before + 2).await;

    assert!(lock.force_unlock().await.unwrap());
    within(WAKE, "holder told", holder.lease_lost()).await;
    let guard = within(WAKE, "waiter woken", waiter).await.unwrap().unwrap();
    assert!(matches!(holder.unlock().await, Err(Error::NotHeld { .. })));
    guard.unlock().await.unwrap();
    assert!(!lock.force_unlock().await.unwrap(), "nothing left to force");
}
