//! Waiters that leave the queue by shutdown, by a future dropped at any point, or by a task giving up.

use super::*;

/// Awaits the waiters of a client that was shut down: each ends at once with `Closed`.
async fn all_closed(waiters: Vec<JoinHandle<redisson_lock::Result<LockGuard>>>) {
    for outcome in all_finish(WAKE, "the waiters", waiters).await {
        assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");
    }
}

/// `shutdown()` takes the client's waiters out of every queue before it returns, so the
/// lock is not blocked for their deadlines (3 × 5 min by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_takes_its_waiters_out_of_the_queue() {
    let server = RedisServer::start();
    let holder_client = client(&server).await;
    let waiters_client = client(&server).await;
    let name = "shutdown-queue";
    let held = held_30_s(&holder_client, &holder_client.fair_lock(name).unwrap()).await;

    // A fixed lease: nothing renews, so the server's script count is the waiters' attempts.
    let before = evalsha_calls(&server);
    let lock = waiters_client.fair_lock(name).unwrap();
    let owners: Vec<_> = (0..3).map(|_| waiters_client.new_owner()).collect();
    let mut waiters = Vec::new();
    for (i, owner) in owners.iter().enumerate() {
        waiters.push(tokio::spawn(lock.lock(owner)));
        queue_reaches(&server, name, i + 1).await;
    }
    // All three wait for a wake-up.
    let last_channel = waiter_channel(name, &owners[2].to_string());
    waiting(&server, &last_channel, before + 6).await;

    waiters_client.shutdown().await;
    // Gone when shutdown returns, not at their deadlines.
    assert_no_queue(&server, name);
    all_closed(waiters).await;

    held.unlock().await.unwrap();
    let fresh = holder_client.new_owner();
    let guard = holder_client
        .fair_lock(name)
        .unwrap()
        .try_lock(&fresh)
        .await
        .unwrap()
        .expect("nobody is queued any more");
    guard.unlock().await.unwrap();
}

/// Shutdown while waiters are still joining (some attempts on the wire, some about to be
/// sent): no queue entry is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_while_waiters_join_leaves_no_queue_entry() {
    let server = RedisServer::start();
    let holder_client = client(&server).await;
    let name = "shutdown-joining";
    let held = held_30_s(&holder_client, &holder_client.fair_lock(name).unwrap()).await;
    for _round in 0..5 {
        let waiters_client = client(&server).await;
        let lock = waiters_client.fair_lock(name).unwrap();
        // A fixed lease: nothing renews, so the server's script count is the waiters' attempts.
        let before = evalsha_calls(&server);
        let waiters: Vec<_> = (0..20)
            .map(|_| tokio::spawn(lock.lock(&waiters_client.new_owner())))
            .collect();
        // One waiter has joined; the others are on the wire or about to be sent.
        scripts_reach(&server, before + 1).await;
        waiters_client.shutdown().await;
        assert_no_queue(&server, name);
        all_closed(waiters).await;
    }
    held.unlock().await.unwrap();
}

/// A waiter whose future is dropped while its acquire script still has to be sent: the
/// attempt goes on in the background, and the exit waits for it. Otherwise the exit would
/// run first, and the late acquire would queue the waiter again for good, holding up every
/// waiter behind it until its deadline.
async fn a_dropped_waiter_leaves_after_its_late_attempt(
    name: &str,
    make_it_late: impl FnOnce(&RedisServer),
) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fair_lock(name).unwrap();
    let held = (lock.clone().with_lease(fixed(30_000)))
        .lock(&c.new_owner())
        .await
        .unwrap();
    make_it_late(&server);
    let scripts = evalsha_calls(&server);
    server.command(&["CLIENT", "PAUSE", "1000", "ALL"]);
    let waiter = c.new_owner();
    let dropped = tokio::time::timeout(Duration::from_millis(300), lock.lock(&waiter)).await;
    assert!(dropped.is_err(), "the lock is held");
    // The acquire, then the exit.
    scripts_reach(&server, scripts + 2).await;
    assert!(
        !queued(&server, name).contains(&waiter.to_string()),
        "the dropped waiter is still queued"
    );
    held.unlock().await.unwrap();
}

/// The acquire script is not cached (a restart, a failover): it is answered NOSCRIPT,
/// loaded and sent again, after the caller gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_before_its_acquire_is_sent_again_leaves_the_queue() {
    a_dropped_waiter_leaves_after_its_late_attempt("resent-acquire", |server| {
        server.command(&["SCRIPT", "FLUSH"]);
        server.command(&["SCRIPT", "LOAD", &lua("fair_acquire_failed")]);
    })
    .await;
}

/// With the replica check on (the default), an attempt reads the replica count first when
/// the count it read last is over a second old, and sends its script after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_while_its_replica_count_is_read_leaves_the_queue() {
    a_dropped_waiter_leaves_after_its_late_attempt("count-read-first", |server| {
        // The exit's script is cached, as in a process where a waiter left a queue before.
        server.command(&["SCRIPT", "LOAD", &lua("fair_acquire_failed")]);
        // The count read while taking the hold goes stale.
        std::thread::sleep(Duration::from_millis(1_200));
    })
    .await;
}

