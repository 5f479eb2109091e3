//! The crate's one error type.

use std::borrow::Cow;

use fred::error::{Error as RedisError, ErrorKind};

use crate::base::owner::LockOwner;

/// Everything that can go wrong in this crate.
///
/// "The lock is busy" and "the wait ran out" are not errors: the `try_*` methods return
/// `Ok(None)` for them.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached, or answered with an error. When this comes from an
    /// acquire or release, the command may or may not have run on the server; see
    /// [`Error::is_retryable`]. On a single server, a call made while the server refuses
    /// connections gets [`Error::Unreachable`] instead.
    #[error("{}", describe(.0))]
    Redis(#[source] RedisError),

    /// The client could not connect when it was built: nothing answered at the address, the
    /// server refused the credentials, the connection did not come up in time, or the
    /// server of a TLS URL answers in plain text.
    ///
    /// Or, on a single server, a call made while the client's connection is down (the
    /// server stopped or restarts) found that the server refuses connections: the call
    /// fails at once instead of waiting for the command timeout, and the client keeps
    /// reconnecting. A call that had sent nothing yet sent nothing; one whose command was
    /// on the connection when it dropped may or may not have run, as with
    /// [`Error::Redis`].
    #[error("cannot connect to Redis at {server}: {}", describe_connect(.source, .server))]
    Unreachable {
        /// The server (or servers) the client was configured with; for a refusal after the
        /// client was built, the server that refused.
        server: String,
        /// What the driver reported.
        source: RedisError,
    },

    /// The owner does not hold the lock: it never did, or its lease ran out, or someone
    /// force-unlocked it. Redisson reports the same case as `IllegalMonitorStateException`.
    #[error("lock {name:?} is not held by {owner}")]
    NotHeld {
        /// The lock's name as the caller gave it.
        name: String,
        /// The owner that tried to release it.
        owner: LockOwner,
    },

    /// A key of the lock, semaphore or count-down latch exists in Redis but holds another
    /// type (for example a string or a list stored under a lock's name, its queue or its
    /// token, or a hash under a semaphore's or a latch's name).
    #[error("lock, semaphore or latch {name:?}: one of its keys holds another type")]
    WrongType {
        /// The lock's or semaphore's name as the caller gave it.
        name: String,
    },

    /// An owner tried to take again a non-reentrant lock it already holds, or a read-write
    /// lock refused an upgrade from read to write.
    #[error("{0}")]
    WouldDeadlock(Cow<'static, str>),

    /// An argument was rejected where it was given, before anything was sent: an empty
    /// lock name or member list, a fixed lease under 1 ms or over
    /// [`Lease::MAX_FIXED`](crate::Lease::MAX_FIXED), a wait too long to represent, or a bad
    /// configuration value.
    #[error("invalid argument: {0}")]
    InvalidArgument(Cow<'static, str>),

    /// A script answered with a shape this crate does not expect. This points at a key
    /// modified by something that does not follow the lock protocol.
    #[error("unexpected reply from {script}: {detail}")]
    UnexpectedReply {
        /// The script that answered.
        script: &'static str,
        /// What came back.
        detail: String,
    },

    /// The master of the lock (or semaphore, or latch) has replicas, but none confirmed the
    /// write within the replica
    /// wait timeout (see
    /// [`LockClientBuilder::wait_for_replicas`](crate::LockClientBuilder::wait_for_replicas)).
    /// An acquisition was undone (the owner does not hold the lock); a release did happen
    /// on the master, but a failover now could bring the hold back until its lease ends.
    /// Redisson reports this as `NoSyncedSlavesException`.
    #[error("{name:?}: no replica confirmed the write within {timeout:?}")]
    NotReplicated {
        /// The lock's, semaphore's or latch's name as the caller gave it.
        name: String,
        /// How long the replicas were given.
        timeout: std::time::Duration,
    },

    /// The [`LockClient`](crate::LockClient) was shut down.
    #[error("the lock client was shut down")]
    Closed,

    /// A permit-expirable semaphore does not hold the permit named: it was never taken
    /// there, was released already, or its lease ran out. Redisson reports the same case as
    /// `IllegalArgumentException`.
    #[error("permit-expirable semaphore {name:?}: permit {id} {}", if *.expired {
        "was not held any more: its lease had run out before this release (the permit went back to the pool all the same)"
    } else {
        "is not held: never taken there, released already, or its lease ran out and it went back to the pool"
    })]
    PermitNotHeld {
        /// The semaphore's name as the caller gave it.
        name: String,
        /// The permit's id, in hex.
        id: String,
        /// Its lease had run out, but no one had returned it to the pool yet: it was now.
        expired: bool,
    },
}

