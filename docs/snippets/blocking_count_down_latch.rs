use std::time::Duration;

use redisson_lock::blocking::LockClient;
use redisson_lock::Result;

/// Two threads count down; this one waits for both.
pub fn blocking_count_down_latch(client: &LockClient) -> Result<()> {
    let ready = client.count_down_latch("ready")?;
    ready.try_set_count(2)?;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let ready = ready.clone();
            std::thread::spawn(move || ready.count_down())
        })
        .collect();
    // A worker that dies never counts down: give the wait a limit.
    let open = ready.wait_for(Duration::from_secs(30))?;
    for worker in workers {
        worker.join().expect("a worker thread")?;
    }
    assert!(open);
    Ok(())
}
