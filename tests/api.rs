//! The public surface is uniform: every exclusive kind offers the same methods with the same
//! meaning, every guard its remaining lease, and errors name the lock as the user named it.

mod support;

use std::time::Duration;

use redisson_lock::kind::{self, Kind};
use redisson_lock::{Error, ExclusiveLock, Lease, LockOwner, MultiMember, WaitStrategy};
use support::*;

/// The same calls on a lock of any exclusive kind: written once, generic over the kinds.
async fn uniform<K: Kind>(lock: ExclusiveLock<K>, me: &LockOwner, other: &LockOwner) {
    let lock = lock
        .with_lease(Lease::fixed(Duration::from_secs(30)).unwrap())
        .with_wait_strategy(WaitStrategy::PubSub);
    assert_eq!(lock.lease(), Lease::fixed(Duration::from_secs(30)).unwrap());
    assert_eq!(lock.wait_strategy(), WaitStrategy::PubSub);
    assert!(!lock.is_locked().await.unwrap(), "{}", lock.name());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);

    let guard = lock.lock(me).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.is_held_by(me).await.unwrap());
    assert!(!lock.is_held_by(other).await.unwrap());
    assert_eq!(lock.hold_count(me).await.unwrap(), 1);
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(left > Duration::from_secs(20) && left <= Duration::from_secs(30));
    let guard_left = guard.remaining_lease().await.unwrap().unwrap();
    assert!(guard_left > Duration::from_secs(20), "{}", lock.name());
    assert!(lock.try_lock(other).await.unwrap().is_none());
    assert!(lock
        .try_lock_for(other, Duration::from_millis(50))
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();

    // Java style: detach, then release by owner.
    lock.try_lock(me).await.unwrap().unwrap().detach();
    lock.unlock(me).await.unwrap();
    assert!(matches!(lock.unlock(me).await, Err(Error::NotHeld { .. })));

    let guard = lock.lock(other).await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert!(!lock.force_unlock().await.unwrap());
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    // Every guard reports its fencing token the same way: `Some` exactly for a fenced lock.
    let guard = lock.lock(me).await.unwrap();
    assert_eq!(
        guard.fence_token().is_some(),
        lock.name().ends_with("-fenced")
    );
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn every_exclusive_kind_offers_the_same_methods() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (&c.new_owner(), &c.new_owner());
    uniform(c.lock("uniform-plain").unwrap(), me, other).await;
    uniform(c.fair_lock("uniform-fair").unwrap(), me, other).await;
    uniform(c.fenced_lock("uniform-fenced").unwrap(), me, other).await;
    uniform(c.spin_lock("uniform-spin").unwrap(), me, other).await;
    uniform(c.non_reentrant_lock("uniform-nr").unwrap(), me, other).await;
    uniform(c.non_reentrant_fair_lock("uniform-nrf").unwrap(), me, other).await;
    // The kind as a type parameter names the same lock as its constructor.
    let fair = c.exclusive_lock::<kind::Fair>("uniform-fair").unwrap();
    let held = c.fair_lock("uniform-fair").unwrap().lock(me).await.unwrap();
    assert!(fair.is_held_by(me).await.unwrap());
    assert!(format!("{fair:?}").starts_with("FairLock"), "{fair:?}");
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn read_write_guards_report_their_lease_and_either_mode_counts_as_locked() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c
        .read_write_lock("rw-uniform")
        .unwrap()
        .with_lease(Lease::fixed(Duration::from_secs(30)).unwrap());
    assert!(!lock.is_locked().await.unwrap());
    let read = lock.read(&me).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(read.remaining_lease().await.unwrap().unwrap() > Duration::from_secs(20));
    read.unlock().await.unwrap();
    let write = lock.write(&me).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(write.remaining_lease().await.unwrap().unwrap() > Duration::from_secs(20));
    write.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn a_multi_lock_takes_members_of_every_exclusive_kind() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let rw = c.read_write_lock("m-rw").unwrap();
    let members: Vec<MultiMember> = vec![
        c.lock("m-plain").unwrap().into(),
        c.fair_lock("m-fair").unwrap().into(),
        c.fenced_lock("m-fenced").unwrap().into(),
        c.spin_lock("m-spin").unwrap().into(),
        (&c.non_reentrant_lock("m-nr").unwrap()).into(),
        c.non_reentrant_fair_lock("m-nrf").unwrap().into(),
        MultiMember::write_side(&rw),
    ];
    let multi = c.multi_lock(members).unwrap();
    let guard = multi.lock(&me).await.unwrap();
    assert_eq!(guard.held(), 7);
    for name in [
        "m-plain", "m-fair", "m-fenced", "m-spin", "m-nr", "m-nrf", "m-rw",
    ] {
        assert_eq!(server.command(&["EXISTS", name]), "1", "{name}");
    }
    guard.unlock().await.unwrap();
    for name in [
        "m-plain", "m-fair", "m-fenced", "m-spin", "m-nr", "m-nrf", "m-rw",
    ] {
        assert_eq!(server.command(&["EXISTS", name]), "0", "{name}");
    }
}

#[tokio::test]
async fn errors_name_the_lock_as_the_user_named_it() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.name_prefix("app:")).await;
    let me = c.new_owner();
    server.command(&["SET", "app:taken-by-a-string", "x"]);
    let lock = c.lock("taken-by-a-string").unwrap();
    for result in [
        lock.try_lock(&me).await.map(drop),
        lock.is_locked().await.map(drop),
        lock.hold_count(&me).await.map(drop),
    ] {
        match result {
            Err(Error::WrongType { name }) => assert_eq!(name, "taken-by-a-string"),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    match c.lock("free").unwrap().unlock(&me).await {
        Err(Error::NotHeld { name, .. }) => assert_eq!(name, "free"),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert_eq!(server.command(&["GET", "app:taken-by-a-string"]), "x");
}

/// An owner is an identity, not a connection: a lock of another client (as a RedLock's
/// members on independent servers are) takes, re-enters, renews and releases holds for it,
/// and still excludes every other owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_of_one_client_holds_through_another_clients_lock() {
    let server = RedisServer::start();
    let (first, second) = (client(&server).await, client(&server).await);
    let owner = first.new_owner();
    let name = "api:shared-owner";
    let through_second = second.lock(name).unwrap().lock(&owner).await.unwrap();
    // The first client's lock sees the same owner: a re-entry, not a second holder.
    let through_first = first.lock(name).unwrap().lock(&owner).await.unwrap();
    assert_eq!(
        first.lock(name).unwrap().hold_count(&owner).await.unwrap(),
        2
    );
    let other = second.new_owner();
    assert!(second
        .lock(name)
        .unwrap()
        .try_lock(&other)
        .await
        .unwrap()
        .is_none());
    // Renewed past twice its lease (the test clients' watchdog lease is 900 ms).
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(pttl(&server, name) > 0, "the hold was renewed");
    assert!(!through_second.is_lease_lost());
    through_second.unlock().await.unwrap();
    assert_eq!(
        first.lock(name).unwrap().hold_count(&owner).await.unwrap(),
        1
    );
    through_first.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
    first.shutdown().await;
    second.shutdown().await;
}
