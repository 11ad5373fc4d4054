//! The `quorumlock` binary, driven as a user would: spawned with arguments
//! against real testkit nodes, judged by its exit status and its output.
//!
//! Synchronisation is by the child's own output (it prints a line once it
//! runs under the lock), never by sleeping; timeouts only turn a hang into
//! a failure.

use crate::cli_support;

use cli_support::{
    NODE_TIMEOUT, Running, assert_status, finish, output, quorumlock, stderr, stdout,
};
use std::process::{Command, Stdio};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use quorumlock::testkit::RedisNodes;

// The statuses `quorumlock exec --help` documents.
const USAGE: i32 = 2;
const UNAVAILABLE: i32 = 69;
const BUSY: i32 = 75;
const LOST: i32 = 124;
const NOT_FOUND: i32 = 127;

fn nodes_arg(nodes: &RedisNodes) -> String {
    nodes.urls().join(",")
}

/// `quorumlock exec --nodes … <extra…> RESOURCE -- <command…>`.
fn exec(nodes: &RedisNodes, extra: &[&str], resource: &str, command: &[&str]) -> Command {
    let mut cmd = quorumlock();
    cmd.args(["exec", "--nodes", &nodes_arg(nodes)])
        .args(["--node-timeout", NODE_TIMEOUT])
        .args(extra)
        .arg(resource)
        .arg("--")
        .args(command);
    cmd
}

/// A holder: runs `sh` that prints `started`, then waits for stdin to close.
fn hold(nodes: &RedisNodes, resource: &str) -> Running {
    let (holder, first) = Running::start(exec(
        nodes,
        &["--no-wait"],
        resource,
        &["sh", "-c", "echo started; read _; exit 0"],
    ));
    assert_eq!(first, "started");
    holder
}

fn redis_get(url: &str, key: &str) -> Option<String> {
    let client = redis::Client::open(url).expect("url");
    let mut conn = client.get_connection().expect("connect");
    redis::cmd("GET").arg(key).query(&mut conn).expect("GET")
}

/// A lock taken for longer than any test runs: gone from a node only if
/// a release reached it.
const LONG_TTL: &str = "10m";

