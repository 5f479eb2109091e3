// The README's links name files of the source tree; in rustdoc (and on docs.rs) these
// definitions, which come first and so win, send them to the packaged files instead.
#![doc = "[benchmarks]: https://docs.rs/crate/redisson-lock/latest/source/docs/benchmarks.md"]
#![doc = "[changelog]: https://docs.rs/crate/redisson-lock/latest/source/docs/changelog.md"]
#![doc = "[choosing]: https://docs.rs/crate/redisson-lock/latest/source/docs/choosing.md"]
#![doc = "[compatibility]: https://docs.rs/crate/redisson-lock/latest/source/docs/compatibility.md"]
#![doc = "[design]: https://docs.rs/crate/redisson-lock/latest/source/docs/design.md"]
#![doc = "[java-and-rust]: https://docs.rs/crate/redisson-lock/latest/source/docs/java-and-rust.md"]
#![doc = "[operations]: https://docs.rs/crate/redisson-lock/latest/source/docs/operations.md"]
#![doc = "[protocol]: https://docs.rs/crate/redisson-lock/latest/source/docs/protocol.md"]
#![doc = "[reliability]: https://docs.rs/crate/redisson-lock/latest/source/docs/reliability.md"]
#![doc = "[topologies]: https://docs.rs/crate/redisson-lock/latest/source/docs/topologies.md"]
#![doc = ""]
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

mod base;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod builder;
mod client;
mod core;
mod engine;
pub mod inspect;
pub mod kind;
mod locks;
mod synchronizers;
mod topology;

pub use base::backoff::Backoff;
pub use base::error::{Error, Result};
pub use base::owner::LockOwner;
pub use builder::LockClientBuilder;
pub use client::{LockClient, ShutdownReport};
pub use core::guard::LockGuard;
pub use core::lease::Lease;
pub use core::wait::WaitStrategy;
pub use engine::hand_offs::HandOff;
pub use locks::exclusive::ExclusiveLock;
pub use locks::fair_lock::FairLock;
pub use locks::fenced_lock::{FencedGuard, FencedLock};
pub use locks::lock::Lock;
pub use locks::multi_lock::{MultiLock, MultiLockGuard, MultiMember, RedLock};
pub use locks::non_reentrant::{NonReentrantFairLock, NonReentrantLock};
pub use locks::rw_lock::{ReadGuard, ReadWriteLock, WriteGuard};
pub use locks::spin_lock::SpinLock;
pub use synchronizers::count_down_latch::CountDownLatch;
pub use synchronizers::expirable_semaphore::{
    ExpirablePermits, PermitExpirableSemaphore, PermitId, MAX_ACQUIRE,
};
pub use synchronizers::semaphore::{Semaphore, SemaphorePermits, MAX_PERMITS};
pub use topology::pubsub::PubSubMode;
/// For the `redisson-lock` tool only (its `doctor`): a connection URL read as the client
/// reads it. Not part of the API.
#[doc(hidden)]
pub use topology::url::parse_url;

/// The Redis client this crate runs on, re-exported so that its configuration types can be
/// named without a separate dependency.
pub use fred;
pub use uuid::Uuid;
