use redisson_lock::{LockClient, Result};

/// Permits that go back with their guard.
pub async fn semaphore_permits(client: &LockClient) -> Result<()> {
    let uploads = client.semaphore("uploads")?;
    uploads.try_set_permits(2).await?;

    let permits = uploads.acquire_guard(2).await?;
    assert_eq!(permits.permits(), 2);
    // ... the uploads ...
    // `release` returns once Redis has them back. Dropping the guard gives them back
    // too, but in the background: a moment after the drop.
    permits.release().await?;
    assert_eq!(uploads.available_permits().await?, 2);

    // `forget` leaves them taken, for someone else to release.
    let handed_over = uploads.acquire_guard(1).await?.forget();
    uploads.release(handed_over).await?;
    Ok(())
}
