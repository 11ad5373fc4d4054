//! Native commands: on a server with compare-and-delete (`DELIFEQ`, or
//! `DELEX … IFEQ`) and compare-and-set (`SET … IFEQ`), plain locks run no
//! script at all — acquire, release, extension, auto-extension, the group
//! commit and the restoring extension — so a user denied every script can
//! lock; the token under the key is the same on every path, so native and
//! scripted managers exclude each other; and a fleet whose nodes differ
//! puts each node on its own best path. Elsewhere these tests say why they
//! do not run (`SKIP … no-native`).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::testkit::{RedisNodes, ServerOptions, server_version};
use quorumlock::{NativeCommands, Redlock, Retry, WakeOnRelease};
use redis::AsyncCommands;
use support::{Skip, builder, conn, no_hang, patient_builder, skip, values};

const TTL: Duration = Duration::from_secs(5);
const USER: &str = "locker";
const USER_PASSWORD: &str = "native-pw-3b7d";

/// How the library releases and extends a plain lock on `product`
/// `major.minor` (`valkey`, `redis`), as `status` and the node check name
/// it: the best path each server family offers.
pub(crate) fn best_path(product: &str, major: u32, minor: u32) -> &'static str {
    let at_least = |m: u32, n: u32| (major, minor) >= (m, n);
    match product {
        "valkey" if at_least(9, 0) => "release DELIFEQ, extend SET IFEQ",
        "valkey" if at_least(8, 1) => "release script, extend SET IFEQ",
        "redis" if at_least(8, 4) => "release DELEX IFEQ, extend SET IFEQ",
        _ => "release script, extend script",
    }
}

/// [`best_path`] of the server the testkit starts.
pub(crate) fn best_path_here() -> &'static str {
    let version = server_version().expect("server version");
    let [major, minor, _] = version.version;
    best_path(&version.product, major, minor)
}

/// The compare-and-delete command of the server at hand, as
/// `INFO commandstats` names it: `delifeq` (Valkey) or `delex` (Redis).
fn native_delete_here() -> &'static str {
    let version = server_version().expect("server version");
    if version.product == "valkey" {
        "delifeq"
    } else {
        "delex"
    }
}

/// Whether the server has both native commands (Valkey 9.0, Redis 8.4); if
/// not, says that `test` is skipped and why.
fn native_or_skip(test: &str) -> bool {
    let version = server_version().expect("server version");
    let native = !best_path_here().contains("script");
    if !native {
        skip(
            test,
            Skip::NoNative,
            format_args!(
                "{version} has no DELIFEQ / DELEX IFEQ and SET IFEQ (Valkey 9.0, Redis 8.4)"
            ),
        );
    }
    native
}

/// Whether the server at `url` runs scripts; if it was built without a
/// scripting engine (Valkey's `BUILD_LUA=no`: `EVAL` answers "Could not
/// find scripting engine"), says that `test`, which needs scripts beside
/// the native path, is skipped and why.
pub(crate) async fn scripting_or_skip(test: &str, url: &str) -> bool {
    let mut c = conn(url).await;
    let answer: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg("return 1")
        .arg(0)
        .query_async(&mut c)
        .await;
    match answer {
        Ok(_) => {
            // Leave no trace in the counts the tests read.
            let () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut c)
                .await
                .expect("CONFIG RESETSTAT");
            true
        }
        Err(e) if e.to_string().contains("scripting engine") => {
            let version = server_version().expect("server version");
            skip(
                test,
                Skip::NoScripting,
                format_args!("{version} has no scripting engine: {e}"),
            );
            false
        }
        Err(e) => panic!("EVAL on {url}: {e}"),
    }
}

