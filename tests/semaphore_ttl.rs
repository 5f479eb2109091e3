//! A semaphore that expires (protocol §13.2): set with a TTL (Redisson 3.29's
//! `trySetPermits(n, ttl)`), and released into only while it exists (Redisson 4.0's
//! `releaseIfExists`), so that permits given back late do not bring an expired semaphore back.

mod support;

use std::time::Duration;

use redisson_lock::Error;
use support::listener::Listener;
use support::*;

fn channel(name: &str) -> String {
    format!("redisson_sc:{{{name}}}")
}

#[tokio::test]
async fn set_with_a_ttl_the_counter_expires_and_releases_keep_the_ttl() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("sem-ttl").unwrap();
    let mut listener = Listener::channel(&server, &channel("sem-ttl")).await;

    let ttl = Duration::from_secs(60);
    assert!(sem.try_set_permits_with_ttl(2, ttl).await.unwrap());
    assert_eq!(listener.next().await, (channel("sem-ttl"), "2".to_owned()));
    assert_eq!(server.command(&["GET", "sem-ttl"]), "2");
    let left = pttl(&server, "sem-ttl");
    assert!(left > 50_000 && left <= 60_000, "PTTL {left}");

    // A counter that exists is left as it is, TTL included.
    server.command(&["PEXPIRE", "sem-ttl", "45000"]);
    assert!(!sem.try_set_permits_with_ttl(9, ttl).await.unwrap());
    assert_eq!(server.command(&["GET", "sem-ttl"]), "2");
    assert!(pttl(&server, "sem-ttl") <= 45_000);

    assert!(sem.try_acquire_many(2).await.unwrap());
    sem.release(1).await.unwrap();
    assert_eq!(listener.next().await, (channel("sem-ttl"), "1".to_owned()));
    assert!(pttl(&server, "sem-ttl") > 0, "a release keeps the TTL");

    // Bad TTLs are refused before anything is sent.
    let other = c.semaphore("sem-ttl-bad").unwrap();
    for bad in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        match other.try_set_permits_with_ttl(1, bad).await {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains("sem-ttl-bad") && why.contains("TTL"), "{why}")
            }
            other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(server.command(&["EXISTS", "sem-ttl-bad"]), "0");
    listener.no_more().await;
}

#[tokio::test]
async fn release_if_exists_gives_back_only_to_a_live_semaphore() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("sem-ifexists").unwrap();
    let mut listener = Listener::channel(&server, &channel("sem-ifexists")).await;

    // No counter: nothing is written and no one is told.
    assert!(!sem.release_if_exists(3).await.unwrap());
    assert_eq!(server.command(&["EXISTS", "sem-ifexists"]), "0");
    assert!(sem.release_if_exists(0).await.unwrap(), "0 asks nothing");

    // A live counter: as release, with its message.
    assert!(sem
        .try_set_permits_with_ttl(0, Duration::from_millis(300))
        .await
        .unwrap());
    assert_eq!(
        listener.next().await,
        (channel("sem-ifexists"), "0".to_owned())
    );
    assert!(sem.release_if_exists(2).await.unwrap());
    assert_eq!(
        listener.next().await,
        (channel("sem-ifexists"), "2".to_owned())
    );
    assert_eq!(server.command(&["GET", "sem-ifexists"]), "2");

    // Once the TTL has run out, a late release does not bring the semaphore back.
    eventually(Duration::from_secs(10), "the counter expired", || {
        server.command(&["EXISTS", "sem-ifexists"]) == "0"
    })
    .await;
    assert!(!sem.release_if_exists(1).await.unwrap());
    assert_eq!(server.command(&["EXISTS", "sem-ifexists"]), "0");
    listener.no_more().await;

    // A key of another type is an error that names the semaphore, and stays as it was.
    server.command(&["RPUSH", "sem-ifexists", "x"]);
    match sem.release_if_exists(1).await {
        Err(Error::WrongType { name }) => assert_eq!(name, "sem-ifexists"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_eq!(server.command(&["LLEN", "sem-ifexists"]), "1");
}

/// The blocking twins of both calls.
#[cfg(feature = "blocking")]
#[test]
fn blocking_twins_set_with_a_ttl_and_release_if_exists() {
    let server = RedisServer::start();
    let url = server.url();
    let c = redisson_lock::blocking::LockClient::connect(&url).unwrap();
    let sem = c.semaphore("sem-ttl-blocking").unwrap();
    assert!(!sem.release_if_exists(1).unwrap());
    assert!(sem
        .try_set_permits_with_ttl(1, Duration::from_secs(30))
        .unwrap());
    assert!(sem.release_if_exists(1).unwrap());
    assert_eq!(server.command(&["GET", "sem-ttl-blocking"]), "2");
    assert!(pttl(&server, "sem-ttl-blocking") > 0);
    c.shutdown();
}
