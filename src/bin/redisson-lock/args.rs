//! The tool's arguments: the commands, their options, the durations they take, and what a
//! refused argument prints (JSON with `--json`).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{print_error, Exit};

/// Inspect, list, free, follow and hold Redisson locks, and look at and follow semaphores and
/// count-down latches (Java's Redisson and this crate alike).
#[derive(Parser, Debug)]
#[command(name = "redisson-lock", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The options every command takes, before its name (or after it: see [`Late`]).
#[derive(Args, Debug)]
pub(crate) struct Global {
    /// The server: redis://, rediss://, redis-sentinel:// or redis-cluster:// URL.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub(crate) url: String,
    /// The name prefix of the services' clients (Redisson's name mapper), put in front of
    /// every NAME and taken off every name listed.
    #[arg(long, default_value = "")]
    pub(crate) prefix: String,
    /// Print JSON (one object, or one object a line for `watch` and `hold`), errors included.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The global options again, taken after a command's name too but left out of its help
/// (clap's global options would be listed in every command's help).
#[derive(Args, Debug)]
pub(crate) struct Late {
    #[arg(long, hide = true)]
    url: Option<String>,
    #[arg(long, hide = true)]
    prefix: Option<String>,
    #[arg(long, hide = true)]
    json: bool,
}

impl Cli {
    /// The global options given after the command's name, put with those given before it.
    fn settle(mut self) -> Cli {
        let late = match &mut self.command {
            Command::Inspect { late, .. }
            | Command::List { late, .. }
            | Command::ForceUnlock { late, .. }
            | Command::Watch { late, .. }
            | Command::Hold { late, .. }
            | Command::Doctor { late, .. } => late,
            Command::GiveBack { repair, .. }
            | Command::AddPermits { repair, .. }
            | Command::SetPermits { repair, .. }
            | Command::CountDown { repair, .. }
            | Command::Delete { repair, .. } => &mut repair.late,
        };
        if let Some(url) = late.url.take() {
            self.global.url = url;
        }
        if let Some(prefix) = late.prefix.take() {
            self.global.prefix = prefix;
        }
        self.global.json |= late.json;
        self
    }
}

/// The help text every subcommand ends with.
const AFTER_HELP: &str = "DURATION is a number with a unit: 250ms, 10s, 2m, 1h (a bare number \
means seconds).\n\nExit codes: 0 done; 1 the lock was not in the state asked for (nothing to \
free, not acquired in time, lease lost); 2 bad arguments (a bad URL, name or duration); 3 Redis \
unreachable or refusing; 4 not confirmed; 5 the name is not what the command applies to \
(not a lock; not a semaphore or latch); 6 `doctor` found problems; 130 interrupted while \
holding.\n\nThe global options (--url, --prefix, --json) go before or after the command's name: \
see `redisson-lock --help`.";

/// The doctor's help ends with its own exit codes.
const DOCTOR_HELP: &str = "Exit codes: 0 nothing wrong; 1 warnings only (something worth \
changing, or that could not be found out); 6 problems (locks can fail or lose exclusion as the \
deployment stands); 2 bad arguments; 3 Redis unreachable. --json prints one object: \
{\"deployment\": {...}, \"findings\": [{\"severity\": \"problem|warning|fine\", \"check\": ..., \
\"what\": ..., \"advice\": ..., \"doc\": ...}], ...}.\n\nThe global options (--url, --prefix, \
--json) go before or after the command's name: see `redisson-lock --help`.";

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Show everything Redis holds for a lock (holders, TTL, fair queue, readers, token,
    /// channel listeners), a semaphore (permits free, taken and in all, leases, waiters) or a
    /// count-down latch (its count, waiters).
    #[command(after_help = AFTER_HELP)]
    Inspect {
        /// The name, as the services name it.
        name: String,
        /// What the name is; by default told from the data and from whose waiters listen.
        #[arg(long, value_enum, default_value_t = Object::Auto)]
        kind: Object,
        #[command(flatten)]
        late: Late,
    },
    /// List the locks held or waited for, one line each (SCAN, never KEYS).
    #[command(after_help = AFTER_HELP)]
    List {
        /// A glob on lock names (Redis MATCH syntax).
        #[arg(default_value = "*")]
        pattern: String,
        /// Also list counters: strings holding a whole number, as semaphores and count-down
        /// latches store their counts (one more script per string found).
        #[arg(long)]
        counters: bool,
        /// Stop each scan after about this many keys (per node on a cluster), 1 or more.
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
        max_keys: u64,
        #[command(flatten)]
        late: Late,
    },
    /// Free a lock whoever holds it, with its kind's own force release, so that waiters of
    /// both languages wake. Asks first unless --yes.
    #[command(after_help = AFTER_HELP)]
    ForceUnlock {
        /// The lock's name.
        name: String,
        /// Do not ask.
        #[arg(long, short)]
        yes: bool,
        #[command(flatten)]
        late: Late,
    },
    /// Follow a lock, semaphore or count-down latch live: acquisitions, releases, queue
    /// changes, counts and pub/sub messages, until interrupted (or --for has passed).
    #[command(after_help = AFTER_HELP)]
    Watch {
        /// The name.
        name: String,
        /// What the name is; by default told from the data and from whose waiters listen.
        #[arg(long, value_enum, default_value_t = Object::Auto)]
        kind: Object,
        /// How often to look at the data (more than zero).
        #[arg(long, value_parser = parse_period, default_value = "100ms", value_name = "DURATION", allow_hyphen_values = true)]
        interval: Duration,
        /// Stop after this long.
        #[arg(long = "for", value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
        duration: Option<Duration>,
        #[command(flatten)]
        late: Late,
    },
    /// Give permits back to a semaphore, as a release does (its waiters, of both languages,
    /// wake): for permits a killed process held. Asks first unless --yes.
    #[command(after_help = AFTER_HELP)]
    GiveBack {
        /// The semaphore's name.
        name: String,
        /// How many permits, 1 or more.
        #[arg(value_parser = clap::value_parser!(i64).range(1..))]
        permits: i64,
        #[command(flatten)]
        repair: RepairArgs,
    },
    /// Change a semaphore's free permits by DELTA, which may be negative, as `addPermits`
    /// does (its waiters wake). Asks first unless --yes.
    #[command(after_help = AFTER_HELP)]
    AddPermits {
        /// The semaphore's name.
        name: String,
        /// How many permits to add (or, negative, to take away).
        #[arg(allow_hyphen_values = true)]
        delta: i64,
        #[command(flatten)]
        repair: RepairArgs,
    },
    /// Make a semaphore's free permits PERMITS: the difference from what it has now is
    /// added, as `addPermits` does. Asks first unless --yes.
    #[command(after_help = AFTER_HELP)]
    SetPermits {
        /// The semaphore's name.
        name: String,
        /// The free permits it is to have, 0 or more.
        #[arg(value_parser = clap::value_parser!(i64).range(0..))]
        permits: i64,
        #[command(flatten)]
        repair: RepairArgs,
    },
    /// Count a count-down latch down by one, as `countDown` does (at 0 its waiters open).
    /// Asks first unless --yes.
    #[command(after_help = AFTER_HELP)]
    CountDown {
        /// The latch's name.
        name: String,
        #[command(flatten)]
        repair: RepairArgs,
    },
    /// Delete a semaphore, a permit-expirable semaphore (its leases too) or a count-down
    /// latch, as their `delete` does. Asks first unless --yes.
    #[command(after_help = AFTER_HELP)]
    Delete {
        /// The name.
        name: String,
        #[command(flatten)]
        repair: RepairArgs,
    },
    /// Look at the deployment the URL names, with reads only: the server and its version,
    /// the user's permissions for every lock kind and synchronizer, replication, failover
    /// and persistence; print problems, warnings and what is fine, each with what to change.
    #[command(after_help = DOCTOR_HELP)]
    Doctor {
        /// The lock name whose keys and channels the permission check tries (the name
        /// prefix is put in front): give one your services use.
        #[arg(long, default_value = "redisson-lock-doctor")]
        name: String,
        #[command(flatten)]
        late: Late,
    },
    /// Take a lock and hold it, for drills and for testing a service.
    #[command(after_help = AFTER_HELP)]
    Hold {
        /// The lock's name.
        name: String,
        /// How long to hold it once taken.
        #[arg(long = "for", value_parser = parse_duration, default_value = "10s", value_name = "DURATION", allow_hyphen_values = true)]
        duration: Duration,
        /// Which kind of lock to take.
        #[arg(long, value_enum, default_value_t = Kind::Lock)]
        kind: Kind,
        /// How long to wait for it (default: as long as it takes; 0: one attempt).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
        wait: Option<Duration>,
        /// A fixed lease instead of the watchdog's renewals (more than zero).
        #[arg(long, value_parser = parse_period, value_name = "DURATION", allow_hyphen_values = true)]
        lease: Option<Duration>,
        #[command(flatten)]
        late: Late,
    },
}

/// What every repair of a semaphore or latch takes.
#[derive(clap::Args, Debug)]
pub(crate) struct RepairArgs {
    /// What the name is; by default told from the data and from whose waiters listen.
    #[arg(long, value_enum, default_value_t = Object::Auto)]
    pub(crate) kind: Object,
    /// Do not ask.
    #[arg(long, short)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) late: Late,
}

/// What `inspect` and `watch` take a name for.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Object {
    /// Told from the data: a hash is a lock, a string holding a whole number a counter,
    /// which is a semaphore or a latch by whose waiters listen, and a permit-expirable
    /// semaphore when its leases list permits.
    Auto,
    /// A lock of any kind.
    Lock,
    /// A semaphore (`RSemaphore`).
    Semaphore,
    /// A permit-expirable semaphore (`RPermitExpirableSemaphore`).
    PermitExpirableSemaphore,
    /// A count-down latch (`RCountDownLatch`).
    CountDownLatch,
}

