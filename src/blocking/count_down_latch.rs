//! The blocking count-down latch.

use super::*;

/// The blocking [`CountDownLatch`](crate::CountDownLatch): Redisson's `RCountDownLatch`,
/// shared with Java.
///
/// # Example
///
/// ```no_run
#[doc = include_str!("../../docs/snippets/blocking_count_down_latch.rs")]
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    inner: crate::CountDownLatch,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::CountDownLatch")
            .field(&self.inner)
            .finish()
    }
}

impl LockClient {
    /// A handle on the count-down latch `name`, as
    /// [`LockClient::count_down_latch`](crate::LockClient::count_down_latch). No I/O.
    ///
    /// # Errors
    /// As [`LockClient::count_down_latch`](crate::LockClient::count_down_latch).
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        Ok(CountDownLatch {
            inner: self.inner.count_down_latch(name)?,
            runtime: self.runtime.clone(),
        })
    }
}

impl CountDownLatch {
    /// As [`CountDownLatch::MAX_COUNT`](crate::CountDownLatch::MAX_COUNT).
    pub const MAX_COUNT: i64 = crate::CountDownLatch::MAX_COUNT;

    /// As [`CountDownLatch::name`](crate::CountDownLatch::name).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    blocking_methods! {
        /// As [`CountDownLatch::try_set_count`](crate::CountDownLatch::try_set_count).
        ///
        /// # Errors
        /// As [`CountDownLatch::try_set_count`](crate::CountDownLatch::try_set_count).
        fn try_set_count(&self, count: u32) -> Result<bool>;
        /// As [`CountDownLatch::count_down`](crate::CountDownLatch::count_down).
        ///
        /// # Errors
        /// As [`CountDownLatch::count_down`](crate::CountDownLatch::count_down).
        fn count_down(&self) -> Result<()>;
        /// As [`CountDownLatch::count`](crate::CountDownLatch::count).
        ///
        /// # Errors
        /// As [`CountDownLatch::count`](crate::CountDownLatch::count).
        fn count(&self) -> Result<i64>;
        /// As [`CountDownLatch::wait`](crate::CountDownLatch::wait): blocks the thread until
        /// the count is 0.
        ///
        /// # Errors
        /// As [`CountDownLatch::wait`](crate::CountDownLatch::wait).
        fn wait(&self) -> Result<()>;
        /// As [`CountDownLatch::wait_for`](crate::CountDownLatch::wait_for): blocks the
        /// thread at most `timeout`.
        ///
        /// # Errors
        /// As [`CountDownLatch::wait_for`](crate::CountDownLatch::wait_for).
        fn wait_for(&self, timeout: Duration) -> Result<bool>;
        /// As [`CountDownLatch::delete`](crate::CountDownLatch::delete).
        ///
        /// # Errors
        /// As [`CountDownLatch::delete`](crate::CountDownLatch::delete).
        fn delete(&self) -> Result<bool>;
    }
}