/// A driver error in words: what failed and why, never a debug dump.
fn describe(error: &RedisError) -> String {
    let details = error.details();
    if not_resp(error) {
        return "the server does not speak the Redis protocol (its reply is not RESP): is the \
            port right? A TLS port needs a rediss:// URL"
            .into();
    }
    if details.starts_with("NOAUTH") {
        return format!(
            "Redis requires a password and none was given: put it in the URL \
             (redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port) ({details})"
        );
    }
    match error.kind() {
        ErrorKind::IO => format!("the connection to Redis failed: {}", io_words(details)),
        ErrorKind::Timeout => {
            "Redis did not answer within the command timeout (it may be down, unreachable or \
             overloaded; the client keeps reconnecting)"
                .into()
        }
        ErrorKind::Canceled => format!("the command was canceled: {details}"),
        ErrorKind::Auth => format!("Redis refused the credentials: {details}"),
        ErrorKind::Url => format!("the URL is not usable: {details}"),
        #[cfg(feature = "tls")]
        ErrorKind::Tls => format!("the TLS connection failed: {details}"),
        _ => format!("Redis answered with an error: {details}"),
    }
}

/// Whether the driver could not read the server's reply as RESP: the server speaks another
/// protocol (HTTP, TLS, ...).
fn not_resp(error: &RedisError) -> bool {
    let details = error.details();
    matches!(error.kind(), ErrorKind::Protocol | ErrorKind::Parse)
        && (details.contains("Invalid frame type") || details.starts_with("Decode Error"))
        || details.contains("frame_type: Invalid frame type")
}

/// [`describe`] for a first connection, with a hint where the cause is a likely one.
fn describe_connect(error: &RedisError, server: &str) -> String {
    let tls = server.ends_with("(TLS)");
    match error.kind() {
        ErrorKind::IO => io_words(error.details()),
        ErrorKind::Timeout if tls => "no answer within the command timeout; a TLS \
            (rediss://) connection to a server that does not speak TLS fails this way"
            .into(),
        ErrorKind::Timeout => "no answer within the command timeout".into(),
        _ => describe(error),
    }
}

/// An I/O error's reason in words (the driver gives it in debug form).
fn io_words(details: &str) -> String {
    let known = [
        (
            "ConnectionRefused",
            "connection refused: nothing listens at that address",
        ),
        (
            "ConnectionReset",
            "the connection was reset by the server or the network",
        ),
        ("ConnectionAborted", "the connection was aborted"),
        ("NotConnected", "not connected"),
        ("BrokenPipe", "the connection was closed by the server"),
        ("TimedOut", "the connection timed out"),
        ("HostUnreachable", "the host is unreachable"),
        ("NetworkUnreachable", "the network is unreachable"),
        ("AddrNotAvailable", "the address is not available"),
        ("UnexpectedEof", "the server closed the connection"),
    ];
    match known.iter().find(|(kind, _)| details.contains(kind)) {
        Some((_, words)) => (*words).to_owned(),
        None => details.to_owned(),
    }
}

impl From<RedisError> for Error {
    fn from(error: RedisError) -> Error {
        match refusal(&error) {
            Some((server, io)) => Error::Unreachable {
                server: server.to_owned(),
                source: RedisError::new(ErrorKind::IO, io.to_owned()),
            },
            None => Error::Redis(error),
        }
    }
}

/// How the driver error of a call the server refused begins (the single server's link makes
/// it; see `topology/link.rs`); the server's address follows, then a line with the I/O error.
pub(crate) const REFUSED: &str = "connection refused by ";

/// The server and the I/O error of a driver error made for a refusal (see [`REFUSED`]).
fn refusal(error: &RedisError) -> Option<(&str, &str)> {
    let rest = error.details().strip_prefix(REFUSED)?;
    Some(rest.split_once('\n').unwrap_or((rest, "")))
}

/// Whether fred refused to follow a redirection (`MOVED` or `ASK`): the command did not run.
pub(crate) fn is_redirected(error: &RedisError) -> bool {
    *error.kind() == ErrorKind::Routing && error.details() == "Too many redirections."
}

