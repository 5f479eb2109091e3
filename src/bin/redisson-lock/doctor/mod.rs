//! `redisson-lock doctor`: looks at the deployment a URL names (one server, Sentinel, a
//! cluster) with reads only, and prints what it found, problems first, each with what to
//! change and the documentation section that explains it.
//!
//! The checks, each in its own file: the server and its version (`server.rs`), the user's
//! permissions (`permissions.rs`), each master's replication and persistence
//! (`replication.rs`), the Sentinels (`sentinel.rs`) and the cluster (`cluster.rs`), which
//! also find the masters to look at, and each master's round trip, clock, connected clients
//! and `WAIT` as this machine sees them, and the pub/sub the clients use (`clients.rs`). The connections and the commands they send are in
//! `node.rs`, the findings in `finding.rs`; this file reaches the deployment, runs the checks
//! and prints. It never guesses: what it cannot read is a warning saying so and why.

mod clients;
mod cluster;
mod finding;
mod node;
mod permissions;
mod replication;
mod sentinel;
mod server;

use serde_json::json;

use crate::{show, Cli, Exit, Failure, Outcome};
use finding::{doc, Finding, Severity};
use node::Node;
use permissions::Shape;
use redisson_lock::fred::types::config::{Config, ServerConfig};

/// The deployment as the doctor reached it.
struct Deployment {
    shape: Shape,
    /// The masters that answered; the server and permission checks run on the first. None
    /// when the Sentinels' master or every master of a cluster does not answer: the
    /// findings say so.
    masters: Vec<Node>,
    /// Findings made while reaching it (a Sentinel that does not answer, say).
    findings: Vec<Finding>,
    /// What the Sentinels or the cluster said of the deployment, for `--json`.
    described: serde_json::Value,
}

/// The deployment's kind, as `--json` names it.
fn shape_name(shape: Shape) -> &'static str {
    match shape {
        Shape::Single => "single",
        Shape::Sentinel => "sentinel",
        Shape::Cluster => "cluster",
    }
}

/// Runs the doctor against the `--url` of `cli`, trying permissions on the lock `name`.
pub(crate) async fn doctor(cli: &Cli, name: &str) -> Outcome {
    let url = &cli.global.url;
    let config = redisson_lock::parse_url(url)
        .map_err(|error| Failure(Exit::BadArguments, error.to_string()))?;
    let Deployment {
        shape,
        masters,
        mut findings,
        described: topology,
    } = reach(&config).await?;
    let probe = format!("{}{name}", cli.global.prefix);
    let (server, user) = match masters.first() {
        Some(primary) => {
            let (server, user, found) = on_primary(primary, &config, &probe, shape).await;
            findings.extend(found);
            (server, user)
        }
        None => (None, config.username.clone().unwrap_or("default".into())),
    };
    for master in &masters {
        let single = shape == Shape::Single;
        findings.extend(replication::check(master, &config, single).await);
    }
    for master in &masters {
        findings.extend(clients::check(master).await);
    }
    findings.push(clients::pubsub_mode(shape, &masters).await);

    // Problems first, then warnings, then what is fine; in the order checked within each.
    findings.sort_by_key(|finding| finding.severity);
    let count = |severity| findings.iter().filter(|f| f.severity == severity).count();
    let (problems, warnings) = (count(Severity::Problem), count(Severity::Warning));
    let described = json!({
        "kind": shape_name(shape),
        "address": masters.first().map(|primary| primary.address.clone()),
        "tls": tls(&config),
        "user": user,
        "server": server.as_ref().map(|s| s.product),
        "version": server.as_ref().map(|s| s.version.clone()),
        "probe_name": probe,
        "topology": topology,
    });
    let exit = if problems > 0 {
        Exit::Problems
    } else if warnings > 0 {
        Exit::NotInState
    } else {
        Exit::Done
    };
    if cli.global.json {
        let findings: Vec<_> = findings.iter().map(Finding::to_json).collect();
        show::print_json(&json!({
            "deployment": described,
            "findings": findings,
            "problems": problems,
            "warnings": warnings,
            "exit_code": exit as u8,
        }));
    } else {
        print_text(&described, &findings);
    }
    for master in masters {
        master.close().await;
    }
    Ok(exit)
}

