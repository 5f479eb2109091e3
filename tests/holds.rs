//! Which hold a guard releases, how long a lock key lives, and what a lease may be: a guard
//! releases only the hold it took; a re-entry or a partial release never cuts short the
//! owner's other holds; no script leaves partial writes behind.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redisson_lock::{Error, Lease, LockClient, LockOwner};
use support::*;

/// Every kind of lock that keeps a hold under an owner's field.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Plain,
    Fair,
    Fenced,
    Spin,
    NonReentrant,
    NonReentrantFair,
    Read,
    Write,
}

const KINDS: [Kind; 8] = [
    Kind::Plain,
    Kind::Fair,
    Kind::Fenced,
    Kind::Spin,
    Kind::NonReentrant,
    Kind::NonReentrantFair,
    Kind::Read,
    Kind::Write,
];

type Unlock = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// A guard of any kind, reduced to its release (dropping it drops the guard).
struct AnyGuard(Box<dyn FnOnce() -> Unlock + Send>);

impl AnyGuard {
    fn new<G: Send + 'static, F>(guard: G, unlock: impl FnOnce(G) -> F + Send + 'static) -> Self
    where
        F: Future<Output = Result<(), Error>> + Send + 'static,
    {
        AnyGuard(Box::new(move || Box::pin(unlock(guard))))
    }

    async fn unlock(self) -> Result<(), Error> {
        (self.0)().await
    }
}

impl Kind {
    fn reentrant(self) -> bool {
        !matches!(self, Kind::NonReentrant | Kind::NonReentrantFair)
    }

    async fn take(
        self,
        c: &LockClient,
        name: &str,
        owner: &LockOwner,
        lease: Lease,
    ) -> Result<AnyGuard, Error> {
        Ok(match self {
            Kind::Plain => AnyGuard::new(
                c.lock(name).unwrap().with_lease(lease).lock(owner).await?,
                |g| g.unlock(),
            ),
            Kind::Fair => AnyGuard::new(
                c.fair_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .lock(owner)
                    .await?,
                |g| g.unlock(),
            ),
            Kind::Fenced => AnyGuard::new(
                c.fenced_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .lock(owner)
                    .await?,
                |g| g.unlock(),
            ),
            Kind::Spin => AnyGuard::new(
                c.spin_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .lock(owner)
                    .await?,
                |g| g.unlock(),
            ),
            Kind::NonReentrant => AnyGuard::new(
                c.non_reentrant_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .lock(owner)
                    .await?,
                |g| g.unlock(),
            ),
            Kind::NonReentrantFair => AnyGuard::new(
                c.non_reentrant_fair_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .lock(owner)
                    .await?,
                |g| g.unlock(),
            ),
            Kind::Read => AnyGuard::new(
                c.read_write_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .read(owner)
                    .await?,
                |g| g.unlock(),
            ),
            Kind::Write => AnyGuard::new(
                c.read_write_lock(name)
                    .unwrap()
                    .with_lease(lease)
                    .write(owner)
                    .await?,
                |g| g.unlock(),
            ),
        })
    }

    async fn hold_count(self, c: &LockClient, name: &str, owner: &LockOwner) -> u64 {
        let count = match self {
            Kind::Read => {
                c.read_write_lock(name)
                    .unwrap()
                    .read_hold_count(owner)
                    .await
            }
            Kind::Write => {
                c.read_write_lock(name)
                    .unwrap()
                    .write_hold_count(owner)
                    .await
            }
            _ => c.lock(name).unwrap().hold_count(owner).await,
        };
        count.unwrap()
    }
}

fn assert_not_held(result: Result<(), Error>, what: &str) {
    assert!(
        matches!(result, Err(Error::NotHeld { .. })),
        "{what}: {result:?}"
    );
}

#[tokio::test]
async fn a_guard_whose_fixed_lease_ran_out_leaves_the_owners_new_hold_alone() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let lock = c.lock("expired-guard").unwrap();

    let old = lock.clone().with_lease(fixed(500)).lock(&me).await.unwrap();
    within(5 * SECOND, "the lease running out", old.lease_lost()).await;
    eventually(Duration::from_secs(5), "the key expired", || {
        server.command(&["EXISTS", "expired-guard"]) == "0"
    })
    .await;
    let new = held_for_a_minute(&lock, &me).await;

    assert_not_held(old.unlock().await, "the expired guard");
    assert_eq!(lock.hold_count(&me).await.unwrap(), 1, "the new hold stays");
    assert!(lock.try_lock(&other).await.unwrap().is_none());
    assert!(!new.is_lease_lost());
    new.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "expired-guard"]), "0");
}

