//! The permit-expirable semaphore (Redisson's `RPermitExpirableSemaphore`, protocol §15):
//! the keys, ids, scores and messages Java writes and reads, exclusion among many tasks of
//! two clients, leases that end, wake-ups at the earliest lease end. Cancellation, bad input
//! and topologies: `tests/permit_expirable_semaphore_faults.rs`.

mod support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisson_lock::{Error, LockClient, PermitExpirableSemaphore, PermitId};
use support::listener::Listener;
use support::*;

const NEVER: &str = "922337203685477";
const MINUTE: Option<Duration> = Some(Duration::from_secs(60));

fn channel(name: &str) -> String {
    format!("redisson_sc:{{{name}}}")
}

fn leases(name: &str) -> String {
    format!("{{{name}}}:timeout")
}

/// The leases' members in hex (as Java prints ids), each with its score, lowest first.
fn members(server: &RedisServer, name: &str) -> Vec<(String, String)> {
    let hex = "local out = {} \
        for i, m in ipairs(redis.call('zrange', KEYS[1], 0, -1, 'withscores')) do \
          if i % 2 == 1 then \
            out[#out + 1] = (m:gsub('.', function(c) return string.format('%02x', c:byte()) end)) \
          else out[#out + 1] = m end \
        end return out";
    let reply = server.command(&["EVAL", hex, "1", &leases(name)]);
    let lines: Vec<String> = reply.lines().map(String::from).collect();
    lines
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

fn counter(server: &RedisServer, name: &str) -> String {
    server.command(&["GET", name])
}

async fn on_a_new_server(name: &str) -> (RedisServer, LockClient, PermitExpirableSemaphore) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.permit_expirable_semaphore(name).unwrap();
    (server, c, sem)
}

/// Until every lease of `name` has ended by this clock (what the scripts compare with).
async fn leases_ended(server: &RedisServer, name: &str) {
    let ends: Vec<i64> = (members(server, name).iter())
        .map(|(_, score)| score.parse().unwrap())
        .collect();
    eventually(Duration::from_secs(20), "the leases ended", || {
        ends.iter().all(|end| now_ms() > *end)
    })
    .await;
}

/// §15.1, §15.2: the counter a decimal STRING of free permits; each permit a member of
/// `{name}:timeout` (its id's 16 raw bytes) scored by its end or the "never" constant; the
/// counter's TTL copied to the leases; what each call publishes on `redisson_sc:{name}`.
#[tokio::test]
async fn layout_and_messages_are_javas() {
    let name = "pes-layout";
    let (server, _c, sem) = on_a_new_server(name).await;
    let mut listener = Listener::channel(&server, &channel(name)).await;

    assert!(sem.try_set_permits(4).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "4".to_owned()));
    assert!(!sem.try_set_permits(9).await.unwrap(), "exists already");
    assert_eq!(server.command(&["TYPE", name]), "string");

    let before = now_ms();
    let leased = sem.acquire_many(2, MINUTE).await.unwrap();
    let after = now_ms();
    let forever = sem.acquire(None).await.unwrap();
    assert_eq!(
        counter(&server, name),
        "1",
        "held permits leave the counter"
    );
    assert_eq!(server.command(&["TYPE", &leases(name)]), "zset");
    let held = members(&server, name);
    assert_eq!(held.len(), 3);
    for (hex, score) in &held {
        assert_eq!(hex.len(), 32, "16 raw bytes: {hex}");
        let id: PermitId = hex.parse().unwrap();
        if id == forever {
            assert_eq!(score, NEVER);
        } else {
            assert!(leased.contains(&id), "{hex}");
            let end: i64 = score.parse().unwrap();
            assert!((before + 60_000..=after + 60_000).contains(&end), "{end}");
        }
    }
    assert_eq!(forever.to_string().len(), 32);
    assert_eq!(
        pttl(&server, &leases(name)),
        -1,
        "no TTL on the counter, none here"
    );
    listener.no_more().await;

    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(sem.acquired_permits().await.unwrap(), 3);
    assert_eq!(sem.permits().await.unwrap(), 4);
    let left = sem.lease_time(leased[0]).await.unwrap().unwrap();
    assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(60));
    assert_eq!(sem.lease_time(forever).await.unwrap(), None);

    // Release publishes the new counter.
    sem.release(forever).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "2".to_owned()));
    // setPermits moves the counter by the difference to the total, publishes the target.
    sem.set_permits(6).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "6".to_owned()));
    assert_eq!(counter(&server, name), "4");
    sem.set_permits(1).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    assert_eq!(counter(&server, name), "-1", "below 0 while 2 are held");
    // addPermits publishes the delta, and only above 0.
    sem.add_permits(3).await.unwrap();
    assert_eq!(listener.next().await, (channel(name), "3".to_owned()));
    sem.add_permits(-1).await.unwrap();
    assert_eq!(counter(&server, name), "1");
    listener.no_more().await;

    // An acquire copies the counter's TTL onto the leases.
    server.command(&["PEXPIRE", name, "600000"]);
    let third = sem.acquire(MINUTE).await.unwrap();
    assert!(pttl(&server, &leases(name)) > 0, "the counter's TTL copied");
    // tryRelease(ids) publishes how many it gave back.
    assert!(sem.update_lease_time(third, None).await.unwrap());
    assert_eq!(members(&server, name)[2].1, NEVER);
    assert!(sem.try_release_many(&[leased[0], third]).await.unwrap());
    assert_eq!(listener.next().await, (channel(name), "2".to_owned()));
    assert!(!sem.try_release_many(&[leased[0], leased[1]]).await.unwrap());
    assert_eq!(members(&server, name).len(), 1, "all or nothing");
    listener.no_more().await;

    assert!(sem.delete().await.unwrap());
    assert_eq!(server.command(&["EXISTS", name, &leases(name)]), "0");
    assert!(!sem.delete().await.unwrap());
}

