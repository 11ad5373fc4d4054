//! `quorumlock elect` and `quorumlock leader`, driven as a user would:
//! spawned against real testkit nodes, judged by exit status and output.
//! Synchronisation is by the command's own output (it prints a line once
//! it runs as leader), never by sleeping; timeouts only turn a hang into a
//! failure.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use quorumlock::testkit::{RedisNodes, ServerOptions};

/// A bound that turns a hang into a test failure; not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The statuses `quorumlock elect --help` and `leader --help` document.
const NO_LEADER: i32 = 1;
const LOST: i32 = 124;

/// A node timeout that a loaded test machine does not run into.
const NODE_TIMEOUT: &str = "5s";

fn quorumlock() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    command.env_remove("QUORUMLOCK_NODES");
    command
}

/// `quorumlock elect --nodes … <extra…> NAME -- <command…>`.
fn elect(nodes: &RedisNodes, extra: &[&str], name: &str, command: &[&str]) -> Command {
    let mut cmd = quorumlock();
    cmd.args(["elect", "--nodes", &nodes.urls().join(",")])
        .args(["--node-timeout", NODE_TIMEOUT])
        .args(extra)
        .arg(name)
        .arg("--")
        .args(command);
    cmd
}

/// Waits for a spawned quorumlock, killing it (by its pid) on a hang.
fn finish(child: Child) -> Output {
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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[track_caller]
fn assert_status(out: &Output, expected: i32) {
    assert_eq!(
        out.status.code(),
        Some(expected),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
    assert!(!stderr(out).contains("panicked"), "{}", stderr(out));
}

/// `quorumlock leader NAME`: its status and its output.
fn leader(nodes: &RedisNodes, name: &str) -> (i32, String) {
    let mut cmd = quorumlock();
    cmd.args(["leader", "--nodes", &nodes.urls().join(",")])
        .args(["--node-timeout", NODE_TIMEOUT])
        .arg(name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = finish(cmd.spawn().expect("spawn quorumlock"));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    (
        out.status.code().expect("exit status"),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
}

/// A running `quorumlock elect`, its command's output read line by line.
struct Running {
    /// `None` once handed to `finish`.
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// quorumlock's own messages, line by line.
    errors: mpsc::Receiver<String>,
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

impl Running {
    fn spawn(mut cmd: Command) -> Self {
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

    /// quorumlock's messages up to and including the first containing
    /// `text` (they are then no longer in `finish`'s output).
    fn errors_until(&self, text: &str) -> Vec<String> {
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
    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(HANG_GUARD)
            .expect("the command printed no line")
    }

    /// Whether the command has printed anything more by now (without
    /// waiting).
    fn printed(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    fn pid(&self) -> Pid {
        let child = self.child.as_ref().expect("running");
        Pid::from_raw(i32::try_from(child.id()).expect("pid"))
    }

    /// Lets a command blocked in `read` finish, by closing its stdin.
    fn close_stdin(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
    }

    /// Waits for quorumlock to exit; its output's stderr holds the
    /// messages not read yet.
    fn finish(mut self) -> Output {
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
        // Only if a test failed half-way: never leave a leader behind.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A command that says it leads, with its term, and waits for stdin.
const LEAD_UNTIL_STDIN_CLOSES: [&str; 3] = [
    "sh",
    "-c",
    r#"echo "leading $QUORUMLOCK_ELECTION $QUORUMLOCK_TERM"; read _; exit 3"#,
];

fn term_of(line: &str, name: &str) -> u64 {
    let rest = line
        .strip_prefix(&format!("leading {name} "))
        .unwrap_or_else(|| panic!("unexpected line {line:?}"));
    rest.parse().expect("a term")
}

#[test]
fn elect_runs_the_command_only_while_leading() {
    let nodes = RedisNodes::start(3).expect("nodes");
    assert_eq!(leader(&nodes, "cron").0, NO_LEADER);

    let first = Running::spawn(elect(
        &nodes,
        &["--value", "host-a"],
        "cron",
        &LEAD_UNTIL_STDIN_CLOSES,
    ));
    let first_term = term_of(&first.next_line(), "cron");
    assert_eq!(leader(&nodes, "cron"), (0, format!("{first_term}\thost-a")));

    // A second instance waits: its command does not run while the first leads.
    let second = Running::spawn(elect(
        &nodes,
        &["--value", "host-b"],
        "cron",
        &LEAD_UNTIL_STDIN_CLOSES,
    ));
    assert_eq!(
        leader(&nodes, "cron"),
        (0, format!("{first_term}\thost-a")),
        "still the first"
    );
    assert_eq!(second.printed(), None, "the second ran while the first led");

    // The first's command ends: it resigns, with its command's status, and
    // the second leads in a later term.
    let out = first.finish();
    assert_status(&out, 3);
    let second_term = term_of(&second.next_line(), "cron");
    assert!(second_term > first_term);
    assert_eq!(
        leader(&nodes, "cron"),
        (0, format!("{second_term}\thost-b"))
    );
    let out = second.finish();
    assert_status(&out, 3);
    assert_eq!(leader(&nodes, "cron").0, NO_LEADER, "both resigned");
}

#[test]
fn elect_stops_the_command_when_leadership_is_lost_and_with_again_runs_it_again() {
    // Persistent, so that the term counters survive the restarts below.
    let nodes = RedisNodes::start_with(3, ServerOptions::new().persistent()).expect("nodes");
    let running = Running::spawn(elect(
        &nodes,
        &["--ttl", "1s", "--grace", "10s", "--again"],
        "compactor",
        &[
            "sh",
            "-c",
            r#"echo "leading $QUORUMLOCK_ELECTION $QUORUMLOCK_TERM"; exec sleep 30"#,
        ],
    ));
    let first_term = term_of(&running.next_line(), "compactor");
    // A majority goes away: leadership is lost, the command stopped, and
    // quorumlock campaigns again — in vain until the nodes are back.
    nodes[0].kill();
    nodes[1].kill();
    let said = running.errors_until("campaigning for `compactor` again");
    assert!(
        said.iter()
            .any(|line| line.contains("lost the leadership of `compactor`")),
        "{said:?}"
    );
    assert_eq!(
        running.printed(),
        None,
        "the command ran again without leading"
    );
    nodes[0].restart().expect("restart");
    nodes[1].restart().expect("restart");
    // Leading again, the command runs again, in a later term.
    let second_term = term_of(&running.next_line(), "compactor");
    assert!(second_term > first_term, "{second_term} after {first_term}");
    // SIGTERM reaches the command; quorumlock resigns and passes its status on.
    kill(running.pid(), Signal::SIGTERM).expect("signal quorumlock");
    let out = running.finish();
    assert_status(&out, 128 + 15);
    assert_eq!(leader(&nodes, "compactor").0, NO_LEADER, "resigned");
}

#[test]
fn without_again_a_lost_leadership_exits_124() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let running = Running::spawn(elect(
        &nodes,
        &["--ttl", "1s"],
        "once",
        &[
            "sh",
            "-c",
            r#"echo "leading $QUORUMLOCK_ELECTION $QUORUMLOCK_TERM"; exec sleep 30"#,
        ],
    ));
    term_of(&running.next_line(), "once");
    nodes[0].kill();
    nodes[1].kill();
    let out = running.finish();
    assert_status(&out, LOST);
    assert!(
        stderr(&out).contains("lost the leadership of `once`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_stopped_leader_is_replaced_and_stops_its_command_once_it_runs_again() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let command = [
        "sh",
        "-c",
        r#"echo "leading $QUORUMLOCK_ELECTION $QUORUMLOCK_TERM"; exec sleep 30"#,
    ];
    let first = Running::spawn(elect(&nodes, &["--ttl", "1s"], "paused", &command));
    let first_term = term_of(&first.next_line(), "paused");
    // quorumlock itself stops (its command, in a group of its own, runs
    // on): no renewal, no timer. Another instance is elected.
    kill(first.pid(), Signal::SIGSTOP).expect("stop quorumlock");
    let second = Running::spawn(elect(&nodes, &["--ttl", "1s"], "paused", &command));
    let second_term = term_of(&second.next_line(), "paused");
    assert!(second_term > first_term, "{second_term} after {first_term}");
    // Running again, the first finds its leadership gone at once, stops
    // its command and exits 124. (Its command ran beside the second's
    // meanwhile: only a store fenced on the term stops its writes.)
    kill(first.pid(), Signal::SIGCONT).expect("continue quorumlock");
    let out = first.finish();
    assert_status(&out, LOST);
    assert!(
        stderr(&out).contains("lost the leadership of `paused`"),
        "{}",
        stderr(&out)
    );
    let (status, shown) = leader(&nodes, "paused");
    assert_eq!(
        (status, shown),
        (0, format!("{second_term}\tpid:{}", second.pid()))
    );
    kill(second.pid(), Signal::SIGTERM).expect("signal quorumlock");
    assert_status(&second.finish(), 128 + 15);
}
