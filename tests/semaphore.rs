//! The semaphore (Redisson's `RSemaphore`, protocol §13): the counter and
//! messages Java writes and reads, exclusion among many tasks of two clients, wake-ups by
//! this crate and by Java, cancelled and unanswered acquisitions, and bad input.

mod support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisson_lock::{Error, LockClient, Semaphore, MAX_PERMITS};
use support::listener::Listener;
use support::topology::Cluster;
use support::*;

fn channel(name: &str) -> String {
    format!("redisson_sc:{{{name}}}")
}

fn counter(server: &RedisServer, name: &str) -> String {
    server.command(&["GET", name])
}

/// A new server, a client of it and the semaphore `name`.
async fn on_a_new_server(name: &str) -> (RedisServer, LockClient, &str, Semaphore) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore(name).unwrap();
    (server, c, name, sem)
}

/// Until the counter reads `count`: what a background undo or release settles to.
async fn settles_at(server: &RedisServer, name: &str, count: &str) {
    eventually(
        Duration::from_secs(10),
        &format!("{name} at {count}"),
        || counter(server, name) == count,
    )
    .await;
}

/// §13.1, §13.2: a STRING counter in decimal without TTL; the new count published on
/// `redisson_sc:{name}` by trySetPermits, release and addPermits; nothing by acquire and
/// drain; TTLs kept by release, dropped by addPermits and drain.
#[tokio::test]
async fn layout_and_messages_are_javas() {
    let (server, c, name, sem) = on_a_new_server("sem-layout").await;
    let mut listener = Listener::channel(&server, &channel(name)).await;

    assert!(sem.try_set_permits(3).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "3".to_owned()));
    assert_eq!(server.command(&["TYPE", name]), "string");
    assert_eq!(counter(&server, name), "3");
    assert_eq!(pttl(&server, name), -1, "no TTL");
    assert!(!sem.try_set_permits(5).await.unwrap(), "exists already");
    assert_eq!(counter(&server, name), "3");

    assert!(sem.try_acquire_many(2).await.unwrap());
    assert_eq!(counter(&server, name), "1");
    assert!(!sem.try_acquire_many(2).await.unwrap(), "only 1 free");
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    listener.no_more().await;

    sem.release(2).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "3".to_owned()));
    assert_eq!(counter(&server, name), "3");

    // addPermits may go below zero, and publishes the count as it is.
    sem.add_permits(-5).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "-2".to_owned()));
    assert_eq!(sem.available_permits().await.unwrap(), -2);
    assert!(!sem.try_acquire_many(1).await.unwrap());
    sem.add_permits(7).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "5".to_owned()));

    // A TTL the user set: release keeps it, addPermits and drainPermits drop it (SET).
    server.command(&["PEXPIRE", name, "60000"]);
    sem.release(1).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "6".to_owned()));
    assert!(pttl(&server, name) > 0, "release keeps the TTL");
    assert_eq!(sem.drain_permits().await.unwrap(), 6);
    assert_eq!(counter(&server, name), "0");
    assert_eq!(pttl(&server, name), -1, "drain drops the TTL");
    server.command(&["PEXPIRE", name, "60000"]);
    sem.add_permits(1).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    assert_eq!(pttl(&server, name), -1, "addPermits drops the TTL");
    listener.no_more().await;

    // A missing counter: drain creates nothing, release creates it at n.
    let fresh = c.semaphore("sem-layout-fresh").unwrap();
    assert_eq!(fresh.drain_permits().await.unwrap(), 0);
    assert_eq!(server.command(&["EXISTS", "sem-layout-fresh"]), "0");
    assert_eq!(fresh.available_permits().await.unwrap(), 0);
    fresh.release(4).await.unwrap();
    assert_eq!(counter(&server, "sem-layout-fresh"), "4");

    // The only other keys are the write records, each with a TTL.
    assert_eq!(keys_but_records(&server), [name, "sem-layout-fresh"]);

    // delete (Java's RSemaphore.delete): DEL of the counter, telling no one.
    assert!(sem.delete().await.unwrap());
    assert_eq!(server.command(&["EXISTS", name]), "0");
    assert!(!sem.delete().await.unwrap(), "nothing left to delete");
    listener.no_more().await;
}

