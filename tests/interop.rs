//! Wire compatibility with Java's Redisson: holds and messages written exactly as Redisson
//! writes them are honoured, and ours look exactly like Redisson's.

mod support;

use support::*;

#[tokio::test]
async fn a_hold_written_by_java_excludes_us_and_its_unlock_message_wakes_us() {
    let server = RedisServer::start();
    let c = long_watchdog_client(&server).await;
    let lock = c.lock("java-held").unwrap();
    // Exactly what Redisson's acquire script leaves: one field, count 1, a 30 s TTL.
    server.command(&["HINCRBY", "java-held", JAVA_OWNER, "1"]);
    server.command(&["PEXPIRE", "java-held", "30000"]);

    let me = c.new_owner();
    assert!(lock.try_lock(&me).await.unwrap().is_none());
    assert!(lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    // Nothing renews: the server's script count is the waiter's attempts.
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&me));
    waiting(&server, &lock_channel("java-held"), before + 2).await;

    // Java's release: the count reaches 0, the hash is deleted, "0" is published.
    server.command(&["DEL", "java-held"]);
    assert_eq!(
        server.command(&["PUBLISH", &lock_channel("java-held"), "0"]),
        "1"
    );
    // Woken by the message, not the 30 s TTL.
    woken_and_released("waiter", waiter).await;
}

#[tokio::test]
async fn a_java_reentrant_hold_is_not_ours_to_release() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.command(&["HSET", "java-reentered", JAVA_OWNER, "2"]);
    server.command(&["PEXPIRE", "java-reentered", "30000"]);
    let lock = c.lock("java-reentered").unwrap();
    assert!(lock.unlock(&c.new_owner()).await.is_err());
    assert_eq!(server.command(&["HGET", "java-reentered", JAVA_OWNER]), "2");
    // Acting for the Java owner (expert escape hatch) releases exactly its holds.
    let java = java_lock_owner(57);
    assert_eq!(lock.hold_count(&java).await.unwrap(), 2);
    lock.unlock(&java).await.unwrap();
    assert_eq!(server.command(&["HGET", "java-reentered", JAVA_OWNER]), "1");
}

#[tokio::test]
async fn our_hold_looks_exactly_like_redissons() {
    let server = RedisServer::start();
    let c = long_watchdog_client(&server).await;
    let me = c.new_owner();
    let field = format!("{}:{}", c.id().hyphenated(), me.id());
    assert_eq!(me.to_string(), field);

    let lock = c.lock("{user:7}:cart").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    assert_eq!(server.command(&["TYPE", "{user:7}:cart"]), "hash");
    assert_eq!(
        server.command(&["HGETALL", "{user:7}:cart"]),
        format!("{field}\n1")
    );
    let ttl = pttl(&server, "{user:7}:cart");
    assert!((20_000..=30_000).contains(&ttl), "{ttl}");
    assert_eq!(
        server.command(&["DBSIZE"]),
        "1",
        "no other key while holding"
    );

    let fixed = c.lock("orders").unwrap().with_lease(fixed(10_000));
    let g = fixed.lock(&me).await.unwrap();
    let ttl = pttl(&server, "orders");
    assert!((5_000..=10_000).contains(&ttl), "{ttl}");
    g.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    // A handle keeps the unlock latches of its releases for its next ones (same key, same
    // slot as the lock) and deletes them when it is dropped.
    let latches = server.command(&["KEYS", "redisson_unlock_latch:*"]);
    let mut latches: Vec<&str> = latches.lines().collect();
    latches.sort();
    assert_eq!(latches.len(), 2, "{latches:?}");
    assert!(latches[0].starts_with("redisson_unlock_latch:{orders}:"));
    assert!(latches[1].starts_with("redisson_unlock_latch:{user:7}:cart:"));
    drop((lock, fixed));
    eventually(5 * SECOND, "latches deleted", || {
        server.command(&["DBSIZE"]) == "0"
    })
    .await;
}

