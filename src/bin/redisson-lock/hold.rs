//! `hold`: take a lock of any kind and keep it for a while, for drills and for testing a
//! service's behaviour while a lock is taken.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redisson_lock::kind::HoldKind;
use redisson_lock::{Error, Lease, LockClient, LockGuard, LockOwner};
use serde_json::json;

use crate::show::print_json;
use crate::{Exit, Failure, Kind, Outcome};

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One hold of any kind: how to wait for its loss and how to release it.
struct Held {
    token: Option<u64>,
    lost: Boxed<()>,
    unlock: Box<dyn FnOnce() -> Boxed<Result<(), Error>> + Send>,
}

impl<H: HoldKind> From<LockGuard<H>> for Held {
    fn from(guard: LockGuard<H>) -> Held {
        Held {
            token: guard.fence_token(),
            lost: Box::pin(guard.lease_lost()),
            unlock: Box::new(move || Box::pin(guard.unlock())),
        }
    }
}

/// Takes an exclusive lock of any kind, waiting as `wait` says.
async fn exclusive<K: redisson_lock::kind::Kind>(
    client: &LockClient,
    owner: &LockOwner,
    name: &str,
    wait: Option<Duration>,
    lease: Lease,
) -> Result<Option<Held>, Error> {
    let lock = client.exclusive_lock::<K>(name)?.with_lease(lease);
    Ok(match wait {
        None => Some(lock.lock(owner).await?),
        Some(wait) => lock.try_lock_for(owner, wait).await?,
    }
    .map(Held::from))
}

/// Takes the lock as `kind` says, waiting as `wait` says (`None`: as long as it takes).
async fn take(
    client: &LockClient,
    owner: &LockOwner,
    name: &str,
    kind: Kind,
    wait: Option<Duration>,
    lease: Lease,
) -> Result<Option<Held>, Error> {
    use redisson_lock::kind::{Fair, Fenced, NonReentrant, NonReentrantFair, Reentrant, Spin};
    match kind {
        Kind::Lock => exclusive::<Reentrant>(client, owner, name, wait, lease).await,
        Kind::Fair => exclusive::<Fair>(client, owner, name, wait, lease).await,
        Kind::Fenced => exclusive::<Fenced>(client, owner, name, wait, lease).await,
        Kind::Spin => exclusive::<Spin>(client, owner, name, wait, lease).await,
        Kind::NonReentrant => exclusive::<NonReentrant>(client, owner, name, wait, lease).await,
        Kind::NonReentrantFair => {
            exclusive::<NonReentrantFair>(client, owner, name, wait, lease).await
        }
        Kind::Read => {
            let lock = client.read_write_lock(name)?.with_lease(lease);
            Ok(match wait {
                None => Some(lock.read(owner).await?),
                Some(wait) => lock.try_read_for(owner, wait).await?,
            }
            .map(Held::from))
        }
        Kind::Write => {
            let lock = client.read_write_lock(name)?.with_lease(lease);
            Ok(match wait {
                None => Some(lock.write(owner).await?),
                Some(wait) => lock.try_write_for(owner, wait).await?,
            }
            .map(Held::from))
        }
    }
}

fn say(json: bool, value: serde_json::Value, text: String) {
    if json {
        print_json(&value);
    } else {
        println!("{text}");
    }
}

/// Takes the lock, holds it for `duration` (or until interrupted, or until its lease is
/// lost), then releases it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn hold(
    client: &LockClient,
    name: &str,
    kind: Kind,
    duration: Duration,
    wait: Option<Duration>,
    lease: Option<Duration>,
    json: bool,
) -> Outcome {
    let lease = match lease {
        Some(lease) => Lease::fixed(lease)?,
        None => Lease::WATCHDOG,
    };
    let owner = client.new_owner();
    let kind_name = format!("{kind:?}").to_lowercase();
    if !json {
        eprintln!("taking {name} as {kind_name} for {owner} ...");
    }
    let mut interrupted = crate::interrupted();
    let taking = take(client, &owner, name, kind, wait, lease);
    let held = tokio::select! {
        held = taking => held?,
        _ = &mut interrupted => return Ok(Exit::Interrupted),
    };
    let Some(held) = held else {
        say(
            json,
            json!({"event": "not_acquired", "name": name, "kind": kind_name}),
            format!("{name} was not free within the wait"),
        );
        return Ok(Exit::NotInState);
    };
    say(
        json,
        json!({"event": "acquired", "name": name, "kind": kind_name, "owner": owner.to_string(), "token": held.token}),
        format!(
            "holding {name} as {owner}{} for {duration:?}",
            held.token
                .map(|t| format!(" with token {t}"))
                .unwrap_or_default()
        ),
    );
    let lost = || {
        say(
            json,
            json!({"event": "lease_lost", "name": name}),
            format!("the hold on {name} was lost (expired or force-unlocked)"),
        );
        Ok(Exit::NotInState)
    };
    let ended = tokio::select! {
        _ = tokio::time::sleep(duration) => Exit::Done,
        _ = &mut interrupted => Exit::Interrupted,
        _ = held.lost => return lost(),
    };
    match (held.unlock)().await {
        Ok(()) => {}
        // Lost before the watchdog could tell: force-unlocked, say, between two renewals.
        Err(Error::NotHeld { .. }) => return lost(),
        Err(e) => return Err(Failure(Exit::RedisError, format!("releasing {name}: {e}"))),
    }
    say(
        json,
        json!({"event": "released", "name": name}),
        format!("released {name}"),
    );
    Ok(ended)
}