/// A semaphore of 2 shared by 16 tasks of two clients never has 3 holders.
#[tokio::test]
async fn two_permits_never_have_three_holders() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let name = "sem-crowd";
    assert!(clients[0]
        .semaphore(name)
        .unwrap()
        .try_set_permits(2)
        .await
        .unwrap());
    let holders = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let sem = clients[(i % 2) as usize].semaphore(name).unwrap();
        let (holders, most) = (holders.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..4u64 {
                let permit = sem.acquire_guard(1).await.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(spread(i * 4 + round, 3000)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    all_finish(Duration::from_secs(60), "16 tasks", tasks).await;
    assert!(most.load(Ordering::SeqCst) <= 2, "{most:?} holders at once");
    assert_eq!(most.load(Ordering::SeqCst), 2, "both permits were used");
    assert_eq!(counter(&server, name), "2");
}

/// `holder` takes the only permit of the semaphore `name`; a task of `other` then waits for
/// it (its first attempt and the one after subscribing have run).
async fn waiting_behind_the_only_permit(
    server: &RedisServer,
    holder: &LockClient,
    other: &LockClient,
    name: &str,
) -> (
    redisson_lock::SemaphorePermits,
    tokio::task::JoinHandle<redisson_lock::Result<()>>,
) {
    let sem = holder.semaphore(name).unwrap();
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire_guard(1).await.unwrap();
    let calls = evalsha_calls(server);
    let waiter = other.semaphore(name).unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_many(1).await });
    waiting_on(server, name, calls + 2).await;
    (permit, waiting)
}

/// A waiter of another client wakes on a release, far sooner than its re-check (15 s).
#[tokio::test]
async fn waiter_in_another_client_wakes_on_release() {
    let server = RedisServer::start();
    let (holder, other) = (client(&server).await, client(&server).await);
    let name = "sem-wake";
    let (permit, waiting) = waiting_behind_the_only_permit(&server, &holder, &other, name).await;
    drop(permit);
    within(WAKE, "a waiter woken by a release", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(counter(&server, name), "0");
}

/// Waits until a waiter of a client new to the channel waits: subscribed, its attempts made.
async fn waiting_on(server: &RedisServer, name: &str, calls: u64) {
    subscribed(server, &channel(name)).await;
    scripts_reach(server, calls).await;
}

/// Java's release (INCRBY, then PUBLISH of the new count) wakes a waiter here.
#[tokio::test]
async fn waiter_wakes_on_a_java_release() {
    let (server, _client, name, sem) = on_a_new_server("sem-java").await;
    assert!(sem.try_set_permits(0).await.unwrap(), "0 is a count");
    assert_eq!(counter(&server, name), "0");
    let calls = evalsha_calls(&server);
    let waiting = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_many_for(1, Duration::from_secs(60)).await }
    });
    waiting_on(&server, name, calls + 2).await;
    // A message that is not a count wakes no one (Java drops it too).
    server.command(&["PUBLISH", &channel(name), "hello"]);
    assert_eq!(server.command(&["INCRBY", name, "1"]), "1");
    server.command(&["PUBLISH", &channel(name), "1"]);
    let taken = within(WAKE, "a waiter woken by Java", waiting).await;
    assert!(taken.unwrap().unwrap());
    assert_eq!(counter(&server, name), "0");
}

/// A release that publishes nothing (a plain INCRBY) is found by the waiter's re-check
/// (every 15 s), where a Java waiter would wait out its whole wait.
#[tokio::test]
async fn a_silent_release_is_found_by_the_recheck() {
    let (server, _client, name, sem) = on_a_new_server("sem-silent").await;
    assert!(sem.try_set_permits(0).await.unwrap());
    let calls = evalsha_calls(&server);
    let waiting = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_many_for(1, Duration::from_secs(120)).await }
    });
    waiting_on(&server, name, calls + 2).await;
    assert_eq!(server.command(&["INCRBY", name, "1"]), "1");
    let taken = within(Duration::from_secs(30), "the re-check", waiting).await;
    assert!(taken.unwrap().unwrap());
    assert_eq!(counter(&server, name), "0");
}

