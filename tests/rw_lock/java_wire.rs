//! States written exactly as Java writes them, and the messages our unlocks publish.

use super::*;

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
