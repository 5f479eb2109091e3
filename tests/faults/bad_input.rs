//! Bad input, in one place: over-long and odd names, keys of another type (for every kind and
//! query), waits and timeouts out of range.

use super::*;

#[tokio::test]
async fn a_name_longer_than_the_server_takes_fails_clearly_and_writes_nothing() {
    // The server's limit on one argument, at its lowest: 1 MiB.
    let server = RedisServer::start_with_args(&["--proto-max-bulk-len", "1mb"]);
    let c = client(&server).await;
    let name = "n".repeat(2 << 20);
    // The server refuses the argument ("invalid bulk length") and closes the connection, so
    // an attempt may instead meet the reset of the connection it was still writing to, or
    // the connection being made again.
    for (kind, result) in attempts(&c, &name).await {
        assert!(
            matches!(result, Err(Error::Redis(_))),
            "{kind:?}: {result:?}"
        );
    }
    assert_eq!(server.command(&["DBSIZE"]), "0");
    // The server closed the connection over it; the client made a new one.
    let guard = c.lock("next").unwrap().lock(&c.new_owner()).await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn names_with_braces_and_control_bytes_lock_exclude_and_free_like_any_other() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let names = [
        "{",
        "}",
        "{}",
        "a{b}c",
        "{{a}}",
        "\0\u{1}\u{7f}",
        "\r\n",
        " ",
        "é✓",
    ];
    for name in names {
        for kind in Kind::ALL {
            let (holder, other) = (c.new_owner(), c.new_owner());
            let held = acquire(&c, &holder, kind, name, None)
                .await
                .unwrap()
                .unwrap();
            let second = acquire(&c, &other, kind, name, Some(Duration::ZERO))
                .await
                .unwrap();
            // Only readers share.
            assert_eq!(second.is_some(), kind == Kind::Read, "{name:?} {kind:?}");
            if let Some(second) = second {
                second.unlock().await.unwrap();
            }
            assert_eq!(server.command(&["EXISTS", name]), "1", "{name:?} {kind:?}");
            held.unlock().await.unwrap();
            assert_eq!(server.command(&["EXISTS", name]), "0", "{name:?} {kind:?}");
        }
        // Only the fenced lock's token counter stays, named by Redisson's rule.
        let token = if name.contains('{') {
            format!("redisson_lock_token:{name}")
        } else {
            format!("redisson_lock_token:{{{name}}}")
        };
        assert_eq!(server.command(&["GET", &token]), "1", "{name:?}");
        server.command(&["DEL", &token]);
        eventually(5 * SECOND, "only unlock latches left", || {
            server.command(&["DBSIZE"]) == "0"
        })
        .await;
    }
}

#[tokio::test]
async fn keys_of_another_type_under_a_locks_names_are_refused_and_stay_untouched() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let wrong_type = |result: &redisson_lock::Result<bool>, name: &str| matches!(result, Err(Error::WrongType { name: n }) if n == name);
    // Under the lock's own name: every kind refuses with WrongType.
    let others: [&[&str]; 4] = [
        &["RPUSH", "a-list", "x"],
        &["SADD", "a-set", "x"],
        &["ZADD", "a-zset", "1", "x"],
        &["XADD", "a-stream", "*", "f", "x"],
    ];
    for write in others {
        let name = write[1];
        server.command(write);
        for (kind, result) in attempts(&c, name).await {
            assert!(wrong_type(&result, name), "{name} {kind:?}: {result:?}");
        }
    }
    // A hash that no lock wrote counts as held by someone else: never taken, never written.
    server.command(&["HSET", "a-hash", "field", "value"]);
    for (kind, result) in attempts(&c, "a-hash").await {
        assert!(matches!(result, Ok(false)), "a-hash {kind:?}: {result:?}");
    }
    assert_eq!(server.command(&["HGETALL", "a-hash"]), "field\nvalue");
    assert_eq!(pttl(&server, "a-hash"), -1);
    // Another type under the fair lock's queue, or the fenced lock's token counter.
    server.command(&["SET", &queue_key("queue-taken"), "x"]);
    let queue = c.fair_lock("queue-taken").unwrap();
    let result = queue
        .try_lock_for(&c.new_owner(), Duration::from_millis(100))
        .await;
    assert!(
        matches!(&result, Err(Error::WrongType { .. })),
        "{result:?}"
    );
    for (name, value) in [("token-text", "text"), ("token-float", "1.5")] {
        server.command(&["SET", &format!("redisson_lock_token:{{{name}}}"), value]);
        let result = c.fenced_lock(name).unwrap().try_lock(&c.new_owner()).await;
        assert!(
            matches!(&result, Err(Error::WrongType { .. })),
            "{name}: {result:?}"
        );
    }
    server.command(&["HSET", "redisson_lock_token:{token-hash}", "f", "1"]);
    let result = c
        .fenced_lock("token-hash")
        .unwrap()
        .try_lock(&c.new_owner())
        .await;
    assert!(
        matches!(&result, Err(Error::WrongType { .. })),
        "{result:?}"
    );
    // Nothing else was written anywhere.
    assert_eq!(server.command(&["DBSIZE"]), "9");
    assert_eq!(server.command(&["LRANGE", "a-list", "0", "-1"]), "x");
    assert_eq!(
        server.command(&["GET", "redisson_lock_token:{token-text}"]),
        "text"
    );
}

