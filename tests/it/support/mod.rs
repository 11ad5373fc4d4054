//! Helpers shared by the integration tests: managers over testkit nodes,
//! and direct reads of what each node holds.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quorumlock::testkit::{RedisNodes, RedisServer};
use quorumlock::{LockGuard, Redlock, RedlockBuilder, Retry, WakeOnRelease};
use redis::AsyncCommands;

/// The commands a lock user needs in the default `ScriptMode::Eval` (the
/// ACL line of docs/security.md): SET for acquire; EVALSHA, with SCRIPT LOAD (on a
/// standalone node) or EVAL (on a cluster) for the NOSCRIPT fallback, for
/// the scripts, which run GET, DEL and PEXPIRE, plus INCR for fencing and
/// EXISTS for multi-resource locks.
pub const LOCK_COMMANDS: [&str; 11] = [
    "+set",
    "+get",
    "+del",
    "+pexpire",
    "+exists",
    "+incr",
    "+hset",
    "+hmget",
    "+evalsha",
    "+eval",
    "+script|load",
];

/// What the other primitives' scripts run beyond [`LOCK_COMMANDS`]
/// (docs/security.md): semaphores read a slot's ttl; reader-writer locks
/// keep their readers in a sorted set scored by the server's clock;
/// elections need nothing more than a fenced lock (whose counter's mark
/// and the leader's value are hashes).
pub const SEMAPHORE_COMMANDS: [&str; 1] = ["+pttl"];
/// See [`SEMAPHORE_COMMANDS`].
pub const RWLOCK_COMMANDS: [&str; 7] = [
    "+pttl",
    "+time",
    "+zadd",
    "+zcard",
    "+zrem",
    "+zremrangebyscore",
    "+zscore",
];
/// See [`SEMAPHORE_COMMANDS`].
pub const ELECTION_COMMANDS: [&str; 0] = [];
/// See [`SEMAPHORE_COMMANDS`]: a fair lock's line is two sorted sets (by
/// ticket, and by lease end on the server's clock).
pub const FAIR_COMMANDS: [&str; 9] = [
    "+pttl",
    "+time",
    "+zadd",
    "+zcard",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+zscore",
];

/// A bound that turns a hang into a test failure; not a timing assertion.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A builder over `nodes` with a fast retry policy for tests.
pub fn builder(nodes: &RedisNodes) -> RedlockBuilder {
    Redlock::builder().nodes(nodes.urls()).retry(
        Retry::default()
            .attempts(5)
            .delay(Duration::from_millis(10))
            .jitter(Duration::from_millis(10)),
    )
}

/// Awaits `fut`, failing the test if it hangs.
pub async fn no_hang<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG_GUARD, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what} hung for {HANG_GUARD:?}"),
    }
}

/// Awaits `fut`, failing the test if `progress` (a count of work done, e.g.
/// grants so far) stays the same for [`HANG_GUARD`]: a hang guard for work
/// whose total time depends on the machine's load, where [`no_hang`]'s
/// bound on the whole would fail a slow but working run.
pub async fn no_stall<T>(
    what: &str,
    progress: impl Fn() -> usize,
    fut: impl Future<Output = T>,
) -> T {
    tokio::pin!(fut);
    let mut seen = progress();
    loop {
        match tokio::time::timeout(HANG_GUARD, &mut fut).await {
            Ok(v) => return v,
            Err(_) => {
                let now = progress();
                assert!(now > seen, "{what} made no progress for {HANG_GUARD:?}");
                seen = now;
            }
        }
    }
}

/// Opens `locks`' connections to every node with one lock and release, so
/// that what a test does next hits open connections and nodes that have
/// the scripts cached. Waits for every node's answer: a release returns at
/// its quorum's decision, and a node still loading the release script
/// (after NOSCRIPT) when a test pauses it would answer the test's next
/// script call NOSCRIPT, after the call gave up.
pub async fn warm(locks: &Redlock, ttl: Duration) {
    locks
        .lock("warm", ttl)
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");
    no_hang("warm", locks.settle()).await;
}

/// Waits until two renewals of an auto-extended lock have moved its
/// deadline — the second one began after this call — and its token is
/// confirmed on at least `n` nodes. Polls: renewals announce nothing. A
/// lock lost meanwhile is never renewed again: that fails at once, with
/// its reason, rather than as a hang.
pub async fn until_renewed_on(lease: &quorumlock::Lease, n: usize) {
    let wait = async || {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if let Some(reason) = lease.loss_reason() {
            panic!(
                "{} lost while waiting for its renewals: {reason:?}",
                lease.resource()
            );
        }
    };
    no_hang("renewals", async {
        for _ in 0..2 {
            let before = lease.deadline();
            while lease.deadline() == before {
                wait().await;
            }
        }
        while lease.confirmed() < n {
            wait().await;
        }
    })
    .await;
}

