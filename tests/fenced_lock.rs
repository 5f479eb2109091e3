//! The fenced lock (Redisson's `RFencedLock`, protocol §7): tokens that strictly increase
//! across acquisitions, owners, clients and a Redis restart; the token key and its
//! lifetime; the shared hold with the plain lock; and fencing at work against a holder
//! paused past its lease. Port of `RedissonFencedLockTest` (§11.8).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redisson_lock::{Error, FencedLock, Lease, LockClient, LockOwner};
use support::*;

/// §11.8 testTokenIncrease: lockAndGetToken → 1; unlock; → 2; unlock; lock then getToken
/// → 3; lock(10 s) then getToken → 4 (a re-entry); tryLockAndGetToken → 5 (a re-entry).
#[tokio::test]
async fn token_increase_redisson_sequence() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let me = c.new_owner();
    let lock = c.fenced_lock("fenced").unwrap();
    assert_eq!(
        lock.latest_token().await.unwrap(),
        0,
        "never taken: reads as 0"
    );

    let guard = lock.lock(&me).await.unwrap();
    assert_eq!(guard.token(), 1);
    guard.unlock().await.unwrap();
    let guard = lock.lock(&me).await.unwrap();
    assert_eq!(guard.token(), 2);
    guard.unlock().await.unwrap();

    let first = lock.lock(&me).await.unwrap();
    assert_eq!(lock.latest_token().await.unwrap(), 3);
    assert_eq!(first.token(), 3);
    let second = lock
        .clone()
        .with_lease(Lease::fixed(10 * SECOND).unwrap())
        .lock(&me)
        .await
        .unwrap();
    assert_eq!(lock.latest_token().await.unwrap(), 4);
    assert_eq!(second.token(), 4);
    let third = lock.try_lock(&me).await.unwrap().expect("re-enters");
    assert_eq!(third.token(), 5);
    assert_eq!(lock.hold_count(&me).await.unwrap(), 3);

    for guard in [third, second, first] {
        guard.unlock().await.unwrap();
    }
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(
        lock.latest_token().await.unwrap(),
        5,
        "unlocking takes no token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_across_owners_and_clients() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    // Tokens in the order the holds were taken: recorded while holding the lock.
    let seen = Arc::new(Mutex::new(Vec::new()));
    const TASKS: usize = 6;
    const ROUNDS: usize = 8;

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (client, seen) = (clients[t % 2].clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let owner = client.new_owner();
            let lock = client.fenced_lock("fenced-many").unwrap();
            for round in 0..ROUNDS {
                let guard = lock.lock(&owner).await.unwrap();
                seen.lock().unwrap().push(guard.token());
                if round % 2 == 0 {
                    // A re-entry takes a token of its own.
                    let inner = lock.try_lock_for(&owner, SECOND).await.unwrap().unwrap();
                    assert!(inner.token() > guard.token());
                    seen.lock().unwrap().push(inner.token());
                    inner.unlock().await.unwrap();
                }
                tokio::task::yield_now().await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    all_finish(Duration::from_secs(60), "all tasks", tasks).await;

    let seen = seen.lock().unwrap().clone();
    let expected: Vec<u64> = (1..=(TASKS * (ROUNDS + ROUNDS / 2)) as u64).collect();
    assert_eq!(
        seen, expected,
        "every acquisition got the next token, in order"
    );
    let last = *expected.last().unwrap();
    for c in &clients {
        assert_eq!(
            c.fenced_lock("fenced-many")
                .unwrap()
                .latest_token()
                .await
                .unwrap(),
            last
        );
    }
}

#[tokio::test]
async fn tokens_keep_growing_across_a_restart_with_persistence() {
    let mut server = RedisServer::start_with_persistence();
    let before = {
        let c = client(&server).await;
        let (lock, me) = (c.fenced_lock("durable").unwrap(), c.new_owner());
        for _ in 0..3 {
            lock.lock(&me).await.unwrap().unlock().await.unwrap();
        }
        let before = lock.latest_token().await.unwrap();
        c.shutdown().await;
        before
    };
    assert_eq!(before, 3);

    server.restart();
    let c = client(&server).await;
    let lock = c.fenced_lock("durable").unwrap();
    assert_eq!(lock.latest_token().await.unwrap(), before);
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    assert!(guard.token() > before, "{} after {before}", guard.token());
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn the_token_key_is_named_by_redisson_and_never_reset() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (me, other) = (c.new_owner(), c.new_owner());

    for (name, counter) in [
        ("orders", "redisson_lock_token:{orders}"),
        ("{user:7}:cart", "redisson_lock_token:{user:7}:cart"),
    ] {
        let lock = c.fenced_lock(name).unwrap();
        let guard = lock.lock(&me).await.unwrap();
        assert_eq!(server.command(&["GET", counter]), "1");
        assert_eq!(server.command(&["TTL", counter]), "-1", "no expiry");
        // The hold itself is the plain lock's: one field, count 1.
        assert_eq!(server.command(&["HGET", name, &me.to_string()]), "1");
        guard.unlock().await.unwrap();
        assert_eq!(server.command(&["GET", counter]), "1", "unlock keeps it");

        let guard = lock.lock(&other).await.unwrap();
        assert_eq!(guard.token(), 2);
        assert!(lock.force_unlock().await.unwrap());
        assert_eq!(
            server.command(&["GET", counter]),
            "2",
            "force-unlock keeps it"
        );
        assert!(!lock.force_unlock().await.unwrap());
        assert_eq!(lock.latest_token().await.unwrap(), 2);
        // The evicted guard's unlock fails and leaves the counter alone too.
        assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
        assert_eq!(server.command(&["GET", counter]), "2");
    }

    // With a name prefix, the counter is derived from the prefixed name.
    let prefixed = client_with(&server, |b| b.name_prefix("app1:")).await;
    let guard = prefixed
        .fenced_lock("orders")
        .unwrap()
        .lock(&prefixed.new_owner())
        .await
        .unwrap();
    assert_eq!(guard.token(), 1);
    assert_eq!(
        server.command(&["GET", "redisson_lock_token:{app1:orders}"]),
        "1"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_fenced_hold_and_a_plain_hold_exclude_each_other() {
    let server = RedisServer::start();
    // A 30 s lease, renewed every 10 s: only the unlock message wakes the waiter in time, and
    // the server's script count is the waiter's attempts.
    let c = long_watchdog_client(&server).await;
    let (a, b) = (c.new_owner(), c.new_owner());
    let fenced = c.fenced_lock("shared-hash").unwrap();
    let plain = c.lock("shared-hash").unwrap();

    let guard = fenced.lock(&a).await.unwrap();
    assert!(plain.is_held_by(&a).await.unwrap());
    assert!(plain.try_lock(&b).await.unwrap().is_none());
    // A plain waiter is woken by the fenced unlock: the same channel.
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(plain.lock(&b));
    waiting(&server, &lock_channel("shared-hash"), before + 2).await;
    guard.unlock().await.unwrap();
    let plain_guard = within(WAKE, "plain waiter", waiter).await.unwrap().unwrap();

    assert!(fenced.try_lock(&a).await.unwrap().is_none());
    assert!(fenced.is_locked().await.unwrap());
    assert_eq!(
        fenced.latest_token().await.unwrap(),
        1,
        "a refused attempt takes no token"
    );
    plain_guard.unlock().await.unwrap();
    let guard = fenced.try_lock(&a).await.unwrap().expect("free again");
    assert_eq!(guard.token(), 2);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_waiting_fenced_lock_times_out_and_is_cancel_safe() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (a, b) = (c.new_owner(), c.new_owner());
    let lock = c.fenced_lock("fenced-wait").unwrap();
    let guard = lock.lock(&a).await.unwrap();
    assert!(lock
        .try_lock_for(&b, Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert!(
        tokio::time::timeout(Duration::from_millis(200), lock.lock(&b))
            .await
            .is_err()
    );
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.latest_token().await.unwrap(), 1);
}

/// The protected resource of the worked example in `FencedLock`'s documentation: it keeps
/// the highest token it has accepted and rejects writes carrying a lower one.
#[derive(Default)]
struct Storage {
    highest_token: u64,
    writes: Vec<(u64, &'static str)>,
}

impl Storage {
    fn write(&mut self, token: u64, contents: &'static str) -> Result<(), String> {
        if token < self.highest_token {
            return Err(format!("stale token {token} < {}", self.highest_token));
        }
        self.highest_token = token;
        self.writes.push((token, contents));
        Ok(())
    }
}

#[tokio::test]
async fn fencing_rejects_the_late_write_of_a_holder_paused_past_its_lease() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let storage = Arc::new(Mutex::new(Storage::default()));
    let lease = Duration::from_millis(300);

    // The first holder takes the lock with a short fixed lease, then "pauses" (a GC
    // pause, a stalled VM) for longer than the lease before it writes.
    let slow = c
        .fenced_lock("fenced-resource")
        .unwrap()
        .with_lease(Lease::fixed(lease).unwrap());
    let slow_owner = c.new_owner();
    let slow_guard = slow.lock(&slow_owner).await.unwrap();
    let slow_token = slow_guard.token();

    // The second holder waits, gets the lock when the first lease runs out, and writes.
    let fast = c.fenced_lock("fenced-resource").unwrap();
    let fast_owner: LockOwner = c.new_owner();
    let fast_guard = within(5 * SECOND, "second holder", fast.lock(&fast_owner))
        .await
        .unwrap();
    assert!(fast_guard.token() > slow_token);
    storage
        .lock()
        .unwrap()
        .write(fast_guard.token(), "from the second holder")
        .unwrap();

    // The first holder wakes up still believing it holds the lock; its write is refused.
    assert!(slow_guard.is_lease_lost());
    let late = storage.lock().unwrap().write(slow_token, "late write");
    assert!(late.is_err(), "a stale token must be rejected");
    assert_eq!(
        storage.lock().unwrap().writes,
        [(fast_guard.token(), "from the second holder")]
    );
    assert!(matches!(
        slow_guard.unlock().await,
        Err(Error::NotHeld { .. })
    ));

    // The current holder may write again under the same token.
    storage
        .lock()
        .unwrap()
        .write(fast_guard.token(), "again")
        .unwrap();
    fast_guard.unlock().await.unwrap();
}

#[tokio::test]
async fn handles_report_their_settings() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock: FencedLock = c.fenced_lock("fenced-debug").unwrap();
    assert_eq!(lock.name(), "fenced-debug");
    assert_eq!(lock.lease(), Lease::WATCHDOG);
    assert!(format!("{lock:?}").contains("fenced-debug"));
    let guard = lock.lock(&c.new_owner()).await.unwrap();
    assert_eq!(guard.name(), "fenced-debug");
    assert!(!guard.is_lease_lost());
    assert!(format!("{guard:?}").contains("token: 1"));
    // Detached holds are released through the handle, Java style.
    let owner = guard.owner().clone();
    guard.detach();
    assert!(lock.is_held_by(&owner).await.unwrap());
    lock.unlock(&owner).await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

/// Run by `tokens_strictly_increase_across_processes` in a child process: takes 20 fenced
/// holds one after the other and prints each token.
#[tokio::test]
#[ignore = "a child process of another test"]
async fn token_taker_process() {
    let Ok(url) = std::env::var("REDISSON_LOCK_TOKEN_URL") else {
        return;
    };
    let client = LockClient::connect(&url).await.unwrap();
    let lock = client.fenced_lock("cross-process").unwrap();
    let me = client.new_owner();
    for _ in 0..20 {
        let guard = lock.lock(&me).await.unwrap();
        println!("TOKEN {}", guard.token());
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_across_processes() {
    use std::io::{BufRead, BufReader};

    let server = RedisServer::start();
    let child = spawn_test_process("token_taker_process", "REDISSON_LOCK_TOKEN_URL", &server);
    // This process takes its own 20 holds while the child takes its 20.
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client.fenced_lock("cross-process").unwrap();
    let me = client.new_owner();
    let mut ours = Vec::new();
    for _ in 0..20 {
        let guard = lock.lock(&me).await.unwrap();
        ours.push(guard.token());
        guard.unlock().await.unwrap();
    }
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(output.status.success());
    let theirs: Vec<u64> = BufReader::new(&output.stdout[..])
        .lines()
        .filter_map(|line| {
            line.ok()?
                .split_once("TOKEN ")
                .map(|(_, t)| t.trim().parse().unwrap())
        })
        .collect();
    assert_eq!(theirs.len(), 20, "the child took 20 holds");
    for tokens in [&ours, &theirs] {
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "each process sees increasing tokens: {tokens:?}"
        );
    }
    // Every acquisition anywhere took the next number exactly once.
    let mut all: Vec<u64> = ours.iter().chain(&theirs).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=40).collect::<Vec<u64>>());
}