/// Whether a cluster node refused a command whose keys a slot's migration keeps apart (some
/// moved, some not yet): it did not run.
pub(crate) fn is_try_again(error: &RedisError) -> bool {
    error.details().starts_with("TRYAGAIN")
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the failure is transient: the connection dropped, a command timed out, or
    /// Redis is loading, failing over or refusing writes for a moment. Trying the same call
    /// again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Redis(e) | Error::Unreachable { source: e, .. } => is_transient(e),
            Error::NotReplicated { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Error::InvalidArgument(message.into())
    }

    pub(crate) fn not_held(name: &str, owner: &LockOwner) -> Self {
        Error::NotHeld {
            name: name.to_owned(),
            owner: owner.clone(),
        }
    }
}

/// Turns a fred error into ours; a key of the wrong type is named by the lock's `name`.
pub(crate) fn map_redis_error(error: RedisError, name: &str) -> Error {
    if is_wrong_type(&error) {
        Error::WrongType {
            name: name.to_owned(),
        }
    } else {
        Error::from(error)
    }
}

/// Whether a fred error leaves Redis in a state worth trying again soon.
pub(crate) fn is_transient(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::Backpressure => true,
        _ => {
            let details = error.details();
            let words = server_words(details);
            [
                "LOADING",
                "MASTERDOWN",
                "READONLY",
                "CLUSTERDOWN",
                "BUSY",
                // A WAIT ended by its master's demotion: a failover is under way.
                "UNBLOCKED",
            ]
            .iter()
            .any(|prefix| words.starts_with(prefix))
                || details.contains("Too many failed write attempts")
                // A WAIT sent to a master demoted meanwhile: a failover is under way.
                || details.contains("WAIT cannot be used with replica")
                // A redirection not followed, or keys split by a migration: it did not run.
                || is_redirected(error)
                || is_try_again(error)
                // A script the server kept losing for a whole command timeout: it did not run.
                || is_noscript(error)
                || details.contains("Connection closed")
                // fred between a dropped connection and its replacement.
                || details.contains("Failed to route command")
        }
    }
}

/// An error reply as the server first worded it. Redis before 7.0 wraps an error that a
/// command raised inside a script: `ERR Error running script (call to f_<sha>):
/// @user_script:12: @user_script: 12: -READONLY You can't write against a read only
/// replica.`; from 7.0 the command's words come first (`READONLY You can't write against a
/// read only replica. script: <sha>, on @user_script:12.`), as they do outside scripts.
pub(crate) fn server_words(details: &str) -> &str {
    let Some(wrapped) = details.strip_prefix("ERR Error running script") else {
        return details;
    };
    let Some((_, mut rest)) = wrapped.split_once("): ") else {
        return details;
    };
    // Then where it was raised, once or twice: `@user_script:12: ` or `@user_script: 12: `.
    while let Some(after) = strip_place(rest) {
        rest = after;
    }
    rest.strip_prefix('-').unwrap_or(rest)
}

/// `text` after a leading `@<chunk>:<line>: ` or `@<chunk>: <line>: `, if it has one.
fn strip_place(text: &str) -> Option<&str> {
    let chunk = text.strip_prefix('@')?;
    let (name, rest) = chunk.split_once(':')?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let rest = rest.strip_prefix(' ').unwrap_or(rest);
    let (line, rest) = rest.split_once(": ")?;
    (!line.is_empty() && line.chars().all(|c| c.is_ascii_digit())).then_some(rest)
}

/// Whether Redis refused a command because a key holds the wrong type, or a string or
/// hash field that should count (a fencing token, a hold count) holds something else.
pub(crate) fn is_wrong_type(error: &RedisError) -> bool {
    let details = error.details();
    details.contains("WRONGTYPE") || details.contains("is not an integer")
}

/// `error`, naming the script `script` and its `keys` when the server refused the script as
/// a whole because this user may not use one of its keys: the server does not say which.
pub(crate) fn refused_keys(error: RedisError, script: &str, keys: Vec<String>) -> RedisError {
    // Redis: "NOPERM this user has no permissions to access one of the keys used as
    // arguments"; Valkey: "NOPERM No permissions to access a key".
    let words = error.details().to_ascii_lowercase();
    if !(words.starts_with("noperm") && words.contains("permissions to access")) {
        return error;
    }
    let details = format!(
        "{} (the {script} script refused before it ran: this user's ACL must allow every key \
         it names: {}; nothing was written)",
        error.details(),
        keys.join(", ")
    );
    RedisError::new(error.kind().clone(), details)
}

