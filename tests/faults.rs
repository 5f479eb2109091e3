//! The fault suite: holders killed and paused, Redis crashed, restarted, put to sleep and
//! cut off, connections killed, networks slowed, black-holed and half-opened, clocks skewed,
//! and bad input. Each case asserts what is promised (`docs/reliability.md` lists them);
//! the storms run the shared workload (`support/workload.rs`) under a stream of faults and
//! check every invariant during and after the run.
//!
//! Faults covered elsewhere: a holder killed while holding, Redis down at start-up and while
//! waiting, a restart without persistence under a holder and a waiter, `SCRIPT FLUSH` under
//! a hold (`failures.rs`); futures dropped at every point (`cancellation.rs`); lost holds
//! and out-of-range leases (`holds.rs`); a lagging subscriber (`pubsub.rs`).

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use redisson_lock::{Backoff, Error, LockClient, PubSubMode, WaitStrategy};
use support::workload::{
    acquire, lost_updates, read_resource, settle, write_resource, Kind, Tally, Totals, Workload,
    Write,
};
use support::*;

/// The wait of the workloads' timed acquisitions.
const WAIT: Duration = Duration::from_secs(2);
/// How much later than its wait a timed acquisition may end: the attempt on the wire at the
/// deadline may take three command timeouts (SCRIPT LOAD after NOSCRIPT), on a loaded
/// machine.
const SLACK: Duration = Duration::from_secs(8);
/// Tasks per client in a storm.
const TASKS: usize = 4;

/// A client for workloads: 900 ms watchdog lease, 1 s command timeout, and `WAIT` in fair
/// queues, so that a gone waiter holds up a queue for seconds, not minutes.
async fn workload_client(url: &str) -> LockClient {
    workload_client_waiting(url, WAIT).await
}

/// A client for workloads whose fair waiters wait `wait` in the queue.
async fn workload_client_waiting(url: &str, wait: Duration) -> LockClient {
    LockClient::builder()
        .url(url)
        .watchdog_timeout(Duration::from_millis(900))
        .command_timeout(Duration::from_secs(1))
        .fair_wait_timeout(wait)
        .build()
        .await
        .expect("connect to the test server")
}

fn workload(prefix: &str) -> Arc<Workload> {
    Arc::new(Workload::new(prefix, WAIT, SLACK))
}

/// The wait of the workload of processes killed at random: every waiter a kill leaves in a
/// fair queue holds up those behind it for its wait, and each kill leaves up to `TASKS`.
const KILLED_WAIT: Duration = Duration::from_millis(500);

/// Runs `workload` on every client (`TASKS` tasks each) for `run` while `faults` plays (it
/// must end by then), then checks every invariant: none broken during the run, none after
/// it. Returns what the tasks counted.
async fn storm(
    server: &RedisServer,
    workload: &Arc<Workload>,
    clients: &[LockClient],
    run: Duration,
    faults: impl Future<Output = ()>,
) -> Totals {
    let until = Instant::now() + run;
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        for task in 0..TASKS {
            let work =
                workload
                    .clone()
                    .task(client.clone(), i * TASKS + task, until, tally.clone());
            tasks.push(tokio::spawn(work));
        }
    }
    faults.await;
    all_finish(run + workload.stuck, "the workload's tasks", tasks).await;
    let totals = tally.drain();
    assert_eq!(totals.violations, Vec::<String>::new(), "during the run");
    assert_eq!(totals.token_violations(), Vec::<String>::new());
    assert!(totals.acquired > 0, "no progress: {totals:?}");
    let observer = workload_client(&server.url()).await;
    let after = settle(&observer, server, workload, Duration::from_secs(20)).await;
    assert_eq!(after, Vec::<String>::new(), "after the run");
    assert_eq!(lost_updates(server, workload), Vec::<String>::new());
    totals
}

/// Calls `fault` at spread intervals of up to `every` until `until`; returns how often.
async fn repeatedly(until: Instant, every: Duration, mut fault: impl FnMut(u64)) -> u64 {
    let mut n = 0;
    while Instant::now() < until {
        let pause = spread(n, every.as_micros() as u64) + Duration::from_millis(20);
        tokio::time::sleep(pause).await;
        fault(n);
        n += 1;
    }
    n
}

// ---- Processes: killed, paused ------------------------------------------------------

