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
//! Every blocking method panics when called from inside an async runtime (Tokio refuses to
//! block a thread that runs tasks); use the async API there. Dropping a guard there is
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

use crate::error::{Error, Result};
use crate::guard::Lease;
use crate::inspect::{FoundLocks, LockState};
use crate::multi_lock::MultiMember;
use crate::owner::LockOwner;
use crate::wait::WaitStrategy;
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

    fn block_on<F: Future>(&self, future: F) -> F::Output {
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

same!((), bool, u64, Duration);

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
        pub fn $name(&self $(, $arg: $ty)*) -> $out {
            self.runtime.block_on(self.inner.$name($($arg),*)).wrap(&self.runtime)
        }
    )*};
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
        let inner = runtime.block_on(builder.build())?;
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
    pub fn shutdown(&self) {
        self.runtime.block_on(self.inner.shutdown())
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
        runtime.block_on(done);
    }
}

/// A guard type: the async guard it wraps, released on drop.
macro_rules! blocking_guard {
    ($(#[$doc:meta])* $guard:ident, $async:ty, { $($extra:tt)* }) => {
        $(#[$doc])*
        #[must_use = "dropping the guard releases the lock"]
        #[clippy::has_significant_drop]
        pub struct $guard {
            /// `None` once released or detached.
            inner: Option<$async>,
            runtime: Arc<Runtime>,
        }

        impl Blocking for $async {
            type Out = $guard;
            fn wrap(self, runtime: &Arc<Runtime>) -> $guard {
                $guard { inner: Some(self), runtime: runtime.clone() }
            }
        }

        impl $guard {
            fn get(&self) -> &$async {
                self.inner.as_ref().expect("a guard is live until consumed")
            }

            /// Releases the hold now.
            ///
            /// # Errors
            #[doc = concat!("As the async [`", stringify!($guard), "::unlock`](crate::", stringify!($guard), "::unlock).")]
            pub fn unlock(mut self) -> Result<()> {
                let guard = self.inner.take().expect("a guard is live until consumed");
                self.runtime.block_on(guard.unlock())
            }

            /// Whether the hold is known to be lost (the watchdog found it gone or could not
            /// renew it in time, or a fixed lease ended).
            pub fn is_lease_lost(&self) -> bool {
                self.get().is_lease_lost()
            }

            /// Waits at most `timeout` for the hold to be lost; `true` when it was.
            pub fn wait_lease_lost(&self, timeout: Duration) -> bool {
                let lost = self.get().lease_lost();
                self.runtime.block_on(async { tokio::time::timeout(timeout, lost).await.is_ok() })
            }

            $($extra)*
        }

        impl Drop for $guard {
            fn drop(&mut self) {
                if let Some(guard) = self.inner.take() {
                    let name = format!("{guard:?}");
                    release_now(&self.runtime, name, guard.unlock());
                }
            }
        }

        impl fmt::Debug for $guard {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(concat!("blocking::", stringify!($guard))).field(&self.inner).finish()
            }
        }
    };
}

/// The methods of a guard of one hold.
macro_rules! one_hold {
    () => {
        /// Gives up the guard but keeps the hold (and its renewal); release it later with
        /// the handle's `unlock(&owner)`.
        pub fn detach(mut self) {
            if let Some(guard) = self.inner.take() {
                guard.detach();
            }
        }

        /// The lock's name.
        pub fn name(&self) -> &str {
            self.get().name()
        }

        /// The owner this hold belongs to.
        pub fn owner(&self) -> &LockOwner {
            self.get().owner()
        }

        /// How long the lock's key lives unless renewed or released; `None` when it is gone.
        ///
        /// # Errors
        /// [`Error::Redis`] when Redis cannot be reached.
        pub fn remaining_lease(&self) -> Result<Option<Duration>> {
            self.runtime.block_on(self.get().remaining_lease())
        }
    };
}

blocking_guard!(
    /// One hold of a lock: the blocking [`LockGuard`](crate::LockGuard).
    LockGuard, crate::LockGuard, { one_hold!(); }
);
blocking_guard!(
    /// One hold of a fenced lock, with its token: the blocking
    /// [`FencedGuard`](crate::FencedGuard).
    FencedGuard, crate::FencedGuard, {
        one_hold!();

        /// The fencing token of this hold; see [`FencedGuard::token`](crate::FencedGuard::token).
        pub fn token(&self) -> u64 {
            self.get().token()
        }
    }
);
blocking_guard!(
    /// One read hold: the blocking [`ReadGuard`](crate::ReadGuard).
    ReadGuard, crate::ReadGuard, { one_hold!(); }
);
blocking_guard!(
    /// One write hold: the blocking [`WriteGuard`](crate::WriteGuard).
    WriteGuard, crate::WriteGuard, { one_hold!(); }
);
blocking_guard!(
    /// The members held by a multi-lock or RedLock: the blocking
    /// [`MultiLockGuard`](crate::MultiLockGuard).
    MultiLockGuard, crate::MultiLockGuard, {
        /// How many members are held.
        pub fn held(&self) -> usize {
            self.get().held()
        }

        /// The fencing tokens of the fenced members held, in member order.
        pub fn fence_tokens(&self) -> Vec<u64> {
            self.get().fence_tokens()
        }

        /// The names of the members held.
        pub fn names(&self) -> Vec<&str> {
            self.get().names()
        }

        /// As [`MultiLockGuard::validity`](crate::MultiLockGuard::validity).
        pub fn validity(&self) -> Option<Duration> {
            self.get().validity()
        }
    }
);

/// An exclusive lock kind: its handle, wrapping the async one.
macro_rules! blocking_lock {
    ($(#[$doc:meta])* $lock:ident, $guard:ident, $make:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $lock {
            inner: crate::$lock,
            runtime: Arc<Runtime>,
        }

        impl LockClient {
            #[doc = concat!("A handle on the lock `name`, as [`LockClient::", stringify!($make), "`](crate::LockClient::", stringify!($make), "). No I/O.")]
            ///
            /// # Errors
            /// [`Error::InvalidArgument`] for a name no lock can have (see
            /// [`LockClient::lock`](crate::LockClient::lock)).
            pub fn $make(&self, name: &str) -> Result<$lock> {
                Ok($lock { inner: self.inner.$make(name)?, runtime: self.runtime.clone() })
            }
        }

        impl From<&$lock> for MultiMember {
            fn from(lock: &$lock) -> MultiMember {
                MultiMember::from(&lock.inner)
            }
        }

        impl fmt::Debug for $lock {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(concat!("blocking::", stringify!($lock))).field(&self.inner).finish()
            }
        }

        impl $lock {
            /// The same lock with another lease policy for the holds it takes from now on.
            pub fn with_lease(self, lease: Lease) -> $lock {
                $lock { inner: self.inner.with_lease(lease), runtime: self.runtime }
            }

            /// The same lock with another way of waiting from now on.
            pub fn with_wait_strategy(self, wait: WaitStrategy) -> $lock {
                $lock { inner: self.inner.with_wait_strategy(wait), runtime: self.runtime }
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            /// The lease policy of the holds this handle takes.
            pub fn lease(&self) -> Lease {
                self.inner.lease()
            }

            /// How this handle waits.
            pub fn wait_strategy(&self) -> WaitStrategy {
                self.inner.wait_strategy()
            }

            blocking_methods! {
                #[doc = concat!("Takes the lock for `owner`, waiting as long as it takes; as [`", stringify!($lock), "::lock`](crate::", stringify!($lock), "::lock).")]
                ///
                /// # Errors
                #[doc = concat!("As [`", stringify!($lock), "::lock`](crate::", stringify!($lock), "::lock).")]
                fn lock(&self, owner: &LockOwner) -> Result<$guard>;
                /// One attempt; `Ok(None)` when the lock is busy.
                ///
                /// # Errors
                #[doc = concat!("As [`", stringify!($lock), "::try_lock`](crate::", stringify!($lock), "::try_lock).")]
                fn try_lock(&self, owner: &LockOwner) -> Result<Option<$guard>>;
                /// Waits at most `wait`; `Ok(None)` when the wait ran out.
                ///
                /// # Errors
                #[doc = concat!("As [`", stringify!($lock), "::try_lock_for`](crate::", stringify!($lock), "::try_lock_for).")]
                fn try_lock_for(&self, owner: &LockOwner, wait: Duration) -> Result<Option<$guard>>;
                /// Releases one hold of `owner` without a guard, Java style.
                ///
                /// # Errors
                #[doc = concat!("As [`", stringify!($lock), "::unlock`](crate::", stringify!($lock), "::unlock).")]
                fn unlock(&self, owner: &LockOwner) -> Result<()>;
                /// Frees the lock whoever holds it, and wakes its waiters; `true` when it was
                /// held. It breaks mutual exclusion for the current holder.
                ///
                /// # Errors
                /// [`Error::Redis`] when Redis cannot be reached.
                fn force_unlock(&self) -> Result<bool>;
                /// Whether anyone holds the lock.
                ///
                /// # Errors
                /// [`Error::Redis`], [`Error::WrongType`], as the async method.
                fn is_locked(&self) -> Result<bool>;
                /// Whether `owner` holds the lock.
                ///
                /// # Errors
                /// As [`is_locked`](Self::is_locked).
                fn is_held_by(&self, owner: &LockOwner) -> Result<bool>;
                /// How many times `owner` holds the lock.
                ///
                /// # Errors
                /// As [`is_locked`](Self::is_locked).
                fn hold_count(&self, owner: &LockOwner) -> Result<u64>;
                /// How long the current hold lasts; `None` when the lock is free.
                ///
                /// # Errors
                /// [`Error::Redis`] when Redis cannot be reached.
                fn remaining_lease(&self) -> Result<Option<Duration>>;
            }
        }
    };
}

blocking_lock!(
    /// The blocking [`Lock`](crate::Lock): reentrant, not fair.
    Lock, LockGuard, lock
);
blocking_lock!(
    /// The blocking [`FairLock`](crate::FairLock): granted in order of arrival.
    FairLock, LockGuard, fair_lock
);
blocking_lock!(
    /// The blocking [`FencedLock`](crate::FencedLock): a token with every hold.
    FencedLock, FencedGuard, fenced_lock
);
blocking_lock!(
    /// The blocking [`SpinLock`](crate::SpinLock): waits by back-off, without pub/sub.
    SpinLock, LockGuard, spin_lock
);
blocking_lock!(
    /// The blocking [`NonReentrantLock`](crate::NonReentrantLock).
    NonReentrantLock, LockGuard, non_reentrant_lock
);
blocking_lock!(
    /// The blocking [`NonReentrantFairLock`](crate::NonReentrantFairLock).
    NonReentrantFairLock, LockGuard, non_reentrant_fair_lock
);

impl FencedLock {
    blocking_methods! {
        /// As [`FencedLock::latest_token`](crate::FencedLock::latest_token).
        ///
        /// # Errors
        /// As [`FencedLock::latest_token`](crate::FencedLock::latest_token).
        fn latest_token(&self) -> Result<u64>;
    }
}

impl SpinLock {
    /// The same lock with another back-off between its attempts, as
    /// [`SpinLock::with_backoff`](crate::SpinLock::with_backoff).
    pub fn with_backoff(self, backoff: crate::Backoff) -> SpinLock {
        SpinLock {
            inner: self.inner.with_backoff(backoff),
            runtime: self.runtime,
        }
    }
}

// After the macros above, which they use.
mod multi_lock;
mod rw_lock;
mod semaphore;

pub use multi_lock::MultiLock;
pub use rw_lock::ReadWriteLock;
pub use semaphore::{Semaphore, SemaphorePermits};
mod expirable_semaphore;
pub use expirable_semaphore::{ExpirablePermits, PermitExpirableSemaphore};
