//! The permit-expirable semaphore (protocol §15) when things go wrong: cancelled and
//! unanswered acquisitions, an undo that overtakes its acquisition, bad input, keys of
//! another type; and on a cluster, and through the blocking API.

mod support;

use std::time::Duration;

use redisson_lock::{Error, LockClient, PermitId, MAX_ACQUIRE};
use support::lua::lua;
use support::topology::Cluster;
use support::*;

const MINUTE: Option<Duration> = Some(Duration::from_secs(60));

fn leases(name: &str) -> String {
    format!("{{{name}}}:timeout")
}

fn counter(server: &RedisServer, name: &str) -> String {
    server.command(&["GET", name])
}

/// Until the counter reads `count` and no permit is held: what background undos settle to.
async fn settles_at(server: &RedisServer, name: &str, count: &str) {
    eventually(
        Duration::from_secs(10),
        &format!("{name} at {count}, none held"),
        || counter(server, name) == count && server.command(&["ZCARD", &leases(name)]) == "0",
    )
    .await;
}

/// Acquisitions dropped while waiting and while their script is on the wire, many times,
/// leave no permit taken; so does one whose reply is lost to a command timeout.
#[tokio::test]
async fn cancelled_and_unanswered_acquires_take_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "pes-cancel";
    let sem = c.permit_expirable_semaphore(name).unwrap();
    assert!(sem.try_set_permits(0).await.unwrap());

    // Dropped mid-wait: no permit to take.
    for i in 0..20 {
        let cut = Duration::from_millis(1 + i * 7);
        assert!(cut_off(cut, sem.acquire(MINUTE)).await.is_err());
    }
    sem.add_permits(3).await.unwrap();

    // Dropped at every point of a short call: before sending, on the wire, after.
    let mut kept = Vec::new();
    for i in 0..60 {
        let lease = if i % 2 == 0 { MINUTE } else { None };
        if let Ok(taken) = cut_off(spread(i, 3000), sem.acquire_guard(2, lease)).await {
            kept.extend(taken.unwrap().forget());
        }
    }
    for id in kept {
        sem.release(id).await.unwrap();
    }
    settles_at(&server, name, "3").await;

    // A reply lost to the command timeout, while the script runs: the network delays each
    // way by 400 ms, so the script arrives within the 600 ms timeout and its reply after it.
    // An error, and exactly its permits come back.
    let proxy = FaultProxy::start(server.port()).await;
    let impatient = LockClient::builder()
        .url(&proxy.url())
        .command_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let slow = impatient.permit_expirable_semaphore(name).unwrap();
    // What the client learns on its first script (the server's replicas) is learnt first.
    let id = slow.try_acquire(MINUTE).await.unwrap().unwrap();
    slow.release(id).await.unwrap();
    let other = sem.acquire(None).await.unwrap();
    let scripts = evalsha_calls(&server);
    proxy.set(Net::Slow {
        base: Duration::from_millis(400),
        jitter: Duration::ZERO,
    });
    let error = slow.try_acquire_many(2, None).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    scripts_reach(&server, scripts + 1).await;
    proxy.set(Net::Clear);
    // The undo gives back the 2 it took, not the one held by another.
    eventually(Duration::from_secs(10), "the undo", || {
        counter(&server, name) == "2"
    })
    .await;
    assert_eq!(server.command(&["ZCARD", &leases(name)]), "1");
    sem.release(other).await.unwrap();
    settles_at(&server, name, "3").await;
}

