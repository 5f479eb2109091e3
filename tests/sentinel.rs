//! Locks on a Sentinel-managed master with one replica: connecting by URL and by the
//! builder, exclusion, wake-ups across clients, and a hold and a waiter that live through a
//! Sentinel failover.

mod support;

use std::time::Duration;

use redisson_lock::{LockClient, LockClientBuilder};
use support::topology::{SentinelSetup, SERVICE};
use support::*;

async fn sentinel_client(
    setup: &SentinelSetup,
    configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    deployment_client(&setup.url(), configure).await
}

/// The server among master and replica that listens on `port`.
fn server(setup: &SentinelSetup, port: u16) -> &RedisServer {
    if setup.master.port() == port {
        &setup.master
    } else {
        &setup.replica
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_clients_exclude_and_wake_each_other_through_a_failover() {
    let setup = SentinelSetup::start();
    let by_url = sentinel_client(&setup, |b| b).await;
    // The builder form names the same deployment.
    let sentinels: Vec<(String, u16)> = setup
        .sentinels
        .iter()
        .map(|s| ("127.0.0.1".to_string(), s.port()))
        .collect();
    let by_builder = LockClient::builder()
        .sentinel(SERVICE, sentinels)
        // Longer than a failover takes: the renewal that reaches the new master must
        // come before the lease runs out there.
        .watchdog_timeout(10 * SECOND)
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();

    // Exclusion: a read-modify-write counter never loses an update.
    let total = count_under_lock(
        &[by_url.clone(), by_builder.clone()],
        "sentinel-exclusion",
        3,
        20,
    )
    .await;
    assert_eq!(total, 2 * 3 * 20);

    // Every kind that waits by message wakes a waiter in the other client.
    let master = server(&setup, setup.master_port());
    every_kind_wakes(
        &by_builder,
        &by_url,
        "sentinel-wake",
        |channel| async move { subscribed(master, &channel).await },
    )
    .await;

    // A hold taken by one client (renewed every 3.3 s) and a waiter in the other.
    let name = "sentinel-failover";
    let (holder, waiter) = (by_builder.new_owner(), by_url.new_owner());
    let guard = by_builder.lock(name).unwrap().lock(&holder).await.unwrap();
    let waiting = tokio::spawn(by_url.lock(name).unwrap().lock(&waiter));
    let old_master = setup.master_port();
    subscribed(server(&setup, old_master), &lock_channel(name)).await;

    setup.failover();
    let new_master = setup.master_port();
    assert_ne!(new_master, old_master);
    let master = server(&setup, new_master);
    // The holder's renewals reach the new master (a demoted master refuses their writes,
    // which sends the client back to the Sentinels) and the hold survives. A replica runs
    // no client scripts, so the new master's first ones come after the failover.
    eventually(
        Duration::from_secs(20),
        "a renewal on the new master",
        || evalsha_calls(master) > 0 && pttl(master, name) > 9_000,
    )
    .await;
    assert!(!guard.is_lease_lost());
    if waiting.is_finished() {
        panic!("the waiter ended while the hold lasts: {:?}", waiting.await);
    }

    guard.unlock().await.unwrap();
    woken_and_released("the waiter after the failover", waiting).await;
    assert_eq!(master.command(&["EXISTS", name]), "0");
}
