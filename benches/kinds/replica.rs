//! `replica_ack`: lock + unlock with and without the replica acknowledgement (WAIT).

use fred::interfaces::ClientLike;
use redisson_lock::{Lock, LockClient, LockOwner};
use tokio::runtime::Runtime;

use crate::common::*;

pub fn replica_ack(rt: &Runtime, args: &Args) {
    if !args.runs("replica_ack") {
        return;
    }
    let master = RedisServer::start_with_args(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let _replica = topology::start_replica_of(&master);
    let (on, off, bare) = rt.block_on(async {
        let on = LockClient::connect(&master.url()).await.unwrap();
        let off = LockClient::builder()
            .url(&master.url())
            .wait_for_replicas(None)
            .build()
            .await
            .unwrap();
        (on, off, Bare::connect(&master.url()).await)
    });
    let owned = |client: &LockClient, label: &str, n: usize| -> Vec<(Lock, LockOwner)> {
        (0..n)
            .map(|i| {
                let lock = client.lock(&format!("bench:replica:{label}:{i}")).unwrap();
                (lock, client.new_owner())
            })
            .collect()
    };
    let (rounds, ops) = if args.full { (5, 2_000) } else { (1, 64) };
    print_load("before replica_ack");
    for tasks in [1, 64] {
        let (with, without) = (owned(&on, "on", tasks), owned(&off, "off", tasks));
        let bare_locks: Vec<BareLock> = (0..tasks)
            .map(|i| bare.lock(&format!("bench:replica:bare:{i}"), &i.to_string()))
            .collect();
        interleaved(
            rt,
            &format!("replica_ack, {tasks} task(s)"),
            rounds,
            ops,
            &[
                side("check_on", |n| ours_parallel(&with, n)),
                // The bare scripts each pipelined with a WAIT, as Redisson sends them.
                side("bare_with_wait", |n| {
                    spread(n, tasks, |i, n| {
                        let (bare, lock) = (bare.clone(), bare_locks[i].clone());
                        async move {
                            for _ in 0..n {
                                bare.lock_unlock_replicated(&lock).await;
                            }
                        }
                    })
                }),
                side("check_off", |n| ours_parallel(&without, n)),
            ],
        );
    }
    rt.block_on(async {
        on.shutdown().await;
        off.shutdown().await;
        let _ = bare.redis.quit().await;
    });
}
