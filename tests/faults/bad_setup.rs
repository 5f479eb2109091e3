//! Bad set-ups: a guard used after shutdown, servers that never answer or refuse commands, builds that fail.

use super::*;

#[tokio::test]
async fn a_guard_used_after_shutdown_is_told_the_client_is_closed() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .lock("closed")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    c.shutdown().await;
    assert!(guard.is_lease_lost());
    assert!(matches!(guard.remaining_lease().await, Err(Error::Closed)));
    assert!(matches!(guard.unlock().await, Err(Error::Closed)));
    // As at any shutdown, the hold is left to expire with its lease.
    assert_eq!(server.command(&["EXISTS", "closed"]), "1");
}

#[tokio::test]
async fn a_server_that_never_answers_or_a_malformed_url_fails_the_build_clearly() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    proxy.set(Net::BlackHole); // accepts connections, never answers
    let building = LockClient::builder()
        .url(&proxy.url())
        .command_timeout(Duration::from_millis(500))
        .build();
    let started = Instant::now();
    let result = within(5 * SECOND, "the build", building).await;
    assert!(started.elapsed() < 2 * SECOND, "{:?}", started.elapsed());
    assert!(
        matches!(&result, Err(e @ Error::Unreachable { .. }) if e.is_retryable()),
        "{result:?}"
    );
    let text = result.unwrap_err().to_string();
    assert!(text.contains(&proxy.url()[8..]), "{text}");
    assert!(text.contains("no answer"), "{text}");
    // Refused where given, naming the forms that work.
    for url in [
        "redis://127.0.0.1:notaport",
        "http://127.0.0.1:6379",
        "not a url",
    ] {
        let result = LockClient::builder().url(url).build().await;
        assert!(
            matches!(&result, Err(e @ Error::InvalidArgument(_)) if e.to_string().contains("redis-cluster://")),
            "{url}: {result:?}"
        );
    }
}