#[tokio::test]
async fn our_unlock_publishes_zero_on_the_exact_channel() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for (name, channel) in [
        ("orders", "redisson_lock__channel:{orders}"),
        ("{user:7}:cart", "redisson_lock__channel:{user:7}:cart"),
    ] {
        let mut messages = Listener::channel(&server, channel).await;
        let me = c.new_owner();
        let lock = c.lock(name).unwrap();
        let outer = lock.lock(&me).await.unwrap();
        let inner = lock.lock(&me).await.unwrap();
        inner.unlock().await.unwrap(); // a partial release publishes nothing
        outer.unlock().await.unwrap();
        assert_eq!(messages.next().await, (channel.to_owned(), "0".to_owned()));
        // Exactly one message per release.
        messages.no_more().await;

        // force_unlock publishes the same message.
        let _held = lock.lock(&me).await.unwrap();
        assert!(lock.force_unlock().await.unwrap());
        assert_eq!(messages.next().await, (channel.to_owned(), "0".to_owned()));
        messages.quit().await;
    }
}

#[tokio::test]
async fn the_watchdog_never_renews_a_hold_that_is_not_ours() {
    let server = RedisServer::start();
    let c = client(&server).await; // watchdog 900 ms, renewal every 300 ms
    let lock = c.lock("taken-over").unwrap();
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    // Our hold vanishes and a Java client takes the lock with a 30 s lease.
    server.command(&["DEL", "taken-over"]);
    server.command(&["HSET", "taken-over", JAVA_OWNER, "1"]);
    server.command(&["PEXPIRE", "taken-over", "30000"]);
    within(5 * SECOND, "lease_lost", guard.lease_lost()).await;
    assert_eq!(c.renewed_holds(), 0);
    // Not our 900 ms lease: the Java hold kept its own.
    let ttl = pttl(&server, "taken-over");
    assert!(ttl > 10_000, "the Java hold kept its own lease: {ttl}");
    assert!(ttl <= 30_000);
    assert_eq!(server.command(&["HGET", "taken-over", JAVA_OWNER]), "1");
    assert!(guard.unlock().await.is_err());
    assert_eq!(server.command(&["HGET", "taken-over", JAVA_OWNER]), "1");
}

#[tokio::test]
async fn the_unlock_latch_makes_a_resent_release_idempotent() {
    // Run the release script twice with one request id, as a resend after a lost reply
    // does: the second run replays the first outcome and releases nothing more. A later
    // request on the same latch key (the handle's next release) runs for real.
    let server = RedisServer::start();
    let release = &lua("lock_release");
    server.command(&["HSET", "latched", "me:1", "3"]);
    let latch = "redisson_unlock_latch:{latched}:l1";
    let run = |owner: &str, request: &str| {
        server.command(&[
            "EVAL",
            release,
            "3",
            "latched",
            "redisson_lock__channel:{latched}",
            latch,
            "0",
            "30000",
            owner,
            "PUBLISH",
            "10000",
            request,
        ])
    };
    assert_eq!(run("me:1", "7"), "0");
    assert_eq!(run("me:1", "7"), "0", "replayed");
    assert_eq!(
        server.command(&["HGET", "latched", "me:1"]),
        "2",
        "released once"
    );
    assert_eq!(server.command(&["GET", latch]), "7:0");
    let ttl = pttl(&server, latch);
    assert!(ttl > 5_000 && ttl <= 10_000, "{ttl}");
    // The next request overwrites the record: a request id that only starts like another
    // is another request.
    assert_eq!(run("me:1", "70"), "0");
    assert_eq!(server.command(&["HGET", "latched", "me:1"]), "1");
    assert_eq!(run("me:1", "8"), "1");
    assert_eq!(run("me:1", "8"), "1", "replayed");
    assert_eq!(server.command(&["EXISTS", "latched"]), "0");
    assert_eq!(server.command(&["GET", latch]), "8:1");

    // A first send delayed on a dead connection, arriving after its resend freed the lock
    // and the owner took it again: it replays, and the new hold stays.
    server.command(&["HSET", "latched", "me:1", "1"]);
    assert_eq!(run("me:1", "8"), "1", "replayed");
    assert_eq!(server.command(&["HGET", "latched", "me:1"]), "1");
    assert_eq!(server.command(&["GET", latch]), "8:1");

    // Not the owner: nil, recorded as such, so that a resend gives nil too.
    assert_eq!(run("stranger:1", "9"), "(nil)");
    assert_eq!(server.command(&["GET", latch]), "9:none");
    assert_eq!(run("stranger:1", "9"), "(nil)");
    assert_eq!(server.command(&["HGET", "latched", "me:1"]), "1");
}

