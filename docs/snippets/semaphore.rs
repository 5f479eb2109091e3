use std::time::Duration;

use redisson_lock::{LockClient, Result};

/// At most three exports at once, across every process and language: Java's
/// `redisson.getSemaphore("exports")` shares the permits.
pub async fn semaphore(client: &LockClient) -> Result<()> {
    let exports = client.semaphore("exports")?;
    // Sets the capacity once; `false` when it was set already (by anyone).
    exports.try_set_permits(3).await?;

    // Waits as long as it takes for a permit, then gives it back.
    exports.acquire_many(1).await?;
    // ... one export ...
    exports.release(1).await?;

    // Or waits 5 s at most, and takes a guard that gives the permits back.
    let wait = Duration::from_secs(5);
    if let Some(permits) = exports.try_acquire_guard_for(2, wait).await? {
        // ... two exports ...
        permits.release().await?;
    }
    assert_eq!(exports.available_permits().await?, 3);
    Ok(())
}
