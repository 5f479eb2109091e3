//! The blocking API from plain threads, without a runtime of the test's own.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redisson_lock::blocking::LockClient;
use redisson_lock::{Error, Lease, MultiMember};
use support::*;

/// A blocking client of `server` with a short watchdog, as the async tests' `client`.
fn blocking_client(server: &RedisServer) -> LockClient {
    let builder = redisson_lock::LockClient::builder()
        .url(&server.url())
        .watchdog_timeout(Duration::from_millis(900))
        .command_timeout(Duration::from_secs(2));
    LockClient::build(builder).unwrap()
}

#[test]
fn threads_exclude_each_other_and_a_waiter_gets_the_lock_on_release() {
    let server = RedisServer::start();
    let client = blocking_client(&server);
    let lock = client.lock("blocking:mutex").unwrap();
    let (me, other) = (client.new_owner(), client.new_owner());

    let guard = lock.lock(&me).unwrap();
    let again = lock.lock(&me).unwrap(); // re-entry
    assert_eq!(lock.hold_count(&me).unwrap(), 2);
    assert!(lock.try_lock(&other).unwrap().is_none());

    let started = Arc::new(Barrier::new(2));
    let waiter = std::thread::spawn({
        let (lock, started) = (lock.clone(), started.clone());
        move || {
            started.wait();
            let guard = lock.try_lock_for(&other, Duration::from_secs(30)).unwrap();
            guard
                .expect("woken when the holder released")
                .unlock()
                .unwrap();
        }
    });
    started.wait();
    subscribed(&server, &lock_channel("blocking:mutex")).block();
    again.unlock().unwrap();
    guard.unlock().unwrap();
    waiter.join().unwrap();
    assert!(!lock.is_locked().unwrap());
    client.shutdown();
}

/// Blocks on an async helper of `support` with a runtime of its own.
trait Block: std::future::Future + Sized {
    fn block(self) -> Self::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(self)
    }
}

impl<F: std::future::Future> Block for F {}

#[test]
fn a_dropped_guard_is_released_before_drop_returns_even_on_another_thread() {
    let server = RedisServer::start();
    let client = blocking_client(&server);
    let lock = client.lock("blocking:drop").unwrap();
    let (me, other) = (client.new_owner(), client.new_owner());
    let guard = lock.lock(&me).unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    assert!(!lock.is_locked().unwrap(), "released when drop returned");
    let guard = lock.try_lock(&other).unwrap().expect("free at once");
    drop(guard);
    assert_eq!(pttl(&server, "blocking:drop"), -2);
}

#[test]
fn a_lost_lease_is_visible() {
    let server = RedisServer::start();
    let client = blocking_client(&server);
    let me = client.new_owner();

    // Force-unlocked by someone else: the watchdog's next renewal finds it gone.
    let lock = client.lock("blocking:lost").unwrap();
    let guard = lock.lock(&me).unwrap();
    assert!(!guard.is_lease_lost());
    assert!(!guard.wait_lease_lost(Duration::from_millis(50)));
    server.command(&["DEL", "blocking:lost"]);
    assert!(guard.wait_lease_lost(Duration::from_secs(10)));
    assert!(guard.is_lease_lost());
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));

    // A fixed lease ends.
    let short = lock
        .clone()
        .with_lease(Lease::fixed(Duration::from_millis(200)).unwrap());
    let guard = short.lock(&me).unwrap();
    let start = Instant::now();
    assert!(guard.wait_lease_lost(Duration::from_secs(10)));
    assert!(start.elapsed() >= Duration::from_millis(150));
}

#[test]
fn java_holds_are_respected_and_every_kind_works() {
    let server = RedisServer::start();
    let client = blocking_client(&server);
    let me = client.new_owner();

    server.command(&["HSET", "blocking:java", JAVA_OWNER, "1"]);
    server.command(&["PEXPIRE", "blocking:java", "30000"]);
    let java_held = client.lock("blocking:java").unwrap();
    assert!(java_held.try_lock(&me).unwrap().is_none());
    java_held.unlock(&java_lock_owner(57)).unwrap();
    java_held.try_lock(&me).unwrap().unwrap().unlock().unwrap();

    let fenced = client.fenced_lock("blocking:fenced").unwrap();
    let first = fenced.lock(&me).unwrap().token();
    let second = fenced.lock(&me).unwrap();
    assert!(second.token() > first);
    assert_eq!(second.fence_token(), Some(second.token()));
    drop(second);
    // Generic over the kinds, as the async API.
    let same = client
        .exclusive_lock::<redisson_lock::kind::Fenced>("blocking:fenced")
        .unwrap();
    assert!(same.lock(&me).unwrap().token() > first);

    let rw = client.read_write_lock("blocking:rw").unwrap();
    let other = client.new_owner();
    let reading = rw.read(&me).unwrap();
    let also = rw.try_read(&other).unwrap().expect("readers share");
    let writer = client.new_owner();
    assert!(rw
        .try_write_for(&writer, Duration::from_millis(50))
        .unwrap()
        .is_none());
    drop((reading, also));
    let writing = rw.write(&other).unwrap();
    assert_eq!(rw.write_hold_count(&other).unwrap(), 1);
    writing.unlock().unwrap();

    let fair = client.fair_lock("blocking:fair").unwrap();
    let spin = client.spin_lock("blocking:spin").unwrap();
    let multi = client
        .multi_lock([MultiMember::from(&fair), MultiMember::from(&spin)])
        .unwrap();
    let both = multi.lock(&me).unwrap();
    assert_eq!(both.held(), 2);
    assert!(fair.is_locked().unwrap() && spin.is_locked().unwrap());
    both.unlock().unwrap();
    assert!(!fair.is_locked().unwrap() && !spin.is_locked().unwrap());

    let once = client.non_reentrant_lock("blocking:once").unwrap();
    let held = once.lock(&me).unwrap();
    assert!(matches!(once.try_lock(&me), Err(Error::WouldDeadlock(_))));
    held.unlock().unwrap();
    client.shutdown();
}

