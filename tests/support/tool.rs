//! Running the `redisson-lock` binary from the tool's test binaries (feature `cli`), which
//! include this file themselves: other test binaries are built without the binary.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::support::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_redisson-lock");

pub fn command(server: &RedisServer, args: &[&str]) -> Command {
    command_at(&server.url(), args)
}

pub fn command_at(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.arg("--url").arg(url).args(args);
    command.stdin(Stdio::null());
    command
}

/// Runs the tool to its end.
pub fn run(server: &RedisServer, args: &[&str]) -> Output {
    command(server, args).output().unwrap()
}

/// Runs the tool with `--json` and reads its one JSON object; also returns the exit code.
pub fn run_json(server: &RedisServer, args: &[&str]) -> (Value, i32) {
    run_json_at(&server.url(), args)
}

pub fn run_json_at(url: &str, args: &[&str]) -> (Value, i32) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let output = command_at(url, &all).output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {text:?}"));
    (value, output.status.code().unwrap())
}

pub fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A running tool whose JSON lines are read as they come.
pub struct Running {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Running {
    pub fn start(server: &RedisServer, args: &[&str]) -> Running {
        Running::start_at(&server.url(), args)
    }

    pub fn start_at(url: &str, args: &[&str]) -> Running {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let mut child = command_at(url, &all)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).expect("a JSON line");
                if send.send(value).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// The next line whose `event` is `event`, skipping others; within 10 s.
    pub fn next_event(&self, event: &str) -> Value {
        let [line] = self.next_events([event]);
        line
    }

    /// The next line of each of `events`, whatever their order, skipping others; within
    /// 10 s.
    pub fn next_events<const N: usize>(&self, events: [&str; N]) -> [Value; N] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut found: [Option<Value>; N] = std::array::from_fn(|_| None);
        while found.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {events:?} lines within 10 s"));
            let at = events.iter().position(|event| line["event"] == *event);
            if let Some(at) = at.filter(|&at| found[at].is_none()) {
                found[at] = Some(line);
            }
        }
        found.map(Option::unwrap)
    }

    /// Sends SIGINT, as Ctrl-C does, and waits for the exit code.
    pub fn interrupt(mut self) -> i32 {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success());
        self.wait()
    }

    pub fn wait(&mut self) -> i32 {
        // Generous: on a loaded machine the tool's shutdown (QUIT on each connection, a
        // cluster's included) can take several command timeouts.
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the tool did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A hold of `count` written as Java's `RLock` writes it, with a 30 s lease.
pub fn java_hold(server: &RedisServer, name: &str, thread: u64, count: u64) {
    server.command(&["HSET", name, &java_owner(thread), &count.to_string()]);
    server.command(&["PEXPIRE", name, "30000"]);
}
