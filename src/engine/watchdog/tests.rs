//! The watchdog's registry and standing, without Redis.

use fred::error::Error as RedisError;
use fred::types::Value;

use super::renewal::{Batch, FIELD_BATCH, READER_BATCH};
use super::*;

fn hold() -> HoldKey {
    HoldKey {
        key: "lock".into(),
        field: "owner".into(),
        renew: Renew::Field,
    }
}

fn plain(i: usize) -> HoldKey {
    HoldKey {
        key: format!("lock:{i}").into(),
        field: "owner".into(),
        renew: Renew::Field,
    }
}

fn reader(i: usize) -> HoldKey {
    HoldKey {
        key: format!("rw:{i}").into(),
        field: "owner".into(),
        renew: Renew::Reader {
            key_prefix: format!("{{rw:{i}}}").into(),
        },
    }
}

/// The holds of the round's only batch.
fn only_batch(watchdog: &Watchdog, now: Instant) -> Vec<Arc<Hold>> {
    let mut batches = watchdog.batches(now);
    assert_eq!(batches.len(), 1, "one batch");
    batches.pop().expect("one batch").holds
}

/// A reply renewing `holds` but those of `gone`.
fn flags(holds: &[Arc<Hold>], gone: &[HoldKey]) -> Result<Value, RedisError> {
    let flag = |hold: &Arc<Hold>| Value::Integer(i64::from(!gone.contains(&hold.key)));
    Ok(Value::Array(holds.iter().map(flag).collect()))
}

#[test]
fn a_round_renews_every_renewed_hold_once_in_as_few_scripts_as_allowed() {
    let watchdog = Watchdog::new(Duration::from_secs(30), false);
    let now = Instant::now();
    let (plains, readers) = (FIELD_BATCH * 2 + 7, READER_BATCH + 3);
    let renewed: Vec<Ticket> = ((0..plains).map(plain))
        .chain((0..readers).map(reader))
        .map(|key| watchdog.register(key, now, None, true))
        .collect();
    // Fixed leases are timed by their guards, not renewed.
    let in_an_hour = Some(now + Duration::from_secs(3600));
    let fixed = watchdog.register(plain(plains), now, in_an_hour, true);
    // A lease that ran out before the round is lost, not renewed.
    let an_hour_ago = now - Duration::from_secs(3600);
    let lapsed = watchdog.register(plain(plains + 1), an_hour_ago, None, true);

    let batches = watchdog.batches(Instant::now());
    let mut seen = std::collections::HashSet::new();
    for batch in &batches {
        assert!(batch.holds.len() <= Batch::max_len(batch.reader));
        for hold in &batch.holds {
            assert_eq!(matches!(hold.key.renew, Renew::Reader { .. }), batch.reader);
            assert!(
                seen.insert(hold.key.clone()),
                "{:?} renewed twice",
                hold.key
            );
        }
    }
    let expected = renewed.iter().map(|ticket| ticket.hold.key.clone());
    assert_eq!(seen, expected.collect());
    let reader_batches = batches.iter().filter(|batch| batch.reader).count();
    assert_eq!(reader_batches, readers.div_ceil(READER_BATCH));
    let plain_batches = batches.len() - reader_batches;
    assert_eq!(plain_batches, plains.div_ceil(FIELD_BATCH));
    assert!(!watchdog.is_lost(&fixed));
    assert!(watchdog.is_lost(&lapsed));
    assert_eq!(
        watchdog.plan_unlock(&lapsed.hold.key),
        (None, None),
        "dropped"
    );
}

#[test]
fn by_slot_a_script_renews_holds_of_one_slot() {
    let watchdog = Watchdog::new(Duration::from_secs(30), true);
    let now = Instant::now();
    let tagged = |i| HoldKey {
        key: format!("{{tenant}}:{i}").into(),
        ..plain(i)
    };
    let _tickets: Vec<Ticket> = ((0..300).map(plain))
        .chain((0..300).map(tagged))
        .map(|key| watchdog.register(key, now, None, true))
        .collect();
    let batches = watchdog.batches(now);
    let slot = |hold: &Arc<Hold>| fred::util::redis_keyslot(hold.key.key.as_bytes());
    for batch in &batches {
        let first = slot(&batch.holds[0]);
        assert!(batch.holds.iter().all(|hold| slot(hold) == first));
    }
    let total: usize = batches.iter().map(|batch| batch.holds.len()).sum();
    assert_eq!(total, 600);
    let tenant = fred::util::redis_keyslot(b"tenant");
    let tenants = batches
        .iter()
        .filter(|batch| slot(&batch.holds[0]) == tenant);
    assert_eq!(tenants.count(), 2, "the tagged holds share full batches");
}

