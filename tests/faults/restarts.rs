//! The server: crashed, restarted, asleep.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_and_queues_survive_a_crash_of_a_server_with_persistence() {
    let mut server = RedisServer::start_with_persistence();
    // A 10 s lease: the crash and restart end long before it; a waiter that misses the
    // unlock message would sleep for seconds, far past the wake-up limit.
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(10))).await;
    let plain = c.lock("durable").unwrap();
    let fair = c.fair_lock("durable-fair").unwrap();
    let fenced = c.fenced_lock("durable-fenced").unwrap();
    let holder = plain.lock(&c.new_owner()).await.unwrap();
    let fair_holder = fair.lock(&c.new_owner()).await.unwrap();
    let token = fenced.lock(&c.new_owner()).await.unwrap();
    let waiter = tokio::spawn(plain.lock(&c.new_owner()));
    let (first, second) = (c.new_owner(), c.new_owner());
    let queued_first = tokio::spawn(fair.lock(&first));
    eventually(10 * SECOND, "the first fair waiter queued", || {
        queued(&server, "durable-fair") == [first.to_string()]
    })
    .await;
    let queued_second = tokio::spawn(fair.lock(&second));
    eventually(10 * SECOND, "both fair waiters queued", || {
        queued(&server, "durable-fair").len() == 2
    })
    .await;
    subscribed(&server, &lock_channel("durable")).await;

    server.kill(); // a crash: every write was on disk before its reply (appendfsync always)
    server.restart();

    // The holds are still there and still renewed: no guard reports a loss.
    let renewed_after_restart = Instant::now();
    eventually(10 * SECOND, "a renewal after the restart", || {
        pttl(&server, "durable") > 9_000
    })
    .await;
    assert!(renewed_after_restart.elapsed() < 10 * SECOND);
    for guard in [&holder, &fair_holder] {
        assert!(!guard.is_lease_lost(), "{}", guard.name());
    }
    assert!(!token.is_lease_lost());
    assert!(!waiter.is_finished() && !queued_first.is_finished());
    assert_eq!(
        queued(&server, "durable-fair"),
        [first.to_string(), second.to_string()]
    );

    // The waiters are woken by the unlock messages, in queue order for the fair lock.
    holder.unlock().await.unwrap();
    woken_and_released("the plain waiter", waiter).await;
    fair_holder.unlock().await.unwrap();
    woken_and_released("the first fair waiter", queued_first).await;
    woken_and_released("the second fair waiter", queued_second).await;
    // The token counter survived too.
    let before = token.token();
    token.unlock().await.unwrap();
    let next = fenced.lock(&c.new_owner()).await.unwrap();
    assert_eq!(next.token(), before + 1);
    next.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_persistence_a_restart_loses_every_kinds_holds_and_their_waiters_acquire() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    let fair = c.fair_lock("volatile-fair").unwrap();
    let rw = c.read_write_lock("volatile-rw").unwrap();
    let fenced = c.fenced_lock("volatile-fenced").unwrap();
    let fair_holder = fair.lock(&c.new_owner()).await.unwrap();
    let writer = rw.write(&c.new_owner()).await.unwrap();
    for _ in 0..2 {
        fenced
            .lock(&c.new_owner())
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    let token_holder = fenced.lock(&c.new_owner()).await.unwrap();
    let long = fixed(60_000);
    let fair_waiter = tokio::spawn(fair.clone().with_lease(long).lock(&c.new_owner()));
    let reader = tokio::spawn(rw.clone().with_lease(long).read(&c.new_owner()));
    eventually(10 * SECOND, "the fair waiter queued", || {
        queued(&server, "volatile-fair").len() == 1
    })
    .await;
    // Waiting, past their first attempts (an error there would be returned as it is).
    subscribed(&server, "redisson_rwlock:{volatile-rw}").await;

    server.restart(); // the data is gone: holds, queue and token counter

    within(5 * SECOND, "lease_lost after the data loss", async {
        fair_holder.lease_lost().await;
        writer.lease_lost().await;
        token_holder.lease_lost().await;
    })
    .await;
    let queued_again = within(10 * SECOND, "the fair waiter", fair_waiter)
        .await
        .unwrap();
    let read = within(10 * SECOND, "the reader", reader).await.unwrap();
    queued_again.unwrap().unlock().await.unwrap();
    read.unwrap().unlock().await.unwrap();
    // The token counter started over: the resource must forget its tokens too.
    let after = fenced.lock(&c.new_owner()).await.unwrap();
    assert!(after.token() < token_holder.token(), "{}", after.token());
    after.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_asleep_past_the_command_timeout_times_calls_out_and_duplicates_no_hold() {
    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let timeout = Duration::from_millis(300);
    // The holder's 10 s lease outlasts the 2.5 s sleep; the other client's is 900 ms.
    let a = client_with(&server, |b| {
        b.command_timeout(timeout)
            .watchdog_timeout(Duration::from_secs(10))
    })
    .await;
    let b = client_with(&server, |b| b.command_timeout(timeout)).await;
    let holder = a
        .lock("sleepy")
        .unwrap()
        .lock(&a.new_owner())
        .await
        .unwrap();

    let asleep = server.command_on_thread(&["DEBUG", "SLEEP", "2.5"]);
    within(5 * SECOND, "the server falling asleep", async {
        while b.redis().ping::<fred::types::Value>(None).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Calls fail after about the command timeout, with an error that says to try again.
    for name in ["sleepy", "sleepy-free"] {
        let started = Instant::now();
        let result = b.lock(name).unwrap().try_lock(&b.new_owner()).await;
        assert!(
            matches!(&result, Err(e @ Error::Redis(_)) if e.is_retryable()),
            "{result:?}"
        );
        assert!(started.elapsed() < 2 * SECOND, "{:?}", started.elapsed());
    }
    tokio::task::spawn_blocking(move || asleep.join().unwrap().unwrap())
        .await
        .unwrap();

    // The holder kept its hold through the sleep, alone.
    within(5 * SECOND, "a renewal after the sleep", async {
        while pttl(&server, "sleepy") < 9_000 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(!holder.is_lease_lost());
    assert_eq!(server.command(&["HLEN", "sleepy"]), "1");
    // The attempt on the free lock may have run once the server woke up: that hold is
    // nobody's, is never renewed, and ends with its 900 ms lease.
    assert_eq!(b.renewed_holds(), 0);
    assert!(pttl(&server, "sleepy-free") <= 900);
    eventually(5 * SECOND, "the unknown hold gone", || {
        server.command(&["EXISTS", "sleepy-free"]) == "0"
    })
    .await;
    holder.unlock().await.unwrap();
}
