//! A node that stops answering is not asked: once its last requests timed
//! out, calls fail for it at once (`NodeError::NotAsked`) and nothing more
//! is written to its connection but probes, until a probe answers; then it
//! is asked again, and a held lock is put back on it by its renewal.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{FaultProxy, Faults, RedisNodes};
use quorumlock::{NodeError, Redlock, Retry};
use support::{Paused, conn, no_hang, warm};

/// Short, so that the silent node's requests time out soon; long enough
/// that a loaded machine's stalls rarely time out a healthy node (and when
/// one does, it is probed and asked again: the loops below try again).
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(30);
/// The node that stops answering.
const SILENT: usize = 2;

fn manager(urls: impl IntoIterator<Item = String>) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .retry(Retry::none())
        .build()
        .expect("config")
}

fn not_asked(failures: &[quorumlock::NodeFailure]) -> bool {
    failures
        .iter()
        .any(|f| matches!(f.error, NodeError::NotAsked { .. }))
}

/// A field of `INFO commandstats` for `command` (`calls`), 0 if absent.
async fn calls(url: &str, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn(url).await)
        .await
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_answering_is_not_asked_until_a_probe_answers() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    let locks = manager(proxies.iter().map(FaultProxy::url));
    warm(&locks, TTL).await;
    let silent = nodes[SILENT].url();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn(&silent).await)
        .await
        .expect("RESETSTAT");
    // Nothing reaches the node, nothing comes back: a partition.
    proxies[SILENT].set(Faults::blackhole());

    // Lock attempts until calls fail at once for the silent node: its
    // requests timed out twice in a row. Each attempt before that sent it
    // one SET at most.
    let mut sent = 0u64;
    no_hang("the silent node not asked", async {
        loop {
            sent += 1;
            if let Ok(guard) = locks.lock(&format!("before:{sent}"), TTL).await
                && not_asked(guard.release().await.expect("release").failures())
            {
                break;
            }
            // Pace: the node timeout must pass for requests to time out.
            tokio::time::sleep(NODE_TIMEOUT / 4).await;
        }
    })
    .await;
    // Now every call does without it, at once: nothing is followed there.
    for i in 0..30 {
        let guard = no_hang("lock", async {
            loop {
                // (A healthy node stalled by a loaded machine may fail one.)
                if let Ok(guard) = locks.lock(&format!("after:{i}"), TTL).await {
                    break guard;
                }
            }
        })
        .await;
        assert_eq!(guard.confirmed(), 2);
        // (The round may decide on the other two before it has even
        // started the silent node's request: that one is then started in
        // the background, where it fails at once too.)
        let summary = guard.release().await.expect("release").settled().await;
        assert!(not_asked(summary.failures()), "{summary}");
    }

    // The requests sent before it was not asked have all timed out: none
    // is followed any more, so only a probe can find it answering again.
    no_hang("the stragglers given up", locks.settle()).await;
    // The partition heals: the bytes that waited flow, then a probe's PING
    // (the same connection, so it runs after all of them) answers.
    proxies[SILENT].heal();
    no_hang("a probe to reach the node", async {
        while calls(&silent, "ping").await == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let set = calls(&silent, "set").await;
    assert!(
        set <= sent,
        "{set} SETs reached the node, but only {sent} acquires were sent before it was not asked \
         (30 more after that must not be)"
    );
    // Asked again: a lock is released on every node.
    no_hang("the node asked again", async {
        loop {
            if let Ok(guard) = locks.lock("again", TTL).await
                && guard
                    .release()
                    .await
                    .expect("release")
                    .settled()
                    .await
                    .released()
                    == 3
            {
                break;
            }
            tokio::time::sleep(NODE_TIMEOUT / 4).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_put_back_on_a_node_once_it_answers_again() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(nodes.urls());
    let ttl = Duration::from_secs(3);
    warm(&locks, ttl).await;
    let guard = locks.lock("held", ttl).await.expect("lock");
    guard.auto_extend();
    let token = guard.token().as_str().to_owned();
    {
        let _paused = Paused::new(&nodes[SILENT]);
        // Until the node is not asked (an inspection fails there at once)
        // and past the ttl, so that its copy of the key has expired when it
        // wakes: Redis expires keys by the wall clock.
        let stopped = tokio::time::Instant::now();
        no_hang("the paused node not asked", async {
            loop {
                let inspection = locks.inspect("held").await.expect("inspect");
                let silent = &inspection.nodes()[SILENT];
                let not_asked = matches!(
                    silent.state(),
                    quorumlock::NodeState::Failed(NodeError::NotAsked { .. })
                );
                if not_asked && stopped.elapsed() > ttl {
                    break;
                }
                tokio::time::sleep(NODE_TIMEOUT).await;
            }
        })
        .await;
        assert_eq!(guard.loss_reason(), None, "two of three keep renewing it");
    }
    // Awake: a probe answers, the node is asked again, and the next renewal
    // puts the lock back there (its copy had expired).
    no_hang("the lock back on the node", async {
        loop {
            let value: Option<String> = redis::cmd("GET")
                .arg("held")
                .query_async(&mut conn(&nodes[SILENT].url()).await)
                .await
                .expect("GET");
            if value.as_deref() == Some(token.as_str()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(guard.loss_reason(), None);
    // And asked again.
    no_hang("the node asked again", async {
        loop {
            let inspection = locks.inspect("held").await.expect("inspect");
            let silent = inspection.nodes()[SILENT].state();
            if matches!(silent, quorumlock::NodeState::Answered(_)) {
                break;
            }
            tokio::time::sleep(NODE_TIMEOUT).await;
        }
    })
    .await;
    guard.release().await.expect("release");
}
