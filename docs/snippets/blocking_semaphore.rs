use std::time::Duration;

use redisson_lock::blocking::LockClient;
use redisson_lock::Result;

/// The semaphore from a plain thread: every call blocks until it is done.
pub fn blocking_semaphore(client: &LockClient) -> Result<()> {
    let imports = client.semaphore("imports")?;
    imports.try_set_permits(2)?;
    if let Some(permits) = imports.try_acquire_guard_for(1, Duration::from_secs(5))? {
        // ... the import ...
        drop(permits); // given back before `drop` returns
    }
    assert_eq!(imports.available_permits()?, 2);
    Ok(())
}
