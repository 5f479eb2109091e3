//! Set-ups that many tests share.

use redisson_lock::{Lock, LockClient, LockGuard, LockOwner};

use super::fixed;

/// A hold of the lock `name` by a new owner of `c`, with `c`'s lease.
pub async fn held(c: &LockClient, name: &str) -> LockGuard {
    let lock = c.lock(name).unwrap();
    lock.lock(&c.new_owner()).await.unwrap()
}

/// A hold of `lock` by `owner` with a fixed 60 s lease: nothing renews it (the server's
/// script count is then the waiters' attempts), and within a test only its release or the
/// client's own recovery frees the lock for a waiter in time.
pub async fn held_for_a_minute(lock: &Lock, owner: &LockOwner) -> LockGuard {
    let lock = lock.clone().with_lease(fixed(60_000));
    lock.lock(owner).await.unwrap()
}

/// Checks that `lock` is free for `owner`: it takes it at once, then releases it.
pub async fn take_and_release(lock: &Lock, owner: &LockOwner) {
    let guard = lock.try_lock(owner).await.unwrap();
    guard.expect("the lock is free").unlock().await.unwrap();
}

/// A blocking client of `server` with the default settings, for the blocking twins' tests.
#[cfg(feature = "blocking")]
pub fn default_blocking_client(server: &super::RedisServer) -> redisson_lock::blocking::LockClient {
    let builder = LockClient::builder().url(&server.url());
    redisson_lock::blocking::LockClient::build(builder).unwrap()
}