/// Run by `holders_killed_at_random_points_leave_no_hold_and_lose_no_update` in child
/// processes: the workload on every kind of lock, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of another test"]
async fn workload_process() {
    let (Ok(url), Ok(prefix)) = (std::env::var("FAULTS_URL"), std::env::var("FAULTS_PREFIX"))
    else {
        return;
    };
    let client = workload_client_waiting(&url, KILLED_WAIT).await;
    let workload = Arc::new(Workload::new(&prefix, KILLED_WAIT, SLACK));
    let forever = Instant::now() + Duration::from_secs(3600);
    let tally = Arc::new(Tally::default());
    for task in 0..TASKS {
        let work = workload
            .clone()
            .task(client.clone(), task, forever, tally.clone());
        tokio::spawn(work);
    }
    println!("READY");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_killed_at_random_points_leave_no_hold_and_lose_no_update() {
    let server = RedisServer::start();
    let workload = Arc::new(Workload::new("killed", KILLED_WAIT, SLACK));
    let client = workload_client_waiting(&server.url(), KILLED_WAIT).await;
    let run = Duration::from_secs(6);
    let until = Instant::now() + run;
    // While this process works on the locks, child processes do too, each SIGKILLed at a
    // random point: holding, waiting, queued, acquiring or releasing.
    let kills = async {
        let mut kills = 0;
        while Instant::now() + Duration::from_secs(1) < until {
            let env = [("FAULTS_URL", &*server.url()), ("FAULTS_PREFIX", "killed")];
            let mut child = TestProcess::spawn("workload_process", &env);
            child.expect("READY").await;
            tokio::time::sleep(Duration::from_millis(100) + spread(kills, 700_000)).await;
            child.kill();
            kills += 1;
        }
        assert!(kills >= 2, "only {kills} children were killed");
    };
    storm(&server, &workload, &[client], run, kills).await;
}

/// A write of `value` to a fenced lock's resource with `token`.
fn fenced(value: &str, token: Option<u64>) -> Write<'_> {
    Write {
        value,
        token,
        field: "",
        id: "",
    }
}

