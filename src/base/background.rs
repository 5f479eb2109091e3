//! Work a drop leaves to the Tokio runtime, which a drop cannot await.

use std::future::Future;

/// Spawns `task` on the current Tokio runtime; without one (a drop outside any runtime),
/// calls `without` instead, which says what is lost.
pub(crate) fn spawn_or(task: impl Future<Output = ()> + Send + 'static, without: impl FnOnce()) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(task)),
        Err(_) => without(),
    }
}
