//! A hold behind Sentinel through failovers, by every way a client names the deployment:
//! a URL with and without a database, the builder's `sentinel` with and without
//! `database`, and a fred `Config` with a database. Planned failovers (`SENTINEL
//! FAILOVER`), a killed master and a paused one, on a master with one replica and on one
//! with two.
//!
//! Each round: client A holds a lock (3 s watchdog lease) and a second one that another of
//! its owners waits for; client B tries the first lock all along. The Sentinels fail the
//! master over. A second owner never takes a lock while its holder's guard says it holds
//! it: A's hold lives on through the failover (or its guard says it was lost before B
//! takes the lock); A's connections are on the new master soon after the Sentinels name
//! it, whatever the old one still answers; and B, waiting, gets the lock soon after A
//! releases it.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisson_lock::LockClient;
use support::topology::{SentinelSetup, SERVICE};
use support::*;

/// The holder's watchdog lease: renewed every second, so the copy of its hold that a
/// promoted replica has lives 2 s or more after the promotion.
const LEASE: Duration = Duration::from_secs(3);

/// How a client names the deployment.
#[derive(Clone, Copy, Debug)]
enum Form {
    Url,
    UrlWithDatabase(u8),
    Builder,
    BuilderWithDatabase(u8),
    ConfigWithDatabase(u8),
}

impl Form {
    fn database(self) -> u8 {
        match self {
            Form::Url | Form::Builder => 0,
            Form::UrlWithDatabase(db)
            | Form::BuilderWithDatabase(db)
            | Form::ConfigWithDatabase(db) => db,
        }
    }

    async fn client(self, setup: &SentinelSetup) -> LockClient {
        let sentinels: Vec<(String, u16)> = (setup.sentinels.iter())
            .map(|s| ("127.0.0.1".to_string(), s.port()))
            .collect();
        let builder = match self {
            Form::Url => LockClient::builder().url(&setup.url()),
            Form::UrlWithDatabase(db) => {
                let url = setup.url().replacen('?', &format!("/{db}?"), 1);
                LockClient::builder().url(&url)
            }
            Form::Builder => LockClient::builder().sentinel(SERVICE, sentinels),
            Form::BuilderWithDatabase(db) => LockClient::builder()
                .sentinel(SERVICE, sentinels)
                .database(db),
            Form::ConfigWithDatabase(db) => {
                let hosts = sentinels.into_iter().collect();
                let config = fred::prelude::Config {
                    server: fred::types::config::ServerConfig::new_sentinel(hosts, SERVICE),
                    database: Some(db),
                    ..Default::default()
                };
                LockClient::builder().config(config)
            }
        };
        builder
            .watchdog_timeout(LEASE)
            .command_timeout(Duration::from_secs(3))
            .build()
            .await
            .unwrap_or_else(|e| panic!("{self:?}: {e}"))
    }
}

/// How the master is failed over.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `SENTINEL FAILOVER`: the old master stays up and writable until the Sentinels demote
    /// it, about ten seconds later.
    Planned,
    /// SIGKILL, then started again (empty) once the replica was promoted.
    Killed,
    /// SIGSTOP until the replica was promoted, then SIGCONT.
    Paused,
}

/// When the Sentinels named the new master, and when A's connections were on it.
#[derive(Default, Debug)]
struct Moves {
    first_named: Option<Instant>,
    all_named: Option<Instant>,
    new_master: Option<u16>,
    commands_on_it: Option<Instant>,
    subscriber_on_it: Option<Instant>,
}

/// `key`'s TTL in ms in database `db` of `server` (a script may SELECT for itself).
fn pttl_in(server: &RedisServer, db: u8, key: &str) -> i64 {
    let script = "redis.call('select', ARGV[1]) return redis.call('pttl', KEYS[1])";
    let reply = server.try_command(&["EVAL", script, "1", key, &db.to_string()]);
    reply.ok().and_then(|r| r.parse().ok()).unwrap_or(-3)
}