/// Java's ids are 16 raw bytes: a permit Java took (ZADD of the raw bytes) is released here
/// by its printed id, and one taken here is found by Java's raw id.
#[tokio::test]
async fn java_and_this_crate_share_permits_by_id() {
    let name = "pes-java";
    let (server, _c, sem) = on_a_new_server(name).await;
    assert!(sem.try_set_permits(2).await.unwrap());
    // Java's acquire, as its script writes it: 16 bytes (printable here, for redis-cli).
    let java_bytes = "java-permit-0001";
    server.command(&["DECRBY", name, "1"]);
    server.command(&["ZADD", &leases(name), NEVER, java_bytes]);
    let java_id: PermitId = (java_bytes.bytes())
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .parse()
        .unwrap();
    assert_eq!(sem.lease_time(java_id).await.unwrap(), None);
    sem.release(java_id).await.unwrap();
    assert_eq!(counter(&server, name), "2");

    let ours = sem.acquire(MINUTE).await.unwrap();
    let raw: String = (ours.as_bytes().iter())
        .map(|b| format!("\\x{b:02x}"))
        .collect();
    // Java's ZSCORE with the bytes the hex decodes to.
    let decode = "return redis.call('zscore', KEYS[1], \
        (ARGV[1]:gsub('..', function(h) return string.char(tonumber(h, 16)) end)))";
    let score = server.command(&["EVAL", decode, "1", &leases(name), &ours.to_string()]);
    assert!(score.parse::<i64>().unwrap() > now_ms(), "{raw}: {score}");
}

/// A semaphore of 2 shared by 16 tasks of two clients never has 3 holders.
#[tokio::test]
async fn two_permits_never_have_three_holders() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let name = "pes-crowd";
    let sem = clients[0].permit_expirable_semaphore(name).unwrap();
    assert!(sem.try_set_permits(2).await.unwrap());
    let holders = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let sem = clients[(i % 2) as usize]
            .permit_expirable_semaphore(name)
            .unwrap();
        let (holders, most) = (holders.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..4u64 {
                let lease = if round % 2 == 0 { MINUTE } else { None };
                let permit = sem.acquire_guard(1, lease).await.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(spread(i * 4 + round, 3000)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                assert!(permit.release().await.unwrap(), "held within its lease");
            }
        }));
    }
    all_finish(Duration::from_secs(60), "16 tasks", tasks).await;
    assert!(most.load(Ordering::SeqCst) <= 2, "{most:?} holders at once");
    assert_eq!(most.load(Ordering::SeqCst), 2, "both permits were used");
    assert_eq!(counter(&server, name), "2");
    assert_eq!(server.command(&["ZCARD", &leases(name)]), "0");
}

