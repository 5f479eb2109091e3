#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

mod acquire;
mod client;
mod engine;
mod error;
mod fair_lock;
mod guard;
mod keys;
mod latches;
mod lock;
mod owner;
mod pubsub;
mod script;
mod watchdog;

pub use client::{LockClient, LockClientBuilder};
pub use error::{Error, Result};
pub use fair_lock::FairLock;
pub use guard::Lease;
pub use lock::{Lock, LockGuard};
pub use owner::LockOwner;

/// The Redis client this crate runs on, re-exported so that its configuration types can be
/// named without a separate dependency.
pub use fred;
pub use uuid::Uuid;
