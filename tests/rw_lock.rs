//! The read-write lock (Redisson's `RReadWriteLock`, protocol §5): shared readers, exclusive
//! writers, downgrade and the refused upgrade, wake-ups, the readers' timeout keys and their
//! renewal, cancellation, and states written exactly as Java writes them. Ports of
//! `RedissonReadWriteLockTest` (§11.5) that apply are at the end.

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::KeysInterface;
use redisson_lock::{Error, Lease, LockClient, LockOwner, ReadGuard, ReadWriteLock, WriteGuard};
use support::*;
use tokio::sync::Barrier;

/// A lease that outlives every test.
fn long() -> Lease {
    Lease::fixed(Duration::from_secs(60)).unwrap()
}

/// The lock hash as a map (empty when the key does not exist).
fn hash(server: &RedisServer, name: &str) -> BTreeMap<String, String> {
    let reply = server.command(&["HGETALL", name]);
    let lines: Vec<&str> = reply.lines().collect();
    lines
        .chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect()
}

/// Hold #n's timeout key of reader `field` on lock `name` (a name without `{`).
fn timeout_key(name: &str, field: &str, n: u32) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{n}")
}

fn channel(name: &str) -> String {
    format!("redisson_rwlock:{{{name}}}")
}

/// A new server, a client of it, and the read-write lock `name` there.
async fn on_a_new_server(name: &str) -> (RedisServer, LockClient, ReadWriteLock) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.read_write_lock(name).unwrap();
    (server, c, lock)
}

/// A read hold of `owner` on `lock` with a fixed lease of `ms`.
async fn read_with_lease(lock: &ReadWriteLock, owner: &LockOwner, ms: u64) -> ReadGuard {
    let lock = lock.clone().with_lease(fixed(ms));
    lock.read(owner).await.unwrap()
}

/// A write hold of `owner` on `lock` with a fixed lease of `ms`.
async fn write_with_lease(lock: &ReadWriteLock, owner: &LockOwner, ms: u64) -> WriteGuard {
    let lock = lock.clone().with_lease(fixed(ms));
    lock.write(owner).await.unwrap()
}

fn write_field(owner: &LockOwner) -> String {
    format!("{owner}:write")
}

