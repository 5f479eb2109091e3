//! Hand-offs for the exclusive kinds beside the reentrant lock: the fenced lock (the heir
//! gets the next token), the spin and non-reentrant locks (the reentrant lock's hash) and the
//! write side of the read-write lock (its own layout). Each hands over only to waiters of its
//! own kind.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use redisson_lock::kind::HoldKind;
use redisson_lock::{Backoff, SpinLock};

use super::handing_over::{handing_client, layout, mostly_handed_over, Contenders};
use super::*;

/// The server's counts of unlock messages and scripts, to tell a hand-off (one script, no
/// message) from a release and an acquisition.
struct Counts {
    published: u64,
    scripts: u64,
}

impl Counts {
    fn now(server: &RedisServer) -> Counts {
        Counts {
            published: command_calls(server, "publish"),
            scripts: evalsha_calls(server),
        }
    }

    /// Since `self`: no message, and one script (the release that handed the lock over).
    fn one_script_no_message(&self, server: &RedisServer) {
        let now = Counts::now(server);
        assert_eq!(now.published, self.published, "the lock was never free");
        assert_eq!(now.scripts, self.scripts + 1, "the release alone ran");
    }
}

/// The hash `key` as Java reads it, field by field.
fn hash(server: &RedisServer, key: &str) -> BTreeMap<String, String> {
    let reply = server.command(&["HGETALL", key]);
    let lines: Vec<&str> = reply.lines().collect();
    let pairs = lines.chunks(2).map(|p| (p[0].to_owned(), p[1].to_owned()));
    pairs.collect()
}

