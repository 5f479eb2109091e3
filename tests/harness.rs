//! Self-tests for the private redis-server harness in `tests/support/server.rs`.

#[path = "support/server.rs"]
mod server;

use server::RedisServer;
use std::net::TcpStream;

#[test]
fn two_servers_get_distinct_ports_and_answer_ping() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_eq!(a.command(&["PING"]), "PONG");
    assert_eq!(b.command(&["PING"]), "PONG");
    assert_eq!(a.url(), format!("redis://127.0.0.1:{}", a.port()));
}

#[test]
fn bulk_strings_round_trip_exactly() {
    let server = RedisServer::start();
    assert_eq!(server.command(&["SET", "k", "a\r\nb"]), "OK");
    assert_eq!(server.command(&["GET", "k"]), "a\r\nb");
    assert_eq!(server.command(&["SET", "empty", ""]), "OK");
    assert_eq!(server.command(&["GET", "empty"]), "");
    assert_eq!(server.command(&["GET", "missing"]), "(nil)");
}

#[test]
fn integers_errors_and_arrays_render_as_text() {
    let server = RedisServer::start();
    assert_eq!(server.command(&["INCR", "n"]), "1");
    assert_eq!(server.command(&["HSET", "h", "f1", "v1", "f2", "v2"]), "2");
    let mut pairs: Vec<String> = server
        .command(&["HGETALL", "h"])
        .lines()
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|kv| kv.join("="))
        .collect();
    pairs.sort();
    assert_eq!(pairs, ["f1=v1", "f2=v2"]);
    // Nested arrays are flattened; null elements render as (nil).
    let nested = server.command(&["EVAL", "return {1, {'a', 'b'}, 'c'}", "0"]);
    assert_eq!(nested, "1\na\nb\nc");
    assert_eq!(server.command(&["MGET", "missing", "n"]), "(nil)\n1");
    assert!(server.command(&["HGET", "h"]).starts_with("ERR:"));
    assert!(server.command(&["INCR", "h"]).starts_with("ERR:WRONGTYPE"));
}

#[test]
fn persistent_server_keeps_data_across_restart() {
    let mut server = RedisServer::start_with_persistence();
    let port = server.port();
    assert_eq!(server.command(&["SET", "durable", "yes"]), "OK");
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(server.command(&["GET", "durable"]), "yes");
}

#[test]
fn persistent_server_keeps_data_across_kill_and_restart() {
    let mut server = RedisServer::start_with_persistence();
    assert_eq!(server.command(&["SET", "durable", "yes"]), "OK");
    server.kill(); // appendfsync always: the write is on disk already
    server.restart();
    assert_eq!(server.command(&["GET", "durable"]), "yes");
}

#[test]
fn plain_server_loses_data_on_restart() {
    let mut server = RedisServer::start();
    assert_eq!(server.command(&["SET", "ephemeral", "yes"]), "OK");
    server.restart();
    assert_eq!(server.command(&["GET", "ephemeral"]), "(nil)");
}

#[test]
fn killed_server_refuses_connections() {
    let mut server = RedisServer::start();
    let port = server.port();
    server.kill();
    server.kill(); // idempotent
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(server.try_command(&["PING"]).is_err());
}

#[test]
fn drop_removes_the_data_directory() {
    let server = RedisServer::start();
    let dir = server.dir().to_path_buf();
    assert!(dir.join("redis.log").exists());
    drop(server);
    assert!(!dir.exists());
}
