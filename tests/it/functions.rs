//! `ScriptMode::Functions`: an administrator loads `FUNCTIONS_LIBRARY` once,
//! and a lock user with `+fcall` but no scripting permission (EVAL, EVALSHA,
//! SCRIPT) locks, extends and releases — plain, fenced and multi-resource
//! locks, on standalone nodes and on a cluster.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{RedisCluster, RedisNodes, ServerOptions, server_version};
use quorumlock::{
    Error, FUNCTIONS_LIBRARY, LossReason, NativeCommands, NodeError, Redlock, Retry, ScriptMode,
    WakeOnRelease,
};
use support::no_hang;

const TTL: Duration = Duration::from_secs(10);
const PREFIX: &str = "myapp:lock:";
const USER: &str = "locker";
const USER_PASSWORD: &str = "locker-pw-5e0b";

/// Everything the lock user needs in Functions mode: the data commands the
/// functions run, and FCALL. No EVAL, EVALSHA or SCRIPT.
const FUNCTIONS_COMMANDS: [&str; 9] = [
    "+set", "+get", "+del", "+pexpire", "+exists", "+incr", "+hset", "+hmget", "+fcall",
];

/// The extra commands a cluster node's lock user needs: the slot map, and
/// the check that the seeds are cluster members.
const CLUSTER_COMMANDS: [&str; 2] = ["+cluster|slots", "+cluster|info"];

/// Servers with the lock user confined to `myapp:lock:*` and `commands`;
/// the default user (no password) plays the administrator.
fn options(commands: &[&str]) -> ServerOptions {
    let mut options = ServerOptions::new()
        .arg("--user")
        .arg(USER)
        .arg("on")
        .arg(format!(">{USER_PASSWORD}"))
        .arg(format!("~{PREFIX}*"))
        .arg("resetchannels")
        .arg("-@all");
    for command in commands {
        options = options.arg(*command);
    }
    options
}

/// The lock user's URL for a server URL.
fn as_user(url: &str) -> String {
    url.replace("redis://", &format!("redis://{USER}:{USER_PASSWORD}@"))
}

/// [`support::functions_or_skip`] for `test` of this module.
fn functions_or_skip(test: &str) -> bool {
    crate::support::functions_or_skip(&format!("functions::{test}"))
}

/// What an administrator does once per node.
async fn load_library(url: &str) {
    let loaded: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(FUNCTIONS_LIBRARY)
        .query_async(&mut support::conn(url).await)
        .await
        .expect("FUNCTION LOAD");
    assert_eq!(loaded, "quorumlock");
}

fn manager(nodes: &RedisNodes, mode: ScriptMode) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls().iter().map(|url| as_user(url)))
        .key_prefix(PREFIX)
        .script_mode(mode)
        // These tests check that every node ran each function: a node that
        // a loaded machine stalls past the default 250 ms would fail a call
        // there (and, twice in a row, be left unasked for a while).
        .node_timeout(Duration::from_secs(2))
        .retry(Retry::none())
        .build()
        .expect("config")
}

