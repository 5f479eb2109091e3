//! The readers' timeout keys: what a read acquire and release read and set, and their TTLs.

use super::*;

/// The PTTL and HKEYS commands the server ran (those of scripts included) while `release`
/// ran: what a read release spends on finding the lock's new TTL.
async fn ttl_reads(
    server: &RedisServer,
    release: impl Future<Output = redisson_lock::Result<()>>,
) -> (u64, u64) {
    let count = || {
        (
            command_calls(server, "pttl"),
            command_calls(server, "hkeys"),
        )
    };
    let before = count();
    release.await.unwrap();
    let after = count();
    (after.0 - before.0, after.1 - before.1)
}

/// How often the server's clock was read (`TIME`) while `acquire` ran, and its guard.
async fn clock_reads<T>(
    server: &RedisServer,
    acquire: impl Future<Output = redisson_lock::Result<T>>,
) -> (u64, T) {
    let before = command_calls(server, "time");
    let guard = acquire.await.unwrap();
    (command_calls(server, "time") - before, guard)
}

/// The lock's expiry as a Unix time in ms: unchanged exactly when nothing set its TTL.
fn expiry(server: &RedisServer, name: &str) -> String {
    if support::server::server_version() >= (7, 0) {
        return server.command(&["PEXPIRETIME", name]);
    }
    let script = format!("{}return at(KEYS[1])", support::server::lua_at());
    server.command(&["EVAL", &script, "1", name])
}

/// A read release reads its own timeout key and the hash's TTL, not every reader's, unless
/// its hold is the one that expires last: only then does it look at the others, and the TTL
/// shrinks to the next latest. The last reader still deletes the lock and publishes.
#[tokio::test]
async fn a_read_release_reads_every_readers_key_only_when_its_hold_expires_last() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "latest-reader";
    let mut messages = Listener::channel(&server, &channel(name)).await;
    let lock = c.read_write_lock(name).unwrap();
    let read = |owner, ms| lock.clone().with_lease(fixed(ms)).read(owner);
    let (a, b, latest) = (c.new_owner(), c.new_owner(), c.new_owner());
    let a_hold = read(&a, 20_000).await.unwrap();
    let b_outer = read(&b, 40_000).await.unwrap();
    let b_inner = read(&b, 30_000).await.unwrap();
    let latest_hold = read(&latest, 50_000).await.unwrap();
    let at_first = expiry(&server, name);

    // Its own key and the hash's TTL: two PTTLs, whatever the number of readers.
    assert_eq!(ttl_reads(&server, b_inner.unlock()).await, (2, 0));
    assert_eq!(lock.read_hold_count(&b).await.unwrap(), 1);
    let b_key = |n| timeout_key(name, &b.to_string(), n);
    assert_eq!(server.command(&["EXISTS", &b_key(2)]), "0");
    assert_eq!(ttl_reads(&server, a_hold.unlock()).await, (2, 0));
    assert_eq!(expiry(&server, name), at_first, "the TTL is untouched");

    // The latest hold goes: the remaining keys are read, the TTL shrinks to b's hold #1.
    assert_eq!(ttl_reads(&server, latest_hold.unlock()).await, (3, 1));
    let ttl = pttl(&server, name);
    assert!((30_000..=40_000).contains(&ttl), "{ttl}");
    messages.no_more().await;

    b_outer.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
    assert_eq!(server.command(&["KEYS", "*rwlock_timeout*"]), "");
    assert_eq!(messages.next().await, (channel(name), "0".to_owned()));
    messages.quit().await;
}

/// A name with a hash tag keeps Redisson's key names: each reader's timeout keys follow the
/// raw name itself, with no braces added, and the releases delete them.
#[tokio::test]
async fn a_hash_tagged_names_readers_keep_redissons_key_names() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "{tag}:cart";
    let me = c.new_owner();
    let lock = c.read_write_lock(name).unwrap();
    let first = lock.read(&me).await.unwrap();
    let second = lock.read(&me).await.unwrap();
    for n in [1, 2] {
        let key = format!("{name}:{me}:rwlock_timeout:{n}");
        assert_eq!(server.command(&["EXISTS", &key]), "1", "{key}");
    }
    second.unlock().await.unwrap();
    first.unlock().await.unwrap();
    assert_eq!(server.command(&["KEYS", "*rwlock_timeout*"]), "");
    assert_eq!(server.command(&["EXISTS", name]), "0");
}