/// The replay contract every release script keeps with its unlock latch `latch`, beside the
/// plain one's above: `take(owner)` takes a hold, `count(owner)` reads the owner's count,
/// `freed()` tells whether the lock is gone, and `run(owner, request)` is one send of a release.
fn assert_release_replays(
    server: &RedisServer,
    latch: &str,
    take: impl Fn(&str),
    count: impl Fn(&str) -> String,
    freed: impl Fn() -> bool,
    run: impl Fn(&str, &str) -> String,
) {
    take("me:1");
    take("me:1");
    assert_eq!(run("me:1", "1"), "0");
    assert_eq!(run("me:1", "1"), "0", "replayed");
    assert_eq!(count("me:1"), "1", "released once");
    assert_eq!(server.command(&["GET", latch]), "1:0");
    assert_eq!(run("me:1", "2"), "1");
    assert!(freed());
    // A first send delayed on a dead connection, arriving after its resend freed the lock
    // and the owner took it again: it replays, and the new hold stays.
    take("me:1");
    assert_eq!(run("me:1", "2"), "1", "replayed");
    assert_eq!(count("me:1"), "1");
    // Not a holder: nil, recorded as such, so that a resend gives nil too.
    assert_eq!(run("stranger:1", "3"), "(nil)");
    assert_eq!(server.command(&["GET", latch]), "3:none");
    assert_eq!(run("stranger:1", "3"), "(nil)");
    assert_eq!(count("me:1"), "1");
}

#[tokio::test]
async fn the_unlock_latch_makes_a_resent_read_release_idempotent() {
    // The read release decides its outcome from the readers' keys before it writes.
    let server = RedisServer::start();
    let (acquire, release) = (&lua("read_acquire"), &lua("read_release"));
    let name = "shared";
    let prefix = |owner: &str| format!("{{{name}}}:{owner}:rwlock_timeout");
    let exists = |key: &str| server.command(&["EXISTS", key]) == "1";
    let take = |owner: &str| {
        let args = ["2", name, "{shared}", "30000", owner];
        server.command(&[&["EVAL", acquire.as_str()][..], &args].concat());
    };
    let latch = "redisson_unlock_latch:{shared}:l1";
    let run = |owner: &str, request: &str| {
        let channel = "redisson_rwlock:{shared}";
        let keys = [name, channel, "{shared}", latch];
        let args = ["0", owner, "PUBLISH", "10000", request];
        server.command(&[&["EVAL", release.as_str(), "4"][..], &keys, &args].concat())
    };
    let count = |owner: &str| server.command(&["HGET", name, owner]);
    let freed = || !exists(name) && !exists(&format!("{}:1", prefix("me:1")));
    assert_release_replays(&server, latch, take, count, freed, run);
    // The owner's one hold keeps its own timeout key, and only that one.
    assert!(exists(&format!("{}:1", prefix("me:1"))));
    assert!(!exists(&format!("{}:2", prefix("me:1"))));
}

#[tokio::test]
async fn the_unlock_latch_makes_a_resent_write_release_idempotent() {
    let server = RedisServer::start();
    let (acquire, release) = (&lua("write_acquire"), &lua("write_release"));
    let name = "exclusive";
    let take = |owner: &str| {
        let write_owner = format!("{owner}:write");
        server.command(&["EVAL", acquire, "1", name, "30000", &write_owner, owner]);
    };
    let latch = "redisson_unlock_latch:{exclusive}:l1";
    let run = |owner: &str, request: &str| {
        let write_owner = format!("{owner}:write");
        let keys = [name, "redisson_rwlock:{exclusive}", latch];
        let args = ["1", "30000", &write_owner, "PUBLISH", "10000", request];
        server.command(&[&["EVAL", release.as_str(), "3"][..], &keys, &args].concat())
    };
    let count = |owner: &str| server.command(&["HGET", name, &format!("{owner}:write")]);
    let freed = || server.command(&["EXISTS", name]) == "0";
    assert_release_replays(&server, latch, take, count, freed, run);
}

