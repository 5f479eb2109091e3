//! A fair waiter that gives up leaves nothing behind: no hold taken by an attempt whose
//! answer it never saw, no place in the queue; and the waiters after it are served.

mod support;

use std::time::Duration;

use fred::interfaces::ClientLike;
use redisson_lock::{FairLock, LockClient, LockGuard, LockOwner};
use support::*;
use tokio::task::JoinHandle;

/// A waiter queued behind a holder, on the client `c`.
struct Queued {
    c: LockClient,
    lock: FairLock,
    holder: LockGuard,
    me: LockOwner,
    waiter: JoinHandle<redisson_lock::Result<Option<LockGuard>>>,
}

/// On a client whose commands time out after 300 ms, with long leases (a hold left behind
/// blocks the lock for the whole test): a holder of the fair lock `name` whose lease ends
/// while the server sleeps (the lock is free when it wakes), and a new owner `me` that
/// waits for it up to `wait`, queued.
async fn queued_behind_a_short_hold(server: &RedisServer, name: &str, wait: Duration) -> Queued {
    let c = client_with(server, |b| {
        b.command_timeout(Duration::from_millis(300))
            .watchdog_timeout(Duration::from_secs(30))
    })
    .await;
    let lock = c.fair_lock(name).unwrap();
    let holder = lock.clone().with_lease(fixed(1200));
    let holder = holder.lock(&c.new_owner()).await.unwrap();
    let me = c.new_owner();
    let waiter = tokio::spawn(lock.try_lock_for(&me, wait));
    eventually(5 * SECOND, "the waiter queued", || {
        queued(server, name).len() == 1
    })
    .await;
    Queued {
        c,
        lock,
        holder,
        me,
        waiter,
    }
}

/// Every field of the lock's hash, its queue and its waiter deadlines.
fn fair_state(server: &RedisServer, name: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let lines = |reply: String| -> Vec<String> {
        reply
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    };
    (
        lines(server.command(&["HKEYS", name])),
        queued(server, name),
        lines(server.command(&[
            "ZRANGE",
            &format!("redisson_lock_timeout:{{{name}}}"),
            "0",
            "-1",
        ])),
    )
}

/// Waits until the server answers commands again, through `c`.
async fn awake(c: &LockClient) {
    within(10 * SECOND, "the server awake", async {
        while c.redis().ping::<fred::types::Value>(None).await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_waiter_whose_last_attempts_went_unanswered_leaves_no_hold_and_no_place() {
    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let name = "orphan-fair";
    let Queued {
        c, holder, waiter, ..
    } = queued_behind_a_short_hold(&server, name, Duration::from_millis(700)).await;
    // A live waiter of another client, behind it.
    let other = LockClient::builder()
        .url(&server.url())
        .build()
        .await
        .unwrap();
    let next_owner = other.new_owner();
    let next = tokio::spawn(other.fair_lock(name).unwrap().lock(&next_owner));
    eventually(5 * SECOND, "the next waiter queued", || {
        queued(&server, name).len() == 2
    })
    .await;

    // The server stops answering: the waiter's attempts time out, their answer unknown,
    // and run once it wakes, on a free lock.
    let asleep = server.command_on_thread(&["DEBUG", "SLEEP", "2"]);
    within(5 * SECOND, "the server falling asleep", async {
        while c.redis().ping::<fred::types::Value>(None).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let gave_up = within(10 * SECOND, "the waiter", waiter).await.unwrap();
    assert!(matches!(gave_up, Ok(None)), "{gave_up:?}");
    tokio::task::spawn_blocking(move || asleep.join().unwrap().unwrap())
        .await
        .unwrap();
    awake(&c).await;

    // The live waiter is served at once, and nothing of the one that gave up is left.
    let served = within(WAKE, "the next waiter", next)
        .await
        .unwrap()
        .unwrap();
    let (holders, queue, deadlines) = fair_state(&server, name);
    assert_eq!(
        holders,
        vec![next_owner.to_string()],
        "only the next waiter holds"
    );
    assert!(
        queue.is_empty() && deadlines.is_empty(),
        "{queue:?} {deadlines:?}"
    );
    served.unlock().await.unwrap();
    assert!(holder.is_lease_lost());
    assert_eq!(c.renewed_holds(), 0);
}

#[tokio::test]
async fn a_waiter_served_after_an_unanswered_attempt_holds_once_and_frees_the_lock() {
    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let name = "unanswered-then-served";
    let Queued {
        c: _c,
        lock,
        holder,
        me,
        waiter,
    } = queued_behind_a_short_hold(&server, name, Duration::from_secs(20)).await;

    // Attempts sent while the server sleeps go unanswered, and run when it wakes, on the
    // free lock: the waiter must hold it once, not once for the attempt it never heard of
    // and once for the one that answered.
    let asleep = server.command_on_thread(&["DEBUG", "SLEEP", "2"]);
    tokio::task::spawn_blocking(move || asleep.join().unwrap().unwrap())
        .await
        .unwrap();
    let guard = within(10 * SECOND, "the waiter", waiter).await.unwrap();
    let guard = guard
        .unwrap()
        .expect("served once the holder's lease ended");
    assert_eq!(lock.hold_count(&me).await.unwrap(), 1);
    // Its late attempts are fenced off before it was handed the guard.
    let fences = server.command(&["KEYS", "redisson_lock_left:*"]);
    assert!(fences.contains(&me.to_string()), "{fences:?}");
    guard.unlock().await.unwrap();
    assert_eq!(
        server.command(&["EXISTS", name]),
        "0",
        "freed by its one release"
    );
    assert!(holder.is_lease_lost());
}