#[test]
fn a_reply_renews_the_flagged_holds_and_loses_the_others() {
    let watchdog = Watchdog::new(Duration::from_secs(30), false);
    let now = Instant::now();
    let tickets: Vec<Ticket> = (0..3)
        .map(|i| watchdog.register(plain(i), now, None, true))
        .collect();
    let holds = only_batch(&watchdog, now);
    let next_lease = watchdog.clock.at(now + Duration::from_secs(40));
    let reply = flags(&holds, &[plain(1)]);
    assert_eq!(watchdog.answered(&holds, reply, next_lease), None);
    assert!(watchdog.is_lost(&tickets[1]));
    for kept in [&tickets[0], &tickets[2]] {
        assert!(!watchdog.is_lost(kept));
        assert_eq!(kept.hold.standing.deadline(), Some(next_lease));
    }
    assert_eq!(watchdog.renewed(), 2);
}

#[test]
fn a_reply_about_a_forgotten_hold_leaves_its_successor_alone() {
    let watchdog = Watchdog::new(Duration::from_secs(30), false);
    let now = Instant::now();
    let old = watchdog.register(hold(), now, None, true);
    let holds = only_batch(&watchdog, now);
    // Released meanwhile, and taken again by the same owner.
    watchdog.forget(&hold(), Some(old.hold.id));
    let new = watchdog.register(hold(), now, None, true);
    let deadline = new.hold.standing.deadline();
    let next_lease = watchdog.clock.at(now + Duration::from_secs(40));
    for gone in [vec![hold()], vec![]] {
        let reply = flags(&holds, &gone);
        assert_eq!(watchdog.answered(&holds, reply, next_lease), None);
        assert!(watchdog.is_lost(&old));
        assert!(!watchdog.is_lost(&new));
        assert_eq!(new.hold.standing.deadline(), deadline);
    }
    assert_eq!(watchdog.renewed(), 1);
}

#[test]
fn a_renewal_answered_after_the_last_renewed_guard_left_sets_no_deadline() {
    let watchdog = Watchdog::new(Duration::from_secs(30), false);
    let now = Instant::now();
    let renewed = watchdog.register(hold(), now, None, true);
    let in_an_hour = Some(now + Duration::from_secs(3600));
    let fixed = watchdog.register(hold(), now, in_an_hour, false);
    let holds = only_batch(&watchdog, now);
    assert!(watchdog.leave(&renewed).is_some());
    // A deadline set now would end the fixed lease's hold at once.
    let reply = flags(&holds, &[]);
    assert_eq!(watchdog.answered(&holds, reply, 0), None);
    assert_eq!(fixed.hold.standing.deadline(), None);
    assert!(!watchdog.is_lost(&fixed));
}

#[test]
fn a_failed_renewal_is_retried_before_the_lease_ends() {
    let watchdog = Watchdog::new(Duration::from_secs(30), false);
    let now = Instant::now();
    let ticket = watchdog.register(hold(), now, None, true);
    let holds = only_batch(&watchdog, now);
    let error = RedisError::new(fred::error::ErrorKind::IO, "connection lost");
    let retry = (watchdog.answered(&holds, Err(error), 0)).expect("a retry");
    assert!(retry > now && retry < now + Duration::from_secs(30));
    assert!(!watchdog.is_lost(&ticket));
    let odd = Ok(Value::Array(Vec::new()));
    assert!(watchdog.answered(&holds, odd, 0).is_some());
    assert_eq!(watchdog.renewed(), 1);
}

