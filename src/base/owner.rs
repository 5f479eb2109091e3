//! Owner identity: who holds a hold, as Redisson writes it (`<client uuid>:<id>`).

use std::fmt;
use std::hash::{Hash, Hasher};

use fred::types::Value;
use uuid::Uuid;

use crate::base::keys::Str;

/// The identity a hold is taken under: the reentrancy key.
///
/// The same owner re-enters a lock it holds; any other owner is excluded. On the wire it is
/// the hash field `<client uuid>:<id>`, exactly where Redisson puts `<client id>:<thread id>`,
/// so Java and Rust owners are told apart by their client UUIDs.
///
/// Make owners with [`LockClient::new_owner`](crate::LockClient::new_owner). Cloning an owner
/// shares its reentrancy (for example across spawned tasks that work for the same caller);
/// lock handles carry no owner, so cloning a handle never does.
///
/// An owner is an identity, not a connection: the locks of any client accept it, as the
/// members of a [`RedLock`](crate::RedLock) on independent servers must. A hold is renewed by
/// the client whose lock took it (its watchdog renews the owner's field, whatever UUID that
/// field carries), the same owner re-enters through another client's lock (the count goes to
/// 2), and every other owner stays excluded. Two owners are the same only when both parts
/// are: owners of two clients never collide.
#[derive(Clone)]
pub struct LockOwner {
    client_id: Uuid,
    id: u64,
    /// Shared text: a copy, or a script argument made of it, only counts a reference.
    field: Str,
}

// The field follows from the two parts.
impl PartialEq for LockOwner {
    fn eq(&self, other: &Self) -> bool {
        (self.client_id, self.id) == (other.client_id, other.id)
    }
}

impl Eq for LockOwner {}

impl Hash for LockOwner {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.client_id, self.id).hash(state);
    }
}

impl LockOwner {
    /// Builds an owner from its two parts.
    ///
    /// For experts: acting for an owner issued elsewhere (another process of yours, or a
    /// Java client whose UUID and thread id you know) lets this process re-enter and release
    /// that owner's holds. Never use another live client's UUID for owners of your own.
    pub fn from_parts(client_id: Uuid, id: u64) -> Self {
        let field = format!("{}:{}", client_id.hyphenated(), id).into();
        LockOwner {
            client_id,
            id,
            field,
        }
    }

    /// The UUID of the client that made this owner.
    pub fn client_id(&self) -> Uuid {
        self.client_id
    }

    /// The per-client number of this owner (Redisson's thread id).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The hash field of this owner's holds: `<client uuid>:<id>`.
    pub(crate) fn field(&self) -> &Str {
        &self.field
    }

    /// [`field`](Self::field) as a script argument.
    pub(crate) fn field_arg(&self) -> Value {
        Value::String(self.field.clone())
    }
}

impl fmt::Display for LockOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.field)
    }
}

impl fmt::Debug for LockOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockOwner({})", self.field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_redisson_lock_name() {
        let uuid = Uuid::parse_str("8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13").unwrap();
        let owner = LockOwner::from_parts(uuid, 57);
        assert_eq!(owner.to_string(), "8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:57");
        assert_eq!(&**owner.field(), "8c1e3f0a-5b7d-4e2a-9f61-2d4c7b9e0a13:57");
        assert_eq!(owner.id(), 57);
        assert_eq!(owner.client_id(), uuid);
        assert_eq!(owner, LockOwner::from_parts(uuid, 57));
        assert_ne!(owner, LockOwner::from_parts(uuid, 58));
    }
}