#[tokio::test]
async fn relocking_after_lease_lost_keeps_the_new_hold_when_the_old_guard_drops() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let lock = c.lock("relock").unwrap();

    let mut guard = lock.lock(&me).await.unwrap();
    server.command(&["DEL", "relock"]);
    within(Duration::from_secs(10), "the watchdog reports the loss", {
        guard.lease_lost()
    })
    .await;
    // The everyday pattern: the old guard is dropped after the new one is assigned.
    guard = lock.lock(&me).await.unwrap();

    // Were the dropped guard to release in the background, the lock would be free at once.
    let stolen = lock
        .try_lock_for(&other, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(stolen.is_none(), "another owner took the new hold");
    assert_eq!(lock.hold_count(&me).await.unwrap(), 1);
    assert!(!guard.is_lease_lost());
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_guard_of_a_hold_lost_unnoticed_releases_nothing_of_every_kind() {
    let server = RedisServer::start();
    // Renewals only every 10 s: between them the client cannot have noticed that a hold
    // was lost, so what the test sees is the release path's own doing.
    let c = long_watchdog_client(&server).await;
    let me = c.new_owner();
    for kind in KINDS {
        let name = format!("lost-{kind:?}");
        let first = kind.take(&c, &name, &me, Lease::WATCHDOG).await.unwrap();
        let again = if kind.reentrant() {
            Some(kind.take(&c, &name, &me, Lease::WATCHDOG).await.unwrap())
        } else {
            None
        };
        // The hold is lost (its key expired, was deleted, or the data was lost) before
        // the watchdog's next renewal could notice; the owner takes the lock afresh.
        server.command(&["DEL", &name]);
        let fresh = kind.take(&c, &name, &me, Lease::WATCHDOG).await.unwrap();

        assert_not_held(first.unlock().await, &format!("{kind:?} first guard"));
        if let Some(again) = again {
            assert_not_held(again.unlock().await, &format!("{kind:?} re-entered guard"));
        }
        assert_eq!(kind.hold_count(&c, &name, &me).await, 1, "{kind:?}");
        fresh.unlock().await.unwrap();
        assert_eq!(server.command(&["EXISTS", &name]), "0", "{kind:?}");
    }
    assert_eq!(c.renewed_holds(), 0);
}

#[tokio::test]
async fn a_new_acquisition_tells_the_guards_of_the_lost_hold() {
    let server = RedisServer::start();
    // Renewals only every 10 s: between them the client cannot have noticed that a hold
    // was lost, so what the test sees is the release path's own doing.
    let c = long_watchdog_client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("lost-told").unwrap();

    let old = lock.lock(&me).await.unwrap();
    let fixed = held_for_a_minute(&lock, &me).await;
    server.command(&["DEL", "lost-told"]);
    assert!(!old.is_lease_lost(), "nothing could have noticed yet");
    let new = lock.lock(&me).await.unwrap();
    within(
        Duration::from_secs(5),
        "lease_lost of the old guards",
        async {
            old.lease_lost().await;
            fixed.lease_lost().await;
        },
    )
    .await;
    assert!(!new.is_lease_lost());
    drop((old, fixed));
    new.unlock().await.unwrap();
}

#[tokio::test]
async fn reentrant_guards_of_a_live_hold_release_one_by_one() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    for kind in KINDS.into_iter().filter(|k| k.reentrant()) {
        let name = format!("live-{kind:?}");
        let outer = kind.take(&c, &name, &me, Lease::WATCHDOG).await.unwrap();
        let inner = kind.take(&c, &name, &me, Lease::WATCHDOG).await.unwrap();
        assert_eq!(kind.hold_count(&c, &name, &me).await, 2, "{kind:?}");
        // Released in the order taken: the first guard is no less live than the second.
        outer.unlock().await.unwrap();
        assert_eq!(kind.hold_count(&c, &name, &me).await, 1, "{kind:?}");
        inner.unlock().await.unwrap();
        assert_eq!(server.command(&["EXISTS", &name]), "0", "{kind:?}");
    }
}

#[tokio::test]
async fn a_lease_redis_cannot_set_is_refused_and_the_longest_works() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let too_long = [
        Duration::MAX,
        Duration::from_millis(i64::MAX as u64),
        Duration::from_millis(i64::MAX as u64 / 2),
        Lease::MAX_FIXED + Duration::from_millis(1),
    ];
    for lease in too_long {
        let refused = Lease::fixed(lease);
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{lease:?}: {refused:?}"
        );
    }
    for kind in KINDS {
        let name = format!("huge-{kind:?}");
        // The longest lease there is works, and the key gets it as its TTL.
        let guard = kind
            .take(&c, &name, &me, Lease::fixed(Lease::MAX_FIXED).unwrap())
            .await
            .unwrap();
        assert!(pttl(&server, &name) > 9_000_000_000_000_000, "{kind:?}");
        guard.unlock().await.unwrap();
        assert_eq!(server.command(&["EXISTS", &name]), "0", "{kind:?}");
    }
}

