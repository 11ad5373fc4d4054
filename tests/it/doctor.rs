//! The node check (`Redlock::check`) on real servers configured to break
//! each assumption: one server behind two URLs, a replica, eviction
//! policies, persistence, an ACL user without GET, Functions not loaded,
//! a cluster — and a healthy set with nothing unsafe.

use crate::support;

use std::time::Duration;

use quorumlock::check::{Aspect, CheckOptions, Report, Serves, Severity};
use quorumlock::testkit::{
    FaultProxy, Faults, RedisCluster, RedisNodes, RedisServer, ServerOptions,
};
use quorumlock::{Redlock, ScriptMode};
use support::{conn, no_hang};

/// Short clock interval and few pings: these tests are about what the
/// servers are configured to do, not about measuring them.
fn quick() -> CheckOptions {
    CheckOptions::new()
        .clock_interval(Duration::from_millis(200))
        .latency_samples(5)
        .probe_timeout(Duration::from_secs(10))
}

async fn check(locks: &Redlock, options: &CheckOptions) -> Report {
    no_hang("check", locks.check_with(options)).await
}

/// The findings of node `i` about `aspect`, as (severity, seen).
fn found(report: &Report, i: usize, aspect: Aspect) -> Vec<(Severity, String)> {
    report.nodes[i]
        .findings
        .iter()
        .filter(|f| f.aspect == aspect)
        .map(|f| (f.severity, f.seen.clone()))
        .collect()
}

