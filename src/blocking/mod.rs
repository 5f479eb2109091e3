//! The same locks for code without an async runtime (the `blocking` feature).
//!
//! Every type here wraps its async counterpart and runs it on a small Tokio runtime of its
//! own (one worker thread, made by [`LockClient::connect`] or [`LockClient::build`]), which
//! also runs the client's watchdog and pub/sub task. The semantics are the async API's:
//! the same wire protocol, re-entry by [`LockOwner`], a watchdog lease by default, and
//! [`Error`] for the same cases. Methods block the calling thread until done; they cannot
//! be cancelled, so there is no cancellation to be safe against, and a `try_lock_for`
//! bounds the wait instead.
//!
//! Guards release their hold when dropped, as the async ones do, but before `drop` returns
//! (a round trip; errors are logged), so the next statement can count on the lock being
//! free. [`LockGuard::is_lease_lost`] and [`LockGuard::wait_lease_lost`] tell when the hold
//! was lost.
//!
//! # Panics
//! Every blocking method panics when called from inside an async runtime (a thread that
//! runs tasks must not block), with a message that names the method; use the async API
//! there, or make the call in `tokio::task::spawn_blocking`. Dropping a guard there is
//! fine: the release then runs in the background.
//!
//! ```no_run
//! # fn demo() -> redisson_lock::Result<()> {
//! use std::time::Duration;
//! use redisson_lock::blocking::LockClient;
//!
//! let client = LockClient::connect("redis://127.0.0.1:6379")?;
//! let me = client.new_owner();
//! let lock = client.lock("orders:42")?;
//! if let Some(guard) = lock.try_lock_for(&me, Duration::from_secs(2))? {
//!     // ... the work the lock protects; check guard.is_lease_lost() between steps ...
//!     guard.unlock()?;
//! }
//! client.shutdown();
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::base::owner::LockOwner;
use crate::core::lease::Lease;
use crate::core::wait::WaitStrategy;
use crate::inspect::{FoundLocks, LockState};
use crate::kind::{
    Fair, Fenced, HoldKind, Kind, NonReentrant, NonReentrantFair, Plain, ReadHold, Reentrant, Spin,
    Token, WriteHold,
};
use crate::locks::multi_lock::MultiMember;
use crate::Uuid;

