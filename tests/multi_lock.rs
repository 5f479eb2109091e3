//! Multi-locks and RedLock over several real redis-server processes.

mod support;

use std::time::Duration;

use redisson_lock::{Error, LockClient, MultiLock, MultiMember, RedLock};
use support::*;

async fn servers(n: usize) -> (Vec<RedisServer>, Vec<LockClient>) {
    let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(client_with(server, |b| b.command_timeout(Duration::from_millis(500))).await);
    }
    (servers, clients)
}

#[tokio::test]
async fn all_members_or_none() {
    let (servers, clients) = servers(3).await;
    let me = clients[0].new_owner();
    let multi = MultiLock::new(clients.iter().map(|c| c.lock("res").unwrap())).unwrap();
    let guard = multi.lock(&me).await.unwrap();
    assert_eq!(guard.held(), 3);
    assert!(multi.is_held_by(&me).await.unwrap());
    for server in &servers {
        assert_eq!(server.command(&["HGET", "res", &me.to_string()]), "1");
    }
    guard.unlock().await.unwrap();
    assert!(!multi.is_held_by(&me).await.unwrap());
    for server in &servers {
        assert_eq!(server.command(&["EXISTS", "res"]), "0");
    }
}

#[tokio::test]
async fn a_partial_acquisition_is_rolled_back() {
    let (servers, clients) = servers(3).await;
    // The member on the last server is held by someone else for a long time.
    let blocker =
        held_for_a_minute(&clients[2].lock("part").unwrap(), &clients[2].new_owner()).await;
    let multi = clients[0]
        .multi_lock(clients.iter().map(|c| c.lock("part").unwrap()))
        .unwrap();
    let me = clients[0].new_owner();
    // Given up after about its wait, far from the blocker's 60 s lease.
    let attempt = multi.try_lock_for(&me, Duration::from_millis(300));
    assert!(within(5 * SECOND, "try_lock_for", attempt)
        .await
        .unwrap()
        .is_none());
    assert!(multi.try_lock(&me).await.unwrap().is_none());
    // Whatever was taken on the free servers was released again.
    for server in &servers[..2] {
        assert_eq!(server.command(&["EXISTS", "part"]), "0");
    }
    blocker.unlock().await.unwrap();
    multi
        .try_lock(&me)
        .await
        .unwrap()
        .expect("all free now")
        .unlock()
        .await
        .unwrap();
}

