//! The read and write protocols of the read-write lock (Redisson's `RReadWriteLock`).

use std::sync::Arc;

use fred::interfaces::HashesInterface;
use fred::types::Value;

use crate::base::boxed::BoxFuture;
use crate::base::error::{Error, Result};
use crate::base::keys::{
    self, LockKeys, Str, MODE_FIELD, READ_MODE, READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE, WRITE_MODE,
};
use crate::base::owner::LockOwner;
use crate::core::attempt::{Attempt, Reply, Taken};
use crate::core::protocol::{read_reply, Answer, Protocol, Target};
use crate::core::wait::Wait;
use crate::engine::hand_offs::Heir;
use crate::engine::watchdog::{HoldKey, Renew};
use crate::topology::script::{
    static_arg, Call, READ_ACQUIRE, READ_LOCKED, READ_RELEASE, RW_FORCE_RELEASE, WRITE_ACQUIRE,
    WRITE_RELEASE,
};

/// The write acquire's reply when the owner holds only read holds (see
/// `lua/write_acquire.lua`); no PTTL is ever negative beyond -2.
const UPGRADE_REFUSED: i64 = -3;

/// `lua/rw_force_release.lua` (§5.7): frees the side whose `mode` the lock is in, telling
/// the waiters on `channel` with `message`.
fn force_release_call(
    lock: &Target,
    channel: &Str,
    message: &'static str,
    mode: &'static str,
) -> Call {
    Call::of(
        &RW_FORCE_RELEASE,
        [
            Value::String(lock.keys.raw.clone()),
            Value::String(channel.clone()),
        ],
        [static_arg(message), lock.publish(), static_arg(mode)],
    )
}

/// The names the read side uses in every call, made once per handle.
pub(super) struct RwNames {
    /// `redisson_rwlock:{raw}`.
    channel: Str,
    /// `{raw}` (see [`LockKeys::read_key_prefix`]), as a script argument.
    read_key_prefix: Str,
    /// The same, as the watchdog keeps it with each read hold.
    renewed_key_prefix: Arc<str>,
}

impl RwNames {
    pub(super) fn of(keys: &LockKeys) -> RwNames {
        let read_key_prefix = keys.read_key_prefix();
        RwNames {
            channel: keys.rw_channel().into(),
            renewed_key_prefix: read_key_prefix.as_str().into(),
            read_key_prefix: read_key_prefix.into(),
        }
    }
}

/// The read side's protocol (§5.2, §5.3, §5.6).
pub(super) struct Read(pub(super) RwNames);

impl Protocol for Read {
    fn kind(&self) -> &'static str {
        "read_lock"
    }

    fn renew(&self, _keys: &LockKeys) -> Renew {
        Renew::Reader {
            key_prefix: self.0.renewed_key_prefix.clone(),
        }
    }

    fn channel(&self, _keys: &LockKeys, _owner: &LockOwner) -> Str {
        self.0.channel.clone()
    }

    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, _wait: Wait) -> Call {
        Call::of(
            &READ_ACQUIRE,
            [
                Value::String(lock.keys.raw.clone()),
                Value::String(self.0.read_key_prefix.clone()),
            ],
            [Value::from(lease_ms), owner.field_arg()],
        )
    }

    /// A read release ignores the lease: the TTL shrinks to the longest live reader's.
    fn release(&self, lock: &Target, owner: &LockOwner, _lease_ms: i64) -> Call {
        Call::of(
            &READ_RELEASE,
            [
                Value::String(lock.keys.raw.clone()),
                Value::String(self.0.channel.clone()),
                Value::String(self.0.read_key_prefix.clone()),
            ],
            [
                static_arg(UNLOCK_MESSAGE),
                owner.field_arg(),
                lock.publish(),
            ],
        )
    }

    fn force_release(&self, lock: &Target) -> Call {
        force_release_call(lock, &self.0.channel, UNLOCK_MESSAGE, READ_MODE)
    }

    /// Read mode, or write mode where the writer also holds read holds (§5.7).
    fn is_locked(&self, lock: &Target) -> BoxFuture<Result<bool>> {
        let call = Call::of(&READ_LOCKED, [Value::String(lock.keys.raw.clone())], []);
        let (engine, name) = (lock.engine.clone(), lock.name.clone());
        Box::pin(async move {
            let reply = engine.run(call, &name).await?;
            Ok(matches!(reply, Value::Integer(1)))
        })
    }
}

