//! Hand-offs: a last release gives the lock to a waiting task of its own client in the same
//! script, bounded so that other clients' waiters still get it, cancel-safe, and in
//! Redisson's layout throughout.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use redisson_lock::fred::interfaces::LuaInterface;
use redisson_lock::fred::types::Value;
use redisson_lock::kind::Kind;
use redisson_lock::{ExclusiveLock, HandOff, LockClient};
use support::proxy::{FaultProxy, Net};
use tokio::task::JoinHandle;

use super::*;

/// A client of `server` that hands locks over, with a 30 s watchdog (holds outlive the test
/// unless released), or a 900 ms one when `short_watchdog`.
pub(super) async fn handing_client(server: &RedisServer, short_watchdog: bool) -> LockClient {
    let watchdog = if short_watchdog {
        Duration::from_millis(900)
    } else {
        30 * SECOND
    };
    client_with(server, |b| {
        b.watchdog_timeout(watchdog).hand_off(HandOff::ON)
    })
    .await
}

/// The lock hash's fields with their counts, and its PTTL, read in one step.
pub(super) async fn layout(client: &LockClient, key: &str) -> (Vec<(String, i64)>, i64) {
    const READ: &str = "return {redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1])}";
    let reply: Value = client
        .redis()
        .eval(READ, vec![key], Vec::<String>::new())
        .await
        .unwrap();
    let Value::Array(mut parts) = reply else {
        panic!("unexpected reply {reply:?}")
    };
    let pttl = parts.pop().unwrap().as_i64().unwrap();
    let Value::Array(flat) = parts.pop().unwrap() else {
        panic!("no HGETALL array")
    };
    let fields = flat
        .chunks(2)
        .map(|pair| {
            let field = pair[0].as_string().unwrap();
            (field, pair[1].as_string().unwrap().parse().unwrap())
        })
        .collect();
    (fields, pttl)
}

/// Fewer unlock messages than half of `holds` since the server's count was `published`: most
/// holds were handed over.
pub(super) fn mostly_handed_over(server: &RedisServer, published: u64, holds: u64) {
    let messages = command_calls(server, "publish") - published;
    assert!(
        messages * 2 < holds,
        "most holds were handed over: {messages} unlock messages for {holds} holds"
    );
}