/// Acquisitions dropped while waiting and while their script is on the wire, many times,
/// leave the count as it was; so does one whose reply is lost to a command timeout.
#[tokio::test]
async fn cancelled_and_unanswered_acquires_take_nothing() {
    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let c = client(&server).await;
    let name = "sem-cancel";
    let sem = c.semaphore(name).unwrap();
    assert!(sem.try_set_permits(0).await.unwrap());

    // Dropped mid-wait: no permit to take.
    for i in 0..20 {
        let cut = Duration::from_millis(1 + i * 7);
        assert!(cut_off(cut, sem.acquire_many(1)).await.is_err());
    }
    sem.release(3).await.unwrap();

    // Dropped at every point of a short call: before sending, on the wire, after.
    let mut kept = 0;
    for i in 0..60 {
        if let Ok(taken) = cut_off(spread(i, 3000), sem.acquire_guard(1)).await {
            taken.unwrap().forget();
            kept += 1;
        }
    }
    sem.release(kept).await.unwrap();
    settles_at(&server, name, "3").await;

    // Dropped while the server is busy: the script runs after the caller gave up. (A server
    // only slow to answer the probe lets an acquisition finish: it gives its permits back.)
    let mut dropped = 0;
    for _ in 0..3 {
        let sleeping = server.command_on_thread(&["DEBUG", "SLEEP", "1"]);
        asleep(&server).await;
        match cut_off(Duration::from_millis(100), sem.acquire_guard(2)).await {
            Err(()) => dropped += 1,
            Ok(taken) => taken.unwrap().release().await.unwrap(),
        }
        tokio::task::spawn_blocking(move || sleeping.join().unwrap().unwrap())
            .await
            .unwrap();
        settles_at(&server, name, "3").await;
    }
    assert!(dropped > 0, "no acquisition was dropped on the wire");

    // A reply lost to the command timeout, while the script runs: the network delays each
    // way by 400 ms, so the script arrives within the 600 ms timeout and its reply after it.
    // An error, and the permits come back.
    let proxy = FaultProxy::start(server.port()).await;
    let impatient = LockClient::builder()
        .url(&proxy.url())
        .command_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let sem = impatient.semaphore(name).unwrap();
    // What the client learns on its first script (the server's replicas) is learnt first.
    assert!(sem.try_acquire_many(1).await.unwrap());
    sem.release(1).await.unwrap();
    let scripts = evalsha_calls(&server);
    proxy.set(Net::Slow {
        base: Duration::from_millis(400),
        jitter: Duration::ZERO,
    });
    let error = sem.try_acquire_many(2).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    scripts_reach(&server, scripts + 1).await;
    proxy.set(Net::Clear);
    settles_at(&server, name, "3").await;
    assert!(sem.try_acquire_many(3).await.unwrap());
    assert_eq!(counter(&server, name), "0");
}

/// Until the server runs a `DEBUG SLEEP`: a PING on a connection of its own goes unanswered.
async fn asleep(server: &RedisServer) {
    eventually(Duration::from_secs(10), "the server asleep", || {
        let port = server.port();
        let ping = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.write_all(b"PING\r\n").unwrap();
            stream
                .set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            stream.read(&mut [0; 16]).is_err()
        });
        ping.join().unwrap()
    })
    .await;
}

/// A guard gives its permits back on drop; `forget` keeps them taken.
#[tokio::test]
async fn guard_gives_back_on_drop_and_forget_keeps() {
    let (server, _client, name, sem) = on_a_new_server("sem-guard").await;
    assert!(sem.try_set_permits(3).await.unwrap());
    let permits = sem.acquire_guard(2).await.unwrap();
    assert_eq!(permits.permits(), 2);
    assert_eq!(counter(&server, name), "1");
    drop(permits);
    settles_at(&server, name, "3").await;
    assert!(sem.try_acquire_guard(4).await.unwrap().is_none());
    let kept = sem
        .try_acquire_guard_for(3, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.forget(), 3);
    assert_eq!(counter(&server, name), "0");
}

