//! A command refused inside a lock script (an ACL user without one of the commands the script
//! writes with, or without one of its keys): Redis does not roll a script back, so each script
//! finds out before its first write, fails saying that nothing was written, and leaves every
//! key of the lock as it was. Above all no hold is left without a TTL, which would be a lock
//! held forever.

mod support;

use std::time::Duration;

use redisson_lock::{Error, LockClient};
use support::server::has_redis_7;
use support::workload::{acquire, Kind};
use support::*;

/// Makes (or remakes) the user `name`: every command, key and channel, then `rules`.
fn user(server: &RedisServer, name: &str, rules: &[&str]) -> String {
    let mut acl = vec!["ACL", "SETUSER", name, "reset", "on", ">pw"];
    acl.extend(["~*", "&*", "+@all"]);
    acl.extend(rules);
    assert_eq!(server.command(&acl), "OK", "{acl:?}");
    format!("redis://{name}:pw@127.0.0.1:{}", server.port())
}

/// Changes the user `name`'s rights in place: its connections follow at once.
fn change(server: &RedisServer, name: &str, rule: &str) {
    assert_eq!(server.command(&["ACL", "SETUSER", name, rule]), "OK");
}

/// A client of `url` whose holds outlive the test (30 s watchdog, renewed every 10 s).
async fn client_of(url: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("connect to the test server")
}

/// Every key of the lock `name` (every key whose name has it) with what it holds (a hash's
/// fields, a list's or a sorted set's members, a string's value) and whether it has a TTL,
/// sorted by key. (The latch cleaner deletes the unlock latches of other, dropped handles
/// meanwhile.)
fn keys(server: &RedisServer, name: &str) -> Vec<(String, String, bool)> {
    let mut names: Vec<String> = server
        .command(&["KEYS", "*"])
        .lines()
        .filter(|line| line.contains(name))
        .map(String::from)
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|key| {
            let content = match server.command(&["TYPE", &key]).as_str() {
                "hash" => server.command(&["HGETALL", &key]),
                "list" => server.command(&["LRANGE", &key, "0", "-1"]),
                "zset" => server.command(&["ZRANGE", &key, "0", "-1"]),
                _ => server.command(&["GET", &key]),
            };
            let expires = pttl(server, &key) > 0;
            (key, content, expires)
        })
        .collect()
}

/// The keys that have no TTL: nothing would ever remove them. The fenced lock's token
/// counter is meant to live forever (its tokens only grow).
fn immortal(server: &RedisServer) -> Vec<String> {
    let keys = keys(server, "")
        .into_iter()
        .filter(|(_, _, expires)| !expires);
    keys.map(|(key, _, _)| key)
        .filter(|key| !key.starts_with("redisson_lock_token:"))
        .collect()
}

/// Asserts that `result` is the refusal of a script that says it wrote nothing: in its own
/// words (`NOPERM`, when it asked before its first write), or in the server's (when that
/// write was refused: Redis says the user "can't run this command", Valkey that it "has no
/// permissions to run" it).
fn refused_before_writing<T>(result: redisson_lock::Result<T>, what: &str) {
    match result {
        Err(e @ Error::Redis(_)) => {
            let text = e.to_string();
            let refused = [
                "NOPERM",
                "can't run this command",
                "has no permissions to run",
            ]
            .iter()
            .any(|words| text.contains(words));
            assert!(
                refused && text.contains("nothing was written"),
                "{what}: {text}"
            );
            assert!(!e.is_retryable(), "{what}: {text}");
        }
        Err(other) => panic!("{what}: {other}"),
        Ok(_) => panic!("{what}: not refused"),
    }
}

/// Whether the server lets a script ask what the user may run (`redis.acl_check_cmd`, Redis
/// 7.0+); says the test is skipped when not. Before 7.0 a refusal after the first write leaves
/// that write, never a key without a TTL (see the test without it below).
fn asks_before_writing(test: &str) -> bool {
    has_redis_7(test, "redis.acl_check_cmd")
}

/// A server for `test` where a script asks before it writes; none (the test is skipped)
/// where it cannot.
fn server_asking_before_writes(test: &str) -> Option<RedisServer> {
    asks_before_writing(test).then(RedisServer::start)
}

/// The commands each kind's acquire script writes a new hold with.
fn new_hold_writes(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Plain | Kind::Spin => &["hincrby", "pexpire"],
        Kind::Fenced => &["incr", "hincrby", "pexpire"],
        Kind::Fair | Kind::Write => &["hset", "pexpire"],
        Kind::Read => &["hset", "pexpire", "set"],
    }
}

