//! The synchronizers worked while faults play (the load-and-faults run's, a test's
//! failovers): a semaphore, a permit-expirable semaphore and count-down latches, worked by
//! tasks of a process that is not killed (a plain semaphore's permits die with a killed
//! holder, by Redisson's protocol). What must hold: never more holders than permits; every
//! release and count-down made (none fails); every waiter of a latch counted down to 0
//! opens; and at the end each semaphore has exactly the permits it started with.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redisson_lock::LockClient;
use tokio::task::JoinSet;

/// The permits of each semaphore.
const PERMITS: i64 = 3;
/// A permit-expirable semaphore's lease: longer than any fault of the schedule.
const LEASE: Duration = Duration::from_secs(10);
/// How long a latch's waiters may take to open after its last count-down.
const OPENS_WITHIN: Duration = Duration::from_secs(30);

/// The synchronizers' tasks, running until the run's end.
pub struct Synchronizers {
    tasks: JoinSet<()>,
    counts: Arc<Counts>,
    /// The semaphores' names.
    semaphore: String,
    expirable: String,
}

#[derive(Default)]
struct Counts {
    violations: Mutex<Vec<String>>,
    semaphore_rounds: AtomicU64,
    expirable_rounds: AtomicU64,
    latches_opened: AtomicU64,
    errors: AtomicU64,
}

impl Counts {
    fn violation(&self, violation: String) {
        self.violations.lock().unwrap().push(violation);
    }
}

impl Synchronizers {
    /// Sets both semaphores' permits and starts the tasks on `client` until `until`; every
    /// name starts with `prefix`.
    pub async fn start(client: &LockClient, prefix: &str, until: Instant) -> Synchronizers {
        let names = (format!("{prefix}sem"), format!("{prefix}expirable"));
        let semaphore = client.semaphore(&names.0).unwrap();
        let expirable = client.permit_expirable_semaphore(&names.1).unwrap();
        semaphore
            .try_set_permits(PERMITS as u32)
            .await
            .expect("set the semaphore");
        expirable
            .try_set_permits(PERMITS as u32)
            .await
            .expect("set the permits");
        let counts = Arc::new(Counts::default());
        let mut tasks = JoinSet::new();
        let holders = Arc::new(AtomicI64::new(0));
        for _ in 0..3 {
            let (semaphore, counts, holders) = (semaphore.clone(), counts.clone(), holders.clone());
            let name = names.0.clone();
            tasks.spawn(async move {
                while Instant::now() < until {
                    match semaphore
                        .try_acquire_many_for(1, Duration::from_secs(1))
                        .await
                    {
                        Ok(true) => {
                            held(&holders, &counts, &name).await;
                            match semaphore.release(1).await {
                                Ok(()) => counts.semaphore_rounds.fetch_add(1, Ordering::Relaxed),
                                Err(error) => {
                                    counts
                                        .violation(format!("a semaphore release failed: {error}"));
                                    return;
                                }
                            };
                        }
                        Ok(false) => {}
                        // Undone in the background.
                        Err(_) => pause(&counts).await,
                    }
                }
            });
        }
        let expirable_holders = Arc::new(AtomicI64::new(0));
        for _ in 0..2 {
            let (expirable, counts) = (expirable.clone(), counts.clone());
            let holders = expirable_holders.clone();
            let name = names.1.clone();
            tasks.spawn(async move {
                while Instant::now() < until {
                    let wait = Duration::from_secs(1);
                    match expirable.try_acquire_guard_for(1, wait, Some(LEASE)).await {
                        Ok(Some(permit)) => {
                            held(&holders, &counts, &name).await;
                            match permit.release().await {
                                Ok(_) => counts.expirable_rounds.fetch_add(1, Ordering::Relaxed),
                                // A lone release is sent once: its lease brings it back.
                                Err(_) => counts.errors.fetch_add(1, Ordering::Relaxed),
                            };
                        }
                        Ok(None) => {}
                        Err(_) => pause(&counts).await,
                    }
                }
            });
        }
        let (latches, counts_for_latches) = (client.clone(), counts.clone());
        let latch = format!("{prefix}latch");
        tasks
            .spawn(async move { latch_rounds(&latches, &latch, &counts_for_latches, until).await });
        Synchronizers {
            tasks,
            counts,
            semaphore: names.0,
            expirable: names.1,
        }
    }

