//! Unlock notifications: one subscriber connection per client, shared and reference-counted;
//! a flooded receiver wakes everyone and keeps listening.

mod support;

use std::time::{Duration, Instant};

use fred::prelude::*;
use redisson_lock::LockClient;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_receiver_wakes_every_waiter_and_keeps_listening() {
    let server = RedisServer::start();
    // fred's message buffer cut to one message, so a burst always overflows it.
    let mut builder = Builder::from_config(Config::from_url(&server.url()).unwrap());
    builder
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
        .with_performance_config(|perf| perf.broadcast_channel_capacity = 1);
    let (redis, subscriber) = (
        builder.build().unwrap(),
        builder.build_subscriber_client().unwrap(),
    );
    redis.init().await.unwrap();
    subscriber.init().await.unwrap();
    let c = LockClient::builder()
        .clients(redis, Some(subscriber))
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();

    let lock = c.lock("flooded").unwrap();
    // A fixed lease: nothing renews, so the server's script count is the waiter's attempts.
    let holder = held_for_a_minute(&lock, &c.new_owner()).await;
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    waiting(&server, &lock_channel("flooded"), before + 2).await;

    // A burst of messages the waiter ignores ("2" means nothing): only a lag wakes it.
    server.command(&["CONFIG", "RESETSTAT"]);
    let flood = "for i = 1, 2000 do redis.call('publish', KEYS[1], '2') end";
    server.command(&["EVAL", flood, "1", &lock_channel("flooded")]);
    eventually(
        Duration::from_secs(5),
        "waiter re-checked after the lag",
        || evalsha_calls(&server) >= 1,
    )
    .await;
    assert!(!waiter.is_finished(), "the lock is still held");

    // Still listening: the real unlock message wakes it long before the 60 s lease.
    holder.unlock().await.unwrap();
    woken_and_released("waiter", waiter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_subscriber_connection_serves_every_waiter() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let holder = c.new_owner();
    let names: Vec<String> = (0..5).map(|i| format!("shared:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(c.lock(name).unwrap().lock(&holder).await.unwrap());
    }
    // Four waiters on each of five locks.
    let mut waiters = Vec::new();
    for name in &names {
        for _ in 0..4 {
            let acquire = c.lock(name).unwrap().lock(&c.new_owner());
            waiters.push(tokio::spawn(async move { acquire.await?.unlock().await }));
        }
    }
    for name in &names {
        subscribed(&server, &lock_channel(name)).await;
    }
    for name in &names {
        assert_eq!(
            subscribers(&server, &lock_channel(name)),
            1,
            "one subscription per channel"
        );
    }
    // This client has exactly two connections: commands, and the one subscriber.
    let clients = server.command(&["CLIENT", "LIST"]);
    let subscriptions = |line: &str| -> u32 {
        line.split(' ')
            .find_map(|field| field.strip_prefix("sub="))
            .map_or(0, |n| n.parse().unwrap())
    };
    let subscribers: Vec<u32> = clients
        .lines()
        .map(subscriptions)
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(
        subscribers,
        vec![5],
        "one connection holds all five channels: {clients}"
    );
    assert_eq!(clients.lines().count(), 2 + 1, "{clients}"); // plus the harness's own connection

    for guard in guards {
        guard.unlock().await.unwrap();
    }
    // Every waiter gets its turn; each releases, which wakes the next.
    for released in all_finish(Duration::from_secs(20), "all waiters", waiters).await {
        released.unwrap();
    }
    eventually(5 * SECOND, "channels released", || {
        c.subscribed_channels() == 0 && no_channels(&server)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_lingers_briefly_so_a_returning_waiter_skips_subscribing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("linger").unwrap();
    // A fixed lease: nothing renews, so the server's script count is the waiter's attempts,
    // and only the unlock message wakes the waiter in time.
    let held_lock = lock.clone().with_lease(fixed(60_000));
    let holder = c.new_owner();
    let waiter = c.new_owner();

    // The channel lingers 500 ms: a machine too slow to come back within it plays again.
    for round in 1.. {
        // Round one: the waiter subscribes, gets the lock, releases; its channel stays.
        server.command(&["CONFIG", "RESETSTAT"]);
        let held = held_lock.lock(&holder).await.unwrap();
        let pending = tokio::spawn(lock.lock(&waiter));
        waiting(&server, &lock_channel("linger"), 1 + 2).await;
        assert_eq!(command_calls(&server, "subscribe"), 1);
        held.unlock().await.unwrap();
        woken_and_released("the waiter", pending).await;

        // Round two, within the linger: the subscription is reused, no SUBSCRIBE is sent,
        // and the waiter, which waits right after its first attempt (no message came since),
        // still gets the lock on the unlock message.
        let held = held_lock.lock(&holder).await.unwrap();
        let before = evalsha_calls(&server);
        let pending = tokio::spawn(lock.lock(&waiter));
        scripts_reach(&server, before + 1).await;
        held.unlock().await.unwrap();
        woken_and_released("the returning waiter", pending).await;
        // Its attempt before waiting, the release, its attempt that took the lock, its
        // release: no attempt right after subscribing. On a busy machine the message of
        // round one's last release can reach the client after this round's first attempt
        // began, and it is answered by one more attempt: then the rounds play again.
        let scripts = evalsha_calls(&server) - before;
        if command_calls(&server, "unsubscribe") == 0 {
            assert_eq!(
                command_calls(&server, "subscribe"),
                1,
                "the lingering subscription was reused"
            );
            if scripts == 4 {
                break;
            }
        }
        assert!(
            round < 5,
            "no round reused the lingering channel with 4 scripts (the last ran {scripts})"
        );
        eventually(5 * SECOND, "unsubscribed before playing again", || {
            no_channels(&server)
        })
        .await;
    }

    // With nobody waiting, the channel goes after the linger (500 ms).
    eventually(5 * SECOND, "unsubscribed after the linger", || {
        c.subscribed_channels() == 0 && no_channels(&server)
    })
    .await;
}

/// Two waiters on one client: A with a deadline, B without. The holder releases while A's
/// task is not being polled (a busy runtime), so the one unlock message goes to A, the
/// oldest waiter, and A next runs after its deadline. A must not swallow the wake-up: it
/// either takes the lock with one last attempt or passes the wake-up on, and B gets the lock
/// long before the holder's 60 s lease would have freed it.
#[tokio::test]
async fn a_timed_waiter_woken_at_its_deadline_does_not_swallow_the_wake_up() {
    let server = RedisServer::start();
    let (holding, waiting) = (client(&server).await, client(&server).await);
    let name = "swallowed-wake";
    let held = held_for_a_minute(&holding.lock(name).unwrap(), &holding.new_owner()).await;

    const A_WAIT: Duration = Duration::from_millis(2500);
    let lock = waiting.lock(name).unwrap();
    let base = evalsha_calls(&server);
    let a_started = Instant::now();
    let mut a = std::pin::pin!(lock.try_lock_for(&waiting.new_owner(), A_WAIT));
    // Poll A until the server saw its second attempt: A registered for the channel's next
    // wake-up before sending it, so A is now the oldest waiter on the channel.
    tokio::select! {
        result = &mut a => panic!("A ended before it waited: {result:?}"),
        () = eventually(Duration::from_secs(10), "A's second attempt", || {
            evalsha_calls(&server) >= base + 2
        }) => {}
    }
    // B waits too, registered behind A: one attempt, as the channel is subscribed and no
    // message came since. A is not polled from here on.
    let b = tokio::spawn(lock.lock(&waiting.new_owner()));
    eventually(Duration::from_secs(10), "B's attempt", || {
        evalsha_calls(&server) >= base + 3
    })
    .await;
    assert_eq!(waiting.subscribed_channels(), 1);

    held.unlock().await.unwrap();
    // The scenario: A's deadline passes while its wake-up waits for it.
    tokio::time::sleep_until((a_started + A_WAIT + Duration::from_secs(1)).into()).await;
    if let Some(guard) = within(Duration::from_secs(5), "A", a).await.unwrap() {
        // A looked once more and took the lock: releasing it wakes B.
        guard.unlock().await.unwrap();
    }
    // Far below the 55 s or so of the holder's lease that B would otherwise sleep through.
    let guard = within(Duration::from_secs(8), "B, woken", b)
        .await
        .unwrap()
        .unwrap();
    guard.unlock().await.unwrap();
}

/// A server without SPUBLISH (here renamed away) does not fail a release after its writes:
/// the release publishes with PUBLISH instead.
#[tokio::test]
async fn a_release_publishes_classically_where_spublish_is_missing() {
    // Before Redis 7.0 a client refuses the sharded mode, and SPUBLISH cannot be renamed.
    let test = "a_release_publishes_classically_where_spublish_is_missing";
    if !support::server::has_redis_7(test, "renaming SPUBLISH") {
        return;
    }
    let server = RedisServer::start_with_args(&["--rename-command", "SPUBLISH", ""]);
    let c = client_with(&server, |b| {
        b.pubsub_mode(redisson_lock::PubSubMode::Sharded)
    })
    .await;
    let mut listener = Listener::channel(&server, &lock_channel("no-spublish")).await;
    let lock = c.lock("no-spublish").unwrap();
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    guard.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "no-spublish"]), "0");
    assert_eq!(
        listener.next().await,
        (lock_channel("no-spublish"), "0".to_string())
    );
}

/// A subscription the server refuses after a reconnect (here its user lost the right to the
/// channels, then got it back) is asked for again, not left undone until the next reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resubscription_is_retried() {
    let server = RedisServer::start();
    let acl = ["ACL", "SETUSER", "waiter", "on", ">pw", "~*", "&*", "+@all"];
    assert_eq!(server.command(&acl), "OK");
    let url = format!("redis://waiter:pw@127.0.0.1:{}", server.port());
    let waiter = client_with(&server, |b| b.url(&url)).await; // heartbeat every 300 ms
    let holder = long_watchdog_client(&server).await;
    let name = "refused-resubscription";
    let guard = held(&holder, name).await;
    let waiting = tokio::spawn(waiter.lock(name).unwrap().lock(&waiter.new_owner()));
    let channel = lock_channel(name);
    subscribed(&server, &channel).await;

    // Redis 7 disconnects a subscriber whose user loses its channels: the reconnect's
    // SUBSCRIBE is refused, as the ACL log shows.
    server.command(&["ACL", "LOG", "RESET"]);
    server.command(&["ACL", "SETUSER", "waiter", "resetchannels"]);
    eventually(10 * SECOND, "a refused SUBSCRIBE", || {
        server.command(&["ACL", "LOG"]).contains(&channel)
    })
    .await;
    server.command(&["ACL", "SETUSER", "waiter", "allchannels"]);
    subscribed(&server, &channel).await;
    guard.unlock().await.unwrap();
    woken_and_released("the waiter after its resubscription", waiting).await;
}

/// The subscriber a client makes for `clients(redis, None)` takes `redis`'s reconnect
/// policy. With none, fred ends the subscriber's connection task for good when its
/// connection drops. The lock client starts that task again, subscribes its waiters'
/// channels again, and a waiter wakes on the release's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_whose_connection_task_ended_is_started_again() {
    let server = RedisServer::start();
    let c = client_without_reconnect_policy(&server).await;
    let holder = client(&server).await;
    let name = "subscriber-restarted";
    let channel = lock_channel(name);
    let guard = holder.lock(name).unwrap().lock(&holder.new_owner()).await;
    let guard = guard.unwrap();
    let waiter = tokio::spawn(c.lock(name).unwrap().lock(&c.new_owner()));
    eventually(10 * SECOND, "the waiter's subscription", || {
        subscribers(&server, &channel) >= 1
    })
    .await;

    // The only subscribed connection is the waiting client's.
    assert_eq!(server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]), "1");
    eventually(10 * SECOND, "the channel subscribed again", || {
        subscribers(&server, &channel) >= 1
    })
    .await;
    guard.unlock().await.unwrap();
    woken_and_released("waiter", waiter).await;
}
