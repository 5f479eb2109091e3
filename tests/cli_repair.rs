//! The `redisson-lock` binary's repairs of semaphores and count-down latches: give back
//! permits a killed process held, add or set permits, count a latch down, delete; each wakes
//! the waiters of another client as a release or count-down does, asks first unless --yes,
//! answers in JSON, and refuses what it does not apply to with force-unlock's exit codes.

mod support;
#[path = "support/tool.rs"]
mod tool;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use support::*;
use tool::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_back_wakes_a_waiter_of_permits_a_killed_process_held() {
    let server = RedisServer::start();
    let (dead, waiting) = (client(&server).await, client(&server).await);
    let name = "cli:repair-sem";
    let semaphore = dead.semaphore(name).unwrap();
    assert!(semaphore.try_set_permits(2).await.unwrap());
    // Taken and never given back, as by a process that died.
    semaphore.acquire_guard(2).await.unwrap().forget();
    let waiter = waiting.semaphore(name).unwrap();
    let waits = tokio::spawn(async move { waiter.acquire_many(2).await });
    subscribed(&server, "redisson_sc:{cli:repair-sem}").await;

    let (answer, code) =
        tokio::task::block_in_place(|| run_json(&server, &["give-back", name, "2", "--yes"]));
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["repair"], "give_back");
    assert_eq!(answer["done"], true);
    within(WAKE, "the waiter, woken by the give-back", waits)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(server.command(&["GET", name]), "0");

    // Added (negative too) and set, with the waiters told each count.
    let run_ok = |args: &[&str]| {
        let (answer, code) = run_json(&server, args);
        assert_eq!(code, 0, "{args:?}: {answer}");
        answer
    };
    tokio::task::block_in_place(|| {
        run_ok(&["add-permits", name, "5", "--yes"]);
        assert_eq!(server.command(&["GET", name]), "5");
        run_ok(&["add-permits", name, "-2", "--yes"]);
        assert_eq!(server.command(&["GET", name]), "3");
        let set = run_ok(&["set-permits", name, "7", "--yes"]);
        assert_eq!(set["count_after"], 7);
        let deleted = run_ok(&["delete", name, "--kind", "semaphore", "--yes"]);
        assert_eq!(deleted["done"], true);
        assert_eq!(server.command(&["EXISTS", name]), "0");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_down_opens_a_latch_for_another_client_s_waiters() {
    let server = RedisServer::start();
    let (counting, waiting) = (client(&server).await, client(&server).await);
    let name = "cli:repair-latch";
    assert!(counting
        .count_down_latch(name)
        .unwrap()
        .try_set_count(1)
        .await
        .unwrap());
    let latch = waiting.count_down_latch(name).unwrap();
    let waits = tokio::spawn(async move { latch.wait_for(Duration::from_secs(60)).await });
    subscribed(
        &server,
        "redisson_countdownlatch__channel__{cli:repair-latch}",
    )
    .await;
    let (answer, code) =
        tokio::task::block_in_place(|| run_json(&server, &["count-down", name, "--yes"]));
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["object"], "count_down_latch");
    assert!(within(WAKE, "the latch's waiter", waits)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(server.command(&["EXISTS", name]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repairs_refuse_what_they_do_not_apply_to_and_ask_first() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let _held = c
        .lock("cli:repair-lock")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    assert!(c
        .semaphore("cli:repair-s")
        .unwrap()
        .try_set_permits(1)
        .await
        .unwrap());
    tokio::task::block_in_place(|| {
        // A lock is no semaphore: exit 5, nothing changed.
        let (answer, code) = run_json(&server, &["give-back", "cli:repair-lock", "1", "--yes"]);
        assert_eq!(code, 5, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("lock"),
            "{answer}"
        );
        // Nothing there: exit 1.
        let (answer, code) = run_json(&server, &["count-down", "cli:repair-none", "--yes"]);
        assert_eq!(code, 1, "{answer}");
        // A semaphore counted down as a latch, when told so: refused.
        let args = ["count-down", "cli:repair-s", "--kind", "semaphore", "--yes"];
        let (_, code) = run_json(&server, &args);
        assert_eq!(code, 5);
        assert_eq!(server.command(&["GET", "cli:repair-s"]), "1");
        // Not confirmed: exit 4, nothing changed.
        let mut asking = command(&server, &["give-back", "cli:repair-s", "2"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        asking.stdin.take().unwrap().write_all(b"n\n").unwrap();
        let output = asking.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(4));
        assert!(String::from_utf8_lossy(&output.stderr).contains("Give back 2 permits"));
        assert_eq!(server.command(&["GET", "cli:repair-s"]), "1");
    });
}
