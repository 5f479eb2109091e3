//! Exclusion and wake-ups across clients, and multi-locks whose members lie on many slots and clusters.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_in_two_clients_exclude_each_other() {
    let cluster = shared_cluster();
    let clients = [
        cluster_client(&cluster, PubSubMode::Auto).await,
        cluster_client(&cluster, PubSubMode::Auto).await,
    ];
    let total = count_under_lock(&clients, "{cluster-exclusion}", 4, 25).await;
    assert_eq!(total, 2 * 4 * 25);
}

/// A waiter in another client wakes on the release of every kind that waits by message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_wakes_a_waiter_in_another_client() {
    let cluster = shared_cluster();
    let holder = cluster_client(&cluster, PubSubMode::Auto).await;
    let waiter = cluster_client(&cluster, PubSubMode::Auto).await;
    every_kind_wakes(&holder, &waiter, "wake", |channel| {
        let cluster = cluster.clone();
        async move { sharded_subscribed(&cluster, &channel).await }
    })
    .await;
}

/// Multi-lock members on different slots of one cluster and on two clusters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_members_on_many_slots_and_clusters() {
    let cluster = shared_cluster();
    let other_cluster = Arc::new(Cluster::start());
    let a = cluster_client(&cluster, PubSubMode::Auto).await;
    let b = cluster_client(&other_cluster, PubSubMode::Auto).await;
    let names = ["multi-1", "multi-2", "multi-3", "multi-4"];
    let slots: std::collections::HashSet<u16> = names.iter().map(|n| cluster.slot(n)).collect();
    assert!(slots.len() > 1, "the members span slots");
    let mut members: Vec<redisson_lock::Lock> = names.iter().map(|n| a.lock(n).unwrap()).collect();
    members.push(b.lock("multi-remote").unwrap());
    let multi = a.multi_lock(members.clone()).unwrap();
    let me = a.new_owner();
    let guard = multi.lock(&me).await.unwrap();
    for member in &members {
        assert!(member.is_held_by(&me).await.unwrap());
    }
    let red = a.red_lock(members.clone()).unwrap();
    let other = a.new_owner();
    assert!(red.try_lock(&other).await.unwrap().is_none());
    guard.unlock().await.unwrap();
    for member in &members {
        assert!(!member.is_locked().await.unwrap());
    }
    let red_guard = red
        .try_lock(&other)
        .await
        .unwrap()
        .expect("a majority is free");
    red_guard.unlock().await.unwrap();
    settle("nothing left", || true);
}
