//! What differs between server versions reaches the caller as on Redis 7: the scripts' own
//! errors, and a command refused inside a script (Redis 6.2 words both otherwise). Run the
//! suite with another `redis-server` first on `PATH` to check a server.

mod support;

use redisson_lock::Error;
use support::topology::start_replica_of;
use support::*;

/// A duration the client never sends, given to the scripts directly: the script refuses it
/// before writing, in its own words.
#[test]
fn a_script_refusing_a_duration_says_so_in_its_own_words() {
    let server = RedisServer::start();
    let acquire = lua("lock_acquire");
    let reply = server.command(&["EVAL", &acquire, "1", "refused", "abc", "me:1"]);
    assert_eq!(reply, "ERR:ERR invalid duration in ms: abc");
    assert_eq!(server.command(&["EXISTS", "refused"]), "0");

    // A release with a bad latch TTL leaves the hold as it was.
    server.command(&["EVAL", &acquire, "1", "refused", "30000", "me:1"]);
    let release = lua("lock_release");
    let keys = ["refused", "refused:channel", "refused:latch"];
    let args = ["0", "30000", "me:1", "publish", "0", "request-1"];
    let mut command = vec!["EVAL", &release, "3"];
    command.extend(keys.iter().chain(&args));
    let reply = server.command(&command);
    assert_eq!(reply, "ERR:ERR invalid duration in ms: 0");
    assert_eq!(server.command(&["HGET", "refused", "me:1"]), "1");
    assert_eq!(server.command(&["EXISTS", "refused:latch"]), "0");
}

/// A release the user's ACL forbids to publish fails with the script's refusal, whole.
#[tokio::test]
async fn a_refused_publish_reaches_the_caller_in_the_script_s_words() {
    let server = RedisServer::start();
    let acl = [
        "ACL", "SETUSER", "quiet", "on", ">pw", "~*", "&*", "+@all", "-publish",
    ];
    assert_eq!(server.command(&acl), "OK");
    let url = format!("redis://quiet:pw@127.0.0.1:{}", server.port());
    let c = client_with(&server, |b| b.url(&url)).await;
    let guard = c
        .lock("announced")
        .unwrap()
        .lock(&c.new_owner())
        .await
        .unwrap();
    match guard.unlock().await {
        Err(Error::Redis(e)) => {
            let expected = format!(
                "NOPERM this user may not run publish on {}, which releasing the lock needs; \
                 nothing was written",
                lock_channel("announced")
            );
            assert!(e.details().starts_with(&expected), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.command(&["HLEN", "announced"]), "1");
    c.shutdown().await;
}

/// A lock script sent to a replica (a demoted master, as in a failover) is refused as a
/// write to a read-only replica, which is worth trying again: a waiter whose master is
/// demoted backs off until its wait ends instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_refused_by_a_replica_is_retryable_on_every_server() {
    let master = RedisServer::start();
    let replica = tokio::task::block_in_place(|| start_replica_of(&master));
    let on_replica = client(&replica).await;
    let lock = on_replica.lock("demoted").unwrap();
    match lock.try_lock(&on_replica.new_owner()).await {
        Err(e @ Error::Redis(_)) => {
            assert!(e.to_string().contains("READONLY"), "{e}");
            assert!(e.is_retryable(), "{e}");
        }
        other => panic!("{other:?}"),
    }
    on_replica.shutdown().await;

    // A waiter on a held lock; then its master becomes a replica of an empty server.
    let other = RedisServer::start();
    master.command(&["HSET", "demoted", JAVA_OWNER, "1"]);
    master.command(&["PEXPIRE", "demoted", "60000"]);
    let c = deployment_client(&master.url(), |b| b).await;
    let lock = c.lock("demoted").unwrap();
    let waiter = tokio::spawn(lock.try_lock_for(&c.new_owner(), 3 * SECOND));
    subscribed(&master, &lock_channel("demoted")).await;
    let port = other.port().to_string();
    master.command(&["REPLICAOF", "127.0.0.1", &port]);
    eventually(10 * SECOND, "the master to be demoted and synced", || {
        (master.command(&["INFO", "replication"])).contains("master_link_status:up")
    })
    .await;
    assert_eq!(master.command(&["EXISTS", "demoted"]), "0");
    // Woken, the waiter tries on the demoted master: refused, it tries again till its wait ends.
    master.command(&["PUBLISH", &lock_channel("demoted"), "0"]);
    let waited = within(10 * SECOND, "the waiter", waiter).await.unwrap();
    assert!(matches!(waited, Ok(None)), "{waited:?}");
    c.shutdown().await;
}