/// Tasks of one client, each its own owner, taking one lock and releasing it in a loop until
/// stopped. A task that takes the lock while another holds it fails the test.
pub(super) struct Contenders {
    stop: Arc<AtomicBool>,
    inside: Arc<AtomicU32>,
    holds: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Contenders {
    /// `tasks` tasks of `client` on `lock`; `on_hold` sees every hold while it is held.
    pub(super) fn start<K: Kind>(
        client: &LockClient,
        lock: &ExclusiveLock<K>,
        tasks: usize,
        on_hold: impl Fn(&LockGuard<K::Hold>) + Clone + Send + 'static,
    ) -> Contenders {
        let (stop, inside, holds) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let tasks = (0..tasks)
            .map(|_| {
                let (lock, me, on_hold) = (lock.clone(), client.new_owner(), on_hold.clone());
                let (stop, inside, holds) = (stop.clone(), inside.clone(), holds.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let guard = lock.lock(&me).await.unwrap();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                        on_hold(&guard);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        holds.fetch_add(1, Ordering::Relaxed);
                        guard.unlock().await.unwrap();
                    }
                })
            })
            .collect();
        Contenders {
            stop,
            inside,
            holds,
            tasks,
        }
    }

    /// How many holds the tasks took and released so far.
    pub(super) fn holds(&self) -> u64 {
        self.holds.load(Ordering::Relaxed)
    }

    /// Returns once the tasks took at least `holds` holds.
    pub(super) async fn reached(&self, holds: u64) {
        eventually(20 * SECOND, "the contending tasks' holds", || {
            self.holds() >= holds
        })
        .await;
    }

    /// Whether one of the tasks holds the lock now.
    pub(super) fn holding(&self) -> bool {
        self.inside.load(Ordering::SeqCst) > 0
    }

    /// Five times in a row, all within 5 s, a waiter of `other` takes `lock` (its client's
    /// handle of the contended lock) while the tasks go on, and holds it alone.
    pub(super) async fn outsider_served<K: Kind>(
        &self,
        other: &LockClient,
        lock: &ExclusiveLock<K>,
    ) {
        let served = async {
            for _ in 0..5 {
                let guard = lock.lock(&other.new_owner()).await;
                assert!(!self.holding(), "held by the outsider alone");
                guard.unwrap().unlock().await.unwrap();
            }
        };
        within(5 * SECOND, "the other client's waiters", served).await;
    }

    /// Stops the tasks and waits for them: the holds they took in all.
    pub(super) async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        all_finish(20 * SECOND, "the contending tasks", self.tasks).await;
        self.holds.load(Ordering::Relaxed)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_release_gives_the_lock_to_a_waiting_task_of_its_client_without_a_message() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.lock("heir").unwrap();
    // The heir's own lease, not the holder's, is what the key gets.
    let heir_lock = client.lock("heir").unwrap().with_lease(fixed(20_000));
    let (holder, heir) = (client.new_owner(), client.new_owner());
    let held = lock.lock(&holder).await.unwrap();
    let again = lock.lock(&holder).await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(heir_lock.lock(&heir));
    waiting(&server, &lock_channel("heir"), before + 2).await;

    // A partial release hands nothing over.
    again.unlock().await.unwrap();
    assert_eq!(layout(&client, "heir").await.0, [(holder.to_string(), 1)]);

    let (published, scripts) = (command_calls(&server, "publish"), evalsha_calls(&server));
    held.unlock().await.unwrap();
    let guard = within(10 * SECOND, "the heir", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        command_calls(&server, "publish"),
        published,
        "the lock was never free: nobody is told"
    );
    assert_eq!(
        evalsha_calls(&server),
        scripts + 1,
        "one script: the release that handed over"
    );
    // What Java reads: one owner field, count 1, the heir's lease as the TTL.
    let (fields, pttl) = layout(&client, "heir").await;
    assert_eq!(fields, [(heir.to_string(), 1)]);
    assert!((15_000..=20_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(lock.hold_count(&heir).await.unwrap(), 1);
    assert_eq!(lock.hold_count(&holder).await.unwrap(), 0);
    assert!(!guard.is_lease_lost());

    // Nobody waits now: the release frees the lock and publishes, as Redisson's.
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(command_calls(&server, "publish"), published + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_a_hold_handed_over_and_hand_off_off_frees_the_lock() {
    let server = RedisServer::start();
    let client = handing_client(&server, true).await;
    let lock = client.lock("renewed-heir").unwrap();
    let held = lock.lock(&client.new_owner()).await.unwrap();
    let heir = client.new_owner();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&heir));
    waiting(&server, &lock_channel("renewed-heir"), before + 2).await;
    held.unlock().await.unwrap();
    let guard = within(10 * SECOND, "the heir", waiter)
        .await
        .unwrap()
        .unwrap();
    // Not lost for three watchdog leases: renewed.
    let lost = tokio::time::timeout(Duration::from_millis(2700), guard.lease_lost()).await;
    assert!(lost.is_err(), "the hold handed over was lost");
    assert_eq!(lock.hold_count(&heir).await.unwrap(), 1);
    guard.unlock().await.unwrap();

    // With hand-offs off (the default), a release frees the lock and tells its waiters, as
    // Redisson's.
    let off = client_with(&server, |b| b.hand_off(HandOff::OFF)).await;
    let lock = off.lock("renewed-heir").unwrap();
    let held = lock.lock(&off.new_owner()).await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&off.new_owner()));
    waiting(&server, &lock_channel("renewed-heir"), before + 2).await;
    let published = command_calls(&server, "publish");
    held.unlock().await.unwrap();
    woken_and_released("the woken waiter", waiter).await;
    assert!(command_calls(&server, "publish") > published);
}

/// The release hands the lock over while the heir's call is dropped: the hold then belongs
/// to nobody's guard, so the client releases it at once instead of leaving it to its lease
/// (or renewing it for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_while_the_hand_off_is_on_the_wire_leaves_no_hold_behind() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port()).await;
    let client = proxied_handing_client(&proxy).await;
    let lock = client.lock("dropped-heir").unwrap();
    let (holder, heir) = (client.new_owner(), client.new_owner());
    let held = lock.lock(&holder).await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&heir));
    waiting(&server, &lock_channel("dropped-heir"), before + 2).await;
    heir_dropped_mid_hand_off(&server, &proxy, ("dropped-heir", held), &heir, waiter).await;
    // Freed long before the heir's 30 s lease could end, and not renewed.
    eventually(10 * SECOND, "the lock freed", || {
        server.command(&["EXISTS", "dropped-heir"]) == "0"
    })
    .await;
    let other = long_watchdog_client(&server).await;
    let guard = other
        .lock("dropped-heir")
        .unwrap()
        .try_lock(&other.new_owner());
    guard.await.unwrap().expect("free").unlock().await.unwrap();
}