/// The runtime every handle of one blocking client shares. Dropped with the last handle,
/// without waiting for its threads (so that it may also be dropped inside another runtime).
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Arc<Runtime>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redisson-lock")
            .enable_all()
            .build()
            .map_err(|e| Error::invalid(format!("cannot start the lock client's runtime: {e}")))?;
        Ok(Arc::new(Runtime(Some(runtime))))
    }

    fn get(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime lives until dropped")
    }

    /// Runs `future` to its end on this runtime, for the blocking method `call` (named in
    /// the panic when it is called inside an async runtime, whose threads must not block).
    #[track_caller]
    fn block_on<F: Future>(&self, call: &str, future: F) -> F::Output {
        if tokio::runtime::Handle::try_current().is_ok() {
            panic!(
                "redisson_lock::blocking: {call} was called inside an async (Tokio) runtime, \
                 whose threads must not block; use the async API there (the type of the same \
                 name at the crate's root), or make the call in \
                 tokio::task::spawn_blocking or on a thread of your own"
            );
        }
        self.get().block_on(future)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// An async value and its blocking counterpart.
trait Blocking {
    type Out;
    fn wrap(self, runtime: &Arc<Runtime>) -> Self::Out;
}

macro_rules! same {
    ($($t:ty),*) => {$(
        impl Blocking for $t {
            type Out = $t;
            fn wrap(self, _: &Arc<Runtime>) -> $t {
                self
            }
        }
    )*};
}

same!((), bool, u32, u64, Duration);

impl<T: Blocking> Blocking for Option<T> {
    type Out = Option<T::Out>;
    fn wrap(self, runtime: &Arc<Runtime>) -> Self::Out {
        self.map(|value| value.wrap(runtime))
    }
}

impl<T: Blocking> Blocking for Result<T> {
    type Out = Result<T::Out>;
    fn wrap(self, runtime: &Arc<Runtime>) -> Self::Out {
        self.map(|value| value.wrap(runtime))
    }
}

/// Methods that run the async method of the same name and wait for it.
macro_rules! blocking_methods {
    ($($(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(&self $(, $arg: $ty)*) -> $out {
            let call = call_name::<Self>(stringify!($name));
            // A deprecated method's blocking twin is deprecated itself, for its callers.
            #[allow(deprecated)]
            let future = self.inner.$name($($arg),*);
            self.runtime.block_on(&call, future).wrap(&self.runtime)
        }
    )*};
}

/// `blocking::<Type>::<method>`, the blocking method `method` of `T`, for messages.
fn call_name<T: ?Sized>(method: &str) -> String {
    let path = std::any::type_name::<T>();
    // The type's name without its module path or generic arguments.
    let bare = path.split('<').next().unwrap_or(path);
    let name = bare.rsplit("::").next().unwrap_or(bare);
    format!("blocking::{name}::{method}")
}

/// A connection to Redis for locks: the blocking [`LockClient`](crate::LockClient).
#[derive(Clone)]
pub struct LockClient {
    inner: crate::LockClient,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::LockClient")
            .field(&self.inner)
            .finish()
    }
}

impl LockClient {
    /// Connects to one server, as [`LockClient::connect`](crate::LockClient::connect).
    ///
    /// # Errors
    /// As [`LockClient::connect`](crate::LockClient::connect).
    pub fn connect(url: &str) -> Result<LockClient> {
        LockClient::build(crate::LockClient::builder().url(url))
    }

    /// Connects with any settings of the async [`LockClientBuilder`](crate::LockClientBuilder).
    ///
    /// # Errors
    /// As [`LockClientBuilder::build`](crate::LockClientBuilder::build), and
    /// [`Error::InvalidArgument`] when the runtime cannot be started.
    pub fn build(builder: crate::LockClientBuilder) -> Result<LockClient> {
        let runtime = Runtime::new()?;
        let inner = runtime.block_on("blocking::LockClient::build", builder.build())?;
        Ok(LockClient { inner, runtime })
    }

    /// The async client underneath, for code that has a runtime after all.
    pub fn as_async(&self) -> &crate::LockClient {
        &self.inner
    }

    /// As [`LockClient::id`](crate::LockClient::id).
    pub fn id(&self) -> Uuid {
        self.inner.id()
    }

    /// As [`LockClient::new_owner`](crate::LockClient::new_owner).
    pub fn new_owner(&self) -> LockOwner {
        self.inner.new_owner()
    }

    /// As [`LockClient::shutdown`](crate::LockClient::shutdown), waiting until it is done.
    pub fn shutdown(&self) -> crate::ShutdownReport {
        self.runtime
            .block_on("blocking::LockClient::shutdown", self.inner.shutdown())
    }

    /// As [`LockClient::is_shut_down`](crate::LockClient::is_shut_down).
    pub fn is_shut_down(&self) -> bool {
        self.inner.is_shut_down()
    }

    /// As [`LockClient::renewed_holds`](crate::LockClient::renewed_holds).
    pub fn renewed_holds(&self) -> usize {
        self.inner.renewed_holds()
    }

    /// As [`LockClient::subscribed_channels`](crate::LockClient::subscribed_channels).
    pub fn subscribed_channels(&self) -> usize {
        self.inner.subscribed_channels()
    }

    /// As [`LockClient::listens_sharded`](crate::LockClient::listens_sharded).
    pub fn listens_sharded(&self) -> bool {
        self.inner.listens_sharded()
    }

    blocking_methods! {
        /// As [`LockClient::inspect`](crate::LockClient::inspect).
        ///
        /// # Errors
        /// As [`LockClient::inspect`](crate::LockClient::inspect).
        fn inspect(&self, name: &str) -> Result<LockState>;
        /// As [`LockClient::find_locks`](crate::LockClient::find_locks).
        ///
        /// # Errors
        /// As [`LockClient::find_locks`](crate::LockClient::find_locks).
        fn find_locks(&self, pattern: &str, max_keys: u64) -> Result<FoundLocks>;
        /// As [`LockClient::find_counters`](crate::LockClient::find_counters).
        ///
        /// # Errors
        /// As [`LockClient::find_counters`](crate::LockClient::find_counters).
        fn find_counters(&self, pattern: &str, max_keys: u64) -> Result<FoundLocks>;
        /// As [`LockClient::connected_lock_clients`](crate::LockClient::connected_lock_clients).
        ///
        /// # Errors
        /// As [`LockClient::connected_lock_clients`](crate::LockClient::connected_lock_clients).
        fn connected_lock_clients(&self) -> Result<HashMap<Uuid, String>>;
    }

    /// A handle on several locks taken as one; see [`MultiLock`](crate::MultiLock).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `members` is empty.
    pub fn multi_lock(
        &self,
        members: impl IntoIterator<Item = impl Into<MultiMember>>,
    ) -> Result<MultiLock> {
        Ok(MultiLock {
            inner: self.inner.multi_lock(members)?,
            runtime: self.runtime.clone(),
        })
    }

    /// A handle on a majority of locks; see [`RedLock`](crate::RedLock).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `members` is empty.
    pub fn red_lock(
        &self,
        members: impl IntoIterator<Item = impl Into<MultiMember>>,
    ) -> Result<MultiLock> {
        Ok(MultiLock {
            inner: self.inner.red_lock(members)?.into_multi_lock(),
            runtime: self.runtime.clone(),
        })
    }
}

same!(LockState, FoundLocks, HashMap<Uuid, String>);

/// Releases `release` (a guard's unlock) before returning, or in the background when the
/// thread runs async tasks; errors other than a lost hold are logged.
fn release_now<F>(runtime: &Arc<Runtime>, name: String, release: F)
where
    F: Future<Output = Result<()>> + Send + 'static,
{
    let done = async move {
        match release.await {
            Ok(()) | Err(Error::NotHeld { .. }) => {}
            Err(error) => {
                tracing::warn!(%error, lock = %name, "releasing a dropped guard failed; the hold expires with its lease")
            }
        }
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        drop(runtime.get().spawn(done));
    } else {
        runtime.block_on("dropping a blocking guard", done);
    }
}

// After the macros above, which they use.
mod count_down_latch;
mod exclusive;
mod guard;
mod multi_lock;
mod rw_lock;
mod semaphore;

pub use count_down_latch::CountDownLatch;
pub use exclusive::{
    ExclusiveLock, FairLock, FencedLock, Lock, NonReentrantFairLock, NonReentrantLock, SpinLock,
};
pub use guard::{FencedGuard, LockGuard, MultiLockGuard, ReadGuard, WriteGuard};
pub use multi_lock::MultiLock;
pub use rw_lock::ReadWriteLock;
pub use semaphore::{Semaphore, SemaphorePermits};
mod expirable_semaphore;
pub use expirable_semaphore::{ExpirablePermits, PermitExpirableSemaphore};
