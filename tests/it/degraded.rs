//! A slow or frozen minority costs a holder nothing. One of five nodes is
//! paused (SIGSTOP) and the node timeout is far beyond the hang guard, so
//! a call that waited for the paused node would hang the test: every call
//! must return at its quorum's decision, while the paused node still owes
//! its answer, and the engine must follow that node once it wakes up.

use crate::support;

use std::time::Duration;

use futures::FutureExt;
use quorumlock::testkit::{FaultProxy, Faults, RedisNodes, RedisServer};
use quorumlock::{Error, LockGuard, NodeError, Redlock, Retry};
use redis::AsyncCommands;
use support::{Paused, conn, holding, no_hang, values, warm};

/// The node that is paused.
const FROZEN: usize = 4;
/// Far beyond the hang guard: a call that waited on the paused node would
/// hang the test.
const NODE_TIMEOUT: Duration = Duration::from_secs(600);
const TTL: Duration = Duration::from_secs(30);

fn manager(urls: Vec<String>) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .retry(Retry::default().delay(Duration::from_millis(10)))
        .build()
        .expect("config")
}

/// Whether `locks` still follows requests in the background: here, the
/// paused node's, which cannot have answered.
fn still_following(locks: &Redlock) -> bool {
    locks.settle().now_or_never().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_returns_while_a_paused_node_owes_its_answer_then_follows_it() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = manager(nodes.urls());
    warm(&locks, TTL).await;
    let paused = Paused::new(&nodes[FROZEN]);
    let guard = no_hang("lock", locks.lock("frozen:release", TTL))
        .await
        .expect("4 of 5 can grant");
    assert!(
        guard.confirmed() < 5,
        "the paused node cannot have answered"
    );
    let summary = no_hang("release", guard.release()).await.expect("release");
    assert!(summary.pending() >= 1, "{summary:?}");
    assert!(summary.released() >= locks.quorum(), "{summary:?}");
    assert!(summary.failures().is_empty(), "{summary:?}");
    assert!(still_following(&locks));

    drop(paused);
    let summary = no_hang("settled", summary.settled()).await;
    assert_eq!(summary.pending(), 0);
    // The paused node ran the acquire, then the release behind it on the
    // same connection: it deleted the token too.
    assert_eq!(summary.released(), 5, "{summary:?}");
    no_hang("settle", locks.settle()).await;
    assert_eq!(values(&nodes, "frozen:release").await, vec![None; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_decides_without_the_paused_node() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = manager(nodes.urls());
    warm(&locks, TTL).await;
    let paused = Paused::new(&nodes[FROZEN]);

    no_hang("lock, extend, release", async {
        let guard = locks.lock("frozen:a", TTL).await.expect("lock");
        guard.extend(TTL).await.expect("extend");
        assert!(
            guard.confirmed() < 5,
            "the paused node cannot have answered"
        );
        guard.release().await.expect("release");
    })
    .await;
    no_hang("fenced and multi-resource locks", async {
        let fenced = locks.lock_fenced("frozen:f", TTL).await.expect("fenced");
        assert!(fenced.fence().is_some());
        fenced.release().await.expect("release");
        let many = locks
            .lock_many(&["frozen:m1", "frozen:m2"], TTL)
            .await
            .expect("lock_many");
        many.release().await.expect("release");
    })
    .await;
    no_hang("a semaphore's permit", async {
        let permit = locks
            .semaphore("frozen:sem", 2)
            .acquire(TTL)
            .await
            .expect("permit");
        permit.extend(TTL).await.expect("extend");
        permit.release().await.expect("release");
    })
    .await;
    no_hang("reader and writer", async {
        let rw = locks.rwlock("frozen:rw");
        let read = rw.read(TTL).await.expect("read");
        read.release().await.expect("release");
        let write = rw.write(TTL).await.expect("write");
        write.release().await.expect("release");
    })
    .await;
    no_hang("with_lock", async {
        let out = locks
            .with_lock("frozen:w", TTL, |lease| async move {
                lease.token().as_str().len()
            })
            .await
            .expect("with_lock");
        assert_eq!(out, 32);
    })
    .await;
    no_hang("an election", async {
        let election = locks.election("frozen:e");
        let leadership = election.campaign("me", TTL).await.expect("campaign");
        let leader = election.leader().await.expect("leader").expect("a leader");
        assert_eq!(leader.value(), "me");
        leadership.resign().await.expect("resign");
    })
    .await;
    // Everything returned while the paused node's requests were pending.
    assert!(still_following(&locks));
    drop(paused);
    no_hang("settle", locks.settle()).await;
    for key in ["frozen:a", "frozen:f", "frozen:m1", "frozen:m2", "frozen:w"] {
        assert_eq!(values(&nodes, key).await, vec![None; 5], "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_leaves_its_cleanup_to_the_background() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = manager(nodes.urls());
    warm(&locks, TTL).await;
    // Someone else holds the resource on three nodes.
    for server in nodes.iter().take(3) {
        let _: () = conn(&server.url())
            .await
            .set_ex("frozen:busy", "someone-else", 60)
            .await
            .expect("SET");
    }
    let paused = Paused::new(&nodes[FROZEN]);
    let err = no_hang("try_lock", locks.try_lock("frozen:busy", TTL))
        .await
        .expect_err("three refusals");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    // Decided by the refusals, and its cleanup did not wait for the
    // paused node: it is still being followed.
    assert!(err.node_failures().is_empty(), "{err}");
    assert!(still_following(&locks));
    drop(paused);
    no_hang("settle", locks.settle()).await;
    // The attempt's grants, the paused node's late one included, are gone.
    assert_eq!(
        values(&nodes, "frozen:busy").await,
        [
            Some("someone-else".to_owned()),
            Some("someone-else".to_owned()),
            Some("someone-else".to_owned()),
            None,
            None
        ]
    );
}

/// What [`release_and_lock_again`] saw.
struct Cycles {
    /// The last grant.
    guard: LockGuard,
    /// How many releases returned before every node answered.
    early: usize,
    /// The most tasks alive on this runtime after any step, beyond those
    /// alive before the first.
    extra_tasks: usize,
}

/// Releases `guard` and at once locks its resource again, `cycles` times,
/// from the same manager.
async fn release_and_lock_again(locks: &Redlock, mut guard: LockGuard, cycles: usize) -> Cycles {
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = alive();
    let (mut early, mut most) = (0, before);
    let resource = guard.resource().to_owned();
    for _ in 0..cycles {
        let summary = no_hang("release", guard.release()).await.expect("release");
        early += usize::from(summary.pending() > 0);
        most = most.max(alive());
        guard = no_hang("the next lock", locks.lock(&resource, TTL))
            .await
            .expect("lock");
        most = most.max(alive());
    }
    Cycles {
        guard,
        early,
        extra_tasks: most.saturating_sub(before),
    }
}

/// Requests still in flight after their calls returned are followed by
/// one task per node, however many calls left one (not a task each).
/// Beside it a node's lane may have its batch's sender alive (one batch
/// in flight per node of several): two tasks per node at most, where a
/// task per call would be tens.
fn one_follower_per_node_at_most(cycles: &Cycles, nodes: usize) {
    assert!(
        cycles.extra_tasks <= 2 * nodes,
        "{} more tasks alive while stragglers were followed",
        cycles.extra_tasks
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggling_release_never_removes_the_next_grant_on_a_paused_node() {
    // Each release returns before the paused node answered, and the next
    // lock of the same resource follows at once. Once the node wakes up it
    // runs them all in order: every old release must leave the newer
    // grants alone (the token check), and the newest stays.
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = manager(nodes.urls());
    warm(&locks, TTL).await;
    let paused = Paused::new(&nodes[FROZEN]);
    let guard = locks.lock("frozen:next", TTL).await.expect("lock");
    let cycles = release_and_lock_again(&locks, guard, 20).await;
    assert_eq!(cycles.early, 20, "the paused node cannot have answered");
    one_follower_per_node_at_most(&cycles, 5);
    let guard = cycles.guard;
    drop(paused);
    no_hang("settle", locks.settle()).await;
    assert_eq!(guard.confirmed(), 5);
    assert_eq!(
        holding(&nodes, "frozen:next", guard.token().as_str()).await,
        5
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggling_release_never_removes_the_next_grant_on_a_slow_node() {
    // The same with one node slowed (+10 ms each way) through a proxy, so
    // that its answers interleave with the next grants'.
    let nodes = RedisNodes::start(5).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    let locks = manager(proxies.iter().map(FaultProxy::url).collect());
    warm(&locks, TTL).await;
    let ms = Duration::from_millis(10);
    proxies[FROZEN].set(Faults::latency(ms, ms, Duration::ZERO));
    let guard = locks.lock("slow:next", TTL).await.expect("lock");
    let cycles = release_and_lock_again(&locks, guard, 50).await;
    one_follower_per_node_at_most(&cycles, 5);
    let guard = cycles.guard;
    no_hang("settle", locks.settle()).await;
    assert_eq!(guard.confirmed(), 5);
    assert_eq!(
        holding(&nodes, "slow:next", guard.token().as_str()).await,
        5
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_vote_is_not_left_to_an_unresponsive_node() {
    // Four nodes split two against two: only the fifth could decide, and
    // it is paused. Once it has timed out twice in a row with no answer
    // between, it is not asked: attempts decide without it at once.
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .retry(Retry::none())
        .build()
        .expect("config");
    warm(&locks, TTL).await;
    let paused = Paused::new(&nodes[FROZEN]);
    // Its acquire and its release time out (followed in the background).
    let guard = locks.lock("split:warm", TTL).await.expect("lock");
    guard.release().await.expect("release");
    no_hang("settle", locks.settle()).await;
    held_by_another(nodes.iter().take(2), "split:x").await;
    // Counted as failed without waiting, not even asked: not timed out.
    let (err, failure) = contended_failing_on(
        &locks,
        "split:x",
        "two against two, the fifth paused",
        nodes[FROZEN].port(),
    )
    .await;
    assert!(
        matches!(failure, NodeError::NotAsked { .. }),
        "waited for the paused node: {err}"
    );
    drop(paused);
    no_hang("settle", locks.settle()).await;
    assert_eq!(
        values(&nodes, "split:x").await,
        [
            Some("someone-else".to_owned()),
            Some("someone-else".to_owned()),
            None,
            None,
            None
        ],
        "the attempt's grants are cleaned up, the paused node's too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contested_attempt_does_not_wait_for_a_slow_node_and_leaves_nothing() {
    // Another owner holds nodes 0, 1 and the slow node 4 (+300 ms each
    // way): a quorum. Our attempt gets nodes 2 and 3 at once, is refused on
    // 0 and 1, and only node 4 could grant it. It does not wait 600 ms for
    // that node's "no" while keeping nodes 2 and 3 from the next owner: it
    // gives up on it and releases them (node 4's request is released
    // behind it on the same connection).
    let nodes = RedisNodes::start(5).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    let locks = Redlock::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .retry(Retry::none())
        .build()
        .expect("config");
    warm(&locks, TTL).await;
    held_by_another([0, 1, FROZEN].map(|n| &nodes[n]), "contest:x").await;
    let ms = Duration::from_millis(300);
    proxies[FROZEN].set(Faults::latency(ms, ms, Duration::ZERO));
    let (err, failure) = contended_failing_on(
        &locks,
        "contest:x",
        "another owner holds a quorum",
        proxies[FROZEN].port(),
    )
    .await;
    assert!(
        matches!(failure, NodeError::Outpaced { .. }),
        "waited for the slow node's answer: {err}"
    );
    no_hang("settle", locks.settle()).await;
    let other = Some("someone-else".to_owned());
    assert_eq!(
        values(&nodes, "contest:x").await,
        [other.clone(), other.clone(), None, None, other],
        "the attempt's grants are cleaned up"
    );
}

/// Another owner's key `key` ("someone-else", for a minute) on `servers`.
async fn held_by_another(servers: impl IntoIterator<Item = &RedisServer>, key: &str) {
    for server in servers {
        let _: () = conn(&server.url())
            .await
            .set_ex(key, "someone-else", 60)
            .await
            .expect("SET");
    }
}

/// `locks.try_lock(key)`, which another owner refuses (`why`): the error,
/// `Contended`, and the failure of the one node it reports, which must be
/// the one on `port`.
async fn contended_failing_on(
    locks: &Redlock,
    key: &str,
    why: &str,
    port: u16,
) -> (Error, NodeError) {
    let err = no_hang("try_lock", locks.try_lock(key, TTL))
        .await
        .expect_err(why);
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    let node = format!("127.0.0.1:{port}");
    let failure = match err.node_failures() {
        [f] if *f.node == *node => f.error.clone(),
        _ => panic!("not one failure, of {node}: {err}"),
    };
    (err, failure)
}