/// The write side's protocol (§5.4, §5.5), which refuses an upgrade.
pub(super) struct Write {
    /// `redisson_rwlock:{raw}`, made once per handle.
    channel: Str,
    /// How an owner's read holds are renewed, which names them among the client's holds.
    read_renew: Renew,
}

impl Write {
    pub(super) fn of(keys: &LockKeys) -> Write {
        Write {
            channel: keys.rw_channel().into(),
            read_renew: Renew::Reader {
                key_prefix: keys.read_key_prefix().into(),
            },
        }
    }
}

impl Protocol for Write {
    fn kind(&self) -> &'static str {
        "write_lock"
    }

    fn field(&self, owner: &LockOwner) -> Str {
        keys::write_field(owner.field()).into()
    }

    fn channel(&self, _keys: &LockKeys, _owner: &LockOwner) -> Str {
        self.channel.clone()
    }

    /// The read field lets the script refuse an upgrade (`UPGRADE_REFUSED`).
    fn acquire(&self, lock: &Target, owner: &LockOwner, lease_ms: i64, _wait: Wait) -> Call {
        Call::of(
            &WRITE_ACQUIRE,
            [Value::String(lock.keys.raw.clone())],
            [
                Value::from(lease_ms),
                Value::String(self.field(owner)),
                owner.field_arg(),
            ],
        )
    }

    fn read_acquire(&self, answer: Answer<'_>) -> Result<Attempt<Taken>> {
        let Answer {
            lock,
            owner,
            script,
            reply,
        } = answer;
        match read_reply(lock, script, reply)? {
            Reply::Busy(UPGRADE_REFUSED) => Err(Error::WouldDeadlock(
                format!(
                    "{owner} holds read-write lock {:?} for reading only; upgrading to write \
                     is refused, as it would wait for itself",
                    lock.name
                )
                .into(),
            )),
            reply => Ok(reply.attempt()),
        }
    }

    fn release(&self, lock: &Target, owner: &LockOwner, lease_ms: i64) -> Call {
        Call::of(
            &WRITE_RELEASE,
            [
                Value::String(lock.keys.raw.clone()),
                Value::String(self.channel.clone()),
            ],
            [
                static_arg(READ_UNLOCK_MESSAGE),
                Value::from(lease_ms),
                Value::String(self.field(owner)),
                lock.publish(),
            ],
        )
    }

    fn force_release(&self, lock: &Target) -> Call {
        force_release_call(lock, &self.channel, READ_UNLOCK_MESSAGE, WRITE_MODE)
    }

    fn hands_off(&self) -> bool {
        true
    }

    /// The write release, given the heir's write field and lease (see
    /// `lua/write_release.lua`): never on a downgrade, as the owner's read holds stay.
    fn hand_off(
        &self,
        lock: &Target,
        (owner, lease_ms): (&LockOwner, i64),
        heir: &dyn Heir,
    ) -> Call {
        let mut call = self.release(lock, owner, lease_ms);
        let heir_field = Value::String(self.field(heir.owner()));
        call.push_args([heir_field, Value::from(heir.lease_ms())]);
        call
    }

    /// A write hold, or a read hold (whose upgrade its first attempt refuses at once).
    fn held_by(&self, lock: &Target, owner: &LockOwner) -> bool {
        let read = HoldKey {
            key: lock.keys.raw.clone(),
            field: owner.field().clone(),
            renew: self.read_renew.clone(),
        };
        let watchdog = lock.engine.watchdog();
        watchdog.keep_alive(&lock.hold_key(owner)).is_some() || watchdog.keep_alive(&read).is_some()
    }

    fn is_locked(&self, lock: &Target) -> BoxFuture<Result<bool>> {
        let mode = lock.query_key(|redis, key| async move {
            redis.hget::<Option<String>, _, _>(&*key, MODE_FIELD).await
        });
        Box::pin(async move { Ok(mode.await?.as_deref() == Some(WRITE_MODE)) })
    }
}
