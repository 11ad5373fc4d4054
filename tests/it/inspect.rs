//! `Redlock::inspect` against real nodes: what every node keeps under a
//! name — a lock, a fenced lock, a semaphore's permits, a reader-writer
//! lock's writer and readers, an election's leader — and the verdict a
//! quorum decides; without waiting for a paused node, without writing,
//! and without ever showing a token in full.

use crate::support;

use std::time::Duration;

use futures::FutureExt;
use quorumlock::testkit::RedisNodes;
use quorumlock::{
    ArgumentError, Claimed, Error, Inspection, NodeError, NodeState, Redlock, ResourceKind, Retry,
    Stored, Verdict,
};
use redis::AsyncCommands;
use support::{Paused, conn, keys_left, no_hang, warm};

const TTL: Duration = Duration::from_secs(30);

/// Long enough that a healthy node answers within it on a loaded 2-core
/// machine: these tests are about what is read, not speed.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

fn manager(nodes: &RedisNodes) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry(Retry::default().delay(Duration::from_millis(10)))
        .build()
        .expect("config")
}

/// Inspects `name` and waits for every node's answer.
async fn inspect(locks: &Redlock, name: &str) -> Inspection {
    let inspection = no_hang("inspect", locks.inspect(name))
        .await
        .expect("inspect");
    no_hang("settled", inspection.settled()).await
}

