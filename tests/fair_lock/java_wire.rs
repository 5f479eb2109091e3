//! Holds, waiters and messages written exactly as Java writes them.

use super::*;

#[tokio::test]
async fn a_hold_written_by_java_excludes_us() {
    let name = "java-held";
    let (server, c, lock) = on_a_new_server(name).await;
    let java = java_owner(7);
    server.command(&["HSET", name, &java, "1"]);
    server.command(&["PEXPIRE", name, "30000"]);

    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());
    assert!(lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    assert_eq!(lock.hold_count(&me).await.unwrap(), 0);
    assert!(lock
        .try_lock_for(&me, Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert_no_queue(&server, name);
    assert!(matches!(lock.unlock(&me).await, Err(Error::NotHeld { .. })));
    assert_eq!(server.command(&["HGET", name, &java]), "1");
    let ttl = pttl(&server, name);
    assert!(ttl > 20_000, "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_java_waiter_ahead_is_honoured_and_a_java_unlock_message_wakes_us() {
    let name = "java-queued";
    let (server, c, lock) = on_a_new_server(name).await;
    let java = java_owner(8);
    let java_deadline = now_ms() + 10_000;
    enqueue_java(&server, name, &java, java_deadline);

    // The lock is free, but the Java waiter is next in line.
    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());
    assert_eq!(queued(&server, name), std::slice::from_ref(&java));
    assert!(lock
        .try_lock_for(&me, Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    assert_eq!(queued(&server, name), std::slice::from_ref(&java));
    assert_eq!(deadline(&server, name, &java), Some(java_deadline));
    assert_eq!(timeouts_len(&server, name), 1);

    // The Java waiter takes the lock as Redisson's acquire does.
    server.command(&["LPOP", &queue_key(name)]);
    server.command(&["ZREM", &timeouts_key(name), &java]);
    server.command(&["HSET", name, &java, "1"]);
    server.command(&["PEXPIRE", name, "30000"]);

    // Nothing renews: the server's script count is the waiter's attempts.
    let before = evalsha_calls(&server);
    let pending = spawn_lock(&lock, &me);
    queue_reaches(&server, name, 1).await;
    let my_channel = waiter_channel(name, &me.to_string());
    // At least its first attempt (one only while its channel lingers from its last wait).
    waiting(&server, &my_channel, before + 1).await;
    // Redisson's release: the hash goes, "0" goes to the head's own channel.
    server.command(&["DEL", name]);
    assert_eq!(server.command(&["PUBLISH", &my_channel, "0"]), "1");
    // Woken by the message, not the 30 s TTL.
    let (guard, _) = within(WAKE, "waiter", pending).await.unwrap();
    guard.unlock().await.unwrap();
    assert_no_queue(&server, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unlocks_tell_the_head_on_its_exact_channel_and_nobody_else() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "tells-head";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(30_000));
    let mut messages = Listener::pattern(&server, "redisson_lock__channel*").await;
    let me = c.new_owner();

    // A full release tells the head, a Java waiter, on its own channel.
    let guard = lock.try_lock(&me).await.unwrap().unwrap();
    let partial = lock.try_lock(&me).await.unwrap().unwrap();
    let first = java_owner(9);
    let second = java_owner(10);
    enqueue_java(&server, name, &first, now_ms() + 60_000);
    enqueue_java(&server, name, &second, now_ms() + 120_000);
    partial.unlock().await.unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 1);
    guard.unlock().await.unwrap();
    assert_eq!(
        messages.next().await,
        (waiter_channel(name, &first), "0".to_owned())
    );
    // Nothing for the partial release, nothing for the second waiter, nothing on the
    // shared channel.
    messages.no_more().await;

    // The first Java waiter takes the lock; force_unlock tells the next head.
    server.command(&["LPOP", &queue_key(name)]);
    server.command(&["ZREM", &timeouts_key(name), &first]);
    server.command(&["HSET", name, &first, "1"]);
    server.command(&["PEXPIRE", name, "30000"]);
    assert!(lock.force_unlock().await.unwrap());
    assert_eq!(
        messages.next().await,
        (waiter_channel(name, &second), "0".to_owned())
    );
    assert!(!lock.force_unlock().await.unwrap());
    messages.no_more().await;

    // Our deliberate difference from Java: unlocking a hold that is gone is an error, but
    // the head is told all the same (and the queue is untouched).
    server.command(&["DEL", &queue_key(name), &timeouts_key(name)]);
    let guard = lock.try_lock(&me).await.unwrap().unwrap();
    enqueue_java(&server, name, &first, now_ms() + 60_000);
    server.command(&["DEL", name]);
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        messages.next().await,
        (waiter_channel(name, &first), "0".to_owned())
    );
    assert_eq!(queued(&server, name), std::slice::from_ref(&first));
    messages.no_more().await;
}
