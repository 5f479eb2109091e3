//! Check 2, the permissions of the connecting user: for each lock kind and synchronizer, the
//! commands, keys and channels `docs/operations.md` lists, tried with `ACL DRYRUN` (Redis
//! 7.0 and later) on the names of one probe lock; before 7.0, the user's rules as
//! `ACL GETUSER` shows them, which the doctor cannot try command by command.

use super::finding::{doc, Finding, Severity};
use super::node::{text, Node};
use super::server::Server;

/// Which deployment the user's commands go to: the replica check, Sentinel's `ROLE` and the
/// cluster's commands apply to one each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Single,
    Sentinel,
    Cluster,
}

/// One feature and what it sends: commands with their arguments, whose keys and channels
/// are named after the probe lock.
struct Feature {
    check: &'static str,
    /// For the finding: what needs it.
    what: &'static str,
    /// A missing permission here is a problem (every lock needs it) or a warning (only a
    /// kind the services may not use needs it).
    severity: Severity,
    commands: Vec<Vec<String>>,
}

/// A hash-tagged name as the locks build it: `prefix:{name}`, or `prefix:name` when the
/// name has a `{` already (Redisson's `prefixName`; the library's `base/keys.rs`).
fn tagged(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The name between braces, unless it has a `{` already (Redisson's `suffixName`).
fn braced(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

fn command(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).collect()
}

/// `EVALSHA` of a script with `keys` (the sha is never run: ACL DRYRUN only checks it).
fn evalsha(keys: &[&str]) -> Vec<String> {
    let mut words = vec![
        "EVALSHA".to_string(),
        "0".repeat(40),
        keys.len().to_string(),
    ];
    words.extend(keys.iter().map(|key| key.to_string()));
    words
}

/// Each of `commands` on `key`, with arguments of the right number (ACL DRYRUN checks them).
fn on(key: &str, commands: &[&str]) -> Vec<Vec<String>> {
    commands
        .iter()
        .map(|name| {
            let rest: &[&str] = match *name {
                "HEXISTS" | "HGET" | "HDEL" | "HMGET" => &["doctor"],
                "HINCRBY" | "HSET" => &["doctor", "1"],
                "PEXPIRE" => &["30000"],
                "PEXPIREAT" | "INCRBY" | "DECRBY" => &["1"],
                "SET" => &["1", "PX", "1000"],
                "RPUSH" | "LPUSH" => &["doctor"],
                "LINDEX" => &["0"],
                "LRANGE" | "ZRANGE" => &["0", "-1"],
                "LREM" => &["0", "doctor"],
                "ZADD" | "ZINCRBY" => &["1", "doctor"],
                "ZREM" | "ZSCORE" => &["doctor"],
                "ZRANGEBYSCORE" => &["0", "1"],
                _ => &[],
            };
            let mut words = vec![name.to_string(), key.to_string()];
            words.extend(rest.iter().map(|word| word.to_string()));
            words
        })
        .collect()
}

/// What every feature sends for the lock named `n` (the services' name prefix applied).
fn features(n: &str, shape: Shape, sharded: bool) -> Vec<Feature> {
    let channel = tagged("redisson_lock__channel", n);
    let latch = format!("{}:doctor", tagged("redisson_unlock_latch", n));
    let queue = tagged("redisson_lock_queue", n);
    let timeouts = tagged("redisson_lock_timeout", n);
    let left = format!("{}:doctor:1", tagged("redisson_lock_left", n));
    let took = format!("{}:doctor", tagged("redisson_lock_took", n));
    let token = tagged("redisson_lock_token", n);
    let rw_channel = tagged("redisson_rwlock", n);
    let read_timeout = format!("{}:doctor:rwlock_timeout:1", braced(n));
    let sc_channel = tagged("redisson_sc", n);
    let sc_attempt = format!("{}:doctor:1", tagged("redisson_sc_attempt", n));
    let leases = format!("{}:timeout", braced(n));
    let latch_channel = format!("redisson_countdownlatch__channel__{{{n}}}");
    let latch_record = format!("redisson_countdownlatch_attempt:{{{n}}}:doctor:1");
    let publish = if sharded { "SPUBLISH" } else { "PUBLISH" };
    let subscribe = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
    let mut all = vec![
        Feature {
            check: "permissions.connecting",
            what: "connecting (the driver reads the server's version)",
            severity: Severity::Warning,
            commands: vec![
                command(&["PING"]),
                command(&["CLIENT", "ID"]),
                command(&["INFO", "server"]),
            ],
        },
        Feature {
            check: "permissions.locks",
            what: "every kind of lock (its scripts, their reads and writes, its unlock message)",
            severity: Severity::Problem,
            commands: [
                vec![
                    evalsha(&[n, &channel, &latch]),
                    command(&["SCRIPT", "LOAD", "return 1"]),
                    command(&["TIME"]),
                    command(&[publish, &channel, "0"]),
                ],
                on(
                    n,
                    &[
                        "EXISTS", "HEXISTS", "HGET", "HINCRBY", "HSET", "HDEL", "HLEN",
                    ],
                ),
                on(n, &["PEXPIRE", "PTTL", "DEL"]),
                on(&latch, &["SET", "GET", "DEL"]),
            ]
            .concat(),
        },
        Feature {
            check: "permissions.waiting",
            what: "waiting for a lock (its unlock messages)",
            severity: Severity::Problem,
            commands: vec![command(&[subscribe, &channel])],
        },
        Feature {
            check: "permissions.unlock_latches",
            what: "deleting the unlock latches of releases",
            severity: Severity::Warning,
            commands: vec![command(&["UNLINK", &latch])],
        },
        Feature {
            check: "permissions.fair_lock",
            what: "fair locks (their queue, deadlines and records)",
            severity: Severity::Warning,
            commands: [
                vec![evalsha(&[n, &queue, &timeouts, &channel, &left, &took])],
                on(
                    &queue,
                    &["RPUSH", "LINDEX", "LRANGE", "LREM", "LPOP", "DEL"],
                ),
                on(
                    &timeouts,
                    &["ZADD", "ZINCRBY", "ZRANGE", "ZREM", "ZSCORE", "DEL"],
                ),
                on(&left, &["SET", "GET", "EXISTS", "DEL"]),
                on(&took, &["SET", "GET", "DEL"]),
            ]
            .concat(),
        },
        Feature {
            check: "permissions.fenced_lock",
            what: "fenced locks (their token counter)",
            severity: Severity::Warning,
            commands: [
                vec![evalsha(&[n, &channel, &token])],
                on(&token, &["INCR", "GET"]),
            ]
            .concat(),
        },
        Feature {
            check: "permissions.read_write_lock",
            what: "read-write locks (their readers' timeouts and channel)",
            severity: Severity::Warning,
            commands: [
                vec![
                    evalsha(&[n, &rw_channel, &read_timeout]),
                    command(&[publish, &rw_channel, "0"]),
                    command(&[subscribe, &rw_channel]),
                ],
                on(n, &["HKEYS", "HMGET", "TYPE", "PEXPIREAT"]),
                on(&read_timeout, &["SET", "PEXPIRE", "PTTL", "DEL"]),
            ]
            .concat(),
        },
        Feature {
            check: "permissions.semaphore",
            what: "semaphores (their count, channel and acquisition records)",
            severity: Severity::Warning,
            commands: [
                vec![
                    evalsha(&[n, &sc_channel, &sc_attempt]),
                    command(&[publish, &sc_channel, "1"]),
                    command(&[subscribe, &sc_channel]),
                ],
                on(n, &["GET", "SET", "EXISTS", "INCRBY", "DECRBY", "DEL"]),
                on(&sc_attempt, &["SET", "GET", "DEL"]),
            ]
            .concat(),
        },
        Feature {
            check: "permissions.permit_expirable_semaphore",
            what: "permit-expirable semaphores (their count, leases and channel)",
            severity: Severity::Warning,
            commands: [
                vec![evalsha(&[n, &leases, &sc_channel])],
                on(
                    &leases,
                    &["ZADD", "ZRANGE", "ZCARD", "ZSCORE", "ZRANGEBYSCORE", "ZREM"],
                ),
                on(&leases, &["PEXPIRE", "PTTL", "DEL"]),
            ]
            .concat(),
        },
        Feature {
            check: "permissions.count_down_latch",
            what: "count-down latches (their count, channel and records)",
            severity: Severity::Warning,
            commands: [
                vec![
                    evalsha(&[n, &latch_channel, &latch_record]),
                    command(&[publish, &latch_channel, "0"]),
                    command(&[subscribe, &latch_channel]),
                ],
                on(n, &["GET", "SET", "DECR", "DEL"]),
                on(&latch_record, &["SET", "GET", "DEL"]),
            ]
            .concat(),
        },
    ];
    match shape {
        Shape::Single | Shape::Sentinel => all.push(Feature {
            check: "permissions.replica_check",
            what: "the replica check after each write (on by default)",
            severity: Severity::Problem,
            commands: vec![
                command(&["INFO", "replication"]),
                command(&["WAIT", "0", "1"]),
            ],
        }),
        Shape::Cluster => all.push(Feature {
            check: "permissions.cluster",
            what: "following the cluster's slots and redirections",
            severity: Severity::Problem,
            commands: vec![
                command(&["CLUSTER", "SLOTS"]),
                command(&["CLUSTER", "NODES"]),
                command(&["ASKING"]),
            ],
        }),
    }
    if shape == Shape::Sentinel {
        all.push(Feature {
            check: "permissions.sentinel",
            what: "checking that the server the Sentinels name is a master",
            severity: Severity::Problem,
            commands: vec![command(&["ROLE"])],
        });
    }
    all
}

/// One thing a refusal says to grant: `+command`, `~key` or `&channel`.
fn grant(refusal: &str) -> Option<String> {
    // Redis 7: "This user has no permissions to run the 'pexpire' command", "... to access
    // the 'x' key", "... the 'c' channel".
    let start = refusal.find('\'')? + 1;
    let end = start + refusal[start..].find('\'')?;
    let named = &refusal[start..end];
    let kind = refusal[end + 1..].trim();
    if kind.starts_with("command") {
        Some(format!("+{}", named.to_ascii_lowercase()))
    } else if kind.starts_with("key") {
        Some(format!("~{named}"))
    } else if kind.starts_with("channel") {
        Some(format!("&{named}"))
    } else {
        None
    }
}

/// The user the connection is logged in as: `ACL WHOAMI`, else the URL's, else `default`.
pub(crate) async fn user(node: &Node, url_user: Option<&str>) -> String {
    match node.text(&["ACL", "WHOAMI"]).await {
        Ok(user) if !user.is_empty() => user,
        _ => url_user.unwrap_or("default").to_string(),
    }
}

/// The permission findings for `user` on `node`, trying the names of the lock `name`.
pub(crate) async fn check(
    node: &Node,
    server: Option<&Server>,
    user: &str,
    name: &str,
    shape: Shape,
) -> Vec<Finding> {
    let sharded = shape == Shape::Cluster && server.is_some_and(Server::has_7_0);
    match server {
        Some(server) if !server.has_7_0() => return before_dryrun(node, user).await,
        None => {
            return vec![Finding::unknown(
                "permissions.unknown",
                format!(
                    "the permissions of user {user:?} are unknown: the server's version is \
                     unknown, so the doctor cannot tell whether it has ACL DRYRUN"
                ),
                "let the user run INFO or HELLO, then run the doctor again".into(),
                doc::PERMISSIONS,
            )]
        }
        _ => {}
    }
    let mut findings = Vec::new();
    for feature in features(name, shape, sharded) {
        let mut grants: Vec<String> = Vec::new();
        let mut refused: Vec<String> = Vec::new();
        for words in &feature.commands {
            let mut args = vec!["ACL", "DRYRUN", user];
            args.extend(words.iter().map(String::as_str));
            let reply = match node.call(&args).await {
                Ok(reply) => text(&reply),
                Err(error) if error.starts_with("NOPERM") || error.contains("no permissions") => {
                    return vec![Finding::unknown(
                        "permissions.unknown",
                        format!(
                            "the permissions of user {user:?} are unknown: it may not run ACL \
                             DRYRUN ({error})"
                        ),
                        format!(
                            "grant it +acl|dryrun (ACL SETUSER {user} +acl|dryrun), or compare \
                             its rules (ACL GETUSER {user}, run by an administrator) with the \
                             least-privilege user in the documentation"
                        ),
                        doc::PERMISSIONS,
                    )];
                }
                // An error about the command itself (a server without SPUBLISH, say).
                Err(error) => error,
            };
            if reply == "OK" {
                continue;
            }
            match grant(&reply) {
                Some(what) => {
                    if !grants.contains(&what) {
                        grants.push(what);
                    }
                }
                None => refused.push(format!("{}: {reply}", words.join(" "))),
            }
        }
        findings.push(finding(&feature, user, name, grants, refused));
    }
    findings
}

/// The finding of one feature, from what ACL DRYRUN refused.
fn finding(
    feature: &Feature,
    user: &str,
    name: &str,
    grants: Vec<String>,
    refused: Vec<String>,
) -> Finding {
    if grants.is_empty() && refused.is_empty() {
        return Finding::fine(
            feature.check,
            format!(
                "user {user:?} may run what {} needs, on the keys and channels of a lock \
                 named {name:?}",
                feature.what
            ),
            doc::PERMISSIONS,
        );
    }
    let mut what = format!(
        "user {user:?} may not run all that {} needs, for a lock named {name:?}",
        feature.what
    );
    if !grants.is_empty() {
        what.push_str(&format!(": missing {}", grants.join(" ")));
    }
    if !refused.is_empty() {
        what.push_str(&format!("; refused: {}", refused.join("; ")));
    }
    let patterns = grants.iter().any(|grant| !grant.starts_with('+'));
    let advice = match (grants.is_empty(), patterns) {
        (true, _) => "compare the user's rules with the least-privilege user in the \
                      documentation"
            .to_string(),
        (false, false) => format!("ACL SETUSER {user} {}", grants.join(" ")),
        (false, true) => format!(
            "ACL SETUSER {user} {}; for every lock, the same patterns with your names' prefix \
             and * in place of {name:?}, as the least-privilege user in the documentation",
            grants.join(" ")
        ),
    };
    Finding {
        severity: feature.severity,
        check: feature.check,
        what,
        advice,
        doc: doc::PERMISSIONS,
    }
}

/// Before Redis 7.0 there is no ACL DRYRUN: the user's rules, where `ACL GETUSER` may be
/// read, to compare with the documentation; otherwise why they are unknown.
async fn before_dryrun(node: &Node, user: &str) -> Vec<Finding> {
    let what = match node.call(&["ACL", "GETUSER", user]).await {
        Ok(reply) => {
            let rules = super::node::fields(&reply);
            let flags = rules.get("flags").map_or("", String::as_str);
            let all = ["allcommands", "allkeys", "allchannels"];
            if all.iter().all(|flag| flag_set(flags, flag)) {
                // Every command on every key and channel: nothing is left to try.
                return vec![Finding::fine(
                    "permissions.all",
                    format!(
                        "user {user:?} may run every command on every key and channel (ACL \
                         GETUSER flags: {})",
                        flags.replace('\n', " ")
                    ),
                    doc::PERMISSIONS,
                )];
            }
            let shown: Vec<String> = ["flags", "commands", "keys", "channels"]
                .iter()
                .filter_map(|field| {
                    Some(format!(
                        "{field}: {}",
                        rules.get(*field)?.replace('\n', " ")
                    ))
                })
                .collect();
            format!(
                "the permissions of user {user:?} were not tried: the server has no ACL DRYRUN \
                 (Redis 7.0); its rules, from ACL GETUSER, are {}",
                shown.join("; ")
            )
        }
        Err(error) => format!(
            "the permissions of user {user:?} are unknown: the server has no ACL DRYRUN (Redis \
             7.0) and ACL GETUSER was refused ({error})"
        ),
    };
    vec![Finding::unknown(
        "permissions.unknown",
        what,
        "compare the user's rules with the least-privilege user in the documentation".into(),
        doc::PERMISSIONS,
    )]
}

/// Whether `flag` is among ACL GETUSER's `flags` (one a line, as the reply is read).
fn flag_set(flags: &str, flag: &str) -> bool {
    flags.split_whitespace().any(|set| set == flag)
}

#[cfg(test)]
mod tests {
    use super::{grant, tagged};

    #[test]
    fn reads_refusals() {
        let command = "This user has no permissions to run the 'pexpire' command";
        assert_eq!(grant(command).as_deref(), Some("+pexpire"));
        let key = "This user has no permissions to access the 'x' key";
        assert_eq!(grant(key).as_deref(), Some("~x"));
        let channel =
            "This user has no permissions to access the 'redisson_lock__channel:{x}' channel";
        assert_eq!(
            grant(channel).as_deref(),
            Some("&redisson_lock__channel:{x}")
        );
        assert_eq!(grant("ERR unknown"), None);
        assert_eq!(tagged("redisson_sc", "a{b}"), "redisson_sc:a{b}");
    }
}
