//! Private `redis-server` processes for integration tests and the demo.
//!
//! Each [`RedisServer`] runs its own `redis-server` on a free loopback port
//! with a fresh temporary directory, so tests can run in parallel and can
//! kill, stop or restart "their" Redis without disturbing anyone else.
//! Only `std` is used, so the file can be included from any test binary with
//! `#[path = "support/server.rs"] mod server;`.

// Every including binary uses a different subset of this module.
#![allow(dead_code)]

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

// A sibling file, named by path so that every binary including this file finds it.
#[path = "redis_binary.rs"]
mod redis_binary;

use redis_binary::for_this_server;
#[allow(unused_imports)] // Every including binary uses a different subset.
pub use redis_binary::{
    ensure_installed, ensure_redis_server, has_redis_7, is_valkey, server_version, skipped,
};

/// How long a freshly spawned server may take to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a graceful `SHUTDOWN` may take before we resort to SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound for one `command()` reply, so a bad test fails instead of hanging.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// A private `redis-server` child process; killed and cleaned up on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    persistent: bool,
    /// More `redis-server` arguments (cluster mode, replication settings, ...), kept for
    /// restarts.
    args: Vec<String>,
    /// A config file written to the data directory and passed first (a sentinel's).
    config: Option<String>,
}

impl RedisServer {
    /// Starts a throw-away server: no RDB snapshots, no AOF.
    pub fn start() -> RedisServer {
        Self::start_with(false, &[])
    }

