use std::time::Duration;

use redisson_lock::blocking::LockClient;
use redisson_lock::Result;

/// Leased permits from a plain thread.
pub fn blocking_permit_expirable_semaphore(client: &LockClient) -> Result<()> {
    let renders = client.permit_expirable_semaphore("renders")?;
    renders.try_set_permits(1)?;
    // Back in the pool 60 s after it was taken, should this process die.
    let permit = renders.acquire_guard(1, Some(Duration::from_secs(60)))?;
    // ... the render ...
    assert!(permit.release()?, "released within its lease");
    Ok(())
}
