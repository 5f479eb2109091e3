//! The synchronizers on a Sentinel-managed master with one replica: a semaphore, a
//! permit-expirable semaphore and a count-down latch shared by two clients, each waking the
//! other's waiters, and a semaphore waiter and the count that live through a failover.

mod support;

use std::time::Duration;

use redisson_lock::LockClient;
use support::topology::SentinelSetup;
use support::*;

/// The server among master and replica that listens on `port`.
fn server(setup: &SentinelSetup, port: u16) -> &RedisServer {
    if setup.master.port() == port {
        &setup.master
    } else {
        &setup.replica
    }
}

async fn sentinel_client(setup: &SentinelSetup) -> LockClient {
    deployment_client(&setup.url(), |b| b.command_timeout(Duration::from_secs(5))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronizers_wake_each_other_and_live_through_a_failover() {
    let setup = SentinelSetup::start();
    let (a, b) = (sentinel_client(&setup).await, sentinel_client(&setup).await);
    let master = server(&setup, setup.master_port());

    // A semaphore of one permit: the other client's waiter wakes on the release.
    let (sem_a, sem_b) = (a.semaphore("s-sem").unwrap(), b.semaphore("s-sem").unwrap());
    assert!(sem_a.try_set_permits(1).await.unwrap());
    let taken = sem_a.acquire_guard(1).await.unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire_many(1).await });
    subscribed(master, "redisson_sc:{s-sem}").await;
    taken.release().await.unwrap();
    within(WAKE, "the semaphore's waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    // Every write waited for the replica: it has the count.
    assert_eq!(setup.replica.command(&["GET", "s-sem"]), "0");

    // A permit-expirable semaphore: the same, by permit id.
    let (pes_a, pes_b) = (
        a.permit_expirable_semaphore("s-pes").unwrap(),
        b.permit_expirable_semaphore("s-pes").unwrap(),
    );
    assert!(pes_a.try_set_permits(1).await.unwrap());
    let id = pes_a.acquire(Some(Duration::from_secs(60))).await.unwrap();
    let waiter = tokio::spawn(async move { pes_b.acquire(None).await });
    subscribed(master, "redisson_sc:{s-pes}").await;
    pes_a.release(id).await.unwrap();
    let other = within(WAKE, "the expirable semaphore's waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(other, id);

    // A count-down latch: the other client's waiter returns when it opens.
    let (latch_a, latch_b) = (
        a.count_down_latch("s-latch").unwrap(),
        b.count_down_latch("s-latch").unwrap(),
    );
    assert!(latch_a.try_set_count(1).await.unwrap());
    let waiter = tokio::spawn(async move { latch_b.wait().await });
    subscribed(master, "redisson_countdownlatch__channel__{s-latch}").await;
    latch_a.count_down().await.unwrap();
    within(WAKE, "the latch's waiter", waiter)
        .await
        .unwrap()
        .unwrap();

    // A waiter for a semaphore whose only permit is taken, through a failover: the count
    // is on the promoted replica, and the release there wakes the waiter.
    let sem_a = a.semaphore("s-failover").unwrap();
    assert!(sem_a.try_set_permits(1).await.unwrap());
    assert!(sem_a.try_acquire_many(1).await.unwrap());
    let sem_b = b.semaphore("s-failover").unwrap();
    let waiter =
        tokio::spawn(async move { sem_b.try_acquire_many_for(1, Duration::from_secs(60)).await });
    let old_master = setup.master_port();
    subscribed(server(&setup, old_master), "redisson_sc:{s-failover}").await;
    setup.failover();
    let new_master = setup.master_port();
    assert_ne!(new_master, old_master);
    let promoted = server(&setup, new_master);
    assert_eq!(promoted.command(&["GET", "s-failover"]), "0");
    if waiter.is_finished() {
        panic!(
            "the waiter ended while no permit was free: {:?}",
            waiter.await
        );
    }
    // Its client listens on the new master before the release is sent there.
    subscribed(promoted, "redisson_sc:{s-failover}").await;
    sem_a.release(1).await.unwrap();
    let taken = within(WAKE, "the waiter after the failover", waiter).await;
    assert!(
        taken.unwrap().unwrap(),
        "the waiter took the released permit"
    );
    assert_eq!(promoted.command(&["GET", "s-failover"]), "0");
}

/// Semaphores and latches worked all along two failovers: no permit lost or added, every
/// release and count-down made once, every latch's waiters open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_permit_or_count_down_is_lost_through_failovers() {
    let setup = SentinelSetup::start();
    // A database in the URL, as services write it.
    let url = setup.url().replacen('?', "/0?", 1);
    let client = deployment_client(&url, |b| {
        b.command_timeout(Duration::from_secs(2))
            .watchdog_timeout(Duration::from_secs(10))
    })
    .await;
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let working = support::synchronizers::Synchronizers::start(&client, "s-churn:", until).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| {
        setup.failover();
        setup.failover();
    });
    let observer = deployment_client(&url, |b| b).await;
    let (violations, done) = working.finish(&observer).await;
    eprintln!("{done}");
    assert!(violations.is_empty(), "{violations:#?}");
    let report = client.shutdown().await;
    assert_eq!(report.unfinished, 0, "{report:?}");
}
