//! Redisson's synchronizers: the semaphore, the permit-expirable semaphore and the count-down
//! latch, on their shared counter core and the locks' wait loop.

pub(crate) mod count_down_latch;
pub(crate) mod counter;
pub(crate) mod expirable_semaphore;
pub(crate) mod semaphore;
