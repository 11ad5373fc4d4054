//! Negative controls and single scenarios: restarts without persistence,
//! eviction, fast clocks, a paused client, replies held back.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Straight back up, empty: the known way to break Redlock.
    Immediate,
    /// Kept down until the first holder's ttl has passed.
    Delayed,
    /// Straight back up, but with every write persisted.
    Persistent,
}

/// B's side of a two-client scenario: single attempts on `control` until
/// one is granted (a failed attempt's invocation is not B's: it is not
/// recorded). Returns the guard and its section, recorded as client 1's.
async fn until_granted(
    recorder: &Recorder,
    b_locks: &Redlock,
    ttl: Duration,
) -> (LockGuard, Section) {
    support::no_hang("B locks, sooner or later", async {
        loop {
            let attempt = recorder.try_lock(1, "control");
            if let Ok(b) = b_locks.try_lock("control", ttl).await {
                let section = attempt.granted(&b.lease(), ttl);
                break (b, section);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A holds the lock on all 3 nodes; 2 of them restart; B then tries. Returns
/// what the checker says about the two grants.
async fn restart_scenario(mode: Restart) -> HistoryCheck {
    check(&restart_history(mode).await)
}

/// The history of [`restart_scenario`] (the report tests draw it).
pub(crate) async fn restart_history(mode: Restart) -> History {
    let options = match mode {
        Restart::Persistent => ServerOptions::new().persistent(),
        Restart::Immediate | Restart::Delayed => ServerOptions::new(),
    };
    let nodes = RedisNodes::start_with(3, options).expect("nodes");
    let ttl = Duration::from_secs(2);
    let retry = Retry::forever()
        .delay(Duration::from_millis(20))
        .wait(Duration::from_secs(10));
    let client = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .retry(retry)
            // Generous: a loaded machine must not turn a grant into a timeout.
            .node_timeout(Duration::from_secs(2))
            .build()
            .expect("config")
    };
    let (a_locks, b_locks) = (client(), client());
    // Warm A's connections so that its grant reaches all three nodes.
    support::warm(&a_locks, ttl).await;
    let recorder = Recorder::new();

    let attempt = recorder.lock(0, "control");
    let a = a_locks.lock("control", ttl).await.expect("A locks");
    let a_section = attempt.granted(&a.lease(), ttl);
    // A holds a quorum (2 of 3) at least; with any two nodes restarted
    // empty, B can then assemble a quorum of its own while A still believes
    // it holds the lock.
    assert!(support::holding(&nodes, "control", a.token().as_str()).await >= 2);
    for i in 0..2 {
        nodes[i].kill();
        if mode == Restart::Delayed {
            // Down for longer than any lock it held may live.
            tokio::time::sleep(ttl).await;
        }
        nodes[i].restart().expect("restart");
    }
    // B retries with single attempts, so its invocation time is the start of
    // the attempt that succeeded.
    let (b, b_section) = until_granted(&recorder, &b_locks, ttl).await;
    a_section.end();
    b_section.end();
    let _ = a.release().await;
    let _ = b.release().await;
    recorder.take()
}

pub(super) fn overlapped(verdict: &HistoryCheck) -> bool {
    verdict
        .violations
        .iter()
        .any(|v| matches!(v, Violation::Overlap { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_empty_restart_is_flagged_every_time() {
    for run in 0..5 {
        let verdict = restart_scenario(Restart::Immediate).await;
        assert!(
            overlapped(&verdict),
            "run {run}: the checker missed the known violation: {verdict}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_or_persistent_restart_is_not_flagged() {
    for mode in [Restart::Delayed, Restart::Persistent] {
        let verdict = restart_scenario(mode).await;
        assert!(verdict.is_ok(), "{mode:?}: {verdict}");
    }
}

// ----------------------------------------------------- eviction

/// A holds the lock on 3 nodes that evict (or refuse writes) when full; 2
/// of them are filled until A's key is gone (or writes are refused); B then
/// tries once. Returns the node check's report from before the first lock,
/// the checker's verdict on the two clients, and B's error if it failed.
pub(super) async fn eviction_scenario(
    policy: &str,
) -> (quorumlock::check::Report, HistoryCheck, Option<Error>) {
    let nodes = RedisNodes::start_with(
        3,
        ServerOptions::new()
            .arg("--maxmemory")
            .arg("4mb")
            .arg("--maxmemory-policy")
            .arg(policy),
    )
    .expect("nodes");
    let ttl = Duration::from_secs(10);
    let client = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .retry(Retry::none())
            .node_timeout(Duration::from_secs(2))
            .build()
            .expect("config")
    };
    let (a_locks, b_locks) = (client(), client());
    // The node check, before any lock.
    let doctor = a_locks
        .check_with(
            &quorumlock::check::CheckOptions::new()
                .clock_interval(Duration::from_millis(100))
                .latency_samples(3)
                .skip_access_probe(),
        )
        .await;
    support::warm(&a_locks, ttl).await;
    let recorder = Recorder::new();
    let attempt = recorder.lock(0, "control");
    let a = a_locks.lock("control", ttl).await.expect("A locks");
    let a_section = attempt.granted(&a.lease(), ttl);
    // `lock` returns at the quorum's decision; the third node's answer is
    // followed in the background.
    a_locks.settle().await;
    assert_eq!(
        support::holding(&nodes, "control", a.token().as_str()).await,
        3
    );

    // Memory pressure on nodes 0 and 1: values of shrinking size, each
    // until the node refuses it (a refused large value frees its buffer,
    // leaving room for smaller ones), or until the lock key is evicted.
    for server in nodes.iter().take(2) {
        let mut c = support::conn(&server.url()).await;
        support::no_hang("memory pressure", async {
            let mut n = 0;
            for size in [64 * 1024, 4096, 256, 16, 1] {
                let filler = "x".repeat(size);
                loop {
                    n += 1;
                    let set: redis::RedisResult<()> = redis::cmd("SET")
                        .arg(format!("f{n}"))
                        .arg(&filler)
                        .query_async(&mut c)
                        .await;
                    if let Err(e) = set {
                        assert!(e.to_string().contains("OOM"), "{e}");
                        if size == 1 {
                            // Full. Keep it full while B tries: the server
                            // shrinks idle client buffers in the background,
                            // which would make room for a small write again.
                            let _: () = redis::cmd("CONFIG")
                                .arg("SET")
                                .arg("maxmemory")
                                .arg("1mb")
                                .query_async(&mut c)
                                .await
                                .expect("CONFIG SET");
                        }
                        break;
                    }
                    let exists: bool = redis::cmd("EXISTS")
                        .arg("control")
                        .query_async(&mut c)
                        .await
                        .expect("EXISTS");
                    if !exists {
                        return;
                    }
                }
            }
        })
        .await;
    }

    let attempt = recorder.try_lock(1, "control");
    let error = match b_locks.try_lock("control", ttl).await {
        Ok(b) => {
            let b_section = attempt.granted(&b.lease(), ttl);
            a_section.end();
            b_section.end();
            let _ = b.release().await;
            None
        }
        // B's refusal is judged below, not by the checker.
        Err(e) => {
            a_section.end();
            Some(e)
        }
    };
    let _ = a.release().await;
    (doctor, check(&recorder.take()), error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_lock_keys_breaks_the_lock_and_the_doctor_said_so() {
    let (doctor, verdict, error) = eviction_scenario("allkeys-lru").await;
    // Flagged before the first lock…
    assert!(doctor.is_unsafe(), "{doctor}");
    assert!(
        doctor.nodes.iter().all(|n| n
            .findings
            .iter()
            .any(|f| f.aspect == quorumlock::check::Aspect::Eviction
                && f.severity == quorumlock::check::Severity::Unsafe)),
        "{doctor}"
    );
    // …and the checker sees what it costs: B got the lock A still holds.
    assert!(error.is_none(), "B was refused: {error:?}");
    assert!(
        overlapped(&verdict),
        "the checker missed the eviction: {verdict}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_keeps_the_lock_and_refuses_writes_with_typed_errors() {
    let (doctor, verdict, error) = eviction_scenario("noeviction").await;
    assert!(!doctor.is_unsafe(), "{doctor}");
    assert!(verdict.is_ok(), "{verdict}");
    let error = error.expect("B cannot lock what A holds");
    // The full nodes answer B with an error of their own, not a grant (the
    // attempt may decide before both of them answered).
    assert!(
        error
            .node_failures()
            .iter()
            .any(|f| f.error.to_string().contains("OOM")),
        "{error:?}"
    );
    assert!(error.is_retryable(), "{error:?}");
}

// ------------------------------------------------------------------ clock

/// Two of three nodes run their clocks `rate` times as fast as the
/// client's (a fault in the proxy in front of them: plain locks' expiries
/// shrink, `TIME` runs fast). A holds the lock; B tries until it gets it.
/// Returns the node check's report from before the first lock, and the
/// checker's verdict on the two grants.
pub(super) async fn clock_scenario(rate: f64) -> (quorumlock::check::Report, HistoryCheck) {
    let nodes = RedisNodes::start(3).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    for proxy in &proxies[..2] {
        proxy.set_clock_rate(rate);
    }
    let ttl = Duration::from_secs(2);
    let client = || {
        Redlock::builder()
            .nodes(proxies.iter().map(FaultProxy::url))
            .retry(Retry::none())
            .node_timeout(Duration::from_secs(2))
            .build()
            .expect("config")
    };
    let (a_locks, b_locks) = (client(), client());
    let doctor = a_locks
        .check_with(
            &quorumlock::check::CheckOptions::new()
                .clock_interval(Duration::from_millis(500))
                .latency_samples(3)
                .skip_access_probe(),
        )
        .await;
    support::warm(&a_locks, ttl).await;
    support::warm(&b_locks, ttl).await;
    let recorder = Recorder::new();
    let attempt = recorder.lock(0, "control");
    let a = a_locks.lock("control", ttl).await.expect("A locks");
    let a_section = attempt.granted(&a.lease(), ttl);
    let (b, b_section) = until_granted(&recorder, &b_locks, ttl).await;
    a_section.end();
    b_section.end();
    let _ = a.release().await;
    let _ = b.release().await;
    (doctor, check(&recorder.take()))
}

fn clock_findings(
    doctor: &quorumlock::check::Report,
    i: usize,
) -> Vec<quorumlock::check::Severity> {
    doctor.nodes[i]
        .findings
        .iter()
        .filter(|f| f.aspect == quorumlock::check::Aspect::Clock)
        .map(|f| f.severity)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_fast_beyond_the_drift_allowance_break_the_lock_and_the_doctor_said_so() {
    let (doctor, verdict) = clock_scenario(1.5).await;
    for i in 0..2 {
        assert_eq!(
            clock_findings(&doctor, i),
            [quorumlock::check::Severity::Unsafe],
            "{doctor}"
        );
    }
    assert!(
        !clock_findings(&doctor, 2).contains(&quorumlock::check::Severity::Unsafe),
        "{doctor}"
    );
    assert!(
        overlapped(&verdict),
        "the checker missed the fast clocks: {verdict}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_fast_within_the_drift_allowance_are_safe() {
    // 0.5 % fast, against the default 1 % allowance.
    let (doctor, verdict) = clock_scenario(1.005).await;
    for i in 0..3 {
        assert!(
            !clock_findings(&doctor, i).contains(&quorumlock::check::Severity::Unsafe),
            "{doctor}"
        );
    }
    assert!(verdict.is_ok(), "{verdict}");
}

// ----------------------------------------------------- single scenarios

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_paused_past_its_deadline_learns_it_and_is_fenced_off() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let retry = Retry::forever()
        .delay(Duration::from_millis(10))
        .wait(Duration::from_secs(10));
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .retry(retry)
        .build()
        .expect("config");
    // A toy store that rejects writes fenced lower than the highest it saw.
    let store = Mutex::new((0u64, String::new()));
    let write = |fence: u64, value: &str| {
        let mut s = store.lock().expect("store");
        if fence < s.0 {
            return false;
        }
        *s = (fence, value.to_owned());
        true
    };

    let stale = locks
        .lock_fenced("report", Duration::from_millis(400))
        .await
        .expect("lock");
    // The "pause": the holder does nothing until well past its deadline.
    assert_eq!(
        stale.lost().await,
        LossReason::Expired,
        "lost() reports the pause"
    );
    let fresh = locks
        .lock_fenced("report", TTL)
        .await
        .expect("lock after expiry");
    assert!(fresh.fence() > stale.fence());
    assert!(write(fresh.fence().expect("fence"), "fresh"));
    // The stale holder wakes up and writes: the store turns it away.
    assert!(!write(stale.fence().expect("fence"), "stale"));
    assert_eq!(store.lock().expect("store").1, "fresh");
    fresh.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_held_back_past_the_ttl_refuse_the_grant_and_clean_up() {
    let cluster = Cluster::start(ServerOptions::new()).await;
    let locks = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry(Retry::none())
        .build()
        .expect("config");
    support::warm(&locks, TTL).await;
    for proxy in &cluster.proxies[..3] {
        proxy.set(Faults::hold_replies(TTL + Duration::from_millis(200)));
    }
    let err = locks
        .try_lock("late", TTL)
        .await
        .expect_err("replies come too late");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    // The SETs landed; the cleanup requests behind them land too. Settled,
    // and with the proxies healed, no node holds the key — well before the
    // ttl could have removed it.
    locks.settle().await;
    for proxy in &cluster.proxies {
        proxy.heal();
    }
    assert_eq!(
        support::values(&cluster.nodes, "late").await,
        vec![None; NODES]
    );
}
