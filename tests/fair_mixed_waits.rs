//! Fair waiters whose waits differ (Redisson 3.11.1 to 3.13.2 wait 5 s, this crate 5 min by
//! default) share one queue safely: when a waiter with a long wait leaves the line, the
//! deadlines behind it never move past the next look of a live waiter with a shorter one,
//! so no purge drops that waiter unwoken.

mod support;

use redisson_lock::LockOwner;
use support::listener::Listener;
use support::*;

/// The wait of a Redisson 3.11.1 to 3.13.2 client, in ms.
const JAVA_WAIT_MS: i64 = 5_000;

fn timeouts_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

fn deadline(server: &RedisServer, name: &str, member: &str) -> i64 {
    let reply = server.command(&["ZSCORE", &timeouts_key(name), member]);
    let score: f64 = (reply.parse()).unwrap_or_else(|_| panic!("{member} has no deadline"));
    score.round() as i64
}

/// A Java waiter joins the line as Redisson 3.11.1 to 3.13.2 does: behind the last waiter,
/// with a deadline of that waiter's plus its own wait of 5 s.
fn java_joins(server: &RedisServer, name: &str, field: &str, last: &str) {
    let deadline = deadline(server, name, last) + JAVA_WAIT_MS;
    server.command(&["RPUSH", &queue_key(name), field]);
    server.command(&["ZADD", &timeouts_key(name), &deadline.to_string(), field]);
}

async fn queue_reaches(server: &RedisServer, name: &str, len: usize) {
    eventually(WAKE, &format!("a queue of {len}"), || {
        queued(server, name).len() == len
    })
    .await;
}

/// The issue as users met it: a Java waiter behind a Rust waiter with the default 5-minute
/// wait. The Rust waiter takes the lock; the Java waiter's deadline stays where it will look
/// again (Java would have moved it 5 minutes back, into the past), and when the Rust holder
/// releases, the Java waiter is still first in line and is told on its own channel.
#[tokio::test]
async fn a_java_waiter_behind_a_rust_waiter_with_a_longer_wait_is_woken_not_purged() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "mixed-acquire";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(30_000));
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    let rust_waiter = c.new_owner();
    let waiting = tokio::spawn({
        let lock = lock.clone();
        let owner = rust_waiter.clone();
        async move { lock.lock(&owner).await }
    });
    queue_reaches(&server, name, 1).await;
    let java = java_owner(61);
    java_joins(&server, name, &java, &rust_waiter.to_string());
    let rust_deadline = deadline(&server, name, &rust_waiter.to_string());
    let mut java_channel = Listener::channel(
        &server,
        &format!("redisson_lock__channel:{{{name}}}:{java}"),
    )
    .await;

    holder.unlock().await.unwrap();
    let second = within(WAKE, "the Rust waiter", waiting)
        .await
        .unwrap()
        .unwrap();
    // The Java waiter looks again by the Rust waiter's old deadline: its own stays there.
    assert_eq!(deadline(&server, name, &java), rust_deadline);
    assert!(deadline(&server, name, &java) > now_ms());

    second.unlock().await.unwrap();
    assert_eq!(
        queued(&server, name),
        vec![java.clone()],
        "the Java waiter was purged"
    );
    let (_, message) = within(WAKE, "the Java waiter's message", java_channel.next()).await;
    assert_eq!(message, "0");
    server.command(&["DEL", &queue_key(name), &timeouts_key(name)]);
}

/// A Rust waiter with the default wait gives up; the Java waiter behind it moves up by its
/// own gap (5 s), not by the leaver's 5 minutes, and stays in line past its next look.
#[tokio::test]
async fn a_rust_waiter_leaving_moves_a_java_waiter_behind_it_by_no_more_than_its_gap() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "mixed-leave";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(30_000));
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    let first = c.new_owner();
    let leaver = c.new_owner();
    let mut waiters = Vec::new();
    for (owner, len) in [(&first, 1), (&leaver, 2)] {
        let acquire = lock.lock(owner);
        waiters.push(tokio::spawn(acquire));
        queue_reaches(&server, name, len).await;
    }
    let java = java_owner(62);
    java_joins(&server, name, &java, &leaver.to_string());
    let leaver_deadline = deadline(&server, name, &leaver.to_string());

    waiters.pop().unwrap().abort();
    queue_reaches(&server, name, 2).await;
    assert_eq!(deadline(&server, name, &java), leaver_deadline);

    for waiter in waiters {
        waiter.abort();
    }
    queue_reaches(&server, name, 1).await;
    holder.unlock().await.unwrap();
    server.command(&["DEL", &queue_key(name), &timeouts_key(name)]);
}

/// With equal waits nothing changes: every deadline moves by the wait, as Java moves them.
#[tokio::test]
async fn equal_waits_move_deadlines_as_java_does() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "equal-waits";
    let lock = c.fair_lock(name).unwrap().with_lease(fixed(30_000));
    let holder = lock.lock(&c.new_owner()).await.unwrap();
    let owners: Vec<LockOwner> = (0..3).map(|_| c.new_owner()).collect();
    let mut waiters = Vec::new();
    for (i, owner) in owners.iter().enumerate() {
        waiters.push(tokio::spawn(lock.lock(owner)));
        queue_reaches(&server, name, i + 1).await;
    }
    let before: Vec<i64> = (owners.iter())
        .map(|o| deadline(&server, name, &o.to_string()))
        .collect();
    holder.unlock().await.unwrap();
    let second = within(WAKE, "the first waiter", waiters.remove(0))
        .await
        .unwrap()
        .unwrap();
    // The default fair wait: 5 minutes.
    let wait = 300_000;
    for (owner, before) in owners[1..].iter().zip(&before[1..]) {
        assert_eq!(deadline(&server, name, &owner.to_string()), before - wait);
    }
    for waiter in waiters {
        waiter.abort();
    }
    queue_reaches(&server, name, 0).await;
    second.unlock().await.unwrap();
}
