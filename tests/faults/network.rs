//! Connections killed, and the network: lost replies, slow, dropped, black-holed, half-open.

use super::*;

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
    // One client hands locks from task to task, the other does not.
    let clients = [
        handing_workload_client(&url).await,
        workload_client(&url).await,
    ];
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
        handing_workload_client(&proxy.url()).await,
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
        handing_workload_client(&proxy.url()).await,
        handing_workload_client(&proxy.url()).await,
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