/// Releases `guard` and waits for every node's answer (a release returns
/// at its quorum's decision): on how many nodes it deleted the token.
pub async fn release_settled(guard: impl Into<LockGuard>) -> usize {
    let guard: LockGuard = guard.into();
    let summary = guard.release().await.expect("release");
    summary.settled().await.released()
}

/// A fresh direct connection to one node, independent of the library's.
/// Its reply timeout is generous: redis-rs' default (500 ms) fails test
/// reads on a heavily loaded 2-core machine, which says nothing about the
/// library.
pub async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(30)))
        .set_connection_timeout(Some(Duration::from_secs(30)));
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect")
}

/// What `key` holds (as a string) on each running node; `None` where absent
/// or where the node is down.
pub async fn values(nodes: &RedisNodes, key: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for server in nodes {
        if !server.is_running() {
            out.push(None);
            continue;
        }
        let mut c = conn(&server.url()).await;
        out.push(c.get(key).await.expect("GET"));
    }
    out
}

/// How many nodes hold exactly `token` at `key`.
pub async fn holding(nodes: &RedisNodes, key: &str, token: &str) -> usize {
    values(nodes, key)
        .await
        .iter()
        .filter(|v| v.as_deref() == Some(token))
        .count()
}

/// How many clients subscribe to `channel` on the server at `url`.
pub async fn subscribers(url: &str, channel: &str) -> i64 {
    let (_, count): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn(url).await)
        .await
        .expect("PUBSUB NUMSUB");
    count
}