/// A client of `proxy` that hands locks over, with 30 s leases, and a command timeout (20 s)
/// that replies slowed by the proxy stay within.
pub(super) async fn proxied_handing_client(proxy: &FaultProxy) -> LockClient {
    LockClient::builder()
        .url(&proxy.url())
        .watchdog_timeout(30 * SECOND)
        .command_timeout(20 * SECOND)
        .hand_off(HandOff::ON)
        .build()
        .await
        .unwrap()
}

/// Releases `held`, a hold of the lock `name`, while every byte through `proxy` takes a
/// second each way, and drops the call `waiter` of `heir` once the server has handed the lock
/// to it. Returns once the unlock has answered.
pub(super) async fn heir_dropped_mid_hand_off<T: std::fmt::Debug>(
    server: &RedisServer,
    proxy: &FaultProxy,
    (name, held): (&str, LockGuard),
    heir: &redisson_lock::LockOwner,
    waiter: JoinHandle<T>,
) {
    // The hand-off runs, and its reply is slow.
    proxy.set(Net::Slow {
        base: SECOND,
        jitter: Duration::ZERO,
    });
    let unlocking = tokio::spawn(held.unlock());
    let heir_field = heir.to_string();
    eventually(10 * SECOND, "the hand-off run on the server", || {
        server.command(&["HGET", name, &heir_field]) == "1"
    })
    .await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    proxy.set(Net::Clear);
    within(30 * SECOND, "the unlock", unlocking)
        .await
        .unwrap()
        .unwrap();
}

/// Sixteen tasks of one client hand the lock around; a waiter of another client still gets
/// it, since the lock is freed (and published) after at most 16 hand-offs in a row or 50 ms.
/// Throughout, exclusion holds and Java reads one owner with count 1 and the lease as TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_another_client_gets_a_lock_sixteen_local_tasks_hand_around() {
    let server = RedisServer::start();
    // 30 s leases: the other client's waiter is served by an unlock message, or not at all.
    let (busy, other) = (
        handing_client(&server, false).await,
        long_watchdog_client(&server).await,
    );
    let hot = busy.lock("hot").unwrap();
    let contenders = Contenders::start(&busy, &hot, 16, |_| {});
    contenders.reached(200).await;
    let (published, counted) = (command_calls(&server, "publish"), contenders.holds());

    for _ in 0..300 {
        let (fields, pttl) = layout(&other, "hot").await;
        match fields.as_slice() {
            [] => assert_eq!(pttl, -2, "no hash, no key"),
            [(_, count)] => {
                assert_eq!(*count, 1);
                assert!((1..=30_000).contains(&pttl), "PTTL {pttl}");
            }
            more => panic!("more than one owner: {more:?}"),
        }
    }

    // Each is served within a few runs of hand-offs (milliseconds), where tasks that asked
    // again at once would take every free moment.
    contenders
        .outsider_served(&other, &other.lock("hot").unwrap())
        .await;
    let handed = contenders.stop().await - counted;
    mostly_handed_over(&server, published, handed);
}

/// While tasks of the client wait for the lock, a new `lock()` goes to the back of their line
/// without an attempt of its own; a re-entry by the holder must not, or it would wait for
/// its own release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_is_never_queued_behind_the_waiting_tasks() {
    let server = RedisServer::start();
    let client = handing_client(&server, false).await;
    let lock = client.lock("re-entered").unwrap();
    let holder = client.new_owner();
    let held = lock.lock(&holder).await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = tokio::spawn(lock.lock(&client.new_owner()));
    waiting(&server, &lock_channel("re-entered"), before + 2).await;

    // Queued, it would find the lock held by itself at its first look, half a second later
    // (a waiter with nothing to wake it looks every 500 ms).
    let asked = Instant::now();
    let again = within(10 * SECOND, "the re-entry", lock.lock(&holder))
        .await
        .unwrap();
    assert!(
        asked.elapsed() < Duration::from_millis(400),
        "the re-entry waited {:?}",
        asked.elapsed()
    );
    assert_eq!(lock.hold_count(&holder).await.unwrap(), 2);
    again.unlock().await.unwrap();
    held.unlock().await.unwrap();
    woken_and_released("the waiter", waiter).await;
}