/// Zero permits: true with no command; negative or too large counts and keys of another
/// type fail clearly.
#[tokio::test]
async fn bad_input_fails_clearly() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("sem-bad").unwrap();
    let before = evalsha_calls(&server);
    assert!(sem.try_acquire_many(0).await.unwrap());
    sem.acquire_many(0).await.unwrap();
    assert!(sem.try_acquire_many_for(0, SECOND).await.unwrap());
    sem.release(0).await.unwrap();
    assert_eq!(evalsha_calls(&server), before, "zero sends nothing");
    assert_eq!(server.command(&["EXISTS", "sem-bad"]), "0");

    let invalid = |result: redisson_lock::Result<()>| match result {
        Err(Error::InvalidArgument(words)) => words.to_string(),
        other => panic!("{other:?}"),
    };
    // Counts are u32: a negative one does not compile. The deprecated i64 forms refuse it.
    #[allow(deprecated)]
    {
        let words = invalid(sem.try_acquire(-1).await.map(|_| ()));
        assert!(words.contains("sem-bad") && words.contains("-1"), "{words}");
        invalid(sem.acquire(-2).await);
        invalid(
            sem.try_acquire_for(i64::from(u32::MAX) + 1, SECOND)
                .await
                .map(|_| ()),
        );
        assert!(
            sem.try_acquire(0).await.unwrap(),
            "the old names still work"
        );
    }
    invalid(sem.add_permits(i64::MIN).await);
    assert_eq!(evalsha_calls(&server), before, "refused before sending");
    assert!(matches!(c.semaphore(""), Err(Error::InvalidArgument(_))));

    // The count would pass what the counter holds.
    sem.add_permits(MAX_PERMITS).await.unwrap();
    let error = sem.release(1).await.unwrap_err().to_string();
    assert!(error.contains("would hold"), "{error}");
    assert_eq!(counter(&server, "sem-bad"), MAX_PERMITS.to_string());

    // Not a number.
    server.command(&["SET", "sem-text", "many"]);
    let text = c.semaphore("sem-text").unwrap();
    let error = text.try_acquire_many(1).await.unwrap_err().to_string();
    assert!(error.contains("not a whole number"), "{error}");
    assert_eq!(counter(&server, "sem-text"), "many");

    // Another type.
    server.command(&["RPUSH", "sem-list", "x"]);
    let list = c.semaphore("sem-list").unwrap();
    let wrong = |result: redisson_lock::Result<()>| {
        assert!(matches!(result, Err(Error::WrongType { .. })), "{result:?}")
    };
    let error = list.try_acquire_many(1).await.unwrap_err().to_string();
    assert!(
        error.contains("\"sem-list\"") && error.contains("another type"),
        "{error}"
    );
    wrong(list.try_acquire_many(1).await.map(|_| ()));
    wrong(list.release(1).await);
    wrong(list.available_permits().await.map(|_| ()));
    wrong(list.drain_permits().await.map(|_| ()));
    wrong(list.add_permits(1).await);
    wrong(list.try_set_permits(1).await.map(|_| ()));
    assert_eq!(server.command(&["TYPE", "sem-list"]), "list");
}

/// The blocking twin: the same semaphore, its guard given back before `drop` returns, and
/// a blocked thread woken by a release from another.
#[cfg(feature = "blocking")]
#[test]
fn blocking_twin_shares_the_permits() {
    let server = RedisServer::start();
    let client = default_blocking_client(&server);
    let name = "sem-blocking";
    let sem = client.semaphore(name).unwrap();
    assert!(sem.try_set_permits(2).unwrap());
    let permits = sem.acquire_guard(2).unwrap();
    assert_eq!(permits.permits(), 2);
    assert!(!sem.try_acquire_many(1).unwrap());
    let waiter = std::thread::spawn({
        let sem = sem.clone();
        move || sem.try_acquire_many_for(1, Duration::from_secs(60))
    });
    std::thread::spawn(move || drop(permits)).join().unwrap();
    assert!(waiter.join().unwrap().unwrap());
    assert_eq!(sem.available_permits().unwrap(), 1);
    assert_eq!(sem.drain_permits().unwrap(), 1);
    sem.add_permits(3).unwrap();
    assert_eq!(sem.try_acquire_guard(3).unwrap().unwrap().forget(), 3);
    sem.release(3).unwrap();
    assert_eq!(counter(&server, name), "3");
    client.shutdown();
}

/// On a cluster: every script of a name (the counter, the attempt records and the channel in
/// one slot) runs, for a plain and a hash-tagged name, and a waiter of another client wakes
/// on a release (sharded pub/sub where the servers have it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_waiter_wakes_on_release() {
    let cluster = Cluster::start();
    let holder = deployment_client(&cluster.url(), |b| b).await;
    let other = deployment_client(&cluster.url(), |b| b).await;
    for name in ["sem-cluster", "{user:7}:sem"] {
        let sem = holder.semaphore(name).unwrap();
        assert!(sem.try_set_permits(1).await.unwrap());
        let permit = sem.acquire_guard(1).await.unwrap();
        let waiter = other.semaphore(name).unwrap();
        let waiting = tokio::spawn(async move {
            waiter
                .try_acquire_many_for(1, Duration::from_secs(60))
                .await
        });
        eventually(Duration::from_secs(10), "the waiter subscribed", || {
            other.subscribed_channels() >= 1
        })
        .await;
        permit.release().await.unwrap();
        let taken = within(WAKE, "a waiter woken on a cluster", waiting).await;
        assert!(taken.unwrap().unwrap(), "{name}");
        sem.add_permits(2).await.unwrap();
        assert_eq!(sem.drain_permits().await.unwrap(), 2);
        assert_eq!(cluster.master_of(name).command(&["GET", name]), "0");
    }
}