#[tokio::test]
async fn every_script_checks_its_durations_before_writing() {
    let server = RedisServer::start();
    let bad = [
        "0",
        "-5",
        "1.5",
        "soon",
        "9007199254740992",
        "9223372036854775807",
    ];
    for lease in bad {
        // Acquire scripts: nothing is written for a lease PEXPIRE would refuse.
        let acquires: [(&str, Vec<&str>, Vec<&str>); 5] = [
            ("lock_acquire", vec!["s"], vec![lease, "me:1"]),
            ("fenced_acquire", vec!["s", "t"], vec![lease, "me:1"]),
            ("read_acquire", vec!["s", "{s}"], vec![lease, "me:1"]),
            (
                "write_acquire",
                vec!["s"],
                vec![lease, "me:1:write", "me:1"],
            ),
            (
                "fair_acquire",
                vec!["s", "q", "z"],
                vec![lease, "me:1", "1000", "1", "1"],
            ),
        ];
        for (script, keys, args) in acquires {
            let lua = lua(script);
            let numkeys = keys.len().to_string();
            let mut command = vec!["EVAL", &lua, &numkeys];
            command.extend(&keys);
            command.extend(&args);
            let reply = server.command(&command);
            assert!(reply.starts_with("ERR"), "{script} with {lease}: {reply}");
            assert_eq!(server.command(&["DBSIZE"]), "0", "{script} with {lease}");
        }

        // A release with a bad latch TTL or lease releases nothing.
        server.command(&["HSET", "held", "me:1", "2"]);
        let release = lua("lock_release");
        for (lease_arg, latch_ttl) in [("30000", lease), (lease, "10000")] {
            let reply = server.command(&[
                "EVAL", &release, "3", "held", "c", "latch", "0", lease_arg, "me:1", "PUBLISH",
                latch_ttl, "1",
            ]);
            assert!(reply.starts_with("ERR"), "release with {lease}: {reply}");
            assert_eq!(server.command(&["HGET", "held", "me:1"]), "2");
            assert_eq!(server.command(&["EXISTS", "latch"]), "0");
        }
        server.command(&["DEL", "held"]);
    }
}

#[tokio::test]
async fn a_shorter_fixed_reentry_never_cuts_a_watchdog_hold_short() {
    let server = RedisServer::start();
    // Renewals only every 10 s: between them the client cannot have noticed that a hold
    // was lost, so what the test sees is the release path's own doing.
    let c = long_watchdog_client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());
    let lock = c.lock("short-inner").unwrap();

    let outer = lock.lock(&me).await.unwrap();
    let inner = lock.clone().with_lease(fixed(200)).lock(&me).await.unwrap();
    assert!(
        pttl(&server, "short-inner") > 20_000,
        "the re-entry kept the watchdog's TTL"
    );
    inner.unlock().await.unwrap();
    assert!(
        pttl(&server, "short-inner") > 20_000,
        "the partial release kept the watchdog's TTL"
    );
    // Long after the inner lease would have run out, the outer hold still excludes.
    let stolen = lock
        .try_lock_for(&other, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(stolen.is_none(), "another owner took the outer hold");
    assert!(!outer.is_lease_lost());
    outer.unlock().await.unwrap();
}

#[tokio::test]
async fn a_partial_release_keeps_the_key_for_the_longest_fixed_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    for kind in KINDS.into_iter().filter(|k| k.reentrant()) {
        let name = format!("longest-{kind:?}");
        let long = kind.take(&c, &name, &me, fixed(60_000)).await.unwrap();
        let short = kind.take(&c, &name, &me, fixed(200)).await.unwrap();
        short.unlock().await.unwrap();
        let ttl = pttl(&server, &name);
        assert!(
            ttl > 30_000,
            "{kind:?}: TTL {ttl} after the short hold's release"
        );
        long.unlock().await.unwrap();
        assert_eq!(server.command(&["EXISTS", &name]), "0", "{kind:?}");
    }
}

/// Waits until the watchdog has renewed at least once since `scripts` (an `evalsha_calls`
/// reading): the client of `client()` renews every 300 ms, and nothing else runs scripts.
async fn a_renewal_ran(server: &RedisServer, scripts: u64) {
    scripts_reach(server, scripts + 1).await;
}

