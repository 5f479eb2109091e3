//! Check 1, the server: Redis or Valkey, which version, whether this crate supports it and
//! which of the features it uses the server has.

use super::finding::{doc, Finding};
use super::node::{fields, Node};

/// What the server is.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    /// `Redis` or `Valkey`.
    pub(crate) product: &'static str,
    /// The product's own version, as it writes it.
    pub(crate) version: String,
    /// The Redis version it implements (a Valkey's `redis_version`), as numbers.
    pub(crate) redis: (u32, u32, u32),
}

impl Server {
    /// Whether sharded pub/sub and `ACL DRYRUN` are there (Redis 7.0, every Valkey).
    pub(crate) fn has_7_0(&self) -> bool {
        self.redis >= (7, 0, 0)
    }
}

/// `7.0.15` as numbers; missing parts are 0.
fn version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|part| part.parse::<u32>());
    let major = parts.next()?.ok()?;
    let minor = parts.next().unwrap_or(Ok(0)).ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// Reads what `node` is: `INFO server`, or `HELLO` (which every user may run) when `INFO`
/// is refused. `Err` says why neither answered.
pub(crate) async fn identify(node: &Node) -> Result<Server, String> {
    let (redis_version, own, name) = match node.info("server").await {
        Ok(info) => (
            info.get("redis_version").cloned(),
            info.get("valkey_version").cloned(),
            info.get("server_name").cloned(),
        ),
        Err(info_refused) => {
            let hello = node.call(&["HELLO"]).await.map_err(|hello_refused| {
                format!("INFO server was refused ({info_refused}) and HELLO too ({hello_refused})")
            })?;
            let hello = fields(&hello);
            let name = hello.get("server").cloned();
            let version = hello.get("version").cloned();
            // HELLO gives a Valkey's own version only; Valkey implements Redis 7.2.
            let valkey = name.as_deref() == Some("valkey");
            let redis_version = if valkey {
                Some("7.2.4".into())
            } else {
                version.clone()
            };
            (redis_version, version.filter(|_| valkey), name)
        }
    };
    let valkey = own.is_some() || name.as_deref() == Some("valkey");
    let redis_text = redis_version.ok_or("the server did not say its version")?;
    let redis = version(&redis_text)
        .ok_or_else(|| format!("the server's version {redis_text:?} does not parse"))?;
    Ok(Server {
        product: if valkey { "Valkey" } else { "Redis" },
        version: own.unwrap_or(redis_text),
        redis,
    })
}

/// The findings about `server` at `address`.
pub(crate) fn check(server: &Server, address: &str) -> Vec<Finding> {
    let Server {
        product, version, ..
    } = server;
    let mut findings = Vec::new();
    let named = format!("{address} runs {product} {version}");
    if *product == "Valkey" {
        findings.push(Finding::fine(
            "server.version",
            format!("{named}, which this crate supports"),
            doc::SERVERS,
        ));
    } else if server.redis < (6, 2, 0) {
        findings.push(Finding::problem(
            "server.version",
            format!("{named}: locks need Redis 6.2 or newer (the unlock latch uses SET ... GET)"),
            "upgrade to Redis 6.2 or newer, or to Valkey".into(),
            doc::SERVERS,
        ));
    } else if server.redis >= (8, 0, 0) {
        findings.push(Finding::warning(
            "server.version",
            format!("{named}, newer than the Redis versions this crate is tested on (6.2 to 7.x)"),
            "run your own tests of the locks on this version, or run Redis 7.x".into(),
            doc::SERVERS,
        ));
    } else {
        findings.push(Finding::fine(
            "server.version",
            format!("{named}, which this crate supports"),
            doc::SERVERS,
        ));
    }
    if server.has_7_0() {
        findings.push(Finding::fine(
            "server.features",
            format!(
                "{address} has sharded pub/sub (SPUBLISH, SSUBSCRIBE) and ACL DRYRUN (from \
                 Redis 7.0)"
            ),
            doc::SERVERS,
        ));
    } else if server.redis >= (6, 2, 0) {
        // Supported: the client uses classic pub/sub there; the permission check says
        // itself that it cannot try the user's commands.
        findings.push(Finding::fine(
            "server.features",
            format!(
                "{address} has no sharded pub/sub and no ACL DRYRUN (both come with Redis \
                 7.0): clients use classic pub/sub, and the user's permissions cannot be \
                 tried command by command"
            ),
            doc::SERVERS,
        ));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::{check, version, Server};
    use crate::doctor::finding::Severity;

    fn redis(text: &str) -> Server {
        Server {
            product: "Redis",
            version: text.into(),
            redis: version(text).unwrap(),
        }
    }

    #[test]
    fn rates_versions() {
        let rated = |text| check(&redis(text), "h:1")[0].severity;
        assert_eq!(rated("6.0.20"), Severity::Problem);
        assert_eq!(rated("6.2.14"), Severity::Fine);
        assert_eq!(rated("7.0.15"), Severity::Fine);
        assert_eq!(rated("8.0.1"), Severity::Warning);
        let features = &check(&redis("6.2.14"), "h:1")[1];
        assert_eq!(features.severity, Severity::Fine);
        assert!(features.what.contains("no sharded pub/sub"));
        assert_eq!(version("7.2"), Some((7, 2, 0)));
        assert_eq!(version("x"), None);
    }
}
