//! What the doctor found: one finding per thing looked at, its severity, what to change and
//! where the documentation explains it.

use serde_json::{json, Value};

/// How much a finding matters, most first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Severity {
    /// Locks can fail or lose exclusion as the deployment stands.
    Problem,
    /// Worth changing, or something the doctor could not find out.
    Warning,
    /// Looked at, and as it should be.
    Fine,
}

impl Severity {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Severity::Problem => "problem",
            Severity::Warning => "warning",
            Severity::Fine => "fine",
        }
    }
}

/// One finding.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) severity: Severity,
    /// A stable id (`server.version`, `permissions.locks`, ...), for scripts.
    pub(crate) check: &'static str,
    /// What was seen, about the user's deployment.
    pub(crate) what: String,
    /// What to change; empty when nothing is to be done.
    pub(crate) advice: String,
    /// The documentation section explaining it: `docs/<file>.md#<anchor>`.
    pub(crate) doc: &'static str,
}

impl Finding {
    pub(crate) fn problem(
        check: &'static str,
        what: String,
        advice: String,
        doc: &'static str,
    ) -> Finding {
        Finding {
            severity: Severity::Problem,
            check,
            what,
            advice,
            doc,
        }
    }

    pub(crate) fn warning(
        check: &'static str,
        what: String,
        advice: String,
        doc: &'static str,
    ) -> Finding {
        Finding {
            severity: Severity::Warning,
            check,
            what,
            advice,
            doc,
        }
    }

    pub(crate) fn fine(check: &'static str, what: String, doc: &'static str) -> Finding {
        Finding {
            severity: Severity::Fine,
            check,
            what,
            advice: String::new(),
            doc,
        }
    }

    /// A check that could not be made: a warning saying why, never a guess.
    pub(crate) fn unknown(
        check: &'static str,
        what: String,
        advice: String,
        doc: &'static str,
    ) -> Finding {
        Finding::warning(check, what, advice, doc)
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "severity": self.severity.name(),
            "check": self.check,
            "what": self.what,
            "advice": self.advice,
            "doc": self.doc,
        })
    }
}

/// The documentation sections findings link to.
pub(crate) mod doc {
    pub(crate) const SERVERS: &str = "docs/compatibility.md#servers";
    pub(crate) const PERMISSIONS: &str = "docs/operations.md#permissions-acl";
    pub(crate) const REPLICAS: &str = "docs/topologies.md#a-master-with-replicas";
    pub(crate) const MIN_REPLICAS: &str = "docs/topologies.md#refused-writes-min-replicas-to-write";
    pub(crate) const PERSISTENCE: &str = "docs/topologies.md#one-server";
    pub(crate) const SENTINEL: &str = "docs/topologies.md#sentinel";
    pub(crate) const CLUSTER: &str = "docs/topologies.md#cluster";
    pub(crate) const CLOCKS: &str = "docs/reliability.md#the-fair-lock-and-the-clock";
    pub(crate) const LATENCY: &str = "docs/operations.md#round-trips-and-clocks";
    pub(crate) const CONNECTED: &str = "docs/operations.md#connected-clients";
    pub(crate) const PUBSUB_MODE: &str = "docs/operations.md#pubsub-java-and-this-crate";
    pub(crate) const REPLICA_WAIT: &str = "docs/operations.md#the-cost-of-a-wait";
    pub(crate) const TIMEOUTS: &str = "docs/topologies.md#failover-timings-and-the-lease";
}

/// The watchdog's lease by default (Redisson's `lockWatchdogTimeout`, this crate's
/// `watchdog_timeout`), in ms: failover timings are measured against it. A hold is renewed
/// every third of it, so it has at least two thirds of it left when its master goes away.
pub(crate) const LEASE_MS: u64 = 30_000;

/// What is left of a hold's lease, at least, when its master goes away.
pub(crate) const LEASE_LEFT_MS: u64 = LEASE_MS * 2 / 3;