#[tokio::test]
async fn a_watchdog_hold_never_cuts_the_owners_longer_fixed_hold_short() {
    let server = RedisServer::start();
    let c = client(&server).await; // 900 ms watchdog lease, renewed every 300 ms
    let me = c.new_owner();
    for kind in KINDS.into_iter().filter(|k| k.reentrant()) {
        let name = format!("fixed-under-watchdog-{kind:?}");
        let long = kind.take(&c, &name, &me, fixed(60_000)).await.unwrap();
        let renewed = kind.take(&c, &name, &me, Lease::WATCHDOG).await.unwrap();
        let inner = kind.take(&c, &name, &me, Lease::WATCHDOG).await.unwrap();
        a_renewal_ran(&server, evalsha_calls(&server)).await;
        let ttl = pttl(&server, &name);
        assert!(ttl > 30_000, "{kind:?}: TTL {ttl} after a renewal");
        inner.unlock().await.unwrap();
        let ttl = pttl(&server, &name);
        assert!(
            ttl > 30_000,
            "{kind:?}: TTL {ttl} after a renewed hold's release"
        );
        renewed.unlock().await.unwrap();
        let ttl = pttl(&server, &name);
        assert!(
            ttl > 30_000,
            "{kind:?}: TTL {ttl} after the last renewed hold's release"
        );
        long.unlock().await.unwrap();
        assert_eq!(server.command(&["EXISTS", &name]), "0", "{kind:?}");
    }
}

#[tokio::test]
async fn a_renewed_reader_never_cuts_another_readers_longer_fixed_hold_short() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (long_owner, renewed_owner, writer) = (c.new_owner(), c.new_owner(), c.new_owner());
    let lock = c.read_write_lock("fixed-reader").unwrap();
    let long = lock
        .clone()
        .with_lease(fixed(60_000))
        .read(&long_owner)
        .await
        .unwrap();
    let renewed = lock.read(&renewed_owner).await.unwrap();
    a_renewal_ran(&server, evalsha_calls(&server)).await;
    let ttl = pttl(&server, "fixed-reader");
    assert!(ttl > 30_000, "TTL {ttl} after a renewal");
    renewed.unlock().await.unwrap();
    let ttl = pttl(&server, "fixed-reader");
    assert!(ttl > 30_000, "TTL {ttl} after the renewed reader's release");
    assert!(lock.try_write(&writer).await.unwrap().is_none());
    long.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "fixed-reader"]), "0");
}

#[tokio::test]
async fn releasing_write_holds_never_cuts_the_owners_longer_read_hold_short() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, writer) = (c.new_owner(), c.new_owner());
    let lock = c.read_write_lock("downgraded").unwrap();
    let outer = lock.write(&me).await.unwrap();
    let inner = lock.write(&me).await.unwrap();
    let read = lock
        .clone()
        .with_lease(fixed(60_000))
        .read(&me)
        .await
        .unwrap();
    a_renewal_ran(&server, evalsha_calls(&server)).await;
    let ttl = pttl(&server, "downgraded");
    assert!(ttl > 30_000, "TTL {ttl} after a renewal of the write hold");
    inner.unlock().await.unwrap();
    let ttl = pttl(&server, "downgraded");
    assert!(ttl > 30_000, "TTL {ttl} after a partial write release");
    outer.unlock().await.unwrap();
    let ttl = pttl(&server, "downgraded");
    assert!(ttl > 30_000, "TTL {ttl} after the last write release");
    assert!(lock.try_write(&writer).await.unwrap().is_none());
    read.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", "downgraded"]), "0");
}

#[tokio::test]
async fn an_unlock_by_owner_keeps_the_key_for_the_owners_other_holds() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.lock("by-owner").unwrap();
    held_for_a_minute(&lock, &me).await.detach();
    lock.lock(&me).await.unwrap().detach();
    // Ends the renewed hold (see `Lock::unlock`): the fixed one is left.
    lock.unlock(&me).await.unwrap();
    assert_eq!(lock.hold_count(&me).await.unwrap(), 1);
    let ttl = pttl(&server, "by-owner");
    assert!(ttl > 30_000, "TTL {ttl} after the renewed hold's release");
    lock.unlock(&me).await.unwrap();
    assert_eq!(server.command(&["EXISTS", "by-owner"]), "0");
}

/// Tasks sharing one owner re-enter each other's holds. Their acquire replies reach the
/// registry in any order, not the server's: a re-entry registered before the new hold it
/// re-entered must not make that new hold look like a replacement of a lost one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_an_owner_keep_their_holds_whatever_order_the_replies_arrive_in() {
    let server = RedisServer::start();
    let c = long_watchdog_client(&server).await;
    let lock = c.lock("shared-owner").unwrap();
    let owner = c.new_owner();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (lock, owner) = (lock.clone(), owner.clone());
            tokio::spawn(async move {
                for _ in 0..1_000 {
                    let guard = lock.lock(&owner).await.unwrap();
                    assert!(!guard.is_lease_lost(), "a live hold reported lost");
                    tokio::task::yield_now().await;
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(server.command(&["EXISTS", "shared-owner"]), "0");
    assert_eq!(c.renewed_holds(), 0);
}
