//! Servers without a scripting engine (Valkey built with `BUILD_LUA=no`, as
//! hardened deployments run it): plain locks go natively, and a primitive
//! that needs a script fails at once as `Error::Incompatible`, each node
//! saying its server has no scripting engine — never an outage retried
//! where nothing will change. On a server with Lua, the same calls simply
//! work: the matrix runs this module on both.

use crate::support;

use std::time::Duration;

use quorumlock::check::Serves;
use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, NodeError, Redlock, Retry};
use support::{conn, no_hang};

const TTL: Duration = Duration::from_secs(10);

/// Whether the server at `url` runs scripts.
async fn runs_scripts(url: &str) -> bool {
    let reply: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg("return 1")
        .arg(0)
        .query_async(&mut conn(url).await)
        .await;
    match reply {
        Ok(_) => true,
        Err(e) if e.to_string().contains("scripting engine") => false,
        Err(e) => panic!("EVAL: {e}"),
    }
}

fn without_scripting(error: &Error) {
    assert!(matches!(error, Error::Incompatible { .. }), "{error}");
    assert!(!error.node_failures().is_empty());
    for failure in error.node_failures() {
        assert!(
            matches!(failure.error, NodeError::NoScripting { .. }),
            "{failure}"
        );
        assert!(
            failure.to_string().contains("no scripting engine"),
            "{failure}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_locks_work_and_scripted_primitives_fail_at_once_without_a_scripting_engine() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let scripts = runs_scripts(&nodes[0].url()).await;
    // Patient: an error retried as an outage would take all of a minute.
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .retry(Retry::default().wait(Duration::from_secs(60)))
        .build()
        .expect("config");

    let guard = no_hang("lock", locks.lock("plain", TTL))
        .await
        .expect("lock");
    guard.extend(TTL).await.expect("extend");
    guard.release().await.expect("release");

    let permit = no_hang("semaphore", locks.semaphore("pool", 2).acquire(TTL)).await;
    let fenced = no_hang("fenced lock", locks.lock_fenced("fenced", TTL)).await;
    if scripts {
        permit.expect("a permit").release().await.expect("release");
        fenced
            .expect("a fenced lock")
            .release()
            .await
            .expect("release");
    } else {
        without_scripting(&permit.expect_err("a semaphore needs scripts"));
        without_scripting(&fenced.expect_err("a fenced lock needs scripts"));
    }
    // The node check says what each node serves.
    let expected = if scripts {
        Serves::Every
    } else {
        Serves::PlainLocks
    };
    let report = no_hang("check", locks.check()).await;
    for node in &report.nodes {
        assert_eq!(node.serves, Some(expected), "{report}");
    }
    // So does the read-only check `status` shows.
    let served = no_hang("serves", locks.serves()).await;
    assert_eq!(served, vec![Some(expected); 3]);
}

/// `quorumlock status` says, beside each node, when it serves plain locks
/// only, and says nothing of it where scripts run.
#[cfg(feature = "cli")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_where_only_plain_locks_are_served() {
    use crate::cli_support::{output, quorumlock, stdout};
    let nodes = RedisNodes::start(3).expect("nodes");
    let scripts = runs_scripts(&nodes[0].url()).await;
    let mut cmd = quorumlock();
    cmd.args(["status", "--nodes", &nodes.urls().join(","), "jobs"]);
    let out = tokio::task::spawn_blocking(move || output(cmd))
        .await
        .expect("status");
    let shown = stdout(&out);
    let node_lines: Vec<&str> = shown.lines().filter(|l| l.contains("127.0.0.1:")).collect();
    assert_eq!(node_lines.len(), 3, "{shown}");
    for line in node_lines {
        assert_eq!(
            line.contains("(plain locks only: no script runs here)"),
            !scripts,
            "{shown}"
        );
    }
}
