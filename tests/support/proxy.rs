//! A TCP proxy on a free loopback port that stands between clients and a `redis-server` and
//! injects network faults on command: delay and jitter, a black hole, dropped connections and
//! half-open connections. Only `std` and Tokio are used, so the load-and-faults example can
//! include the file too.

// Every including binary uses a different subset of this module.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the network between the proxy's clients and the server does to the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// Bytes pass as they come.
    Clear,
    /// Every chunk waits `base` plus a random part of `jitter` before it is passed on, in
    /// order within each connection.
    Slow { base: Duration, jitter: Duration },
    /// Nothing passes either way. Connections stay open and new ones are accepted, but not
    /// served; what was sent meanwhile arrives once the network is clear again, as TCP
    /// retransmits it after a partition heals.
    BlackHole,
}

/// A fault-injecting proxy; it stops, closing every connection, when dropped.
pub struct FaultProxy {
    port: u16,
    control: Arc<Control>,
    accept: JoinHandle<()>,
}

struct Control {
    upstream: AtomicU16,
    net: watch::Sender<Net>,
    /// Bumped to close every open connection, on both sides.
    cut: watch::Sender<u64>,
    /// Bumped to make every open connection half-open (see [`FaultProxy::half_open`]).
    half_open: watch::Sender<u64>,
    /// The state of the jitter's generator.
    rng: AtomicU64,
}

impl FaultProxy {
    /// Starts a proxy to the server on loopback port `upstream`, with a clear network.
    pub async fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        let control = Arc::new(Control {
            upstream: AtomicU16::new(upstream),
            net: watch::channel(Net::Clear).0,
            cut: watch::channel(0).0,
            half_open: watch::channel(0).0,
            rng: AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ u64::from(port)),
        });
        let accept = tokio::spawn(accept_loop(listener, control.clone()));
        FaultProxy {
            port,
            control,
            accept,
        }
    }

    /// The URL clients connect to instead of the server's.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets what the network does from now on, to open connections and new ones.
    pub fn set(&self, net: Net) {
        self.control.net.send_replace(net);
    }

    /// The network's current condition.
    pub fn net(&self) -> Net {
        *self.control.net.borrow()
    }

    /// Closes every open connection on both sides, as a reset or a failed link does: the
    /// clients and the server both see the connection end. New connections are served.
    pub fn drop_connections(&self) {
        self.control.cut.send_modify(|n| *n += 1);
    }

    /// Makes every open connection half-open: the server side is closed (the server sees
    /// the client leave and forgets its state), while the client side stays open and
    /// silently swallows whatever the client sends, as after a server crash or a NAT that
    /// lost its state, which no FIN or RST reached the client for. New connections are
    /// served.
    pub fn half_open(&self) {
        self.control.half_open.send_modify(|n| *n += 1);
    }

    /// Sends new connections to the server on loopback port `upstream` (a failover
    /// behind a fixed address); open connections stay where they are.
    pub fn set_upstream(&self, upstream: u16) {
        self.control.upstream.store(upstream, Ordering::Relaxed);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.drop_connections();
    }
}

async fn accept_loop(listener: TcpListener, control: Arc<Control>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        tokio::spawn(serve(client, control.clone()));
    }
}

/// Carries one connection until either side closes it or a fault ends it.
async fn serve(client: TcpStream, control: Arc<Control>) {
    let mut net = control.net.subscribe();
    let mut cut = control.cut.subscribe();
    let mut half_open = control.half_open.subscribe();
    cut.borrow_and_update();
    half_open.borrow_and_update();
    // Not served while the network is a black hole: the client's first bytes wait.
    while *net.borrow_and_update() == Net::BlackHole {
        tokio::select! {
            changed = net.changed() => if changed.is_err() { return },
            _ = cut.changed() => return,
        }
    }
    let upstream = control.upstream.load(Ordering::Relaxed);
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return; // the server is down: the client sees its connection closed
    };
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    {
        let up = pump(&mut client_rx, &mut server_tx, &control);
        let down = pump(&mut server_rx, &mut client_tx, &control);
        tokio::select! {
            _ = up => return,
            _ = down => return,
            _ = cut.changed() => return,
            _ = half_open.changed() => {}
        }
    }
    // Half-open: the server's side goes, the client's stays and hears nothing back.
    drop((server_rx, server_tx));
    let mut discarded = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = client_rx.read(&mut discarded) => if !matches!(read, Ok(1..)) { return },
            _ = cut.changed() => return,
        }
    }
}

/// Carries one direction of a connection until its source closes or fails: each chunk is
/// passed on once the network's delay for it has passed (chunks queue up behind it, so the
/// delay adds latency, not a limit on throughput), and nothing moves in a black hole.
async fn pump(from: &mut OwnedReadHalf, to: &mut OwnedWriteHalf, control: &Control) {
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async {
        let mut net = control.net.subscribe();
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            if passable(&mut net).await.is_err() {
                return;
            }
            let Ok(n @ 1..) = from.read(&mut buffer).await else {
                return;
            };
            let due = Instant::now() + control.delay(*net.borrow());
            if queue.send((due, buffer[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writing = async {
        let mut net = control.net.subscribe();
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if passable(&mut net).await.is_err() || to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = reading => {}
        _ = writing => {}
    }
}

/// Returns once the network is not a black hole (at once when it is not).
async fn passable(net: &mut watch::Receiver<Net>) -> Result<(), watch::error::RecvError> {
    while *net.borrow_and_update() == Net::BlackHole {
        net.changed().await?;
    }
    Ok(())
}

impl Control {
    /// The delay the network adds to one chunk.
    fn delay(&self, net: Net) -> Duration {
        let Net::Slow { base, jitter } = net else {
            return Duration::ZERO;
        };
        let jitter_us = u64::try_from(jitter.as_micros()).unwrap_or(u64::MAX);
        let extra = match jitter_us {
            0 => 0,
            span => self.next_random() % span,
        };
        base + Duration::from_micros(extra)
    }

    /// xorshift: cheap, and good enough for jitter.
    fn next_random(&self) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x
    }
}