/// A read acquire reads no clock. One that gives the hash its lease (the first reader, or
/// one whose lease outlasts the hash's TTL) sets the hash's TTL before its key's, so the key
/// never ends before the hash; one whose lease the hash already outlives leaves the hash and
/// sets its own key's TTL.
#[tokio::test]
async fn a_read_acquire_reads_no_clock_and_never_ends_its_key_before_a_hash_it_set() {
    let name = "joining";
    let (server, c, lock) = on_a_new_server(name).await;
    let read = |owner, ms| lock.clone().with_lease(fixed(ms)).read(owner);
    let (first, shorter, longer) = (c.new_owner(), c.new_owner(), c.new_owner());
    let at = |key: &str| expiry(&server, key).parse::<u64>().unwrap();
    let key = |owner: &LockOwner| timeout_key(name, &owner.to_string(), 1);
    // The key ends with the hash, or a little after when the clock moved between the two.
    let ends_with_hash = |owner: &LockOwner| {
        let (hash, key) = (at(name), at(&key(owner)));
        assert!(
            (hash..hash + 1_000).contains(&key),
            "hash {hash}, key {key}"
        );
        hash
    };

    let (reads, _first) = clock_reads(&server, read(&first, 40_000)).await;
    assert_eq!(reads, 0, "the first reader");
    let first_hash = ends_with_hash(&first);

    let (reads, _shorter) = clock_reads(&server, read(&shorter, 20_000)).await;
    assert_eq!(reads, 0, "a reader the hash outlives");
    assert_eq!(at(name), first_hash, "the hash is untouched");
    let ttl = pttl(&server, &key(&shorter));
    assert!((1..=20_000).contains(&ttl), "its own lease: {ttl}");

    let (reads, _longer) = clock_reads(&server, read(&longer, 60_000)).await;
    assert_eq!(reads, 0, "a reader that raises the hash");
    assert!(ends_with_hash(&longer) > first_hash);
}

/// A release whose hold expires with the hash looks at the remaining holds from the readers
/// that joined last, and stops at the first that lives as long as the hash: here a Java
/// reader whose key outlives the hash (a renewal with a shorter watchdog timeout leaves that).
/// The TTL stays; Java's release would raise it to that reader's key.
#[tokio::test]
async fn a_release_of_the_latest_hold_stops_at_a_hold_that_lives_as_long() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "as-long";
    let me = c.new_owner();
    let mine = c
        .read_write_lock(name)
        .unwrap()
        .with_lease(long())
        .read(&me)
        .await
        .unwrap();
    // Java readers join: five expiring before us, the last one after.
    let ours = now_ms() + 60_000;
    for thread in 1..=6 {
        let field = java_owner(thread);
        let at = if thread == 6 {
            ours + 10_000
        } else {
            ours - 10_000
        };
        server.command(&["HSET", name, &field, "1"]);
        let key = timeout_key(name, &field, 1);
        server.command(&["SET", &key, "1", "PXAT", &at.to_string()]);
    }
    for key in [name.to_owned(), timeout_key(name, &me.to_string(), 1)] {
        server.command(&["PEXPIREAT", &key, &ours.to_string()]);
    }

    // Its own key, the hash, and the last Java reader's key; not the five others.
    assert_eq!(ttl_reads(&server, mine.unlock()).await, (3, 1));
    assert_eq!(expiry(&server, name), ours.to_string());
    assert_eq!(
        hash(&server, name).len(),
        7,
        "mode and the six Java readers"
    );
}

/// After a downgrade the hash keeps the writer's TTL, longer than the read holds' keys. A read
/// release leaves that TTL as it is (Java's would shrink it to the longest read hold), and
/// the last read hold still frees the lock and publishes.
#[tokio::test]
async fn after_a_downgrade_a_read_release_keeps_the_ttl_and_the_last_one_frees_the_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "downgraded";
    let mut messages = Listener::channel(&server, &channel(name)).await;
    let lock = c.read_write_lock(name).unwrap();
    let me = c.new_owner();
    let writing = lock.clone().with_lease(long()).write(&me).await.unwrap();
    let outer = read_with_lease(&lock, &me, 5_000).await;
    let inner = read_with_lease(&lock, &me, 10_000).await;
    writing.unlock().await.unwrap();
    assert_eq!(messages.next().await.1, "1");
    let at_downgrade = expiry(&server, name);
    assert!(pttl(&server, name) > 50_000, "the writer's lease");

    assert_eq!(ttl_reads(&server, inner.unlock()).await, (2, 0));
    assert_eq!(expiry(&server, name), at_downgrade);
    messages.no_more().await;
    outer.unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", name]), "0");
    assert_eq!(messages.next().await.1, "0");
    messages.quit().await;
}
