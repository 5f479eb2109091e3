//! Lock striping for a flash sale: one lock around the stock lets one buyer through at a
//! time; splitting the stock into N stripes, each with its own lock and its own counter,
//! lets N buyers through at once. A buyer starts at the stripe its id picks and moves on
//! while that stripe is sold out, so nothing is oversold and the last units still sell.
//!
//! Each purchase is a read-modify-write (GET the stripe's stock, then SET it one lower),
//! which is only correct under the stripe's lock; the run checks that exactly the stock
//! was sold. Run: `cargo run --release --manifest-path docs/examples/Cargo.toml --bin
//! flash-sale` prints purchases per second with 1 stripe and with 8, and the gain.

mod redis;

use std::time::{Duration, Instant};

use redisson_lock::fred::interfaces::KeysInterface;
use redisson_lock::{Lock, LockClient, Result};

const STOCK: u64 = 2_000;
const BUYERS: u64 = 64;

/// The stock split over `stripes` locks and counters.
struct Sale {
    locks: Vec<Lock>,
    counters: Vec<String>,
}

impl Sale {
    async fn open(client: &LockClient, run: &str, stripes: u64) -> Result<Sale> {
        let mut sale = Sale {
            locks: Vec::new(),
            counters: Vec::new(),
        };
        for stripe in 0..stripes {
            let counter = format!("sale:{run}:stock:{stripe}");
            // Spread the remainder so the stripes add up to STOCK exactly.
            let units = STOCK / stripes + u64::from(stripe < STOCK % stripes);
            let _: () = client
                .redis()
                .set(&counter, units, None, None, false)
                .await?;
            sale.locks
                .push(client.lock(&format!("sale:{run}:lock:{stripe}"))?);
            sale.counters.push(counter);
        }
        Ok(sale)
    }

    /// Buys one unit for `buyer`; `false` when every stripe is sold out.
    async fn buy(&self, client: &LockClient, buyer: u64) -> Result<bool> {
        let me = client.new_owner();
        let stripes = self.locks.len() as u64;
        for step in 0..stripes {
            let stripe = ((buyer + step) % stripes) as usize;
            let guard = self.locks[stripe].lock(&me).await?;
            let counter = &self.counters[stripe];
            let left: u64 = client.redis().get(counter).await?;
            if left > 0 {
                let _: () = client
                    .redis()
                    .set(counter, left - 1, None, None, false)
                    .await?;
            }
            guard.unlock().await?;
            if left > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Sells the whole stock to BUYERS concurrent buyers; purchases per second.
async fn run(client: &LockClient, stripes: u64) -> Result<f64> {
    let sale = std::sync::Arc::new(Sale::open(client, &format!("s{stripes}"), stripes).await?);
    let start = Instant::now();
    let buyers: Vec<_> = (0..BUYERS)
        .map(|buyer| {
            let (sale, client) = (sale.clone(), client.clone());
            tokio::spawn(async move {
                let mut bought = 0u64;
                while sale.buy(&client, buyer).await? {
                    bought += 1;
                }
                Ok::<u64, redisson_lock::Error>(bought)
            })
        })
        .collect();
    let mut sold = 0;
    for buyer in buyers {
        sold += buyer.await.unwrap()?;
    }
    let elapsed = start.elapsed();
    assert_eq!(sold, STOCK, "sold exactly the stock, never more");
    Ok(sold as f64 / elapsed.max(Duration::from_micros(1)).as_secs_f64())
}

#[tokio::main]
async fn main() -> Result<()> {
    let redis = redis::redis();
    let client = LockClient::connect(&redis.url).await?;
    let one = run(&client, 1).await?;
    println!("1 lock:   {one:>8.0} purchases/s ({BUYERS} buyers, {STOCK} units)");
    let eight = run(&client, 8).await?;
    println!("8 stripes:{eight:>8.0} purchases/s");
    println!("gain: {:.1}x", eight / one);
    client.shutdown().await;
    Ok(())
}
