//! What the core asks of a lock kind as a type: [`Kind`] for the handle, [`HoldKind`] for
//! what a guard carries. Public through the crate's `kind` module, which also lists the
//! kinds' markers; both traits are sealed.

use crate::core::protocol::Protocol;

/// A kind of exclusive lock: the `K` of [`ExclusiveLock<K>`](crate::ExclusiveLock).
pub trait Kind: sealed::Kind + Send + Sync + 'static {
    /// What a hold of this kind carries: [`Token`](crate::kind::Token) for a fenced lock, [`Plain`] otherwise.
    type Hold: HoldKind;
}

/// What a [`LockGuard<H>`](crate::LockGuard) carries beside its hold, which also tells the
/// guards of different locks apart: [`Plain`], [`Token`](crate::kind::Token), [`ReadHold`](crate::kind::ReadHold),
/// [`WriteHold`](crate::kind::WriteHold).
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
// The seal is out of users' sight, so it may name the crate's own types.
#[allow(private_interfaces, private_bounds)]
pub(crate) mod sealed {
    use super::*;

    /// What a kind runs.
    pub trait Kind {
        /// The type name users know the kind's handle by, for `Debug`.
        const HANDLE: &'static str;

        /// The kind's protocol, which the core's handle runs.
        fn protocol() -> impl Protocol;
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
