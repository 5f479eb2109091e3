//! Runs the examples of the semaphores' and the count-down latch's API docs (the files in
//! `docs/snippets`, shown there as they are), async and blocking, against a private
//! redis-server (or `REDIS_URL`), so that they keep working as written.

mod redis;

mod semaphore {
    include!("../snippets/semaphore.rs");
}
mod semaphore_permits {
    include!("../snippets/semaphore_permits.rs");
}
mod count_down_latch {
    include!("../snippets/count_down_latch.rs");
}
mod expirable_semaphore {
    include!("../snippets/expirable_semaphore.rs");
}
mod blocking_semaphore {
    include!("../snippets/blocking_semaphore.rs");
}
mod blocking_count_down_latch {
    include!("../snippets/blocking_count_down_latch.rs");
}
mod blocking_expirable_semaphore {
    include!("../snippets/blocking_expirable_semaphore.rs");
}

use redisson_lock::{blocking, LockClient, Result};

#[tokio::main]
async fn main() -> Result<()> {
    let redis = redis::redis();
    let client = LockClient::connect(&redis.url).await?;
    semaphore::semaphore(&client).await?;
    println!("Semaphore: ok");
    semaphore_permits::semaphore_permits(&client).await?;
    println!("SemaphorePermits: ok");
    count_down_latch::count_down_latch(&client).await?;
    println!("CountDownLatch: ok");
    expirable_semaphore::permit_expirable_semaphore(&client).await?;
    println!("PermitExpirableSemaphore: ok");
    client.shutdown().await;

    // The blocking API, on a thread without a runtime, as it is meant to be used.
    let url = redis.url.clone();
    let blocking = std::thread::spawn(move || -> Result<()> {
        let client = blocking::LockClient::connect(&url)?;
        blocking_semaphore::blocking_semaphore(&client)?;
        println!("blocking::Semaphore: ok");
        blocking_count_down_latch::blocking_count_down_latch(&client)?;
        println!("blocking::CountDownLatch: ok");
        blocking_expirable_semaphore::blocking_permit_expirable_semaphore(&client)?;
        println!("blocking::PermitExpirableSemaphore: ok");
        client.shutdown();
        Ok(())
    });
    blocking.join().expect("the blocking examples' thread")?;
    Ok(())
}