#[tokio::test]
async fn waits_and_timeouts_out_of_range_are_refused_where_they_are_given() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let invalid = |result: redisson_lock::Result<bool>, what: &str| {
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{what}: {result:?}"
        );
    };
    for kind in Kind::ALL {
        let wait = Some(Duration::MAX);
        let result = acquire(&c, &me, kind, "far", wait)
            .await
            .map(|held| held.is_some());
        invalid(result, &format!("{kind:?}"));
    }
    let multi = c
        .multi_lock([c.lock("far-a").unwrap(), c.lock("far-b").unwrap()])
        .unwrap();
    invalid(
        multi
            .try_lock_for(&me, Duration::MAX)
            .await
            .map(|g| g.is_some()),
        "multi",
    );
    let builder = || LockClient::builder().url(&server.url());
    for (what, built) in [
        (
            "fair wait 0",
            builder().fair_wait_timeout(Duration::ZERO).build().await,
        ),
        (
            "fair wait MAX",
            builder().fair_wait_timeout(Duration::MAX).build().await,
        ),
        (
            "command timeout MAX",
            builder().command_timeout(Duration::MAX).build().await,
        ),
        (
            "watchdog MAX",
            builder().watchdog_timeout(Duration::MAX).build().await,
        ),
    ] {
        invalid(built.map(|_| true), what);
    }
    assert_eq!(server.command(&["DBSIZE"]), "0");
    // A zero wait is one attempt, for every kind: busy is `None` at once, not an error.
    for kind in Kind::ALL {
        let holder = c.new_owner();
        let held = acquire(&c, &holder, Kind::Write, "held", None)
            .await
            .unwrap()
            .unwrap();
        let started = Instant::now();
        let name = if matches!(kind, Kind::Write | Kind::Read) {
            "held"
        } else {
            "other-held"
        };
        let other = acquire(&c, &holder, Kind::Plain, "other-held", None)
            .await
            .unwrap()
            .unwrap();
        let result = acquire(&c, &me, kind, name, Some(Duration::ZERO)).await;
        assert!(matches!(result, Ok(None)), "{kind:?}");
        assert!(started.elapsed() < SECOND);
        held.unlock().await.unwrap();
        other.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_key_of_another_type_is_a_wrong_type_error_and_stays_untouched() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.command(&["SET", "not-a-lock", "payload"]);
    let lock = c.lock("not-a-lock").unwrap();
    let me = c.new_owner();
    for result in [
        lock.lock(&me).await.map(drop),
        lock.try_lock(&me).await.map(drop),
        lock.try_lock_for(&me, Duration::from_millis(50))
            .await
            .map(drop),
        lock.unlock(&me).await,
        lock.hold_count(&me).await.map(drop),
    ] {
        match result {
            Err(Error::WrongType { name }) => assert_eq!(name, "not-a-lock"),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    assert_eq!(server.command(&["GET", "not-a-lock"]), "payload");
    assert_eq!(server.command(&["PTTL", "not-a-lock"]), "-1");
}

/// `is_locked` agrees with `hold_count` on a key of another type, for every kind: both are
/// `WrongType` naming the key, and neither writes anything.
#[tokio::test]
async fn queries_of_every_kind_on_a_key_of_another_type_are_wrong_type() {
    fn wrong_type<T: std::fmt::Debug>(what: &str, key: &str, result: Result<T, Error>) {
        match result {
            Err(Error::WrongType { name }) => assert_eq!(name, key, "{what}"),
            other => panic!("{what}: expected WrongType, got {other:?}"),
        }
    }
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let kinds = [
        "reentrant",
        "fair",
        "fenced",
        "spin",
        "non-reentrant",
        "read",
        "write",
    ];
    for kind in kinds {
        server.command(&["SET", &format!("wrong-type:{kind}"), "payload"]);
    }
    let key = |kind: &str| format!("wrong-type:{kind}");

    let lock = c.lock(&key("reentrant")).unwrap();
    wrong_type(
        "reentrant is_locked",
        &key("reentrant"),
        lock.is_locked().await,
    );
    wrong_type(
        "reentrant hold_count",
        &key("reentrant"),
        lock.hold_count(&me).await,
    );
    let fair = c.fair_lock(&key("fair")).unwrap();
    wrong_type("fair is_locked", &key("fair"), fair.is_locked().await);
    wrong_type("fair hold_count", &key("fair"), fair.hold_count(&me).await);
    let fenced = c.fenced_lock(&key("fenced")).unwrap();
    wrong_type("fenced is_locked", &key("fenced"), fenced.is_locked().await);
    wrong_type(
        "fenced hold_count",
        &key("fenced"),
        fenced.hold_count(&me).await,
    );
    let spin = c.spin_lock(&key("spin")).unwrap();
    wrong_type("spin is_locked", &key("spin"), spin.is_locked().await);
    wrong_type("spin hold_count", &key("spin"), spin.hold_count(&me).await);
    let non_reentrant = c.non_reentrant_lock(&key("non-reentrant")).unwrap();
    let k = key("non-reentrant");
    wrong_type(
        "non-reentrant is_locked",
        &k,
        non_reentrant.is_locked().await,
    );
    wrong_type(
        "non-reentrant hold_count",
        &k,
        non_reentrant.hold_count(&me).await,
    );
    let read = c.read_write_lock(&key("read")).unwrap();
    wrong_type("is_read_locked", &key("read"), read.is_read_locked().await);
    wrong_type(
        "read_hold_count",
        &key("read"),
        read.read_hold_count(&me).await,
    );
    let write = c.read_write_lock(&key("write")).unwrap();
    wrong_type(
        "is_write_locked",
        &key("write"),
        write.is_write_locked().await,
    );
    wrong_type(
        "write_hold_count",
        &key("write"),
        write.write_hold_count(&me).await,
    );

    // Nothing was written: the strings are as they were, and no other key appeared.
    for kind in kinds {
        assert_eq!(server.command(&["GET", &key(kind)]), "payload", "{kind}");
        assert_eq!(server.command(&["PTTL", &key(kind)]), "-1", "{kind}");
    }
    assert_eq!(server.command(&["DBSIZE"]), kinds.len().to_string());
}

/// A semaphore's and a latch's calls on what is not their data: a key of another type is
/// `WrongType` for `try_set_permits` too; a string that holds no count is refused by a
/// latch's `delete` as by its other calls, and a count beyond 2^53 - 1 is said to be one,
/// not taken for another type; a wait too long to represent names the calls without one.
#[tokio::test]
async fn synchronizers_refuse_what_is_not_their_data_in_words() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for (kind, write) in [
        ("hash", ["HSET", "sem:hash", "field", "1"]),
        ("zset", ["ZADD", "sem:zset", "1", "member"]),
        ("list", ["RPUSH", "sem:list", "a", "b"]),
    ] {
        let key = write[1];
        server.command(&write);
        let result = c.semaphore(key).unwrap().try_set_permits(3).await;
        assert!(
            matches!(&result, Err(Error::WrongType { name }) if name == key),
            "{kind}: {result:?}"
        );
        assert_eq!(server.command(&["TYPE", key]), kind);
    }

    for value in ["abc", "1.5"] {
        server.command(&["SET", "latch:text", value]);
        let result = c.count_down_latch("latch:text").unwrap().delete().await;
        let error = result.expect_err("not a count").to_string();
        assert!(error.contains("not a whole number"), "{value}: {error}");
        assert_eq!(server.command(&["GET", "latch:text"]), value);
    }

    let huge = "99999999999999999999";
    server.command(&["SET", "latch:huge", huge]);
    let result = c.count_down_latch("latch:huge").unwrap().count_down().await;
    assert!(
        !matches!(result, Err(Error::WrongType { .. })),
        "{result:?}"
    );
    let error = result.expect_err("beyond what a latch counts").to_string();
    assert!(error.contains("beyond 2^53 - 1"), "{error}");
    assert_eq!(server.command(&["GET", "latch:huge"]), huge);

    let semaphore = c.semaphore("far:sem").unwrap();
    let latch = c.count_down_latch("far:latch").unwrap();
    for (what, result) in [
        (
            "semaphore",
            semaphore
                .try_acquire_many_for(1, Duration::MAX)
                .await
                .map(drop),
        ),
        ("latch", latch.wait_for(Duration::MAX).await.map(drop)),
    ] {
        let error = result.expect_err("too long to represent");
        assert!(
            matches!(error, Error::InvalidArgument(_)),
            "{what}: {error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains("acquire()") && text.contains("wait()"),
            "{what}: {text}"
        );
    }
}
