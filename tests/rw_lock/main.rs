//! The read-write lock (Redisson's `RReadWriteLock`, protocol §5): shared readers, exclusive
//! writers, downgrade and the refused upgrade, wake-ups, the readers' timeout keys and their
//! renewal, cancellation, and states written exactly as Java writes them. Ports of
//! `RedissonReadWriteLockTest` (§11.5) that apply are in `redisson_ports`.

#[path = "../support/mod.rs"]
mod support;

mod holds;
mod java_wire;
mod modes;
mod reader_keys;
mod redisson_ports;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::KeysInterface;
use redisson_lock::{Error, Lease, LockClient, LockOwner, ReadGuard, ReadWriteLock, WriteGuard};
use support::*;
use tokio::sync::Barrier;

/// A lease that outlives every test.
fn long() -> Lease {
    Lease::fixed(Duration::from_secs(60)).unwrap()
}

/// The lock hash as a map (empty when the key does not exist).
fn hash(server: &RedisServer, name: &str) -> BTreeMap<String, String> {
    let reply = server.command(&["HGETALL", name]);
    let lines: Vec<&str> = reply.lines().collect();
    lines
        .chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect()
}

/// Hold #n's timeout key of reader `field` on lock `name` (a name without `{`).
fn timeout_key(name: &str, field: &str, n: u32) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{n}")
}

fn channel(name: &str) -> String {
    format!("redisson_rwlock:{{{name}}}")
}

/// A new server, a client of it, and the read-write lock `name` there.
async fn on_a_new_server(name: &str) -> (RedisServer, LockClient, ReadWriteLock) {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.read_write_lock(name).unwrap();
    (server, c, lock)
}

/// A read hold of `owner` on `lock` with a fixed lease of `ms`.
async fn read_with_lease(lock: &ReadWriteLock, owner: &LockOwner, ms: u64) -> ReadGuard {
    let lock = lock.clone().with_lease(fixed(ms));
    lock.read(owner).await.unwrap()
}

/// A write hold of `owner` on `lock` with a fixed lease of `ms`.
async fn write_with_lease(lock: &ReadWriteLock, owner: &LockOwner, ms: u64) -> WriteGuard {
    let lock = lock.clone().with_lease(fixed(ms));
    lock.write(owner).await.unwrap()
}

fn write_field(owner: &LockOwner) -> String {
    format!("{owner}:write")
}

fn assert_would_deadlock<T: std::fmt::Debug>(result: redisson_lock::Result<T>) {
    match result {
        Err(Error::WouldDeadlock(_)) => {}
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
}
