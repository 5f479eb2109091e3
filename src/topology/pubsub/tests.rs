//! The pub/sub mode and message decoding, without Redis.

use super::*;

#[test]
fn modes_choose_what_to_listen_to_and_publish_with() {
    let of = |mode, clustered, sharded| {
        Flavour::of(mode, clustered, sharded).map(|f| (f.classic, f.sharded, f.publish_command()))
    };
    // Auto is Redisson's AUTO: sharded publishing only on a cluster that has it.
    assert_eq!(
        of(PubSubMode::Auto, false, true).unwrap(),
        (true, false, "publish")
    );
    assert_eq!(
        of(PubSubMode::Auto, true, false).unwrap(),
        (true, false, "publish")
    );
    assert_eq!(
        of(PubSubMode::Auto, true, true).unwrap(),
        (true, true, "spublish")
    );
    assert_eq!(
        of(PubSubMode::Classic, true, true).unwrap(),
        (true, false, "publish")
    );
    assert_eq!(
        of(PubSubMode::Sharded, true, true).unwrap(),
        (false, true, "spublish")
    );
    assert_eq!(
        of(PubSubMode::Both, true, true).unwrap(),
        (true, true, "both")
    );
    // Never a publish command the server lacks: a release must not fail after its writes.
    assert!(of(PubSubMode::Sharded, true, false).is_err());
    assert!(of(PubSubMode::Both, false, false).is_err());
}

#[test]
fn decodes_redisson_messages() {
    let lock = |payload: Value| wake_of(&payload, unlock_messages);
    assert_eq!(lock(Value::from("0")), Some(Wake::One));
    assert_eq!(lock(Value::from("1")), Some(Wake::All));
    assert_eq!(lock(Value::from(1i64)), Some(Wake::All));
    assert_eq!(lock(Value::from("2")), None);
    assert_eq!(lock(Value::from("unlock")), None);
    // Another kind's reading of the same payloads (a count-down latch's `0` opens it for all).
    let latch = |payload: &str| (payload == "0").then_some(Wake::All);
    assert_eq!(wake_of(&Value::from("0"), latch), Some(Wake::All));
    assert_eq!(wake_of(&Value::from("1"), latch), None);
}
