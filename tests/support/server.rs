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
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

const APT_LOCK: &str = "/tmp/redisson-lock-apt.lock";

/// How long a freshly spawned server may take to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a graceful `SHUTDOWN` may take before we resort to SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound for one `command()` reply, so a bad test fails instead of hanging.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Returns the path of the `redis-server` binary: the first on `PATH` (then `/usr/bin`,
/// `/usr/local/bin`), installing it with apt-get when running as root and it is missing.
/// Panics with install instructions otherwise. The result is cached for the life of the
/// process. To run against another server (Redis 6.2, Valkey, ...), put its directory first
/// on `PATH`.
pub fn ensure_redis_server() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| ensure_installed("redis-server", "redis-server"))
        .clone()
}

/// The (major, minor) version of [`ensure_redis_server`]'s binary, from its `--version`
/// (`Redis server v=7.0.15 ...`; Valkey's says `Valkey server v=8.0.1 ...`).
pub fn server_version() -> (u32, u32) {
    server_identity().1
}

/// Whether [`ensure_redis_server`]'s binary is Valkey (its `--version` says so).
pub fn is_valkey() -> bool {
    server_identity().0
}

fn server_identity() -> (bool, (u32, u32)) {
    static IDENTITY: OnceLock<(bool, (u32, u32))> = OnceLock::new();
    *IDENTITY.get_or_init(|| {
        let binary = ensure_redis_server();
        let output = Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} --version: {e}", binary.display()));
        let text = String::from_utf8_lossy(&output.stdout);
        let version = (text.split_whitespace())
            .find_map(|word| word.strip_prefix("v="))
            .unwrap_or_else(|| panic!("no version in {} --version: {text}", binary.display()));
        let mut numbers = version.split('.').map(|n| n.parse().unwrap_or(0));
        let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        (text.starts_with("Valkey"), version)
    })
}

/// Whether the server has what Redis 7.0 brought (sharded pub/sub, `PEXPIRETIME`, several
/// parameters in one `CONFIG SET`, `--enable-debug-command`, ...). When it has not, reports
/// the test [`skipped`] as needing Redis 7.0 for `feature`, and returns false: the caller
/// returns.
pub fn has_redis_7(test: &str, feature: &str) -> bool {
    let (major, minor) = server_version();
    if major >= 7 {
        return true;
    }
    skipped(
        test,
        &format!("needs Redis 7.0 ({feature}); the server is {major}.{minor}"),
    );
    false
}

/// Reports `test` skipped: prints `SKIPPED <test>: <why>` to stderr (past the test harness's
/// capture, so it shows for a passing test too) and appends that line to the file
/// `REDISSON_LOCK_SKIPPED` names, if set (CI lists and counts them).
pub fn skipped(test: &str, why: &str) {
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = io::stderr().write_all(line.as_bytes());
    if let Some(file) = std::env::var_os("REDISSON_LOCK_SKIPPED") {
        let appended = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            panic!("cannot append to {}: {e}", Path::new(&file).display());
        }
    }
}

/// `args` for the server that runs them: before 7.0, `DEBUG` is always enabled and
/// `--enable-debug-command` (with its value) unknown, so it is left out.
fn for_this_server(args: &[String]) -> Vec<String> {
    if server_version() >= (7, 0) {
        return args.to_vec();
    }
    let mut kept = Vec::with_capacity(args.len());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--enable-debug-command" {
            args.next();
        } else {
            kept.push(arg.clone());
        }
    }
    kept
}

/// Returns the path of `binary`, installing Debian's `package` with apt-get when it is
/// missing and this process runs as root; otherwise panics with the command to run.
pub fn ensure_installed(binary: &str, package: &str) -> PathBuf {
    if let Some(path) = find_executable(binary) {
        return path;
    }
    install(package);
    find_executable(binary).unwrap_or_else(|| {
        panic!("{binary} is still missing after apt-get; install it with: sudo apt-get install -y {package}")
    })
}

/// Looks for an executable in `PATH`, then in the usual system directories.
fn find_executable(name: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    match fs::metadata(path) {
        #[cfg(unix)]
        Ok(meta) => {
            use std::os::unix::fs::PermissionsExt;
            meta.is_file() && meta.permissions().mode() & 0o111 != 0
        }
        #[cfg(not(unix))]
        Ok(meta) => meta.is_file(),
        Err(_) => false,
    }
}

/// True when the effective uid is 0 (no `libc`: read /proc, fall back to `id -u`).
fn is_root() -> bool {
    if let Ok(status) = fs::read_to_string("/proc/self/status") {
        // "Uid:\t<real>\t<effective>\t<saved>\t<fs>"
        if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
            return line.split_whitespace().nth(2) == Some("0");
        }
    }
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn install(package: &str) {
    if !is_root() || find_executable("apt-get").is_none() {
        panic!(
            "{package} not found (searched PATH, /usr/bin, /usr/local/bin); \
             install it with: sudo apt-get install -y {package}"
        );
    }
    eprintln!("{package} not found; installing it with apt-get (one-time, may take a minute)");
    // flock serialises parallel test binaries, which would otherwise fight
    // over the dpkg lock; the script re-checks once it holds the lock.
    let mut cmd = if find_executable("flock").is_some() {
        let mut c = Command::new("flock");
        c.arg(APT_LOCK);
        c.arg("sh");
        c
    } else {
        Command::new("sh")
    };
    // Keep apt's stdout away from the test harness output; errors still show.
    let status = cmd
        .args([
            "-c",
            &format!(
                "dpkg -s {package} >/dev/null 2>&1 || (apt-get update -qq && \\
                 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {package})"
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => {
            panic!("installing {package} failed ({other:?}); install it with: sudo apt-get install -y {package}")
        }
    }
}

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
