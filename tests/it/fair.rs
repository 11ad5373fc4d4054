//! `fair_lock`: waiters granted in the order they asked, across managers;
//! a waiter that dies or is cancelled leaves the line; fair and plain
//! locks exclude each other; a frozen node does not stop the line.

use crate::support::{self, no_hang};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::{FaultProxy, Faults, RedisNodes};
use quorumlock::{
    Error, FAIR_QUEUE_LEASE, NodeError, NodeState, Redlock, ResourceKind, Retry, WakeOnRelease,
};

const TTL: Duration = Duration::from_secs(10);

/// A manager that waits in line as long as it takes (a minute at most),
/// told its turn by releases when `told`.
fn manager(nodes: &RedisNodes, told: bool) -> Redlock {
    let wake = if told {
        WakeOnRelease::Subscribe
    } else {
        WakeOnRelease::Never
    };
    support::patient_builder(nodes)
        .wake_on_release(wake)
        .retry(waiting())
        .build()
        .expect("config")
}

/// How many waiters stand in `resource`'s line on node `url`.
/// How many waiters stand in `resource`'s line on node `url`: those whose
/// lease has not ended by the node's clock (an entry whose lease ended
/// stays until the node's next fair script purges it, and counts for
/// nothing).
async fn in_line(url: &str, resource: &str) -> usize {
    let mut conn = support::conn(url).await;
    let time: (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    let now_ms = time.0 * 1000 + time.1 / 1000;
    let n: usize = redis::cmd("ZCOUNT")
        .arg(format!("{resource}:queue:leases"))
        .arg(format!("({now_ms}"))
        .arg("+inf")
        .query_async(&mut conn)
        .await
        .expect("ZCOUNT");
    n
}

/// Waits until at least `n` waiters stand in line on every node.
async fn until_in_line(nodes: &RedisNodes, resource: &str, n: usize) {
    no_hang("waiters in line", async {
        for url in nodes.urls() {
            while in_line(&url, resource).await < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    })
    .await;
}

/// Puts a waiter `id` in line on every node with `ticket`, for `lease`,
/// as a waiter that then died would leave it.
async fn plant_waiter(nodes: &RedisNodes, resource: &str, id: &str, ticket: u64, lease: Duration) {
    for url in nodes.urls() {
        let mut conn = support::conn(&url).await;
        let time: (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .expect("TIME");
        let now_ms = time.0 * 1000 + time.1 / 1000;
        let ends = now_ms + u64::try_from(lease.as_millis()).expect("ms");
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(format!("{resource}:queue"))
            .arg(ticket)
            .arg(id)
            .ignore()
            .cmd("ZADD")
            .arg(format!("{resource}:queue:leases"))
            .arg(ends)
            .arg(id)
            .ignore()
            .query_async(&mut conn)
            .await
            .expect("ZADD");
    }
}

/// Waiters that asked one after the other, in three managers, are granted
/// in that order, with wake-ups on and off.
async fn granted_in_order(told: bool) {
    let nodes = RedisNodes::start(3).expect("nodes");
    let managers: Vec<Redlock> = (0..3).map(|_| manager(&nodes, told)).collect();
    let resource = if told { "order:told" } else { "order:polled" };
    let holder = no_hang("hold", managers[0].fair_lock(resource, TTL))
        .await
        .expect("fair_lock");
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let locks = managers[i % 3].clone();
        let granted = granted.clone();
        waiters.push(tokio::spawn(async move {
            let guard = locks.fair_lock(resource, TTL).await.expect("fair_lock");
            granted.lock().expect("order").push(i);
            guard.release().await.expect("release");
        }));
        // The next one asks once this one stands in line everywhere.
        until_in_line(&nodes, resource, i + 1).await;
    }
    holder.release().await.expect("release");
    for waiter in waiters {
        no_hang("waiter", waiter).await.expect("task");
    }
    assert_eq!(*granted.lock().expect("order"), vec![0, 1, 2, 3, 4, 5]);
    // Each leaves the line once granted, in the background.
    for locks in &managers {
        no_hang("settle", locks.settle()).await;
    }
    for url in nodes.urls() {
        assert_eq!(in_line(&url, resource).await, 0, "the line is empty after");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_the_order_they_asked_across_managers() {
    granted_in_order(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_waiters_are_granted_in_order_too() {
    granted_in_order(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_died_in_line_holds_the_next_up_for_its_lease_only() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes, true);
    // A waiter first in line (ticket 0) that died without leaving: its
    // place lasts its lease, then the next waiter gets the lock.
    plant_waiter(&nodes, "dead", "dead-waiter", 0, FAIR_QUEUE_LEASE).await;
    let err = locks
        .try_fair_lock("dead", TTL)
        .await
        .expect_err("someone waits");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    let guard = no_hang("next up", locks.fair_lock("dead", TTL))
        .await
        .expect("granted once the dead waiter's lease ended");
    no_hang("settle", locks.settle()).await;
    // Gone, or its lease ended, on every node: the grant needed it ended
    // on a quorum only, and on a loaded machine the last node's lease was
    // planted (by its own clock) a little later than the others'. A lease
    // that never ends, or a waiter put back, would hang here.
    no_hang("the dead waiter gone everywhere", async {
        for url in nodes.urls() {
            while in_line(&url, "dead").await != 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    })
    .await;
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_line_and_hands_its_turn_on() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let (a, b) = (manager(&nodes, true), manager(&nodes, true));
    let holder = a.fair_lock("cancel", TTL).await.expect("fair_lock");
    let first = tokio::spawn({
        let b = b.clone();
        async move { b.fair_lock("cancel", TTL).await }
    });
    until_in_line(&nodes, "cancel", 1).await;
    let second = tokio::spawn({
        let a = a.clone();
        async move { a.fair_lock("cancel", TTL).await }
    });
    until_in_line(&nodes, "cancel", 2).await;
    // The first waiter gives up: it leaves the line on every node.
    first.abort();
    assert!(first.await.expect_err("aborted").is_cancelled());
    no_hang("left", async {
        for url in nodes.urls() {
            while in_line(&url, "cancel").await != 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    })
    .await;
    holder.release().await.expect("release");
    let guard = no_hang("second", second)
        .await
        .expect("task")
        .expect("the second waiter gets it");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_and_plain_locks_exclude_each_other() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes, true);
    let fair = locks.fair_lock("shared", TTL).await.expect("fair_lock");
    let err = locks.try_lock("shared", TTL).await.expect_err("held");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    fair.release().await.expect("release");
    let plain = locks.try_lock("shared", TTL).await.expect("try_lock");
    let err = locks.try_fair_lock("shared", TTL).await.expect_err("held");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    plain.release().await.expect("release");
    // Its line's keys are gone once nobody waits (they expire).
    let guard = locks.try_fair_lock("shared", TTL).await.expect("free");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_line_keeps_its_order_with_a_node_frozen() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let managers: Vec<Redlock> = (0..2).map(|_| manager(&nodes, true)).collect();
    support::warm(&managers[0], TTL).await;
    support::warm(&managers[1], TTL).await;
    let holder = managers[0]
        .fair_lock("frozen", TTL)
        .await
        .expect("fair_lock");
    nodes[4].pause().expect("SIGSTOP");
    // Once its requests timed out twice, the frozen node is not asked:
    // a call's first round then fails there at once, and two refusals
    // settle it before a quorum drew tickets. Waiters must queue anyway.
    for locks in &managers {
        until_not_asked(locks).await;
    }
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    let live = RedisNodesView(&nodes, 4);
    for i in 0..4 {
        let locks = managers[i % 2].clone();
        let granted = granted.clone();
        waiters.push(tokio::spawn(async move {
            let guard = locks.fair_lock("frozen", TTL).await.expect("fair_lock");
            granted.lock().expect("order").push(i);
            guard.release().await.expect("release");
        }));
        live.until_in_line("frozen", i + 1).await;
    }
    holder.release().await.expect("release");
    for waiter in waiters {
        no_hang("waiter", waiter).await.expect("task");
    }
    nodes[4].resume().expect("SIGCONT");
    assert_eq!(*granted.lock().expect("order"), vec![0, 1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_line_keeps_its_order_with_a_node_slowed() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let managers: Vec<Redlock> = (0..2).map(|_| manager_of(&urls)).collect();
    let holder = managers[0]
        .fair_lock("slowed", TTL)
        .await
        .expect("fair_lock");
    let ms = Duration::from_millis(20);
    proxies[4].set(Faults::latency(ms, ms, Duration::ZERO));
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let locks = managers[i % 2].clone();
        let granted = granted.clone();
        waiters.push(tokio::spawn(async move {
            let guard = locks.fair_lock("slowed", TTL).await.expect("fair_lock");
            granted.lock().expect("order").push(i);
            guard.release().await.expect("release");
        }));
        // Every node, the slow one too: its renewals come late, not never.
        until_in_line(&nodes, "slowed", i + 1).await;
    }
    holder.release().await.expect("release");
    for waiter in waiters {
        no_hang("waiter", waiter).await.expect("task");
    }
    assert_eq!(*granted.lock().expect("order"), vec![0, 1, 2, 3]);
}

/// A waiter whose answers reach it late (a loaded client, a slow return
/// path) keeps the place its first requests took: a call that asks after
/// they landed queues behind it, although the first waiter has not yet read
/// its tickets nor placed itself at its final one. (Placed only by its
/// second round, it was passed by every call that came meanwhile: the chaos
/// suite's starvation check caught it under load.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_reads_its_answers_late_keeps_its_place() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let reader = manager_of(&urls);
    // Its connections made (what is tested is the line, not their setup).
    let warm = no_hang("warm", reader.lock("warm", TTL)).await;
    warm.expect("lock").release().await.expect("release");
    // Then its replies take 300 ms; its requests land at once.
    let late = Duration::from_millis(300);
    for proxy in &proxies {
        proxy.set(Faults::latency(Duration::ZERO, late, Duration::ZERO));
    }
    let others = manager(&nodes, true);
    let resource = "late-reader";
    let holder = no_hang("hold", others.fair_lock(resource, TTL))
        .await
        .expect("fair_lock");
    let granted = Arc::new(Mutex::new(Vec::new()));
    let first = {
        let granted = granted.clone();
        tokio::spawn(async move {
            let guard = reader.fair_lock(resource, TTL).await.expect("fair_lock");
            granted.lock().expect("order").push("late reader");
            guard.release().await.expect("release");
        })
    };
    // Its first requests landed: every node drew its ticket (the holder
    // drew the first).
    no_hang("the late reader's tickets", async {
        for url in nodes.urls() {
            let mut conn = support::conn(&url).await;
            loop {
                let drawn: Option<u64> = redis::cmd("GET")
                    .arg(format!("{resource}:queue:ticket"))
                    .query_async(&mut conn)
                    .await
                    .expect("GET");
                if drawn >= Some(2) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    })
    .await;
    holder.release().await.expect("release");
    let guard = no_hang("the next caller", others.fair_lock(resource, TTL))
        .await
        .expect("fair_lock");
    granted.lock().expect("order").push("next caller");
    guard.release().await.expect("release");
    no_hang("the late reader", first).await.expect("task");
    assert_eq!(
        *granted.lock().expect("order"),
        vec!["late reader", "next caller"]
    );
}

/// How the tests' waiters wait: as long as it takes, a minute at most.
fn waiting() -> Retry {
    Retry::forever()
        .delay(Duration::from_millis(20))
        .jitter(Duration::from_millis(10))
        .wait(Duration::from_secs(60))
}

/// [`manager`] (told its turn) over these URLs.
fn manager_of(urls: &[String]) -> Redlock {
    Redlock::builder()
        .nodes(urls.iter().cloned())
        .node_timeout(Duration::from_secs(1))
        .wake_on_release(WakeOnRelease::Subscribe)
        .retry(waiting())
        .build()
        .expect("config")
}

/// Locks and releases other resources until a release says a node is
/// not asked.
async fn until_not_asked(locks: &Redlock) {
    no_hang("a node not asked", async {
        for i in 0.. {
            if let Ok(guard) = locks.lock(&format!("pace:{i}"), TTL).await {
                let summary = guard.release().await.expect("release");
                if summary
                    .failures()
                    .iter()
                    .any(|f| matches!(f.error, NodeError::NotAsked { .. }))
                {
                    return;
                }
            }
            // The node timeout must pass for requests to time out.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
}

/// The first `n` nodes of a set (the others frozen).
struct RedisNodesView<'a>(&'a RedisNodes, usize);

impl RedisNodesView<'_> {
    async fn until_in_line(&self, resource: &str, n: usize) {
        let urls: Vec<String> = self.0.urls().into_iter().take(self.1).collect();
        no_hang("waiters in line", async {
            for url in &urls {
                while in_line(url, resource).await < n {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_holder_and_the_waiters_in_line() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes, true);
    let holder = locks.fair_lock("shown", TTL).await.expect("fair_lock");
    // Each releases its own lock: which of the two is first in line is
    // not known here.
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let guard = locks.fair_lock("shown", TTL).await.expect("fair_lock");
                guard.release().await.expect("release");
            })
        })
        .collect();
    until_in_line(&nodes, "shown", 2).await;
    let inspection = locks.inspect("shown").await.expect("inspect");
    let inspection = no_hang("settled", inspection.settled()).await;
    assert_eq!(inspection.kind(), Some(ResourceKind::Lock));
    assert_eq!(
        inspection
            .holder()
            .map(|claim| claim.token().is(holder.token())),
        Some(true)
    );
    for node in inspection.nodes() {
        let NodeState::Answered(stored) = node.state() else {
            panic!("{} did not answer: {:?}", node.node(), node.state());
        };
        assert_eq!(stored.in_line(), 2, "{}", node.node());
    }
    let keys = inspection.keys_for(ResourceKind::Lock);
    assert!(keys.contains(&"shown:queue".to_owned()), "{keys:?}");
    holder.release().await.expect("release");
    for waiter in waiters {
        no_hang("waiter", waiter).await.expect("task");
    }
}