/// The least-privilege user of `docs/operations.md`, for semaphores named `orders:…`: the
/// counter, its channel and its acquisitions' records, every command but the `@dangerous`
/// ones, and `INFO` for the replica check. Without the records' pattern, an acquisition is
/// refused with nothing written.
#[tokio::test]
async fn least_privilege_user_uses_a_semaphore() {
    let server = RedisServer::start();
    let user = |name: &str, records: bool| {
        let mut acl = vec!["ACL", "SETUSER", name, "on", ">pw", "~orders:*"];
        acl.push("~redisson_sc:{orders:*");
        if records {
            acl.push("~redisson_sc_attempt:{orders:*");
        }
        acl.extend(["resetchannels", "&redisson_sc:{orders:*"]);
        acl.extend(["+@all", "-@dangerous", "+info"]);
        assert_eq!(server.command(&acl), "OK");
    };
    user("sem", true);
    user("norecords", false);
    let as_user = |name: &str| format!("redis://{name}:pw@127.0.0.1:{}", server.port());
    let (holder, other) = (
        client_with(&server, |b| b.url(&as_user("sem"))).await,
        client_with(&server, |b| b.url(&as_user("sem"))).await,
    );
    let name = "orders:sem";
    let (permit, waiting) = waiting_behind_the_only_permit(&server, &holder, &other, name).await;
    permit.release().await.unwrap();
    within(WAKE, "a waiter woken by a release", waiting)
        .await
        .unwrap()
        .unwrap();
    let sem = holder.semaphore(name).unwrap();
    sem.add_permits(1).await.unwrap();
    assert_eq!(sem.drain_permits().await.unwrap(), 1);
    assert_eq!(sem.available_permits().await.unwrap(), 0);

    // Acquisitions and releases both keep records: without access to them, the server
    // refuses the scripts for their keys, before they run.
    let refused = client_with(&server, |b| b.url(&as_user("norecords"))).await;
    let sem = refused.semaphore(name).unwrap();
    let error = sem.release(1).await.unwrap_err().to_string();
    assert!(error.contains("NOPERM"), "{error}");
    sem.add_permits(0).await.unwrap_err();
    let error = sem.try_acquire_many(1).await.unwrap_err().to_string();
    assert!(error.contains("NOPERM"), "{error}");
    assert_eq!(counter(&server, name), "0");
}

/// With the replica check on, an acquisition no replica confirms fails with `NotReplicated`
/// and gives its permits back on the master (a failover could have lost the write).
#[tokio::test]
async fn an_acquisition_no_replica_confirms_is_given_back() {
    let (master, replica) = support::topology::replicated();
    let c = deployment_client(&master.url(), |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
    })
    .await;
    let name = "sem-replica";
    let sem = c.semaphore(name).unwrap();
    // Confirmed, and the client learns that the master has a replica.
    confirmed("the permits set", || sem.try_set_permits(2)).await;
    assert_eq!(counter(&master, name), "2");
    let paused = paused_replica(&master, &replica, 4).await;
    match sem.try_acquire_many(1).await {
        Err(Error::NotReplicated { .. }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    settles_at(&master, name, "2").await;
    tokio::task::spawn_blocking(move || paused.join().unwrap().unwrap())
        .await
        .unwrap();
}

#[test]
fn handles_guards_and_futures_are_send_and_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<redisson_lock::Semaphore>();
    send_sync_static::<redisson_lock::SemaphorePermits>();
    // Checked by the compiler alone: no client, no server, nothing runs.
    let _: fn(redisson_lock::Semaphore, redisson_lock::SemaphorePermits) = futures_are_spawnable;
}

/// Type-checked, never called: every future of the semaphore is spawnable.
fn futures_are_spawnable(sem: redisson_lock::Semaphore, permits: redisson_lock::SemaphorePermits) {
    fn send_static<T: Send + 'static>(_: &T) {}
    send_static(&sem.try_set_permits(1));
    send_static(&sem.acquire_many(1));
    send_static(&sem.try_acquire_many(1));
    send_static(&sem.try_acquire_many_for(1, SECOND));
    send_static(&sem.acquire_guard(1));
    send_static(&sem.try_acquire_guard(1));
    send_static(&sem.try_acquire_guard_for(1, SECOND));
    send_static(&sem.release(1));
    send_static(&sem.available_permits());
    send_static(&sem.drain_permits());
    send_static(&sem.add_permits(1));
    send_static(&permits.release());
}
