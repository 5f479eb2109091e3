use std::time::Duration;

use redisson_lock::{LockClient, Result};

/// Three workers count down; the coordinator waits for all of them. Java's
/// `redisson.getCountDownLatch("batch-7")` shares the count.
pub async fn count_down_latch(client: &LockClient) -> Result<()> {
    let done = client.count_down_latch("batch-7")?;
    // Sets the count once; `false` while a count is set already.
    done.try_set_count(3).await?;

    for _worker in 0..3 {
        let done = done.clone();
        tokio::spawn(async move {
            // ... this worker's part ...
            done.count_down().await
        });
    }
    // A worker that dies never counts down: give the wait a limit.
    let all_done = done.wait_for(Duration::from_secs(30)).await?;
    assert!(all_done);
    assert_eq!(done.count().await?, 0); // an open latch has no key left
    Ok(())
}
