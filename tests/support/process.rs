//! Child processes of a test: this test binary run again for one of its ignored tests, to be
//! killed, stopped and resumed like any other process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;

/// The command that runs this binary's ignored test `test` alone, its output to a pipe.
pub fn test_process_command(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

/// A running child test whose output lines are read as they come. Killed when dropped.
pub struct TestProcess {
    /// `None` once reaped.
    child: Option<Child>,
    lines: mpsc::UnboundedReceiver<String>,
}

impl TestProcess {
    /// Runs this binary's ignored test `test` with the environment variables `env`.
    pub fn spawn(test: &str, env: &[(&str, &str)]) -> TestProcess {
        let mut command = test_process_command(test);
        command.envs(env.iter().copied());
        let mut child = command.spawn().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (sender, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        TestProcess {
            child: Some(child),
            lines,
        }
    }

    /// The rest of the next output line that contains `marker`, after the marker (libtest
    /// may print the test's name at the start of the line). Fails the test when the child
    /// ends or stays silent for 30 s first.
    pub async fn expect(&mut self, marker: &str) -> String {
        let limit = Duration::from_secs(30);
        loop {
            let line = tokio::time::timeout(limit, self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("the child printed no {marker:?} within {limit:?}"))
                .unwrap_or_else(|| panic!("the child ended before printing {marker:?}"));
            if let Some((_, rest)) = line.split_once(marker) {
                return rest.trim().to_owned();
            }
        }
    }

    /// The next output line, if the child prints one within `limit`.
    pub async fn next_line(&mut self, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, self.lines.recv())
            .await
            .ok()
            .flatten()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running child").id()
    }

    /// Sends `signal` (a name as `kill` takes it: `STOP`, `CONT`, ...) to the child.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// SIGKILLs the child (no unlock, no goodbye) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the child to end by itself; whether it succeeded.
    pub async fn finished(mut self) -> bool {
        let mut child = self.child.take().expect("a running child");
        tokio::task::spawn_blocking(move || child.wait().unwrap().success())
            .await
            .unwrap()
    }
}

impl Drop for TestProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