    /// Waits for the tasks, then checks that each semaphore came back to its permits (an
    /// acquisition undone in the background, an expired lease, may take a while). The
    /// violations, and a line for the report.
    pub async fn finish(mut self, observer: &LockClient) -> (Vec<String>, String) {
        while self.tasks.join_next().await.is_some() {}
        let counts = &self.counts;
        let semaphore = observer.semaphore(&self.semaphore).unwrap();
        let expirable = observer
            .permit_expirable_semaphore(&self.expirable)
            .unwrap();
        let limit = Instant::now() + LEASE + Duration::from_secs(20);
        let (mut free, mut expirable_free) = (None, None);
        while Instant::now() < limit {
            free = semaphore.available_permits().await.ok();
            expirable_free = expirable.available_permits().await.ok();
            if free == Some(PERMITS) && expirable_free == Some(PERMITS) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if free != Some(PERMITS) {
            counts.violation(format!(
                "the semaphore ended with {free:?} free permits of {PERMITS}, none held"
            ));
        }
        if expirable_free != Some(PERMITS) {
            counts.violation(format!(
                "the permit-expirable semaphore ended with {expirable_free:?} free permits of \
                 {PERMITS}, none held"
            ));
        }
        let line = format!(
            "synchronizers      semaphore {} acquire+release, permit-expirable {}, latches \
             opened {}; calls failed and tried again {}",
            counts.semaphore_rounds.load(Ordering::Relaxed),
            counts.expirable_rounds.load(Ordering::Relaxed),
            counts.latches_opened.load(Ordering::Relaxed),
            counts.errors.load(Ordering::Relaxed)
        );
        let violations = std::mem::take(&mut *counts.violations.lock().unwrap());
        (violations, line)
    }
}

/// One holder of `name` for a moment: never more than its permits at once.
async fn held(holders: &AtomicI64, counts: &Counts, name: &str) {
    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
    if now > PERMITS {
        counts.violation(format!("{now} holders of {name}'s {PERMITS} permits"));
    }
    tokio::time::sleep(Duration::from_millis(3)).await;
    holders.fetch_sub(1, Ordering::SeqCst);
}

async fn pause(counts: &Counts) {
    counts.errors.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Latches one after another: each set to 2, two waiters of its own, two count-downs; both
/// waiters must open.
async fn latch_rounds(client: &LockClient, prefix: &str, counts: &Counts, until: Instant) {
    let mut round = 0;
    while Instant::now() < until {
        round += 1;
        let name = format!("{prefix}:{round}");
        let latch = client.count_down_latch(&name).unwrap();
        // A set is sent once: one that may not have happened is given up for a new latch.
        match latch.try_set_count(2).await {
            Ok(true) => {}
            _ => {
                pause(counts).await;
                continue;
            }
        }
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let latch = client.count_down_latch(&name).unwrap();
                tokio::spawn(async move {
                    loop {
                        match latch.wait_for(OPENS_WITHIN).await {
                            // A first look that met a fault fails at once: look again.
                            Err(error) if error.is_retryable() => {
                                tokio::time::sleep(Duration::from_millis(50)).await
                            }
                            opened => return opened,
                        }
                    }
                })
            })
            .collect();
        for _ in 0..2 {
            if let Err(error) = latch.count_down().await {
                counts.violation(format!("a count-down of {name} failed: {error}"));
            }
        }
        for waiter in waiters {
            match waiter.await.unwrap() {
                Ok(true) => {
                    counts.latches_opened.fetch_add(1, Ordering::Relaxed);
                }
                other => counts.violation(format!(
                    "a waiter of {name}, counted down to 0, did not open: {other:?}"
                )),
            }
        }
    }
}