/// The kinds `hold` can take.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    Fair,
    Fenced,
    Spin,
    NonReentrant,
    NonReentrantFair,
    Read,
    Write,
}

/// Parses `250ms`, `10s`, `2m`, `1h` or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.starts_with('-') {
        return Err(format!(
            "{text:?} is negative; give a duration of zero or more"
        ));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text:?}"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

/// A duration as the tool shows it: `250 ms`, `12.5 s`, `3.0 min`, `2.0 h`, or that it never
/// expires.
pub(crate) fn human_duration(duration: Duration) -> String {
    if duration == Duration::MAX {
        return "never expires".into();
    }
    let secs = duration.as_secs_f64();
    match secs {
        s if s < 1.0 => format!("{} ms", duration.as_millis()),
        s if s < 120.0 => format!("{s:.1} s"),
        s if s < 7200.0 => format!("{:.1} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

/// [`parse_duration`], refusing zero: a period or a lease must last.
fn parse_period(text: &str) -> Result<Duration, String> {
    if text.starts_with('-') {
        return Err(format!("{text:?} is negative; give a duration above zero"));
    }
    match parse_duration(text)? {
        Duration::ZERO => Err(format!("{text:?} is zero; give a duration above zero")),
        period => Ok(period),
    }
}

/// The arguments, or the exit after clap's error: as JSON on stdout with `--json` (help and
/// the version are printed as they are).
pub(crate) fn arguments() -> Result<Cli, ExitCode> {
    let error = match Cli::try_parse() {
        Ok(cli) => return Ok(cli.settle()),
        Err(error) => error,
    };
    use clap::error::ErrorKind;
    let shown = matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if shown || !std::env::args().any(|arg| arg == "--json") {
        error.exit();
    }
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    let message = first.strip_prefix("error: ").unwrap_or(first);
    print_error(Exit::BadArguments, message);
    Err(ExitCode::from(Exit::BadArguments as u8))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3d").is_err());
        assert!(super::parse_period("0ms").is_err());
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(super::parse_period("-1s").unwrap_err().contains("negative"));
        assert_eq!(super::parse_period("5"), Ok(Duration::from_secs(5)));
    }
}
