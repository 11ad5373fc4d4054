//! `quorumlock elect` and `quorumlock leader`, driven as a user would:
//! spawned against real testkit nodes, judged by exit status and output.
//! Synchronisation is by the command's own output (it prints a line once
//! it runs as leader), never by sleeping; timeouts only turn a hang into a
//! failure.

use crate::cli_support;
use crate::support;

use cli_support::{NODE_TIMEOUT, Running, assert_status, finish, quorumlock, stderr};
use std::process::{Command, Output, Stdio};

use nix::sys::signal::{Signal, kill};
use quorumlock::testkit::{RedisNodes, ServerOptions};
use support::Paused;

/// An election's keys beside its lock key, as `elect --help` names them.
const LEADER_SUFFIX: &str = ":leader";
const FENCE_SUFFIX: &str = ":fence";

/// The statuses `quorumlock elect --help` and `leader --help` document.
const NO_LEADER: i32 = 1;
const UNKNOWN: i32 = 69;
const LOST: i32 = 124;

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

/// `quorumlock leader --node-timeout NODE_TIMEOUT NAME`, run to its end.
fn leader_within(nodes: &RedisNodes, name: &str, node_timeout: &str) -> Output {
    let mut cmd = quorumlock();
    cmd.args(["leader", "--nodes", &nodes.urls().join(",")])
        .args(["--node-timeout", node_timeout])
        .arg(name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = finish(cmd.spawn().expect("spawn quorumlock"));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    out
}

/// `quorumlock leader NAME`: its status and its output.
fn leader(nodes: &RedisNodes, name: &str) -> (i32, String) {
    let out = leader_within(nodes, name, NODE_TIMEOUT);
    (
        out.status.code().expect("exit status"),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
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

/// The reported case: `sched3` is elected on three nodes, its keys are
/// gone from node 3 (as after an empty restart) and nodes 1 and 2 are
/// stopped. They may both hold the leader's token: `leader` cannot tell,
/// and exits 69 as its help says, not 1 ("no leader").
#[test]
fn leader_exits_69_when_stopped_nodes_may_hold_the_leader() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let running = Running::spawn(elect(
        &nodes,
        &["--ttl", "20s", "--value", "web-7"],
        "sched3",
        &LEAD_UNTIL_STDIN_CLOSES,
    ));
    let term = term_of(&running.next_line(), "sched3");
    assert_eq!(leader(&nodes, "sched3"), (0, format!("{term}\tweb-7")));

    // The leader stands still (no renewal, no value keeper), so that
    // nothing puts node 3's keys back.
    kill(running.pid(), Signal::SIGSTOP).expect("stop quorumlock");
    let mut third = redis::Client::open(nodes[2].url())
        .expect("url")
        .get_connection()
        .expect("connect");
    let keys = [
        "sched3".to_owned(),
        format!("sched3{LEADER_SUFFIX}"),
        format!("sched3{FENCE_SUFFIX}"),
    ];
    // What the leader sent just before it stopped may land right after a
    // DEL: delete until the keys stay gone.
    loop {
        let _: i64 = redis::cmd("DEL").arg(&keys).query(&mut third).expect("DEL");
        let left: i64 = redis::cmd("EXISTS")
            .arg(&keys)
            .query(&mut third)
            .expect("EXISTS");
        if left == 0 {
            break;
        }
    }

    let stopped = [Paused::new(&nodes[0]), Paused::new(&nodes[1])];
    let out = leader_within(&nodes, "sched3", "250ms");
    assert_status(&out, UNKNOWN);
    assert!(
        stderr(&out).contains("cannot tell who leads `sched3`"),
        "{}",
        stderr(&out)
    );
    drop(stopped);

    kill(running.pid(), Signal::SIGCONT).expect("continue quorumlock");
    // Its command ends; it resigns and passes the command's status on.
    assert_status(&running.finish(), 3);
}

/// The reported case: a majority of five nodes is down. `elect` does not
/// campaign forever: it exits 69, as `exec` does, with one line per failed
/// node, and without running the command.
#[test]
fn elect_exits_69_naming_each_node_when_a_majority_is_down() {
    let nodes = RedisNodes::start(5).expect("nodes");
    for server in nodes.iter().skip(2) {
        server.kill();
    }
    let out = cli_support::output(elect(
        &nodes,
        &[],
        "nl:el",
        &["sh", "-c", "echo ran; exit 3"],
    ));
    assert_status(&out, UNKNOWN);
    assert_eq!(cli_support::stdout(&out), "", "the command ran");
    let err = stderr(&out);
    let mut lines = err.lines();
    assert!(
        lines
            .next()
            .is_some_and(|l| l
                .starts_with("quorumlock: could not campaign for `nl:el` (nodes unavailable): ")),
        "{err}"
    );
    // The attempt stops once a quorum is impossible (3 of 5 failed), so a
    // live node's answer may be in or not; each failed node is listed once,
    // on its own line, and only the killed ones failed.
    let per_node: Vec<&str> = lines.collect();
    assert_eq!(per_node.len(), 3, "{err}");
    for server in nodes.iter().skip(2) {
        let line = format!("quorumlock:   node 127.0.0.1:{}: ", server.port());
        assert_eq!(
            per_node.iter().filter(|l| l.starts_with(&line)).count(),
            1,
            "{line}\n{err}"
        );
    }
}

/// `elect --help` lists the same statuses as `exec --help`, 69 included,
/// but 75: a campaign waits for another leader.
#[test]
fn elect_help_lists_execs_exit_statuses_but_busy() {
    let table = |subcommand: &str| {
        let mut cmd = quorumlock();
        cmd.args([subcommand, "--help"]);
        let out = cli_support::output(cmd);
        assert_status(&out, 0);
        let help = cli_support::stdout(&out);
        let statuses: Vec<String> = help
            .lines()
            .skip_while(|l| *l != "Exit status:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| w.starts_with(|c: char| c.is_ascii_digit() || c == 'N'))
            .map(str::to_owned)
            .collect();
        statuses
    };
    let exec: Vec<String> = table("exec").into_iter().filter(|s| s != "75").collect();
    assert!(exec.contains(&"69".to_owned()), "{exec:?}");
    assert_eq!(table("elect"), exec);
}

#[test]
fn leader_and_elect_help_describe_the_elections_keys_and_defaults() {
    for (subcommand, node_timeout) in [("leader", "[default: 1s]"), ("elect", "[default: 250ms]")] {
        let mut cmd = quorumlock();
        cmd.args([subcommand, "--help"]);
        let out = cli_support::output(cmd);
        assert_status(&out, 0);
        let help = cli_support::stdout(&out);
        assert!(!help.contains("the Redis key"), "{subcommand}:\n{help}");
        for key in ["NAME:fence", "NAME:leader", "the election's name"] {
            assert!(help.contains(key), "{subcommand}: no {key}:\n{help}");
        }
        let line = help
            .lines()
            .skip_while(|l| !l.contains("--node-timeout"))
            .nth(1)
            .unwrap_or_default();
        assert!(line.contains(node_timeout), "{subcommand}:\n{help}");
        assert!(!help.contains("for locking"), "{subcommand}:\n{help}");
    }
}

#[test]
fn status_on_an_election_reports_the_election_not_a_free_lock() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let status = || {
        let mut cmd = quorumlock();
        cmd.args(["status", "--nodes", &nodes.urls().join(",")])
            .args(["--node-timeout", NODE_TIMEOUT])
            .arg("sched5");
        let out = cli_support::output(cmd);
        let text = cli_support::stdout(&out);
        (out.status.code().expect("exit status"), text)
    };
    let running = Running::spawn(elect(
        &nodes,
        &["--value", "web-5"],
        "sched5",
        &LEAD_UNTIL_STDIN_CLOSES,
    ));
    let term = term_of(&running.next_line(), "sched5");
    let (code, text) = status();
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("election `sched5`"), "{text}");
    assert!(
        text.contains(&format!("verdict: led — term {term}, value `web-5`")),
        "{text}"
    );
    assert!(!text.contains("free"), "{text}");

    // Resigned: no leader, and the last one is named.
    assert_status(&running.finish(), 3);
    let (code, text) = status();
    assert_eq!(code, NO_LEADER, "{text}");
    assert!(text.starts_with("election `sched5`"), "{text}");
    assert!(
        text.contains(&format!(
            "verdict: no leader — no token is on 2 nodes (the last leader: term {term}, `web-5`)"
        )),
        "{text}"
    );
}