#[test]
fn guards_hold_across_threads_while_others_contend() {
    let server = RedisServer::start();
    let client = blocking_client(&server);
    let lock = client.lock("blocking:contended").unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (lock, owner, inside) = (lock.clone(), client.new_owner(), inside.clone());
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let guard = lock.lock(&owner).unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    std::thread::sleep(Duration::from_millis(2));
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(!lock.is_locked().unwrap());
}

/// The handles' and the client's queries of the async API, from the blocking one: each
/// answers what the async method answers.
#[test]
fn every_query_of_the_async_api_has_its_blocking_twin() {
    use redisson_lock::{Backoff, WaitStrategy};
    let server = RedisServer::start();
    let client = blocking_client(&server);
    let me = client.new_owner();

    let lock = client
        .lock("twins:plain")
        .unwrap()
        .with_lease(fixed(30_000));
    assert_eq!(lock.lease(), fixed(30_000));
    assert_eq!(lock.wait_strategy(), WaitStrategy::PubSub);
    let spin = Backoff::constant(Duration::from_millis(5));
    let spin_lock = client.spin_lock("twins:spin").unwrap().with_backoff(spin);
    assert_eq!(spin_lock.wait_strategy(), WaitStrategy::Spin(spin));

    let fenced = client.fenced_lock("twins:fenced").unwrap();
    assert_eq!(fenced.latest_token().unwrap(), 0);
    let token = fenced.lock(&me).unwrap();
    assert_eq!(fenced.latest_token().unwrap(), token.token());
    assert_eq!(client.renewed_holds(), 1);
    drop(token);

    let rw = client.read_write_lock("twins:rw").unwrap();
    assert_eq!(rw.lease(), Lease::WATCHDOG);
    let read = rw.read(&me).unwrap();
    assert!(rw.is_read_locked().unwrap() && !rw.is_write_locked().unwrap());
    assert!(rw.is_read_held_by(&me).unwrap() && !rw.is_write_held_by(&me).unwrap());
    assert!(rw.remaining_lease().unwrap().is_some());
    drop(read);
    assert_eq!(rw.remaining_lease().unwrap(), None);

    let multi = client
        .multi_lock([MultiMember::from(&lock), MultiMember::from(&fenced)])
        .unwrap()
        .with_lease(fixed(30_000));
    // Taken in name order, as the async multi-lock takes them.
    assert_eq!(multi.names(), ["twins:fenced", "twins:plain"]);
    let held = multi.lock(&me).unwrap();
    let mut held_names = held.names();
    held_names.sort_unstable();
    assert_eq!(held_names, ["twins:fenced", "twins:plain"]);
    assert!(held
        .validity()
        .is_some_and(|left| left <= Duration::from_secs(30)));

    let found = client.find_locks("twins:*", 1_000).unwrap();
    let mut names: Vec<_> = found.locks.iter().map(|state| state.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["twins:fenced", "twins:plain"]);
    assert!(client
        .connected_lock_clients()
        .unwrap()
        .contains_key(&client.id()));
    assert!(!client.listens_sharded());
    assert!(client.subscribed_channels() <= 1);
    held.unlock().unwrap();
    client.shutdown();
    assert!(client.is_shut_down());
}

/// A blocking call made inside a Tokio runtime panics with this crate's words: which call,
/// and what to do instead.
#[test]
fn a_blocking_call_inside_a_runtime_says_which_and_what_to_do() {
    let server = RedisServer::start();
    let client = blocking_client(&server);
    let semaphore = client.semaphore("blocking:in-runtime").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let panicked = runtime.block_on(async {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            semaphore.try_set_permits(1)
        }))
    });
    let payload = panicked.expect_err("a blocking call inside a runtime panics");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    for words in [
        "blocking::Semaphore::try_set_permits",
        "inside an async",
        "spawn_blocking",
    ] {
        assert!(message.contains(words), "{message}");
    }
    // Outside the runtime the same handle works.
    assert!(semaphore.try_set_permits(1).unwrap());
    client.shutdown();
}