/// Tasks sharing an owner share its place in the queue: one that gives up leaves the place
/// to the other, which keeps its turn ahead of a waiter that came later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_giving_up_leaves_its_owners_place_to_the_others() {
    let name = "shared-place";
    let (server, c, lock) = on_a_new_server(name).await;
    let held = (lock.clone().with_lease(fixed(30_000)))
        .lock(&c.new_owner())
        .await
        .unwrap();
    let (owner, later) = (c.new_owner(), c.new_owner());
    let giving_up = tokio::spawn(lock.try_lock_for(&owner, Duration::from_millis(800)));
    eventually(5 * SECOND, "the owner queued", || {
        queued(&server, name).len() == 1
    })
    .await;
    let scripts = evalsha_calls(&server);
    let staying = tokio::spawn(lock.lock(&owner));
    scripts_reach(&server, scripts + 1).await;
    let last = tokio::spawn(lock.lock(&later));
    eventually(5 * SECOND, "the later waiter queued", || {
        queued(&server, name).len() == 2
    })
    .await;
    assert!(giving_up.await.unwrap().unwrap().is_none());
    // Its exit has run: the place stays, first.
    assert_eq!(
        queued(&server, name),
        [owner.to_string(), later.to_string()],
        "the owner lost its place"
    );
    held.unlock().await.unwrap();
    woken_and_released("the owner's staying task", staying).await;
    woken_and_released("the later waiter", last).await;
}

/// A line of twelve waiters, Java's and ours, with uneven gaps between their deadlines and
/// one without a deadline, the first after `start` (ms), under `name` (held by someone when
/// `held`).
fn fill_line(server: &RedisServer, name: &str, held: bool, start: i64) -> Vec<String> {
    let waiters: Vec<String> = (0..12)
        .map(|i| match i % 3 {
            0 => format!("{JAVA_CLIENT}:{i}"),
            _ => format!("ours:{i}"),
        })
        .collect();
    let gaps = [
        5000, 3000, 5000, 1000, 7000, 5000, 2000, 5000, 5000, 4000, 5000, 6000,
    ];
    let mut deadline = start;
    for (i, waiter) in waiters.iter().enumerate() {
        deadline += gaps[i];
        server.command(&["RPUSH", &queue_key(name), waiter]);
        if i != 7 {
            let score = deadline.to_string();
            server.command(&["ZADD", &timeouts_key(name), &score, waiter]);
        }
    }
    if held {
        server.command(&["HSET", name, "holder:1", "1"]);
    }
    waiters
}

/// The line and every deadline of `name`.
fn line_state(server: &RedisServer, name: &str) -> (Vec<String>, String) {
    let deadlines = server.command(&["ZRANGE", &timeouts_key(name), "0", "-1", "WITHSCORES"]);
    (queued(server, name), deadlines)
}

fn queue_script_keys(name: &str) -> [String; 4] {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    [
        queue_key(name),
        timeouts_key(name),
        name.to_owned(),
        channel,
    ]
}

/// Departures sent together (`lua/fair_leave_many.lua`) leave the line exactly as the same
/// departures one after the other from the front (`lua/fair_acquire_failed.lua`, Java's
/// acquireFailed with its moves): the same waiters in the same order, the same deadlines.
/// Java waiters between ours keep their places; the order the departures were filed in does
/// not matter; the head leaving a free lock tells the first waiter that stays.
#[tokio::test]
async fn departures_sent_together_leave_the_line_as_one_after_the_other() {
    let server = RedisServer::start();
    let (together, apart) = (lua("fair_leave_many"), lua("fair_acquire_failed"));
    for (round, (leavers, held)) in [
        (vec![(1, 5000), (4, 5000), (5, 3000), (10, 5000)], true),
        (
            vec![(10, 5000), (0, 5000), (2, 9000), (6, 700), (8, 5000)],
            true,
        ),
        (vec![(1, 4000), (0, 5000), (7, 5000), (11, 5000)], false),
    ]
    .into_iter()
    .enumerate()
    {
        let (one_by_one, at_once) = (format!("apart-{round}"), format!("together-{round}"));
        let start = now_ms() + 3_600_000;
        let waiters = fill_line(&server, &one_by_one, held, start);
        fill_line(&server, &at_once, held, start);
        let mut front_first = leavers.clone();
        front_first.sort();
        for (i, wait) in &front_first {
            let keys = queue_script_keys(&one_by_one);
            let wait = wait.to_string();
            let args = [waiters[*i].as_str(), &wait, "0", "publish"];
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            server.command(&[&["EVAL", apart.as_str(), "4"][..], &keys, &args].concat());
        }
        let head_told = format!("redisson_lock__channel:{{{at_once}}}:{}", waiters[2]);
        let mut listener = Listener::channel(&server, &head_told).await;
        let keys = queue_script_keys(&at_once);
        let mut command: Vec<String> = vec!["EVAL".into(), together.clone(), "4".into()];
        command.extend(keys);
        command.extend(["0".into(), "publish".into()]);
        for (i, wait) in &leavers {
            command.extend([waiters[*i].clone(), wait.to_string()]);
        }
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        assert_eq!(server.command(&command), "(nil)");

        let (apart_line, apart_deadlines) = line_state(&server, &one_by_one);
        let (together_line, together_deadlines) = line_state(&server, &at_once);
        assert_eq!(together_line, apart_line, "round {round}");
        assert_eq!(together_deadlines, apart_deadlines, "round {round}");
        assert_eq!(together_line.len(), waiters.len() - leavers.len());
        if !held {
            // The head left a free lock: the first waiter that stays (waiter 2) is told.
            assert_eq!(listener.next().await, (head_told, "0".to_owned()));
        }
        listener.no_more().await;
    }
}
