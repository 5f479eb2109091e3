//! The clients: this crate's connected clients counted by their connection names (the
//! doctor's own left out), unnamed connections, and the pub/sub both sides use.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use super::*;

/// The number `what` gives before `label` (`"2 unnamed connection(s)"`).
fn number_before(what: &str, label: &str) -> usize {
    let before = &what[..what
        .find(label)
        .unwrap_or_else(|| panic!("{label} in {what}"))];
    let digits = before.trim_end().rsplit(' ').next().unwrap();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("a number before {label} in {what}"))
}

fn connected(server: &RedisServer) -> String {
    let (answer, _) = run_json(server, &["doctor"]);
    let found = finding(&answer, "clients.connected");
    assert_eq!(found["severity"], "fine", "{found}");
    assert_eq!(found["doc"], "docs/operations.md#connected-clients");
    found["what"].as_str().unwrap().to_string()
}

#[test]
fn a_lock_client_is_counted_an_unnamed_connection_too_and_the_doctor_not() {
    let server = RedisServer::start();
    // Nothing connected but the doctor: it counts nothing, itself included.
    let what = connected(&server);
    assert!(
        what.contains("has 0 redisson-lock client(s) over 0 connection(s)"),
        "{what}"
    );
    assert_eq!(number_before(&what, "unnamed connection(s)"), 0, "{what}");
    assert_eq!(number_before(&what, "otherwise named"), 0, "{what}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(support::client(&server));
    let id = client.id().hyphenated().to_string();
    let what = connected(&server);
    assert!(what.contains("has 1 redisson-lock client(s)"), "{what}");
    assert!(what.contains(&id), "{what}");
    assert!(number_before(&what, "connection(s) named") >= 1, "{what}");
    let unnamed = number_before(&what, "unnamed connection(s)");

    // A plain connection, answered, so that the server has it when the doctor looks.
    let mut plain = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    plain.write_all(b"PING\r\n").unwrap();
    let mut pong = String::new();
    BufReader::new(&plain).read_line(&mut pong).unwrap();
    assert_eq!(pong.trim(), "+PONG");
    let what = connected(&server);
    assert!(what.contains("has 1 redisson-lock client(s)"), "{what}");
    assert_eq!(
        number_before(&what, "unnamed connection(s)"),
        unnamed + 1,
        "{what}"
    );
    assert!(what.contains("cannot tell which"), "{what}");
    drop(plain);
    runtime.block_on(client.shutdown());
}

#[test]
fn outside_a_cluster_both_sides_use_classic_pubsub() {
    let server = RedisServer::start();
    let (answer, _) = run_json(&server, &["doctor"]);
    let mode = finding(&answer, "clients.pubsub_mode");
    assert_eq!(mode["severity"], "fine", "{mode}");
    assert!(
        mode["what"].as_str().unwrap().contains("classic pub/sub"),
        "{mode}"
    );
    assert_eq!(mode["doc"], "docs/operations.md#pubsub-java-and-this-crate");
    // The check ids, stable.
    for check in [
        "clients.connected",
        "clients.pubsub_mode",
        "clients.replica_wait",
    ] {
        assert_eq!(findings(&answer, check).len(), 1, "{check} in {answer:#}");
    }
}
