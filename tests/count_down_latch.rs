//! The count-down latch (Redisson's `RCountDownLatch`, protocol §14): the key and messages
//! Java writes and reads, many waiters of another client woken at once, Java's messages,
//! timeouts, cancelled waits, the re-check that finds a silent change, bad input, and the
//! cluster's one-slot rule.

mod support;

use std::time::{Duration, Instant};

use redisson_lock::{CountDownLatch, Error, LockClient};
use support::topology::Cluster;
use support::*;

fn channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]) == "1"
}

/// A new server, a client of it and the latch `name`.
async fn on_a_new_server(name: &str) -> (RedisServer, LockClient, &str, CountDownLatch) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let latch = c.count_down_latch(name).unwrap();
    (server, c, name, latch)
}

/// How many reads of a key (`GET`) the server answered: a waiter's looks at the count.
fn gets(server: &RedisServer) -> u64 {
    command_calls(server, "get")
}

/// Until the server has answered `reads` reads in all.
async fn reads_reach(server: &RedisServer, reads: u64) {
    eventually(Duration::from_secs(20), &format!("{reads} reads"), || {
        gets(server) >= reads
    })
    .await;
}

/// §14.1, §14.2: a STRING count in decimal without TTL; `1` published by trySetCount and by
/// a delete that deleted, `0` by the count-down that reached 0 and by nothing else.
#[tokio::test]
async fn layout_and_messages_are_javas() {
    let (server, _client, name, latch) = on_a_new_server("latch-layout").await;
    let mut listener = Listener::channel(&server, &channel(name)).await;

    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    assert_eq!(server.command(&["TYPE", name]), "string");
    assert_eq!(server.command(&["GET", name]), "2");
    assert_eq!(pttl(&server, name), -1, "no TTL");
    assert!(!latch.try_set_count(5).await.unwrap(), "set already");
    assert_eq!(server.command(&["GET", name]), "2");
    assert_eq!(latch.count().await.unwrap(), 2);
    listener.no_more().await;

    latch.count_down().await.unwrap();
    assert_eq!(server.command(&["GET", name]), "1");
    listener.no_more().await;
    latch.count_down().await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "0".to_owned()));
    assert!(!exists(&server, name), "an open latch is deleted");
    assert_eq!(latch.count().await.unwrap(), 0);
    listener.no_more().await;

    assert!(latch.try_set_count(3).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    assert!(latch.delete().await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    assert!(!exists(&server, name));
    assert!(!latch.delete().await.unwrap(), "nothing to delete");
    listener.no_more().await;

    // A count of 0 is stored as is, and reads as open.
    assert!(latch.try_set_count(0).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    assert_eq!(server.command(&["GET", name]), "0");
    assert!(latch.wait_for(Duration::ZERO).await.unwrap());
    listener.no_more().await;
    assert_eq!(keys_but_records(&server), [name], "no other key");
}

/// A count-down of a missing or open latch, or one past 0, leaves no key and tells no one
/// (Java's DECR makes -1 and deletes it at once).
#[tokio::test]
async fn count_down_below_zero_leaves_nothing() {
    let (server, _client, name, latch) = on_a_new_server("latch-below").await;
    let mut listener = Listener::channel(&server, &channel(name)).await;
    for _ in 0..3 {
        latch.count_down().await.unwrap();
    }
    assert!(!exists(&server, name));
    listener.no_more().await;

    assert!(latch.try_set_count(1).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    for _ in 0..3 {
        latch.count_down().await.unwrap();
    }
    assert_eq!(listener.next().await, (channel(name), "0".to_owned()));
    listener.no_more().await;
    assert!(!exists(&server, name));

    // A count set to 0 goes the same way: deleted, and nobody told.
    assert!(latch.try_set_count(0).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    latch.count_down().await.unwrap();
    assert!(!exists(&server, name));
    listener.no_more().await;
    assert!(keys_but_records(&server).is_empty(), "nothing left");
}

/// 100 waiters of one client all wake when another client opens the latch, far sooner than
/// their re-check (15 s); a count-down that leaves the count above 0 wakes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_waiters_of_another_client_wake_when_it_opens() {
    let server = RedisServer::start();
    let (opener, waiters) = (client(&server).await, client(&server).await);
    let name = "latch-crowd";
    let latch = opener.count_down_latch(name).unwrap();
    assert!(latch.try_set_count(2).await.unwrap());
    let before = gets(&server);
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let waiter = waiters.count_down_latch(name).unwrap();
        tasks.push(tokio::spawn(async move { waiter.wait().await }));
    }
    // At least 100 reads of the count (a waiter reads it once or twice before it waits):
    // most waiters wait on a message; any still to read it would find the latch open.
    reads_reach(&server, before + 100).await;
    subscribed(&server, &channel(name)).await;

    latch.count_down().await.unwrap();
    assert_eq!(server.command(&["GET", name]), "1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        tasks.iter().all(|task| !task.is_finished()),
        "a waiter returned while the count was 1"
    );

    latch.count_down().await.unwrap();
    let woken = all_finish(WAKE, "100 waiters woken", tasks).await;
    assert!(woken.iter().all(Result::is_ok), "{woken:?}");
    assert_eq!(latch.count().await.unwrap(), 0);
}

/// Java's count-down (DECR, DEL, PUBLISH `0`) wakes a waiter here; a `0` sent while the count
/// is still above 0 only makes it look again, and text that is no count is ignored.
#[tokio::test]
async fn waiter_wakes_on_javas_count_down_and_only_at_zero() {
    let (server, _client, name, latch) = on_a_new_server("latch-java").await;
    server.command(&["SET", name, "1"]);
    let before = gets(&server);
    let waiting = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait_for(Duration::from_secs(60)).await }
    });
    subscribed(&server, &channel(name)).await;
    reads_reach(&server, before + 2).await;

    // A stray `0` with the count at 1: the waiter reads the count again and keeps waiting.
    let looked = gets(&server);
    server.command(&["PUBLISH", &channel(name), "0"]);
    reads_reach(&server, looked + 1).await;
    server.command(&["PUBLISH", &channel(name), "hello"]);
    let settled = gets(&server);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(gets(&server), settled, "text that is no count wakes no one");
    assert!(!waiting.is_finished(), "returned with the count at 1");

    assert_eq!(server.command(&["DECR", name]), "0");
    server.command(&["DEL", name]);
    server.command(&["PUBLISH", &channel(name), "0"]);
    let opened = within(WAKE, "a waiter woken by Java", waiting).await;
    assert!(opened.unwrap().unwrap());
}