/// Starts `waiter` on a task of its own and, once it waits on `channel`, releases `held`:
/// the waiter's guard, and the server's counts from just before the release.
async fn released_to_waiter<H: HoldKind, T: HoldKind>(
    server: &RedisServer,
    channel: &str,
    held: LockGuard<H>,
    waiter: impl Future<Output = redisson_lock::Result<LockGuard<T>>> + Send + 'static,
) -> (LockGuard<T>, Counts) {
    let before = evalsha_calls(server);
    let waiter = tokio::spawn(waiter);
    waiting(server, channel, before + 2).await;
    let counts = Counts::now(server);
    held.unlock().await.unwrap();
    let guard = within(10 * SECOND, "the waiter", waiter).await.unwrap();
    (guard.unwrap(), counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_handed_over_gives_the_heir_the_next_token() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.fenced_lock("fenced-heir").unwrap();
    let (holder, heir) = (client.new_owner(), client.new_owner());
    let held = lock.lock(&holder).await.unwrap();
    let held_token = held.token();
    let waiter = lock.lock(&heir);
    let (guard, counts) =
        released_to_waiter(&server, &lock_channel("fenced-heir"), held, waiter).await;
    counts.one_script_no_message(&server);
    // As if the heir had acquired it: the counter moved on by one, and the token is its.
    assert_eq!(guard.token(), held_token + 1);
    assert_eq!(lock.latest_token().await.unwrap(), guard.token());
    assert_eq!(
        layout(&client, "fenced-heir").await.0,
        [(heir.to_string(), 1)]
    );
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

/// Eight tasks hand a fenced lock around: every hold, handed over or acquired, has a token
/// above the one before it, and the counter counts each hold once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_grow_with_every_hold_while_tasks_hand_the_lock_around() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.fenced_lock("fenced-hot").unwrap();
    let published = command_calls(&server, "publish");
    let last = Arc::new(AtomicU64::new(0));
    let contenders = Contenders::start(&client, &lock, 8, move |guard| {
        let before = last.swap(guard.token(), Ordering::SeqCst);
        assert!(
            guard.token() > before,
            "token {} after {before}",
            guard.token()
        );
    });
    contenders.reached(320).await;
    let holds = contenders.stop().await;
    assert_eq!(lock.latest_token().await.unwrap(), holds);
    mostly_handed_over(&server, published, holds);
}

/// Spinning waiters are handed the lock too: a hold then costs the release alone, where a
/// spinning acquisition costs its own script and the release at least (about 1.4 scripts per
/// hold with hand-offs here, 2.2 without).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_tasks_are_handed_a_spin_lock_without_spinning_for_it() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock: SpinLock = (client.spin_lock("spun").unwrap())
        .with_backoff(Backoff::constant(Duration::from_millis(20)));
    let contenders = Contenders::start(&client, &lock, 8, |_| {});
    contenders.reached(100).await;
    let (scripts, counted) = (evalsha_calls(&server), contenders.holds());
    contenders.reached(counted + 300).await;
    let (scripts, held) = (
        evalsha_calls(&server) - scripts,
        contenders.holds() - counted,
    );
    contenders.stop().await;
    // Without hand-offs every hold takes two scripts (its acquisition and its release), plus
    // the attempts that found the lock busy.
    assert!(
        scripts * 10 < held * 19,
        "most holds were handed over: {scripts} scripts for {held} holds"
    );
    let (fields, _) = layout(&client, "spun").await;
    assert!(fields.is_empty(), "released at the end: {fields:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_reentrant_lock_handed_over_is_held_once_and_still_refuses_a_re_entry() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.non_reentrant_lock("once-heir").unwrap();
    let (holder, heir) = (client.new_owner(), client.new_owner());
    let held = lock.lock(&holder).await.unwrap();
    let waiter = lock.lock(&heir);
    let (guard, counts) =
        released_to_waiter(&server, &lock_channel("once-heir"), held, waiter).await;
    counts.one_script_no_message(&server);
    assert_eq!(
        layout(&client, "once-heir").await.0,
        [(heir.to_string(), 1)]
    );
    assert!(matches!(
        lock.try_lock(&heir).await,
        Err(Error::WouldDeadlock(_))
    ));
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_handed_over_keeps_the_read_write_layout() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.read_write_lock("written").unwrap();
    // The heir's own lease is what the key gets.
    let heir_lock = lock.clone().with_lease(fixed(20_000));
    let (holder, heir) = (client.new_owner(), client.new_owner());
    let held = lock.write(&holder).await.unwrap();
    let waiter = heir_lock.write(&heir);
    let (guard, counts) =
        released_to_waiter(&server, "redisson_rwlock:{written}", held, waiter).await;
    counts.one_script_no_message(&server);
    // What Java reads: write mode, the heir's write field held once, the heir's lease.
    let expected = [("mode", "write"), (&*format!("{heir}:write"), "1")];
    let expected: BTreeMap<String, String> = (expected.iter())
        .map(|(field, value)| (field.to_string(), value.to_string()))
        .collect();
    assert_eq!(hash(&server, "written"), expected);
    let pttl: i64 = server.command(&["PTTL", "written"]).parse().unwrap();
    assert!((15_000..=20_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(lock.write_hold_count(&heir).await.unwrap(), 1);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

/// An owner with a read hold that asks for the write side while the client's writers wait in
/// line is refused at once, as always: it must not queue behind them without its first look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_is_refused_at_once_while_writers_of_the_client_wait() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.read_write_lock("upgraded").unwrap();
    let reader = client.new_owner();
    let read = lock.read(&reader).await.unwrap();
    let before = evalsha_calls(&server);
    let writer = tokio::spawn(lock.write(&client.new_owner()));
    waiting(&server, "redisson_rwlock:{upgraded}", before + 2).await;

    // Queued, it would only look after half a second (a waiter with nothing to wake it looks
    // every 500 ms), and then be refused.
    let upgrade = tokio::time::timeout(Duration::from_millis(300), lock.write(&reader));
    let refused = upgrade.await.expect("refused at once");
    assert!(
        matches!(refused, Err(Error::WouldDeadlock(_))),
        "{refused:?}"
    );
    read.unlock().await.unwrap();
    woken_and_released_write(writer).await;
}

async fn woken_and_released_write(
    writer: tokio::task::JoinHandle<redisson_lock::Result<redisson_lock::WriteGuard>>,
) {
    let guard = within(10 * SECOND, "the writer", writer).await.unwrap();
    guard.unwrap().unlock().await.unwrap();
}

/// A release hands a lock only to a waiter of its own kind: a fenced waiter behind a
/// reentrant hold of the same name is woken and acquires, taking a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_never_handed_to_a_waiter_of_another_kind() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let (plain, fenced) = (
        client.lock("mixed").unwrap(),
        client.fenced_lock("mixed").unwrap(),
    );
    let held = plain.lock(&client.new_owner()).await.unwrap();
    let waiter = fenced.lock(&client.new_owner());
    let (guard, counts) = released_to_waiter(&server, &lock_channel("mixed"), held, waiter).await;
    let published = command_calls(&server, "publish");
    assert_eq!(
        published,
        counts.published + 1,
        "freed, and the waiters told"
    );
    assert_eq!(guard.token(), 1, "its own acquisition took the first token");
    assert_eq!(fenced.latest_token().await.unwrap(), 1);
    guard.unlock().await.unwrap();
}