    /// Starts a throw-away server with more `redis-server` arguments (`--name value` pairs).
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        Self::start_with(false, args)
    }

    /// Starts a server with an always-fsynced AOF, so data survives
    /// [`restart`](Self::restart) (and even [`kill`](Self::kill) followed by a restart).
    pub fn start_with_persistence() -> RedisServer {
        Self::start_with(true, &[])
    }

    /// Starts a server, `persistent` as [`start_with_persistence`](Self::start_with_persistence),
    /// with more `redis-server` arguments.
    pub fn start_with(persistent: bool, args: &[&str]) -> RedisServer {
        Self::start_full(persistent, None, args)
    }

    /// Starts a Sentinel whose config file holds `config`.
    pub fn start_sentinel(config: &str) -> RedisServer {
        Self::start_full(false, Some(config.to_owned()), &["--sentinel"])
    }

    fn start_full(persistent: bool, config: Option<String>, args: &[&str]) -> RedisServer {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let mut last_error = String::new();
        // The port is free when we pick it but may be grabbed by someone else
        // (e.g. a parallel test) before redis binds it: retry on a new port.
        for _ in 0..5 {
            let port = free_port();
            let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!(
                "redisson-lock-test-{}-{port}-{counter}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                persistent,
                args: args.iter().map(|arg| arg.to_string()).collect(),
                config: config.clone(),
            };
            match server.launch() {
                Ok(()) => return server,
                Err(e) => last_error = e, // dropping `server` removes its dir
            }
        }
        panic!("could not start redis-server after 5 attempts; last error: {last_error}")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's data directory (also holds `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server's process.
    pub fn signal(&self, signal: &str) {
        let pid = self
            .child
            .as_ref()
            .expect("the server runs")
            .id()
            .to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// SIGKILLs the server and reaps it. Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Graceful shutdown (`SHUTDOWN`, which fsyncs the AOF, for persistent
    /// servers; `SHUTDOWN NOSAVE` otherwise). Falls back to SIGKILL after 5 s.
    pub fn stop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        let request: &[u8] = if self.persistent {
            b"SHUTDOWN\r\n"
        } else {
            b"SHUTDOWN NOSAVE\r\n"
        };
        if let Ok(mut stream) = connect(self.port, Duration::from_secs(1)) {
            if stream.write_all(request).is_ok() {
                // A successful SHUTDOWN closes the connection without a reply;
                // an error reply also ends the wait. Either way we move on.
                let _ = stream.set_read_timeout(Some(STOP_TIMEOUT));
                let _ = stream.read(&mut [0u8; 256]);
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                self.child = None;
                return;
            }
            sleep(Duration::from_millis(10));
        }
        self.kill();
    }

    /// Stops the server and starts a new process on the same port and data
    /// directory with the same persistence setting.
    pub fn restart(&mut self) {
        self.stop();
        let mut last_error = String::new();
        // redis sets SO_REUSEADDR, so TIME_WAIT is not a problem, but be
        // tolerant of a process that exits right away for a transient reason.
        for attempt in 1..=5 {
            match self.launch() {
                Ok(()) => return,
                Err(e) => last_error = e,
            }
            sleep(Duration::from_millis(100 * attempt));
        }
        panic!(
            "could not restart redis-server on port {}: {last_error}",
            self.port
        )
    }

    /// Sends one command and renders the reply as text (see [`read_reply`]).
    /// Error replies come back as `ERR:<message>`; I/O failures panic.
    pub fn command(&self, args: &[&str]) -> String {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("redis command {args:?} on port {} failed: {e}", self.port))
    }

    /// Like [`command`](Self::command) but returns I/O errors instead of panicking.
    pub fn try_command(&self, args: &[&str]) -> io::Result<String> {
        send_command(self.port, args)
    }

    /// Sends one command from a thread of its own, for a command that blocks the server
    /// (`DEBUG SLEEP`); join the thread for the reply.
    pub fn command_on_thread(&self, args: &[&str]) -> std::thread::JoinHandle<io::Result<String>> {
        let port = self.port;
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        std::thread::spawn(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            send_command(port, &args)
        })
    }

    /// Spawns redis-server on `self.port` / `self.dir` and waits until it
    /// answers PING. `Err` means the process exited early (typically: port
    /// taken); a server that never becomes ready is a panic.
    fn launch(&mut self) -> Result<(), String> {
        let binary = ensure_redis_server();
        let mut cmd = Command::new(&binary);
        if let Some(config) = &self.config {
            let file = self.dir.join("redis.conf");
            // A Sentinel rewrites its file (its id, the master it follows, the epoch): a
            // restart keeps what it learnt, as a real one does.
            if !file.exists() {
                fs::write(&file, config)
                    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            }
            cmd.arg(file);
        }
        cmd.arg("--port").arg(self.port.to_string());
        cmd.args(["--bind", "127.0.0.1"]);
        if self.config.is_none() {
            cmd.args(["--save", ""]);
            if self.persistent {
                cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
            } else {
                cmd.args(["--appendonly", "no"]);
            }
        }
        cmd.arg("--dir").arg(&self.dir);
        cmd.args([
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ]);
        cmd.arg("--logfile").arg(self.dir.join("redis.log"));
        cmd.args(for_this_server(&self.args));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", binary.display()));
        let pid = child.id();
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "redis-server on port {} exited with {status}; log tail:\n{}",
                        self.port,
                        self.log_tail()
                    ));
                }
            }
            if ping(self.port) {
                // Another server (e.g. from a parallel test that picked the
                // same port) may be the one answering: check it is ours.
                match self.server_pid() {
                    Some(p) if p == pid => return Ok(()),
                    Some(other) => {
                        self.kill();
                        return Err(format!(
                            "port {} is served by another redis-server (pid {other})",
                            self.port
                        ));
                    }
                    None => {}
                }
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "redis-server on port {} did not answer PING within {START_TIMEOUT:?}; log tail:\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            sleep(Duration::from_millis(5));
        }
    }

    /// `process_id` from `INFO server`, if the server answers.
    fn server_pid(&self) -> Option<u32> {
        let info = self.try_command(&["INFO", "server"]).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Asks the OS for a currently unused loopback port.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("cannot bind a loopback port")
}