/// `wait_for` gives up after its time with `false`; a zero timeout reads the count once;
/// an open latch returns at once.
#[tokio::test]
async fn wait_for_times_out_with_false() {
    let (_server, _client, _name, latch) = on_a_new_server("latch-timeout").await;
    assert!(
        latch.wait_for(Duration::ZERO).await.unwrap(),
        "missing: open"
    );
    within(WAKE, "waiting on an open latch", latch.wait())
        .await
        .unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    assert!(!latch.wait_for(Duration::ZERO).await.unwrap());
    let start = Instant::now();
    let opened = within(
        WAKE,
        "a timed wait",
        latch.wait_for(Duration::from_millis(400)),
    )
    .await;
    assert!(!opened.unwrap());
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(latch.count().await.unwrap(), 1, "the count is untouched");
}

/// A count that reaches 0 without a message (a plain DEL) is found by the waiter's re-check,
/// within 15 s, where a Java waiter would wait out its whole wait.
#[tokio::test]
async fn a_silent_opening_is_found_by_the_recheck() {
    let (server, _client, name, latch) = on_a_new_server("latch-silent").await;
    assert!(latch.try_set_count(1).await.unwrap());
    let before = gets(&server);
    let waiting = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait_for(Duration::from_secs(120)).await }
    });
    subscribed(&server, &channel(name)).await;
    reads_reach(&server, before + 2).await;
    server.command(&["DEL", name]);
    let opened = within(Duration::from_secs(30), "the re-check", waiting).await;
    assert!(opened.unwrap().unwrap());
}

/// Waits dropped at every point (before the first read, on the wire, subscribing, waiting)
/// leave the count as it was, and their subscription goes once its short linger ends.
#[tokio::test]
async fn cancelled_waits_leave_nothing() {
    let (server, c, name, latch) = on_a_new_server("latch-cancel").await;
    assert!(latch.try_set_count(1).await.unwrap());
    let mut dropped = 0;
    for i in 0..40 {
        if cut_off(spread(i, 5000), latch.wait()).await.is_err() {
            dropped += 1;
        }
    }
    for i in 0..10 {
        let cut = Duration::from_millis(5 + i * 20);
        assert!(cut_off(cut, latch.wait_for(Duration::from_secs(60)))
            .await
            .is_err());
    }
    assert!(dropped > 0, "no wait was dropped");
    assert_eq!(server.command(&["GET", name]), "1");
    assert_eq!(keys_but_records(&server), [name], "no other key");
    eventually(Duration::from_secs(10), "the channel let go", || {
        no_channels(&server) && c.subscribed_channels() == 0
    })
    .await;
    // And the latch still works for a waiter after them.
    let waiting = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait_for(Duration::from_secs(60)).await }
    });
    subscribed(&server, &channel(name)).await;
    latch.count_down().await.unwrap();
    assert!(within(WAKE, "a later waiter", waiting)
        .await
        .unwrap()
        .unwrap());
}

