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

mod attempt;
mod background;
mod backoff;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod builder;
mod client;
mod connection_name;
mod connection_tasks;
mod count_down_latch;
mod counter;
mod engine;
mod error;
mod exclusive;
mod expirable_semaphore;
mod fair_lock;
mod fenced_lock;
mod guard;
mod handle;
pub mod inspect;
mod keys;
pub mod kind;
mod latches;
mod lease;
mod link;
mod lock;
mod multi_lock;
mod non_reentrant;
mod observe;
mod owner;
mod protocol;
mod pubsub;
mod redirect;
mod release;
mod replicas;
mod rw_lock;
mod script;
mod semaphore;
mod sentinel;
mod spin_lock;
mod time;
mod url;
mod wait;
mod waiters;
mod watchdog;

pub use backoff::Backoff;
pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use count_down_latch::CountDownLatch;
pub use error::{Error, Result};
pub use exclusive::ExclusiveLock;
pub use expirable_semaphore::{ExpirablePermits, PermitExpirableSemaphore, PermitId, MAX_ACQUIRE};
pub use fair_lock::FairLock;
pub use fenced_lock::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use lease::Lease;
pub use lock::Lock;
pub use multi_lock::{MultiLock, MultiLockGuard, MultiMember, RedLock};
pub use non_reentrant::{NonReentrantFairLock, NonReentrantLock};
pub use owner::LockOwner;
pub use pubsub::PubSubMode;
pub use rw_lock::{ReadGuard, ReadWriteLock, WriteGuard};
pub use semaphore::{Semaphore, SemaphorePermits, MAX_PERMITS};
pub use spin_lock::SpinLock;
pub use wait::WaitStrategy;

/// The Redis client this crate runs on, re-exported so that its configuration types can be
/// named without a separate dependency.
pub use fred;
pub use uuid::Uuid;