#[tokio::test]
async fn a_new_hold_refused_a_command_it_writes_with_writes_nothing_for_every_kind() {
    let Some(server) = server_asking_before_writes(
        "a_new_hold_refused_a_command_it_writes_with_writes_nothing_for_every_kind",
    ) else {
        return;
    };
    for kind in Kind::ALL {
        for command in new_hold_writes(kind) {
            let name = format!("no-{command}");
            let c = client_of(&user(&server, &name, &[&format!("-{command}")])).await;
            let what = format!("{kind:?} without {command}");
            let lock = format!("fresh-{kind:?}-{command}");
            let result = acquire(&c, &c.new_owner(), kind, &lock, Some(Duration::ZERO)).await;
            assert_eq!(keys(&server, ""), [], "{what}");
            refused_before_writing(result, &what);
            c.shutdown().await;
        }
    }
    // The same for the non-reentrant kinds, which send the same scripts with one argument
    // more.
    let url = user(&server, "no-ttl", &["-pexpire"]);
    let c = client_of(&url).await;
    let plain = c.non_reentrant_lock("fresh-nr").unwrap();
    refused_before_writing(plain.try_lock(&c.new_owner()).await, "non-reentrant");
    let fair = c.non_reentrant_fair_lock("fresh-nr-fair").unwrap();
    refused_before_writing(fair.try_lock(&c.new_owner()).await, "non-reentrant fair");
    assert_eq!(keys(&server, ""), []);

    // A user that may use the keys a read acquisition names (the hash, the readers' key
    // prefix) but not the reader's timeout key, which the script makes from them. (Redis
    // refuses a script that names a key the user may not use before it runs.)
    let url = user(&server, "hash-only", &["resetkeys", "~only-*", "~{only-*}"]);
    let c = client_of(&url).await;
    let result = acquire(
        &c,
        &c.new_owner(),
        Kind::Read,
        "only-rw",
        Some(Duration::ZERO),
    )
    .await;
    assert_eq!(keys(&server, ""), []);
    refused_before_writing(result, "a reader without its timeout key");
}

/// The commands each kind's acquire script writes with when the owner holds the lock already
/// (a re-entry; for the read side, another reader joining).
fn re_entry_writes(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Plain | Kind::Spin | Kind::Fair | Kind::Write => &["hincrby", "pexpire"],
        Kind::Fenced => &["incr", "hincrby", "pexpire"],
        Kind::Read => &["hincrby", "pexpire", "set"],
    }
}

#[tokio::test]
async fn a_re_entry_or_a_join_refused_a_command_writes_nothing_for_every_kind() {
    let Some(server) = server_asking_before_writes(
        "a_re_entry_or_a_join_refused_a_command_writes_nothing_for_every_kind",
    ) else {
        return;
    };
    let url = user(&server, "joining", &[]);
    let c = client_of(&url).await;
    for kind in Kind::ALL {
        for command in re_entry_writes(kind) {
            let what = format!("{kind:?} without {command}");
            let lock = format!("held-{kind:?}-{command}");
            let holder = c.new_owner();
            let held = acquire(&c, &holder, kind, &lock, None).await.unwrap();
            // A reader joins another's read hold; the other kinds re-enter.
            let joining = if kind == Kind::Read {
                c.new_owner()
            } else {
                holder
            };
            change(&server, "joining", &format!("-{command}"));
            let before = keys(&server, &lock);
            let result = acquire(&c, &joining, kind, &lock, Some(Duration::ZERO)).await;
            assert_eq!(immortal(&server), Vec::<String>::new(), "{what}");
            assert_eq!(keys(&server, &lock), before, "{what}");
            refused_before_writing(result, &what);
            change(&server, "joining", &format!("+{command}"));
            held.unwrap().unlock().await.unwrap();
        }
    }

    // A fair waiter that cannot join the queue: nothing of it is left in the queue or the
    // deadlines, where no purge would find it.
    let holder = acquire(&c, &c.new_owner(), Kind::Fair, "line", None).await;
    for command in ["rpush", "zadd"] {
        change(&server, "joining", &format!("-{command}"));
        let before = keys(&server, "line");
        let wait = Some(Duration::from_millis(100));
        let result = acquire(&c, &c.new_owner(), Kind::Fair, "line", wait).await;
        assert_eq!(keys(&server, "line"), before, "without {command}");
        refused_before_writing(result, &format!("a fair waiter without {command}"));
        change(&server, "joining", &format!("+{command}"));
    }
    holder.unwrap().unwrap().unlock().await.unwrap();
    assert_eq!(server.command(&["EXISTS", &queue_key("line")]), "0");
    assert_eq!(
        server.command(&["EXISTS", "redisson_lock_timeout:{line}"]),
        "0"
    );
}

