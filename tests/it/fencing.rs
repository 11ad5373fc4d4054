//! Fencing tokens: strictly increasing across grants, through node kills
//! and restarts (with persistence) and under contention; a fenced attempt
//! whose write-back cannot reach a quorum fails and leaves no lock behind.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::{FaultProxy, Faults, RedisNodes, ServerOptions};
use quorumlock::{Error, Redlock, Retry};
use redis::AsyncCommands;
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

/// Nodes whose lock user may run scripts an admin loaded (EVALSHA) but not
/// load any (no EVAL, no SCRIPT LOAD); the admin loads `scripts[i]` on node
/// `i`. Returns the nodes and a manager for the lock user.
async fn fencer_nodes(scripts: [&[&str]; 3]) -> (RedisNodes, Redlock) {
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
        .arg("+hset")
        .arg("+hmget")
        .arg("+pexpire")
        .arg("+evalsha");
    let nodes = RedisNodes::start_with(3, options).expect("nodes");
    for (server, scripts) in nodes.iter().zip(scripts) {
        let mut admin = conn(&server.url()).await;
        for script in scripts {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(*script)
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
    (nodes, locks)
}

const ACQUIRE: &str = include_str!("../../src/lock/acquire_fenced.lua");
const WRITE_BACK: &str = include_str!("../../src/lock/fence_writeback.lua");
const RELEASE: &str = include_str!("../../src/lock/release.lua");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_without_quorum_fails_and_leaves_no_lock() {
    // Phase 1 works and the write-back fails on every node.
    let phase_one: &[&str] = &[ACQUIRE, RELEASE];
    let (nodes, locks) = fencer_nodes([phase_one; 3]).await;

    let err = locks
        .try_lock_fenced("audit", TTL)
        .await
        .expect_err("write-back must fail");
    assert!(
        matches!(
            err,
            Error::FenceUnconfirmed {
                confirmed: 0,
                quorum: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_retryable());
    assert!(!err.node_failures().is_empty(), "{err}");
    // Says why: the user may not load the write-back script.
    support::assert_acl_refusals(&err);
    // release and cleanup return at the decision; the other nodes follow
    locks.settle().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_nodes_that_granted_confirm_the_write_back() {
    // Node 2 is held by someone else, so it refuses phase 1; nodes 0 and 1
    // grant. The write-back then fails on node 1 (its script is missing)
    // and would succeed on node 2. Node 2's confirmation must not count: a
    // node without our key may already have given a concurrent acquirer a
    // smaller counter (the model in tests/model finds how fences repeat
    // then). One confirmation from a granting node is not a quorum.
    let all: &[&str] = &[ACQUIRE, WRITE_BACK, RELEASE];
    let phase_one: &[&str] = &[ACQUIRE, RELEASE];
    let (nodes, locks) = fencer_nodes([all, phase_one, all]).await;
    let _: () = conn(&nodes[2].url())
        .await
        .set("audit", "someone-else")
        .await
        .expect("SET");

    let err = locks
        .try_lock_fenced("audit", TTL)
        .await
        .expect_err("one granting node confirmed: not a quorum");
    // Node 0's confirmation may or may not be in: once node 1 has failed,
    // a quorum of granting nodes is out of reach and the round is decided
    // without waiting for node 0. Either way it is short of the quorum,
    // where counting node 2 would have made it 2 of 2 and granted.
    assert!(
        matches!(
            err,
            Error::FenceUnconfirmed {
                confirmed: 0 | 1,
                quorum: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.node_failures().len(), 1, "node 1, not node 2: {err}");
    locks.settle().await;
    assert_eq!(
        values(&nodes, "audit").await,
        [None, None, Some("someone-else".to_owned())],
        "our keys are gone, the other holder's is untouched"
    );

    // With the script on node 1 too, the granting nodes confirm: granted.
    let mut admin = conn(&nodes[1].url()).await;
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(WRITE_BACK)
        .query_async(&mut admin)
        .await
        .expect("SCRIPT LOAD");
    let guard = locks.try_lock_fenced("audit", TTL).await.expect("granted");
    guard.release().await.expect("release");
}

/// A call's retries reuse the value its first granted attempt took on a
/// node rather than raise the counter again: with another holder on two
/// of three nodes, five attempts each granted on node 0 raise its counter
/// once (it was five before the counter's mark). A new call raises it
/// again, and its write-back deletes the mark on the granting nodes, so
/// nobody's retry can reuse a value from before a grant. The two other
/// nodes answer through a slow link, so that node 0 answers every attempt
/// before it is decided (a request still waiting when its attempt is
/// decided is never sent), and the connections are made first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_retries_raise_the_counter_once_and_a_write_back_ends_that() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let mut urls = vec![nodes[0].url()];
    let mut proxies = Vec::new();
    for server in nodes.iter().skip(1) {
        let slow = FaultProxy::start(server.port()).await.expect("proxy");
        slow.set(Faults::latency(
            Duration::from_millis(200),
            Duration::ZERO,
            Duration::ZERO,
        ));
        urls.push(slow.url());
        proxies.push(slow);
    }
    let attempts = 5;
    let locks = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(10))
        .retry(
            Retry::default()
                .attempts(attempts)
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(5)),
        )
        .build()
        .expect("config");
    let warm = locks.try_lock("warm", TTL).await.expect("warm-up");
    warm.release().await.expect("release");
    locks.settle().await;
    for server in nodes.iter().skip(1) {
        let _: () = conn(&server.url())
            .await
            .set("ledger", "someone-else")
            .await
            .expect("SET");
    }
    let counter = |i: usize| {
        let url = nodes[i].url();
        async move {
            let value: Option<u64> = conn(&url).await.get("ledger:fence").await.expect("GET");
            value.unwrap_or_default()
        }
    };
    let outcome = no_hang("lock_fenced", locks.lock_fenced("ledger", TTL)).await;
    assert!(
        matches!(outcome, Err(Error::Contended { granted: 1, .. })),
        "{outcome:?}"
    );
    no_hang("settle", locks.settle()).await;
    assert_eq!(
        counter(0).await,
        1,
        "node 0 granted {attempts} attempts of one call"
    );

    // Another call raises it again (node 0 holds the first call's mark);
    // granted, its fence is written back to a quorum, whose marks are gone
    // (a node whose grant came after the decision keeps this call's mark,
    // of no use once the call is over: it expires with the ttl).
    for server in nodes.iter().skip(1) {
        let _: () = conn(&server.url()).await.del("ledger").await.expect("DEL");
    }
    let guard = no_hang("lock_fenced", locks.lock_fenced("ledger", TTL))
        .await
        .expect("granted");
    assert_eq!(guard.fence(), Some(2), "node 0's raise is in the decision");
    no_hang("settle", locks.settle()).await;
    let mut unmarked = 0;
    for server in nodes.iter() {
        let marked: bool = conn(&server.url())
            .await
            .exists("ledger:fence:mark")
            .await
            .expect("EXISTS");
        unmarked += usize::from(!marked);
    }
    assert!(
        unmarked >= locks.quorum(),
        "{unmarked} nodes without a mark"
    );
    assert_eq!(counter(0).await, 2, "a new call raises the counter again");
    guard.release().await.expect("release");
}
