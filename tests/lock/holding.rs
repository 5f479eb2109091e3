//! Holding: exclusion across clients, reentrancy, owners and handles, fixed and watchdog leases.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_clients_loses_no_update() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let counter = "mutex:counter";
    const TASKS: usize = 12;
    const ROUNDS: usize = 25;

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = clients[t % 2].clone();
        tasks.push(tokio::spawn(async move {
            let owner = client.new_owner();
            let lock = client.lock("mutex").unwrap();
            for _ in 0..ROUNDS {
                let guard = lock.lock(&owner).await.unwrap();
                racy_increment(&client, counter).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    all_finish(Duration::from_secs(60), "all tasks", tasks).await;
    assert_eq!(
        server.command(&["GET", counter]),
        (TASKS * ROUNDS).to_string()
    );
    assert_eq!(server.command(&["EXISTS", "mutex"]), "0");
}

#[tokio::test]
async fn reentrancy_to_depth_three_and_back() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let lock = c.lock("reentrant").unwrap();

    let mut guards = Vec::new();
    for depth in 1..=3 {
        guards.push(lock.lock(&me).await.unwrap());
        assert_eq!(lock.hold_count(&me).await.unwrap(), depth);
        assert_eq!(
            server.command(&["HGET", "reentrant", &me.to_string()]),
            depth.to_string()
        );
    }
    assert!(lock.try_lock(&other).await.unwrap().is_none());
    for depth in (0..3).rev() {
        guards.pop().unwrap().unlock().await.unwrap();
        assert_eq!(lock.hold_count(&me).await.unwrap(), depth);
        if depth > 0 {
            assert!(lock.is_locked().await.unwrap());
            assert!(lock.try_lock(&other).await.unwrap().is_none());
        }
    }
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by(&me).await.unwrap());
    take_and_release(&lock, &other).await;
}

#[tokio::test]
async fn clones_of_an_owner_share_reentrancy_and_handles_do_not() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("shared-owner").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    // A spawned task acting for the same owner re-enters.
    let (lock2, me2) = (lock.clone(), me.clone());
    let inner = tokio::spawn(async move { lock2.try_lock(&me2).await })
        .await
        .unwrap()
        .unwrap()
        .expect("same owner re-enters from another task");
    assert_eq!(lock.hold_count(&me).await.unwrap(), 2);
    // A fresh owner on a cloned handle is excluded.
    assert!(lock
        .clone()
        .try_lock(&c.new_owner())
        .await
        .unwrap()
        .is_none());
    inner.unlock().await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn fixed_lease_expires_and_hands_over() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (first, second) = (c.new_owner(), c.new_owner());
    let lock = c.lock("fixed").unwrap().with_lease(fixed(400));

    let start = Instant::now();
    let guard = lock.lock(&first).await.unwrap();
    let ttl = pttl(&server, "fixed");
    assert!(
        (1..=400).contains(&ttl),
        "pttl {ttl}, not the 900 ms watchdog's"
    );
    assert_eq!(c.renewed_holds(), 0, "a fixed lease is not renewed");

    // Nobody unlocks: the waiter is woken by the holder's TTL, not by a message.
    let next = within(5 * SECOND, "waiter", lock.lock(&second))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(380),
        "acquired too early: {waited:?}"
    );
    assert!(guard.is_lease_lost());
    within(5 * SECOND, "lease_lost", guard.lease_lost()).await;
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        lock.is_held_by(&second).await.unwrap(),
        "the old owner's unlock changed nothing"
    );
    next.unlock().await.unwrap();
}

#[tokio::test]
async fn partial_unlock_resets_the_fixed_lease() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("ttl").unwrap().with_lease(fixed(10_000));
    let g1 = lock.lock(&me).await.unwrap();
    let g2 = lock.lock(&me).await.unwrap();
    let g3 = lock.lock(&me).await.unwrap();
    g3.unlock().await.unwrap();
    g2.unlock().await.unwrap();
    let remaining = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        (Duration::from_secs(5)..=Duration::from_secs(10)).contains(&remaining),
        "{remaining:?}"
    );
    g1.unlock().await.unwrap();
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    assert_eq!(server.command(&["PTTL", "ttl"]), "-2");
}

#[tokio::test]
async fn watchdog_lease_is_the_watchdog_timeout() {
    let server = RedisServer::start();
    let c = long_watchdog_client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("wd-ttl").unwrap();
    let guard = lock.lock(&me).await.unwrap();
    let ttl = pttl(&server, "wd-ttl");
    assert!((20_000..=30_000).contains(&ttl), "pttl {ttl}");
    assert_eq!(c.renewed_holds(), 1);
    guard.unlock().await.unwrap();
    assert_eq!(c.renewed_holds(), 0);
}