fn assert_would_deadlock<T: std::fmt::Debug>(result: redisson_lock::Result<T>) {
    match result {
        Err(Error::WouldDeadlock(_)) => {}
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_of_two_clients_hold_at_the_same_time() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    const READERS: usize = 6;
    let barrier = Arc::new(Barrier::new(READERS));
    let mut tasks = Vec::new();
    for i in 0..READERS {
        let client = clients[i % 2].clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let lock = client.read_write_lock("overlap").unwrap();
            let guard = lock.read(&client.new_owner()).await.unwrap();
            // Every reader gets here while holding: they overlap, or this never completes.
            let leader = barrier.wait().await.is_leader();
            if leader {
                assert!(lock.is_read_locked().await.unwrap());
                assert!(!lock.is_write_locked().await.unwrap());
                let writer = client.new_owner();
                assert!(lock.try_write(&writer).await.unwrap().is_none());
            }
            barrier.wait().await;
            guard.unlock().await.unwrap();
        }));
    }
    all_finish(10 * SECOND, "overlapping readers", tasks).await;
    assert_eq!(server.command(&["EXISTS", "overlap"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_exclude_everyone_and_lose_no_update() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let counter = "rw:counter";
    const WRITERS: usize = 4;
    const WRITES: usize = 15;
    const READERS: usize = 4;
    const READS: usize = 15;

    let mut tasks = Vec::new();
    for t in 0..WRITERS {
        let client = clients[t % 2].clone();
        tasks.push(tokio::spawn(async move {
            let (owner, lock) = (
                client.new_owner(),
                client.read_write_lock("rw-mutex").unwrap(),
            );
            for _ in 0..WRITES {
                let guard = lock.write(&owner).await.unwrap();
                racy_increment(&client, counter).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    for t in 0..READERS {
        let client = clients[t % 2].clone();
        tasks.push(tokio::spawn(async move {
            let (owner, lock) = (
                client.new_owner(),
                client.read_write_lock("rw-mutex").unwrap(),
            );
            for _ in 0..READS {
                let guard = lock.read(&owner).await.unwrap();
                let before: Option<i64> = client.redis().get(counter).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let after: Option<i64> = client.redis().get(counter).await.unwrap();
                assert_eq!(before, after, "a writer ran while a reader held the lock");
                guard.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    all_finish(Duration::from_secs(30), "all tasks", tasks).await;
    assert_eq!(
        server.command(&["GET", counter]),
        (WRITERS * WRITES).to_string()
    );
    assert_eq!(server.command(&["EXISTS", "rw-mutex"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_downgrades_and_the_read_mode_still_excludes_writers() {
    let server = RedisServer::start();
    let (c, other_client) = (client(&server).await, client(&server).await);
    let name = "downgrade";
    // Long fixed leases: only messages can wake waiters in time.
    let lock = c.read_write_lock(name).unwrap().with_lease(long());
    let other = other_client
        .read_write_lock(name)
        .unwrap()
        .with_lease(long());
    let (me, someone) = (c.new_owner(), other_client.new_owner());

    let writing = lock.write(&me).await.unwrap();
    assert!(
        !lock.is_read_locked().await.unwrap(),
        "testReadLockIsLocked"
    );
    let reading = lock.read(&me).await.unwrap();
    assert!(lock.is_read_locked().await.unwrap());
    assert!(lock.is_write_locked().await.unwrap());
    assert_eq!(
        hash(&server, name),
        BTreeMap::from([
            ("mode".to_owned(), "write".to_owned()),
            (write_field(&me), "1".to_owned()),
            (me.to_string(), "1".to_owned()),
        ])
    );
    assert!(other.try_read(&someone).await.unwrap().is_none());
    assert!(other.try_write(&someone).await.unwrap().is_none());

    // Fixed leases: nothing renews, so the server's script count is the reader's attempts.
    let before = evalsha_calls(&server);
    let waiting_reader = tokio::spawn(other.read(&someone));
    waiting(&server, &channel(name), before + 2).await;

    writing.unlock().await.unwrap();
    assert_eq!(
        hash(&server, name).get("mode").map(String::as_str),
        Some("read")
    );
    assert!(!lock.is_write_locked().await.unwrap());
    assert!(lock.is_read_locked().await.unwrap());
    assert!(other
        .try_write(&other_client.new_owner())
        .await
        .unwrap()
        .is_none());
    // The downgrade tells the waiting readers (an addition to Java, which stays silent).
    let theirs = within(WAKE, "waiting reader", waiting_reader)
        .await
        .unwrap()
        .unwrap();
    assert!(other
        .try_write(&other_client.new_owner())
        .await
        .unwrap()
        .is_none());
    reading.unlock().await.unwrap();
    assert!(lock.is_read_locked().await.unwrap(), "their hold remains");
    theirs.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_is_refused_at_once_and_changes_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "upgrade";
    let lock = c.read_write_lock(name).unwrap().with_lease(long());
    let me = c.new_owner();
    let outer = lock.read(&me).await.unwrap();
    let inner = lock.read(&me).await.unwrap();
    let before = (
        hash(&server, name),
        server.command(&["KEYS", "*"]).lines().count(),
    );

    // Not waited: far below the minute the timed call may wait and the 60 s lease.
    let start = Instant::now();
    assert_would_deadlock(lock.try_write(&me).await);
    assert_would_deadlock(within(5 * SECOND, "write()", lock.write(&me)).await);
    assert_would_deadlock(lock.try_write_for(&me, Duration::from_secs(60)).await);
    assert!(start.elapsed() < 5 * SECOND, "not waited");
    assert_eq!(
        (
            hash(&server, name),
            server.command(&["KEYS", "*"]).lines().count()
        ),
        before
    );
    assert!(!lock.is_write_held_by(&me).await.unwrap());
    assert_eq!(lock.read_hold_count(&me).await.unwrap(), 2);
    assert_eq!(c.subscribed_channels(), 0, "nothing waited");

    // Another reader present: still refused, not queued.
    let other = c.new_owner();
    let theirs = lock.read(&other).await.unwrap();
    assert_would_deadlock(lock.try_write_for(&me, Duration::from_secs(60)).await);
    theirs.unlock().await.unwrap();

    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    lock.try_write(&me)
        .await
        .unwrap()
        .expect("free once the reads are released")
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_that_starts_reading_fails_instead_of_waiting_for_itself() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c
        .read_write_lock("upgrade-later")
        .unwrap()
        .with_lease(long());
    let (me, other) = (c.new_owner(), c.new_owner());
    // The other reader's lease ends soon, but long after the same owner's read below on a
    // loaded machine: the waiting writer looks again then.
    let theirs = read_with_lease(&lock, &other, 3_000).await;
    // Fixed leases: nothing renews, so the server's script count is the writer's attempts.
    let before = evalsha_calls(&server);
    let writing = tokio::spawn(lock.write(&me));
    waiting(&server, &channel("upgrade-later"), before + 2).await;
    // The same owner reads meanwhile (read mode lets it in), so once the other reader is
    // gone the waiting writer would wait for itself.
    let mine = lock.try_read(&me).await.unwrap().expect("read mode");
    assert_would_deadlock(
        within(10 * SECOND, "waiting writer", writing)
            .await
            .unwrap(),
    );
    theirs.detach();
    assert_eq!(lock.read_hold_count(&me).await.unwrap(), 1);
    mine.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "upgrade-later"]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_unlock_wakes_every_waiting_reader_at_once() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let name = "wake-all";
    let writer_lock = clients[0].read_write_lock(name).unwrap().with_lease(long());
    let writing = writer_lock.write(&clients[0].new_owner()).await.unwrap();
    server.command(&["CONFIG", "RESETSTAT"]);

    const READERS: usize = 10;
    let barrier = Arc::new(Barrier::new(READERS + 1));
    let spawn_reader = |i: usize| {
        let client = clients[i % 2].clone();
        let barrier = barrier.clone();
        tokio::spawn(async move {
            let lock = client.read_write_lock(name).unwrap().with_lease(long());
            let guard = lock.read(&client.new_owner()).await.unwrap();
            barrier.wait().await; // all of them hold at once
            guard.unlock().await.unwrap();
        })
    };
    // One reader per client first: two attempts each, the second once subscribed.
    let mut readers: Vec<_> = (0..2).map(spawn_reader).collect();
    waiting(&server, &channel(name), 2 * 2).await;
    // The others find their client subscribed, with no message since: one attempt each.
    readers.extend((2..READERS).map(spawn_reader));
    waiting(&server, &channel(name), 2 * 2 + (READERS - 2) as u64).await;
    assert_eq!(subscribers(&server, &channel(name)), 2, "one per client");

    // Woken by the one message, long before the 60 s lease.
    within(WAKE, "readers", async {
        writing.unlock().await.unwrap();
        barrier.wait().await;
    })
    .await;
    all_finish(WAKE, "readers", readers).await;
    eventually(5 * SECOND, "lock free", || {
        server.command(&["EXISTS", name]) == "0"
    })
    .await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_written_by_java_are_respected() {
    let server = RedisServer::start();
    let c = long_watchdog_client(&server).await;
    let java_reader = JAVA_OWNER.to_owned();
    let java = java_lock_owner(57);
    let me = c.new_owner();

    // A Java reader, exactly as Redisson's read acquire leaves it.
    let name = "java-read";
    let lock = c.read_write_lock(name).unwrap();
    let java_timeout = timeout_key(name, &java_reader, 1);
    server.command(&["HSET", name, "mode", "read", &java_reader, "1"]);
    server.command(&["SET", &java_timeout, "1", "PX", "30000"]);
    server.command(&["PEXPIRE", name, "30000"]);
    assert!(lock.is_read_locked().await.unwrap());
    assert!(lock.try_write(&me).await.unwrap().is_none());
    let mine = lock.try_read(&me).await.unwrap().expect("readers share");
    assert_eq!(hash(&server, name).len(), 3);
    assert_eq!(
        server.command(&["GET", &timeout_key(name, &me.to_string(), 1)]),
        "1"
    );
    mine.unlock().await.unwrap();
    // The live Java reader keeps the lock; its TTL is the Java reader's remaining lease.
    assert_eq!(
        hash(&server, name),
        BTreeMap::from([
            ("mode".to_owned(), "read".to_owned()),
            (java_reader.clone(), "1".to_owned()),
        ])
    );
    assert!(pttl(&server, name) > 20_000);
    assert_eq!(lock.read_hold_count(&java).await.unwrap(), 1);
    // A dead Java reader (its timeout key expired) is purged by our read unlock.
    server.command(&["DEL", &java_timeout]);
    let mine = lock.try_read(&me).await.unwrap().unwrap();
    mine.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");

    // A Java writer.
    let name = "java-write";
    let lock = c.read_write_lock(name).unwrap();
    server.command(&[
        "HSET",
        name,
        "mode",
        "write",
        &format!("{java_reader}:write"),
        "1",
    ]);
    server.command(&["PEXPIRE", name, "30000"]);
    assert!(lock.is_write_locked().await.unwrap());
    assert!(!lock.is_read_locked().await.unwrap());
    assert_eq!(lock.write_hold_count(&java).await.unwrap(), 1);
    assert!(lock.is_write_held_by(&java).await.unwrap());
    assert!(lock.try_read(&me).await.unwrap().is_none());
    assert!(lock.try_write(&me).await.unwrap().is_none());
    let (r1, r2) = (c.new_owner(), c.new_owner());
    // Nothing renews: the server's script count is the readers' attempts.
    let before = evalsha_calls(&server);
    // The first subscribes between its two attempts; the second finds the channel
    // subscribed, with no message since, and waits after one.
    let mut readers = vec![tokio::spawn(lock.read(&r1))];
    waiting(&server, &channel(name), before + 2).await;
    readers.push(tokio::spawn(lock.read(&r2)));
    waiting(&server, &channel(name), before + 3).await;
    assert_eq!(subscribers(&server, &channel(name)), 1, "one per client");
    // Java's write unlock: the hash goes and "1" wakes every waiter, long before the
    // 30 s TTL.
    server.command(&["DEL", name]);
    assert_eq!(server.command(&["PUBLISH", &channel(name), "1"]), "1");
    for guard in all_finish(WAKE, "readers", readers).await {
        guard.unwrap().unlock().await.unwrap();
    }

    // Our holds look exactly like Java's.
    let writing = lock.write(&me).await.unwrap();
    assert_eq!(
        hash(&server, name),
        BTreeMap::from([
            ("mode".to_owned(), "write".to_owned()),
            (write_field(&me), "1".to_owned()),
        ])
    );
    assert!((20_000..=30_000).contains(&pttl(&server, name)));
    writing.unlock().await.unwrap();
}

#[tokio::test]
async fn our_unlocks_publish_zero_for_read_and_one_for_write() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for (name, channel) in [
        ("orders", "redisson_rwlock:{orders}"),
        ("{user:7}:cart", "redisson_rwlock:{user:7}:cart"),
    ] {
        let mut messages = Listener::channel(&server, channel).await;
        let lock = c.read_write_lock(name).unwrap();
        let me = c.new_owner();

        let outer = lock.read(&me).await.unwrap();
        lock.read(&me).await.unwrap().unlock().await.unwrap(); // partial: silent
        outer.unlock().await.unwrap();
        assert_eq!(messages.next().await, (channel.to_owned(), "0".to_owned()));
        messages.no_more().await;

        let outer = lock.write(&me).await.unwrap();
        lock.write(&me).await.unwrap().unlock().await.unwrap(); // partial: silent
        outer.unlock().await.unwrap();
        assert_eq!(messages.next().await, (channel.to_owned(), "1".to_owned()));
        messages.no_more().await;

        // Force-unlocks: each frees only its own mode, with that mode's message.
        let reading = lock.read(&me).await.unwrap();
        assert!(!lock.force_unlock_write().await.unwrap());
        assert!(lock.force_unlock_read().await.unwrap());
        assert_eq!(messages.next().await.1, "0");
        let writing = lock.write(&me).await.unwrap();
        assert!(!lock.force_unlock_read().await.unwrap());
        assert!(lock.force_unlock_write().await.unwrap());
        assert_eq!(messages.next().await.1, "1");
        messages.no_more().await;
        assert!(reading.unlock().await.is_err());
        assert!(writing.unlock().await.is_err());
        messages.quit().await;
    }
}

/// The PTTL and HKEYS commands the server ran (those of scripts included) while `release`
/// ran: what a read release spends on finding the lock's new TTL.
async fn ttl_reads(
    server: &RedisServer,
    release: impl Future<Output = redisson_lock::Result<()>>,
) -> (u64, u64) {
    let count = || {
        (
            command_calls(server, "pttl"),
            command_calls(server, "hkeys"),
        )
    };
    let before = count();
    release.await.unwrap();
    let after = count();
    (after.0 - before.0, after.1 - before.1)
}

/// How often the server's clock was read (`TIME`) while `acquire` ran, and its guard.
async fn clock_reads<T>(
    server: &RedisServer,
    acquire: impl Future<Output = redisson_lock::Result<T>>,
) -> (u64, T) {
    let before = command_calls(server, "time");
    let guard = acquire.await.unwrap();
    (command_calls(server, "time") - before, guard)
}

/// The lock's expiry as a Unix time in ms: unchanged exactly when nothing set its TTL.
fn expiry(server: &RedisServer, name: &str) -> String {
    if support::server::server_version() >= (7, 0) {
        return server.command(&["PEXPIRETIME", name]);
    }
    let script = format!("{}return at(KEYS[1])", support::server::lua_at());
    server.command(&["EVAL", &script, "1", name])
}

/// A read release reads its own timeout key and the hash's TTL, not every reader's, unless
/// its hold is the one that expires last: only then does it look at the others, and the TTL
/// shrinks to the next latest. The last reader still deletes the lock and publishes.
#[tokio::test]
async fn a_read_release_reads_every_readers_key_only_when_its_hold_expires_last() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "latest-reader";
    let mut messages = Listener::channel(&server, &channel(name)).await;
    let lock = c.read_write_lock(name).unwrap();
    let read = |owner, ms| lock.clone().with_lease(fixed(ms)).read(owner);
    let (a, b, latest) = (c.new_owner(), c.new_owner(), c.new_owner());
    let a_hold = read(&a, 20_000).await.unwrap();
    let b_outer = read(&b, 40_000).await.unwrap();
    let b_inner = read(&b, 30_000).await.unwrap();
    let latest_hold = read(&latest, 50_000).await.unwrap();
    let at_first = expiry(&server, name);

    // Its own key and the hash's TTL: two PTTLs, whatever the number of readers.
    assert_eq!(ttl_reads(&server, b_inner.unlock()).await, (2, 0));
    assert_eq!(lock.read_hold_count(&b).await.unwrap(), 1);
    let b_key = |n| timeout_key(name, &b.to_string(), n);
    assert_eq!(server.command(&["EXISTS", &b_key(2)]), "0");
    assert_eq!(ttl_reads(&server, a_hold.unlock()).await, (2, 0));
    assert_eq!(expiry(&server, name), at_first, "the TTL is untouched");

    // The latest hold goes: the remaining keys are read, the TTL shrinks to b's hold #1.
    assert_eq!(ttl_reads(&server, latest_hold.unlock()).await, (3, 1));
    let ttl = pttl(&server, name);
    assert!((30_000..=40_000).contains(&ttl), "{ttl}");
    messages.no_more().await;

    b_outer.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
    assert_eq!(server.command(&["KEYS", "*rwlock_timeout*"]), "");
    assert_eq!(messages.next().await, (channel(name), "0".to_owned()));
    messages.quit().await;
}

/// A name with a hash tag keeps Redisson's key names: each reader's timeout keys follow the
/// raw name itself, with no braces added, and the releases delete them.
#[tokio::test]
async fn a_hash_tagged_names_readers_keep_redissons_key_names() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "{tag}:cart";
    let me = c.new_owner();
    let lock = c.read_write_lock(name).unwrap();
    let first = lock.read(&me).await.unwrap();
    let second = lock.read(&me).await.unwrap();
    for n in [1, 2] {
        let key = format!("{name}:{me}:rwlock_timeout:{n}");
        assert_eq!(server.command(&["EXISTS", &key]), "1", "{key}");
    }
    second.unlock().await.unwrap();
    first.unlock().await.unwrap();
    assert_eq!(server.command(&["KEYS", "*rwlock_timeout*"]), "");
    assert_eq!(server.command(&["EXISTS", name]), "0");
}

/// A read acquire reads no clock. One that gives the hash its lease (the first reader, or
/// one whose lease outlasts the hash's TTL) sets the hash's TTL before its key's, so the key
/// never ends before the hash; one whose lease the hash already outlives leaves the hash and
/// sets its own key's TTL.
#[tokio::test]
async fn a_read_acquire_reads_no_clock_and_never_ends_its_key_before_a_hash_it_set() {
    let name = "joining";
    let (server, c, lock) = on_a_new_server(name).await;
    let read = |owner, ms| lock.clone().with_lease(fixed(ms)).read(owner);
    let (first, shorter, longer) = (c.new_owner(), c.new_owner(), c.new_owner());
    let at = |key: &str| expiry(&server, key).parse::<u64>().unwrap();
    let key = |owner: &LockOwner| timeout_key(name, &owner.to_string(), 1);
    // The key ends with the hash, or a little after when the clock moved between the two.
    let ends_with_hash = |owner: &LockOwner| {
        let (hash, key) = (at(name), at(&key(owner)));
        assert!(
            (hash..hash + 1_000).contains(&key),
            "hash {hash}, key {key}"
        );
        hash
    };

    let (reads, _first) = clock_reads(&server, read(&first, 40_000)).await;
    assert_eq!(reads, 0, "the first reader");
    let first_hash = ends_with_hash(&first);

    let (reads, _shorter) = clock_reads(&server, read(&shorter, 20_000)).await;
    assert_eq!(reads, 0, "a reader the hash outlives");
    assert_eq!(at(name), first_hash, "the hash is untouched");
    let ttl = pttl(&server, &key(&shorter));
    assert!((1..=20_000).contains(&ttl), "its own lease: {ttl}");

    let (reads, _longer) = clock_reads(&server, read(&longer, 60_000)).await;
    assert_eq!(reads, 0, "a reader that raises the hash");
    assert!(ends_with_hash(&longer) > first_hash);
}

/// A release whose hold expires with the hash looks at the remaining holds from the readers
/// that joined last, and stops at the first that lives as long as the hash: here a Java
/// reader whose key outlives the hash (a renewal with a shorter watchdog timeout leaves that).
/// The TTL stays; Java's release would raise it to that reader's key.
#[tokio::test]
async fn a_release_of_the_latest_hold_stops_at_a_hold_that_lives_as_long() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "as-long";
    let me = c.new_owner();
    let mine = c
        .read_write_lock(name)
        .unwrap()
        .with_lease(long())
        .read(&me)
        .await
        .unwrap();
    // Java readers join: five expiring before us, the last one after.
    let ours = now_ms() + 60_000;
    for thread in 1..=6 {
        let field = java_owner(thread);
        let at = if thread == 6 {
            ours + 10_000
        } else {
            ours - 10_000
        };
        server.command(&["HSET", name, &field, "1"]);
        let key = timeout_key(name, &field, 1);
        server.command(&["SET", &key, "1", "PXAT", &at.to_string()]);
    }
    for key in [name.to_owned(), timeout_key(name, &me.to_string(), 1)] {
        server.command(&["PEXPIREAT", &key, &ours.to_string()]);
    }

    // Its own key, the hash, and the last Java reader's key; not the five others.
    assert_eq!(ttl_reads(&server, mine.unlock()).await, (3, 1));
    assert_eq!(expiry(&server, name), ours.to_string());
    assert_eq!(
        hash(&server, name).len(),
        7,
        "mode and the six Java readers"
    );
}

/// After a downgrade the hash keeps the writer's TTL, longer than the read holds' keys. A read
/// release leaves that TTL as it is (Java's would shrink it to the longest read hold), and
/// the last read hold still frees the lock and publishes.
#[tokio::test]
async fn after_a_downgrade_a_read_release_keeps_the_ttl_and_the_last_one_frees_the_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "downgraded";
    let mut messages = Listener::channel(&server, &channel(name)).await;
    let lock = c.read_write_lock(name).unwrap();
    let me = c.new_owner();
    let writing = lock.clone().with_lease(long()).write(&me).await.unwrap();
    let outer = read_with_lease(&lock, &me, 5_000).await;
    let inner = read_with_lease(&lock, &me, 10_000).await;
    writing.unlock().await.unwrap();
    assert_eq!(messages.next().await.1, "1");
    let at_downgrade = expiry(&server, name);
    assert!(pttl(&server, name) > 50_000, "the writer's lease");

    assert_eq!(ttl_reads(&server, inner.unlock()).await, (2, 0));
    assert_eq!(expiry(&server, name), at_downgrade);
    messages.no_more().await;
    outer.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
    assert_eq!(messages.next().await.1, "0");
    messages.quit().await;
}

// ---- Ports of RedissonReadWriteLockTest (§11.5) ----

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
