//! The kinds of exclusive lock, as types: [`ExclusiveLock<K>`](crate::ExclusiveLock) is one
//! handle type for every kind, and [`LockGuard<H>`](crate::LockGuard) one guard type for
//! every hold. The names of everyday use are aliases of these ([`Lock`](crate::Lock) is
//! `ExclusiveLock<Reentrant>`, [`FencedGuard`](crate::FencedGuard) is `LockGuard<Token>`,
//! …), so code generic over lock kinds is written against the traits here:
//!
//! ```no_run
//! use redisson_lock::kind::Kind;
//! use redisson_lock::{ExclusiveLock, LockOwner, Result};
//!
//! /// Runs `job` under any exclusive lock: plain, fair, fenced, spin or non-reentrant.
//! async fn exclusively<K: Kind>(lock: &ExclusiveLock<K>, me: &LockOwner, job: impl FnOnce()) -> Result<()> {
//!     let guard = lock.lock(me).await?;
//!     job();
//!     guard.unlock().await
//! }
//! ```
//!
//! Both traits are sealed: the kinds are Redisson's, and each speaks its protocol.

use crate::core::handle::Handle;
use crate::error::Result;

pub use crate::locks::fair_lock::Fair;
pub use crate::locks::fenced_lock::{Fenced, Token};
pub use crate::locks::lock::Reentrant;
pub use crate::locks::non_reentrant::{NonReentrant, NonReentrantFair};
pub use crate::locks::rw_lock::{ReadHold, WriteHold};
pub use crate::locks::spin_lock::Spin;

/// A kind of exclusive lock: the `K` of [`ExclusiveLock<K>`](crate::ExclusiveLock).
pub trait Kind: sealed::Kind + Send + Sync + 'static {
    /// What a hold of this kind carries: [`Token`] for a fenced lock, [`Plain`] otherwise.
    type Hold: HoldKind;
}

/// What a [`LockGuard<H>`](crate::LockGuard) carries beside its hold, which also tells the
/// guards of different locks apart: [`Plain`], [`Token`], [`ReadHold`], [`WriteHold`].
pub trait HoldKind: sealed::HoldKind + std::fmt::Debug + Send + Sync + 'static {}

/// The hold of a lock without a fencing token: the `H` of a plain
/// [`LockGuard`](crate::LockGuard).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Plain;

impl HoldKind for Plain {}

impl sealed::HoldKind for Plain {
    const GUARD: &'static str = "LockGuard";

    fn new(_token: Option<u64>) -> Plain {
        Plain
    }
}

/// The hold of a multi-lock member of any kind: its token, when it has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Member(pub(crate) Option<u64>);

impl HoldKind for Member {}

impl sealed::HoldKind for Member {
    const GUARD: &'static str = "LockGuard";

    fn new(token: Option<u64>) -> Member {
        Member(token)
    }

    fn token(&self) -> Option<u64> {
        self.0
    }
}

/// What the crate asks of a kind, out of users' sight.
pub(crate) mod sealed {
    use super::*;

    /// How a kind's handle is made.
    pub trait Kind {
        /// The type name users know the kind's handle by, for `Debug`.
        const HANDLE: &'static str;

        /// The kind's core handle on the lock `name` (after the client's prefix).
        #[allow(private_interfaces)] // sealed: out of users' sight
        fn handle(engine: std::sync::Arc<crate::engine::Engine>, name: &str) -> Result<Handle>;
    }

    /// How a guard's hold is made from what the acquire script answered.
    pub trait HoldKind: Sized {
        /// The type name users know the guard by, for `Debug`.
        const GUARD: &'static str;

        /// From the fencing token of the acquisition (`Some` exactly for a fenced kind).
        fn new(token: Option<u64>) -> Self;

        /// The fencing token, for a hold that has one.
        fn token(&self) -> Option<u64> {
            None
        }
    }
}
