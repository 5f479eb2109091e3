//! `redisson-lock`: look at, free, follow and take Redisson locks from a shell, and look at,
//! follow and repair semaphores and count-down latches, whichever side (Java or Rust) uses
//! them.
//! `redisson-lock --help` lists the commands (their arguments are in `args.rs`); the exit
//! codes are in [`Exit`] and in `docs/operations.md`.

mod args;
mod doctor;
mod hold;
mod repair;
mod show;
mod synchronizer;
mod watch;

use std::io::{BufRead, Write};
use std::process::ExitCode;

use args::{arguments, Command};
pub(crate) use args::{Cli, Kind, Object};
use redisson_lock::inspect::HoldMode;
use redisson_lock::{Error, LockClient};
use repair::Repair;
use serde_json::json;

/// Why the tool stops; the process's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Done = 0,
    NotInState = 1,
    BadArguments = 2,
    RedisError = 3,
    NotConfirmed = 4,
    NotALock = 5,
    /// `doctor` found problems (1, `NotInState`, is its exit with warnings only).
    Problems = 6,
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
    let outcome = if let Command::Doctor { name, .. } = &cli.command {
        // The doctor connects to every server itself, and a user's refusals are among
        // what it reports: the client's build could fail on them.
        doctor::doctor(&cli, name).await
    } else {
        match connect(&cli).await {
            Ok(client) => {
                let outcome = run(&cli, &client).await;
                client.shutdown().await;
                outcome
            }
            Err(failure) => Err(failure),
        }
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
        Command::GiveBack {
            name, repair: args, ..
        }
        | Command::AddPermits {
            name, repair: args, ..
        }
        | Command::SetPermits {
            name, repair: args, ..
        }
        | Command::CountDown { name, repair: args }
        | Command::Delete { name, repair: args } => {
            let asked = Repair::asked(&cli.command);
            repair::repair(cli, client, name, args.kind, asked, args.yes).await
        }
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
        Command::Doctor { .. } => unreachable!("the doctor runs before any client connects"),
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
pub(crate) fn confirmed(question: &str) -> bool {
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