fn connect(port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), timeout)?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// Sends one command to the server on `port` and renders its reply (see [`read_reply`]).
/// One command to whatever listens on loopback `port` (a Sentinel, a server the test has
/// no handle of), its reply rendered as [`RedisServer::command`] does.
pub fn raw_command(port: u16, args: &[&str]) -> io::Result<String> {
    send_command(port, args)
}

fn send_command(port: u16, args: &[&str]) -> io::Result<String> {
    let stream = connect(port, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(COMMAND_TIMEOUT))?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    (&stream).write_all(&request)?;
    read_reply(&mut BufReader::new(stream))
}

/// Inline `PING`; true only on `+PONG` (a server still loading its AOF
/// answers `-LOADING`, which counts as not ready).
fn ping(port: u16) -> bool {
    let attempt = || -> io::Result<bool> {
        let stream = connect(port, Duration::from_millis(100))?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        (&stream).write_all(b"PING\r\n")?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line.starts_with("+PONG"))
    };
    attempt().unwrap_or(false)
}

/// Reads one RESP2 reply and renders it as text: simple strings, integers and
/// bulk strings as their text, errors as `ERR:<text>`, nulls as `(nil)`, and
/// arrays (flattened when nested) as their elements joined by `\n`.
fn read_reply(reader: &mut impl BufRead) -> io::Result<String> {
    let line = read_line(reader)?;
    let (kind, rest) = match line.split_first() {
        Some((kind, rest)) => (*kind, String::from_utf8_lossy(rest).into_owned()),
        None => return Err(invalid("empty reply line")),
    };
    match kind {
        b'+' | b':' => Ok(rest),
        b'-' => Ok(format!("ERR:{rest}")),
        b'$' => {
            let Ok(len) = usize::try_from(parse_len(&rest)?) else {
                return Ok("(nil)".to_string());
            };
            // Read by length, not by line: the payload may contain "\r\n".
            let mut payload = vec![0; len + 2];
            reader.read_exact(&mut payload)?;
            if !payload.ends_with(b"\r\n") {
                return Err(invalid("bulk string not terminated by CRLF"));
            }
            payload.truncate(len);
            Ok(String::from_utf8_lossy(&payload).into_owned())
        }
        b'*' => {
            let Ok(count) = usize::try_from(parse_len(&rest)?) else {
                return Ok("(nil)".to_string());
            };
            let items = (0..count)
                .map(|_| read_reply(reader))
                .collect::<io::Result<Vec<_>>>()?;
            Ok(items.join("\n"))
        }
        other => Err(invalid(&format!(
            "unexpected RESP type byte {:?}",
            other as char
        ))),
    }
}

/// One CRLF-terminated line, without the terminator.
fn read_line(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-reply",
        ));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_len(text: &str) -> io::Result<i64> {
    text.parse()
        .map_err(|_| invalid(&format!("bad length {text:?}")))
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Lua defining `at(key)`, a key's expiry as a Unix time in ms: `PEXPIRETIME`, or before Redis
/// 7.0 its PTTL plus the server's time, read within one millisecond of the clock PTTL counts from.
pub fn lua_at() -> &'static str {
    if server_version() >= (7, 0) {
        return "local function at(key) return redis.call('pexpiretime', key) end\n";
    }
    "local function ms(t) return t[1] * 1000 + math.floor(t[2] / 1000) end
    local function at(key)
        while true do
            local before = ms(redis.call('time'))
            local ttl = redis.call('pttl', key)
            if ttl < 0 then return ttl end
            if ms(redis.call('time')) == before then return before + ttl end
        end
    end\n"
}

/// `key`'s expiry as a Unix time in ms (`PEXPIRETIME`, on every server version).
pub fn expire_time_ms(server: &RedisServer, key: &str) -> i64 {
    let script = format!("{}return at(KEYS[1])", lua_at());
    let at = server.command(&["EVAL", &script, "1", key]);
    at.parse()
        .unwrap_or_else(|_| panic!("{key}'s expiry: {at}"))
}