/// Waits until some server among `urls` has a subscriber on `channel`.
pub async fn until_subscribed(urls: &[String], channel: &str) {
    no_hang("subscription", async {
        loop {
            for url in urls {
                if subscribers(url, channel).await > 0 {
                    return;
                }
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Whether a node refused a call for want of an ACL permission: a script
/// (EVAL/EVALSHA) the user may not run is a typed
/// [`ScriptsRefused`](quorumlock::NodeError::ScriptsRefused). A command
/// the user may not run is a NOPERM error on every server; a command a
/// script may not run is a script error with no code of its own on some
/// (`ERR`, or Redis 6.2's `@user_script:`), worded differently by each
/// version, all of them naming a permission or saying "can't run".
pub fn is_acl_refusal(error: &quorumlock::NodeError) -> bool {
    // A script the user may not run, with no native command to stand in.
    if matches!(error, quorumlock::NodeError::ScriptsRefused { .. }) {
        return true;
    }
    let quorumlock::NodeError::Redis(e) = error else {
        return false;
    };
    match e.kind() {
        redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => true,
        redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        | redis::ErrorKind::Extension => {
            let text = e.to_string().to_ascii_lowercase();
            text.contains("permission") || text.contains("can't run this command")
        }
        _ => false,
    }
}

/// Asserts that `err` failed on some node, and on every failing node for
/// want of an ACL permission.
pub fn assert_acl_refusals(err: &quorumlock::Error) {
    assert!(!err.node_failures().is_empty(), "{err}");
    for failure in err.node_failures() {
        assert!(is_acl_refusal(&failure.error), "{failure}");
    }
}

/// Every key on every running node whose name starts with `prefix`.
pub async fn keys_left(nodes: &RedisNodes, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for server in nodes {
        if server.is_running() {
            out.extend(keys_on(server, prefix).await);
        }
    }
    out
}

/// Every key on `server` whose name starts with `prefix`.
pub async fn keys_on(server: &RedisServer, prefix: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn(&server.url()).await)
        .await
        .expect("KEYS")
}

/// Waits until no key starting with `prefix` is left on any node (a node
/// that was down during a release keeps its key until its ttl passes).
pub async fn until_no_keys_left(nodes: &RedisNodes, prefix: &str) {
    no_hang("keys to vanish", async {
        while !keys_left(nodes, prefix).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A server stopped with SIGSTOP (connections stay open, nothing is
/// answered) until this is dropped: the drop resumes it, also when the test
/// fails half-way.
pub struct Paused<'a>(&'a quorumlock::testkit::RedisServer);

impl<'a> Paused<'a> {
    pub fn new(server: &'a quorumlock::testkit::RedisServer) -> Self {
        server.pause().expect("pause");
        Self(server)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        // Fails only if the server was killed meanwhile: nothing to resume.
        let _ = self.0.resume();
    }
}

/// Restarts node `i` (killed before) off the runtime's threads: a restart
/// waits for the server to answer, which a loaded machine makes slow.
pub async fn restart(nodes: &Arc<RedisNodes>, i: usize) {
    let restarted = nodes.clone();
    tokio::task::spawn_blocking(move || restarted[i].restart())
        .await
        .expect("restart task")
        .expect("restart");
}

/// Kills and restarts one node at a time, round robin (down 100 ms, then
/// 200 ms before the next), until `done`; the task returns how many
/// restarts it made.
pub fn keep_restarting(
    nodes: Arc<RedisNodes>,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut restarts = 0;
        while !done.load(Ordering::SeqCst) {
            let i = restarts % nodes.len();
            nodes[i].kill();
            tokio::time::sleep(Duration::from_millis(100)).await;
            restart(&nodes, i).await;
            restarts += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        restarts
    })
}

/// How [`patient`] managers retry: forever, briefly, with jitter. Without
/// a bound on the wait: a test that wants one adds `.wait(…)`.
pub fn patient_retry() -> Retry {
    Retry::forever()
        .delay(Duration::from_millis(5))
        .jitter(Duration::from_millis(10))
}

/// The builder of [`patient`] managers, for a test that changes one
/// setting: [`patient_retry`] without a bound on the wait, woken by
/// releases, with a node timeout a loaded machine meets.
pub fn patient_builder(nodes: &RedisNodes) -> RedlockBuilder {
    Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .retry(patient_retry())
        .wake_on_release(WakeOnRelease::Subscribe)
}

/// A manager that keeps trying (many tasks contending), woken by
/// releases, with a node timeout a loaded machine meets, and waits at most
/// a minute for a lock.
pub fn patient(nodes: &RedisNodes) -> Redlock {
    patient_builder(nodes)
        .retry(patient_retry().wait(Duration::from_secs(60)))
        .build()
        .expect("config")
}

/// Why a test cannot run on the server at hand: the reason code of its
/// `SKIP` line, which `.ci/servers` judges against what each server of
/// the matrix supports (a skip where the test should run fails CI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Each variant names what is missing, as its reason code does.
#[allow(clippy::enum_variant_names)]
pub enum Skip {
    /// The server has no Redis Functions (before 7.0): `no-functions`.
    NoFunctions,
    /// The server was built without TLS: `no-tls`.
    NoTls,
    /// No headless browser to open a report in (report tests, outside
    /// CI): `no-chromium`.
    NoChromium,
    /// The server has no native compare-and-delete and compare-and-set
    /// (`DELIFEQ` or `DELEX … IFEQ`, and `SET … IFEQ`): `no-native`.
    NoNative,
    /// No mixed fleet of servers named (`QUORUMLOCK_FLEET`, which the
    /// server matrix sets): `no-fleet`.
    NoFleet,
    /// The server was built without a scripting engine (Valkey's
    /// `BUILD_LUA=no`): `no-scripting`.
    NoScripting,
}

impl Skip {
    /// The reason code in the `SKIP` line.
    pub fn code(self) -> &'static str {
        match self {
            Self::NoFunctions => "no-functions",
            Self::NoTls => "no-tls",
            Self::NoChromium => "no-chromium",
            Self::NoNative => "no-native",
            Self::NoFleet => "no-fleet",
            Self::NoScripting => "no-scripting",
        }
    }
}

/// Says that `test` (`module::test`, as `cargo test` names it), or part
/// of it, does not run here, in the one machine-readable form CI reads:
/// `SKIP <module::test>: <reason-code> <text>`. Every skip goes through
/// here. (Printed to stdout: `cargo test -- --show-output` shows it.)
pub fn skip(test: &str, why: Skip, text: impl std::fmt::Display) {
    println!("SKIP {test}: {} {text}", why.code());
}

/// Whether the server has Functions (7.0+); if not, says that `test` is
/// skipped and why. (`+fcall` is not even an ACL rule before 7.0.)
pub fn functions_or_skip(test: &str) -> bool {
    let version = quorumlock::testkit::server_version().expect("server version");
    if !version.has_functions() {
        skip(
            test,
            Skip::NoFunctions,
            format_args!("{version} has no Redis Functions (7.0+)"),
        );
    }
    version.has_functions()
}

/// A transparent [`FaultProxy`](quorumlock::testkit::FaultProxy) in front
/// of each of `servers`, in their order.
pub async fn proxies<'a>(
    servers: impl IntoIterator<Item = &'a quorumlock::testkit::RedisServer>,
) -> Vec<quorumlock::testkit::FaultProxy> {
    let mut proxies = Vec::new();
    for server in servers {
        let proxy = quorumlock::testkit::FaultProxy::start(server.port()).await;
        proxies.push(proxy.expect("proxy"));
    }
    proxies
}

/// Makes `tracing`'s thread-scoped subscribers (`set_default`) reliable in
/// this process of many tests: registers, once, a second subscriber that
/// stays. With only one registered, `tracing` computes a callsite's
/// interest from the default of whichever thread reaches it first, and a
/// callsite first reached by another test's thread (no subscriber) is
/// cached as never enabled: the scoped capture then misses its own
/// test's events there (secrets:: failed in 5 of 10 runs beside two
/// tokens:: tests, which release as early). With two registered, every
/// callsite's interest counts each. Call before `set_default`.
pub fn scoped_subscribers() {
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
}