/// Waits until `key` is gone from every node. `exec` exits once its
/// release is decided at a quorum, with the release on its way to the
/// other nodes: with [`LONG_TTL`], the key goes from them only because
/// the release reached them.
fn until_released_everywhere(nodes: &RedisNodes, key: &str) {
    let since = std::time::Instant::now();
    for url in nodes.urls() {
        while redis_get(&url, key).is_some() {
            assert!(
                since.elapsed() < cli_support::HANG_GUARD,
                "not released on {url}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[test]
fn exec_runs_the_command_and_passes_its_status_through() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let out = output(exec(
        &nodes,
        &["--no-wait"],
        "job:a",
        &["sh", "-c", "exit 7"],
    ));
    assert_status(&out, 7);
    let out = output(exec(&nodes, &["--ttl", LONG_TTL], "job:a", &["true"]));
    assert_status(&out, 0);
    // Released on exit: nothing is left on any node.
    until_released_everywhere(&nodes, "job:a");
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_the_signal() {
    let nodes = RedisNodes::start(1).expect("nodes");
    let out = output(exec(&nodes, &[], "job:sig", &["sh", "-c", "kill -KILL $$"]));
    assert_status(&out, 128 + 9);
}

#[test]
fn exec_on_a_held_resource_is_busy_without_waiting_and_after_waiting() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let holder = hold(&nodes, "job:busy");

    let out = output(exec(&nodes, &["--no-wait"], "job:busy", &["true"]));
    assert_status(&out, BUSY);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line of reason:\n{err}");
    assert!(err.contains("job:busy") && err.contains("busy"), "{err}");
    assert_eq!(err.matches("job:busy").count(), 1, "names it once:\n{err}");

    let out = output(exec(&nodes, &["--wait", "300ms"], "job:busy", &["true"]));
    assert_status(&out, BUSY);
    let err = stderr(&out);
    assert!(err.contains("gave up"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line of reason:\n{err}");
    assert_eq!(err.matches("job:busy").count(), 1, "names it once:\n{err}");

    assert_status(&holder.finish(), 0);
    let out = output(exec(&nodes, &["--no-wait"], "job:busy", &["true"]));
    assert_status(&out, 0);
}

#[test]
fn a_waiting_exec_runs_once_the_holder_is_done() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let mut holder = hold(&nodes, "job:queue");
    let waiter = exec(
        &nodes,
        &["--wait", "forever"],
        "job:queue",
        &["echo", "second"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    holder.close_stdin();
    assert_status(&holder.finish(), 0);
    let out = finish(waiter);
    assert_status(&out, 0);
    assert_eq!(stdout(&out).trim(), "second");
}

#[test]
fn fence_passes_a_growing_token_to_the_command() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let script = r#"echo "$QUORUMLOCK_FENCE $QUORUMLOCK_RESOURCE""#;
    let fence = || -> u64 {
        let out = output(exec(&nodes, &["--fence"], "ledger", &["sh", "-c", script]));
        assert_status(&out, 0);
        let text = stdout(&out);
        let (fence, resource) = text.trim().split_once(' ').expect("two words");
        assert_eq!(resource, "ledger");
        fence
            .parse()
            .unwrap_or_else(|_| panic!("QUORUMLOCK_FENCE is not a number: {text:?}"))
    };
    let first = fence();
    let second = fence();
    assert!(second > first, "fences must grow: {first} then {second}");

    // Without --fence there is no fence in the environment.
    let out = output(exec(
        &nodes,
        &[],
        "ledger",
        &["sh", "-c", r#"echo "[${QUORUMLOCK_FENCE-unset}]""#],
    ));
    assert_status(&out, 0);
    assert_eq!(stdout(&out).trim(), "[unset]");
}

#[test]
fn losing_the_majority_terminates_the_command_with_the_lost_status() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // `exec` keeps the pid: the line is the pid of the `sleep` that runs.
    let (running, pid) = Running::start(exec(
        &nodes,
        &["--ttl", "1s", "--grace", "10s"],
        "job:lost",
        &["sh", "-c", "echo $$; exec sleep 30"],
    ));
    let pid = Pid::from_raw(pid.trim().parse().expect("a pid"));
    nodes[0].kill();
    nodes[1].kill();
    let out = running.finish();
    assert_status(&out, LOST);
    let err = stderr(&out);
    assert!(err.contains("lost the lock on `job:lost`"), "{err}");
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(!err.contains("sending SIGKILL"), "SIGTERM sufficed:\n{err}");
    // The command is gone (and was reaped by quorumlock).
    assert_eq!(kill(pid, None), Err(Errno::ESRCH));
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_the_grace_period() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let (running, first) = Running::start(exec(
        &nodes,
        &["--ttl", "1s", "--grace", "200ms"],
        "job:stubborn",
        &[
            "sh",
            "-c",
            "trap '' TERM; echo started; while :; do sleep 1; done",
        ],
    ));
    assert_eq!(first, "started");
    nodes[0].kill();
    nodes[1].kill();
    let out = running.finish();
    assert_status(&out, LOST);
    assert!(stderr(&out).contains("sending SIGKILL"), "{}", stderr(&out));
}

#[test]
fn sigterm_to_quorumlock_reaches_the_command_and_the_lock_is_released() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let (running, first) = Running::start(exec(
        &nodes,
        &["--ttl", LONG_TTL],
        "job:stop",
        &["sh", "-c", "echo started; exec sleep 30"],
    ));
    assert_eq!(first, "started");
    kill(running.pid(), Signal::SIGTERM).expect("signal quorumlock");
    let out = running.finish();
    assert_status(&out, 128 + 15);
    until_released_everywhere(&nodes, "job:stop");
}

#[test]
fn status_shows_held_free_and_unknown_without_full_tokens() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let holder = hold(&nodes, "report:held");
    let token = nodes
        .urls()
        .iter()
        .find_map(|url| redis_get(url, "report:held"))
        .expect("held");

    let mut cmd = quorumlock();
    cmd.args(["status", "--nodes", &nodes_arg(&nodes), "report:held"])
        .args(["--node-timeout", NODE_TIMEOUT]);
    let out = output(cmd);
    assert_status(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("verdict: held"), "{text}");
    let shown = format!("token {}…", &token[..4]);
    // At least a quorum of node lines, and the verdict.
    assert!(text.matches(&shown).count() >= 3, "{text}");
    assert!(
        !text.contains(&token[..8]),
        "more than 4 characters shown:\n{text}"
    );

    let mut cmd = quorumlock();
    // Every node's line: each waited for.
    cmd.args([
        "status",
        "--every-node",
        "--nodes",
        &nodes_arg(&nodes),
        "report:free",
    ])
    .args(["--node-timeout", NODE_TIMEOUT]);
    let out = output(cmd);
    assert_status(&out, 1);
    let text = stdout(&out);
    assert!(text.contains("verdict: free"), "{text}");
    // Its server's best path: `release DELEX IFEQ, extend SET IFEQ` on
    // Redis 8.4+, `release DELIFEQ, …` on Valkey 9, scripts before.
    let path = format!("  free  [{}]", crate::native::best_path_here());
    assert_eq!(
        text.lines().filter(|l| l.ends_with(&path)).count(),
        3,
        "every node's line says how its locks are released and extended ({path}):\n{text}"
    );

    nodes[1].kill();
    nodes[2].kill();
    let mut cmd = quorumlock();
    cmd.env("QUORUMLOCK_NODES", nodes_arg(&nodes)).args([
        "status",
        "--node-timeout",
        "2s",
        "report:held",
    ]);
    let out = output(cmd);
    assert_status(&out, UNAVAILABLE);
    let text = stdout(&out);
    assert!(text.contains("verdict: unknown"), "{text}");
    assert_eq!(text.matches("unreachable:").count(), 2, "{text}");
    drop(holder);
}

#[test]
fn unreachable_nodes_are_listed_one_per_line() {
    let nodes = RedisNodes::start(3).expect("nodes");
    for server in &nodes {
        server.kill();
    }
    let out = output(exec(&nodes, &["--no-wait"], "job:down", &["true"]));
    assert_status(&out, UNAVAILABLE);
    let err = stderr(&out);
    let mut lines = err.lines();
    assert!(
        lines
            .next()
            .is_some_and(|l| l.contains("nodes unavailable")),
        "{err}"
    );
    // The attempt stops once a quorum has become impossible (2 of 3 down),
    // so the third answer may not be in; every failure known is listed once.
    let per_node: Vec<&str> = lines.collect();
    assert!(per_node.len() >= 2, "{err}");
    for line in &per_node {
        let owners = nodes
            .iter()
            .filter(|server| {
                line.starts_with(&format!("quorumlock:   node 127.0.0.1:{}: ", server.port()))
            })
            .count();
        assert_eq!(owners, 1, "`{line}` names one node:\n{err}");
    }
    let mut distinct = per_node.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), per_node.len(), "{err}");
    // Each node's error appears once: on its own line, not also inline.
    for server in &nodes {
        let name = format!("127.0.0.1:{}", server.port());
        assert!(err.matches(&name).count() <= 1, "{name} twice:\n{err}");
    }
    assert_eq!(err.matches("job:down").count(), 1, "{err}");
}

#[test]
fn waiting_is_for_a_busy_resource_not_for_unreachable_nodes() {
    let nodes = RedisNodes::start(3).expect("nodes");
    for server in &nodes {
        server.kill();
    }
    // Refused connections end the wait after the library's default number
    // of attempts (10, about 1.5 s), not after the whole --wait.
    let started = std::time::Instant::now();
    let out = output(exec(&nodes, &["--wait", "30s"], "job:down", &["true"]));
    let took = started.elapsed();
    assert_status(&out, UNAVAILABLE);
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    assert!(
        stderr(&out).contains("nodes unavailable"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    let nodes = RedisNodes::start(1).expect("nodes");
    let cases: &[(&[&str], &str)] = &[
        (&["--ttl", "10x"], "unknown unit"),
        (&["--ttl", "30"], "no unit"),
        (&["--wait", "soon"], "invalid value"),
        (&["--wait", "1s", "--no-wait"], "cannot be used with"),
        (&["--ttl", "25h"], "exceeds the maximum"),
    ];
    for (extra, expected) in cases {
        let out = output(exec(&nodes, extra, "r", &["true"]));
        assert_status(&out, USAGE);
        assert!(
            stderr(&out).contains(expected),
            "{extra:?}: {}",
            stderr(&out)
        );
    }

    // No `--` before the command.
    let mut cmd = quorumlock();
    cmd.args(["exec", "--nodes", &nodes_arg(&nodes), "r", "true"]);
    assert_status(&output(cmd), USAGE);

    // No nodes at all.
    let mut cmd = quorumlock();
    cmd.args(["exec", "r", "--", "true"]);
    let out = output(cmd);
    assert_status(&out, USAGE);
    assert!(stderr(&out).contains("--nodes"), "{}", stderr(&out));

    // A malformed URL: named, with its password masked.
    let mut cmd = quorumlock();
    cmd.args([
        "exec",
        "--nodes",
        "redis://user:hunter2@host:notaport",
        "r",
        "--",
        "true",
    ]);
    let out = output(cmd);
    assert_status(&out, USAGE);
    assert!(
        stderr(&out).contains("malformed node url"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the port is not a number"),
        "{}",
        stderr(&out)
    );

    // An empty entry is not one node fewer: it is refused, from the
    // option and from the environment alike.
    let url = nodes.urls()[0].clone();
    for list in [format!("{url},,{url}"), format!("{url},")] {
        let mut option = quorumlock();
        option.args(["status", "--nodes", &list, "r"]);
        let mut environment = quorumlock();
        environment
            .env("QUORUMLOCK_NODES", &list)
            .args(["status", "r"]);
        for cmd in [option, environment] {
            let out = output(cmd);
            assert_status(&out, USAGE);
            assert!(
                stderr(&out).contains("an empty entry"),
                "{list}: {}",
                stderr(&out)
            );
        }
    }

    // Each malformed URL names its cause, not the parser's generic error.
    for (url, cause) in [
        ("127.0.0.1:6379", "no scheme; write redis://"),
        ("http://127.0.0.1:6379", "unsupported scheme `http://`"),
        ("redis://127.0.0.1:99999", "port 99999 is out of range"),
    ] {
        let mut cmd = quorumlock();
        cmd.args(["status", "--nodes", url, "r"]);
        let out = output(cmd);
        assert_status(&out, USAGE);
        let err = stderr(&out);
        assert!(err.contains(cause), "{url}: {err}");
        assert!(!err.contains("InvalidClientConfig"), "{url}: {err}");
    }
}

/// A Redis Cluster is one node on the command line too: `--cluster` takes
/// its seeds, beside `--nodes` or alone.
#[test]
fn a_cluster_is_one_node_on_the_command_line() {
    let cluster = quorumlock::testkit::RedisCluster::start_with(
        3,
        0,
        quorumlock::testkit::ServerOptions::new(),
    )
    .expect("cluster");
    let seeds = cluster.seed_urls().join(",");
    let mut cmd = quorumlock();
    cmd.args(["exec", "--cluster", &seeds, "{app}:job", "--", "true"]);
    assert_status(&output(cmd), 0);
    // With two standalone nodes: three nodes, a quorum of two.
    let nodes = RedisNodes::start(2).expect("nodes");
    let held = {
        let mut cmd = quorumlock();
        cmd.args([
            "exec",
            "--nodes",
            &nodes_arg(&nodes),
            "--cluster",
            &seeds,
            "{app}:job",
            "--",
            "sh",
            "-c",
            "exit 3",
        ]);
        output(cmd)
    };
    assert_status(&held, 3);
    let mut cmd = quorumlock();
    cmd.args([
        "status",
        "--nodes",
        &nodes_arg(&nodes),
        "--cluster",
        &seeds,
        "{app}:job",
    ]);
    let out = output(cmd);
    assert_status(&out, 1);
    assert!(stdout(&out).contains("cluster("), "{}", stdout(&out));
    // An empty seed is refused as an empty --nodes entry is.
    let mut cmd = quorumlock();
    cmd.args(["status", "--cluster", &format!("{seeds},"), "r"]);
    let out = output(cmd);
    assert_status(&out, USAGE);
    assert!(stderr(&out).contains("an empty entry"), "{}", stderr(&out));

    // The doctor takes the cluster as one node, checked master by master;
    // one of its members given as a plain node is named as such, and
    // counts towards no quorum, so the gate fails.
    let doctor = |nodes: &str, given: &str| {
        let mut cmd = quorumlock();
        cmd.args(["doctor", nodes, given]).args([
            "--node-timeout",
            NODE_TIMEOUT,
            "--clock-interval",
            "200ms",
        ]);
        output(cmd)
    };
    let out = doctor("--cluster", &seeds);
    assert_status(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("1 node: 0 unsafe"), "{text}");
    assert!(text.contains("cluster("), "{text}");
    assert!(!text.contains("Redis Cluster member"), "{text}");
    let member = cluster.seed_urls()[0].clone();
    let out = doctor("--nodes", &member);
    assert_status(&out, 1);
    let text = stdout(&out);
    assert!(text.contains("Redis Cluster member"), "{text}");
    assert!(text.contains("(all nodes)"), "{text}");
}

/// Credentials the nodes refuse are a configuration error with a status
/// of its own, reported at once, naming the user and never the password.
#[test]
fn refused_credentials_exit_77_naming_the_user() {
    let server = quorumlock::testkit::RedisServer::start_with(
        quorumlock::testkit::ServerOptions::new()
            .arg("--requirepass")
            .arg("right-pw"),
    )
    .expect("server");
    let mut cmd = quorumlock();
    cmd.args([
        "exec",
        "--nodes",
        &format!("redis://:wrong-pw-5e1@127.0.0.1:{}", server.port()),
        "r",
        "--",
        "true",
    ]);
    let out = output(cmd);
    assert_status(&out, 77);
    let err = stderr(&out);
    assert!(err.contains("credentials refused"), "{err}");
    assert!(err.contains("user `default`"), "{err}");
    assert!(!err.contains("wrong-pw-5e1"), "{err}");
    // `status` cannot tell either, for the same reason, and says so.
    let mut cmd = quorumlock();
    cmd.args([
        "status",
        "--nodes",
        &format!("redis://:wrong-pw-5e1@127.0.0.1:{}", server.port()),
        "r",
    ]);
    let out = output(cmd);
    assert_status(&out, 77);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(!text.contains("wrong-pw-5e1"), "{text}");
    // Nor can `leader`, and it says the same, with the same status.
    let mut cmd = quorumlock();
    cmd.args([
        "leader",
        "--nodes",
        &format!("redis://:wrong-pw-5e1@127.0.0.1:{}", server.port()),
        "e",
    ]);
    let out = output(cmd);
    assert_status(&out, 77);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(!text.contains("wrong-pw-5e1"), "{text}");
}

/// A user denied scripting: what needs a script (a fenced lock, a fair
/// lock, a campaign) cannot be served, whatever the server offers
/// natively. A status of its own (78), at once, saying why per node.
#[test]
fn nodes_that_cannot_serve_the_command_exit_78_at_once() {
    let server = quorumlock::testkit::RedisServer::start().expect("server");
    let mut admin = redis::Client::open(server.url())
        .expect("url")
        .get_connection()
        .expect("connect");
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "locker",
                "on",
                ">pw-7c1",
                "~*",
                "&*",
                "+@all",
                "-@scripting",
            ][..],
        )
        .query(&mut admin)
        .expect("ACL SETUSER");
    let url = format!("redis://locker:pw-7c1@127.0.0.1:{}", server.port());
    for args in [
        vec!["exec", "--nodes", &url, "--fence", "r", "--", "true"],
        vec!["exec", "--nodes", &url, "--fair", "r", "--", "true"],
        vec!["elect", "--nodes", &url, "e", "--", "true"],
        // Every node answered: not "too few nodes reachable".
        vec!["leader", "--nodes", &url, "e"],
    ] {
        let mut cmd = quorumlock();
        cmd.args(&args);
        let out = output(cmd);
        assert_status(&out, 78);
        let err = stderr(&out);
        assert!(err.contains("refused the script"), "{args:?}: {err}");
        assert!(!err.contains("pw-7c1"), "{err}");
    }
}

/// `--functions` is taken by every subcommand that the error of a user
/// denied scripts points to (ScriptsRefused suggests Functions mode). On a
/// node without quorumlock's library loaded, what needs a script says to
/// load it, with the status of incompatible nodes.
#[test]
fn every_subcommand_takes_functions_mode() {
    let nodes = RedisNodes::start(1).expect("nodes");
    if !crate::support::functions_or_skip("cli::every_subcommand_takes_functions_mode") {
        return;
    }
    let urls = nodes_arg(&nodes);
    for args in [
        vec![
            "exec",
            "--functions",
            "--nodes",
            &urls,
            "--fence",
            "r",
            "--",
            "true",
        ],
        vec!["elect", "--functions", "--nodes", &urls, "e", "--", "true"],
        vec!["leader", "--functions", "--nodes", &urls, "e"],
    ] {
        let mut cmd = quorumlock();
        cmd.args(&args);
        let out = output(cmd);
        assert_status(&out, 78);
        assert!(
            stderr(&out).contains("FUNCTION LOAD"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_missing_command_exits_127_and_releases_the_lock() {
    let nodes = RedisNodes::start(1).expect("nodes");
    let out = output(exec(
        &nodes,
        &[],
        "job:x",
        &["/nonexistent/quorumlock-test"],
    ));
    assert_status(&out, NOT_FOUND);
    assert!(stderr(&out).contains("cannot run"), "{}", stderr(&out));
    assert_eq!(redis_get(&nodes.urls()[0], "job:x"), None);
}

#[test]
fn nodes_and_prefix_can_come_from_the_environment_and_options() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let mut cmd = quorumlock();
    cmd.env("QUORUMLOCK_NODES", nodes_arg(&nodes))
        .args([
            "exec",
            "--node-timeout",
            NODE_TIMEOUT,
            "--prefix",
            "app:",
            "env-job",
            "--",
        ])
        .args(["sh", "-c", "echo started; read _; exit 0"]);
    let (holder, first) = Running::start(cmd);
    assert_eq!(first, "started");
    let held = nodes
        .urls()
        .iter()
        .filter(|url| redis_get(url, "app:env-job").is_some())
        .count();
    assert!(held >= 2, "the prefixed key is on a quorum ({held} of 3)");
    assert_status(&holder.finish(), 0);
}

#[test]
fn help_documents_the_exit_statuses() {
    let mut cmd = quorumlock();
    cmd.args(["exec", "--help"]);
    let out = output(cmd);
    assert_status(&out, 0);
    let text = stdout(&out);
    for needle in ["75", "69", "124", "QUORUMLOCK_FENCE", "QUORUMLOCK_NODES"] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
}

#[test]
fn demo_runs_to_completion() {
    let mut cmd = quorumlock();
    cmd.arg("demo");
    let out = output(cmd);
    assert_status(&out, 0);
    let text = stdout(&out);
    for needle in [
        "Held",
        "Refused",
        "Kill node 0",
        "No lock without a majority",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    assert!(!text.contains("BUG"), "{text}");
}

/// The sample output of `doctor` in docs/cli.md is what a real run of its
/// scenario prints, but for what differs from run to run and server to
/// server: ports, round-trip times, the server's version and its path.
#[test]
fn the_doctor_sample_of_docs_cli_is_a_real_run() {
    use quorumlock::testkit::{RedisServer, ServerOptions};
    let first = RedisServer::start_with(ServerOptions::new().persistent()).expect("server");
    let evicting = RedisServer::start_with(
        ServerOptions::new()
            .persistent()
            .arg("--maxmemory")
            .arg("64mb")
            .arg("--maxmemory-policy")
            .arg("allkeys-lru"),
    )
    .expect("server");
    let (a, b) = (first.port(), evicting.port());
    let mut cmd = quorumlock();
    cmd.args([
        "doctor",
        "--nodes",
        &format!("redis://127.0.0.1:{a},redis://localhost:{a},redis://127.0.0.1:{b}"),
        "--ttl",
        "30s",
        "--clock-interval",
        "200ms",
    ]);
    let out = output(cmd);
    assert_status(&out, 1);
    let ran = stdout(&out)
        .replace(&format!(":{a}"), ":7001")
        .replace(&format!(":{b}"), ":7003");
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md"))
        .expect("docs/cli.md");
    let section = page.split("## doctor:").nth(1).expect("the doctor section");
    let sample = section
        .split("```text\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("its sample");
    assert_eq!(
        comparable(sample),
        comparable(&ran),
        "the sample:\n{sample}\na run:\n{ran}"
    );
}

/// `text` with what may differ between runs masked, and the table's
/// padding folded. What depends on the machine's load rather than the
/// nodes — a note on the clock or the round trips, and so whether the
/// first node's row is `ok` — is left out, with the counts of notes.
fn comparable(text: &str) -> Vec<String> {
    let by_load = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        matches!(
            words.get(1..3),
            Some(["ok", "-"] | ["note", "clock" | "latency"])
        )
    };
    let masked = |line: &str| {
        let mut words: Vec<String> = Vec::new();
        let mut it = line.split_whitespace().peekable();
        while let Some(word) = it.next() {
            match word {
                // `rtt p50 X p99 Y`
                "p50" | "p99" => {
                    words.push(word.to_owned());
                    let _ = it.next();
                    words.push("<time>".to_owned());
                }
                // `redis 7.0.15,` or `valkey 9.1.2,`
                "redis" | "valkey"
                    if it.peek().is_some_and(|v| v.starts_with(char::is_numeric)) =>
                {
                    let _ = it.next();
                    words.push("<server>".to_owned());
                }
                // `release script, extend script` or the native commands
                "release" if words.last().is_some_and(|w| w == "-") => {
                    words.push("<path>".to_owned());
                    for _ in it.by_ref() {}
                }
                _ => words.push(word.to_owned()),
            }
        }
        words.join(" ")
    };
    // The summary line's counts of `ok` nodes and of notes.
    let counts = |line: String| {
        if !line.contains(" findings: ") {
            return line;
        }
        let mut words: Vec<String> = line.split(' ').map(str::to_owned).collect();
        for i in 1..words.len() {
            match words[i].as_str() {
                "ok" | "notes" => words[i - 1] = "<n>".to_owned(),
                "with" => words[i - 1] = "(<n>".to_owned(),
                _ => {}
            }
        }
        words.join(" ")
    };
    text.lines()
        .filter(|l| !l.trim().is_empty() && !by_load(l))
        .map(masked)
        .map(counts)
        .collect()
}

#[test]
fn bench_points_to_the_example() {
    let mut cmd = quorumlock();
    cmd.arg("bench");
    let out = output(cmd);
    assert_status(&out, 0);
    assert!(
        stdout(&out).contains("cargo run --release --example bench --features testkit"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn doctor_passes_healthy_nodes_and_fails_one_server_listed_twice() {
    const PASSWORD: &str = "doctor-cli-secret-93f2";
    let nodes = RedisNodes::start_with(
        3,
        quorumlock::testkit::ServerOptions::new()
            .persistent()
            .arg("--requirepass")
            .arg(PASSWORD),
    )
    .expect("nodes");
    let urls: Vec<String> = nodes
        .iter()
        .map(|s| format!("redis://:{PASSWORD}@127.0.0.1:{}", s.port()))
        .collect();
    let doctor = |urls: &[String]| {
        let mut cmd = quorumlock();
        cmd.args(["doctor", "--nodes", &urls.join(",")]).args([
            "--node-timeout",
            NODE_TIMEOUT,
            "--clock-interval",
            "200ms",
        ]);
        output(cmd)
    };

    let out = doctor(&urls);
    assert_status(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("NODE"), "{text}");
    assert!(text.contains("3 nodes: 0 unsafe"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    // A `path` row per node names how its locks are released and
    // extended: its server's best path.
    let path = crate::native::best_path_here();
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("  path ") && l.ends_with(path))
            .count(),
        3,
        "{path}: {text}"
    );

    // The first server again, by another name: two votes from one server.
    let mut twice = urls.clone();
    twice.push(format!("redis://:{PASSWORD}@localhost:{}", nodes[0].port()));
    let out = doctor(&twice);
    assert_status(&out, 1);
    let text = stdout(&out);
    let unsafe_rows: Vec<&str> = text.lines().filter(|l| l.contains("UNSAFE")).collect();
    assert_eq!(unsafe_rows.len(), 1, "{text}");
    assert!(unsafe_rows[0].starts_with("localhost:"), "{text}");
    assert!(unsafe_rows[0].contains("run_id"), "{text}");
    assert!(!text.contains(PASSWORD) && !stderr(&out).contains(PASSWORD));

    // A wrong password on one node and another node down: one of three
    // answers, no quorum. A gate must fail, and the refusal is named.
    let mut broken = urls.clone();
    broken[1] = format!("redis://:wrong-93f2@127.0.0.1:{}", nodes[1].port());
    nodes[2].kill();
    let out = doctor(&broken);
    assert_status(&out, 1);
    let text = stdout(&out);
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(text.contains("(all nodes)"), "{text}");
    assert!(text.contains("only 1 of 3 nodes answered"), "{text}");
    assert!(
        !text.contains("wrong-93f2") && !text.contains(PASSWORD),
        "{text}"
    );
}

#[test]
fn status_shows_a_semaphores_permits_and_a_rwlocks_readers() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let locks = quorumlock::Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(std::time::Duration::from_secs(2))
        .build()
        .expect("config");
    let ttl = std::time::Duration::from_secs(30);
    let (permits, readers) = runtime.block_on(async {
        let semaphore = locks.semaphore("sem", 3);
        let a = semaphore.try_acquire(ttl).await.expect("permit");
        let b = semaphore.try_acquire(ttl).await.expect("permit");
        let rw = locks.rwlock("doc");
        let r1 = rw.try_read(ttl).await.expect("read");
        let r2 = rw.try_read(ttl).await.expect("read");
        (vec![a, b], vec![r1, r2])
    });
    let status = |extra: &[&str], resource: &str| {
        let mut cmd = quorumlock();
        cmd.args(["status", "--every-node", "--nodes", &nodes_arg(&nodes)])
            .args(["--node-timeout", NODE_TIMEOUT])
            .args(extra)
            .arg(resource);
        output(cmd)
    };
    let out = status(&["--semaphore", "3"], "sem");
    assert_status(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("verdict: 2 of 3 permits held"), "{text}");
    assert!(text.contains("(count 3)"), "{text}");
    for permit in &permits {
        let token = permit.token().as_str();
        assert!(text.contains(&format!("{}…", &token[..4])), "{text}");
        assert!(
            !text.contains(&token[..8]),
            "more than 4 characters:\n{text}"
        );
    }
    let out = status(&["--rwlock"], "doc");
    assert_status(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("verdict: read — 2 readers"), "{text}");
    assert!(text.matches("readers 2").count() >= 2, "{text}");
    // Without the flags, each is shown as what the nodes keep.
    let out = status(&[], "sem");
    assert_status(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("semaphore `sem` of 3 permits"), "{text}");
    assert!(text.contains("verdict: 2 of 3 permits held"), "{text}");
    let out = status(&[], "doc");
    assert_status(&out, 0);
    let text = stdout(&out);
    assert!(text.starts_with("reader-writer lock `doc`"), "{text}");
    assert!(text.contains("verdict: read — 2 readers"), "{text}");

    runtime.block_on(async {
        for guard in (permits.into_iter().map(quorumlock::LockGuard::from))
            .chain(readers.into_iter().map(quorumlock::LockGuard::from))
        {
            guard.release().await.expect("release");
        }
    });
    let out = status(&["--semaphore", "3"], "sem");
    assert_status(&out, 1);
    let out = status(&["--rwlock"], "doc");
    assert_status(&out, 1);
    assert!(stdout(&out).contains("verdict: free"), "{}", stdout(&out));
    let out = status(&["--semaphore", "0"], "sem");
    assert_status(&out, USAGE);
}

/// A node timeout no test waits out: a command that waited for the paused
/// node would hang, and the hang guard would fail the test.
const NEVER: &str = "10m";

#[test]
fn a_frozen_node_holds_back_neither_exec_nor_status_nor_doctor() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let frozen = nodes[2].url().trim_start_matches("redis://").to_owned();
    let _paused = crate::support::Paused::new(&nodes[2]);

    // exec: the command ran, the release was decided by the other two,
    // and the exit does not wait for the frozen node's answers.
    let mut cmd = quorumlock();
    cmd.args([
        "exec",
        "--nodes",
        &nodes_arg(&nodes),
        "--node-timeout",
        NEVER,
    ])
    .args(["frozen:job", "--", "true"]);
    assert_status(&output(cmd), 0);

    // status: the verdict from the two, the frozen node shown as silent.
    let mut cmd = quorumlock();
    cmd.args([
        "status",
        "--nodes",
        &nodes_arg(&nodes),
        "--node-timeout",
        NEVER,
    ])
    .arg("frozen:job");
    let out = output(cmd);
    assert_status(&out, 1);
    let text = stdout(&out);
    assert!(text.contains("verdict: free"), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains(&frozen))
        .expect("its line");
    assert!(line.contains("no answer in"), "{text}");
    assert!(line.contains("--every-node"), "{text}");

    // doctor: one finding for the frozen node, its other probes not run
    // (each would wait the probe timeout again).
    let mut cmd = quorumlock();
    cmd.args(["doctor", "--nodes", &nodes_arg(&nodes)]);
    let out = output(cmd);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(&frozen)).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("none within"), "{text}");
}

#[test]
fn fair_execs_run_in_the_order_they_asked() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let (mut holder, first) = Running::start(exec(
        &nodes,
        &["--fair", "--no-wait"],
        "job:line",
        &["sh", "-c", "echo started; read _; exit 0"],
    ));
    assert_eq!(first, "started");
    let _ = std::fs::remove_file(nodes_log(&nodes));
    // Busy: a fair exec that does not wait gives up at once.
    let out = output(exec(
        &nodes,
        &["--fair", "--no-wait"],
        "job:line",
        &["true"],
    ));
    assert_status(&out, BUSY);
    // Three waiters, each asking once the one before stands in line.
    let mut waiters = Vec::new();
    for name in ["a", "b", "c"] {
        let waiter = exec(
            &nodes,
            &["--fair", "--wait", "forever"],
            "job:line",
            &["sh", "-c", &format!("echo {name} >> \"$LOG\"")],
        )
        .env("LOG", nodes_log(&nodes))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
        until_in_line(&nodes, "job:line", waiters.len() + 1);
        waiters.push(waiter);
    }
    holder.close_stdin();
    assert_status(&holder.finish(), 0);
    for waiter in waiters {
        assert_status(&finish(waiter), 0);
    }
    let log = std::fs::read_to_string(nodes_log(&nodes)).expect("log");
    assert_eq!(log, "a\nb\nc\n");
}

#[test]
fn fair_and_fence_do_not_go_together() {
    let nodes = RedisNodes::start(1).expect("nodes");
    let out = output(exec(&nodes, &["--fair", "--fence"], "job", &["true"]));
    assert_status(&out, USAGE);
}

/// Where the fair execs of a test write their names: a file of its own.
fn nodes_log(nodes: &RedisNodes) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "quorumlock-fair-{}.log",
        nodes.urls()[0].replace([':', '/', '.'], "_")
    ))
}

/// Waits until `n` waiters stand in `resource`'s line on every node.
fn until_in_line(nodes: &RedisNodes, resource: &str, n: usize) {
    let started = std::time::Instant::now();
    for url in nodes.urls() {
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut conn = client.get_connection().expect("connect");
        loop {
            let queued: usize = redis::cmd("ZCARD")
                .arg(format!("{resource}:queue"))
                .query(&mut conn)
                .expect("ZCARD");
            if queued >= n {
                break;
            }
            assert!(
                started.elapsed() < crate::support::HANG_GUARD,
                "waiters never queued"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// docs/cli.md's times for giving up on unreachable nodes follow from the
/// policy `exec` and `elect` use: the default attempts in a row, the
/// default pause between attempts (its fixed part and its jitter), and the
/// default node timeout.
#[test]
fn the_give_up_times_of_docs_cli_follow_from_the_defaults() {
    use quorumlock::{RedlockBuilder, Retry};
    let attempts = Retry::DEFAULT_ATTEMPTS;
    let pauses = attempts - 1;
    let (least, most) = (
        Retry::DEFAULT_DELAY,
        Retry::DEFAULT_DELAY + Retry::DEFAULT_JITTER,
    );
    let seconds = |d: std::time::Duration| format!("{}", d.as_secs_f64());
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md"))
        .expect("docs/cli.md");
    let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
    for quote in [
        format!(
            "after {attempts} attempts in a row that find too few nodes reachable, `exec` exits 69"
        ),
        format!(
            "{pauses} pauses of {} to {} ms between them, so {} to {} s where the nodes refuse connections",
            least.as_millis(),
            most.as_millis(),
            seconds(least * pauses),
            seconds(most * pauses),
        ),
        format!(
            "up to two `--node-timeout`s more ({} s by default)",
            seconds(RedlockBuilder::DEFAULT_NODE_TIMEOUT * 2)
        ),
        format!(
            "after {attempts} attempts in a row that find too few nodes reachable ({} to {} s, and up to two node timeouts more, as for `exec`)",
            seconds(least * pauses),
            seconds(most * pauses),
        ),
    ] {
        assert!(page.contains(&quote), "docs/cli.md should say: {quote}");
    }
}