/// Plain, fenced and multi-resource: lock, extend, release.
async fn lock_extend_release_every_kind(locks: &Redlock, resources: [&str; 3]) {
    let [plain, fenced, other] = resources;
    let guard = no_hang("lock", locks.lock(plain, TTL)).await.expect("lock");
    guard.extend(TTL).await.expect("extend");
    assert!(guard.release().await.expect("release").released() >= locks.quorum());

    let guard = no_hang("lock_fenced", locks.lock_fenced(fenced, TTL))
        .await
        .expect("lock_fenced");
    let first = guard.fence().expect("fence");
    guard.extend(TTL).await.expect("extend fenced");
    guard.release().await.expect("release fenced");
    let guard = locks.lock_fenced(fenced, TTL).await.expect("again");
    assert!(guard.fence().expect("fence") > first);
    guard.release().await.expect("release fenced");

    let guard = no_hang("lock_many", locks.lock_many(&[plain, other], TTL))
        .await
        .expect("lock_many");
    guard.extend(TTL).await.expect("extend many");
    assert!(guard.release().await.expect("release many").released() >= locks.quorum());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_scripting_permission_locks_in_functions_mode() {
    if !functions_or_skip("a_user_without_scripting_permission_locks_in_functions_mode") {
        return;
    }
    let nodes = RedisNodes::start_with(3, options(&FUNCTIONS_COMMANDS)).expect("nodes");
    for url in nodes.urls() {
        load_library(&url).await;
    }
    let locks = manager(&nodes, ScriptMode::Functions);
    lock_extend_release_every_kind(&locks, ["orders:1", "ledger", "orders:2"]).await;

    // Concurrent plain locks go out batched, through the batch function.
    let burst = (0..32).map(|i| {
        let locks = locks.clone();
        async move {
            let guard = locks.try_lock(&format!("burst:{i}"), TTL).await?;
            guard.extend(TTL).await?;
            Ok::<_, quorumlock::Error>(guard.release().await?.settled().await)
        }
    });
    for released in futures::future::join_all(burst).await {
        let summary = released.expect("burst");
        // Which node did not release, and why, if one did not.
        assert_eq!(summary.released(), 3, "{summary}: {:?}", summary.failures());
    }

    // Auto-extension renews through the same functions: wait until a
    // renewal moved the deadline.
    let guard = locks
        .lock("jobs:a", Duration::from_millis(600))
        .await
        .expect("lock");
    let first = guard.deadline();
    guard.auto_extend();
    no_hang("renewal", async {
        while guard.deadline() <= first {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(guard.loss_reason(), None);
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_mode_needs_scripting_permission() {
    if !functions_or_skip("eval_mode_needs_scripting_permission") {
        return;
    }
    let nodes = RedisNodes::start_with(3, options(&FUNCTIONS_COMMANDS)).expect("nodes");
    let locks = manager(&nodes, ScriptMode::Eval);
    // Plain acquisition is a SET command, which the user may run…
    let guard = locks.lock("orders:1", TTL).await.expect("SET is allowed");
    // …but extending runs a script.
    let err = guard.extend(TTL).await.expect_err("EVALSHA is not allowed");
    // Not an outage: the nodes cannot run it until someone grants the
    // permission (or the server has native commands: not these users').
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    support::assert_acl_refusals(&err);
    for failure in err.node_failures() {
        assert!(
            matches!(failure.error, NodeError::ScriptsRefused { .. }),
            "{failure}"
        );
    }
    let err = locks
        .lock_fenced("ledger", TTL)
        .await
        .expect_err("fencing runs a script");
    support::assert_acl_refusals(&err);
}

/// A user without `+fcall` in Functions mode: every call that runs a
/// function fails at once as `Incompatible`, each node saying FCALL was
/// refused and what to grant, never a bare `NOPERM`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_mode_without_fcall_permission_says_what_to_grant() {
    if !functions_or_skip("functions_mode_without_fcall_permission_says_what_to_grant") {
        return;
    }
    let no_fcall: Vec<&str> = FUNCTIONS_COMMANDS
        .iter()
        .copied()
        .filter(|command| *command != "+fcall")
        .collect();
    let nodes = RedisNodes::start_with(3, options(&no_fcall)).expect("nodes");
    for url in nodes.urls() {
        load_library(&url).await;
    }
    let locks = manager(&nodes, ScriptMode::Functions);
    let err = no_hang("lock_fenced", locks.lock_fenced("ledger", TTL))
        .await
        .expect_err("FCALL is not allowed");
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(!err.is_retryable());
    assert!(!err.node_failures().is_empty(), "{err}");
    for failure in err.node_failures() {
        assert!(
            matches!(&failure.error, NodeError::FunctionsRefused { function, .. } if function == "quorumlock_acquire_fenced"),
            "{failure}"
        );
        let text = failure.to_string();
        assert!(
            text.contains("+fcall") && !text.contains("NOPERM"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_library_is_named_in_the_error() {
    if !functions_or_skip("a_missing_library_is_named_in_the_error") {
        return;
    }
    let nodes = RedisNodes::start_with(3, options(&FUNCTIONS_COMMANDS)).expect("nodes");
    // Loaded on one node only: too few to extend.
    load_library(&nodes.urls()[0]).await;
    let locks = manager(&nodes, ScriptMode::Functions);
    let guard = locks.lock("orders:1", TTL).await.expect("SET is allowed");
    let err = guard.extend(TTL).await.expect_err("no library");
    // Not a passing outage: a quorum of nodes lacks the library.
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(!err.is_retryable());
    let missing: Vec<_> = err
        .node_failures()
        .iter()
        .filter_map(|failure| match &failure.error {
            NodeError::FunctionsNotLoaded { function, .. } => Some(function.as_str()),
            _ => None,
        })
        .collect();
    assert!(!missing.is_empty(), "{err}");
    assert!(missing.iter().all(|f| *f == "quorumlock_batch"), "{err}");
    assert!(err.to_string().contains("FUNCTION LOAD"), "{err}");

    let err = locks
        .try_lock_fenced("ledger", TTL)
        .await
        .expect_err("no library");
    assert!(
        err.node_failures()
            .iter()
            .any(|f| matches!(f.error, NodeError::FunctionsNotLoaded { .. })),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_mode_on_a_cluster_routes_fcall_by_key() {
    if !functions_or_skip("functions_mode_on_a_cluster_routes_fcall_by_key") {
        return;
    }
    let commands: Vec<&str> = FUNCTIONS_COMMANDS
        .iter()
        .chain(&CLUSTER_COMMANDS)
        .copied()
        .collect();
    let cluster = RedisCluster::start_with(3, 0, options(&commands)).expect("cluster");
    for master in cluster.masters().expect("masters") {
        load_library(&master.url()).await;
    }
    let locks = Redlock::builder()
        .cluster(cluster.seed_urls().iter().map(|url| as_user(url)))
        .key_prefix(PREFIX)
        .script_mode(ScriptMode::Functions)
        .retry(Retry::none())
        .build()
        .expect("config");
    // Hash tags spread over the masters; FCALL must reach each key's owner.
    for tag in ["a", "b", "c", "d", "e"] {
        let resources = [
            format!("{{{tag}}}:1"),
            format!("{{{tag}}}:fenced"),
            format!("{{{tag}}}:2"),
        ];
        lock_extend_release_every_kind(&locks, resources.each_ref().map(String::as_str)).await;
    }
    let owners: std::collections::HashSet<u16> = ["{a}", "{b}", "{c}", "{d}", "{e}"]
        .iter()
        .map(|tag| cluster.master_for_key(tag).expect("owner").port())
        .collect();
    assert!(owners.len() >= 2, "the keys must span several masters");
}

/// A retry delay no test waits out: getting in means being woken.
const FOREVER: Duration = Duration::from_secs(3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_need_only_the_lock_channels() {
    if !functions_or_skip("wake_ups_need_only_the_lock_channels") {
        return;
    }
    // The README's ACL line for wake-ups: PUBLISH, SUBSCRIBE and
    // UNSUBSCRIBE, on the channels under the prefix.
    let channels = format!("&{PREFIX}*");
    let mut commands = FUNCTIONS_COMMANDS.to_vec();
    commands.extend(["+publish", "+subscribe", "+unsubscribe", &channels]);
    let nodes = RedisNodes::start_with(3, options(&commands)).expect("nodes");
    for url in nodes.urls() {
        load_library(&url).await;
    }
    let waking = || {
        Redlock::builder()
            .nodes(nodes.urls().iter().map(|url| as_user(url)))
            .key_prefix(PREFIX)
            .script_mode(ScriptMode::Functions)
            .wake_on_release(WakeOnRelease::Subscribe)
            .retry(Retry::forever().delay(FOREVER).jitter(Duration::ZERO))
            .build()
            .expect("config")
    };
    let (holder, waiter) = (waking(), waking());
    let guard = holder.lock("job", TTL).await.expect("lock");
    let waiting = tokio::spawn(async move { waiter.lock("job", TTL).await });
    support::until_subscribed(&nodes.urls(), &format!("{PREFIX}job:released")).await;
    guard.release().await.expect("release");
    no_hang("woken waiter", waiting)
        .await
        .expect("task")
        .expect("lock")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_permission_still_releases() {
    if !functions_or_skip("a_user_without_channel_permission_still_releases") {
        return;
    }
    // resetchannels and no +publish: the announcement is refused, the
    // release is not.
    let nodes = RedisNodes::start_with(3, options(&FUNCTIONS_COMMANDS)).expect("nodes");
    for url in nodes.urls() {
        load_library(&url).await;
    }
    let locks = Redlock::builder()
        .nodes(nodes.urls().iter().map(|url| as_user(url)))
        .key_prefix(PREFIX)
        .script_mode(ScriptMode::Functions)
        .wake_on_release(WakeOnRelease::Subscribe)
        .retry(Retry::none())
        .build()
        .expect("config");
    let guard = locks.lock("job", TTL).await.expect("lock");
    let summary = guard.release().await.expect("release").settled().await;
    assert!(summary.released() >= locks.quorum());
    let again = locks.try_lock("job", TTL).await.expect("free again");
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_scripts_sent_twice_grant_once() {
    if !functions_or_skip("acquire_scripts_sent_twice_grant_once") {
        return;
    }
    // A script sent again after its connection dropped (its first run may
    // have landed) must answer as the first run did, and change nothing.
    let server = quorumlock::testkit::RedisServer::start().expect("server");
    load_library(&server.url()).await;
    let mut c = support::conn(&server.url()).await;
    let fcall = |function: &str, keys: &[&str], args: &[&str]| {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function).arg(keys.len()).arg(keys).arg(args);
        cmd
    };
    let fenced = fcall(
        "quorumlock_acquire_fenced",
        &["f", "f:fence", "f:fence:mark"],
        &["token-1", "30000", "call-1"],
    );
    let first: i64 = fenced.query_async(&mut c).await.expect("FCALL");
    let again: i64 = fenced.query_async(&mut c).await.expect("FCALL");
    assert_eq!((first, again), (1, 1), "the counter was granted once");
    let other: i64 = fcall(
        "quorumlock_acquire_fenced",
        &["f", "f:fence", "f:fence:mark"],
        &["token-2", "30000", "call-2"],
    )
    .query_async(&mut c)
    .await
    .expect("FCALL");
    assert_eq!(other, 0, "another token is refused");

    let many = fcall(
        "quorumlock_acquire_many",
        &["m:a", "m:b"],
        &["token-1", "30000"],
    );
    let first: i64 = many.query_async(&mut c).await.expect("FCALL");
    let again: i64 = many.query_async(&mut c).await.expect("FCALL");
    assert_eq!((first, again), (1, 1));
    let other: i64 = fcall(
        "quorumlock_acquire_many",
        &["m:b", "m:c"],
        &["token-2", "30000"],
    )
    .query_async(&mut c)
    .await
    .expect("FCALL");
    assert_eq!(other, 0, "m:b is taken: nothing is set");
    let c_key: Option<String> = redis::cmd("GET")
        .arg("m:c")
        .query_async(&mut c)
        .await
        .expect("GET");
    assert_eq!(c_key, None);
}

/// Functions mode against servers that cannot run it — without Functions
/// (before Redis 7.0; on later servers, FCALL renamed away) or without the
/// library loaded — is not an outage to wait out: a typed error naming the
/// server and its version, from extend, release, `with_lock` and the
/// acquisitions that run a function alike. Plain acquisition is a SET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_mode_where_functions_cannot_run_is_a_typed_error_naming_the_server() {
    let version = server_version().expect("server version");
    let [major, minor, patch] = version.version;
    let number = format!("{major}.{minor}.{patch}");
    let no_functions = if version.has_functions() {
        ServerOptions::new()
            .arg("--rename-command")
            .arg("FCALL")
            .arg("fcall-renamed-away")
    } else {
        ServerOptions::new()
    };
    let mut cases = vec![(true, no_functions)];
    if version.has_functions() {
        cases.push((false, ServerOptions::new()));
    }
    for (unsupported, options) in cases {
        let nodes = RedisNodes::start_with(3, options).expect("nodes");
        let locks = Redlock::builder()
            // Scripts even where the server has native commands, which
            // would extend and release without a function.
            .native_commands(NativeCommands::Never)
            .nodes(nodes.urls())
            .script_mode(ScriptMode::Functions)
            .build()
            .expect("config");
        let check = |what: &str, err: Error| {
            assert!(matches!(err, Error::Incompatible { .. }), "{what}: {err}");
            assert!(!err.is_retryable(), "{what}");
            assert!(!err.node_failures().is_empty(), "{what}: {err}");
            for failure in err.node_failures() {
                assert!(failure.error.is_incompatible(), "{what}: {failure}");
                let server = match &failure.error {
                    NodeError::FunctionsUnsupported { server, .. } if unsupported => server,
                    NodeError::FunctionsNotLoaded { server, .. } if !unsupported => server,
                    other => panic!("{what}: {other}"),
                };
                assert!(
                    server.contains(&number),
                    "{what}: `{server}` names no {number}"
                );
                assert!(failure.to_string().contains(&number), "{what}: {failure}");
            }
        };
        let guard = no_hang("lock", locks.lock("plain", TTL))
            .await
            .expect("SET works");
        check("extend", guard.extend(TTL).await.expect_err("extend"));
        check("release", guard.release().await.expect_err("release"));
        let ran = no_hang(
            "with_lock",
            locks.with_lock("with", TTL, |_| async { "the work ran" }),
        )
        .await;
        check("with_lock", ran.expect_err("with_lock"));
        // Renewal that cannot run ends work that outlives the ttl at once,
        // saying why, rather than retrying to the deadline.
        let endless = locks.with_lock("endless", Duration::from_millis(800), |_| {
            std::future::pending::<()>()
        });
        match no_hang("with_lock", endless).await {
            Err(Error::Lost { reason, .. }) => assert_eq!(reason, LossReason::Incompatible),
            other => panic!("expected a loss to incompatible nodes, got {other:?}"),
        }
        // Not retried until a wait deadline: the first attempt says why.
        check(
            "lock_fenced",
            no_hang("lock_fenced", locks.lock_fenced("fenced", TTL))
                .await
                .expect_err("lock_fenced"),
        );
        check(
            "lock_many",
            no_hang("lock_many", locks.lock_many(&["a", "b"], TTL))
                .await
                .expect_err("lock_many"),
        );
        locks.settle().await;
    }
}
