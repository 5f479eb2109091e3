//! Processes: holders killed at random points and stopped past their lease.

use super::*;

/// The wait of the workload of processes killed at random: every waiter a kill leaves in a
/// fair queue holds up those behind it for its wait, and each kill leaves up to `TASKS`.
const KILLED_WAIT: Duration = Duration::from_millis(500);

/// Run by `holders_killed_at_random_points_leave_no_hold_and_lose_no_update` in child
/// processes: the workload on every kind of lock, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of another test"]
async fn workload_process() {
    let (Ok(url), Ok(prefix)) = (std::env::var("FAULTS_URL"), std::env::var("FAULTS_PREFIX"))
    else {
        return;
    };
    let client = workload_client_waiting(&url, KILLED_WAIT).await;
    let workload = Arc::new(Workload::new(&prefix, KILLED_WAIT, SLACK));
    let forever = Instant::now() + Duration::from_secs(3600);
    let tally = Arc::new(Tally::default());
    for task in 0..TASKS {
        let work = workload
            .clone()
            .task(client.clone(), task, forever, tally.clone());
        tokio::spawn(work);
    }
    println!("READY");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_killed_at_random_points_leave_no_hold_and_lose_no_update() {
    let server = RedisServer::start();
    let workload = Arc::new(Workload::new("killed", KILLED_WAIT, SLACK));
    let client = workload_client_waiting(&server.url(), KILLED_WAIT).await;
    let run = Duration::from_secs(6);
    let until = Instant::now() + run;
    // While this process works on the locks, child processes do too, each SIGKILLed at a
    // random point: holding, waiting, queued, acquiring or releasing.
    let kills = async {
        let mut kills = 0;
        while Instant::now() + Duration::from_secs(1) < until {
            let env = [("FAULTS_URL", &*server.url()), ("FAULTS_PREFIX", "killed")];
            let mut child = TestProcess::spawn("processes::workload_process", &env);
            child.expect("READY").await;
            tokio::time::sleep(Duration::from_millis(100) + spread(kills, 700_000)).await;
            child.kill();
            kills += 1;
        }
        assert!(kills >= 2, "only {kills} children were killed");
    };
    storm(&server, &workload, &[client], run, kills).await;
}

/// A write of `value` to a fenced lock's resource with `token`.
fn fenced(value: &str, token: Option<u64>) -> Write<'_> {
    Write {
        value,
        token,
        field: "",
        id: "",
    }
}

/// Run by `a_holder_stopped_past_its_lease_knows_it_lost_on_waking_and_its_late_write_is_refused`
/// in a child process: holds a fenced lock and writes to its resource with the token every
/// 10 ms, as long as its guard claims the hold; then makes one late write anyway.
#[tokio::test]
#[ignore = "a child process of another test"]
async fn stopped_holder_process() {
    let Ok(url) = std::env::var("FAULTS_URL") else {
        return;
    };
    let client = workload_client(&url).await;
    let lock = client.fenced_lock("stopped").unwrap();
    let guard = lock.lock(&client.new_owner()).await.unwrap();
    let token = Some(guard.token());
    println!("HELD {}", guard.token());
    while !guard.is_lease_lost() {
        let written = write_resource(&client, "stopped", fenced("first holder", token)).await;
        if !written.unwrap() {
            // A write under way when the process was stopped: the resource refused it, and
            // by now the guard must know why.
            println!("REFUSED; guard knows: {}", guard.is_lease_lost());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late = write_resource(&client, "stopped", fenced("late", token)).await;
    println!("LOST; late write accepted: {}", late.unwrap());
    let unlocked = guard.unlock().await;
    println!(
        "UNLOCK not held: {}",
        matches!(unlocked, Err(Error::NotHeld { .. }))
    );
}

#[tokio::test]
async fn a_holder_stopped_past_its_lease_knows_it_lost_on_waking_and_its_late_write_is_refused() {
    let server = RedisServer::start();
    let mut child = TestProcess::spawn(
        "processes::stopped_holder_process",
        &[("FAULTS_URL", &server.url())],
    );
    let first: u64 = child.expect("HELD ").await.parse().unwrap();
    // Right after a renewal, so that the stop outlasts the 900 ms lease by a known margin.
    eventually(5 * SECOND, "a fresh renewal", || {
        pttl(&server, "stopped") > 800
    })
    .await;
    child.signal("STOP");

    let c = client(&server).await;
    let second = within(5 * SECOND, "the lock after the stopped holder's lease", {
        c.fenced_lock("stopped").unwrap().lock(&c.new_owner())
    })
    .await
    .unwrap();
    assert!(second.token() > first);
    let token = Some(second.token());
    // The new holder reads the resource, and the stopped one wakes before it writes: a
    // read-modify-write that the late holder's write must not slip into.
    let read = read_resource(&c, "stopped", token).await.unwrap();
    assert!(read.is_some(), "the new holder's read was refused");

    child.signal("CONT");
    // On waking, the holder's guard says the lease is gone before the holder starts
    // anything new. (A write it had under way when stopped may go out late: the resource
    // refuses it, and the guard knows.) Its late write, sent anyway, is refused.
    let late_write_accepted = loop {
        let line = child
            .next_line(30 * SECOND)
            .await
            .expect("the holder said nothing");
        assert!(!line.contains("guard knows: false"), "{line}");
        if let Some((_, accepted)) = line.split_once("LOST; late write accepted: ") {
            break accepted.trim().to_owned();
        }
    };
    assert_eq!(late_write_accepted, "false");
    assert_eq!(child.expect("UNLOCK not held: ").await, "true");
    let write = fenced("second holder", token);
    assert!(write_resource(&c, "stopped", write).await.unwrap());
    let [value, ..] = support::workload::resource_keys("stopped");
    assert_eq!(server.command(&["GET", &value]), "second holder");
    second.unlock().await.unwrap();
}
