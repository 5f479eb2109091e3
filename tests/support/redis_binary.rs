//! Finding, installing and identifying the `redis-server` binary (and the other tools the
//! tests run), and reporting tests skipped for what the server lacks. Only `std` is used: it
//! is part of `server.rs` wherever that file is included.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const APT_LOCK: &str = "/tmp/redisson-lock-apt.lock";

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
pub(super) fn for_this_server(args: &[String]) -> Vec<String> {
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