#[tokio::test]
async fn a_failed_renewal_drops_the_holds_whose_lease_ran_out() {
    let watchdog = Watchdog::new(Duration::from_millis(200), false);
    let ticket = watchdog.register(hold(), Instant::now(), None, true);
    let holds = only_batch(&watchdog, Instant::now());
    tokio::time::timeout(Duration::from_secs(10), watchdog.lost(&ticket))
        .await
        .expect("lost() completes once the deadline passed");
    let error = RedisError::new(fred::error::ErrorKind::IO, "connection lost");
    assert_eq!(watchdog.answered(&holds, Err(error), 0), None);
    assert_eq!(watchdog.plan_unlock(&hold()), (None, None), "dropped");
}

#[test]
fn a_watchdog_lease_that_ran_out_stays_lost() {
    let watchdog = Watchdog::new(Duration::from_millis(100), false);
    let now = Instant::now();
    let in_a_minute = Some(now + Duration::from_secs(60));
    let fixed = watchdog.register(hold(), now, in_a_minute, true);
    assert!(!watchdog.is_lost(&fixed));
    // A re-entry with the watchdog lease whose reply came after that lease's end.
    let sent = now - Duration::from_millis(200);
    let renewed = watchdog.register(hold(), sent, None, false);
    assert!(watchdog.is_lost(&renewed));
    assert_eq!(
        watchdog.renewed(),
        0,
        "a lease that ran out is not being renewed"
    );
    // The lapsed guard leaving sends nothing, and does not revive the hold for the
    // fixed one.
    assert!(watchdog.leave(&renewed).is_none());
    assert!(watchdog.is_lost(&fixed));
}

#[test]
fn a_guard_whose_fixed_lease_ended_leaves_without_a_release() {
    let watchdog = Watchdog::new(Duration::from_secs(30), false);
    let now = Instant::now();
    let ended = Some(now - Duration::from_millis(1));
    // Alone: the key's lease is over, nothing is released.
    let alone = watchdog.register(plain(1), now, ended, true);
    assert!(watchdog.leave(&alone).is_none());
    assert_eq!(watchdog.plan_unlock(&plain(1)), (None, None), "dropped");
    // Beside a renewed hold of the owner, which keeps the key: its count is released.
    let renewed = watchdog.register(plain(2), now, None, true);
    let inner = watchdog.register(plain(2), now, ended, false);
    assert!(watchdog.leave(&inner).is_some());
    assert!(!watchdog.is_lost(&renewed));
}

#[test]
fn a_guard_with_time_left_follows_the_renewals() {
    let watchdog = Watchdog::new(Duration::from_secs(30), false);
    let now = Instant::now();
    let ticket = watchdog.register(hold(), now, None, true);
    let deadline = ticket
        .hold
        .standing
        .deadline()
        .map(|at| watchdog.clock.instant(at));
    assert_eq!(deadline, Some(lease_end(now, Duration::from_secs(30))));
    assert!(!watchdog.is_lost(&ticket));
    assert_eq!(watchdog.renewed(), 1);
    assert!(watchdog.leave(&ticket).is_some());
    assert_eq!(watchdog.renewed(), 0);
    assert!(watchdog.is_lost(&ticket), "its last part left");
}

#[test]
fn a_guard_told_lost_is_never_contradicted_by_a_renewal() {
    let standing = Standing::new();
    assert!(standing.settle(10, Some(100)), "held until 100");
    // A guard looks at 150: the deadline passed.
    assert!(!standing.holds_at(150));
    // The watchdog read its clock at 50, before the guard's look, and comes second.
    assert!(
        !standing.settle(50, Some(400)),
        "the renewal does not revive it"
    );
    assert_eq!(standing.deadline(), None);
    assert!(!standing.holds_at(60));
}

#[tokio::test]
async fn lost_completes_at_the_deadline_without_a_renewal() {
    // Nothing runs the renewal task: the deadline passes unrenewed.
    let watchdog = Watchdog::new(Duration::from_millis(200), false);
    let ticket = watchdog.register(hold(), Instant::now(), None, true);
    assert!(!watchdog.is_lost(&ticket));
    tokio::time::timeout(Duration::from_secs(10), watchdog.lost(&ticket))
        .await
        .expect("lost() completes once the deadline passed");
    assert!(watchdog.is_lost(&ticket));
    assert_eq!(watchdog.renewed(), 0);
}