/// The calls of each command on `url`, from `INFO commandstats`
/// (`cmdstat_set:calls=3,…` → `("set", 3)`), rejected calls included.
async fn command_calls(url: &str) -> Vec<(String, u64)> {
    let mut c = conn(url).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let count = |field: &str| {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(field)?.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let calls = count("calls=") + count("rejected_calls=") + count("failed_calls=");
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// The script commands `url` has seen (`eval*`, `fcall*`, `script*`).
async fn scripts_seen(url: &str) -> Vec<(String, u64)> {
    command_calls(url)
        .await
        .into_iter()
        .filter(|(name, calls)| {
            *calls > 0
                && (name.starts_with("eval")
                    || name.starts_with("fcall")
                    || name.starts_with("script"))
        })
        .collect()
}

async fn calls_of(url: &str, command: &str) -> u64 {
    command_calls(url)
        .await
        .into_iter()
        .find(|(name, _)| name == command)
        .map_or(0, |(_, calls)| calls)
}

/// Plain lock cycles of every kind: acquire, extend and release one by
/// one; many at once (so that the group commit batches them); and an
/// auto-extended lock renewed twice.
async fn every_plain_step(locks: &Redlock, prefix: &str) {
    for i in 0..50 {
        let guard = locks
            .lock(&format!("{prefix}:one:{}", i % 5), TTL)
            .await
            .expect("lock");
        guard.extend(TTL).await.expect("extend");
        guard.release().await.expect("release");
    }
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let locks = locks.clone();
            let resource = format!("{prefix}:many:{t}");
            tokio::spawn(async move {
                for _ in 0..4 {
                    let guard = locks.lock(&resource, TTL).await.expect("lock");
                    guard.extend(TTL).await.expect("extend");
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    no_hang("64 lockers", async {
        for task in tasks {
            task.await.expect("task");
        }
    })
    .await;
    let guard = locks
        .lock(&format!("{prefix}:renewed"), Duration::from_millis(600))
        .await
        .expect("lock");
    guard.auto_extend();
    support::until_renewed_on(&guard.lease(), 3).await;
    guard.release().await.expect("release");
    no_hang("settle", locks.settle()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_locks_send_no_script_where_the_server_has_the_commands() {
    if !native_or_skip("native::plain_locks_send_no_script_where_the_server_has_the_commands") {
        return;
    }
    let nodes = RedisNodes::start(3).expect("nodes");
    let quiet = builder(&nodes).build().expect("config");
    let waking = builder(&nodes)
        .wake_on_release(WakeOnRelease::Subscribe)
        .build()
        .expect("config");
    every_plain_step(&quiet, "n").await;
    every_plain_step(&waking, "w").await;
    for server in &nodes {
        let url = server.url();
        assert_eq!(scripts_seen(&url).await, [], "scripts ran on {url}");
        // The native commands did the work (so the check above could fail).
        assert!(calls_of(&url, "delifeq").await + calls_of(&url, "delex").await >= 50);
        assert!(calls_of(&url, "publish").await > 0, "releases announced");
    }
    assert_eq!(values(&nodes, "n:one:0").await, [None, None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_stay_where_a_manager_asks_for_them() {
    if !native_or_skip("native::scripts_stay_where_a_manager_asks_for_them") {
        return;
    }
    let nodes = RedisNodes::start(1).expect("nodes");
    if !scripting_or_skip(
        "native::scripts_stay_where_a_manager_asks_for_them",
        &nodes.urls()[0],
    )
    .await
    {
        return;
    }
    let locks = builder(&nodes)
        .native_commands(NativeCommands::Never)
        .build()
        .expect("config");
    let guard = locks.lock("s:a", TTL).await.expect("lock");
    guard.extend(TTL).await.expect("extend");
    guard.release().await.expect("release");
    let url = nodes.urls()[0].clone();
    assert!(!scripts_seen(&url).await.is_empty(), "scripts ran");
    assert_eq!(
        calls_of(&url, "delifeq").await + calls_of(&url, "delex").await,
        0
    );
}

/// Nodes with the user `locker`, allowed every command but scripts (and
/// with `dangerous`, not the dangerous ones either), on keys under `app:`.
fn confined(dangerous: bool) -> (Arc<RedisNodes>, Vec<String>) {
    let mut options = ServerOptions::new()
        .arg("--user")
        .arg(USER)
        .arg("on")
        .arg(format!(">{USER_PASSWORD}"))
        .arg("~app:*")
        .arg("&*")
        .arg("+@all")
        .arg("-@scripting");
    if dangerous {
        options = options.arg("-@dangerous");
    }
    let nodes = Arc::new(RedisNodes::start_with(3, options).expect("nodes"));
    let urls = nodes
        .iter()
        .map(|s| format!("redis://{USER}:{USER_PASSWORD}@127.0.0.1:{}", s.port()))
        .collect();
    (nodes, urls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_every_script_locks_renews_restores_and_releases() {
    if !native_or_skip("native::a_user_denied_every_script_locks_renews_restores_and_releases") {
        return;
    }
    let (nodes, urls) = confined(false);
    let locks = Redlock::builder()
        .nodes(&urls)
        .retry(Retry::default().attempts(50))
        .wake_on_release(WakeOnRelease::Subscribe)
        .build()
        .expect("config");
    every_plain_step(&locks, "app").await;
    // The node check says so: plain locks, natively, and nothing scripted
    // (its probe key under the user's `app:`).
    let checker = Redlock::builder()
        .nodes(&urls)
        .key_prefix("app:")
        .build()
        .expect("config");
    let report = no_hang("check", checker.check()).await;
    for node in &report.nodes {
        assert_eq!(
            node.serves,
            Some(quorumlock::check::Serves::PlainLocks),
            "{report}"
        );
    }
    // And so does the read-only check `status` shows (a script refused).
    let served = no_hang("serves", checker.serves()).await;
    assert_eq!(
        served,
        vec![Some(quorumlock::check::Serves::PlainLocks); urls.len()]
    );

    // An auto-extended lock outlives a node that restarts empty: the
    // renewal sets the key there again, without a script.
    let guard = locks
        .lock("app:restored", Duration::from_millis(800))
        .await
        .expect("lock");
    guard.auto_extend();
    let token = guard.token().as_str().to_owned();
    nodes[0].kill();
    support::restart(&nodes, 0).await;
    assert_eq!(
        values(&nodes, "app:restored").await[0],
        None,
        "restarted empty"
    );
    no_hang("restored on the restarted node", async {
        while values(&nodes, "app:restored").await[0].as_deref() != Some(token.as_str()) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(guard.validity() > Duration::ZERO);
    guard.release().await.expect("release");
    no_hang("settle", locks.settle()).await;
    assert_eq!(values(&nodes, "app:restored").await, [None, None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_scripts_and_dangerous_commands_still_locks() {
    if !native_or_skip("native::a_user_denied_scripts_and_dangerous_commands_still_locks") {
        return;
    }
    let (nodes, urls) = confined(true);
    let locks = Redlock::builder()
        .nodes(&urls)
        // Its INFO is refused: the check must only log that.
        .startup_check(quorumlock::check::StartupCheck::Log)
        .build()
        .expect("config");
    let guard = locks.lock("app:d", TTL).await.expect("lock");
    guard.extend(TTL).await.expect("extend");
    guard.release().await.expect("release");
    no_hang("settle", locks.settle()).await;
    assert_eq!(values(&nodes, "app:d").await, [None, None, None]);
}

/// The lock user's ACL lines of docs/security.md ("ACL"), each under the
/// bold label of the servers it is for: `(label, rules)`, the rules being
/// what follows `ACL SETUSER locker`.
fn documented_acl_lines() -> Vec<(String, Vec<String>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md");
    let text = std::fs::read_to_string(path).expect("docs/security.md");
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("ACL\n"))
        .expect("an ACL section");
    let mut label = None;
    let mut lines = Vec::new();
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("**") {
            label = rest.split_once("**").map(|(l, _)| l.to_owned());
        } else if let Some(rules) = line.strip_prefix("ACL SETUSER locker ") {
            let label = label.clone().expect("a label before each ACL line");
            lines.push((label, rules.split_whitespace().map(str::to_owned).collect()));
        }
    }
    lines
}

/// The label of the documented ACL line for `product` `major.minor`.
fn acl_family(product: &str, major: u32, minor: u32) -> &'static str {
    match best_path(product, major, minor) {
        "release DELIFEQ, extend SET IFEQ" => "Valkey 9.0 and later",
        "release DELEX IFEQ, extend SET IFEQ" => "Redis 8.4 and later",
        _ => "Any server",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_line_of_each_family_locks_extends_and_releases() {
    // docs/security.md, "ACL": one line per server family. Each is taken
    // from the page as it stands and started on a server of its family:
    // the server at hand (the matrix runs every family).
    let lines = documented_acl_lines();
    let mut labels: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
    labels.sort_unstable();
    assert_eq!(
        labels,
        ["Any server", "Redis 8.4 and later", "Valkey 9.0 and later"],
        "one line per family"
    );
    for (label, rules) in &lines {
        assert!(rules.contains(&"+info".to_owned()), "{label}: no +info");
    }
    let version = server_version().expect("server version");
    let [major, minor, _] = version.version;
    let family = acl_family(&version.product, major, minor);
    let (_, rules) = lines
        .iter()
        .find(|(label, _)| label == family)
        .expect("the family's line");
    let mut options = ServerOptions::new().arg("--user").arg(USER);
    for rule in rules {
        options = options.arg(if rule == ">PASSWORD" {
            format!(">{USER_PASSWORD}")
        } else {
            rule.clone()
        });
    }
    // A rule the server does not know stops it at start.
    let nodes = RedisNodes::start_with(3, options)
        .unwrap_or_else(|e| panic!("{version} with the line for {family}: {e}"));
    let urls: Vec<String> = nodes
        .iter()
        .map(|s| format!("redis://{USER}:{USER_PASSWORD}@127.0.0.1:{}", s.port()))
        .collect();
    let locks = Redlock::builder()
        .nodes(&urls)
        .key_prefix("myapp:lock:")
        .retry(Retry::none())
        .build()
        .expect("config");
    let guard = locks.lock("minimal", TTL).await.expect("lock");
    guard.extend(TTL).await.expect("extend");
    guard.release().await.expect("release");
    no_hang("settle", locks.settle()).await;
    assert_eq!(
        values(&nodes, "myapp:lock:minimal").await,
        [None, None, None]
    );
    if family != "Any server" {
        // The native lines allow no script: the native commands did it.
        for url in nodes.urls() {
            assert_eq!(scripts_seen(&url).await, [], "scripts ran on {url}");
            assert!(calls_of(&url, native_delete_here()).await >= 1, "{url}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_needs_a_script_says_what_is_missing() {
    if !native_or_skip("native::a_step_that_needs_a_script_says_what_is_missing") {
        return;
    }
    let (_nodes, urls) = confined(false);
    let locks = Redlock::builder()
        .nodes(&urls)
        .retry(Retry::none())
        .build()
        .expect("config");
    let err = locks
        .lock_fenced("app:fenced", TTL)
        .await
        .expect_err("a fenced lock needs a script");
    let text = err.to_string();
    assert!(text.contains("quorumlock_acquire_fenced"), "{text}");
    assert!(text.contains("EVAL"), "{text}");
    assert!(!text.contains("NOPERM"), "a bare NOPERM: {text}");
    assert!(!text.contains(USER_PASSWORD), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_and_scripted_managers_exclude_each_other() {
    let nodes = RedisNodes::start(3).expect("nodes");
    if !scripting_or_skip(
        "native::native_and_scripted_managers_exclude_each_other",
        &nodes.urls()[0],
    )
    .await
    {
        return;
    }
    let native = patient_builder(&nodes).build().expect("config");
    let scripted = patient_builder(&nodes)
        .native_commands(NativeCommands::Never)
        .build()
        .expect("config");
    // A read-modify-write with a yield in the middle: exact only if no two
    // holders ever overlap.
    let counter = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let locks = if i % 2 == 0 { &native } else { &scripted }.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                for _ in 0..5 {
                    let guard = locks.lock("x:counter", TTL).await.expect("lock");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    no_hang("40 lockers of two kinds", async {
        for task in tasks {
            task.await.expect("task");
        }
    })
    .await;
    assert_eq!(counter.load(Ordering::SeqCst), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorumlock_and_rslock_exclude_each_other_on_the_same_keys() {
    // rslock writes the same thing a lock of ours does (`SET key value NX
    // PX`, released by a token-checked script), whichever path our
    // releases take on this server.
    let nodes = RedisNodes::start(3).expect("nodes");
    if !scripting_or_skip(
        "native::quorumlock_and_rslock_exclude_each_other_on_the_same_keys",
        &nodes.urls()[0],
    )
    .await
    {
        return;
    }
    let ours = patient_builder(&nodes).build().expect("config");
    let theirs = Arc::new(rslock::LockManager::new(nodes.urls()));
    let counter = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let counter = counter.clone();
        if i % 2 == 0 {
            let locks = ours.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let guard = locks.lock("x:shared", TTL).await.expect("lock");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        } else {
            let theirs = theirs.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let lock = theirs
                        .acquire_no_guard("x:shared".as_bytes(), TTL)
                        .await
                        .expect("rslock");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    theirs.unlock(&lock).await;
                }
            }));
        }
    }
    no_hang("20 lockers of two libraries", async {
        for task in tasks {
            task.await.expect("task");
        }
    })
    .await;
    assert_eq!(counter.load(Ordering::SeqCst), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_unlike_servers_puts_each_node_on_its_best_path() {
    if !native_or_skip("native::a_fleet_of_unlike_servers_puts_each_node_on_its_best_path") {
        return;
    }
    // Node 0 as it is; node 1 without its compare-and-delete (DELIFEQ on
    // Valkey, DELEX on Redis: a Valkey 8.1, say, with SET IFEQ but no
    // compare-and-delete); node 2 without COMMAND DOCS for anyone (as
    // before Redis 7.0: nothing native).
    let delete = native_delete_here();
    let nodes = RedisNodes::start(1).expect("node");
    // Nodes 1 and 2 need scripts.
    if !scripting_or_skip(
        "native::a_fleet_of_unlike_servers_puts_each_node_on_its_best_path",
        &nodes.urls()[0],
    )
    .await
    {
        return;
    }
    let no_delete = RedisNodes::start_with(
        1,
        ServerOptions::new()
            .arg("--rename-command")
            .arg(delete.to_ascii_uppercase())
            .arg(""),
    )
    .expect("node");
    let no_docs = RedisNodes::start_with(
        1,
        ServerOptions::new()
            .arg("--rename-command")
            .arg("COMMAND")
            .arg(""),
    )
    .expect("node");
    let urls: Vec<String> = [&nodes, &no_delete, &no_docs]
        .iter()
        .flat_map(|n| n.urls())
        .collect();
    let locks = Redlock::builder().nodes(&urls).build().expect("config");
    every_plain_step(&locks, "f").await;
    // Each node says so, as `status` and the doctor show it.
    let report = locks
        .check_with(&quorumlock::check::CheckOptions::new().skip_access_probe())
        .await;
    let paths: Vec<Option<&str>> = report.nodes.iter().map(|n| n.path.as_deref()).collect();
    assert_eq!(
        paths,
        [
            Some(best_path_here()),
            Some("release script, extend SET IFEQ"),
            Some("release script, extend script")
        ]
    );
    let [full, partial, none] = [&urls[0], &urls[1], &urls[2]];
    assert_eq!(scripts_seen(full).await, [], "node 0 ran scripts");
    assert!(calls_of(full, delete).await >= 50);
    // Node 1 extends natively but releases with a script.
    let partial_scripts = scripts_seen(partial).await;
    assert!(!partial_scripts.is_empty(), "node 1 released with a script");
    // Node 2 does everything with scripts.
    assert!(!scripts_seen(none).await.is_empty(), "node 2 ran scripts");
    let mut c = conn(none).await;
    let gone: Option<String> = c.get("f:one:0").await.expect("GET");
    assert_eq!(gone, None);
}

/// The server binaries of a real mixed fleet, from `QUORUMLOCK_FLEET`
/// (paths separated by `:`; the server matrix sets it to every server it
/// runs).
fn fleet() -> Option<Vec<String>> {
    let fleet = std::env::var("QUORUMLOCK_FLEET").ok()?;
    let binaries: Vec<String> = fleet
        .split(':')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    (binaries.len() >= 2).then_some(binaries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_mixed_fleet_locks_each_node_on_its_own_path() {
    let Some(binaries) = fleet() else {
        skip(
            "native::a_real_mixed_fleet_locks_each_node_on_its_own_path",
            Skip::NoFleet,
            "QUORUMLOCK_FLEET names no servers (the server matrix sets it)",
        );
        return;
    };
    // One node per server, e.g. Redis 6.2, 7.2, 8.0, 8.6 and Valkey 8.0,
    // 8.1, 9.1 in one manager.
    let nodes: Vec<RedisNodes> = binaries
        .iter()
        .map(|binary| RedisNodes::start_with(1, ServerOptions::new().binary(binary)).expect("node"))
        .collect();
    let urls: Vec<String> = nodes.iter().flat_map(|n| n.urls()).collect();
    let locks = Redlock::builder()
        .nodes(&urls)
        .wake_on_release(WakeOnRelease::Subscribe)
        .build()
        .expect("config");
    every_plain_step(&locks, "fleet").await;
    // Without the access probe, which tries a multi-resource lock (a
    // script) on every node.
    let report = locks
        .check_with(&quorumlock::check::CheckOptions::new().skip_access_probe())
        .await;
    for (node, url) in report.nodes.iter().zip(&urls) {
        let path = node.path.as_deref().expect("every node said");
        // Its best path: what its server ("valkey 9.1.2") offers.
        let server = node.server.as_deref().expect("every node answered");
        let (product, version) = server.split_once(' ').expect("product version");
        let mut numbers = version.split('.').map(|n| n.parse::<u32>().expect(server));
        let (major, minor) = (numbers.next().expect(server), numbers.next().expect(server));
        assert_eq!(path, best_path(product, major, minor), "{url}: {server}");
        let scripts = scripts_seen(url).await;
        if path.contains("release DELIFEQ") || path.contains("release DELEX") {
            assert!(path.contains("extend SET IFEQ"), "{url}: {path}");
            assert_eq!(scripts, [], "{url} ({path}) ran scripts");
        } else {
            assert!(
                !scripts.is_empty(),
                "{url} ({path}) released without a script?"
            );
        }
    }
    for node in &nodes {
        assert_eq!(values(node, "fleet:one:0").await, [None]);
    }
}
