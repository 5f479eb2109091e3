//! Helpers shared by the integration tests: private servers and clients.
#![allow(dead_code)]

pub mod server;

use std::future::Future;
use std::time::Duration;

use redisson_lock::{LockClient, LockClientBuilder};
pub use server::RedisServer;

/// A client of `server` with a short watchdog, so that lease tests take seconds.
pub async fn client(server: &RedisServer) -> LockClient {
    client_with(server, |b| b).await
}

/// A client of `server`, configured further by `configure`.
pub async fn client_with(
    server: &RedisServer,
    configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
) -> LockClient {
    let builder = LockClient::builder()
        .url(&server.url())
        .watchdog_timeout(Duration::from_millis(900))
        .command_timeout(Duration::from_secs(2));
    configure(builder)
        .build()
        .await
        .expect("connect to the test server")
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}

/// Polls `check` (a cheap query, not a synchronisation point) until it holds or `limit`
/// passes; for conditions that only Redis's clock makes true, like a TTL running out.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check() {
        if start.elapsed() > limit {
            panic!("{what} did not happen within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The script `lua/<name>.lua` as the crate sends it: the shared snippets its line in
/// `src/script.rs` lists (`NAME => "<name>" with "part", …`) first, in that order.
pub fn lua(name: &str) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |path: String| {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
    };
    let list = read(format!("{root}/src/script.rs"));
    let declared = format!("=> \"{name}\"");
    let line = (list.lines())
        .find(|line| !line.trim_start().starts_with("//") && line.contains(&declared))
        .unwrap_or_else(|| panic!("src/script.rs declares no script {name}"));
    let parts = line.split_once(" with ").map_or("", |(_, parts)| parts);
    // The quoted names are every other piece between quotes.
    let parts = parts.split('"').skip(1).step_by(2);
    parts
        .chain([name])
        .map(|file| read(format!("{root}/lua/{file}.lua")))
        .collect()
}
