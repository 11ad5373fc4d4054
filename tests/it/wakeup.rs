//! Waiting without polling: with `WakeOnRelease::Subscribe`, a release
//! wakes the waiters of its resource at once; without an announcement they
//! still get in by polling. No timing assertions: the retry delays here are
//! far longer than the hang guard, so a waiter that gets in can only have
//! been woken.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, LockGuard, Redlock, Retry, WakeOnRelease};
use support::{builder, conn, holding, no_hang, subscribers, values};
use tokio::task::JoinHandle;

/// A retry delay no test waits out: getting in means being woken.
const FOREVER: Duration = Duration::from_secs(3600);
const TTL: Duration = Duration::from_secs(60);

fn waking(nodes: &RedisNodes, delay: Duration) -> Redlock {
    builder(nodes)
        .retry(Retry::forever().delay(delay).jitter(Duration::ZERO))
        .wake_on_release(WakeOnRelease::Subscribe)
        .build()
        .expect("config")
}

/// How many clients listen on `channel` on each running node.
async fn listeners(nodes: &RedisNodes, channel: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for server in nodes {
        if !server.is_running() {
            out.push(0);
            continue;
        }
        out.push(subscribers(&server.url(), channel).await);
    }
    out
}

/// Waits until at least `at_least` nodes have a listener on `channel`.
async fn until_listening(nodes: &RedisNodes, channel: &str, at_least: usize) {
    no_hang("subscription", async {
        while listeners(nodes, channel)
            .await
            .iter()
            .filter(|&&n| n > 0)
            .count()
            < at_least
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// Awaits a waiting task's lock (failing the test if it hangs or fails),
/// then releases it.
async fn gets_in(what: &str, waiting: JoinHandle<Result<LockGuard, Error>>) {
    no_hang(what, waiting)
        .await
        .expect("task")
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_long_before_its_retry_delay() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let holder = waking(&nodes, FOREVER);
    let waiter = waking(&nodes, FOREVER);
    let guard = holder.lock("job", TTL).await.expect("lock");

    let waiting = tokio::spawn(async move { waiter.lock("job", TTL).await });
    // The waiter failed once and now listens on every node.
    until_listening(&nodes, "job:released", 3).await;
    guard.release().await.expect("release");

    let next = no_hang("woken waiter", waiting)
        .await
        .expect("task")
        .expect("lock after the release");
    // On a quorum at least (a late grant may still be on its way).
    assert!(holding(&nodes, "job", next.token().as_str()).await >= 2);
    next.release().await.expect("release");
    // Nobody waits any more: the subscriptions go away.
    no_hang("unsubscribe", async {
        while listeners(&nodes, "job:released")
            .await
            .iter()
            .any(|&n| n > 0)
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_subscription_is_not_missed() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let holder = waking(&nodes, FOREVER);
    let waiter = waking(&nodes, FOREVER);
    let guard = holder.lock("early", TTL).await.expect("lock");
    let waiting = tokio::spawn(async move { waiter.lock("early", TTL).await });
    // Released at some point while the waiter tries, fails, subscribes: a
    // release it could not hear is made up for once it listens.
    guard.release().await.expect("release");
    gets_in("waiter", waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_resource_waiters_are_woken_too() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let holder = waking(&nodes, FOREVER);
    let waiter = waking(&nodes, FOREVER);
    let guard = holder.lock("b", TTL).await.expect("lock");
    let waiting = tokio::spawn(async move { waiter.lock_many(&["a", "b"], TTL).await });
    until_listening(&nodes, "b:released", 3).await;
    guard.release().await.expect("release");
    let both = no_hang("woken waiter", waiting)
        .await
        .expect("task")
        .expect("lock_many");
    assert_eq!(both.resource(), "a+b");
    both.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_announcement_the_waiter_polls() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // The holder's manager does not publish: nothing is announced.
    let holder = builder(&nodes).build().expect("config");
    let waiter = waking(&nodes, Duration::from_millis(50));
    let guard = holder.lock("quiet", TTL).await.expect("lock");
    let waiting = tokio::spawn(async move { waiter.lock("quiet", TTL).await });
    until_listening(&nodes, "quiet:released", 3).await;
    guard.release().await.expect("release");
    gets_in("polling waiter", waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_leaves_the_other_nodes_announcing() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let holder = waking(&nodes, FOREVER);
    let waiter = waking(&nodes, FOREVER);
    let guard = holder.lock("k", TTL).await.expect("lock");
    let waiting = tokio::spawn(async move { waiter.lock("k", TTL).await });
    until_listening(&nodes, "k:released", 3).await;
    // Its pub/sub connection breaks and cannot come back; 2 of 3 still
    // release, announce and grant.
    nodes[2].kill();
    guard.release().await.expect("release");
    gets_in("woken waiter", waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_listen_again_after_their_connections_are_killed() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let holder = waking(&nodes, FOREVER);
    let waiter = waking(&nodes, FOREVER);
    let guard = holder.lock("r", TTL).await.expect("lock");
    let waiting = tokio::spawn(async move { waiter.lock("r", TTL).await });
    until_listening(&nodes, "r:released", 3).await;
    for server in &nodes {
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut conn(&server.url()).await)
            .await
            .expect("CLIENT KILL");
    }
    // The waiter reconnects and subscribes again by itself.
    until_listening(&nodes, "r:released", 1).await;
    guard.release().await.expect("release");
    gets_in("woken waiter", waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_gets_its_turn() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = waking(&nodes, FOREVER);
    let first = locks.lock("turns", TTL).await.expect("lock");
    const WAITERS: usize = 8;
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let guard = locks.lock("turns", TTL).await.expect("lock");
                guard.release().await.expect("release");
            })
        })
        .collect();
    until_listening(&nodes, "turns:released", 3).await;
    first.release().await.expect("release");
    // Each release wakes the rest; nobody waits out the hour.
    no_hang("all waiters", async {
        for task in tasks {
            task.await.expect("task");
        }
    })
    .await;
    // release and cleanup return at the decision; the other nodes follow
    locks.settle().await;
    assert_eq!(values(&nodes, "turns").await, [None, None, None]);
}

/// How many of `snapshotter`'s node errors were an acquire's.
#[cfg(feature = "metrics")]
fn acquire_errors(snapshotter: &metrics_util::debugging::Snapshotter) -> u64 {
    use metrics_util::debugging::DebugValue;
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            let key = key.key();
            key.name() == "quorumlock_node_errors_total"
                && key
                    .labels()
                    .any(|l| l.key() == "op" && l.value() == "acquire")
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// An attempt no node refused (too few answered: here every node is down;
/// on a loaded machine, requests that all time out at once) announces
/// nothing, so its waiter has no release coming to wake it: it tries again
/// soon instead of sleeping out its retry delay, and gets in once the
/// nodes answer. Before, it slept the hour — and a woken waiter whose
/// attempt failed so left every other waiter asleep with it.
// Current-thread runtime: the recorder set here counts what the waiter's
// task does (it tells when its first attempt has failed).
#[cfg(feature = "metrics")]
#[tokio::test]
async fn a_waiter_whose_attempt_nobody_refused_tries_again_soon() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = ::metrics::set_default_local_recorder(&recorder);

    let nodes = std::sync::Arc::new(RedisNodes::start(3).expect("nodes"));
    let waiter = waking(&nodes, FOREVER);
    for server in nodes.iter() {
        server.kill();
    }
    let waiting = tokio::spawn(async move { waiter.lock("outage", TTL).await });
    // Its first attempt failed on (at least) a quorum's complement of nodes:
    // too few reachable, decided before any node came back.
    no_hang("first attempt", async {
        while acquire_errors(&snapshotter) < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    for i in 0..nodes.len() {
        support::restart(&nodes, i).await;
    }
    gets_in("waiter", waiting).await;
}