/// An undo that reaches the server before its acquisition (the acquisition delayed on the
/// wire) leaves a record that keeps the acquisition from taking anything.
#[tokio::test]
async fn an_undo_before_its_acquisition_keeps_it_from_taking() {
    let server = RedisServer::start();
    let name = "pes-overtaken";
    server.command(&["SET", name, "2"]);
    let record = format!("redisson_sc_attempt:{{{name}}}:client:7");
    let (undo, acquire) = (lua("expirable_undo"), lua("expirable_acquire"));
    let (l, c) = (leases(name), format!("redisson_sc:{{{name}}}"));
    let id = "0123456789abcdef";
    let undone = [
        "EVAL", &undo, "4", name, &l, &c, &record, "120000", "publish", id,
    ];
    assert_eq!(server.command(&undone), "0", "nothing to give back yet");
    assert!(pttl(&server, &record) > 0, "the record has a TTL");
    let now = now_ms().to_string();
    let late = [
        "EVAL",
        &acquire,
        "4",
        name,
        &l,
        &c,
        &record,
        "1",
        "922337203685477",
        &now,
        "publish",
        id,
    ];
    assert_eq!(server.command(&late), "(nil)", "took nothing");
    assert_eq!(counter(&server, name), "2");
    assert_eq!(server.command(&["EXISTS", &l]), "0");

    // Without the record, the same acquisition takes; its undo gives back exactly its id.
    let fresh = format!("{record}-2");
    let taken = [
        "EVAL",
        &acquire,
        "4",
        name,
        &l,
        &c,
        &fresh,
        "1",
        "922337203685477",
        &now,
        "publish",
        id,
    ];
    assert_eq!(server.command(&taken), "OK");
    server.command(&["ZADD", &l, "922337203685477", "someone-elses-id"]);
    let undone = [
        "EVAL", &undo, "4", name, &l, &c, &fresh, "120000", "publish", id,
    ];
    assert_eq!(server.command(&undone), "1");
    assert_eq!(counter(&server, name), "2");
    assert_eq!(
        server.command(&["ZRANGE", &l, "0", "-1"]),
        "someone-elses-id"
    );
}

/// Zero or negative permits, leases under 1 ms or past "never", malformed ids: refused
/// before sending, in words; an unknown id; keys of another type.
#[tokio::test]
async fn bad_input_fails_clearly() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "pes-bad";
    let sem = c.permit_expirable_semaphore(name).unwrap();
    let before = evalsha_calls(&server);
    let invalid = |result: redisson_lock::Result<()>| match result {
        Err(Error::InvalidArgument(words)) => words.to_string(),
        other => panic!("{other:?}"),
    };
    let words = invalid(sem.acquire_many(0, None).await.map(|_| ()));
    assert!(
        words.contains(name) && words.contains("at least 1"),
        "{words}"
    );
    invalid(sem.try_acquire_many(u32::MAX, None).await.map(|_| ()));
    invalid(sem.acquire_many(MAX_ACQUIRE + 1, None).await.map(|_| ()));
    let words = invalid(sem.try_acquire(Some(Duration::ZERO)).await.map(|_| ()));
    assert!(words.contains("at least 1 ms"), "{words}");
    invalid(
        sem.acquire(Some(Duration::from_micros(999)))
            .await
            .map(|_| ()),
    );
    let words = invalid(sem.try_acquire(Some(Duration::MAX)).await.map(|_| ()));
    assert!(words.contains("never"), "{words}");
    let id = PermitId::from_bytes([7; 16]);
    invalid(
        sem.update_lease_time(id, Some(Duration::ZERO))
            .await
            .map(|_| ()),
    );
    invalid(sem.add_permits(i64::MIN).await);
    invalid(sem.try_release_many(&[]).await.map(|_| ()));
    assert_eq!(evalsha_calls(&server), before, "refused before sending");
    assert!(matches!(
        c.permit_expirable_semaphore(""),
        Err(Error::InvalidArgument(_))
    ));
    let words = "not-hex".parse::<PermitId>().unwrap_err().to_string();
    assert!(
        words.contains("\"not-hex\"") && words.contains("32 hex digits"),
        "{words}"
    );
    let words = "zz".repeat(16).parse::<PermitId>().unwrap_err().to_string();
    assert!(words.contains("not hex"), "{words}");

    // An id never taken.
    let error = sem.release(id).await.unwrap_err();
    let words = error.to_string();
    assert!(matches!(error, Error::PermitNotHeld { expired: false, .. }));
    assert!(
        words.contains(name) && words.contains(&id.to_string()),
        "{words}"
    );
    assert!(matches!(
        sem.lease_time(id).await,
        Err(Error::PermitNotHeld { .. })
    ));
    assert!(!sem.try_release(id).await.unwrap());
    assert!(!sem.update_lease_time(id, MINUTE).await.unwrap());

    // Another type, under the counter and under the leases.
    let wrong = |result: redisson_lock::Result<()>| {
        assert!(matches!(result, Err(Error::WrongType { .. })), "{result:?}")
    };
    server.command(&["RPUSH", "pes-list", "x"]);
    let list = c.permit_expirable_semaphore("pes-list").unwrap();
    let error = list.try_acquire(None).await.unwrap_err().to_string();
    assert!(
        error.contains("\"pes-list\"") && error.contains("another type"),
        "{error}"
    );
    wrong(list.available_permits().await.map(|_| ()));
    wrong(list.add_permits(1).await);
    wrong(list.set_permits(1).await);
    server.command(&["SET", "pes-zs", "1"]);
    server.command(&["SET", &leases("pes-zs"), "x"]);
    let zs = c.permit_expirable_semaphore("pes-zs").unwrap();
    wrong(zs.try_acquire(None).await.map(|_| ()));
    wrong(zs.release(id).await);
    wrong(zs.acquired_permits().await.map(|_| ()));
    wrong(zs.lease_time(id).await.map(|_| ()));
    assert_eq!(server.command(&["TYPE", "pes-list"]), "list");
    assert_eq!(counter(&server, "pes-zs"), "1");
}

