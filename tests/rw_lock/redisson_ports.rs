//! Ports of Redisson's `RedissonReadWriteLockTest` (protocol §11.5) that apply.

use super::*;

/// testReadLockExpiration, without the sleeps: the writer gets in right after the longer
/// reader's unlock, woken by its message.
#[tokio::test]
async fn read_lock_expiration() {
    let name = "read-expiration";
    let (server, c, lock) = on_a_new_server(name).await;
    // Leases far longer than the test: only the unlocks can let the writer in. Nothing
    // renews, so the server's script count is the writer's attempts.
    let reader1 = read_with_lease(&lock, &c.new_owner(), 60_000).await;
    let reader2 = read_with_lease(&lock, &c.new_owner(), 30_000).await;
    let before = evalsha_calls(&server);
    let writing = lock.clone().with_lease(fixed(2_000)).write(&c.new_owner());
    let writer = tokio::spawn(async move {
        let guard = writing.await.unwrap();
        (guard, Instant::now())
    });
    waiting(&server, &channel(name), before + 2).await;
    reader2.unlock().await.unwrap();
    assert!(!writer.is_finished(), "the first reader still holds");
    let last_unlock = Instant::now();
    reader1.unlock().await.unwrap();
    let (writer, acquired) = within(WAKE, "writer", writer).await.unwrap();
    assert!(
        acquired >= last_unlock,
        "the writer waited for both readers"
    );
    writer.unlock().await.unwrap();
}

/// testWriteReadReentrancy (an upgrade is an error here, `false` in Java).
#[tokio::test]
async fn write_read_reentrancy() {
    let (_server, c, lock) = on_a_new_server("write-read").await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let writing = lock.write(&me).await.unwrap();
    let reading = lock.try_read(&me).await.unwrap().expect("downgrade");
    assert!(lock.try_read(&other).await.unwrap().is_none());
    writing.unlock().await.unwrap();
    assert_would_deadlock(lock.try_write(&me).await);
    assert!(lock.try_write(&other).await.unwrap().is_none());
    reading.unlock().await.unwrap();
    lock.try_write(&me)
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
}

/// testWriteLock and testWR.
#[tokio::test]
async fn write_lock() {
    let (_server, c, lock) = on_a_new_server("write-lock").await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let outer = lock.write(&me).await.unwrap();
    let inner = lock.try_write(&me).await.unwrap().expect("re-entered");
    assert!(!lock.is_write_held_by(&other).await.unwrap());
    assert!(lock.is_write_locked().await.unwrap());
    assert!(lock.try_read(&other).await.unwrap().is_none());
    inner.unlock().await.unwrap();
    assert_eq!(lock.write_hold_count(&me).await.unwrap(), 1);
    let reading = lock.try_read(&me).await.unwrap().expect("downgrade");
    assert!(lock.is_write_held_by(&me).await.unwrap());
    // testWR: releasing the read side leaves the write side held.
    let extra = lock.read(&me).await.unwrap();
    extra.unlock().await.unwrap();
    assert!(lock.is_write_locked().await.unwrap());
    outer.unlock().await.unwrap(); // mode becomes read
    let r1 = lock.try_read(&other).await.unwrap().expect("read mode");
    let r2 = lock.try_read(&other).await.unwrap().expect("re-entered");
    assert!(lock.try_write(&c.new_owner()).await.unwrap().is_none());
    assert!(!lock.is_write_locked().await.unwrap());
    assert!(!lock.is_write_held_by(&me).await.unwrap());
    assert!(lock.force_unlock_read().await.unwrap());
    assert!(!lock.is_read_locked().await.unwrap());
    for guard in [reading, r1, r2] {
        assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    }
}

/// testMultiRead.
#[tokio::test]
async fn multi_read() {
    let (_server, c, lock) = on_a_new_server("multi-read").await;
    assert!(!lock.force_unlock_read().await.unwrap());
    let (reader1, reader2, writer) = (c.new_owner(), c.new_owner(), c.new_owner());
    let first = lock.read(&reader1).await.unwrap();
    assert!(lock.try_write(&writer).await.unwrap().is_none());
    let second = lock.read(&reader2).await.unwrap();
    first.unlock().await.unwrap();
    assert!(lock.try_write(&writer).await.unwrap().is_none());
    second.unlock().await.unwrap();
    let writing = lock.try_write(&writer).await.unwrap().expect("free");
    assert!(lock.is_write_locked().await.unwrap());
    assert!(lock.is_write_held_by(&writer).await.unwrap());
    writing.unlock().await.unwrap();
    assert!(!lock.is_write_locked().await.unwrap());
    let writing = lock.try_write(&writer).await.unwrap().expect("free again");
    assert!(lock.force_unlock_write().await.unwrap());
    assert!(writing.unlock().await.is_err());
}