#[tokio::test]
async fn the_unlock_latch_makes_a_resent_fair_release_idempotent() {
    let server = RedisServer::start();
    let release = &lua("fair_release");
    let name = "in-line";
    let take = |owner: &str| {
        server.command(&["HINCRBY", name, owner, "1"]);
    };
    let latch = "redisson_unlock_latch:{in-line}:l1";
    let run = |owner: &str, request: &str| {
        let now = now_ms().to_string();
        let keys = [
            name,
            "redisson_lock_queue:{in-line}",
            "redisson_lock_timeout:{in-line}",
            "redisson_lock__channel:{in-line}",
            latch,
        ];
        let args = ["0", "30000", owner, &now, "PUBLISH", "10000", request];
        server.command(&[&["EVAL", release.as_str(), "5"][..], &keys, &args].concat())
    };
    let count = |owner: &str| server.command(&["HGET", name, owner]);
    let freed = || server.command(&["EXISTS", name]) == "0";
    assert_release_replays(&server, latch, take, count, freed, run);
}

#[tokio::test]
async fn the_unlock_latch_replays_a_hand_off_and_the_token_it_issued() {
    // A resent hand-off (same request id) replays the first outcome: the heir keeps its one
    // hold, and a fenced heir its token, which the counter issued once.
    let server = RedisServer::start();
    let hand_off = &lua("lock_hand_off");
    let latch = "redisson_unlock_latch:{handed}:l1";
    let run = |keys: &[&str], request: &str| {
        let args = ["30000", "me:1", "heir:1", "20000", "10000", request];
        let count = keys.len().to_string();
        let command = [&["EVAL", hand_off.as_str(), &count][..], keys, &args].concat();
        server.command(&command)
    };
    let plain = ["handed", latch];
    server.command(&["HSET", "handed", "me:1", "1"]);
    assert_eq!(run(&plain, "5"), "2");
    assert_eq!(run(&plain, "5"), "2", "replayed");
    assert_eq!(server.command(&["HGETALL", "handed"]), "heir:1\n1");
    assert_eq!(server.command(&["GET", latch]), "5:2");

    let fenced = ["handed", "redisson_lock_token:{handed}", latch];
    server.command(&["DEL", "handed"]);
    server.command(&["HSET", "handed", "me:1", "1"]);
    server.command(&["SET", "redisson_lock_token:{handed}", "7"]);
    assert_eq!(run(&fenced, "6"), "2\n8");
    assert_eq!(run(&fenced, "6"), "2\n8", "replayed, with the token");
    assert_eq!(
        server.command(&["GET", "redisson_lock_token:{handed}"]),
        "8"
    );
    assert_eq!(server.command(&["HGETALL", "handed"]), "heir:1\n1");
    assert_eq!(server.command(&["GET", latch]), "6:2:8");
    let ttl = pttl(&server, latch);
    assert!(ttl > 5_000 && ttl <= 10_000, "{ttl}");

    // A counter INCR would refuse fails the release before it writes anything.
    server.command(&["DEL", "handed"]);
    server.command(&["HSET", "handed", "me:1", "1"]);
    server.command(&["SET", "redisson_lock_token:{handed}", "not a number"]);
    let refused = run(&fenced, "7");
    assert!(refused.contains("holds no integer"), "{refused}");
    assert_eq!(server.command(&["HGETALL", "handed"]), "me:1\n1");
    assert_eq!(server.command(&["GET", latch]), "6:2:8");
}