/// Whether Redis no longer has a script in its cache.
pub(crate) fn is_noscript(error: &RedisError) -> bool {
    error.details().starts_with("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_server_in_words() {
        let io = r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#;
        let refused = RedisError::new(ErrorKind::IO, format!("{}10.0.0.7:6379\n{io}", REFUSED));
        let error = Error::from(refused);
        assert!(matches!(&error, Error::Unreachable { server, .. } if server == "10.0.0.7:6379"));
        assert_eq!(
            error.to_string(),
            "cannot connect to Redis at 10.0.0.7:6379: connection refused: nothing listens at \
             that address"
        );
        assert!(error.is_retryable());
        // Any other driver error stays what it was.
        let closed = Error::from(RedisError::new(ErrorKind::IO, "Connection closed."));
        assert!(matches!(closed, Error::Redis(_)), "{closed:?}");
    }

    #[test]
    fn says_what_a_failure_of_a_synchronizer_or_a_server_is() {
        let latch = Error::NotReplicated {
            name: "jobs".into(),
            timeout: std::time::Duration::from_secs(1),
        };
        assert_eq!(
            latch.to_string(),
            "\"jobs\": no replica confirmed the write within 1s"
        );
        let wrong = Error::WrongType {
            name: "jobs".into(),
        };
        assert!(wrong.to_string().contains("latch"), "{wrong}");
        let http = RedisError::new(
            ErrorKind::Protocol,
            "Decode Error: frame_type: Invalid frame type.",
        );
        let text = Error::Redis(http).to_string();
        assert!(text.contains("does not speak the Redis protocol"), "{text}");
        let noauth = RedisError::new(ErrorKind::Auth, "NOAUTH Authentication required.");
        let text = Error::Redis(noauth).to_string();
        assert!(text.contains("none was given"), "{text}");
    }

    #[test]
    fn classifies_server_errors() {
        let noscript = RedisError::new(
            ErrorKind::Unknown,
            "NOSCRIPT No matching script. Please use EVAL.",
        );
        assert!(is_noscript(&noscript));
        assert!(is_transient(&noscript), "it proves the script did not run");
        for refused in [
            "NOPERM this user has no permissions to access one of the keys used as arguments",
            "NOPERM No permissions to access a key",
        ] {
            let named = refused_keys(
                RedisError::new(ErrorKind::Unknown, refused),
                "semaphore_set",
                vec!["jobs".into()],
            );
            assert!(
                named.details().contains("semaphore_set script"),
                "{refused}"
            );
        }
        // A WAIT met by a failover: on a master being demoted, or one demoted already.
        for failover in [
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
            "ERR WAIT cannot be used with replica instances. Please also note that ...",
        ] {
            assert!(is_transient(&RedisError::new(ErrorKind::Unknown, failover)), "{failover}");
        }

        let wrong = RedisError::new(
            ErrorKind::InvalidArgument,
            "WRONGTYPE Operation against a key holding the wrong kind of value script: x",
        );
        assert!(is_wrong_type(&wrong));
        let token = RedisError::new(
            ErrorKind::Unknown,
            "ERR value is not an integer or out of range script: x, on @user_script:47.",
        );
        assert!(is_wrong_type(&token));

        // A script's write on a demoted master, as Redis 7 and 6.2 word it.
        for demoted in [
            "READONLY You can't write against a read only replica. script: 0af1, on @user_script:12.",
            "ERR Error running script (call to f_0af1): @user_script:12: @user_script: 12: \
             -READONLY You can't write against a read only replica.",
        ] {
            let demoted = RedisError::new(ErrorKind::Unknown, demoted);
            assert!(Error::Redis(demoted).is_retryable());
        }
        // A script's own error on Redis 6.2 is not taken for the command's.
        let raised = RedisError::new(
            ErrorKind::Unknown,
            "ERR Error running script (call to f_0af1): @user_script:3: user_script:3: READONLY",
        );
        assert!(!Error::Redis(raised).is_retryable());
        assert_eq!(
            server_words("NOPERM this user may not"),
            "NOPERM this user may not"
        );

        let loading = RedisError::new(ErrorKind::Unknown, "LOADING Redis is loading the dataset");
        assert!(Error::Redis(loading).is_retryable());
        assert!(Error::Redis(RedisError::new(ErrorKind::IO, "reset")).is_retryable());
        let reconnecting = RedisError::new(ErrorKind::Unknown, "Failed to route command.");
        assert!(Error::Redis(reconnecting).is_retryable());
        assert!(!Error::Closed.is_retryable());
    }
}
