//! `redisson-lock`: look at, free, follow and take Redisson locks from a shell, whichever
//! side (Java or Rust) holds them. `redisson-lock --help` lists the commands; the exit codes
//! are in [`Exit`] and in `docs/operations.md`.

mod hold;
mod show;
mod synchronizer;
mod watch;

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use redisson_lock::inspect::HoldMode;
use redisson_lock::{Error, LockClient};
use serde_json::json;

/// Inspect, list, free, follow and hold Redisson locks, and look at and follow semaphores and
/// count-down latches (Java's Redisson and this crate alike).
#[derive(Parser, Debug)]
#[command(name = "redisson-lock", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// The options every command takes, before its name (or after it: see [`Late`]).
#[derive(Args, Debug)]
struct Global {
    /// The server: redis://, rediss://, redis-sentinel:// or redis-cluster:// URL.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    url: String,
    /// The name prefix of the services' clients (Redisson's name mapper), put in front of
    /// every NAME and taken off every name listed.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Print JSON (one object, or one object a line for `watch` and `hold`), errors included.
    #[arg(long)]
    json: bool,
}

/// The global options again, taken after a command's name too but left out of its help
/// (clap's global options would be listed in every command's help).
#[derive(Args, Debug)]
struct Late {
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
            | Command::Hold { late, .. } => late,
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
unreachable or refusing; 4 not confirmed; 5 the name is not a lock; 130 interrupted while \
holding.\n\nThe global options (--url, --prefix, --json) go before or after the command's name: \
see `redisson-lock --help`.";

#[derive(Subcommand, Debug)]
enum Command {
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

/// Why the tool stops; the process's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Done = 0,
    NotInState = 1,
    BadArguments = 2,
    RedisError = 3,
    NotConfirmed = 4,
    NotALock = 5,
    Interrupted = 130,
}

/// A failure: its exit code and what to tell the user.
pub(crate) struct Failure(pub(crate) Exit, pub(crate) String);

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let exit = match error {
            Error::InvalidArgument(_) => Exit::BadArguments,
            Error::WrongType { .. } => Exit::NotALock,
            _ => Exit::RedisError,
        };
        Failure(exit, error.to_string())
    }
}

pub(crate) type Outcome = Result<Exit, Failure>;

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

/// Ctrl-C, listened for from the moment this is called. A `ctrl_c()` made anew in each
/// `select!` listens only while that `select!` waits: a Ctrl-C that comes while the tool is
/// busy elsewhere (reading the lock, say) would be lost, and the tool would run on.
fn interrupted() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    let mut ctrl_c = Box::pin(tokio::signal::ctrl_c());
    // Polled once now: that registers the listener.
    let mut now = std::task::Context::from_waker(std::task::Waker::noop());
    if std::future::Future::poll(ctrl_c.as_mut(), &mut now).is_ready() {
        return Box::pin(std::future::ready(()));
    }
    Box::pin(async move {
        let _ = ctrl_c.await;
    })
}

