//! Helpers shared by the tests that drive the `quorumlock` binary (cli.rs,
//! cli_election.rs): spawning it, waiting for it without hanging, reading
//! its command's output line by line, and judging its exit status.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A bound that turns a hang into a test failure; not a timing assertion.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A node timeout that a loaded test machine does not run into; it bounds
/// waiting for a node, it asserts nothing about speed.
pub const NODE_TIMEOUT: &str = "5s";

/// The binary, without a `QUORUMLOCK_NODES` inherited from the caller.
pub fn quorumlock() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    command.env_remove("QUORUMLOCK_NODES");
    command
}

/// Runs to completion and collects the output, failing the test on a hang.
pub fn output(mut cmd: Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quorumlock");
    finish(child)
}

/// Waits for a spawned quorumlock, failing the test (and killing it, by
/// its pid) if it hangs.
pub fn finish(child: Child) -> Output {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(out) => out.expect("wait for quorumlock"),
        Err(_) => {
            let _ = kill(pid, Signal::SIGKILL);
            panic!("quorumlock hung for {HANG_GUARD:?}");
        }
    }
}

pub fn status(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {out:?}"))
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the exit status, showing the output when it differs, and that
/// quorumlock did not panic.
#[track_caller]
pub fn assert_status(out: &Output, expected: i32) {
    assert_eq!(
        status(out),
        expected,
        "stdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
    assert!(
        !stderr(out).contains("panicked"),
        "quorumlock panicked:\n{}",
        stderr(out)
    );
}

/// Sends each line `from` reads to a channel.
fn forward(from: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// A running quorumlock, its command's output and its own messages read
/// line by line.
pub struct Running {
    /// `None` once handed to `finish`.
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// quorumlock's own messages, line by line.
    errors: mpsc::Receiver<String>,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn quorumlock");
        let stdin = child.stdin.take();
        let lines = forward(child.stdout.take().expect("stdout"));
        let errors = forward(child.stderr.take().expect("stderr"));
        Self {
            child: Some(child),
            stdin,
            lines,
            errors,
        }
    }

    /// Spawns `cmd` and waits until its command prints its first line
    /// (which it does only once it runs under the lock or leadership).
    pub fn start(cmd: Command) -> (Self, String) {
        let mut running = Self::spawn(cmd);
        match running.lines.recv_timeout(HANG_GUARD) {
            Ok(first) => (running, first),
            Err(_) => {
                running.kill();
                let out = running.finish();
                panic!("the command never started: {}", stderr(&out));
            }
        }
    }

    /// quorumlock's messages up to and including the first containing
    /// `text` (they are then no longer in `finish`'s output).
    pub fn errors_until(&self, text: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.errors.recv_timeout(HANG_GUARD) {
                Ok(line) => {
                    let found = line.contains(text);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => panic!("quorumlock never said {text:?}: {seen:?}"),
            }
        }
    }

    /// The command's next line of output.
    pub fn next_line(&self) -> String {
        self.lines
            .recv_timeout(HANG_GUARD)
            .expect("the command printed no line")
    }

    /// Whether the command has printed anything more by now (without
    /// waiting).
    pub fn printed(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    pub fn pid(&self) -> Pid {
        let child = self.child.as_ref().expect("running");
        Pid::from_raw(i32::try_from(child.id()).expect("pid"))
    }

    /// Lets a command blocked in `read` finish, by closing its stdin.
    pub fn close_stdin(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
    }

    pub fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
        }
    }

    /// Waits for quorumlock to exit; its output's stderr holds the
    /// messages not read yet.
    pub fn finish(mut self) -> Output {
        self.close_stdin();
        let mut out = finish(self.child.take().expect("running"));
        // The process is gone: the channel ends once its pipe is drained.
        let rest: Vec<String> = self.errors.iter().collect();
        out.stderr = rest.join("\n").into_bytes();
        out
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Only if a test failed half-way: never leave a holder behind.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
