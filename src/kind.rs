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

pub use crate::core::kind::{HoldKind, Kind, Plain};
pub use crate::locks::fair_lock::Fair;
pub use crate::locks::fenced_lock::{Fenced, Token};
pub use crate::locks::lock::Reentrant;
pub use crate::locks::non_reentrant::{NonReentrant, NonReentrantFair};
pub use crate::locks::rw_lock::{ReadHold, WriteHold};
pub use crate::locks::spin_lock::Spin;