fn severities(report: &Report, i: usize, aspect: Aspect) -> Vec<Severity> {
    found(report, i, aspect)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

fn url(server: &RedisServer) -> String {
    server.url()
}

/// A server with a memory limit that evicts by `policy` when full.
fn with_eviction(policy: &str) -> RedisServer {
    RedisServer::start_with(
        ServerOptions::new()
            .arg("--maxmemory")
            .arg("64mb")
            .arg("--maxmemory-policy")
            .arg(policy),
    )
    .expect("server")
}

async fn dbsize(url: &str) -> i64 {
    redis::cmd("DBSIZE")
        .query_async(&mut conn(url).await)
        .await
        .expect("DBSIZE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_set_has_nothing_unsafe_and_is_left_as_it_was() {
    let nodes = RedisNodes::start_with(3, ServerOptions::new().persistent()).expect("nodes");
    let locks = Redlock::new(nodes.urls()).expect("config");
    let report = check(&locks, &quick().fenced_locks()).await;
    println!("{report}");
    assert!(!report.is_unsafe(), "{report}");
    for i in 0..3 {
        for aspect in [
            Aspect::Independence,
            Aspect::Eviction,
            Aspect::Persistence,
            Aspect::Capability,
            Aspect::Reachability,
            Aspect::Replicas,
        ] {
            assert_eq!(found(&report, i, aspect), [], "{report}");
        }
        let node = &report.nodes[i];
        assert!(
            node.server
                .as_deref()
                .is_some_and(|s| s.starts_with("redis ") || s.starts_with("valkey ")),
            "{report}"
        );
        assert!(node.latency.is_some(), "{report}");
        // How its locks are released and extended: the best path of its
        // server (`release DELEX IFEQ, extend SET IFEQ` on Redis 8.4+).
        assert_eq!(
            node.path.as_deref(),
            Some(crate::native::best_path_here()),
            "{report}"
        );
    }
    // The access probe's lock is gone: the check left no key behind.
    for url in nodes.urls() {
        assert_eq!(dbsize(&url).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_behind_two_urls_is_unsafe() {
    let server = RedisServer::start().expect("server");
    let other = RedisServer::start().expect("server");
    let port = server.port();
    let locks = Redlock::new([
        format!("redis://127.0.0.1:{port}"),
        format!("redis://localhost:{port}"),
        url(&other),
    ])
    .expect("distinct labels build");
    let report = check(&locks, &quick()).await;
    assert!(report.is_unsafe(), "{report}");
    let second = found(&report, 1, Aspect::Independence);
    assert_eq!(second.len(), 1, "{report}");
    assert_eq!(second[0].0, Severity::Unsafe);
    assert!(second[0].1.contains("run_id"), "{report}");
    assert_eq!(found(&report, 2, Aspect::Independence), [], "{report}");
    // Said once: the access probe, which the client refuses on that node
    // for the same reason, does not repeat it.
    assert_eq!(found(&report, 1, Aspect::Capability), [], "{report}");
}

/// Of two nodes reaching one server, the later-listed is the one whose
/// votes the manager refuses, and `serves` says so of it, even where its
/// connection answers first: here the first node's goes through a proxy
/// that delays each byte by 50 ms each way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_later_listed_of_two_nodes_on_one_server_is_the_one_refused() {
    let server = RedisServer::start().expect("server");
    let other = RedisServer::start().expect("server");
    let proxy = FaultProxy::start(server.port()).await.expect("proxy");
    let delay = Duration::from_millis(50);
    proxy.set(Faults::latency(delay, delay, Duration::ZERO));
    let locks = Redlock::new([
        proxy.url(),
        format!("redis://localhost:{}", server.port()),
        url(&other),
    ])
    .expect("distinct labels build");
    let report = check(&locks, &quick()).await;
    let serves: Vec<Option<Serves>> = report.nodes.iter().map(|n| n.serves).collect();
    assert_eq!(
        serves,
        [
            Some(Serves::Every),
            Some(Serves::Nothing),
            Some(Serves::Every)
        ],
        "{report}"
    );
    assert_eq!(found(&report, 0, Aspect::Independence), [], "{report}");
    assert_eq!(
        severities(&report, 1, Aspect::Independence),
        [Severity::Unsafe],
        "{report}"
    );
}

/// Waits until `replica` is in sync with its master and the master counts
/// it.
async fn wait_for_sync(master: &str, replica: &str) {
    let info = |url: String| async move {
        let text: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn(&url).await)
            .await
            .expect("INFO");
        text
    };
    no_hang("replication", async {
        loop {
            let linked = info(replica.to_owned())
                .await
                .contains("master_link_status:up");
            let counted = info(master.to_owned()).await.contains("connected_slaves:1");
            if linked && counted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_in_the_node_list_is_unsafe_and_its_master_at_risk() {
    let master = RedisServer::start().expect("master");
    let replica = RedisServer::start_with(
        ServerOptions::new()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master.port().to_string()),
    )
    .expect("replica");
    let other = RedisServer::start().expect("server");
    wait_for_sync(&url(&master), &url(&replica)).await;

    let locks = Redlock::new([url(&master), url(&replica), url(&other)]).expect("config");
    let report = check(&locks, &quick()).await;
    println!("{report}");
    assert!(report.is_unsafe(), "{report}");
    let independence = found(&report, 1, Aspect::Independence);
    assert!(
        independence
            .iter()
            .any(|(s, seen)| *s == Severity::Unsafe && seen.contains("a replica of")),
        "{report}"
    );
    assert!(
        independence
            .iter()
            .any(|(s, seen)| *s == Severity::Unsafe && seen.contains("master_replid")),
        "{report}"
    );
    // The replica refuses lock writes: the access probe says so.
    assert!(
        found(&report, 1, Aspect::Capability)
            .iter()
            .any(|(_, seen)| seen.to_lowercase().contains("read only")),
        "{report}"
    );
    // The master has a replica attached: a failover risk.
    assert_eq!(
        severities(&report, 0, Aspect::Replicas),
        [Severity::Degraded],
        "{report}"
    );
    assert_eq!(found(&report, 2, Aspect::Independence), [], "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_policies_that_can_evict_lock_keys_are_unsafe() {
    let servers = [
        with_eviction("allkeys-lru"),
        with_eviction("volatile-ttl"),
        with_eviction("noeviction"),
    ];
    let no_limit = RedisServer::start().expect("server");
    let mut urls: Vec<String> = servers.iter().map(url).collect();
    urls.push(url(&no_limit));
    let locks = Redlock::new(urls).expect("config");
    let report = check(&locks, &quick()).await;
    assert_eq!(
        severities(&report, 0, Aspect::Eviction),
        [Severity::Unsafe],
        "{report}"
    );
    assert!(
        found(&report, 0, Aspect::Eviction)[0]
            .1
            .contains("allkeys-lru")
    );
    assert_eq!(
        severities(&report, 1, Aspect::Eviction),
        [Severity::Unsafe],
        "{report}"
    );
    assert_eq!(
        severities(&report, 2, Aspect::Eviction),
        [Severity::Note],
        "{report}"
    );
    assert_eq!(severities(&report, 3, Aspect::Eviction), [], "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_is_judged_by_appendonly_appendfsync_and_uptime() {
    let none = RedisServer::start().expect("server");
    let everysec = RedisServer::start_with(
        ServerOptions::new()
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg("everysec"),
    )
    .expect("server");
    let always = RedisServer::start_with(ServerOptions::new().persistent()).expect("server");
    let locks = Redlock::new([url(&none), url(&everysec), url(&always)]).expect("config");

    // Plain locks: no AOF is a note (keep a crashed node away for a ttl).
    let plain = check(&locks, &quick()).await;
    assert_eq!(
        severities(&plain, 0, Aspect::Persistence),
        [Severity::Note],
        "{plain}"
    );
    assert!(!plain.is_unsafe(), "{plain}");

    // Fenced locks: counters must survive a restart.
    let fenced = check(&locks, &quick().fenced_locks()).await;
    assert_eq!(
        severities(&fenced, 0, Aspect::Persistence),
        [Severity::Unsafe],
        "{fenced}"
    );
    assert_eq!(
        found(&fenced, 1, Aspect::Persistence),
        [(
            Severity::Degraded,
            "appendonly yes, appendfsync everysec".to_owned()
        )],
        "{fenced}"
    );
    assert_eq!(found(&fenced, 2, Aspect::Persistence), [], "{fenced}");

    // Freshly started, for less than the longest ttl: a node without
    // durable persistence may have forgotten locks it granted.
    let young = check(&locks, &quick().longest_ttl(Duration::from_secs(3600))).await;
    for i in [0, 1] {
        assert!(
            found(&young, i, Aspect::Persistence)
                .iter()
                .any(|(s, seen)| *s == Severity::Unsafe && seen.contains("up for")),
            "{young}"
        );
    }
    assert_eq!(found(&young, 2, Aspect::Persistence), [], "{young}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_without_get_is_reported_without_its_password() {
    const PASSWORD: &str = "doctor-user-secret-7c1e";
    let server = RedisServer::start_with(
        ServerOptions::new()
            .arg("--user")
            .arg("locker")
            .arg("on")
            .arg(format!(">{PASSWORD}"))
            .arg("~app:*")
            .arg("+@all")
            .arg("-get"),
    )
    .expect("server");
    let locks = Redlock::builder()
        .node(format!(
            "redis://locker:{PASSWORD}@127.0.0.1:{}",
            server.port()
        ))
        .key_prefix("app:")
        .build()
        .expect("config");
    let report = check(&locks, &quick()).await;
    let refused = found(&report, 0, Aspect::Capability);
    // Release and extend read the key with GET inside their scripts; the
    // plain acquire needs SET only, and so do a native release (DELIFEQ)
    // and extension (SET IFEQ) where the server has them.
    let native = report.nodes[0].path.as_deref().map_or(Vec::new(), |path| {
        ["release", "extend"]
            .into_iter()
            .filter(|op| !path.contains(&format!("{op} script")))
            .collect()
    });
    for operation in ["release", "extend"] {
        if native.contains(&operation) {
            assert!(
                !refused.iter().any(|(_, seen)| seen.starts_with(operation)),
                "{operation} is native here: {report}"
            );
            continue;
        }
        assert!(
            refused
                .iter()
                .any(|(s, seen)| *s == Severity::Degraded && seen.starts_with(operation)),
            "{operation}: {report}"
        );
    }
    assert!(
        !refused
            .iter()
            .any(|(_, seen)| seen.starts_with("acquire (")),
        "{report}"
    );
    assert!(!report.to_string().contains(PASSWORD));
    assert!(!format!("{report:?}").contains(PASSWORD));
    // The probe's lock expires by itself (GET was refused, so was release).
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_only_the_lock_commands_gets_notes_not_an_unreachable_node() {
    const PASSWORD: &str = "doctor-minimal-secret-5a0b";
    let mut options = ServerOptions::new()
        .arg("--user")
        .arg("locker")
        .arg("on")
        .arg(format!(">{PASSWORD}"))
        .arg("~app:*");
    // What the README's Security section grants a lock user: no INFO,
    // CONFIG, TIME or PING.
    for command in support::LOCK_COMMANDS {
        options = options.arg(command);
    }
    let server = RedisServer::start_with(options).expect("server");
    let locks = Redlock::builder()
        .node(format!(
            "redis://locker:{PASSWORD}@127.0.0.1:{}",
            server.port()
        ))
        .key_prefix("app:")
        .build()
        .expect("config");
    let report = check(&locks, &quick()).await;
    println!("{report}");
    assert_eq!(found(&report, 0, Aspect::Reachability), [], "{report}");
    let capability = found(&report, 0, Aspect::Capability);
    assert!(
        capability
            .iter()
            .any(|(s, seen)| *s == Severity::Note && seen.starts_with("INFO refused")),
        "{report}"
    );
    // Every lock operation went through.
    assert!(
        !capability
            .iter()
            .any(|(_, seen)| seen.contains("probe key")),
        "{report}"
    );
    assert!(
        found(&report, 0, Aspect::Clock)
            .iter()
            .any(|(_, seen)| seen.starts_with("could not read TIME")),
        "{report}"
    );
    assert!(!report.to_string().contains(PASSWORD));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_not_loaded_or_of_another_version_are_reported() {
    if !crate::support::functions_or_skip(
        "doctor::functions_not_loaded_or_of_another_version_are_reported",
    ) {
        return;
    }
    let missing = RedisServer::start().expect("server");
    let old = RedisServer::start().expect("server");
    let current = RedisServer::start().expect("server");
    let load = |url: String, library: String| async move {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(library)
            .query_async(&mut conn(&url).await)
            .await
            .expect("FUNCTION LOAD");
    };
    load(
        url(&old),
        format!("{}\n-- an older build\n", quorumlock::FUNCTIONS_LIBRARY),
    )
    .await;
    load(url(&current), quorumlock::FUNCTIONS_LIBRARY.to_owned()).await;

    let locks = Redlock::builder()
        .nodes([url(&missing), url(&old), url(&current)])
        .script_mode(ScriptMode::Functions)
        .build()
        .expect("config");
    let report = check(&locks, &quick()).await;
    let missing = found(&report, 0, Aspect::Capability);
    assert!(
        missing
            .iter()
            .any(|(s, seen)| *s == Severity::Degraded && seen.contains("not loaded")),
        "{report}"
    );
    assert!(
        found(&report, 1, Aspect::Capability)
            .iter()
            .any(|(s, seen)| *s == Severity::Degraded && seen.contains("another version")),
        "{report}"
    );
    assert_eq!(found(&report, 2, Aspect::Capability), [], "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_is_degraded() {
    let up = RedisServer::start().expect("server");
    let also_up = RedisServer::start().expect("server");
    let down = RedisServer::start().expect("server");
    let down_url = url(&down);
    down.kill();
    // One node of three down: the others still make a quorum.
    let locks = Redlock::new([url(&up), down_url.clone(), url(&also_up)]).expect("config");
    let report = check(&locks, &quick()).await;
    assert_eq!(
        severities(&report, 1, Aspect::Reachability),
        [Severity::Degraded],
        "{report}"
    );
    assert_eq!(report.nodes[1].server, None);
    assert!(report.fleet.is_empty(), "{report}");
    assert!(!report.is_unsafe(), "{report}");
    // One of two: no quorum answers, and no lock can be taken. Each node
    // alone is as before; the fleet is unsafe.
    let locks = Redlock::new([url(&up), down_url]).expect("config");
    let report = check(&locks, &quick()).await;
    assert_eq!(
        severities(&report, 1, Aspect::Reachability),
        [Severity::Degraded],
        "{report}"
    );
    assert!(report.is_unsafe(), "{report}");
    assert!(
        report.fleet[0].seen.contains("only 1 of 2 nodes answered"),
        "{report}"
    );
}

/// Refused credentials are said once per node, not again by every
/// operation of the access probe failing for the same reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_one_finding_per_node() {
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::start_with(ServerOptions::new().arg("--requirepass").arg("right-pw"))
                .expect("server")
        })
        .collect();
    let urls = servers
        .iter()
        .map(|s| format!("redis://:wrong-pw-3a9@127.0.0.1:{}", s.port()));
    let locks = Redlock::new(urls).expect("config");
    let report = check(&locks, &quick()).await;
    for i in 0..3 {
        let findings = &report.nodes[i].findings;
        assert_eq!(findings.len(), 1, "{report}");
        assert!(
            findings[0].seen.contains("refused the credentials"),
            "{report}"
        );
    }
    assert!(!report.to_string().contains("wrong-pw-3a9"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_is_checked_master_by_master() {
    let cluster = RedisCluster::start_with(2, 1, ServerOptions::new()).expect("cluster");
    let locks = Redlock::builder()
        .cluster(cluster.seed_urls())
        .build()
        .expect("config");
    let report = check(&locks, &quick()).await;
    println!("{report}");
    // Every slot covered, every master answered.
    assert_eq!(found(&report, 0, Aspect::Cluster), [], "{report}");
    // Each master has a replica: two failover risks, named by master.
    let replicas = found(&report, 0, Aspect::Replicas);
    assert_eq!(replicas.len(), 2, "{report}");
    assert!(
        replicas
            .iter()
            .all(|(s, seen)| *s == Severity::Degraded && seen.starts_with("master "))
    );
    assert!(!report.is_unsafe(), "{report}");
    // A member given as a plain node: named as such, never a verdict that
    // depends on which slot the probe key fell in.
    let plain = Redlock::new([cluster.seed_urls()[0].clone()]).expect("config");
    for _ in 0..3 {
        let report = check(&plain, &quick()).await;
        let cluster_rows = found(&report, 0, Aspect::Cluster);
        assert_eq!(cluster_rows.len(), 1, "{report}");
        assert!(
            cluster_rows[0].1.contains("Redis Cluster member"),
            "{report}"
        );
        assert!(!report.to_string().contains("Moved"), "{report}");
        assert!(report.is_unsafe(), "a lone member is no quorum: {report}");
    }
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// This thread's `tracing` events from INFO up, in a new buffer, until
    /// the guard is dropped.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        crate::support::scoped_subscribers();
        let logs = Self::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

// Current-thread runtime: the background check runs on this thread, under
// the subscriber set here.
#[tokio::test]
async fn the_startup_check_logs_unsafe_findings_as_warnings_once() {
    let (logs, _default) = Logs::capture();

    let evicting = with_eviction("allkeys-lru");
    let quiet = Redlock::new([url(&evicting)]).expect("config");
    let checked = Redlock::builder()
        .node(url(&evicting))
        .startup_check(quorumlock::check::StartupCheck::Log)
        .build()
        .expect("config");

    // Off by default: locking logs nothing about the nodes.
    quiet
        .lock("a", Duration::from_secs(10))
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");

    for resource in ["a", "b"] {
        checked
            .lock(resource, Duration::from_secs(10))
            .await
            .expect("lock")
            .release()
            .await
            .expect("release");
    }
    // The check is background work of its manager.
    no_hang("settle", async {
        checked.settle().await;
        quiet.settle().await;
    })
    .await;
    let text = logs.text();
    assert!(text.contains("WARN"), "{text}");
    assert!(text.contains("allkeys-lru"), "{text}");
    // Once per manager, not once per lock, and only for the manager that
    // asked for it.
    assert_eq!(text.matches("unsafe for Redlock").count(), 1, "{text}");
}

// Current-thread runtime, as above. A user of elections alone never calls
// `lock`: the campaign is that user's first use, and must run the check.
#[tokio::test]
async fn the_startup_check_runs_for_a_user_of_elections_only() {
    let (logs, _default) = Logs::capture();

    let evicting = with_eviction("allkeys-lru");
    let checked = Redlock::builder()
        .node(url(&evicting))
        .startup_check(quorumlock::check::StartupCheck::Log)
        .build()
        .expect("config");

    let election = checked.election("scheduler");
    for value in ["first", "second"] {
        let leadership = no_hang(
            "campaign",
            election.campaign(value, Duration::from_secs(10)),
        )
        .await
        .expect("campaign");
        leadership.resign().await.expect("resign");
    }
    no_hang("settle", checked.settle()).await;
    let text = logs.text();
    assert!(text.contains("allkeys-lru"), "{text}");
    // Once per manager, however many campaigns.
    assert_eq!(text.matches("unsafe for Redlock").count(), 1, "{text}");
}