/// On a cluster: every script of a name (counter, leases, attempt records and channel in
/// one slot) runs, for a plain and a hash-tagged name, and a waiter of another client wakes
/// on a release (sharded pub/sub where the servers have it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_waiter_wakes_on_release() {
    let cluster = Cluster::start();
    let holder = deployment_client(&cluster.url(), |b| b).await;
    let other = deployment_client(&cluster.url(), |b| b).await;
    for name in ["pes-cluster", "{user:7}:pes"] {
        let sem = holder.permit_expirable_semaphore(name).unwrap();
        assert!(sem.try_set_permits(1).await.unwrap());
        let id = sem.acquire(MINUTE).await.unwrap();
        let waiter = other.permit_expirable_semaphore(name).unwrap();
        let waiting = tokio::spawn(async move {
            let wait = Duration::from_secs(60);
            waiter.try_acquire_guard_for(1, wait, None).await
        });
        eventually(Duration::from_secs(10), "the waiter subscribed", || {
            other.subscribed_channels() >= 1
        })
        .await;
        sem.release(id).await.unwrap();
        let taken = within(WAKE, "a waiter woken on a cluster", waiting).await;
        let guard = taken.unwrap().unwrap().unwrap();
        assert_eq!(sem.acquired_permits().await.unwrap(), 1);
        assert!(sem.update_lease_time(guard.ids()[0], MINUTE).await.unwrap());
        assert!(guard.release().await.unwrap());
        assert_eq!(sem.permits().await.unwrap(), 1);
        let leases = if name.contains('{') {
            format!("{name}:timeout")
        } else {
            leases(name)
        };
        let master = cluster.master_of(name);
        assert_eq!(master.command(&["GET", name]), "1");
        assert_eq!(master.command(&["EXISTS", &leases]), "0", "emptied");
        assert!(sem.delete().await.unwrap());
    }
}

/// The blocking twin: the same permits, its guard given back before `drop` returns, and a
/// blocked thread woken by a release from another.
#[cfg(feature = "blocking")]
#[test]
fn blocking_twin_shares_the_permits() {
    let server = RedisServer::start();
    let client = default_blocking_client(&server);
    let name = "pes-blocking";
    let sem = client.permit_expirable_semaphore(name).unwrap();
    assert!(sem.try_set_permits(2).unwrap());
    let permits = sem.acquire_guard(2, MINUTE).unwrap();
    assert_eq!(permits.ids().len(), 2);
    assert_eq!(sem.try_acquire(None).unwrap(), None);
    let waiter = std::thread::spawn({
        let sem = sem.clone();
        move || sem.try_acquire_for(Duration::from_secs(60), None)
    });
    std::thread::spawn(move || drop(permits)).join().unwrap();
    let id = waiter.join().unwrap().unwrap().unwrap();
    assert_eq!(sem.available_permits().unwrap(), 1);
    assert_eq!(sem.acquired_permits().unwrap(), 1);
    assert_eq!(sem.lease_time(id).unwrap(), None);
    sem.release(id).unwrap();
    let ids = sem.acquire_many(2, MINUTE).unwrap();
    assert!(sem.try_release_many(&ids).unwrap());
    assert_eq!(sem.permits().unwrap(), 2);
    assert_eq!(counter(&server, name), "2");
    client.shutdown();
}