#[tokio::test]
async fn a_fair_release_hands_over_only_to_the_first_in_line_and_replays_from_its_latch() {
    let server = RedisServer::start();
    let release = &lua("fair_release");
    let (queue, deadlines) = ("redisson_lock_queue:{f}", "redisson_lock_timeout:{f}");
    let latch = "redisson_unlock_latch:{f}:l1";
    let run = |request: &str| {
        let keys = [
            "f",
            queue,
            deadlines,
            "redisson_lock__channel:{f}",
            "redisson_lock_took:{f}:me:1",
            "redisson_lock_took:{f}:heir:1",
            latch,
        ];
        let now = now_ms().to_string();
        let heir = ["heir:1", "20000", "300000", "w7"];
        let args = [
            &["0", "30000", "me:1", &now, "PUBLISH"][..],
            &heir,
            &["10000", request],
        ];
        server.command(&[&["EVAL", release.as_str(), "7"][..], &keys, &args.concat()].concat())
    };
    let later = |ms: i64| (now_ms() + ms).to_string();
    server.command(&["HSET", "f", "me:1", "1"]);
    server.command(&["RPUSH", queue, "java:1", "heir:1", "last:1"]);
    server.command(&["ZADD", deadlines, &later(60_000), "java:1"]);
    server.command(&["ZADD", deadlines, &later(360_000), "heir:1"]);
    server.command(&["ZADD", deadlines, &later(660_000), "last:1"]);
    assert_eq!(
        run("1"),
        "1",
        "another waiter is first: freed, not handed over"
    );
    assert_eq!(server.command(&["EXISTS", "f"]), "0");

    // The heir first in line: it holds once, out of the queue, the deadline behind it
    // moved up by the heir's wait, its trace naming its wait.
    server.command(&["LPOP", queue]);
    server.command(&["ZREM", deadlines, "java:1"]);
    let last = server
        .command(&["ZSCORE", deadlines, "last:1"])
        .parse::<f64>()
        .unwrap();
    server.command(&["HSET", "f", "me:1", "1"]);
    server.command(&["SET", "redisson_lock_took:{f}:me:1", "w1"]);
    assert_eq!(run("2"), "2");
    assert_eq!(server.command(&["HGETALL", "f"]), "heir:1\n1");
    let ttl = pttl(&server, "f");
    assert!(ttl > 15_000 && ttl <= 20_000, "{ttl}");
    assert_eq!(server.command(&["LRANGE", queue, "0", "-1"]), "last:1");
    let moved = server
        .command(&["ZSCORE", deadlines, "last:1"])
        .parse::<f64>()
        .unwrap();
    assert_eq!(last - moved, 300_000.0);
    assert_eq!(
        server.command(&["GET", "redisson_lock_took:{f}:heir:1"]),
        "w7"
    );
    assert_eq!(
        server.command(&["EXISTS", "redisson_lock_took:{f}:me:1"]),
        "0"
    );
    assert_eq!(server.command(&["GET", latch]), "2:2");

    // Sent again: the reply replayed, nothing written.
    assert_eq!(run("2"), "2", "replayed");
    assert_eq!(server.command(&["HGETALL", "f"]), "heir:1\n1");
    assert_eq!(server.command(&["LRANGE", queue, "0", "-1"]), "last:1");
}

#[tokio::test]
async fn a_write_release_hands_over_only_what_it_would_free() {
    let server = RedisServer::start();
    let (acquire, release) = (&lua("write_acquire"), &lua("write_release"));
    let latch = "redisson_unlock_latch:{w}:l1";
    let take = || server.command(&["EVAL", acquire, "1", "w", "30000", "me:1:write", "me:1"]);
    let run = |request: &str| {
        let keys = ["w", "redisson_rwlock:{w}", latch];
        let args = [
            "1",
            "30000",
            "me:1:write",
            "PUBLISH",
            "heir:1:write",
            "20000",
            "10000",
        ];
        let command = [
            &["EVAL", release.as_str(), "3"][..],
            &keys,
            &args,
            &[request],
        ];
        server.command(&command.concat())
    };
    let hash = || server.command(&["HGETALL", "w"]);
    take();
    take();
    assert_eq!(run("1"), "0", "a partial release hands nothing over");
    assert_eq!(run("2"), "2");
    assert_eq!(run("2"), "2", "replayed");
    assert_eq!(hash(), "mode\nwrite\nheir:1:write\n1");
    let ttl = pttl(&server, "w");
    assert!(ttl > 15_000 && ttl <= 20_000, "the heir's lease: {ttl}");

    // A writer that also reads keeps its read holds: a downgrade, never a hand-off.
    server.command(&["DEL", "w"]);
    take();
    server.command(&["HSET", "w", "me:1", "1"]);
    assert_eq!(run("3"), "1");
    assert_eq!(hash(), "mode\nread\nme:1\n1");
}