/// testForceUnlock.
#[tokio::test]
async fn force_unlock_frees_only_its_own_mode() {
    let (_server, c, lock) = on_a_new_server("force").await;
    let me = c.new_owner();

    let reading = lock.read(&me).await.unwrap();
    assert!(!lock.force_unlock_write().await.unwrap());
    assert!(lock.is_read_locked().await.unwrap());
    assert!(
        !reading.is_lease_lost(),
        "a refused force-unlock forgets nothing"
    );
    assert_eq!(c.renewed_holds(), 1);
    assert!(lock.force_unlock_read().await.unwrap());
    assert!(!lock.is_read_locked().await.unwrap());
    within(5 * SECOND, "reader told", reading.lease_lost()).await;

    let writing = lock.write(&me).await.unwrap();
    assert!(!lock.force_unlock_read().await.unwrap());
    assert!(lock.is_write_locked().await.unwrap());
    assert!(!writing.is_lease_lost());
    assert!(lock.force_unlock_write().await.unwrap());
    assert!(!lock.is_write_locked().await.unwrap());
    assert!(!lock.is_read_locked().await.unwrap());
    within(5 * SECOND, "writer told", writing.lease_lost()).await;
    assert_eq!(c.renewed_holds(), 0);
}

/// testHoldCount, and the Java-style unlock_read / unlock_write of detached holds.
#[tokio::test]
async fn hold_counts() {
    let (server, c, lock) = on_a_new_server("hold-count").await;
    let me = c.new_owner();
    for write in [false, true] {
        let count = |lock: ReadWriteLock, me: LockOwner| async move {
            if write {
                lock.write_hold_count(&me).await.unwrap()
            } else {
                lock.read_hold_count(&me).await.unwrap()
            }
        };
        let take = || {
            let (lock, me) = (lock.clone(), me.clone());
            async move {
                if write {
                    lock.write(&me).await.unwrap().detach()
                } else {
                    lock.read(&me).await.unwrap().detach()
                }
            }
        };
        let release = || {
            let (lock, me) = (lock.clone(), me.clone());
            async move {
                if write {
                    lock.unlock_write(&me).await
                } else {
                    lock.unlock_read(&me).await
                }
            }
        };
        assert_eq!(count(lock.clone(), me.clone()).await, 0);
        take().await;
        assert_eq!(count(lock.clone(), me.clone()).await, 1);
        release().await.unwrap();
        assert_eq!(count(lock.clone(), me.clone()).await, 0);
        take().await;
        take().await;
        assert_eq!(count(lock.clone(), me.clone()).await, 2);
        assert_eq!(c.renewed_holds(), 1, "one registration per hold field");
        release().await.unwrap();
        assert_eq!(count(lock.clone(), me.clone()).await, 1);
        release().await.unwrap();
        assert_eq!(count(lock.clone(), me.clone()).await, 0);
        assert!(matches!(release().await, Err(Error::NotHeld { .. })));
        assert_eq!(c.renewed_holds(), 0);
    }
    assert_eq!(server.command(&["EXISTS", "hold-count"]), "0");
}

/// testExpireRead and testExpireWrite, with short leases.
#[tokio::test]
async fn expired_read_and_write_leases() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.read_write_lock("expire").unwrap().with_lease(fixed(400));

    let first = lock.read(&c.new_owner()).await.unwrap();
    let before = evalsha_calls(&server);
    let second = lock.read(&c.new_owner()).await.unwrap();
    assert_eq!(
        evalsha_calls(&server),
        before + 1,
        "readers share: in at the first attempt"
    );
    assert_eq!(c.subscribed_channels(), 0, "nothing waited");
    second.unlock().await.unwrap();
    first.unlock().await.unwrap();

    // The second writer gets in when the first one's lease runs out, not before.
    let start = Instant::now();
    let first = lock.write(&c.new_owner()).await.unwrap();
    let second = within(5 * SECOND, "second writer", lock.write(&c.new_owner()))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(380), "{waited:?}");
    assert!(matches!(first.unlock().await, Err(Error::NotHeld { .. })));
    second.unlock().await.unwrap();
}

