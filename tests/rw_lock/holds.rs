//! Holds over time: other clients' unlocks, the watchdog, reentry's TTLs and dropped acquires.

use super::*;

#[tokio::test]
async fn another_clients_read_unlock_does_not_purge_our_live_readers() {
    let server = RedisServer::start();
    let (ours, theirs) = (client(&server).await, client(&server).await);
    let name = "no-purge";
    let lock = ours.read_write_lock(name).unwrap(); // watchdog: 900 ms, renewed every 300 ms
    let me = ours.new_owner();
    let outer = lock.read(&me).await.unwrap();
    let inner = lock.read(&me).await.unwrap();
    let other_lock = theirs.read_write_lock(name).unwrap();

    // Over twice the watchdog timeout: without renewal our timeout keys would be gone.
    let until = Instant::now() + Duration::from_millis(2200);
    while Instant::now() < until {
        let reader = theirs.new_owner();
        other_lock
            .read(&reader)
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
        assert_eq!(lock.read_hold_count(&me).await.unwrap(), 2);
        for n in 1..=2 {
            let ttl = pttl(&server, &timeout_key(name, &me.to_string(), n));
            assert!(ttl > 0 && ttl <= 900, "timeout key #{n}: {ttl}");
        }
        let ttl = pttl(&server, name);
        assert!(ttl > 0 && ttl <= 900, "hash ttl {ttl}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(other_lock
        .try_write(&theirs.new_owner())
        .await
        .unwrap()
        .is_none());
    assert!(!outer.is_lease_lost() && !inner.is_lease_lost());
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
}

#[tokio::test]
async fn the_watchdog_keeps_read_and_write_holds_alive() {
    let server = RedisServer::start();
    let c = client(&server).await; // 900 ms lease, renewed every 300 ms
    let (reader, writer) = (c.new_owner(), c.new_owner());
    let read_lock = c.read_write_lock("kept-read").unwrap();
    let write_lock = c.read_write_lock("kept-write").unwrap();
    let reading = read_lock.read(&reader).await.unwrap();
    let writing = write_lock.write(&writer).await.unwrap();
    assert_eq!(c.renewed_holds(), 2);
    let timeout = timeout_key("kept-read", &reader.to_string(), 1);
    let stranger = c.new_owner();

    let until = Instant::now() + Duration::from_millis(3000);
    while Instant::now() < until {
        for key in ["kept-read", timeout.as_str(), "kept-write"] {
            let ttl = pttl(&server, key);
            assert!(ttl > 0 && ttl <= 900, "{key}: pttl {ttl}");
        }
        assert!(write_lock.try_read(&stranger).await.unwrap().is_none());
        assert!(read_lock.try_write(&stranger).await.unwrap().is_none());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!reading.is_lease_lost() && !writing.is_lease_lost());
    assert_eq!(
        server.command(&["HGET", "kept-write", &write_field(&writer)]),
        "1"
    );

    // A deleted read hold is reported lost at the next renewal, like any other.
    server.command(&["DEL", "kept-read"]);
    within(5 * SECOND, "lease_lost", reading.lease_lost()).await;
    assert!(!writing.is_lease_lost());
    assert_eq!(c.renewed_holds(), 1);
    assert!(matches!(reading.unlock().await, Err(Error::NotHeld { .. })));
    writing.unlock().await.unwrap();
    assert_eq!(c.renewed_holds(), 0);
}

#[tokio::test]
async fn read_reentry_keeps_the_longer_ttl_and_write_reentry_adds() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let field = me.to_string();
    let name = "ttl-read";
    let lock = c.read_write_lock(name).unwrap();

    let thirty = read_with_lease(&lock, &me, 30_000).await;
    let ten = read_with_lease(&lock, &me, 10_000).await;
    let ttl = pttl(&server, name);
    assert!((20_000..=30_000).contains(&ttl), "max kept: {ttl}");
    assert!(pttl(&server, &timeout_key(name, &field, 1)) > 20_000);
    let ttl2 = pttl(&server, &timeout_key(name, &field, 2));
    assert!((1..=10_000).contains(&ttl2), "hold #2's own lease: {ttl2}");
    let sixty = read_with_lease(&lock, &me, 60_000).await;
    assert!(pttl(&server, name) > 50_000);
    // A read release shrinks the TTL to the longest live hold (#3's key goes first).
    sixty.unlock().await.unwrap();
    let ttl = pttl(&server, name);
    assert!((15_000..=30_000).contains(&ttl), "shrunk to #1: {ttl}");
    assert_eq!(
        server.command(&["EXISTS", &timeout_key(name, &field, 3)]),
        "0"
    );
    ten.unlock().await.unwrap();
    thirty.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
    assert_eq!(server.command(&["KEYS", "*rwlock_timeout*"]), "");

    // testWriteLockExpiration: write reentry adds its lease to the TTL.
    let name = "ttl-write";
    let lock = c.read_write_lock(name).unwrap();
    let thirty = write_with_lease(&lock, &me, 30_000).await;
    let ten = write_with_lease(&lock, &me, 10_000).await;
    let ttl = pttl(&server, name);
    assert!((35_000..=40_000).contains(&ttl), "added: {ttl}");
    assert!(lock
        .clone()
        .with_lease(fixed(1_000))
        .try_write_for(&c.new_owner(), Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    // A partial write release keeps the key alive for the owner's longest live hold (the
    // 30 s one); Java would reset the TTL to the released hold's 10 s lease.
    ten.unlock().await.unwrap();
    let ttl = pttl(&server, name);
    assert!(
        (15_000..=30_000).contains(&ttl),
        "kept for the longer hold: {ttl}"
    );
    thirty.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_no_stray_hold() {
    let server = RedisServer::start();
    let (holder_client, c) = (client(&server).await, client(&server).await);
    let name = "rw-cancel";
    // Long fixed leases: only the release of an orphaned hold can clear it in time.
    let lock = c.read_write_lock(name).unwrap().with_lease(long());
    let holder_lock = holder_client
        .read_write_lock(name)
        .unwrap()
        .with_lease(long());

    // Mid-flight, uncontended.
    let mut acquired = 0;
    for i in 0..200 {
        let owner = c.new_owner();
        // On timeout the future is dropped: whatever it took is released in the background.
        if i % 2 == 0 {
            if let Ok(guard) = cut_off(spread(i, 400), lock.read(&owner)).await {
                acquired += 1;
                guard.unwrap().unlock().await.unwrap();
            }
        } else if let Ok(guard) = cut_off(spread(i, 400), lock.write(&owner)).await {
            acquired += 1;
            guard.unwrap().unlock().await.unwrap();
        }
    }
    assert!(acquired < 200, "some acquires were dropped");

    // Mid-wait: a reader waits behind a writer, a writer behind a reader.
    let holder = holder_client.new_owner();
    for i in 0..40 {
        let owner = c.new_owner();
        let (pending, held) = if i % 2 == 0 {
            let held = holder_lock.write(&holder).await.unwrap();
            let acquire = lock.read(&owner);
            let pending = tokio::spawn(async move { drop(acquire.await.unwrap()) });
            (pending, Ok(held))
        } else {
            let held = holder_lock.read(&holder).await.unwrap();
            let acquire = lock.write(&owner);
            let pending = tokio::spawn(async move { drop(acquire.await.unwrap()) });
            (pending, Err(held))
        };
        tokio::time::sleep(spread(i, 3_000)).await;
        match held {
            Ok(write) => write.unlock().await.unwrap(),
            Err(read) => read.unlock().await.unwrap(),
        }
        tokio::time::sleep(spread(i + 7, 1_500)).await;
        pending.abort();
        let _ = pending.await;
    }

    eventually(Duration::from_secs(5), "no stray hold", || {
        server.command(&["EXISTS", name]) == "0"
    })
    .await;
    // Dropped handles delete the unlock latches they kept for their next releases.
    drop((lock, holder_lock));
    eventually(Duration::from_secs(5), "no timeout key, no latch", || {
        server.command(&["DBSIZE"]) == "0"
    })
    .await;
    eventually(Duration::from_secs(5), "no subscription", || {
        c.subscribed_channels() == 0 && no_channels(&server)
    })
    .await;
    assert_eq!(c.renewed_holds(), 0);
}