/// The commands each kind's release script writes with: a partial release (the owner holds
/// the lock twice; for the read side, twice as well) and one that frees the lock. `set`
/// records the release in its unlock latch.
fn release_writes(kind: Kind, partial: bool) -> &'static [&'static str] {
    match (kind, partial) {
        (Kind::Read, true) => &["set", "hincrby", "del"],
        (_, true) => &["set", "hincrby", "pexpire"],
        (_, false) => &["set", "del"],
    }
}

#[tokio::test]
async fn a_release_refused_a_command_it_writes_with_writes_nothing_for_every_kind() {
    let Some(server) = server_asking_before_writes(
        "a_release_refused_a_command_it_writes_with_writes_nothing_for_every_kind",
    ) else {
        return;
    };
    let url = user(&server, "releasing", &[]);
    let c = client_of(&url).await;
    for kind in Kind::ALL {
        for partial in [true, false] {
            for command in release_writes(kind, partial) {
                let what = format!("{kind:?} without {command} (partial: {partial})");
                let lock = format!("release-{kind:?}-{partial}-{command}");
                let owner = c.new_owner();
                let outer = acquire(&c, &owner, kind, &lock, None)
                    .await
                    .unwrap()
                    .unwrap();
                let inner = if partial {
                    acquire(&c, &owner, kind, &lock, None).await.unwrap()
                } else {
                    None
                };
                change(&server, "releasing", &format!("-{command}"));
                let before = keys(&server, &lock);
                // The outer guard stays until the case is over.
                let (released, kept) = match inner {
                    Some(inner) => (inner, Some(outer)),
                    None => (outer, None),
                };
                let result = released.unlock().await;
                let after = keys(&server, &lock);
                assert_eq!(immortal(&server), Vec::<String>::new(), "{what}");
                // No unlock latch either: the release can be sent again.
                assert_eq!(after, before, "{what}");
                refused_before_writing(result, &what);
                change(&server, "releasing", &format!("+{command}"));
                if let Some(outer) = kept {
                    outer.unlock().await.unwrap();
                }
                assert_eq!(server.command(&["FLUSHALL"]), "OK");
            }
        }
    }
}

/// The script `name` as sent, as a server without `redis.acl_check_cmd` (before Redis 7.0)
/// runs it: the scripts cannot ask beforehand, and rely on the order of their writes.
fn without_acl_check(name: &str) -> String {
    lua(name).replace("redis.acl_check_cmd", "redis.acl_check_cmd_of_redis_7")
}