/// Follows the failover from outside, every 20 ms, in a thread of its own: which master
/// the Sentinels name, and when client `client` has its command connection (by its name)
/// and its subscriber (subscribed to `channel`) on it.
fn follow(
    setup: &SentinelSetup,
    old: u16,
    client: uuid::Uuid,
    channel: String,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Moves> {
    let sentinels: Vec<u16> = setup.sentinels.iter().map(RedisServer::port).collect();
    let ports: Vec<u16> = setup.servers().iter().map(|s| s.port()).collect();
    let name = format!("name=redisson-lock:{}", client.hyphenated());
    std::thread::spawn(move || {
        let ask = |port: u16, args: &[&str]| support::server::raw_command(port, args).ok();
        let mut moves = Moves::default();
        let started = Instant::now();
        while !done.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
            let named: Vec<Option<u16>> = (sentinels.iter())
                .map(|s| {
                    let reply = ask(*s, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])?;
                    reply.lines().nth(1)?.parse().ok()
                })
                .collect();
            let now = Instant::now();
            let other = |n: &Option<u16>| n.is_some_and(|p| p != old && ports.contains(&p));
            if moves.first_named.is_none() && named.iter().any(other) {
                moves.first_named = Some(now);
            }
            if moves.all_named.is_none()
                && named.iter().all(other)
                && named.iter().all(|n| *n == named[0])
            {
                moves.all_named = Some(now);
                moves.new_master = named[0];
            }
            if let Some(new) = named.iter().flatten().copied().find(|p| *p != old) {
                let clients = ask(new, &["CLIENT", "LIST"]).unwrap_or_default();
                if moves.commands_on_it.is_none() && clients.contains(&name) {
                    moves.commands_on_it = Some(now);
                }
                let listeners = ask(new, &["PUBSUB", "NUMSUB", &channel]).unwrap_or_default();
                let listening = listeners.lines().nth(1).is_some_and(|n| n != "0");
                if moves.subscriber_on_it.is_none() && listening {
                    moves.subscriber_on_it = Some(now);
                }
            }
            let moved = moves.commands_on_it.is_some() && moves.subscriber_on_it.is_some();
            if moved && moves.all_named.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        moves
    })
}

/// What one round saw.
struct Round {
    /// A's hold lasted through the failover: its guard never reported it lost and its
    /// unlock succeeded.
    survived: bool,
    moves: Moves,
    /// From A's release to B's acquisition.
    handed_over: Duration,
}