/// A permit whose lease ended goes back to the pool when a script reaps it, which then
/// publishes the new counter; no one can extend or read it afterwards.
#[tokio::test]
async fn expired_permits_return_to_the_pool() {
    let name = "pes-expire";
    let (server, _c, sem) = on_a_new_server(name).await;
    assert!(sem.try_set_permits(1).await.unwrap());
    let id = sem.acquire(Some(Duration::from_millis(300))).await.unwrap();
    let mut listener = Listener::channel(&server, &channel(name)).await;
    leases_ended(&server, name).await;
    assert_eq!(counter(&server, name), "0", "nothing happens by itself");
    assert_eq!(sem.available_permits().await.unwrap(), 1, "reaped");
    assert_eq!(listener.next().await, (channel(name), "1".to_owned()));
    assert_eq!(sem.acquired_permits().await.unwrap(), 0);
    assert!(!sem.update_lease_time(id, MINUTE).await.unwrap());
    assert!(matches!(
        sem.lease_time(id).await,
        Err(Error::PermitNotHeld { expired: false, .. })
    ));
    // An acquire reaps too.
    let next = sem.acquire(Some(Duration::from_millis(300))).await.unwrap();
    leases_ended(&server, name).await;
    let again = sem.try_acquire(MINUTE).await.unwrap().unwrap();
    assert_ne!(next, again);
    assert_eq!(members(&server, name).len(), 1);
    assert_eq!(counter(&server, name), "0");

    // An acquire of n reaps at most n, as Java's; a count reaps them all.
    sem.release(again).await.unwrap();
    sem.add_permits(2).await.unwrap();
    sem.acquire_many(3, Some(Duration::from_millis(300)))
        .await
        .unwrap();
    leases_ended(&server, name).await;
    assert!(sem.try_acquire(MINUTE).await.unwrap().is_some());
    assert_eq!(counter(&server, name), "0");
    assert_eq!(members(&server, name).len(), 3, "2 expired ones left");
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert_eq!(sem.acquired_permits().await.unwrap(), 1);
}

/// A waiter wakes when the earliest lease ends (the attempt's `:<score>` reply), with no
/// message and long before its 15 s re-check.
#[tokio::test]
async fn a_waiter_wakes_when_the_earliest_lease_ends() {
    let name = "pes-earliest";
    let (server, other, sem) = on_a_new_server(name).await;
    assert!(sem.try_set_permits(2).await.unwrap());
    sem.acquire(None).await.unwrap();
    sem.acquire(Some(Duration::from_millis(1500)))
        .await
        .unwrap();
    let waiter = other.permit_expirable_semaphore(name).unwrap();
    let calls = evalsha_calls(&server);
    let started = std::time::Instant::now();
    let task = tokio::spawn(async move {
        waiter
            .try_acquire_for(Duration::from_secs(60), MINUTE)
            .await
    });
    waiting(&server, &channel(name), calls + 1).await;
    let id = within(Duration::from_secs(10), "the earliest lease's end", task).await;
    assert!(id.unwrap().unwrap().is_some());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not the re-check"
    );
    assert_eq!(sem.acquired_permits().await.unwrap(), 2);
}

/// A wait that runs out gives `None`; a permit freed without a message (a plain INCRBY)
/// is found by the waiter's re-check (every 15 s), where a Java waiter would wait it out.
#[tokio::test]
async fn a_silent_release_is_found_by_the_recheck() {
    let name = "pes-silent";
    let (server, _c, sem) = on_a_new_server(name).await;
    assert!(sem.try_set_permits(1).await.unwrap());
    sem.acquire(None).await.unwrap();
    let short = Duration::from_millis(300);
    assert_eq!(
        sem.try_acquire_many_for(1, short, None).await.unwrap(),
        None
    );
    let calls = evalsha_calls(&server);
    let task = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(Duration::from_secs(120), None).await }
    });
    waiting(&server, &channel(name), calls + 1).await;
    assert_eq!(server.command(&["INCRBY", name, "1"]), "1");
    let taken = within(Duration::from_secs(30), "the re-check", task).await;
    assert!(taken.unwrap().unwrap().is_some());
    assert_eq!(counter(&server, name), "0");
}

