//! The token check: failed attempts leave nothing behind, stale holders
//! touch nothing of the new holder, foreign values are never modified.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, Retry};
use redis::AsyncCommands;
use support::{builder, conn, holding, no_hang, values, warm};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_attempt_removes_the_keys_it_did_get() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .retry(Retry::none())
        .build()
        .expect("config");
    // Someone else holds the key on two of three nodes.
    for i in 0..2 {
        let _: () = conn(&nodes[i].url())
            .await
            .set_ex("busy", "other", 60)
            .await
            .expect("SET");
    }
    let err = locks.try_lock("busy", TTL).await.expect_err("contended");
    // Two refusals decide the attempt, possibly before node 2 answers.
    assert!(
        matches!(
            err,
            Error::Contended {
                granted: 0 | 1,
                quorum: 2,
                ..
            }
        ),
        "{err}"
    );
    // Whether or not node 2 granted, the failed attempt left nothing there.
    // release and cleanup return at the decision; the other nodes follow
    locks.settle().await;
    assert_eq!(
        values(&nodes, "busy").await,
        [Some("other".into()), Some("other".into()), None]
    );
    // The same with lock() and its retries.
    let err = locks.lock("busy", TTL).await.expect_err("contended");
    assert!(err.is_retryable(), "{err}");
    locks.settle().await;
    assert_eq!(values(&nodes, "busy").await[2], None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_set_that_lands_later_is_cleaned_up() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .node_timeout(Duration::from_millis(300))
        .build()
        .expect("config");
    warm(&locks, TTL).await;

    nodes[1].pause().expect("pause");
    nodes[2].pause().expect("pause");
    let err = locks.try_lock("slow", TTL).await.expect_err("1 of 3");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    nodes[1].resume().expect("resume");
    nodes[2].resume().expect("resume");
    // Requests on one connection are answered in order: once a later request
    // on the library's connections is answered, the delayed SET and the
    // cleanup queued behind it have both run.
    locks
        .lock("later", TTL)
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");
    locks.settle().await;
    assert_eq!(values(&nodes, "slow").await, [None, None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_still_in_flight_is_removed_by_the_release() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .node_timeout(Duration::from_millis(300))
        .build()
        .expect("config");
    warm(&locks, TTL).await;

    // Node 2's SET is still queued when the quorum decides, and when the
    // guard is released straight away.
    nodes[2].pause().expect("pause");
    let guard = locks.try_lock("straggler", TTL).await.expect("2 of 3");
    let summary = guard.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 2, "{summary:?}");
    nodes[2].resume().expect("resume");
    // Once a later request on the same connections is answered, the SET and
    // the release queued behind it have both run.
    locks
        .lock("later", TTL)
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");
    locks.settle().await;
    assert_eq!(values(&nodes, "straggler").await, [None, None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_cannot_release_or_extend_the_new_holders_lock() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .retry(
            Retry::forever()
                .delay(Duration::from_millis(20))
                .jitter(Duration::from_millis(20)),
        )
        .build()
        .expect("config");

    let stale = locks
        .lock("s", Duration::from_millis(300))
        .await
        .expect("lock");
    stale.lost().await; // its deadline passes
    let fresh = no_hang("lock after expiry", locks.lock("s", TTL))
        .await
        .expect("lock");
    // A quorum holds it (a straggler may still be on its way to the third).
    let before = holding(&nodes, "s", fresh.token().as_str()).await;
    assert!(before >= 2, "{before}");

    let err = stale.extend(TTL).await.expect_err("past its deadline");
    assert!(matches!(err, Error::Lost { .. }), "{err}");
    // Gone from a quorum at least: its own straggling SET may have landed
    // on the node the fresh lock has not reached yet, later than the
    // others, and outlived its deadline there.
    let err = stale.release().await.expect_err("token gone");
    assert!(matches!(err, Error::Lost { held: 0 | 1, .. }), "{err}");
    let after = holding(&nodes, "s", fresh.token().as_str()).await;
    assert!(after >= before, "new holder untouched: {before} -> {after}");
    assert!(fresh.release().await.expect("release").released() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_check_the_token_on_every_node() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks.lock("t", TTL).await.expect("lock");
    // The lock silently changed hands behind the holder's back (e.g. nodes
    // restarted empty and someone else took it): the scripts must notice.
    for server in &nodes {
        let _: () = conn(&server.url())
            .await
            .pset_ex("t", "intruder", 60_000)
            .await
            .expect("SET");
    }
    let err = guard
        .extend(Duration::from_secs(600))
        .await
        .expect_err("not ours");
    assert!(matches!(err, Error::Lost { held: 0, .. }), "{err}");
    assert!(guard.validity().is_zero(), "a lost lock is lost for good");
    let err = guard.release().await.expect_err("not ours");
    assert!(matches!(err, Error::Lost { .. }), "{err}");
    for server in &nodes {
        let mut c = conn(&server.url()).await;
        let value: String = c.get("t").await.expect("GET");
        let pttl: i64 = c.pttl("t").await.expect("PTTL");
        assert_eq!(value, "intruder");
        assert!(pttl > 0 && pttl <= 60_000, "ttl untouched: {pttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_the_deadline_on_the_nodes() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks.lock("e", Duration::from_secs(2)).await.expect("lock");
    let before = guard.deadline();
    guard.extend(Duration::from_secs(60)).await.expect("extend");
    assert!(guard.deadline() > before);
    assert!(guard.validity() > Duration::from_secs(30));
    // The decision needs a quorum, not every node.
    let mut extended = 0;
    for server in &nodes {
        let pttl: i64 = conn(&server.url()).await.pttl("e").await.expect("PTTL");
        extended += usize::from(pttl > 30_000);
    }
    assert!(
        extended >= locks.quorum(),
        "PEXPIRE applied on {extended} nodes"
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_a_hash_votes_no_and_keeps_it() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let mut c0 = conn(&nodes[0].url()).await;
    let _: () = c0.hset("h", "field", "value").await.expect("HSET");

    // Single attempts that assert which nodes said what: a loaded machine
    // must not turn a healthy node into a timed-out one.
    let locks = builder(&nodes)
        .node_timeout(Duration::from_secs(1))
        .build()
        .expect("config");
    let guard = locks.try_lock("h", TTL).await.expect("2 of 3 grant");
    guard.extend(TTL).await.expect("extend skips the hash");
    assert_eq!(support::release_settled(guard).await, 2);
    let kept: Vec<(String, String)> = c0.hgetall("h").await.expect("HGETALL");
    assert_eq!(kept, [("field".to_owned(), "value".to_owned())]);

    let only_first = quorumlock::Redlock::builder()
        .node(nodes[0].url())
        .retry(Retry::none())
        .node_timeout(Duration::from_secs(1))
        .build()
        .expect("config");
    let err = only_first
        .try_lock("h", TTL)
        .await
        .expect_err("the only node votes no");
    assert!(matches!(err, Error::Contended { granted: 0, .. }), "{err}");
    let kept: Vec<(String, String)> = c0.hgetall("h").await.expect("HGETALL");
    assert_eq!(kept, [("field".to_owned(), "value".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks
        .lock("d", Duration::from_secs(60))
        .await
        .expect("lock");
    let lost = guard.lost();
    drop(guard);
    lost.await; // dropping ends the holder's trust at once

    // A 60 s key would outlast this policy many times over: only the
    // background release lets the second manager in.
    let other = builder(&nodes)
        .retry(
            Retry::default()
                .attempts(100)
                .delay(Duration::from_millis(20)),
        )
        .build()
        .expect("config");
    let guard = no_hang("lock after drop", other.lock("d", TTL))
        .await
        .expect("released by drop");
    guard.release().await.expect("release");
}
