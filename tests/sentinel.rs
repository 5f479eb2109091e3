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

/// The watchdog timeout of the holds below: renewed every 3 s, so the copy of a hold that the
/// new master has when it is promoted lives 6 s or more there.
const LEASE: Duration = Duration::from_secs(9);

/// How a holder's client is cut off from the Sentinels before a failover.
enum Cut {
    /// Every Sentinel closes its client connections (`CLIENT KILL TYPE normal`).
    KilledConnections,
    /// Every Sentinel restarts.
    Restarts,
    /// The Sentinel the client asks first (the URL's first `node`; the driver's own
    /// reconnection asks the ones it lists) stops answering (`SIGSTOP`), with a command
    /// timeout far longer than the holder's lease.
    Paused,
}

/// A client holds a lock through the Sentinels, `cut` cuts it off from them, and the
/// Sentinels fail the master over. The holder must follow the new master: its hold lives on
/// there, and a second client trying all along on the new master never takes the lock while
/// the holder's guard says it holds it.
///
/// With `least_privilege`, the holder's client logs in as the user `docs/operations.md`
/// documents for a Sentinel deployment.
async fn holder_follows_a_failover_after(cut: Cut, least_privilege: bool) {
    let mut setup = SentinelSetup::start();
    let command_timeout = match cut {
        Cut::Paused => Duration::from_secs(60),
        _ => Duration::from_secs(5),
    };
    let mut url = setup.url();
    if least_privilege {
        let user = ["ACL", "SETUSER", "locker", "on", ">pw"];
        for server in [&setup.master, &setup.replica] {
            let rules = ["~*", "&*", "+@all", "-@dangerous", "+info", "+role"];
            assert_eq!(server.command(&[&user[..], &rules].concat()), "OK");
        }
        for sentinel in &setup.sentinels {
            let rules = [
                "-@all",
                "+sentinel|get-master-addr-by-name",
                "+sentinel|sentinels",
            ];
            assert_eq!(sentinel.command(&[&user[..], &rules].concat()), "OK");
        }
        url = url.replace("://", "://locker:pw@");
    }
    let holding = deployment_client(&url, |b| {
        b.watchdog_timeout(LEASE).command_timeout(command_timeout)
    })
    .await;
    let name = "sentinel-cut-off";
    let guard = holding.lock(name).unwrap().lock(&holding.new_owner()).await;
    let guard = std::sync::Arc::new(guard.unwrap());
    assert_eq!(setup.master_port(), setup.master.port());
    // The master to be, which the second client tries all along.
    let contender = client_with(&setup.replica, |b| b.watchdog_timeout(LEASE)).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let contending = tokio::spawn({
        let (guard, stop) = (guard.clone(), stop.clone());
        async move {
            let (lock, owner) = (contender.lock(name).unwrap(), contender.new_owner());
            // Whether the holder's guard said it held the lock, at each time the second
            // client took it.
            let mut taken = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Refused (READONLY) until the replica is promoted.
                if let Ok(Some(second)) = lock.try_lock(&owner).await {
                    taken.push(!guard.is_lease_lost());
                    let _ = second.unlock().await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            taken
        }
    });

    let paused = tokio::task::block_in_place(|| match cut {
        Cut::KilledConnections => {
            for sentinel in &setup.sentinels {
                sentinel.command(&["CLIENT", "KILL", "TYPE", "normal"]);
            }
            None
        }
        Cut::Restarts => {
            for sentinel in &mut setup.sentinels {
                sentinel.restart();
            }
            setup.wait_ready();
            None
        }
        Cut::Paused => {
            setup.sentinels[1].signal("STOP");
            Some(1)
        }
    });
    let (old_master, new_master) = tokio::task::block_in_place(|| setup.begin_failover(paused));
    // A renewal reaches the new master (the hold's TTL there goes up) while the old master
    // still takes writes: the Sentinels demote it only after it has gone on reporting itself
    // a master for 8 s, and a holder that renews there meanwhile may lose its hold to the
    // TTL of the copy the new master got.
    tokio::task::block_in_place(|| {
        let mut last = pttl(new_master, name);
        loop {
            let ttl = pttl(new_master, name);
            if last > 0 && ttl > last + 200 {
                break;
            }
            last = ttl;
            let role = old_master.try_command(&["ROLE"]);
            assert!(
                !role.is_ok_and(|role| role.starts_with("slave")),
                "the old master was demoted before the holder renewed on the new one"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    tokio::task::block_in_place(|| setup.wait_demoted(old_master));
    // A second client never takes the lock while the holder holds it, for a lease beyond.
    tokio::time::sleep(LEASE).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let taken = within(30 * SECOND, "the second client", contending)
        .await
        .unwrap();
    assert!(
        !taken.contains(&true),
        "a second client took the lock on the new master while the holder's guard said it \
         held it ({} times; taken {} times in all)",
        taken.iter().filter(|held| **held).count(),
        taken.len()
    );
    assert!(!guard.is_lease_lost(), "the holder lost its hold");
    assert!(
        pttl(new_master, name) > 0,
        "the hold is not on the new master"
    );
    let guard = std::sync::Arc::into_inner(guard).unwrap();
    guard.unlock().await.unwrap();
    if let Some(paused) = paused {
        setup.sentinels[paused].signal("CONT");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_follows_a_failover_after_every_sentinel_dropped_its_connection() {
    holder_follows_a_failover_after(Cut::KilledConnections, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_follows_a_failover_after_every_sentinel_restarted() {
    holder_follows_a_failover_after(Cut::Restarts, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_follows_a_failover_past_a_paused_sentinel() {
    holder_follows_a_failover_after(Cut::Paused, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_privilege_user_holds_through_a_failover() {
    holder_follows_a_failover_after(Cut::KilledConnections, true).await;
}
