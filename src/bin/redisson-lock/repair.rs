//! Repairs of semaphores and count-down latches, for what no client can prevent: a process
//! killed while it held a plain semaphore's permits (Redisson's semaphore has no lease, so
//! they stay taken), a latch whose counting process died. Each repair is the library's own
//! write, made exactly once and waking waiters of both languages as a Java release,
//! `addPermits` or count-down does; each shows the object and asks first unless `--yes`,
//! as `force-unlock` does, and answers in JSON with `--json`.

use redisson_lock::inspect::{HoldMode, LockState};
use redisson_lock::LockClient;
use serde_json::json;

use crate::args::Command;
use crate::synchronizer::{self, What};
use crate::{clients, confirmed, show, Cli, Exit, Failure, Object, Outcome};

/// What to do to a synchronizer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Repair {
    /// Give back this many permits to a semaphore (a release).
    GiveBack(i64),
    /// Change a semaphore's free permits by this much (`addPermits`).
    Add(i64),
    /// Make a semaphore's free permits this many (the difference, added).
    Set(i64),
    /// Count a latch down by one.
    CountDown,
    /// Delete a semaphore, a permit-expirable semaphore or a latch.
    Delete,
}

impl Repair {
    /// The repair `command` asks for (a repair command's).
    pub(crate) fn asked(command: &Command) -> Repair {
        match command {
            Command::GiveBack { permits, .. } => Repair::GiveBack(*permits),
            Command::AddPermits { delta, .. } => Repair::Add(*delta),
            Command::SetPermits { permits, .. } => Repair::Set(*permits),
            Command::CountDown { .. } => Repair::CountDown,
            _ => Repair::Delete,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Repair::GiveBack(_) => "give_back",
            Repair::Add(_) => "add_permits",
            Repair::Set(_) => "set_permits",
            Repair::CountDown => "count_down",
            Repair::Delete => "delete",
        }
    }

    /// Whether it applies to `what` (a counter nothing tells apart may be either).
    fn applies_to(self, what: What) -> bool {
        match self {
            Repair::GiveBack(_) | Repair::Add(_) | Repair::Set(_) => {
                matches!(what, What::Semaphore | What::Counter)
            }
            Repair::CountDown => matches!(what, What::Latch | What::Counter),
            Repair::Delete => what != What::Lock && what != What::Counter,
        }
    }

    fn question(self, name: &str, what: What) -> String {
        let what = what.words();
        match self {
            Repair::GiveBack(n) => format!("Give back {n} permits to the {what} {name}?"),
            Repair::Add(n) => format!("Add {n} permits to the {what} {name}?"),
            Repair::Set(n) => format!("Make the {what} {name} have {n} free permits?"),
            Repair::CountDown => format!("Count the {what} {name} down by one?"),
            Repair::Delete => format!("Delete the {what} {name}?"),
        }
    }
}

/// Repairs the synchronizer `name`, asked as `kind`.
pub(crate) async fn repair(
    cli: &Cli,
    client: &LockClient,
    name: &str,
    kind: Object,
    repair: Repair,
    yes: bool,
) -> Outcome {
    let state = client.inspect(name).await?;
    let what = synchronizer::what(&state, kind);
    let missing = state.mode == HoldMode::Free && state.counter.is_none();
    if let HoldMode::NotALock(held) = &state.mode {
        return Err(Failure(
            Exit::NotALock,
            format!("{name:?} holds {held}; nothing changed"),
        ));
    }
    if missing && !matches!(repair, Repair::Delete) {
        return Err(Failure(
            Exit::NotInState,
            format!("there is no semaphore or latch named {name:?}; nothing changed"),
        ));
    }
    if !repair.applies_to(what) {
        let hint = match what {
            What::Counter => "; say which with --kind",
            _ => "",
        };
        return Err(Failure(
            Exit::NotALock,
            format!(
                "{name:?} is a {}, which {} does not apply to{hint}; nothing changed",
                what.words(),
                repair.name().replace('_', " ")
            ),
        ));
    }
    if !yes {
        if !cli.global.json {
            show::print_state(&state, &clients(client).await, what, false);
        }
        if !confirmed(&repair.question(name, what)) {
            return Err(Failure(
                Exit::NotConfirmed,
                "not confirmed; nothing changed".into(),
            ));
        }
    }
    let done = apply(client, name, what, repair, &state).await?;
    let after = client
        .inspect(name)
        .await
        .ok()
        .and_then(|state| state.counter);
    if cli.global.json {
        show::print_json(&json!({
            "name": name,
            "object": what.name(),
            "repair": repair.name(),
            "done": done,
            "count_after": after,
        }));
    } else if done {
        let after = after.map_or("none (deleted)".to_owned(), |n| n.to_string());
        println!(
            "{} on {name}: done; its count is now {after}, and its waiters were told",
            repair.name().replace('_', " ")
        );
    } else {
        println!("{name}: nothing to {}", repair.name().replace('_', " "));
    }
    Ok(if done { Exit::Done } else { Exit::NotInState })
}

/// Makes the repair with the library's own calls; whether it changed anything.
async fn apply(
    client: &LockClient,
    name: &str,
    what: What,
    repair: Repair,
    state: &LockState,
) -> Result<bool, Failure> {
    let invalid = |why: &str| Failure(Exit::BadArguments, format!("{why}; nothing changed"));
    match repair {
        Repair::GiveBack(n) => match u32::try_from(n) {
            Ok(n) if n > 0 => {
                client.semaphore(name)?.release(n).await?;
                Ok(true)
            }
            _ => Err(invalid("give back from 1 to 4294967295 permits at a time")),
        },
        Repair::Add(0) => Ok(false),
        Repair::Add(n) => {
            client.semaphore(name)?.add_permits(n).await?;
            Ok(true)
        }
        Repair::Set(n) if n < 0 => Err(invalid("a semaphore's permits are zero or more")),
        Repair::Set(n) => {
            // Read and added: a release or acquisition in between is kept, not overwritten.
            let free = state.counter.unwrap_or(0);
            if free == n {
                return Ok(false);
            }
            client.semaphore(name)?.add_permits(n - free).await?;
            Ok(true)
        }
        Repair::CountDown => {
            client.count_down_latch(name)?.count_down().await?;
            Ok(true)
        }
        Repair::Delete => Ok(match what {
            What::Latch => client.count_down_latch(name)?.delete().await?,
            // A semaphore's counter, and a permit-expirable one's leases: the same delete.
            _ => client.permit_expirable_semaphore(name)?.delete().await?,
        }),
    }
}