/// One run of a script as a user refused a command: `setup` (scripts with their keys and
/// arguments) runs first with every right.
struct Case {
    script: &'static str,
    keys: Vec<String>,
    args: Vec<String>,
    setup: Vec<(&'static str, Vec<String>, Vec<String>)>,
    refused: &'static [&'static str],
    /// Whether the refusal is found before anything is written.
    writes_nothing: bool,
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

#[tokio::test]
async fn without_acl_check_cmd_a_refusal_still_leaves_no_key_without_a_ttl() {
    use fred::prelude::{Builder, ClientLike, Config, LuaInterface, Value};
    let server = RedisServer::start();
    let url = user(&server, "old", &[]);
    let old = Builder::from_config(Config::from_url(&url).unwrap())
        .build()
        .unwrap();
    old.init().await.unwrap();
    let (me, other) = ("0f0f0f0f-0000-0000-0000-000000000000:1", "0f0f0f0f-0:2");
    let me_write = format!("{me}:write");
    let now = now_ms().to_string();
    let (lease, wait) = ("30000", "60000");
    let plain = || texts(&["k"]);
    let fenced = || texts(&["k", "redisson_lock_token:{k}"]);
    let fair = || texts(&["k", "redisson_lock_queue:{k}", "redisson_lock_timeout:{k}"]);
    let read = || texts(&["k", "{k}"]);
    let release = || texts(&["k", "redisson_lock__channel:{k}", "latch:{k}"]);
    let take = |owner: &str| texts(&[lease, owner]);
    // A re-entry with a longer lease: its TTL must grow.
    let take_longer = |owner: &str| texts(&["40000", owner]);
    let fair_take = |owner: &str| texts(&[lease, owner, wait, &now, "1"]);
    let write_take = texts(&[lease, &me_write, me]);
    let cases = [
        Case {
            script: "lock_acquire",
            keys: plain(),
            args: take(me),
            setup: vec![],
            refused: &["pexpire", "hincrby"],
            writes_nothing: true,
        },
        Case {
            script: "lock_acquire",
            keys: plain(),
            args: take_longer(me),
            setup: vec![("lock_acquire", plain(), take(me))],
            refused: &["pexpire", "hincrby"],
            writes_nothing: false,
        },
        Case {
            script: "fenced_acquire",
            keys: fenced(),
            args: take(me),
            setup: vec![],
            refused: &["pexpire"],
            writes_nothing: true,
        },
        Case {
            script: "fair_acquire",
            keys: fair(),
            args: fair_take(me),
            setup: vec![],
            refused: &["pexpire"],
            writes_nothing: true,
        },
        Case {
            script: "fair_acquire",
            keys: fair(),
            args: fair_take(me),
            setup: vec![("fair_acquire", fair(), fair_take(other))],
            refused: &["rpush"],
            writes_nothing: true,
        },
        Case {
            script: "read_acquire",
            keys: read(),
            args: take(me),
            setup: vec![],
            refused: &["pexpire", "set"],
            writes_nothing: false,
        },
        Case {
            script: "read_acquire",
            keys: read(),
            args: take_longer(me),
            setup: vec![("read_acquire", read(), take(other))],
            refused: &["pexpire", "hincrby", "set"],
            writes_nothing: false,
        },
        Case {
            script: "write_acquire",
            keys: plain(),
            args: write_take.clone(),
            setup: vec![],
            refused: &["pexpire"],
            writes_nothing: true,
        },
        Case {
            script: "write_acquire",
            keys: plain(),
            args: write_take.clone(),
            setup: vec![("write_acquire", plain(), write_take.clone())],
            refused: &["pexpire", "hincrby"],
            writes_nothing: false,
        },
        Case {
            script: "lock_release",
            keys: release(),
            args: texts(&["0", lease, me, "publish", "10000", "1"]),
            setup: vec![
                ("lock_acquire", plain(), take(me)),
                ("lock_acquire", plain(), take(me)),
            ],
            refused: &["pexpire", "hincrby"],
            writes_nothing: false,
        },
        Case {
            script: "lock_release",
            keys: release(),
            args: texts(&["0", lease, me, "publish", "10000", "1"]),
            setup: vec![("lock_acquire", plain(), take(me))],
            refused: &["del"],
            writes_nothing: false,
        },
    ];
    for case in cases {
        for refused in case.refused {
            let what = format!("{} without {refused} after {:?}", case.script, case.setup);
            for (script, keys, args) in &case.setup {
                let mut eval = vec!["EVAL".to_string(), lua(script), keys.len().to_string()];
                eval.extend(keys.iter().chain(args).cloned());
                let eval: Vec<&str> = eval.iter().map(String::as_str).collect();
                let reply = server.command(&eval);
                assert!(!reply.starts_with("ERR"), "{what}: {reply}");
            }
            let before = keys(&server, "");
            change(&server, "old", &format!("-{refused}"));
            let script = without_acl_check(case.script);
            let result = old
                .eval::<Value, _, _, _>(script, case.keys.clone(), case.args.clone())
                .await;
            assert!(result.is_err(), "{what}: {result:?}");
            assert_eq!(immortal(&server), Vec::<String>::new(), "{what}");
            if case.writes_nothing {
                assert_eq!(keys(&server, ""), before, "{what}");
            }
            change(&server, "old", &format!("+{refused}"));
            assert_eq!(server.command(&["FLUSHALL"]), "OK");
        }
    }
}

#[tokio::test]
async fn a_force_release_refused_its_delete_leaves_the_hold_as_it_was() {
    let Some(server) =
        server_asking_before_writes("a_force_release_refused_its_delete_leaves_the_hold_as_it_was")
    else {
        return;
    };
    let url = user(&server, "forcing", &[]);
    let c = client_of(&url).await;
    for kind in Kind::ALL {
        let lock = format!("forced-{kind:?}");
        let held = acquire(&c, &c.new_owner(), kind, &lock, None).await;
        let held = held.unwrap().unwrap();
        change(&server, "forcing", "-del");
        let before = keys(&server, &lock);
        let result = match kind {
            Kind::Plain => c.lock(&lock).unwrap().force_unlock().await,
            Kind::Fair => c.fair_lock(&lock).unwrap().force_unlock().await,
            Kind::Fenced => c.fenced_lock(&lock).unwrap().force_unlock().await,
            Kind::Spin => c.spin_lock(&lock).unwrap().force_unlock().await,
            Kind::Write => c.read_write_lock(&lock).unwrap().force_unlock_write().await,
            Kind::Read => c.read_write_lock(&lock).unwrap().force_unlock_read().await,
        };
        assert_eq!(keys(&server, &lock), before, "{kind:?}");
        refused_before_writing(result, &format!("{kind:?} force release without del"));
        change(&server, "forcing", "+del");
        held.unlock().await.unwrap();
    }
}
