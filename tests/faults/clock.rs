//! The clock: a client whose wall clock is skewed.

use super::*;

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