/// testMultiInstanceReadLockZombieCleanup, with a short watchdog.
#[tokio::test]
async fn a_dead_clients_reader_is_purged_by_a_live_readers_unlock() {
    let server = RedisServer::start();
    let (dying, living) = (client(&server).await, client(&server).await);
    let name = "zombie";
    let zombie = dying.new_owner();
    dying
        .read_write_lock(name)
        .unwrap()
        .read(&zombie)
        .await
        .unwrap()
        .detach();
    dying.shutdown().await; // holds are not released, renewal stops

    let lock = living.read_write_lock(name).unwrap();
    let reading = lock.read(&living.new_owner()).await.unwrap();
    // The zombie's timeout key runs out; our watchdog keeps the hash (and our key) alive.
    let zombie_key = timeout_key(name, &zombie.to_string(), 1);
    eventually(5 * SECOND, "zombie key expired", || {
        server.command(&["EXISTS", &zombie_key]) == "0"
    })
    .await;
    assert_eq!(lock.read_hold_count(&zombie).await.unwrap(), 1);
    reading.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0", "zombie purged");
    lock.try_write(&living.new_owner())
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
}

/// Redis's clock moves while a script runs, so a renewal that set the keys' TTLs before the
/// hash's could end the hash a millisecond after its readers' keys; the release of the latest
/// hold would then look like an earlier one's and leave dead readers in place. Thousands of
/// holds make the renewal script run for milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_never_ends_the_hash_after_its_readers_keys() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "instants";
    let (lock, owner) = (c.read_write_lock(name).unwrap(), c.new_owner());
    const HOLDS: u32 = 4_000;
    let mut guards = Vec::new();
    for _ in 0..HOLDS {
        guards.push(lock.read(&owner).await.unwrap());
    }
    // The expiry instants of the hash and of the first-ending timeout key, read atomically.
    const INSTANTS: &str = "local first = nil \
        for n = 1, tonumber(ARGV[1]) do \
            local key_at = at(KEYS[2] .. ':' .. n) \
            if not first or key_at < first then first = key_at end \
        end \
        return {at(KEYS[1]), first}";
    let instants_script = format!("{}{INSTANTS}", support::server::lua_at());
    let prefix = timeout_key(name, &owner.to_string(), 1);
    let prefix = prefix.trim_end_matches(":1");
    let instants = || {
        let reply = server.command(&[
            "EVAL",
            &instants_script,
            "2",
            name,
            prefix,
            &HOLDS.to_string(),
        ]);
        let mut lines = reply.lines().map(|line| line.parse::<i64>().unwrap());
        (lines.next().unwrap(), lines.next().unwrap())
    };
    let (before, _) = instants();
    eventually(10 * SECOND, "a renewal", || instants().0 != before).await;
    let (hash, first_key) = instants();
    assert!(
        hash <= first_key,
        "the hash ends at {hash}, after a key that ends at {first_key}"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    assert_eq!(server.command(&["EXISTS", name]), "0");
}

/// testReadLockLeaseTimeoutDiffThreadsRRW, scaled down: another reader's unlock shrinks
/// the lock's TTL to the remaining reader's lease, and a writer gets in when that ends.
#[tokio::test]
async fn another_readers_unlock_shrinks_the_ttl_to_the_remaining_reader() {
    let name = "rrw";
    let (server, c, lock) = on_a_new_server(name).await;
    const A_LEASE: Duration = Duration::from_secs(4);
    // a is never released; its lease ends on the server between the two instants below.
    let taking_a = Instant::now();
    let a = lock
        .clone()
        .with_lease(Lease::fixed(A_LEASE).unwrap())
        .read(&c.new_owner())
        .await
        .unwrap();
    let (a_ends_first, a_ends_last) = (taking_a + A_LEASE, Instant::now() + A_LEASE);
    // Time passing is the scenario: a's remaining lease gets shorter than b's.
    tokio::time::sleep(SECOND).await;
    let b = read_with_lease(&lock, &c.new_owner(), 30_000).await;
    assert!(pttl(&server, name) > 20_000, "b's longer lease");
    b.unlock().await.unwrap();
    let asked = Instant::now();
    let ttl = pttl(&server, name);
    let answered = Instant::now();
    // a's remaining lease when the server answered, as closely as this process can tell.
    let ms = |d: Duration| d.as_millis() as i64;
    let least = ms(a_ends_first.saturating_duration_since(answered)) - 5;
    let most = ms(a_ends_last.saturating_duration_since(asked)) + 5;
    assert!(
        (least..=most).contains(&ttl),
        "shrunk to a's remaining {least}..={most} ms: {ttl}"
    );
    let writer = within(
        Duration::from_secs(30),
        "writer",
        lock.try_write_for(&c.new_owner(), Duration::from_secs(20)),
    )
    .await
    .unwrap()
    .expect("a's lease ran out");
    // In when a's lease ended, not before, and long before b's 30 s one would have.
    let acquired = Instant::now();
    assert!(acquired + Duration::from_millis(5) >= a_ends_first);
    let late = acquired.saturating_duration_since(a_ends_last);
    assert!(late < 5 * SECOND, "{late:?} after a's lease");
    writer.unlock().await.unwrap();
    a.detach(); // its lease ended; nothing to release
}