#[tokio::test]
async fn a_user_refused_evalsha_or_publish_gets_a_clear_error_and_nothing_is_written() {
    let server = RedisServer::start();
    let user = |name: &str, refused: &str| {
        let refused = format!("-{refused}");
        let acl = [
            "ACL", "SETUSER", name, "on", ">pw", "~*", "&*", "+@all", &refused,
        ];
        assert_eq!(server.command(&acl), "OK");
        format!("redis://{name}:pw@127.0.0.1:{}", server.port())
    };
    let no_scripts = client_with(&server, |b| b.url(&user("no-scripts", "evalsha"))).await;
    for (kind, result) in attempts(&no_scripts, "refused").await {
        match result {
            Err(e @ Error::Redis(_)) => {
                assert!(
                    e.to_string().contains("NOPERM") && !e.is_retryable(),
                    "{kind:?}: {e}"
                )
            }
            other => panic!("{kind:?}: {other:?}"),
        }
    }
    assert_eq!(server.command(&["DBSIZE"]), "0");

    // A user that may not publish takes locks, but its releases, which must tell the
    // waiters, are refused before they write anything: the hold stays until its lease ends.
    let silent = client_with(&server, |b| b.url(&user("no-publish", "publish"))).await;
    for kind in [
        Kind::Plain,
        Kind::Fair,
        Kind::Fenced,
        Kind::Write,
        Kind::Read,
    ] {
        let name = format!("unannounced-{kind:?}");
        let owner = silent.new_owner();
        let held = acquire(&silent, &owner, kind, &name, None)
            .await
            .unwrap()
            .unwrap();
        if kind == Kind::Fair {
            // A fair release tells only the first in line: put a live waiter there.
            let far = (now_ms() + 600_000).to_string();
            server.command(&["RPUSH", &queue_key(&name), "ghost:1"]);
            let deadlines = format!("redisson_lock_timeout:{{{name}}}");
            server.command(&["ZADD", &deadlines, &far, "ghost:1"]);
        }
        let before = server.command(&["HGETALL", &name]);
        match held.unlock().await {
            Err(e @ Error::Redis(_)) => assert!(e.to_string().contains("NOPERM"), "{kind:?}: {e}"),
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(server.command(&["HGETALL", &name]), before, "{kind:?}");
        assert!(pttl(&server, &name) > 0, "{kind:?}");
    }
    assert_eq!(queued(&server, "unannounced-Fair"), ["ghost:1"]);
    // A spin lock's release tells nobody, nor does a fair release with nobody in line: they
    // work.
    let spin = acquire(&silent, &silent.new_owner(), Kind::Spin, "quiet", None).await;
    spin.unwrap().unwrap().unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "quiet"]), "0");
    let fair = acquire(&silent, &silent.new_owner(), Kind::Fair, "alone", None).await;
    fair.unwrap().unwrap().unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "alone"]), "0");

    // The same when only SPUBLISH is refused and the client tells waiters by it, alone or
    // beside PUBLISH (from Redis 7.0, which has SPUBLISH).
    let test = "a_user_refused_evalsha_or_publish_gets_a_clear_error_and_nothing_is_written";
    if !support::server::has_redis_7(test, "ACL -spublish") {
        return;
    }
    for mode in [PubSubMode::Sharded, PubSubMode::Both] {
        let url = user("no-spublish", "spublish");
        let silent = client_with(&server, |b| b.url(&url).pubsub_mode(mode)).await;
        for kind in [Kind::Plain, Kind::Write, Kind::Read] {
            let name = format!("unannounced-{mode:?}-{kind:?}");
            let held = acquire(&silent, &silent.new_owner(), kind, &name, None).await;
            let before = server.command(&["HGETALL", &name]);
            match held.unwrap().unwrap().unlock().await {
                Err(e @ Error::Redis(_)) => {
                    assert!(e.to_string().contains("NOPERM"), "{mode:?} {kind:?}: {e}")
                }
                other => panic!("{mode:?} {kind:?}: {other:?}"),
            }
            assert_eq!(
                server.command(&["HGETALL", &name]),
                before,
                "{mode:?} {kind:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_build_that_fails_after_connecting_leaves_no_connection_behind() {
    let server = RedisServer::start();
    // A user that may not ask whether the server has sharded pub/sub: the build connects,
    // then refuses a mode that needs it.
    let acl = [
        "ACL", "SETUSER", "no-probe", "on", ">pw", "~*", "&*", "+@all", "-pubsub",
    ];
    assert_eq!(server.command(&acl), "OK");
    let url = format!("redis://no-probe:pw@127.0.0.1:{}", server.port());
    let built = LockClient::builder()
        .url(&url)
        .pubsub_mode(PubSubMode::Sharded)
        .build()
        .await;
    assert!(
        matches!(&built, Err(Error::InvalidArgument(e)) if e.contains("sharded")),
        "{built:?}"
    );
    let connections = || {
        let list = server.command(&["CLIENT", "LIST"]);
        list.lines()
            .filter(|line| line.contains(" user=no-probe "))
            .count()
    };
    eventually(5 * SECOND, "the failed build's connections closed", || {
        connections() == 0
    })
    .await;
}

/// Something that is not Redis at the address (an HTTP server, say): said so, with the
/// likely causes, not as a decoding error.
#[tokio::test]
async fn a_server_that_does_not_speak_redis_is_named_so() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await;
                let reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
                let _ = socket.write_all(reply).await;
            });
        }
    });
    let building = LockClient::builder()
        .url(&format!("redis://127.0.0.1:{port}"))
        .command_timeout(Duration::from_secs(2))
        .build();
    let result = within(20 * SECOND, "the build", building).await;
    let text = result.expect_err("not a Redis server").to_string();
    assert!(text.contains("does not speak the Redis protocol"), "{text}");
    assert!(text.contains("rediss://"), "{text}");
    assert!(!text.contains("Decode Error"), "{text}");
    http.abort();
}

/// A server that wants a password, reached without one: told that none was given, not
/// that credentials were refused.
#[tokio::test]
async fn a_password_that_was_not_given_is_named_so() {
    let mut server = RedisServer::start();
    assert_eq!(
        server.command(&["CONFIG", "SET", "requirepass", "pw"]),
        "OK"
    );
    let result = within(
        20 * SECOND,
        "connecting",
        LockClient::connect(&server.url()),
    )
    .await;
    let text = result.expect_err("no password").to_string();
    assert!(
        text.contains("requires a password and none was given"),
        "{text}"
    );
    assert!(!text.contains("refused the credentials"), "{text}");
    let url = format!("redis://:pw@127.0.0.1:{}", server.port());
    LockClient::connect(&url).await.unwrap().shutdown().await;
    // Its SHUTDOWN would need the password.
    server.kill();
}
