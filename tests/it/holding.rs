//! Holding a lock safely: auto-extension through node faults, the lost-lock
//! signal, with_lock, drop release, cancellation, batched renewal.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, LossReason, NativeCommands, Retry};
use redis::AsyncCommands;
use support::{builder, conn, no_hang, values};

/// Sets its flag when dropped: shows that a future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extension_holds_through_a_kill_and_a_restart() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let rival = builder(&nodes)
        .retry(Retry::none())
        .build()
        .expect("config");
    let ttl = Duration::from_secs(1);

    let guard = locks.lock("job", ttl).await.expect("lock");
    guard.auto_extend();
    let lost = guard.lost();
    tokio::pin!(lost);

    // A 5 s job on a 1 s lock. Meanwhile node 0 dies and node 1 restarts
    // empty; a rival keeps trying to take the lock.
    let mut rival_attempts = 0;
    let job = tokio::time::sleep(Duration::from_secs(5));
    tokio::pin!(job);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut step = 0u32;
    loop {
        tokio::select! {
            _ = &mut job => break,
            reason = &mut lost => panic!("lost the lock mid-job: {reason}"),
            _ = tick.tick() => {
                step += 1;
                match step {
                    20 => nodes[0].kill(),
                    40 => nodes[1].restart().expect("restart"),
                    _ => {}
                }
                rival_attempts += 1;
                if let Ok(stolen) = rival.try_lock("job", ttl).await {
                    panic!("a rival took the lock while it was held: {stolen:?}");
                }
            }
        }
    }
    assert!(
        rival_attempts > 50,
        "the rival really tried ({rival_attempts})"
    );
    assert!(guard.validity() > Duration::ZERO);
    let summary = guard.release().await.expect("release").settled().await;
    assert!(summary.released() >= 3, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_majority_reports_loss_before_the_deadline() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks
        .lock("fragile", Duration::from_secs(1))
        .await
        .expect("lock");
    guard.auto_extend();
    for i in 0..3 {
        nodes[i].kill();
    }
    let reason = no_hang("lost()", guard.lost()).await;
    // Declared by the renewer ahead of the deadline, not by the deadline.
    assert_eq!(reason, LossReason::Unreachable);
    assert_eq!(guard.loss_reason(), Some(LossReason::Unreachable));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_drops_the_work_and_returns_lost_when_the_majority_dies() {
    let nodes = Arc::new(RedisNodes::start(5).expect("nodes"));
    let locks = builder(&nodes).build().expect("config");
    let dropped = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();

    let killer = {
        let nodes = nodes.clone();
        tokio::spawn(async move {
            started_rx.await.expect("work started");
            for i in 0..3 {
                nodes[i].kill();
            }
        })
    };
    let flag = dropped.clone();
    let result = no_hang(
        "with_lock",
        locks.with_lock("w", Duration::from_secs(1), |lease| async move {
            let _flag = DropFlag(flag);
            assert_eq!(lease.resource(), "w");
            let _ = started_tx.send(());
            std::future::pending::<()>().await;
        }),
    )
    .await;
    killer.await.expect("killer");
    match result {
        Err(Error::Lost { reason, .. }) => assert_eq!(reason, LossReason::Unreachable),
        other => panic!("expected a lost-lock error, got {other:?}"),
    }
    assert!(
        dropped.load(Ordering::SeqCst),
        "the work's future was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_returns_the_output_and_releases() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let out = locks
        // A ttl of a second: the renewer's margin (a third to a half of
        // it) outlasts the stalls of a loaded 2-core machine, where 500 ms
        // left one renewal too late in CI (Expired, Redis 8.0.6 matrix).
        .with_lock("wl", Duration::from_secs(1), |lease| async move {
            // Outlive the ttl several times over: auto-extension keeps it.
            tokio::time::sleep(Duration::from_millis(3000)).await;
            assert!(lease.validity() > Duration::ZERO);
            lease.token().as_str().len()
        })
        .await
        .expect("with_lock");
    assert_eq!(out, 32);
    // release and cleanup return at the decision; the other nodes follow
    locks.settle().await;
    assert_eq!(values(&nodes, "wl").await, [None, None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_never_extends_a_key_that_is_not_ours() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks
        .lock("r", Duration::from_millis(600))
        .await
        .expect("lock");
    guard.auto_extend();
    // Someone else's value replaces ours on every node.
    for server in &nodes {
        let _: () = conn(&server.url())
            .await
            .pset_ex("r", "foreign", 60_000)
            .await
            .expect("SET");
    }
    assert_eq!(no_hang("lost()", guard.lost()).await, LossReason::TokenGone);
    for server in &nodes {
        let mut c = conn(&server.url()).await;
        assert_eq!(c.get::<_, String>("r").await.expect("GET"), "foreign");
        let pttl: i64 = c.pttl("r").await.expect("PTTL");
        assert!(pttl > 0 && pttl <= 60_000, "untouched ttl: {pttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_frees_every_reachable_node_at_once() {
    let nodes = RedisNodes::start(5).expect("nodes");
    nodes[4].kill();
    let locks = builder(&nodes).build().expect("config");
    let guard = locks
        .lock("dropped", Duration::from_secs(60))
        .await
        .expect("lock");
    guard.auto_extend();
    drop(guard);
    locks.settle().await; // the background release has run
    assert_eq!(
        values(&nodes, "dropped").await,
        [None, None, None, None, None]
    );
    let other = builder(&nodes)
        .retry(Retry::none())
        .build()
        .expect("config");
    let guard = other
        .try_lock("dropped", Duration::from_secs(5))
        .await
        .expect("free at once");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_lock_anywhere_leaves_no_key_once_settled() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let mut acquired = 0;
    for step in 0..80u64 {
        // Cut the call short at every point from "before the first poll"
        // to "after it completed".
        let cut = Duration::from_micros(step * 75);
        if let Ok(Ok(guard)) =
            tokio::time::timeout(cut, locks.lock("cancel", Duration::from_secs(30))).await
        {
            acquired += 1;
            drop(guard);
        }
        if step % 10 == 9 {
            locks.settle().await;
            assert_eq!(
                values(&nodes, "cancel").await,
                vec![None; 5],
                "after step {step}"
            );
        }
    }
    locks.settle().await;
    assert_eq!(values(&nodes, "cancel").await, vec![None; 5]);
    assert!(acquired > 0, "some attempts completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_batched_per_node_not_per_lock() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // Scripts, whose calls and PEXPIREs the node counts on every server.
    let locks = builder(&nodes)
        .native_commands(NativeCommands::Never)
        .build()
        .expect("config");
    const LOCKS: usize = 500;
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let guard = locks
            .lock(&format!("batch:{i}"), Duration::from_secs(1))
            .await
            .expect("lock");
        guard.auto_extend();
        guards.push(guard);
    }
    let mut c0 = conn(&nodes[0].url()).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c0)
        .await
        .expect("RESETSTAT");
    // Two seconds on a one-second ttl: every lock is renewed at least twice.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = command_stats(&mut c0).await;
    let script_calls = stats.calls("evalsha") + stats.calls("eval");
    let pexpires = stats.calls("pexpire");
    assert!(
        pexpires >= 2 * LOCKS as u64,
        "every lock renewed: {pexpires} PEXPIREs"
    );
    assert!(
        script_calls * 10 <= pexpires,
        "renewals batched: {script_calls} script calls for {pexpires} renewals"
    );
    for guard in &guards {
        assert!(guard.loss_reason().is_none(), "no lock lost");
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_locks_keep_renewing_while_a_node_hangs() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // A hung node never answers within the test: its calls wait for the
    // node timeout, which is longer than the locks live. A renewer that
    // waited for it before the next chunk of a round would lose that
    // chunk's locks; one that moves on once a quorum answered keeps them.
    let node_timeout = Duration::from_secs(60);
    // Renewal rounds gather the locks whose renewal windows are open at
    // once (a sixth of the ttl wide): a long ttl puts all of them, taken
    // within a few seconds, in one round of several chunks, and leaves a
    // loaded machine (where a healthy node may take 0.9 s over a 1,000-lock
    // call) seconds for the chunks one after the other.
    let ttl = Duration::from_secs(12);
    let locks = builder(&nodes)
        .node_timeout(node_timeout)
        .build()
        .expect("config");
    // More locks than one script call renews: several chunks per round.
    const LOCKS: usize = 2_500;
    const TASKS: usize = 50;
    let takers = (0..TASKS).map(|t| {
        let locks = locks.clone();
        tokio::spawn(async move {
            let mut guards = Vec::with_capacity(LOCKS / TASKS);
            for i in (t..LOCKS).step_by(TASKS) {
                let guard = locks.lock(&format!("hang:{i}"), ttl).await.expect("lock");
                guards.push(guard);
            }
            guards
        })
    });
    let mut guards = Vec::with_capacity(LOCKS);
    for taken in futures::future::join_all(takers).await {
        guards.extend(taken.expect("taker"));
    }
    for guard in &guards {
        guard.auto_extend();
    }
    // Hung for more than a ttl: every lock renews while it hangs.
    nodes[2].pause().expect("pause");
    tokio::time::sleep(ttl + Duration::from_secs(2)).await;
    nodes[2].resume().expect("resume");
    let lost = guards.iter().filter(|g| g.loss_reason().is_some()).count();
    assert_eq!(lost, 0, "locks lost while one node of three hung");
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// A node's `INFO commandstats`.
struct CommandStats(String);

impl CommandStats {
    /// How many times `name` ran without failing (a NOSCRIPT `EVALSHA`,
    /// for one, fails).
    fn calls(&self, name: &str) -> u64 {
        let Some(line) = self
            .0
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
        else {
            return 0;
        };
        let field = |field: &str| -> u64 {
            line.split([':', ','])
                .find_map(|pair| pair.strip_prefix(field)?.strip_prefix('='))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        field("calls").saturating_sub(field("failed_calls"))
    }
}

async fn command_stats(c: &mut redis::aio::MultiplexedConnection) -> CommandStats {
    CommandStats(
        redis::cmd("INFO")
            .arg("commandstats")
            .query_async(c)
            .await
            .expect("INFO"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extend_twice_renews_the_lock_once_per_round() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // Scripts, so that each renewal call shows in the node's counters as
    // one call with one PEXPIRE per lock, on every server.
    let locks = builder(&nodes)
        .native_commands(NativeCommands::Never)
        .build()
        .expect("config");
    let guard = locks
        .lock("twice", Duration::from_millis(600))
        .await
        .expect("lock");
    let mut c0 = conn(&nodes[0].url()).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut c0)
        .await
        .expect("RESETSTAT");
    for _ in 0..3 {
        guard.auto_extend();
    }
    // Three renewals (each moves the deadline).
    no_hang("renewals", async {
        for _ in 0..3 {
            let before = guard.deadline();
            while guard.deadline() == before {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    })
    .await;
    let stats = command_stats(&mut c0).await;
    let script_calls = stats.calls("evalsha") + stats.calls("eval");
    let pexpires = stats.calls("pexpire");
    assert!(script_calls >= 1, "renewed on node 0");
    // Registered once, the lock is in each renewal call once.
    assert_eq!(
        pexpires, script_calls,
        "{pexpires} PEXPIREs in {script_calls} calls"
    );
    guard.release().await.expect("release");
}