/// The least-privilege user of `docs/operations.md`, for names `orders:…`: the counter, its
/// leases (`{orders:…}:timeout`), its channel and its undone acquisitions' records.
#[tokio::test]
async fn least_privilege_user_uses_it() {
    let server = RedisServer::start();
    let mut acl = vec![
        "ACL",
        "SETUSER",
        "pes",
        "on",
        ">pw",
        "~orders:*",
        "~{orders:*",
    ];
    acl.extend(["~redisson_sc:{orders:*", "~redisson_sc_attempt:{orders:*"]);
    acl.extend(["resetchannels", "&redisson_sc:{orders:*"]);
    acl.extend(["+@all", "-@dangerous", "+info"]);
    assert_eq!(server.command(&acl), "OK");
    let url = format!("redis://pes:pw@127.0.0.1:{}", server.port());
    let holder = client_with(&server, |b| b.url(&url)).await;
    let other = client_with(&server, |b| b.url(&url)).await;
    let name = "orders:pes";
    let sem = holder.permit_expirable_semaphore(name).unwrap();
    assert!(sem.try_set_permits(1).await.unwrap());
    let id = sem.acquire(MINUTE).await.unwrap();
    let waiter = other.permit_expirable_semaphore(name).unwrap();
    let calls = evalsha_calls(&server);
    let task = tokio::spawn(async move { waiter.acquire(Some(Duration::from_millis(200))).await });
    waiting(&server, &format!("redisson_sc:{{{name}}}"), calls + 2).await;
    sem.release(id).await.unwrap();
    within(WAKE, "a waiter woken by a release", task)
        .await
        .unwrap()
        .unwrap();
    // Its lease ends; a count reaps it (and publishes).
    let lowest = "return redis.call('zrange', KEYS[1], 0, 0, 'withscores')[2]";
    let end = server.command(&["EVAL", lowest, "1", &leases(name)]);
    let end: i64 = end.parse().unwrap();
    eventually(Duration::from_secs(10), "the lease ended", || {
        now_ms() > end
    })
    .await;
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    sem.set_permits(3).await.unwrap();
    sem.add_permits(1).await.unwrap();
    assert_eq!(sem.permits().await.unwrap(), 4);
    assert!(sem.delete().await.unwrap());
}

/// With the replica check on, an acquisition no replica confirms fails with `NotReplicated`
/// and gives exactly its permits back on the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_no_replica_confirms_is_given_back() {
    let (master, replica) = support::topology::replicated();
    let c = deployment_client(&master.url(), |b| {
        b.wait_for_replicas(Some(Duration::from_millis(300)))
    })
    .await;
    let name = "pes-replica";
    let sem = c.permit_expirable_semaphore(name).unwrap();
    confirmed("the permits set", || sem.try_set_permits(2)).await;
    assert_eq!(counter(&master, name), "2");
    let kept = confirmed("a permit", || sem.acquire(None)).await;
    let paused = paused_replica(&master, &replica, 4).await;
    match sem.try_acquire(MINUTE).await {
        Err(Error::NotReplicated { .. }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    eventually(Duration::from_secs(10), "the permit given back", || {
        counter(&master, name) == "1"
    })
    .await;
    assert_eq!(
        master.command(&["ZCARD", &leases(name)]),
        "1",
        "only the kept one"
    );
    tokio::task::spawn_blocking(move || paused.join().unwrap().unwrap())
        .await
        .unwrap();
    sem.release(kept).await.unwrap();
}