/// Negative or too large counts and an empty name are refused before anything is sent; a key
/// of another type fails with `WrongType` and is left as it is; so is text that is no count.
#[tokio::test]
async fn bad_input_fails_clearly() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let latch = c.count_down_latch("latch-bad").unwrap();
    let before = evalsha_calls(&server);
    // A count is a u32: a negative one does not compile.
    assert!(latch.try_set_count(u32::MAX).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), i64::from(u32::MAX));
    assert!(matches!(
        c.count_down_latch(""),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(evalsha_calls(&server), before + 1);
    // The largest count the scripts handle, as another client may have set it.
    let most = CountDownLatch::MAX_COUNT.to_string();
    server.command(&["SET", "latch-bad", &most]);
    latch.count_down().await.unwrap();
    assert_eq!(latch.count().await.unwrap(), CountDownLatch::MAX_COUNT - 1);

    // Another type.
    server.command(&["RPUSH", "latch-list", "x"]);
    let list = c.count_down_latch("latch-list").unwrap();
    let wrong = |result: redisson_lock::Result<()>| match result {
        Err(error @ Error::WrongType { .. }) => error.to_string(),
        other => panic!("expected WrongType, got {other:?}"),
    };
    let words = wrong(list.try_set_count(1).await.map(|_| ()));
    assert!(
        words.contains("\"latch-list\"") && words.contains("another type"),
        "{words}"
    );
    wrong(list.count_down().await);
    wrong(list.count().await.map(|_| ()));
    wrong(list.wait().await);
    wrong(list.wait_for(SECOND).await.map(|_| ()));
    wrong(list.delete().await.map(|_| ()));
    assert_eq!(server.command(&["TYPE", "latch-list"]), "list");
    assert_eq!(server.command(&["LRANGE", "latch-list", "0", "-1"]), "x");

    // Text that is no count.
    server.command(&["SET", "latch-text", "many"]);
    let text = c.count_down_latch("latch-text").unwrap();
    let error = text.count_down().await.unwrap_err().to_string();
    assert!(error.contains("not a whole number"), "{error}");
    assert!(!text.try_set_count(1).await.is_ok_and(|set| set));
    assert_eq!(server.command(&["GET", "latch-text"]), "many");
}

/// The blocking twin: a blocked thread woken by another thread's count-down.
#[cfg(feature = "blocking")]
#[test]
fn blocking_twin_shares_the_count() {
    let server = RedisServer::start();
    let client = default_blocking_client(&server);
    let name = "latch-blocking";
    let latch = client.count_down_latch(name).unwrap();
    assert_eq!(latch.name(), name);
    assert!(latch.try_set_count(2).unwrap());
    assert!(!latch.try_set_count(2).unwrap());
    assert!(!latch.wait_for(Duration::from_millis(50)).unwrap());
    let waiter = std::thread::spawn({
        let latch = latch.clone();
        move || latch.wait_for(Duration::from_secs(60))
    });
    latch.count_down().unwrap();
    assert_eq!(latch.count().unwrap(), 1);
    std::thread::spawn(move || latch.count_down().unwrap())
        .join()
        .unwrap();
    assert!(waiter.join().unwrap().unwrap());
    let latch = client.count_down_latch(name).unwrap();
    latch.wait().unwrap();
    assert!(latch.try_set_count(1).unwrap());
    assert!(latch.delete().unwrap());
    assert!(!exists(&server, name));
    client.shutdown();
}

/// On a cluster: a latch whose key and channel share a slot works, a waiter of another client
/// woken by a count-down (sharded pub/sub where the servers have it); a name with a `}`,
/// whose channel Java braces into another slot, is refused with words that say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_waiter_wakes_and_a_split_name_is_refused() {
    let cluster = Cluster::start();
    let opener = deployment_client(&cluster.url(), |b| b).await;
    let waiters = deployment_client(&cluster.url(), |b| b).await;
    // `a{b` has no tag, so the key and the braced channel both hash by `a{b`.
    for name in ["latch-cluster", "a{b"] {
        let latch = opener.count_down_latch(name).unwrap();
        assert!(latch.try_set_count(1).await.unwrap(), "{name}");
        let waiter = waiters.count_down_latch(name).unwrap();
        let waiting = tokio::spawn(async move { waiter.wait_for(Duration::from_secs(60)).await });
        eventually(Duration::from_secs(10), "the waiter subscribed", || {
            waiters.subscribed_channels() >= 1
        })
        .await;
        latch.count_down().await.unwrap();
        let opened = within(WAKE, "a waiter woken on a cluster", waiting).await;
        assert!(opened.unwrap().unwrap(), "{name}");
        assert_eq!(cluster.master_of(name).command(&["EXISTS", name]), "0");
        assert!(latch.try_set_count(1).await.unwrap());
        assert!(latch.delete().await.unwrap());
        eventually(Duration::from_secs(10), "the channel let go", || {
            waiters.subscribed_channels() == 0
        })
        .await;
    }
    for name in ["{user:7}:latch", "a}b"] {
        // Java's own scripts fail there: the key and the channel are in two slots.
        assert_ne!(cluster.slot(name), cluster.slot(&channel(name)), "{name}");
        match opener.count_down_latch(name) {
            Err(Error::InvalidArgument(words)) => {
                assert!(words.contains(name), "{words}");
                assert!(words.contains("CROSSSLOT"), "{words}");
                assert!(words.contains("different slots"), "{words}");
            }
            other => panic!("{name}: expected InvalidArgument, got {other:?}"),
        }
    }
}

