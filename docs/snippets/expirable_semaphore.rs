use std::time::Duration;

use redisson_lock::{LockClient, Result};

/// Permits that come back by themselves when their holder dies.
pub async fn permit_expirable_semaphore(client: &LockClient) -> Result<()> {
    let reports = client.permit_expirable_semaphore("reports")?;
    reports.try_set_permits(4).await?;
    // Should this process die, the permit comes back 30 s after it was taken.
    let permit = reports
        .acquire_guard(1, Some(Duration::from_secs(30)))
        .await?;
    // ... the work; a long one extends its lease ...
    let id = permit.ids()[0];
    reports
        .update_lease_time(id, Some(Duration::from_secs(30)))
        .await?;
    // `false` when the lease had run out meanwhile.
    let in_time = permit.release().await?;
    assert!(in_time);
    Ok(())
}
