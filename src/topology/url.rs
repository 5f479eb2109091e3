//! Connection URLs: which forms name a Redis deployment, and how one is shown without its
//! password.

use fred::types::config::{Config, ServerConfig};

use crate::base::error::{Error, Result};

/// The URL forms a client connects with, for error messages.
const URL_FORMS: &str = "redis://host:port, rediss://host:port (TLS), \
    redis-sentinel://host:port?sentinelServiceName=NAME or redis-cluster://host:port";

/// Parses a connection URL, refusing what names no Redis deployment.
///
/// Public, hidden from the documentation, for the `redisson-lock` tool's `doctor`, which
/// connects to each server of a deployment itself and must read its URL as the client does.
///
/// # Errors
/// [`Error::InvalidArgument`] for an unknown scheme or a URL that does not parse, naming the
/// forms that work (never the password).
pub fn parse_url(url: &str) -> Result<Config> {
    let shown = redacted(url);
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::invalid(format!(
            "{shown:?} is not a Redis URL: use {URL_FORMS}"
        )));
    };
    let known = ["redis", "rediss", "valkey", "valkeys"].iter().any(|base| {
        let scheme = scheme.to_ascii_lowercase();
        scheme == *base
            || scheme
                .strip_prefix(base)
                .is_some_and(|rest| ["-cluster", "-sentinel", "+unix"].contains(&rest))
    });
    if !known {
        return Err(Error::invalid(format!(
            "the scheme {scheme:?} of {shown:?} names no Redis deployment: use {URL_FORMS}"
        )));
    }
    Config::from_url(url).map_err(|error| {
        Error::invalid(format!(
            "{shown:?} is not a usable Redis URL ({}): use {URL_FORMS}",
            error.details()
        ))
    })
}

/// `url` with any password replaced by `***`.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

/// Where `config` connects, in words: `127.0.0.1:6379`, `cluster 10.0.0.1:7000, …`, or
/// `Sentinel service mymaster via 10.0.0.1:26379, …`; with ` (TLS)` when `tls`.
pub(crate) fn servers_text(config: &ServerConfig, tls: bool) -> String {
    let list = |hosts: &[fred::types::config::Server]| {
        let hosts: Vec<String> = hosts.iter().map(ToString::to_string).collect();
        hosts.join(", ")
    };
    let text = match config {
        ServerConfig::Centralized { server } => server.to_string(),
        ServerConfig::Clustered { hosts, .. } => format!("cluster {}", list(hosts)),
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } => format!("Sentinel service {service_name} via {}", list(hosts)),
        // Without fred's `unix-sockets` feature there is no other form; with it, a socket.
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    };
    if tls {
        format!("{text} (TLS)")
    } else {
        text
    }
}

/// Whether `url` asks for TLS (`rediss://`, `valkeys://` and their cluster and sentinel forms).
pub(crate) fn uses_tls(url: &str) -> bool {
    let scheme = url.split("://").next().unwrap_or("").to_ascii_lowercase();
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

#[cfg(test)]
mod tests {
    use super::{parse_url, redacted, uses_tls};

    #[test]
    fn refuses_urls_that_name_no_deployment() {
        for url in [
            "http://127.0.0.1:6379",
            "foo://x",
            "127.0.0.1:6379",
            "redis-clusterx://h",
        ] {
            let error = parse_url(url).unwrap_err();
            let text = error.to_string();
            assert!(text.contains("redis-sentinel://"), "{url}: {text}");
            assert!(
                matches!(error, crate::base::error::Error::InvalidArgument(_)),
                "{url}"
            );
        }
        for url in [
            "redis://h:1",
            "rediss://h:1",
            "redis-cluster://h:1",
            "valkey://h:1",
        ] {
            assert!(parse_url(url).is_ok(), "{url}");
        }
        let url = "redis-sentinel://u:pw@h:26379?sentinelServiceName=m";
        assert!(parse_url(url).is_ok());
    }

    #[test]
    fn never_shows_a_password() {
        assert_eq!(redacted("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redacted("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redacted("redis://h:1"), "redis://h:1");
        let error = parse_url("http://u:secret@h:1").unwrap_err().to_string();
        assert!(!error.contains("secret"), "{error}");
    }

    #[test]
    fn tells_tls_urls() {
        assert!(uses_tls("rediss://h:6380"));
        assert!(uses_tls("REDISS://h"));
        assert!(uses_tls("rediss-cluster://h:1"));
        assert!(uses_tls("valkeys://h"));
        assert!(!uses_tls("redis://h:6379"));
        assert!(!uses_tls("redis-sentinel://h:26379"));
        assert!(!uses_tls("unix:///tmp/redis.sock"));
    }
}