/// A waiter of another client wakes on a release, and on Java's (INCRBY and a count).
#[tokio::test]
async fn waiters_wake_on_releases_here_and_by_java() {
    let name = "pes-wake";
    let (server, _holder, sem) = on_a_new_server(name).await;
    let other = client(&server).await;
    assert!(sem.try_set_permits(1).await.unwrap());
    let id = sem.acquire(None).await.unwrap();
    let waiter = other.permit_expirable_semaphore(name).unwrap();
    let calls = evalsha_calls(&server);
    let task = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.acquire(None).await }
    });
    waiting(&server, &channel(name), calls + 2).await;
    sem.release(id).await.unwrap();
    let taken = within(WAKE, "a waiter woken by a release", task).await;
    let taken = taken.unwrap().unwrap();

    let calls = evalsha_calls(&server);
    let task = tokio::spawn(async move { waiter.acquire(None).await });
    waiting(&server, &channel(name), calls + 1).await;
    // Java's release of the permit taken above: ZREM, INCRBY, PUBLISH the counter.
    let java = "redis.call('zrem', KEYS[1], ARGV[1]) \
        local n = redis.call('incrby', KEYS[2], 1) redis.call('publish', KEYS[3], n) return n";
    let bytes = taken
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    assert_eq!(bytes, taken.to_string());
    let unhex =
        "local id = ARGV[1]:gsub('..', function(h) return string.char(tonumber(h, 16)) end) ";
    let script = format!("{unhex}{}", java.replace("ARGV[1]", "id"));
    let (l, c) = (leases(name), channel(name));
    server.command(&["EVAL", &script, "3", &l, name, &c, &taken.to_string()]);
    within(WAKE, "a waiter woken by Java", task)
        .await
        .unwrap()
        .unwrap();
}

/// Releasing a permit whose lease ran out but that no one reaped returns it to the pool
/// and reports failure, as Java: `false` from `try_release`, an error from `release`.
#[tokio::test]
async fn releasing_an_expired_permit_returns_it_and_says_so() {
    let name = "pes-late";
    let (server, _c, sem) = on_a_new_server(name).await;
    assert!(sem.try_set_permits(2).await.unwrap());
    let short = Some(Duration::from_millis(200));
    let ids = sem.acquire_many(2, short).await.unwrap();
    leases_ended(&server, name).await;
    assert!(!sem.try_release(ids[0]).await.unwrap());
    assert_eq!(counter(&server, name), "1", "given back all the same");
    let error = sem.release(ids[1]).await.unwrap_err();
    assert!(matches!(error, Error::PermitNotHeld { expired: true, .. }));
    let words = error.to_string();
    assert!(
        words.contains(name) && words.contains(&ids[1].to_string()),
        "{words}"
    );
    assert!(words.contains("lease had run out"), "{words}");
    assert_eq!(counter(&server, name), "2");
    // Now neither is held at all.
    let error = sem.release(ids[0]).await.unwrap_err();
    assert!(matches!(error, Error::PermitNotHeld { expired: false, .. }));
    assert!(error.to_string().contains("is not held"), "{error}");
    assert!(!sem.try_release(ids[1]).await.unwrap());
    assert_eq!(counter(&server, name), "2");
}

#[test]
fn handles_guards_and_futures_are_send_and_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<PermitExpirableSemaphore>();
    send_sync_static::<redisson_lock::ExpirablePermits>();
    send_sync_static::<PermitId>();
    let _: fn(PermitExpirableSemaphore, redisson_lock::ExpirablePermits) = futures_are_spawnable;
}

/// Type-checked, never called: every future of the semaphore is spawnable.
fn futures_are_spawnable(sem: PermitExpirableSemaphore, permits: redisson_lock::ExpirablePermits) {
    fn send_static<T: Send + 'static>(_: &T) {}
    let id = PermitId::from_bytes([0; 16]);
    send_static(&sem.try_set_permits(1));
    send_static(&sem.acquire(None));
    send_static(&sem.acquire_many(2, None));
    send_static(&sem.try_acquire(None));
    send_static(&sem.try_acquire_many(2, None));
    send_static(&sem.try_acquire_for(SECOND, None));
    send_static(&sem.try_acquire_many_for(2, SECOND, None));
    send_static(&sem.acquire_guard(1, None));
    send_static(&sem.try_acquire_guard(1, None));
    send_static(&sem.try_acquire_guard_for(1, SECOND, None));
    send_static(&sem.release(id));
    send_static(&sem.try_release(id));
    send_static(&sem.try_release_many(&[id]));
    send_static(&sem.available_permits());
    send_static(&sem.acquired_permits());
    send_static(&sem.permits());
    send_static(&sem.set_permits(1));
    send_static(&sem.add_permits(1));
    send_static(&sem.update_lease_time(id, None));
    send_static(&sem.lease_time(id));
    send_static(&sem.delete());
    send_static(&permits.release());
}
