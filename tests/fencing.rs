//! Fencing tokens: strictly increasing across grants, through node kills
//! and restarts (with persistence) and under contention; a fenced attempt
//! whose write-back cannot reach a quorum fails and leaves no lock behind.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::{RedisNodes, ServerOptions};
use quorumlock::{Error, Redlock, Retry};
use support::{builder, conn, no_hang, values};

const TTL: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_strictly_increase_across_managers_and_node_restarts() {
    let nodes = RedisNodes::start_with(5, ServerOptions::new().persistent()).expect("nodes");
    let managers: Vec<Redlock> = (0..3)
        .map(|_| {
            builder(&nodes)
                .retry(
                    Retry::forever()
                        .delay(Duration::from_millis(10))
                        .wait(Duration::from_secs(30)),
                )
                .build()
                .expect("config")
        })
        .collect();
    let unfenced = managers[0].lock("plain", TTL).await.expect("lock");
    assert_eq!(unfenced.fence(), None);
    unfenced.release().await.expect("release");

    let mut last = 0;
    for i in 0..1000usize {
        // A minority goes down and comes back (with its data) during the run.
        match i {
            200 => nodes[0].kill(),
            350 => nodes[0].restart().expect("restart"),
            500 => nodes[1].kill(),
            520 => nodes[2].kill(),
            700 => nodes[1].restart().expect("restart"),
            750 => nodes[2].restart().expect("restart"),
            _ => {}
        }
        let locks = &managers[i % managers.len()];
        let guard = no_hang("lock_fenced", locks.lock_fenced("ledger", TTL))
            .await
            .unwrap_or_else(|e| panic!("acquisition {i}: {e}"));
        let fence = guard.fence().expect("a fenced lock has a fence");
        assert!(fence > last, "acquisition {i}: fence {fence} after {last}");
        last = fence;
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_increase_in_grant_order_under_contention() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .retry(
            Retry::forever()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(20)),
        )
        .build()
        .expect("config");
    let granted = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (locks, granted) = (locks.clone(), granted.clone());
            tokio::spawn(async move {
                for _ in 0..8 {
                    let guard = locks.lock_fenced("contended", TTL).await.expect("lock");
                    // Inside the critical section: this push happens in grant order.
                    granted
                        .lock()
                        .expect("mutex")
                        .push(guard.fence().expect("fence"));
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        no_hang("contender", task).await.expect("task");
    }
    let granted = granted.lock().expect("mutex").clone();
    assert_eq!(granted.len(), 128);
    assert!(
        granted.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing in grant order: {granted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_without_quorum_fails_and_leaves_no_lock() {
    // A user who may run scripts an admin loaded (EVALSHA) but not load any
    // (no EVAL, no SCRIPT LOAD). The admin loads the acquire and release
    // scripts only, so phase 1 works and the write-back fails on every node.
    let options = ServerOptions::new()
        .arg("--user")
        .arg("fencer")
        .arg("on")
        .arg(">fencer-pw")
        .arg("~*")
        .arg("+set")
        .arg("+get")
        .arg("+del")
        .arg("+incr")
        .arg("+pexpire")
        .arg("+evalsha");
    let nodes = RedisNodes::start_with(3, options).expect("nodes");
    for server in &nodes {
        let mut admin = conn(&server.url()).await;
        for script in [
            include_str!("../src/scripts/acquire_fenced.lua"),
            include_str!("../src/scripts/release.lua"),
        ] {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script)
                .query_async(&mut admin)
                .await
                .expect("SCRIPT LOAD");
        }
    }
    let locks = Redlock::builder()
        .nodes(
            nodes
                .iter()
                .map(|s| format!("redis://fencer:fencer-pw@127.0.0.1:{}", s.port())),
        )
        .retry(Retry::none())
        .build()
        .expect("config");

    let err = locks
        .try_lock_fenced("audit", TTL)
        .await
        .expect_err("write-back must fail");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    // Two failures already make a write-back quorum impossible.
    assert!(err.node_failures().len() >= 2, "{err}");
    assert!(err.to_string().contains("script|load"), "says why: {err}");
    assert_eq!(
        values(&nodes, "audit").await,
        [None, None, None],
        "no lock left behind"
    );
    // Phase 1 did run on a quorum: counters moved, which is harmless (fences
    // may skip numbers, never repeat them).
    let moved = values(&nodes, "audit:fence")
        .await
        .iter()
        .filter(|v| v.as_deref() == Some("1"))
        .count();
    assert!(moved >= 2, "phase 1 granted on a quorum: {moved}");
}
