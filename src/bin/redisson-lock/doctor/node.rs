//! One connection per server the doctor looks at (a data server or a Sentinel), and the
//! read-only commands it sends there: what each answered, or the server's refusal in its own
//! words.

use std::collections::BTreeMap;
use std::time::Duration;

use redisson_lock::fred::clients::Client;
use redisson_lock::fred::interfaces::ClientLike;
use redisson_lock::fred::types::config::{Config, ServerConfig};
use redisson_lock::fred::types::{Builder, ClusterHash, CustomCommand, Value};

/// How long a connection or one command may take before the server counts as not answering.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The name the doctor gives its own connections (`CLIENT SETNAME`, best effort), so that
/// the count of connected clients leaves them out, and so that operators can tell them apart.
pub(crate) const DOCTOR_NAME: &str = "redisson-lock-doctor";

/// A connection to one server, `host:port`.
pub(crate) struct Node {
    pub(crate) address: String,
    client: Client,
}

impl Node {
    /// Connects to `host:port` with the URL's user, password, database and TLS settings.
    ///
    /// # Errors
    /// The driver's error, in words, when the server cannot be reached or refuses the login.
    pub(crate) async fn connect(base: &Config, host: &str, port: u16) -> Result<Node, String> {
        let mut config = base.clone();
        config.server = ServerConfig::new_centralized(host, port);
        let mut builder = Builder::from_config(config);
        builder
            .with_performance_config(|perf| perf.default_command_timeout = TIMEOUT)
            .with_connection_config(|conn| {
                conn.connection_timeout = TIMEOUT;
                conn.internal_command_timeout = TIMEOUT;
            });
        let client = builder.build().map_err(|error| error.to_string())?;
        let address = format!("{host}:{port}");
        match tokio::time::timeout(TIMEOUT * 2, client.init()).await {
            Ok(Ok(_task)) => {
                let node = Node { address, client };
                // Best effort: a user refused CLIENT SETNAME leaves it unnamed, and the count
                // of clients then leaves out the connection it is read on by its CLIENT ID.
                let _ = node.call(&["CLIENT", "SETNAME", DOCTOR_NAME]).await;
                Ok(node)
            }
            Ok(Err(error)) => {
                let _ = client.quit().await;
                Err(connect_words(&address, error))
            }
            Err(_) => {
                let _ = client.quit().await;
                Err(format!("no answer within {} s", (TIMEOUT * 2).as_secs()))
            }
        }
    }

    /// Sends `args` (the command's name first) and returns the reply, or the server's error
    /// text (`NOPERM ...` for a command the user may not run).
    pub(crate) async fn call(&self, args: &[&str]) -> Result<Value, String> {
        let (name, rest) = args.split_first().expect("a command name");
        let command = CustomCommand::new(name.to_string(), ClusterHash::Random, false);
        let rest: Vec<Value> = rest.iter().map(|arg| Value::from(*arg)).collect();
        self.client
            .custom::<Value, Value>(command, rest)
            .await
            .map_err(|error| error.details().to_string())
    }

    /// [`call`](Self::call) for a reply read as text.
    pub(crate) async fn text(&self, args: &[&str]) -> Result<String, String> {
        self.call(args).await.map(|value| text(&value))
    }

    /// `INFO <section>` as its `field:value` lines.
    pub(crate) async fn info(&self, section: &str) -> Result<BTreeMap<String, String>, String> {
        let reply = self.text(&["INFO", section]).await?;
        Ok(info_fields(&reply))
    }

    /// `CONFIG GET <name>`'s value, or why it could not be read.
    pub(crate) async fn config(&self, name: &str) -> Result<String, String> {
        let reply = self.call(&["CONFIG", "GET", name]).await?;
        let pairs = pairs(&reply);
        pairs
            .into_iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| text(&value))
            .ok_or_else(|| format!("the server has no setting {name:?}"))
    }

    /// Closes the connection.
    pub(crate) async fn close(self) {
        let _ = self.client.quit().await;
    }
}

/// Why connecting to `address` failed, in the library's words for it ("connection refused:
/// nothing listens at that address"), without the address, which the finding names.
fn connect_words(address: &str, error: redisson_lock::fred::error::Error) -> String {
    let server = address.to_string();
    let text = redisson_lock::Error::Unreachable {
        server,
        source: error,
    }
    .to_string();
    let prefix = format!("cannot connect to Redis at {address}: ");
    text.strip_prefix(&prefix)
        .map_or(text.clone(), str::to_string)
}

/// A reply as text: strings as they are, numbers written out, arrays one element a line.
pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::Array(values) => values.iter().map(text).collect::<Vec<_>>().join("\n"),
        Value::Map(map) => map
            .iter()
            .map(|(key, value)| format!("{}\n{}", key.as_str_lossy(), text(value)))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other
            .as_str_lossy()
            .map(|text| text.into_owned())
            .unwrap_or_default(),
    }
}

/// A reply made of names and values (a RESP2 flat array or a RESP3 map), as pairs.
pub(crate) fn pairs(value: &Value) -> Vec<(String, Value)> {
    match value {
        Value::Array(values) => values
            .chunks(2)
            .filter_map(|pair| match pair {
                [key, value] => Some((text(key), value.clone())),
                _ => None,
            })
            .collect(),
        Value::Map(map) => map
            .iter()
            .map(|(key, value)| (key.as_str_lossy().into_owned(), value.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

/// [`pairs`] with every value as text.
pub(crate) fn fields(value: &Value) -> BTreeMap<String, String> {
    pairs(value)
        .into_iter()
        .map(|(key, value)| (key, text(&value)))
        .collect()
}

/// The `field:value` lines of an `INFO` reply.
pub(crate) fn info_fields(reply: &str) -> BTreeMap<String, String> {
    reply
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
        .collect()
}

/// `host:port` split, the port after the last `:` (an IPv6 host keeps its colons).
pub(crate) fn host_port(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}