/// Run by `a_holder_stopped_past_its_lease_knows_it_lost_on_waking_and_its_late_write_is_refused`
/// in a child process: holds a fenced lock and writes to its resource with the token every
/// 10 ms, as long as its guard claims the hold; then makes one late write anyway.
#[tokio::test]
#[ignore = "a child process of another test"]
async fn stopped_holder_process() {
    let Ok(url) = std::env::var("FAULTS_URL") else {
        return;
    };
    let client = workload_client(&url).await;
    let lock = client.fenced_lock("stopped").unwrap();
    let guard = lock.lock(&client.new_owner()).await.unwrap();
    let token = Some(guard.token());
    println!("HELD {}", guard.token());
    while !guard.is_lease_lost() {
        let written = write_resource(&client, "stopped", fenced("first holder", token)).await;
        if !written.unwrap() {
            // A write under way when the process was stopped: the resource refused it, and
            // by now the guard must know why.
            println!("REFUSED; guard knows: {}", guard.is_lease_lost());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late = write_resource(&client, "stopped", fenced("late", token)).await;
    println!("LOST; late write accepted: {}", late.unwrap());
    let unlocked = guard.unlock().await;
    println!(
        "UNLOCK not held: {}",
        matches!(unlocked, Err(Error::NotHeld { .. }))
    );
}

#[tokio::test]
async fn a_holder_stopped_past_its_lease_knows_it_lost_on_waking_and_its_late_write_is_refused() {
    let server = RedisServer::start();
    let mut child = TestProcess::spawn("stopped_holder_process", &[("FAULTS_URL", &server.url())]);
    let first: u64 = child.expect("HELD ").await.parse().unwrap();
    // Right after a renewal, so that the stop outlasts the 900 ms lease by a known margin.
    eventually(5 * SECOND, "a fresh renewal", || {
        pttl(&server, "stopped") > 800
    })
    .await;
    child.signal("STOP");

    let c = client(&server).await;
    let second = within(5 * SECOND, "the lock after the stopped holder's lease", {
        c.fenced_lock("stopped").unwrap().lock(&c.new_owner())
    })
    .await
    .unwrap();
    assert!(second.token() > first);
    let token = Some(second.token());
    // The new holder reads the resource, and the stopped one wakes before it writes: a
    // read-modify-write that the late holder's write must not slip into.
    let read = read_resource(&c, "stopped", token).await.unwrap();
    assert!(read.is_some(), "the new holder's read was refused");

    child.signal("CONT");
    // On waking, the holder's guard says the lease is gone before the holder starts
    // anything new. (A write it had under way when stopped may go out late: the resource
    // refuses it, and the guard knows.) Its late write, sent anyway, is refused.
    let late_write_accepted = loop {
        let line = child
            .next_line(30 * SECOND)
            .await
            .expect("the holder said nothing");
        assert!(!line.contains("guard knows: false"), "{line}");
        if let Some((_, accepted)) = line.split_once("LOST; late write accepted: ") {
            break accepted.trim().to_owned();
        }
    };
    assert_eq!(late_write_accepted, "false");
    assert_eq!(child.expect("UNLOCK not held: ").await, "true");
    let write = fenced("second holder", token);
    assert!(write_resource(&c, "stopped", write).await.unwrap());
    let [value, ..] = support::workload::resource_keys("stopped");
    assert_eq!(server.command(&["GET", &value]), "second holder");
    second.unlock().await.unwrap();
}

// ---- The server: crashed, restarted, asleep -----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_and_queues_survive_a_crash_of_a_server_with_persistence() {
    let mut server = RedisServer::start_with_persistence();
    // A 10 s lease: the crash and restart end long before it; a waiter that misses the
    // unlock message would sleep for seconds, far past the wake-up limit.
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(10))).await;
    let plain = c.lock("durable").unwrap();
    let fair = c.fair_lock("durable-fair").unwrap();
    let fenced = c.fenced_lock("durable-fenced").unwrap();
    let holder = plain.lock(&c.new_owner()).await.unwrap();
    let fair_holder = fair.lock(&c.new_owner()).await.unwrap();
    let token = fenced.lock(&c.new_owner()).await.unwrap();
    let waiter = tokio::spawn(plain.lock(&c.new_owner()));
    let (first, second) = (c.new_owner(), c.new_owner());
    let queued_first = tokio::spawn(fair.lock(&first));
    eventually(10 * SECOND, "the first fair waiter queued", || {
        queued(&server, "durable-fair") == [first.to_string()]
    })
    .await;
    let queued_second = tokio::spawn(fair.lock(&second));
    eventually(10 * SECOND, "both fair waiters queued", || {
        queued(&server, "durable-fair").len() == 2
    })
    .await;
    subscribed(&server, &lock_channel("durable")).await;

    server.kill(); // a crash: every write was on disk before its reply (appendfsync always)
    server.restart();

    // The holds are still there and still renewed: no guard reports a loss.
    let renewed_after_restart = Instant::now();
    eventually(10 * SECOND, "a renewal after the restart", || {
        pttl(&server, "durable") > 9_000
    })
    .await;
    assert!(renewed_after_restart.elapsed() < 10 * SECOND);
    for guard in [&holder, &fair_holder] {
        assert!(!guard.is_lease_lost(), "{}", guard.name());
    }
    assert!(!token.is_lease_lost());
    assert!(!waiter.is_finished() && !queued_first.is_finished());
    assert_eq!(
        queued(&server, "durable-fair"),
        [first.to_string(), second.to_string()]
    );

    // The waiters are woken by the unlock messages, in queue order for the fair lock.
    holder.unlock().await.unwrap();
    woken_and_released("the plain waiter", waiter).await;
    fair_holder.unlock().await.unwrap();
    woken_and_released("the first fair waiter", queued_first).await;
    woken_and_released("the second fair waiter", queued_second).await;
    // The token counter survived too.
    let before = token.token();
    token.unlock().await.unwrap();
    let next = fenced.lock(&c.new_owner()).await.unwrap();
    assert_eq!(next.token(), before + 1);
    next.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_persistence_a_restart_loses_every_kinds_holds_and_their_waiters_acquire() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    let fair = c.fair_lock("volatile-fair").unwrap();
    let rw = c.read_write_lock("volatile-rw").unwrap();
    let fenced = c.fenced_lock("volatile-fenced").unwrap();
    let fair_holder = fair.lock(&c.new_owner()).await.unwrap();
    let writer = rw.write(&c.new_owner()).await.unwrap();
    for _ in 0..2 {
        fenced
            .lock(&c.new_owner())
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    let token_holder = fenced.lock(&c.new_owner()).await.unwrap();
    let long = fixed(60_000);
    let fair_waiter = tokio::spawn(fair.clone().with_lease(long).lock(&c.new_owner()));
    let reader = tokio::spawn(rw.clone().with_lease(long).read(&c.new_owner()));
    eventually(10 * SECOND, "the fair waiter queued", || {
        queued(&server, "volatile-fair").len() == 1
    })
    .await;
    // Waiting, past their first attempts (an error there would be returned as it is).
    subscribed(&server, "redisson_rwlock:{volatile-rw}").await;

    server.restart(); // the data is gone: holds, queue and token counter

    within(5 * SECOND, "lease_lost after the data loss", async {
        fair_holder.lease_lost().await;
        writer.lease_lost().await;
        token_holder.lease_lost().await;
    })
    .await;
    let queued_again = within(10 * SECOND, "the fair waiter", fair_waiter)
        .await
        .unwrap();
    let read = within(10 * SECOND, "the reader", reader).await.unwrap();
    queued_again.unwrap().unlock().await.unwrap();
    read.unwrap().unlock().await.unwrap();
    // The token counter started over: the resource must forget its tokens too.
    let after = fenced.lock(&c.new_owner()).await.unwrap();
    assert!(after.token() < token_holder.token(), "{}", after.token());
    after.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_asleep_past_the_command_timeout_times_calls_out_and_duplicates_no_hold() {
    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let timeout = Duration::from_millis(300);
    // The holder's 10 s lease outlasts the 2.5 s sleep; the other client's is 900 ms.
    let a = client_with(&server, |b| {
        b.command_timeout(timeout)
            .watchdog_timeout(Duration::from_secs(10))
    })
    .await;
    let b = client_with(&server, |b| b.command_timeout(timeout)).await;
    let holder = a
        .lock("sleepy")
        .unwrap()
        .lock(&a.new_owner())
        .await
        .unwrap();

    let asleep = server.command_on_thread(&["DEBUG", "SLEEP", "2.5"]);
    within(5 * SECOND, "the server falling asleep", async {
        while b.redis().ping::<fred::types::Value>(None).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Calls fail after about the command timeout, with an error that says to try again.
    for name in ["sleepy", "sleepy-free"] {
        let started = Instant::now();
        let result = b.lock(name).unwrap().try_lock(&b.new_owner()).await;
        assert!(
            matches!(&result, Err(e @ Error::Redis(_)) if e.is_retryable()),
            "{result:?}"
        );
        assert!(started.elapsed() < 2 * SECOND, "{:?}", started.elapsed());
    }
    tokio::task::spawn_blocking(move || asleep.join().unwrap().unwrap())
        .await
        .unwrap();

    // The holder kept its hold through the sleep, alone.
    within(5 * SECOND, "a renewal after the sleep", async {
        while pttl(&server, "sleepy") < 9_000 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(!holder.is_lease_lost());
    assert_eq!(server.command(&["HLEN", "sleepy"]), "1");
    // The attempt on the free lock may have run once the server woke up: that hold is
    // nobody's, is never renewed, and ends with its 900 ms lease.
    assert_eq!(b.renewed_holds(), 0);
    assert!(pttl(&server, "sleepy-free") <= 900);
    eventually(5 * SECOND, "the unknown hold gone", || {
        server.command(&["EXISTS", "sleepy-free"]) == "0"
    })
    .await;
    holder.unlock().await.unwrap();
}

// ---- Connections: killed -----------------------------------------------------------------

#[tokio::test]
async fn a_waiter_is_woken_when_its_subscriber_connection_was_killed_as_the_lock_was_freed() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("resubscribed").unwrap();
    // A fixed 60 s lease: nothing but the client's own recovery wakes the waiter in time.
    let holder = held_for_a_minute(&lock, &c.new_owner()).await;
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    subscribed(&server, &lock_channel("resubscribed")).await;
    server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    // Published while nobody of this client listens: the message is lost, and the
    // reconnect must make up for it.
    holder.unlock().await.unwrap();
    woken_and_released("the waiter", waiter).await;
}

#[tokio::test]
async fn holders_and_waiters_ride_out_their_connections_being_killed_again_and_again() {
    let server = RedisServer::start();
    // A 30 s lease: a waiter that missed the unlock message would sleep for seconds.
    let c = long_watchdog_client(&server).await;
    let short = client(&server).await; // 900 ms lease, renewed every 300 ms
    let lock = c.lock("killed-connections").unwrap();
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    let renewed = short
        .lock("renewed")
        .unwrap()
        .lock(&short.new_owner())
        .await
        .unwrap();
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    subscribed(&server, &lock_channel("killed-connections")).await;
    for kind in ["normal", "pubsub", "normal", "pubsub"] {
        server.command(&["CLIENT", "KILL", "TYPE", kind]);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    server.command(&["CLIENT", "KILL", "TYPE", "normal"]);
    server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    // Renewals reconnected in time, well past the short lease.
    assert!(!renewed.is_lease_lost() && !holder.is_lease_lost());
    holder.unlock().await.unwrap();
    woken_and_released("the waiter", waiter).await;
    renewed.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_connections_and_flushing_scripts_under_load_breaks_no_invariant() {
    let server = RedisServer::start();
    let workload = workload("connections");
    let url = server.url();
    let clients = [workload_client(&url).await, workload_client(&url).await];
    let run = Duration::from_secs(5);
    let until = Instant::now() + run;
    let faults = repeatedly(until, Duration::from_millis(300), |n| {
        let fault: &[&str] = match n % 4 {
            0 => &["CLIENT", "KILL", "TYPE", "normal"],
            1 => &["CLIENT", "KILL", "TYPE", "pubsub"],
            2 => &["SCRIPT", "FLUSH"],
            _ => &["CLIENT", "KILL", "SKIPME", "yes"],
        };
        server.command(fault);
    });
    let totals = storm(&server, &workload, &clients, run, async {
        assert!(faults.await >= 8);
    })
    .await;
    // The kills cost some calls, and the workload went on all the same.
    assert!(totals.acquired > 50, "{totals:?}");
}

// ---- The network: lost replies, slow, dropped, black-holed, half-open ---------------

#[tokio::test]
async fn a_release_whose_reply_is_lost_is_resent_and_releases_once() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    // A 30 s lease: renewals slowed down as much as the release still keep the hold.
    let c = client_with(&server, |b| {
        b.url(&proxy.url())
            .watchdog_timeout(Duration::from_secs(30))
    })
    .await;
    let lock = c.lock("latched").unwrap();
    let me = c.new_owner();
    let outer = lock.lock(&me).await.unwrap();
    let inner = lock.lock(&me).await.unwrap();
    let field = me.to_string();
    // Each way takes 700 ms: the release runs on the server, and its reply is still on its
    // way back when the connection drops.
    proxy.set(Net::Slow {
        base: Duration::from_millis(700),
        jitter: Duration::ZERO,
    });
    let release = tokio::spawn(inner.unlock());
    eventually(5 * SECOND, "the release run", || {
        server.command(&["HGET", "latched", &field]) == "1"
    })
    .await;
    proxy.drop_connections();
    proxy.set(Net::Clear);
    // Resent under the same request id: the latch replays the first outcome.
    within(10 * SECOND, "the resent release", release)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        server.command(&["HGET", "latched", &field]),
        "1",
        "released once"
    );
    outer.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "latched"]), "0");
}

#[tokio::test]
async fn an_acquisition_whose_reply_is_lost_fails_and_its_hold_ends_with_its_lease() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let c = client_with(&server, |b| b.url(&proxy.url())).await;
    let me = c.new_owner();
    proxy.set(Net::Slow {
        base: Duration::from_millis(700),
        jitter: Duration::ZERO,
    });
    let acquiring = tokio::spawn(c.lock("unanswered").unwrap().try_lock(&me));
    eventually(5 * SECOND, "the acquisition run", || {
        server.command(&["HGET", "unanswered", &me.to_string()]) == "1"
    })
    .await;
    proxy.drop_connections();
    proxy.set(Net::Clear);
    // The caller learns the call failed, not whether it took the hold; it never resends it.
    let result = within(10 * SECOND, "the acquisition", acquiring)
        .await
        .unwrap();
    assert!(matches!(&result, Err(e) if e.is_retryable()), "{result:?}");
    assert_eq!(c.renewed_holds(), 0);
    // Nobody renews the hold it took: it ends within its 900 ms lease, and others get in.
    let other = client(&server).await;
    let guard = within(5 * SECOND, "the lock after the unknown hold's lease", {
        other.lock("unanswered").unwrap().lock(&other.new_owner())
    })
    .await
    .unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_jittery_network_keeps_every_invariant() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    proxy.set(Net::Slow {
        base: Duration::from_millis(1),
        jitter: Duration::from_millis(8),
    });
    let workload = workload("slow");
    let clients = [
        workload_client(&proxy.url()).await,
        workload_client(&server.url()).await,
    ];
    let run = Duration::from_secs(4);
    storm(&server, &workload, &clients, run, tokio::time::sleep(run)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_dropped_again_and_again_keep_every_invariant() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let workload = workload("dropped");
    let clients = [
        workload_client(&proxy.url()).await,
        workload_client(&proxy.url()).await,
    ];
    let run = Duration::from_secs(5);
    let until = Instant::now() + run;
    let drops = repeatedly(until, Duration::from_millis(400), |_| {
        proxy.drop_connections()
    });
    storm(&server, &workload, &clients, run, async {
        assert!(drops.await >= 5);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_by_a_black_hole_a_holder_knows_it_lost_before_another_can_take_the_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    // A command timeout longer than the 900 ms lease: a renewal on the wire when the
    // network goes dark fails only after the key expired on the server.
    let timeout = Duration::from_millis(1500);
    let cut = client_with(&server, |b| b.url(&proxy.url()).command_timeout(timeout)).await;
    let holder = cut
        .lock("dark")
        .unwrap()
        .lock(&cut.new_owner())
        .await
        .unwrap();
    eventually(5 * SECOND, "a fresh renewal", || {
        pttl(&server, "dark") > 800
    })
    .await;
    proxy.set(Net::BlackHole);

    // Another client, with a working network, polls for the lock and takes it the moment
    // the key expires: by then, the holder must know.
    let other = client(&server).await;
    let polling = other
        .lock("dark")
        .unwrap()
        .with_wait_strategy(WaitStrategy::Spin(Backoff::constant(
            Duration::from_millis(1),
        )));
    let taken = within(
        5 * SECOND,
        "the lock after the lease",
        polling.lock(&other.new_owner()),
    )
    .await
    .unwrap();
    assert!(
        holder.is_lease_lost(),
        "another owner took the lock while the holder claimed it"
    );
    within(SECOND, "lease_lost", holder.lease_lost()).await;

    // A timed wait in the dark ends near its deadline: its first attempt fails after the
    // command timeout.
    let started = Instant::now();
    let wait = Duration::from_millis(500);
    let result = cut
        .lock("dark")
        .unwrap()
        .try_lock_for(&cut.new_owner(), wait)
        .await;
    assert!(
        matches!(&result, Ok(None) | Err(Error::Redis(_))),
        "{result:?}"
    );
    assert!(
        started.elapsed() < wait + 3 * timeout + 2 * SECOND,
        "{:?}",
        started.elapsed()
    );

    // Once the network heals, the client works again, and the lost guard releases nothing.
    proxy.set(Net::Clear);
    let me = cut.new_owner();
    let lock = cut.lock("dark").unwrap();
    within(10 * SECOND, "the client back", async {
        while lock.try_lock(&me).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(matches!(holder.unlock().await, Err(Error::NotHeld { .. })));
    assert!(polling.is_held_by(taken.owner()).await.unwrap());
    taken.unlock().await.unwrap();
    woken_and_released("the healed client", tokio::spawn(lock.lock(&me))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_are_found_and_replaced_and_a_waiter_still_wakes() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let timeout = Duration::from_millis(500);
    let c = client_with(&server, |b| b.url(&proxy.url()).command_timeout(timeout)).await;
    let other = client(&server).await;
    let lock = c.lock("half-open").unwrap();
    // The holder, on a sound connection, with a 60 s lease: nothing but the client's own
    // checks can wake the waiter in time.
    let holder = held_for_a_minute(&other.lock("half-open").unwrap(), &other.new_owner()).await;
    let waiter = tokio::spawn(lock.lock(&c.new_owner()));
    subscribed(&server, &lock_channel("half-open")).await;
    proxy.half_open(); // both of the waiter's connections: commands and subscriptions
    holder.unlock().await.unwrap();
    // The unlock message went nowhere. The idle subscriber connection is checked as often
    // as holds are renewed (every 300 ms here): found dead, it is made anew, and every
    // waiter looks again.
    woken_and_released("the waiter", waiter).await;

    // A client whose connections go half-open while it is idle: the first calls time out,
    // then it works again.
    proxy.half_open();
    let me = c.new_owner();
    let started = Instant::now();
    within(10 * SECOND, "the client back", async {
        loop {
            match lock.try_lock(&me).await {
                Ok(Some(guard)) => break guard.unlock().await.unwrap(),
                Ok(None) => panic!("the lock is free"),
                Err(error) => assert!(error.is_retryable(), "{error:?}"),
            }
        }
    })
    .await;
    assert!(started.elapsed() < 10 * timeout, "{:?}", started.elapsed());
}

// ---- The clock --------------------------------------------------------------------------

/// A fair acquire attempt as a client whose wall clock reads `now` sends it: `owner` joins
/// the queue of `name` with a 2 s wait.
fn fair_attempt_at(server: &RedisServer, name: &str, owner: &str, now: i64) -> String {
    let script = lua("fair_acquire");
    let keys = [
        name.to_owned(),
        queue_key(name),
        format!("redisson_lock_timeout:{{{name}}}"),
    ];
    let now = now.to_string();
    server.command(&[
        "EVAL", &script, "3", &keys[0], &keys[1], &keys[2], "30000", owner, "2000", &now, "1",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_client_clock_reorders_a_fair_queue_but_never_breaks_exclusion() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.fair_wait_timeout(Duration::from_secs(2))).await;
    let lock = c.fair_lock("skewed").unwrap();
    let long = lock.clone().with_lease(fixed(60_000));
    let holder = long.lock(&c.new_owner()).await.unwrap();
    let live = c.new_owner();
    let waiter = tokio::spawn(lock.lock(&live));
    eventually(5 * SECOND, "the live waiter queued", || {
        queued(&server, "skewed") == [live.to_string()]
    })
    .await;

    // A client whose clock runs 10 minutes ahead sees the live waiter's deadline long
    // passed: its attempt drops it from the queue, and queues itself.
    let ahead = "11111111-1111-1111-1111-111111111111:1";
    fair_attempt_at(&server, "skewed", ahead, now_ms() + 600_000);
    // The live waiter looks again within half its wait, and joins again, behind.
    eventually(5 * SECOND, "the live waiter in the queue behind", || {
        queued(&server, "skewed") == [ahead.to_owned(), live.to_string()]
    })
    .await;
    // The order was lost; exclusion never was: the holder still holds, alone.
    assert!(!waiter.is_finished());
    assert_eq!(server.command(&["HLEN", "skewed"]), "1");
    assert!(lock.is_held_by(holder.owner()).await.unwrap());
    // The fast client gives up (its exit script); on release, the live waiter, first in
    // line again, gets the lock.
    server.command(&[
        "EVAL",
        &lua("fair_acquire_failed"),
        "4",
        &queue_key("skewed"),
        "redisson_lock_timeout:{skewed}",
        "skewed",
        &lock_channel("skewed"),
        ahead,
        "2000",
        "0",
        "PUBLISH",
    ]);
    holder.unlock().await.unwrap();
    woken_and_released("the live waiter", waiter).await;

    // A client whose clock runs 10 minutes behind joins an empty queue with a deadline
    // that has passed by every other clock: the next attempt of anyone else drops it.
    let holder = long.lock(&c.new_owner()).await.unwrap();
    let behind = "22222222-2222-2222-2222-222222222222:1";
    fair_attempt_at(&server, "skewed", behind, now_ms() - 600_000);
    assert_eq!(queued(&server, "skewed"), [behind]);
    assert!(lock.try_lock(&c.new_owner()).await.unwrap().is_none());
    assert_eq!(queued(&server, "skewed"), Vec::<String>::new());
    assert_eq!(server.command(&["HLEN", "skewed"]), "1");
    holder.unlock().await.unwrap();
}

// ---- Bad input -------------------------------------------------------------------------

/// One attempt at the lock `name` of every kind of the workload, for `owner`.
async fn attempts(c: &LockClient, name: &str) -> Vec<(Kind, redisson_lock::Result<bool>)> {
    let mut results = Vec::new();
    for kind in Kind::ALL {
        let owner = c.new_owner();
        let result = match acquire(c, &owner, kind, name, Some(Duration::ZERO)).await {
            Ok(Some(held)) => held.unlock().await.map(|()| true),
            Ok(None) => Ok(false),
            Err(error) => Err(error),
        };
        results.push((kind, result));
    }
    results
}

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
