//! The non-reentrant locks (Redisson's `getNonReentrantLock` and `getNonReentrantFairLock`,
//! protocol §8.2, §8.3): a second acquisition by the holder fails at once and changes
//! nothing. Ports of `RedissonNonReentrantLockTest` / `RedissonNonReentrantFairLockTest`
//! (§11.9), run for both variants.

mod support;

use std::time::{Duration, Instant};

use redisson_lock::Error;
use support::*;

/// "At once": far below the minute a refused call was given, on a loaded machine too.
const AT_ONCE: Duration = Duration::from_secs(5);

macro_rules! non_reentrant_tests {
    ($variant:ident, $constructor:ident) => {
        mod $variant {
            use super::*;

            /// testContendingThreadBlocksAndAcquiresOnRelease.
            #[tokio::test]
            async fn a_contending_owner_blocks_and_acquires_on_release() {
                let server = RedisServer::start();
                let c = client(&server).await;
                let lock = c.$constructor("nr-contended").unwrap();
                let (holder, contender) = (c.new_owner(), c.new_owner());

                let guard = lock.lock(&holder).await.unwrap();
                let waiter = tokio::spawn(lock.lock(&contender));
                // Subscribed (to the shared channel, or to its own as a fair waiter): waiting.
                eventually(10 * SECOND, "the contender subscribed", || {
                    !server
                        .command(&["PUBSUB", "CHANNELS", "*{nr-contended}*"])
                        .is_empty()
                })
                .await;
                assert!(!waiter.is_finished(), "the contender must block");

                guard.unlock().await.unwrap();
                let got = within(WAKE, "contender", waiter).await.unwrap().unwrap();
                assert!(lock.is_held_by(&contender).await.unwrap());
                got.unlock().await.unwrap();
                assert!(!lock.is_locked().await.unwrap());
            }

            /// testSameThreadReacquireThrows: lock, tryLock and a timed tryLock by the
            /// holder all fail at once; the hold stays (count 1) and one unlock frees it.
            #[tokio::test]
            async fn the_holder_asking_again_fails_at_once() {
                let server = RedisServer::start();
                let c = client(&server).await;
                let lock = c.$constructor("nr-again").unwrap();
                let me = c.new_owner();
                let guard = lock.lock(&me).await.unwrap();

                let started = Instant::now();
                let refused = within(AT_ONCE, "lock", lock.lock(&me)).await;
                assert!(
                    matches!(refused, Err(Error::WouldDeadlock(_))),
                    "{refused:?}"
                );
                assert!(matches!(
                    lock.try_lock(&me).await,
                    Err(Error::WouldDeadlock(_))
                ));
                assert!(matches!(
                    lock.try_lock_for(&me, Duration::from_millis(100)).await,
                    Err(Error::WouldDeadlock(_))
                ));
                // Even a long wait is no wait at all.
                assert!(matches!(
                    lock.try_lock_for(&me, 60 * SECOND).await,
                    Err(Error::WouldDeadlock(_))
                ));
                assert!(started.elapsed() < AT_ONCE, "took {:?}", started.elapsed());

                assert!(lock.is_held_by(&me).await.unwrap());
                assert_eq!(lock.hold_count(&me).await.unwrap(), 1);
                assert_eq!(server.command(&["HGET", "nr-again", &me.to_string()]), "1");
                // Nothing was queued by the refused calls (fair variant).
                assert_eq!(
                    server.command(&["EXISTS", "redisson_lock_queue:{nr-again}"]),
                    "0"
                );

                guard.unlock().await.unwrap();
                assert!(!lock.is_locked().await.unwrap());
                // Free again: the same owner may take it anew.
                lock.try_lock(&me)
                    .await
                    .unwrap()
                    .unwrap()
                    .unlock()
                    .await
                    .unwrap();
            }

            /// testCrossInstanceSameThreadReentryThrows: a second handle on the same name,
            /// acting for the same owner, is refused and sees the hold as the owner's.
            #[tokio::test]
            async fn a_second_handle_for_the_same_owner_is_refused() {
                let server = RedisServer::start();
                let c = client(&server).await;
                let me = c.new_owner();
                let first = c.$constructor("nr-two-handles").unwrap();
                let second = c.$constructor("nr-two-handles").unwrap();

                let guard = first.lock(&me).await.unwrap();
                let refused = within(AT_ONCE, "second handle", second.lock(&me)).await;
                match refused {
                    Err(Error::WouldDeadlock(message)) => {
                        assert!(message.contains("nr-two-handles"), "{message}");
                    }
                    other => panic!("expected WouldDeadlock, got {other:?}"),
                }
                assert!(second.is_held_by(&me).await.unwrap());
                assert_eq!(second.hold_count(&me).await.unwrap(), 1);
                // The same owner through a clone of the owner, from another task, too.
                let (second2, me2) = (second.clone(), me.clone());
                let from_task = tokio::spawn(async move { second2.try_lock(&me2).await })
                    .await
                    .unwrap();
                assert!(matches!(from_task, Err(Error::WouldDeadlock(_))));

                guard.unlock().await.unwrap();
                assert!(!second.is_locked().await.unwrap());
            }

            #[tokio::test]
            async fn other_owners_are_excluded_and_detached_holds_unlock_once() {
                let server = RedisServer::start();
                let c = client(&server).await;
                let lock = c.$constructor("nr-detached").unwrap();
                let (me, other) = (c.new_owner(), c.new_owner());
                lock.lock(&me).await.unwrap().detach();
                assert!(lock.try_lock(&other).await.unwrap().is_none());
                assert!(lock
                    .try_lock_for(&other, Duration::from_millis(100))
                    .await
                    .unwrap()
                    .is_none());
                lock.unlock(&me).await.unwrap();
                assert!(matches!(lock.unlock(&me).await, Err(Error::NotHeld { .. })));
                let guard = lock.try_lock(&other).await.unwrap().unwrap();
                assert!(lock.force_unlock().await.unwrap());
                assert!(!lock.is_locked().await.unwrap());
                drop(guard);
            }
        }
    };
}

non_reentrant_tests!(plain, non_reentrant_lock);
non_reentrant_tests!(fair, non_reentrant_fair_lock);

#[tokio::test]
async fn the_wire_reply_is_redissons_error() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let guard = c
        .non_reentrant_lock("nr-wire")
        .unwrap()
        .lock(&me)
        .await
        .unwrap();
    // A plain Lock of the same owner re-enters the same hash: the refusal is the
    // non-reentrant handle's, not the data's.
    let plain = c.lock("nr-wire").unwrap();
    let inner = plain.try_lock(&me).await.unwrap().expect("plain re-entry");
    assert_eq!(plain.hold_count(&me).await.unwrap(), 2);
    inner.unlock().await.unwrap();
    // Another owner's plain lock is excluded.
    assert!(plain.try_lock(&c.new_owner()).await.unwrap().is_none());
    guard.unlock().await.unwrap();

    // A Java holder's view: the same script and arguments give the error reply.
    server.command(&["HSET", "nr-java", "java:1", "1"]);
    server.command(&["PEXPIRE", "nr-java", "30000"]);
    let lua = lua("lock_acquire");
    let reply = server.command(&[
        "EVAL",
        &lua,
        "1",
        "nr-java",
        "30000",
        "java:1",
        "NON_REENTRANT_REACQUIRE",
    ]);
    assert!(reply.starts_with("ERR:"), "{reply}");
    assert!(reply.contains("NON_REENTRANT_REACQUIRE"), "{reply}");
    assert_eq!(server.command(&["HGET", "nr-java", "java:1"]), "1");
}