/// One round (see the module docs) on `setup` with a client named by `form`.
async fn round(setup: &mut SentinelSetup, form: Form, fault: Fault, n: usize) -> Round {
    let what = format!("round {n} ({form:?}, {fault:?})");
    let db = form.database();
    let (holding, trying) = (form.client(setup).await, form.client(setup).await);
    let name = format!("failover-{n}");
    let side = format!("failover-side-{n}");
    let guard = holding
        .lock(&name)
        .unwrap()
        .lock(&holding.new_owner())
        .await;
    let guard = guard.unwrap();
    // When A's guard said its hold was lost, if it did.
    let lost_at = tokio::spawn({
        let lost = guard.lease_lost();
        async move {
            lost.await;
            Instant::now()
        }
    });
    let old = setup.master_port();
    // A waiter of the holding client, so that its subscriber listens.
    let side_guard = (holding.lock(&side).unwrap())
        .lock(&holding.new_owner())
        .await
        .unwrap();
    let side_waiter = tokio::spawn({
        let (lock, owner) = (holding.lock(&side).unwrap(), holding.new_owner());
        async move { lock.lock(&owner).await }
    });
    subscribed(setup.server(old), &lock_channel(&side)).await;

    // B tries all along; when it takes the lock, the time the answer came.
    let released = Arc::new(AtomicBool::new(false));
    let taken: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let contending = tokio::spawn({
        let (released, taken) = (released.clone(), taken.clone());
        let (lock, owner) = (trying.lock(&name).unwrap(), trying.new_owner());
        async move {
            loop {
                // Refused or failed while the deployment changes: tried again.
                let released_before = released.load(Ordering::SeqCst);
                if let Ok(Some(second)) = lock.try_lock_for(&owner, SECOND / 2).await {
                    taken.lock().unwrap().push(Instant::now());
                    let _ = second.unlock().await;
                    if released_before {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    tokio::time::sleep(SECOND).await;

    let done = Arc::new(AtomicBool::new(false));
    let following = follow(setup, old, holding.id(), lock_channel(&side), done.clone());
    let new = tokio::task::block_in_place(|| fail_over(setup, old, fault));
    tokio::task::block_in_place(|| setup.wait_demoted(setup.server(old)));
    // The hold outlives a lease on the new master after the demotion.
    tokio::time::sleep(LEASE + SECOND).await;
    let held_at_the_end = pttl_in(setup.server(new), db, &name) > 0;
    let lost = guard.is_lease_lost();
    let released_at = Instant::now();
    released.store(true, Ordering::SeqCst);
    let unlocked = guard.unlock().await;
    let waited = format!("{what}: B's acquisition");
    within(20 * SECOND, &waited, contending).await.unwrap();
    done.store(true, Ordering::Relaxed);
    let moves = following.join().unwrap();

    // A's guard said it held the lock until it was lost or released.
    let said_held_until = match lost_at.is_finished() {
        true => lost_at.await.unwrap().min(released_at),
        false => {
            lost_at.abort();
            released_at
        }
    };
    let taken = taken.lock().unwrap().clone();
    let overlaps = taken.iter().filter(|at| **at < said_held_until).count();
    assert_eq!(
        overlaps,
        0,
        "{what}: B took the lock {overlaps} times while A's guard said A held it \
         (taken {} times in all)",
        taken.len()
    );
    let survived = !lost && unlocked.is_ok();
    if survived {
        assert!(held_at_the_end, "{what}: the hold is not on the new master");
    } else {
        assert!(
            lost,
            "{what}: the unlock failed though the guard never said it was lost: {unlocked:?}"
        );
    }
    let handed_over = taken.last().unwrap().saturating_duration_since(released_at);
    // A's side lock and its waiter.
    drop(side_guard);
    let side = within(
        20 * SECOND,
        &format!("{what}: the side waiter"),
        side_waiter,
    )
    .await;
    side.unwrap().unwrap().unlock().await.unwrap();
    holding.shutdown().await;
    trying.shutdown().await;
    Round {
        survived,
        moves,
        handed_over,
    }
}

/// Fails the master `old` over by `fault`; returns the new master's port once every
/// Sentinel names it.
fn fail_over(setup: &mut SentinelSetup, old: u16, fault: Fault) -> u16 {
    let promoted = |setup: &SentinelSetup| {
        let live: Vec<&RedisServer> = setup.sentinels.iter().collect();
        setup.await_new_master(setup.server(old), &live).port()
    };
    match fault {
        Fault::Planned => {
            let (_, new) = setup.begin_failover(None);
            new.port()
        }
        Fault::Killed => {
            setup.server_mut(old).kill();
            let new = promoted(setup);
            setup.server_mut(old).restart();
            new
        }
        Fault::Paused => {
            setup.server(old).signal("STOP");
            let new = promoted(setup);
            setup.server(old).signal("CONT");
            new
        }
    }
}

/// Runs `rounds` on a master with `replicas` replicas and prints what they measured.
async fn rounds(replicas: usize, rounds: &[(Form, Fault)]) {
    let mut setup = SentinelSetup::start_with_replicas(replicas);
    let mut report = Vec::new();
    for (n, (form, fault)) in rounds.iter().enumerate() {
        let seen = round(&mut setup, *form, *fault, n).await;
        let ms = |from: Option<Instant>, to: Option<Instant>| match (from, to) {
            (Some(from), Some(to)) => format!(
                "{:.0}",
                to.saturating_duration_since(from).as_secs_f64() * 1e3
            ),
            _ => "?".into(),
        };
        let moves = &seen.moves;
        eprintln!(
            "1+{replicas} round {n} {form:?} {fault:?}: hold {}; from the first Sentinel naming \
             the new master, commands on it after {} ms, subscriber after {} ms; from all \
             naming it, {} ms and {} ms; B took the lock {} ms after A's release",
            if seen.survived {
                "survived"
            } else {
                "reported lost"
            },
            ms(moves.first_named, moves.commands_on_it),
            ms(moves.first_named, moves.subscriber_on_it),
            ms(moves.all_named, moves.commands_on_it),
            ms(moves.all_named, moves.subscriber_on_it),
            seen.handed_over.as_millis()
        );
        // Generous for a loaded machine: a client that waited for the old master's
        // demotion would take 8 s or more.
        let limit = Duration::from_secs(5);
        for (what, at) in [
            ("commands", moves.commands_on_it),
            ("subscriber", moves.subscriber_on_it),
        ] {
            let named = moves
                .all_named
                .expect("the Sentinels never named a new master");
            let at = at.unwrap_or_else(|| panic!("round {n}: A's {what} never on the new master"));
            assert!(
                at.saturating_duration_since(named) < limit,
                "round {n} ({form:?}, {fault:?}): A's {what} on the new master {:?} after the \
                 Sentinels named it",
                at - named
            );
        }
        assert!(
            seen.handed_over < limit,
            "round {n}: B took the lock {:?} after A's release",
            seen.handed_over
        );
        report.push(seen);
    }
    let survived = report.iter().filter(|r| r.survived).count();
    eprintln!(
        "1+{replicas}: {survived} of {} holds survived",
        report.len()
    );
}

const FORMS: [Form; 6] = [
    Form::UrlWithDatabase(0),
    Form::Url,
    Form::BuilderWithDatabase(3),
    Form::UrlWithDatabase(3),
    Form::Builder,
    Form::ConfigWithDatabase(0),
];

/// Ten rounds: every form with a planned failover, then a killed and a paused master.
fn schedule(shift: usize) -> Vec<(Form, Fault)> {
    (0..10)
        .map(|n| {
            let fault = match n {
                7 => Fault::Killed,
                9 => Fault::Paused,
                _ => Fault::Planned,
            };
            (FORMS[(n + shift) % FORMS.len()], fault)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_follows_failovers_of_a_master_with_one_replica() {
    rounds(1, &schedule(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_follows_failovers_of_a_master_with_two_replicas() {
    rounds(2, &schedule(3)).await;
}