/// The arguments, or the exit after clap's error: as JSON on stdout with `--json` (help and
/// the version are printed as they are).
fn arguments() -> Result<Cli, ExitCode> {
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

/// A failure as one JSON object on stdout, where the output of a `--json` run goes.
fn print_error(exit: Exit, message: &str) {
    show::print_json(&json!({
        "event": "error",
        "error": message,
        "exit_code": exit as u8,
    }));
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match arguments() {
        Ok(cli) => cli,
        Err(exit) => return exit,
    };
    let outcome = match connect(&cli).await {
        Ok(client) => {
            let outcome = run(&cli, &client).await;
            client.shutdown().await;
            outcome
        }
        Err(failure) => Err(failure),
    };
    match outcome {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(Failure(exit, message)) => {
            if cli.global.json {
                print_error(exit, &message);
            } else {
                eprintln!("redisson-lock: {message}");
            }
            ExitCode::from(exit as u8)
        }
    }
}

async fn connect(cli: &Cli) -> Result<LockClient, Failure> {
    LockClient::builder()
        .url(&cli.global.url)
        .name_prefix(cli.global.prefix.clone())
        .build()
        .await
        .map_err(|error| {
            let exit = match error {
                Error::InvalidArgument(_) => Exit::BadArguments,
                _ => Exit::RedisError,
            };
            Failure(exit, format!("connecting: {error}"))
        })
}

async fn run(cli: &Cli, client: &LockClient) -> Outcome {
    match &cli.command {
        Command::Inspect { name, kind, .. } => {
            let state = client.inspect(name).await?;
            let clients = clients(client).await;
            let what = synchronizer::what(&state, *kind);
            show::print_state(&state, &clients, what, cli.global.json);
            Ok(match state.mode {
                HoldMode::NotALock(_) => Exit::NotALock,
                _ => Exit::Done,
            })
        }
        Command::List {
            pattern,
            counters,
            max_keys,
            ..
        } => {
            let mut found = client.find_locks(pattern, *max_keys).await?;
            if *counters {
                let more = client.find_counters(pattern, *max_keys).await?;
                found.locks.extend(more.locks);
                found.locks.sort_by(|a, b| a.name.cmp(&b.name));
                found.incomplete |= more.incomplete;
            }
            let clients = clients(client).await;
            show::print_list(&found, &clients, cli.global.json);
            if found.incomplete && !cli.global.json {
                eprintln!(
                    "redisson-lock: the scan stopped after --max-keys; the list may be incomplete"
                );
            }
            Ok(Exit::Done)
        }
        Command::ForceUnlock { name, yes, .. } => force_unlock(cli, client, name, *yes).await,
        Command::Watch {
            name,
            kind,
            interval,
            duration,
            ..
        } => watch::watch(cli, client, name, *kind, *interval, *duration).await,
        Command::Hold {
            name,
            duration,
            kind,
            wait,
            lease,
            ..
        } => {
            hold::hold(
                client,
                name,
                *kind,
                *duration,
                *wait,
                *lease,
                cli.global.json,
            )
            .await
        }
    }
}

/// The connected clients of this crate, or why they could not be listed.
pub(crate) async fn clients(client: &LockClient) -> show::Clients {
    client
        .connected_lock_clients()
        .await
        .map_err(|error| error.to_string())
}

/// Asks `question` on the terminal; only `y` or `yes` agrees.
fn confirmed(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

async fn force_unlock(cli: &Cli, client: &LockClient, name: &str, yes: bool) -> Outcome {
    let state = client.inspect(name).await?;
    let clients = clients(client).await;
    let how = match &state.mode {
        HoldMode::NotALock(what) => {
            return Err(Failure(
                Exit::NotALock,
                format!("{name:?} is not a lock: {what}"),
            ))
        }
        HoldMode::Counter => {
            return Err(Failure(
                Exit::NotALock,
                format!(
                    "{name:?} is not a lock: a counter (a semaphore's free permits or a \
                     count-down latch's count); nothing to free"
                ),
            ))
        }
        HoldMode::Free => {
            if cli.global.json {
                show::print_json(&json!({"name": name, "freed": false}));
            } else {
                println!("{name} is not held; nothing to free");
            }
            return Ok(Exit::NotInState);
        }
        HoldMode::Write => "write_lock",
        HoldMode::Read => "read_lock",
        HoldMode::Exclusive if state.queue_len > 0 => "fair_lock",
        HoldMode::Exclusive => "lock",
        _ => "lock",
    };
    if !yes {
        if !cli.global.json {
            show::print_state(&state, &clients, synchronizer::What::Lock, false);
        }
        let question = format!("Free {name} now? Its holders will go on as if they held it.");
        if !confirmed(&question) {
            return Err(Failure(
                Exit::NotConfirmed,
                "not confirmed; nothing changed".into(),
            ));
        }
    }
    let freed = forced(client, name, how).await?;
    if cli.global.json {
        show::print_json(&json!({"name": name, "freed": freed, "as": how}));
    } else if freed {
        println!(
            "freed {name} (as a {}); its waiters were told",
            how.replace('_', " ")
        );
    } else {
        println!("{name} was no longer held that way; nothing was freed");
    }
    Ok(if freed { Exit::Done } else { Exit::NotInState })
}

/// The force release of kind `how`.
async fn forced(client: &LockClient, name: &str, how: &str) -> Result<bool, Error> {
    match how {
        "write_lock" => client.read_write_lock(name)?.force_unlock_write().await,
        "read_lock" => client.read_write_lock(name)?.force_unlock_read().await,
        "fair_lock" => client.fair_lock(name)?.force_unlock().await,
        _ => client.lock(name)?.force_unlock().await,
    }
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