#[tokio::test]
async fn members_of_every_exclusive_kind_on_several_servers() {
    let (servers, clients) = servers(2).await;
    let rw = clients[1].read_write_lock("rw").unwrap();
    let multi = clients[0]
        .multi_lock([
            MultiMember::from(clients[0].lock("plain").unwrap()),
            clients[0].fair_lock("fair").unwrap().into(),
            MultiMember::write_side(&rw),
            clients[1].fenced_lock("fenced").unwrap().into(),
        ])
        .unwrap();
    let me = clients[0].new_owner();
    let guard = multi.lock(&me).await.unwrap();
    assert_eq!(guard.held(), 4);
    assert_eq!(servers[0].command(&["HGET", "plain", &me.to_string()]), "1");
    assert_eq!(servers[0].command(&["HGET", "fair", &me.to_string()]), "1");
    assert_eq!(
        servers[1].command(&["HGET", "rw", &format!("{me}:write")]),
        "1"
    );
    assert_eq!(servers[1].command(&["HGET", "rw", "mode"]), "write");
    assert_eq!(
        servers[1].command(&["HGET", "fenced", &me.to_string()]),
        "1"
    );
    assert_eq!(guard.fence_tokens(), vec![1]);
    // A second owner is excluded from every member.
    assert!(rw
        .try_read(&clients[1].new_owner())
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    for (server, key) in [(0, "plain"), (0, "fair"), (1, "rw"), (1, "fenced")] {
        assert_eq!(servers[server].command(&["EXISTS", key]), "0", "{key}");
    }
}

#[tokio::test]
async fn members_are_taken_by_server_then_name_whatever_the_given_order() {
    let (_servers, clients) = servers(1).await;
    let c = &clients[0];
    let a = MultiLock::new([
        c.lock("b").unwrap(),
        c.lock("c").unwrap(),
        c.lock("a").unwrap(),
    ])
    .unwrap();
    let b = MultiLock::new([
        c.lock("a").unwrap(),
        c.lock("c").unwrap(),
        c.lock("b").unwrap(),
    ])
    .unwrap();
    assert_eq!(a.names(), vec!["a", "b", "c"]);
    assert_eq!(a.names(), b.names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multi_locks_never_deadlock_and_exclude() {
    let (servers, clients) = servers(2).await;
    let sets = [["x", "y"], ["z", "y"], ["y", "x"], ["z", "x"]];
    let mut tasks = Vec::new();
    for (t, set) in sets.iter().enumerate() {
        let client = clients[t % 2].clone();
        let other = clients[(t + 1) % 2].clone();
        let set = *set;
        tasks.push(tokio::spawn(async move {
            // Each name lives on both servers: the members of one multi-lock span servers.
            let multi = MultiLock::new(
                set.iter()
                    .flat_map(|name| [client.lock(name).unwrap(), other.lock(name).unwrap()]),
            )
            .unwrap();
            let me = client.new_owner();
            for _ in 0..8 {
                let guard = multi.lock(&me).await.unwrap();
                for name in set {
                    racy_increment(&client, &format!("count:{name}")).await;
                }
                guard.unlock().await.unwrap();
            }
        }));
    }
    all_finish(Duration::from_secs(60), "all multi-lock tasks", tasks).await;
    // x in 3 sets, y in 3, z in 2; 8 rounds each; the counters live on the tasks' own server.
    let total = |name: &str| -> i64 {
        servers
            .iter()
            .map(|s| {
                s.command(&["GET", &format!("count:{name}")])
                    .parse::<i64>()
                    .unwrap_or(0)
            })
            .sum()
    };
    assert_eq!(total("x"), 24);
    assert_eq!(total("y"), 24);
    assert_eq!(total("z"), 16);
}

#[tokio::test]
async fn dropping_a_multi_lock_future_leaves_no_member_held() {
    let (servers, clients) = servers(3).await;
    let multi = MultiLock::new(clients.iter().map(|c| c.lock("drop").unwrap()))
        .unwrap()
        .with_lease(fixed(60_000));
    for i in 0..60 {
        let me = clients[0].new_owner();
        if let Ok(guard) = cut_off(spread(i, 1_500), multi.lock(&me)).await {
            guard.unwrap().unlock().await.unwrap();
        }
    }
    for server in &servers {
        eventually(Duration::from_secs(5), "members released", || {
            server.command(&["EXISTS", "drop"]) == "0"
        })
        .await;
    }
}

#[tokio::test]
async fn a_redlock_acquires_with_a_minority_of_servers_down() {
    let (mut servers, clients) = servers(3).await;
    servers[1].kill();
    let red = clients[0]
        .red_lock(clients.iter().map(|c| c.lock("red").unwrap()))
        .unwrap();
    let me = clients[0].new_owner();
    let guard = within(
        Duration::from_secs(5),
        "redlock",
        red.try_lock_for(&me, Duration::from_secs(3)),
    )
    .await
    .unwrap()
    .expect("a majority is up");
    assert_eq!(guard.held(), 2);
    assert!(red
        .try_lock(&clients[0].new_owner())
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    assert_eq!(servers[0].command(&["EXISTS", "red"]), "0");
    assert_eq!(servers[2].command(&["EXISTS", "red"]), "0");
}

#[tokio::test]
async fn a_redlock_fails_within_the_wait_with_a_majority_down() {
    let (mut servers, clients) = servers(3).await;
    servers[0].kill();
    servers[2].kill();
    let red = RedLock::new(clients.iter().map(|c| c.lock("red").unwrap())).unwrap();
    let me = clients[1].new_owner();
    let attempt = red.try_lock_for(&me, Duration::from_millis(600));
    let result = within(5 * SECOND, "try_lock_for", attempt).await;
    assert!(matches!(result, Ok(None)), "{result:?}");
    // The one reachable member was not left held.
    assert_eq!(servers[1].command(&["EXISTS", "red"]), "0");
}

#[tokio::test]
async fn a_redlock_held_on_three_keeps_its_quorum_when_one_server_dies() {
    let (mut servers, clients) = servers(3).await;
    let red = RedLock::new(clients.iter().map(|c| c.lock("quorum").unwrap())).unwrap();
    let guard = red.lock(&clients[0].new_owner()).await.unwrap();
    assert_eq!(guard.held(), 3);
    servers[2].kill();
    // Time passing is the scenario: past two watchdog timeouts (900 ms), the dead member's
    // lease is lost, the quorum not.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!guard.is_lease_lost());
    let rival = red
        .try_lock_for(&clients[1].new_owner(), Duration::from_millis(300))
        .await
        .unwrap();
    assert!(rival.is_none(), "the majority is still held");
    for server in &servers[..2] {
        assert!(pttl(server, "quorum") > 0, "still renewed");
    }
    // Losing a second member loses the quorum.
    servers[1].command(&["DEL", "quorum"]);
    within(5 * SECOND, "lease_lost", guard.lease_lost()).await;
}

#[tokio::test]
async fn a_redlock_with_a_fixed_lease_reports_its_validity() {
    let (_servers, clients) = servers(3).await;
    let red = RedLock::new(clients.iter().map(|c| c.lock("valid").unwrap()))
        .unwrap()
        .with_lease(fixed(30_000));
    let guard = red.lock(&clients[0].new_owner()).await.unwrap();
    let validity = guard.validity().unwrap();
    // The lease less the acquisition time and the drift allowance (1% + 2 ms).
    assert!(validity <= Duration::from_millis(29_698), "{validity:?}");
    assert!(validity > Duration::from_secs(20), "{validity:?}");
    guard.unlock().await.unwrap();
}

/// A fixed lease's validity counts from the round that took the members: a first round
/// that waits longer than the lease (a member held elsewhere) leaves later rounds their
/// whole lease.
#[tokio::test]
async fn a_redlock_round_after_a_slow_one_still_takes_the_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // Held by another owner for 800 ms, then expires.
    (c.lock("slow-a").unwrap().with_lease(fixed(800)))
        .lock(&c.new_owner())
        .await
        .unwrap()
        .detach();
    let red = RedLock::new([c.lock("slow-a").unwrap(), c.lock("slow-b").unwrap()])
        .unwrap()
        .with_lease(fixed(500));
    let guard = red
        .try_lock_for(&c.new_owner(), Duration::from_secs(4))
        .await;
    assert!(
        guard.unwrap().is_some(),
        "both members were free after 0.8 s"
    );
}

/// A member that can never be taken by this owner (a non-reentrant lock it holds) is the
/// caller's mistake: an error at once, not rounds until the wait runs out, nor forever.
#[tokio::test]
async fn a_non_reentrant_member_the_owner_holds_is_an_error() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let member = c.non_reentrant_lock("held-by-me").unwrap();
    let _held = member.lock(&me).await.unwrap();
    let multi = MultiLock::new([member.clone()]).unwrap();
    let scripts = evalsha_calls(&server);
    let outcome = multi.try_lock_for(&me, Duration::from_secs(1)).await;
    assert!(
        matches!(outcome, Err(Error::WouldDeadlock(_))),
        "{outcome:?}"
    );
    assert!(
        evalsha_calls(&server) - scripts < 10,
        "no rounds after the error"
    );
    let outcome = within(WAKE, "lock()", multi.lock(&me)).await;
    assert!(
        matches!(outcome, Err(Error::WouldDeadlock(_))),
        "{outcome:?}"
    );
}
