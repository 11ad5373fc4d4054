//! A held lock keeps its fault tolerance: it lands on every healthy node
//! (also from a fresh manager), survives the death of any minority, is
//! restored by extensions where a node lost it, and lives through rolling
//! restarts of every node while a contender tries to take it.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use quorumlock::testkit::{RedisNodes, ServerOptions};
use quorumlock::{Error, LockGuard, LossReason, Redlock, Retry};
use redis::AsyncCommands;
use support::{builder, conn, holding, no_hang, values};

/// A fenced lock's counter key beside its lock key, as the README documents it.
const FENCE_SUFFIX: &str = ":fence";

/// Long enough that a healthy node answers within it on a loaded 2-core
/// machine: these tests are about requests being sent, not about speed.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// A fresh manager over `nodes`: no connection is open yet.
fn fresh(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config")
}

/// On how many nodes `guard`'s token is confirmed once every request of
/// `locks` still in flight after its decision has answered or timed out
/// (each within the node timeout): what nothing more will change.
async fn settled_confirmations(locks: &Redlock, guard: &LockGuard) -> usize {
    no_hang("settle", locks.settle()).await;
    guard.confirmed()
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fenced,
    Many,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_manager_puts_every_grant_on_every_healthy_node() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let ttl = Duration::from_secs(30);
    for kind in [Kind::Plain, Kind::Fenced, Kind::Many] {
        for i in 0..12 {
            let locks = fresh(&nodes);
            let (a, b) = (format!("spread:{i}:a"), format!("spread:{i}:b"));
            let guard = match kind {
                Kind::Plain => locks.lock(&a, ttl).await,
                Kind::Fenced => locks.lock_fenced(&a, ttl).await,
                Kind::Many => locks.lock_many(&[&a, &b], ttl).await,
            }
            .expect("lock");
            // Held idle: no extension, no release drives anything.
            let confirmed = settled_confirmations(&locks, &guard).await;
            let token = guard.token().as_str();
            assert_eq!(confirmed, 5, "{kind:?} #{i}: confirmed on {confirmed} of 5");
            assert_eq!(holding(&nodes, &a, token).await, 5, "{kind:?} #{i}");
            if let Kind::Many = kind {
                assert_eq!(holding(&nodes, &b, token).await, 5, "{kind:?} #{i}");
            }
            let summary = guard.release().await.expect("release").settled().await;
            assert_eq!(summary.released(), 5, "{kind:?} #{i}: {summary:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_succeeds_after_any_two_of_five_nodes_die() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let ttl = Duration::from_secs(30);
    for a in 0..5 {
        for b in a + 1..5 {
            let locks = fresh(&nodes);
            let resource = format!("pair:{a}{b}");
            let guard = locks.lock(&resource, ttl).await.expect("lock");
            assert_eq!(
                settled_confirmations(&locks, &guard).await,
                5,
                "pair {a}{b}"
            );
            nodes[a].kill();
            nodes[b].kill();
            let result = guard.extend(ttl).await;
            assert!(result.is_ok(), "pair {a}{b}: extend failed: {result:?}");
            // The survivors; the dead nodes' failures may come after the
            // decision.
            assert_eq!(settled_confirmations(&locks, &guard).await, 3);
            assert!(guard.lost().now_or_never().is_none(), "pair {a}{b}");
            assert!(guard.loss_reason().is_none(), "pair {a}{b}");
            let summary = guard.release().await.expect("release").settled().await;
            assert_eq!(summary.released(), 3, "pair {a}{b}: {summary:?}");
            assert_eq!(free_nodes(&nodes, &resource).await, 5);
            nodes[a].restart().expect("restart");
            nodes[b].restart().expect("restart");
        }
    }
}

/// How many nodes have no key for `resource` (down nodes count as free).
async fn free_nodes(nodes: &RedisNodes, resource: &str) -> usize {
    values(nodes, resource)
        .await
        .iter()
        .filter(|v| v.is_none())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extension_outlives_a_minority_death() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = fresh(&nodes);
    let ttl = Duration::from_secs(1);
    let guard = locks.lock("minority", ttl).await.expect("lock");
    guard.auto_extend();
    assert_eq!(settled_confirmations(&locks, &guard).await, 5);
    nodes[1].kill();
    nodes[3].kill();
    let lost = guard.lost();
    // Three ttls: every one of them renewed by the three survivors.
    let held = tokio::time::timeout(3 * ttl, lost).await;
    assert!(held.is_err(), "lost the lock: {held:?}");
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    assert!(guard.validity() > Duration::ZERO);
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_restores_the_lock_where_its_key_is_gone() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = fresh(&nodes);
    let ttl = Duration::from_secs(30);
    let guard = locks.lock("restore", ttl).await.expect("lock");
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    let token = guard.token().as_str().to_owned();
    // Gone on a majority (a restart without persistence, an eviction).
    for server in &nodes.iter().collect::<Vec<_>>()[..2] {
        let _: () = conn(&server.url()).await.del("restore").await.expect("DEL");
    }
    guard.extend(ttl).await.expect("extend restores");
    // `extend` returns at the quorum's decision; the last node's answer is
    // followed in the background (on a loaded machine it can come later).
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    assert_eq!(holding(&nodes, "restore", &token).await, 3);
    assert_eq!(guard.confirmed(), 3);
    for server in &nodes {
        let pttl: i64 = conn(&server.url())
            .await
            .pttl("restore")
            .await
            .expect("PTTL");
        assert!(pttl > 0, "restored with a ttl: {pttl}");
    }
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_never_touches_another_owners_key() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = fresh(&nodes);
    let ttl = Duration::from_secs(30);
    let guard = locks.lock("foreign", ttl).await.expect("lock");
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    let token = guard.token().as_str().to_owned();

    // Node 0: another owner's token; node 1: gone; node 2: ours.
    let _: () = conn(&nodes[0].url())
        .await
        .pset_ex("foreign", "someone-else", 60_000)
        .await
        .expect("SET");
    let _: () = conn(&nodes[1].url())
        .await
        .del("foreign")
        .await
        .expect("DEL");
    guard.extend(ttl).await.expect("2 of 3");
    assert_eq!(settled_confirmations(&locks, &guard).await, 2);
    assert_eq!(
        values(&nodes, "foreign").await,
        [
            Some("someone-else".to_owned()),
            Some(token.clone()),
            Some(token.clone())
        ]
    );

    // Another owner on a majority: the lock is gone, and the error says so.
    let _: () = conn(&nodes[1].url())
        .await
        .pset_ex("foreign", "someone-else", 60_000)
        .await
        .expect("SET");
    match guard.extend(ttl).await {
        Err(Error::Lost { reason, held, .. }) => {
            assert_eq!(reason, LossReason::TokenGone);
            // The loss is decided as soon as two refusals make a quorum
            // impossible: node 2's yes is counted only if it came first.
            assert!(held <= 1, "only node 2 holds our token, {held} counted");
        }
        other => panic!("expected a lost lock, got {other:?}"),
    }
    assert_eq!(guard.loss_reason(), Some(LossReason::TokenGone));
    for server in &nodes.iter().collect::<Vec<_>>()[..2] {
        let mut c = conn(&server.url()).await;
        assert_eq!(
            c.get::<_, String>("foreign").await.expect("GET"),
            "someone-else"
        );
        let pttl: i64 = c.pttl("foreign").await.expect("PTTL");
        assert!(pttl > 0 && pttl <= 60_000, "untouched ttl: {pttl}");
    }
    drop(guard);
    locks.settle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_extend_says_what_it_saw() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = fresh(&nodes);
    let ttl = Duration::from_secs(30);

    // Missing keys and one dead node: restored, not "held by another owner".
    let guard = locks.lock("said", ttl).await.expect("lock");
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    nodes[0].kill();
    let _: () = conn(&nodes[1].url()).await.del("said").await.expect("DEL");
    guard.extend(ttl).await.expect("restored on node 1");

    // Another owner on one node, the second dead: another owner was seen.
    let _: () = conn(&nodes[1].url())
        .await
        .pset_ex("said", "someone-else", 60_000)
        .await
        .expect("SET");
    let error = guard.extend(ttl).await.expect_err("1 of 3");
    assert!(matches!(error, Error::Contended { .. }), "{error}");
    assert!(
        guard.loss_reason().is_none(),
        "the previous deadline still holds"
    );

    // Two dead nodes: unreachable, whatever the keys.
    nodes[1].kill();
    match guard.extend(ttl).await {
        Err(Error::Unavailable { failures, .. }) => assert_eq!(failures.len(), 2),
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert!(
        guard.loss_reason().is_none(),
        "the previous deadline still holds"
    );
    drop(guard);
    locks.settle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_is_restored_whole_or_not_at_all() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = fresh(&nodes);
    let ttl = Duration::from_secs(30);
    let guard = locks.lock_many(&["m:a", "m:b"], ttl).await.expect("lock");
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    let token = guard.token().as_str().to_owned();
    // Node 0 lost `m:a`, and `m:b` there is someone else's: touch nothing.
    let mut c0 = conn(&nodes[0].url()).await;
    let _: () = c0.del("m:a").await.expect("DEL");
    let _: () = c0
        .pset_ex("m:b", "someone-else", 60_000)
        .await
        .expect("SET");
    // Node 1 lost both: restore both.
    let _: () = conn(&nodes[1].url())
        .await
        .del(&["m:a", "m:b"])
        .await
        .expect("DEL");
    guard.extend(ttl).await.expect("2 of 3");
    assert_eq!(settled_confirmations(&locks, &guard).await, 2);
    assert_eq!(
        values(&nodes, "m:a").await,
        [None, Some(token.clone()), Some(token.clone())]
    );
    assert_eq!(
        values(&nodes, "m:b").await,
        [
            Some("someone-else".to_owned()),
            Some(token.clone()),
            Some(token)
        ]
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_a_fenced_lock_restores_its_fence_floor() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = fresh(&nodes);
    let ttl = Duration::from_secs(30);
    // Scripts cached on every node first: a release that meets NOSCRIPT
    // sends its retry after the next grant's request, which that node then
    // refuses (one node short, not unsafe).
    support::warm(&locks, ttl).await;
    // A few grants first, so that the fence is well above 1.
    for _ in 0..3 {
        let guard = locks.lock_fenced("fenced", ttl).await.expect("lock");
        guard.release().await.expect("release");
    }
    let guard = locks.lock_fenced("fenced", ttl).await.expect("lock");
    let fence = guard.fence().expect("fenced");
    assert!(fence >= 4, "fence {fence}");
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    // Nodes 0 and 1 restart empty: lock key and counter gone.
    let counter = format!("fenced{FENCE_SUFFIX}");
    for i in 0..2 {
        nodes[i].restart().expect("restart");
    }
    // The first request on a restarted node's old connection may fail;
    // the extension after it restores. `extend` returns at the quorum's
    // decision: the counters are read once every node has answered it.
    no_hang("extend after restarts", async {
        loop {
            if guard.extend(ttl).await.is_ok() && settled_confirmations(&locks, &guard).await == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The restored nodes: their counters came back empty. (Node 2 was not
    // restored. Its counter may lag the fence: a node whose grant came after
    // the quorum's decision is not written back, as the protocol has it.)
    for (i, server) in nodes.iter().enumerate().take(2) {
        let got: Option<u64> = conn(&server.url()).await.get(&counter).await.expect("GET");
        assert!(
            got >= Some(fence),
            "node {i}: counter {got:?} below the fence {fence}; keys {:?}",
            values(&nodes, "fenced").await
        );
    }
    guard.release().await.expect("release");
    // The next grant's fence is larger, though a majority restarted empty.
    let next = locks.lock_fenced("fenced", ttl).await.expect("lock");
    assert!(
        next.fence() > Some(fence),
        "{:?} after {fence}",
        next.fence()
    );
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_restarted_keep_their_vote_in_the_next_extension() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = fresh(&nodes);
    let ttl = Duration::from_secs(30);
    let guard = locks.lock("restarted", ttl).await.expect("lock");
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    // The manager's connections to nodes 0 and 1 are now stale: the first
    // request on each finds them dropped. Sent again on a new connection,
    // the extension restores the lock there instead of losing both votes.
    nodes[0].restart().expect("restart");
    nodes[1].restart().expect("restart");
    guard
        .extend(ttl)
        .await
        .expect("extend on the restarted nodes");
    // The extension's answer from one restarted node may still be on its
    // way (followed in the background); until it lands, that node's
    // confirmation is the acquire's. Without the resend it never lands,
    // and this wait fails the test.
    no_hang("both restarted nodes restored", async {
        while holding(&nodes, "restarted", guard.token().as_str()).await < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(settled_confirmations(&locks, &guard).await, 3);
    guard.release().await.expect("release");
}

/// How a rolling restart brings each node back.
#[derive(Debug, Clone, Copy)]
enum Rolling {
    /// Without persistence, kept down for longer than the ttl (the delayed
    /// restart the Redis distlock page prescribes): it comes back empty.
    DelayedEmpty,
    /// With `appendfsync always`, straight back up with its keys.
    PersistentImmediate,
}

async fn rolling_restart(style: Rolling) {
    let options = match style {
        Rolling::DelayedEmpty => ServerOptions::new(),
        Rolling::PersistentImmediate => ServerOptions::new().persistent(),
    };
    let nodes = Arc::new(RedisNodes::start_with(5, options).expect("nodes"));
    let ttl = Duration::from_secs(1);
    let locks = fresh(&nodes);
    let guard = locks.lock("rolling", ttl).await.expect("lock");
    guard.auto_extend();
    assert_eq!(settled_confirmations(&locks, &guard).await, 5);

    // A contender tries to take the lock the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicUsize::new(0));
    let contender = {
        let locks = builder(&nodes)
            .node_timeout(NODE_TIMEOUT)
            .retry(Retry::none())
            .build()
            .expect("config");
        let (stop, attempts) = (stop.clone(), attempts.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                attempts.fetch_add(1, Ordering::SeqCst);
                if let Ok(stolen) = locks.try_lock("rolling", ttl).await {
                    return Some(format!("{stolen:?}"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            None
        })
    };

    let lost = guard.lost();
    tokio::pin!(lost);
    for i in 0..5 {
        let step = async {
            nodes[i].kill();
            if let Rolling::DelayedEmpty = style {
                tokio::time::sleep(ttl + Duration::from_millis(100)).await;
            }
            support::restart(&nodes, i).await;
            // A renewal period before the next node goes down: renewals
            // after the restart put the lock back on the restarted node.
            support::until_renewed_on(&guard.lease(), 5).await;
        };
        tokio::select! {
            () = step => {}
            reason = &mut lost => panic!("{style:?}: lost the lock at node {i}: {reason}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let stolen = contender.await.expect("contender");
    assert_eq!(stolen, None, "{style:?}: the contender got the lock");
    assert!(attempts.load(Ordering::SeqCst) > 20, "the contender tried");
    assert!(guard.loss_reason().is_none());
    let summary = guard.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 5, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_extended_lock_survives_a_rolling_restart_of_empty_nodes() {
    rolling_restart(Rolling::DelayedEmpty).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_extended_lock_survives_a_rolling_restart_with_persistence() {
    rolling_restart(Rolling::PersistentImmediate).await;
}