/// The server and permission checks, on the first master: what it runs, the user the URL
/// logs in as, and the findings.
async fn on_primary(
    primary: &Node,
    config: &Config,
    probe: &str,
    shape: Shape,
) -> (Option<server::Server>, String, Vec<Finding>) {
    let mut findings = Vec::new();
    let server = match server::identify(primary).await {
        Ok(server) => {
            findings.extend(server::check(&server, &primary.address));
            Some(server)
        }
        Err(why) => {
            findings.push(Finding::unknown(
                "server.version",
                format!(
                    "the server at {} is of an unknown version: {why}",
                    primary.address
                ),
                "let the user run INFO server or HELLO".into(),
                doc::SERVERS,
            ));
            None
        }
    };
    let user = permissions::user(primary, config.username.as_deref()).await;
    findings.extend(permissions::check(primary, server.as_ref(), &user, probe, shape).await);
    (server, user, findings)
}

/// Whether the URL asks for TLS.
fn tls(config: &Config) -> bool {
    #[cfg(feature = "tls")]
    return config.tls.is_some();
    #[cfg(not(feature = "tls"))]
    {
        let _ = config;
        false
    }
}

/// Connects to what the URL names.
///
/// # Errors
/// [`Exit::RedisError`] when no server of the URL answers.
async fn reach(config: &Config) -> Result<Deployment, Failure> {
    match &config.server {
        ServerConfig::Centralized { server } => {
            let primary = Node::connect(config, &server.host, server.port)
                .await
                .map_err(|why| {
                    Failure(Exit::RedisError, format!("connecting to {server}: {why}"))
                })?;
            Ok(Deployment {
                shape: Shape::Single,
                masters: vec![primary],
                findings: Vec::new(),
                described: serde_json::Value::Null,
            })
        }
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } => {
            let reached = sentinel::reach(config, hosts, service_name)
                .await
                .map_err(|why| Failure(Exit::RedisError, format!("connecting: {why}")))?;
            Ok(Deployment {
                shape: Shape::Sentinel,
                masters: reached.master.into_iter().collect(),
                findings: reached.findings,
                described: reached.described,
            })
        }
        ServerConfig::Clustered { hosts, .. } => {
            let reached = cluster::reach(config, hosts)
                .await
                .map_err(|why| Failure(Exit::RedisError, format!("connecting: {why}")))?;
            Ok(Deployment {
                shape: Shape::Cluster,
                masters: reached.masters,
                findings: reached.findings,
                described: reached.described,
            })
        }
        #[allow(unreachable_patterns)]
        other => Err(Failure(
            Exit::BadArguments,
            format!("the doctor cannot look at this deployment: {other:?}"),
        )),
    }
}

/// The findings as text, grouped as problems, warnings and what is fine.
fn print_text(deployment: &serde_json::Value, findings: &[Finding]) {
    let field = |name: &str| deployment[name].as_str().unwrap_or("unknown").to_string();
    let tls = if deployment["tls"] == true {
        ", TLS"
    } else {
        ""
    };
    if deployment["address"].is_null() {
        println!("{} deployment: no master answered{tls}", field("kind"));
    } else {
        println!(
            "{} deployment at {}: {} {}, user {:?}{tls}",
            field("kind"),
            field("address"),
            field("server"),
            field("version"),
            field("user"),
        );
    }
    for (severity, title) in [
        (Severity::Problem, "Problems"),
        (Severity::Warning, "Warnings"),
        (Severity::Fine, "Fine"),
    ] {
        let group: Vec<&Finding> = findings.iter().filter(|f| f.severity == severity).collect();
        if group.is_empty() {
            continue;
        }
        println!("\n{title} ({}):", group.len());
        for finding in group {
            println!("  [{}] {}", finding.check, finding.what);
            if !finding.advice.is_empty() {
                println!("      do: {}", finding.advice);
            }
            println!("      see: {}", finding.doc);
        }
    }
}
