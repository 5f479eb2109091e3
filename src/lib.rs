#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

mod attempt;
mod backoff;
#[cfg(feature = "blocking")]
pub mod blocking;
mod client;
mod connection_tasks;
mod engine;
mod error;
mod fair_lock;
mod fenced_lock;
mod guard;
mod handle;
pub mod inspect;
mod keys;
mod latches;
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
mod sentinel;
mod spin_lock;
mod time;
mod wait;
mod waiters;
mod watchdog;

pub use backoff::Backoff;
pub use client::{LockClient, LockClientBuilder};
pub use error::{Error, Result};
pub use fair_lock::FairLock;
pub use fenced_lock::{FencedGuard, FencedLock};
pub use guard::{Lease, LockGuard};
pub use lock::Lock;
pub use multi_lock::{MultiLock, MultiLockGuard, MultiMember, RedLock};
pub use non_reentrant::{NonReentrantFairLock, NonReentrantLock};
pub use owner::LockOwner;
pub use pubsub::PubSubMode;
pub use rw_lock::{ReadGuard, ReadWriteLock, WriteGuard};
pub use spin_lock::SpinLock;
pub use wait::WaitStrategy;

/// The Redis client this crate runs on, re-exported so that its configuration types can be
/// named without a separate dependency.
pub use fred;
pub use uuid::Uuid;
