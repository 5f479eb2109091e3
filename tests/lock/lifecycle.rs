//! The client's life: shutdown, `Send + 'static` guards and futures, and the last handle dropped.

use super::*;

#[tokio::test]
async fn shutdown_closes_everything() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("shutdown").unwrap();
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    subscribed(&server, &lock_channel("shutdown")).await;
    c.shutdown().await;
    assert!(c.is_shut_down());
    within(5 * SECOND, "lease_lost at shutdown", guard.lease_lost()).await;
    assert!(matches!(
        within(5 * SECOND, "waiter", waiter).await.unwrap(),
        Err(Error::Closed)
    ));
    assert!(matches!(
        lock.try_lock(&c.new_owner()).await,
        Err(Error::Closed)
    ));
    // As in Redisson, the hold is not released: it expires with its lease.
    assert_eq!(server.command(&["EXISTS", "shutdown"]), "1");
    drop(guard);
}

#[test]
fn guards_handles_and_futures_are_send_and_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<LockClient>();
    send_sync_static::<redisson_lock::Lock>();
    send_sync_static::<LockGuard>();
    send_sync_static::<redisson_lock::LockOwner>();
    send_sync_static::<Error>();
    send_sync_static::<redisson_lock::FairLock>();
    send_sync_static::<redisson_lock::ReadWriteLock>();
    send_sync_static::<redisson_lock::ReadGuard>();
    send_sync_static::<redisson_lock::WriteGuard>();
    send_sync_static::<redisson_lock::FencedLock>();
    send_sync_static::<redisson_lock::FencedGuard>();
    send_sync_static::<redisson_lock::NonReentrantLock>();
    send_sync_static::<redisson_lock::NonReentrantFairLock>();
    send_sync_static::<redisson_lock::SpinLock>();
    send_sync_static::<redisson_lock::MultiLock>();
    send_sync_static::<redisson_lock::RedLock>();
    send_sync_static::<redisson_lock::MultiLockGuard>();
    // The futures are checked by the compiler alone: no client, no server, nothing runs.
    let _: fn(LockClient, LockGuard) = futures_are_spawnable;
}

/// Type-checked, never called: the futures of every kind must be spawnable (`Send + 'static`).
fn futures_are_spawnable(c: LockClient, guard: LockGuard) {
    fn send_static<T: Send + 'static>(_: &T) {}
    let lock = c.lock("bounds").unwrap();
    let me = c.new_owner();
    send_static(&lock.lock(&me));
    send_static(&lock.try_lock(&me));
    send_static(&lock.try_lock_for(&me, Duration::from_secs(1)));
    let (fair, rw) = (
        c.fair_lock("bounds-fair").unwrap(),
        c.read_write_lock("bounds-rw").unwrap(),
    );
    send_static(&fair.lock(&me));
    send_static(&fair.try_lock_for(&me, Duration::from_secs(1)));
    send_static(&rw.read(&me));
    send_static(&rw.try_write_for(&me, Duration::from_secs(1)));
    send_static(&c.fenced_lock("bounds-fenced").unwrap().lock(&me));
    send_static(
        &c.spin_lock("bounds-spin")
            .unwrap()
            .try_lock_for(&me, Duration::from_secs(1)),
    );
    send_static(&c.non_reentrant_lock("bounds-nr").unwrap().lock(&me));
    let multi = c
        .multi_lock([c.lock("bounds-a").unwrap(), c.lock("bounds-b").unwrap()])
        .unwrap();
    send_static(&multi.lock(&me));
    send_static(
        &c.red_lock([c.lock("bounds-a").unwrap()])
            .unwrap()
            .try_lock_for(&me, Duration::from_secs(1)),
    );
    send_static(&guard.lease_lost());
    send_static(&guard.unlock());
    let _ = Arc::new(c);
}

#[tokio::test]
async fn dropping_every_handle_closes_the_clients_connections() {
    let server = RedisServer::start();
    let connections = || server.command(&["CLIENT", "LIST"]).lines().count();
    let c = client(&server).await;
    let guard = c
        .lock("dropped-client")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    assert_eq!(
        connections(),
        3,
        "commands, subscriber, and the harness's own"
    );
    drop(guard);
    drop(c);
    // The last handle gone, the background tasks stop and the connections are closed.
    eventually(Duration::from_secs(5), "connections closed", || {
        connections() == 1
    })
    .await;
}
