//! Shared readers, exclusive writers, the downgrade and the refused upgrade, and wake-ups.

use super::*;

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