/// What each node keeps, failing the test if one did not answer.
fn stored(inspection: &Inspection) -> Vec<&Stored> {
    inspection
        .nodes()
        .iter()
        .map(|node| match node.state() {
            NodeState::Answered(stored) => stored,
            other => panic!("{} did not answer: {other:?}", node.node()),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_confirmed_with_its_holder_and_a_released_one_is_free() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes);
    let guard = locks.lock("inspect:held", TTL).await.expect("lock");
    // The lock returned at its quorum's decision: wait for every node's
    // grant before counting them.
    no_hang("settle", locks.settle()).await;

    let inspection = inspect(&locks, "inspect:held").await;
    assert_eq!(inspection.verdict(), Verdict::Held);
    assert_eq!(inspection.kind(), Some(ResourceKind::Lock));
    assert_eq!(inspection.key(), "inspect:held");
    assert_eq!(inspection.pending(), 0);
    assert!(inspection.failures().is_empty());
    let holder = inspection.holder().expect("a holder");
    assert!(holder.token().is(guard.token()));
    assert_eq!(holder.nodes(), 3);
    let ttl = holder.ttl().expect("the lock expires");
    assert!(ttl <= TTL && !ttl.is_zero(), "{ttl:?}");
    for stored in stored(&inspection) {
        let lock = stored.lock().expect("held on every node");
        assert!(lock.token().is(guard.token()));
        assert_eq!(stored.fence(), None);
    }

    guard.release().await.expect("release");
    no_hang("settle", locks.settle()).await;
    let inspection = inspect(&locks, "inspect:held").await;
    assert_eq!(inspection.verdict(), Verdict::Free);
    assert!(inspection.holder().is_none());
    assert!(inspection.claims().is_empty());
    assert_eq!(inspection.kind(), None, "nothing is kept");
    assert!(stored(&inspection).iter().all(|s| s.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_shows_its_counter_which_outlives_it() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes);
    let guard = locks
        .lock_fenced("inspect:fenced", TTL)
        .await
        .expect("lock");
    let fence = guard.fence().expect("fenced");
    // Every node's counter is raised to the fence before the grant is
    // followed to its end.
    no_hang("settle", locks.settle()).await;

    let inspection = inspect(&locks, "inspect:fenced").await;
    assert_eq!(inspection.verdict(), Verdict::Held);
    assert_eq!(inspection.kind(), Some(ResourceKind::Lock));
    assert!(inspection.holder().expect("held").token().is(guard.token()));
    for stored in stored(&inspection) {
        assert!(stored.fence() >= Some(fence), "{stored:?}");
    }
    // The lock's keys, and a fair lock's line beside them.
    assert_eq!(
        inspection.keys_for(ResourceKind::Lock),
        [
            "inspect:fenced",
            "inspect:fenced:fence",
            "inspect:fenced:queue",
            "inspect:fenced:queue:leases",
            "inspect:fenced:queue:ticket"
        ]
    );

    guard.release().await.expect("release");
    let inspection = inspect(&locks, "inspect:fenced").await;
    assert_eq!(inspection.verdict(), Verdict::Free);
    assert_eq!(
        inspection.kind(),
        Some(ResourceKind::Lock),
        "the counter stays"
    );
    assert!(stored(&inspection).iter().all(|s| s.fence() >= Some(fence)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphores_permits_are_confirmed_by_slot() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes);
    let semaphore = locks.semaphore("inspect:sem", 3);
    let a = semaphore.try_acquire(TTL).await.expect("permit");
    let b = semaphore.try_acquire(TTL).await.expect("permit");
    no_hang("settle", locks.settle()).await;

    let inspection = inspect(&locks, "inspect:sem").await;
    assert_eq!(inspection.verdict(), Verdict::Held);
    assert_eq!(inspection.kind(), Some(ResourceKind::Semaphore));
    assert_eq!(inspection.permit_count(), Some(3));
    let permits: Vec<_> = inspection
        .confirmed()
        .filter(|c| matches!(c.what(), Claimed::Permit(_)))
        .collect();
    assert_eq!(permits.len(), 2, "{inspection:?}");
    for guard in [&a, &b] {
        assert!(
            permits.iter().any(|p| p.token().is(guard.token())),
            "{inspection:?}"
        );
    }
    for stored in stored(&inspection) {
        assert_eq!(stored.permit_count(), Some(3));
        assert_eq!(stored.permits().len(), 2);
        assert!(stored.permits().iter().all(|p| p.slot() < 3));
    }
    assert_eq!(
        inspection.keys_for(ResourceKind::Semaphore),
        [
            "inspect:sem:permits",
            "inspect:sem:permit:0",
            "inspect:sem:permit:1",
            "inspect:sem:permit:2"
        ]
    );

    a.release().await.expect("release");
    b.release().await.expect("release");
    let inspection = inspect(&locks, "inspect:sem").await;
    assert_eq!(inspection.verdict(), Verdict::Free);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rwlocks_readers_writer_and_waiting_writer_are_seen() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes);
    let rw = locks.rwlock("inspect:rw");
    let r1 = rw.try_read(TTL).await.expect("read");
    let r2 = rw.try_read(TTL).await.expect("read");
    // Refused by the readers: it leaves its mark on the nodes that refused
    // it (a quorum at least; a node it did not wait for is cleaned up).
    let refused = rw.try_write(TTL).await.expect_err("readers hold it");
    assert!(matches!(refused, Error::Contended { .. }), "{refused}");
    no_hang("settle", locks.settle()).await;

    let inspection = inspect(&locks, "inspect:rw").await;
    assert_eq!(inspection.verdict(), Verdict::Held);
    assert_eq!(inspection.kind(), Some(ResourceKind::RwLock));
    let readers: Vec<_> = inspection
        .confirmed()
        .filter(|c| c.what() == Claimed::Reader)
        .collect();
    assert_eq!(readers.len(), 2, "{inspection:?}");
    for guard in [&r1, &r2] {
        assert!(readers.iter().any(|r| r.token().is(guard.token())));
    }
    for stored in stored(&inspection) {
        assert_eq!(stored.readers().len(), 2);
        assert!(
            stored
                .readers()
                .iter()
                .all(|r| r.ttl().is_some_and(|t| t <= TTL))
        );
        assert!(stored.writer().is_none());
    }
    let waiting = stored(&inspection)
        .iter()
        .filter(|s| s.writer_waiting())
        .count();
    assert!(waiting >= locks.quorum(), "{inspection:?}");

    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let writer = rw.try_write(TTL).await.expect("write");
    let inspection = inspect(&locks, "inspect:rw").await;
    assert_eq!(inspection.verdict(), Verdict::Held);
    let confirmed: Vec<_> = inspection.confirmed().collect();
    assert!(
        matches!(&confirmed[..], [w] if w.what() == Claimed::Writer && w.token().is(writer.token())),
        "{inspection:?}"
    );
    writer.release().await.expect("release");
    let inspection = inspect(&locks, "inspect:rw").await;
    assert_eq!(inspection.verdict(), Verdict::Free);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_shows_its_leader_then_the_last_one() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes);
    let election = locks.election("inspect:e");
    let leadership = election.campaign("web-1", TTL).await.expect("campaign");
    no_hang("settle", locks.settle()).await;

    let inspection = inspect(&locks, "inspect:e").await;
    assert_eq!(inspection.verdict(), Verdict::Held);
    assert_eq!(inspection.kind(), Some(ResourceKind::Election));
    let leader = inspection.leader().expect("a leader");
    assert_eq!(
        (leader.term(), leader.value()),
        (leadership.term(), "web-1")
    );
    assert_eq!(Some(leader.token()), inspection.holder().map(|h| h.token()));
    assert_eq!(
        inspection.keys_for(ResourceKind::Election),
        ["inspect:e", "inspect:e:fence", "inspect:e:leader"]
    );

    let term = leadership.term();
    leadership.resign().await.expect("resign");
    let inspection = inspect(&locks, "inspect:e").await;
    assert_eq!(inspection.verdict(), Verdict::Free);
    // The value outlives its leader a while: still an election.
    assert_eq!(inspection.kind(), Some(ResourceKind::Election));
    assert!(inspection.leader().is_none());
    let last = inspection.last_leader().expect("the last leader");
    assert_eq!((last.term(), last.value()), (term, "web-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_not_a_lock() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes);
    for server in &nodes {
        let _: () = conn(&server.url())
            .await
            .hset("inspect:hash", "field", "value")
            .await
            .expect("HSET");
    }
    let inspection = inspect(&locks, "inspect:hash").await;
    assert_eq!(inspection.verdict(), Verdict::Free);
    assert_eq!(inspection.kind(), Some(ResourceKind::Lock));
    for stored in stored(&inspection) {
        assert_eq!(stored.other_type(), Some("hash"));
        assert!(stored.lock().is_none());
    }
}

/// One of five nodes is paused and the node timeout is far beyond the hang
/// guard: an inspection that waited for the paused node would hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_minority_node_is_not_waited_for_then_is_followed() {
    const FROZEN: usize = 4;
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(600))
        .build()
        .expect("config");
    warm(&locks, TTL).await;
    let guard = locks.lock("inspect:paused", TTL).await.expect("lock");
    let election = locks.election("inspect:paused-e");
    let leadership = election.campaign("web-2", TTL).await.expect("campaign");
    no_hang("settle", locks.settle()).await;
    let paused = Paused::new(&nodes[FROZEN]);

    let held = no_hang("inspect", locks.inspect("inspect:paused"))
        .await
        .expect("inspect");
    assert_eq!(held.verdict(), Verdict::Held);
    assert!(held.holder().expect("held").token().is(guard.token()));
    assert!(matches!(held.nodes()[FROZEN].state(), NodeState::Pending));
    assert!(held.pending() >= 1);
    assert!(held.failures().is_empty(), "{:?}", held.failures());

    let free = no_hang("inspect", locks.inspect("inspect:nothing"))
        .await
        .expect("inspect");
    assert_eq!(free.verdict(), Verdict::Free);
    assert!(matches!(free.nodes()[FROZEN].state(), NodeState::Pending));

    let led = no_hang("inspect", locks.inspect("inspect:paused-e"))
        .await
        .expect("inspect");
    assert_eq!(led.verdict(), Verdict::Held);
    assert_eq!(led.leader().map(|l| l.value()), Some("web-2"));

    // The paused node's reads are still followed.
    assert!(locks.settle().now_or_never().is_none());
    drop(paused);
    let held = no_hang("settled", held.settled()).await;
    assert_eq!(held.pending(), 0);
    assert!(held.holder().is_some_and(|h| h.nodes() == 5), "{held:?}");
    let stored = stored(&held);
    assert!(
        stored[FROZEN]
            .lock()
            .is_some_and(|l| l.token().is(guard.token()))
    );
    no_hang("settled", free.settled()).await;
    no_hang("settled", led.settled()).await;
    leadership.resign().await.expect("resign");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_nodes_to_tell_is_unknown() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = manager(&nodes);
    let guard = locks.lock("inspect:unknown", TTL).await.expect("lock");
    no_hang("settle", locks.settle()).await;
    nodes[1].kill();
    nodes[2].kill();
    let inspection = inspect(&locks, "inspect:unknown").await;
    assert_eq!(inspection.verdict(), Verdict::Unknown);
    assert!(inspection.holder().is_none());
    assert_eq!(inspection.failures().len(), 2, "{inspection:?}");
    let claims = inspection.claims();
    assert!(
        matches!(claims, [c] if c.token().is(guard.token()) && c.nodes() == 1 && !c.is_confirmed()),
        "{claims:?}"
    );
    assert!(matches!(
        inspection.nodes()[1].state(),
        NodeState::Failed(NodeError::Redis(_) | NodeError::Timeout(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspecting_writes_nothing_and_never_shows_a_token_in_full() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(NODE_TIMEOUT)
        .key_prefix("app:")
        .build()
        .expect("config");
    for name in ["nothing", "{tagged}:x"] {
        let inspection = inspect(&locks, name).await;
        assert_eq!(inspection.verdict(), Verdict::Free);
    }
    assert_eq!(keys_left(&nodes, "").await, Vec::<String>::new());

    let guard = locks.lock("job", TTL).await.expect("lock");
    let inspection = inspect(&locks, "job").await;
    assert_eq!(inspection.key(), "app:job");
    assert!(inspection.holder().is_some());
    let token = guard.token().as_str();
    let shown = format!("{inspection:?}");
    assert!(!shown.contains(&token[..8]), "{shown}");
    assert!(shown.contains(&token[..4]), "{shown}");
    let holder = inspection.holder().expect("held");
    assert_eq!(holder.token().to_string(), format!("{}…", &token[..4]));
    guard.release().await.expect("release");

    let err = locks.inspect("").await.expect_err("empty");
    assert!(
        matches!(err, Error::InvalidArgument(ArgumentError::EmptyResource)),
        "{err}"
    );
}

#[test]
fn inspections_can_be_sent_and_shared_and_inspecting_spawned() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Inspection>();
    fn spawnable(locks: Redlock) {
        drop(tokio::spawn(async move {
            let inspection = locks.inspect("x").await?;
            Ok::<_, Error>(inspection.settled().await)
        }));
    }
    let _ = spawnable;
}
