//! The `metrics` feature: a recorder installed for this process sees the counts of a known
//! run (one test, since the recorder is global).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use redisson_lock::Error;
use support::*;

/// A histogram's samples.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Keeps every metric by `name{label=value,...}` (labels sorted).
#[derive(Default)]
struct Recorded {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

fn id(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(id(key)).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        Gauge::from_arc(gauges.entry(id(key)).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(id(key)).or_default().clone())
    }
}

static RECORDED: OnceLock<&'static Recorded> = OnceLock::new();

fn recorded() -> &'static Recorded {
    RECORDED.get_or_init(|| {
        let recorded: &'static Recorded = Box::leak(Box::default());
        metrics::set_global_recorder(recorded).unwrap();
        recorded
    })
}

fn counter(name: &str) -> u64 {
    let counters = recorded().counters.lock().unwrap();
    counters.get(name).map_or(0, |c| c.load(Ordering::SeqCst))
}

fn gauge(name: &str) -> f64 {
    let gauges = recorded().gauges.lock().unwrap();
    gauges
        .get(name)
        .map_or(0.0, |g| f64::from_bits(g.load(Ordering::SeqCst)))
}

fn samples(name: &str) -> Vec<f64> {
    let histograms = recorded().histograms.lock().unwrap();
    histograms
        .get(name)
        .map_or(Vec::new(), |h| h.0.lock().unwrap().clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_run_is_counted() {
    recorded();
    let server = RedisServer::start();
    let client = client_with(&server, |b| b.hand_off(redisson_lock::HandOff::ON)).await;
    let lock = client.lock("metrics:lock").unwrap();
    let (a, b) = (client.new_owner(), client.new_owner());

    // Acquired, then busy, then a waiter that the release hands the lock to.
    let held = lock.lock(&a).await.unwrap();
    assert!(lock.try_lock(&b).await.unwrap().is_none());
    let calls = evalsha_calls(&server);
    let waiter = tokio::spawn({
        let (lock, b) = (lock.clone(), b.clone());
        async move { lock.lock(&b).await }
    });
    waiting(&server, &lock_channel("metrics:lock"), calls + 2).await;
    // The waiter's call began before this, and it is served only after the unlock below.
    let waiting_since = std::time::Instant::now();
    assert_eq!(gauge("redisson_lock_waiters{}"), 1.0);
    let blocked = waiting_since.elapsed().as_secs_f64();
    held.unlock().await.unwrap();
    let second = within(WAKE, "the waiter", waiter).await.unwrap().unwrap();
    assert_eq!(gauge("redisson_lock_waiters{}"), 0.0);
    assert_eq!(counter("redisson_lock_hand_offs_total{kind=lock}"), 1);

    // Renewed by the watchdog, then lost when the key goes.
    eventually(10 * SECOND, "a renewal", || {
        counter("redisson_lock_renewals_total{}") >= 1
    })
    .await;
    server.command(&["DEL", "metrics:lock"]);
    within(10 * SECOND, "the loss", second.lease_lost()).await;
    assert_eq!(counter("redisson_lock_leases_lost_total{reason=gone}"), 1);
    assert!(matches!(second.unlock().await, Err(Error::NotHeld { .. })));
    // The guard knew its hold was lost and sent nothing; an unlock without a guard does.
    assert!(matches!(lock.unlock(&a).await, Err(Error::NotHeld { .. })));

    // A fair lock, labelled by its kind.
    let fair = client.fair_lock("metrics:fair").unwrap();
    fair.lock(&a).await.unwrap().unlock().await.unwrap();

    assert_eq!(
        counter("redisson_lock_acquisitions_total{kind=lock,outcome=acquired}"),
        2
    );
    assert_eq!(
        counter("redisson_lock_acquisitions_total{kind=lock,outcome=busy}"),
        1
    );
    assert_eq!(
        counter("redisson_lock_acquisitions_total{kind=fair_lock,outcome=acquired}"),
        1
    );
    assert_eq!(
        counter("redisson_lock_unlock_errors_total{error=not_held,kind=lock}"),
        1
    );
    assert_eq!(
        samples("redisson_lock_wait_seconds{kind=lock,outcome=acquired}").len(),
        2
    );
    let waited = samples("redisson_lock_wait_seconds{kind=lock,outcome=acquired}");
    assert!(
        waited[1] >= blocked,
        "the woken waiter's wait counts its time blocked ({blocked} s): {waited:?}"
    );
    // Three guards gave up their holds: `held`, `second` (lost), and the fair one.
    assert_eq!(samples("redisson_lock_hold_seconds{kind=lock}").len(), 2);
    assert_eq!(
        samples("redisson_lock_hold_seconds{kind=fair_lock}").len(),
        1
    );
    assert_eq!(counter("redisson_lock_renewal_failures_total{}"), 0);
    assert_eq!(counter("redisson_lock_releases_resent_total{kind=lock}"), 0);

    // The synchronizers' acquisitions (a latch's: its waits), each labelled by its kind.
    let sem = client.semaphore("metrics:sem").unwrap();
    sem.try_set_permits(1).await.unwrap();
    assert!(sem.try_acquire_many(1).await.unwrap());
    assert!(!sem.try_acquire_many(1).await.unwrap());
    let expirable = client.permit_expirable_semaphore("metrics:pes").unwrap();
    expirable.try_set_permits(1).await.unwrap();
    let id = expirable.acquire(None).await.unwrap();
    expirable.release(id).await.unwrap();
    let latch = client.count_down_latch("metrics:latch").unwrap();
    latch.try_set_count(1).await.unwrap();
    assert!(!latch.wait_for(Duration::ZERO).await.unwrap());
    latch.count_down().await.unwrap();
    latch.wait().await.unwrap();
    for (kind, acquired, busy) in [
        ("semaphore", 1, 1),
        ("permit_expirable_semaphore", 1, 0),
        ("count_down_latch", 1, 1),
    ] {
        let outcome = |outcome| {
            counter(&format!(
                "redisson_lock_acquisitions_total{{kind={kind},outcome={outcome}}}"
            ))
        };
        assert_eq!(
            (outcome("acquired"), outcome("busy")),
            (acquired, busy),
            "{kind}"
        );
        let waits = samples(&format!(
            "redisson_lock_wait_seconds{{kind={kind},outcome=acquired}}"
        ));
        assert_eq!(waits.len() as u64, acquired, "{kind}");
    }
    client.shutdown().await;

    // A reconnect of the subscriber connection is counted, with the channels it took back.
    let server_client = long_watchdog_client(&server).await;
    let busy = server_client.lock("metrics:busy").unwrap();
    let holder = server_client.new_owner();
    let _held = busy.lock(&holder).await.unwrap();
    let waiting_owner = server_client.new_owner();
    let waiter = tokio::spawn({
        let busy = busy.clone();
        async move {
            busy.try_lock_for(&waiting_owner, Duration::from_secs(60))
                .await
        }
    });
    subscribed(&server, &lock_channel("metrics:busy")).await;
    server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    eventually(10 * SECOND, "a resubscription", || {
        counter("redisson_lock_pubsub_reconnects_total{}") >= 1
    })
    .await;
    assert!(counter("redisson_lock_pubsub_resubscriptions_total{}") >= 1);
    waiter.abort();
    server_client.shutdown().await;

    // A subscriber made for a command client without a reconnect policy has none either:
    // fred ends its connection task when the connection drops, and it is started again.
    assert_eq!(
        counter("redisson_lock_connection_restarts_total{connection=subscriber}"),
        0
    );
    let given = client_without_reconnect_policy(&server).await;
    let waiter = tokio::spawn({
        let busy = given.lock("metrics:busy").unwrap();
        let owner = given.new_owner();
        async move { busy.try_lock_for(&owner, Duration::from_secs(60)).await }
    });
    subscribed(&server, &lock_channel("metrics:busy")).await;
    server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    eventually(10 * SECOND, "the subscriber's task started again", || {
        counter("redisson_lock_connection_restarts_total{connection=subscriber}") >= 1
    })
    .await;
    waiter.abort();
    given.shutdown().await;
}
