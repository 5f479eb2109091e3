//! The reentrant lock's behaviour against a real redis-server.

#[path = "../support/mod.rs"]
mod support;

mod handing_over;
mod handing_over_fair;
mod handing_over_kinds;
mod holding;
mod lifecycle;
mod queries_and_arguments;
mod releasing;
mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redisson_lock::{Error, Lease, LockClient, LockGuard};
use support::*;