/// On one server every name works, braced ones included.
#[tokio::test]
async fn on_one_server_a_braced_name_works() {
    let (server, _client, name, latch) = on_a_new_server("{user:7}:latch").await;
    let mut listener = Listener::channel(&server, &channel(name)).await;
    assert!(latch.try_set_count(1).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    latch.count_down().await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "0".to_owned()));
    assert!(latch.wait_for(Duration::ZERO).await.unwrap());
}

/// The least-privilege user of `docs/operations.md`, for latches named `orders:…`: the count
/// and the channel (as a key and as a channel), every command but the `@dangerous` ones, and
/// `INFO` for the replica check. Without the channel, a count-down is refused with nothing
/// written.
#[tokio::test]
async fn least_privilege_user_uses_a_latch() {
    let server = RedisServer::start();
    let user = |name: &str, channel: bool| {
        let mut acl = vec![
            "ACL",
            "SETUSER",
            name,
            "on",
            ">pw",
            "~orders:*",
            "resetchannels",
        ];
        if channel {
            acl.push("~redisson_countdownlatch__channel__{orders:*");
            acl.push("~redisson_countdownlatch_attempt:{orders:*");
            acl.push("&redisson_countdownlatch__channel__{orders:*");
        }
        acl.extend(["+@all", "-@dangerous", "+info"]);
        assert_eq!(server.command(&acl), "OK");
    };
    user("latch", true);
    user("nochannel", false);
    let as_user = |name: &str| format!("redis://{name}:pw@127.0.0.1:{}", server.port());
    let (opener, waiters) = (
        client_with(&server, |b| b.url(&as_user("latch"))).await,
        client_with(&server, |b| b.url(&as_user("latch"))).await,
    );
    let name = "orders:latch";
    let latch = opener.count_down_latch(name).unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let waiter = waiters.count_down_latch(name).unwrap();
    let waiting = tokio::spawn(async move { waiter.wait_for(Duration::from_secs(60)).await });
    subscribed(&server, &channel(name)).await;
    latch.count_down().await.unwrap();
    assert!(within(WAKE, "a waiter woken", waiting)
        .await
        .unwrap()
        .unwrap());

    let refused = client_with(&server, |b| b.url(&as_user("nochannel"))).await;
    server.command(&["SET", name, "1"]);
    let error = refused
        .count_down_latch(name)
        .unwrap()
        .count_down()
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("NOPERM"), "{error}");
    assert_eq!(server.command(&["GET", name]), "1", "nothing written");
}

#[test]
fn handles_and_futures_are_send_and_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<CountDownLatch>();
    // Checked by the compiler alone: no client, no server, nothing runs.
    let _: fn(CountDownLatch) = futures_are_spawnable;
}

/// Type-checked, never called: every future of the latch is spawnable.
fn futures_are_spawnable(latch: CountDownLatch) {
    fn send_static<T: Send + 'static>(_: &T) {}
    send_static(&latch.try_set_count(1));
    send_static(&latch.count_down());
    send_static(&latch.count());
    send_static(&latch.wait());
    send_static(&latch.wait_for(SECOND));
    send_static(&latch.delete());
}
