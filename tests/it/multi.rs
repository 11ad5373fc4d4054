//! Multi-resource locks: all or none per node, no deadlock between
//! overlapping requests in any order, nothing left behind on failure.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::testkit::RedisNodes;
use quorumlock::{ArgumentError, Error, Retry};
use redis::AsyncCommands;
use support::{builder, conn, no_hang, values};

const TTL: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_requests_in_opposite_orders_both_finish_exclusively() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .retry(
            Retry::forever()
                .delay(Duration::from_millis(2))
                .jitter(Duration::from_millis(10)),
        )
        .build()
        .expect("config");
    // How many holders are inside a section that includes "b" right now.
    let inside_b = Arc::new(AtomicUsize::new(0));
    let sets: [&'static [&'static str]; 2] = [&["a", "b", "c"], &["c", "b", "a"]];
    let tasks: Vec<_> = sets
        .into_iter()
        .chain([&["b", "d"][..], &["d", "a"][..]])
        .map(|set| {
            let (locks, inside_b) = (locks.clone(), inside_b.clone());
            tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = locks.lock_many(set, TTL).await.expect("lock_many");
                    let holds_b = set.contains(&"b");
                    if holds_b {
                        assert_eq!(
                            inside_b.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two holders of b"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    if holds_b {
                        inside_b.fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        no_hang("a multi-lock task (deadlock?)", task)
            .await
            .expect("task");
    }
    // release and cleanup return at the decision; the other nodes follow
    locks.settle().await;
    for key in ["a", "b", "c", "d"] {
        assert_eq!(values(&nodes, key).await, [None, None, None], "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_of_ab_excludes_bc_and_the_refusal_leaves_c_free() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .retry(Retry::none())
        .build()
        .expect("config");
    let ab = locks.lock_many(&["a", "b"], TTL).await.expect("lock_many");
    assert_eq!(ab.resource(), "a+b");
    let err = locks
        .try_lock_many(&["b", "c"], TTL)
        .await
        .expect_err("b is held");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    let err = locks
        .lock_many(&["c", "b"], TTL)
        .await
        .expect_err("b is held");
    assert!(err.is_retryable(), "{err}");
    locks.settle().await;
    assert_eq!(values(&nodes, "c").await, [None, None, None], "c untouched");
    // c alone is free.
    locks
        .try_lock("c", TTL)
        .await
        .expect("c is free")
        .release()
        .await
        .expect("release");
    // A quorum at least (a straggler may still be on its way to the third).
    assert!(ab.release().await.expect("release").released() >= locks.quorum());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_multi_lock_leaves_no_key() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .retry(Retry::none())
        .build()
        .expect("config");
    // "y" is someone else's on two of three nodes: the third grants x and y,
    // and must give both back.
    for i in 0..2 {
        let _: () = conn(&nodes[i].url())
            .await
            .set_ex("y", "other", 60)
            .await
            .expect("SET");
    }
    let err = locks
        .try_lock_many(&["x", "y"], TTL)
        .await
        .expect_err("contended");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    locks.settle().await;
    assert_eq!(values(&nodes, "x").await, [None, None, None]);
    assert_eq!(
        values(&nodes, "y").await,
        [Some("other".into()), Some("other".into()), None]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_is_renewed_and_released_as_one() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks
        .lock_many(&["m1", "m2", "m3"], Duration::from_millis(400))
        .await
        .expect("lock");
    guard.auto_extend();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(guard.loss_reason().is_none(), "kept alive past three ttls");
    for key in ["m1", "m2", "m3"] {
        // Renewed on a quorum (a straggler may have missed the first grant).
        assert!(
            support::holding(&nodes, key, guard.token().as_str()).await >= 2,
            "{key}"
        );
    }
    guard.extend(TTL).await.expect("extend all keys");
    assert!(guard.release().await.expect("release").released() >= 2);
    locks.settle().await;
    for key in ["m1", "m2", "m3"] {
        assert_eq!(values(&nodes, key).await, [None, None, None]);
    }
}

#[tokio::test]
async fn bad_resource_lists_are_typed_errors() {
    let locks = quorumlock::Redlock::new(["redis://127.0.0.1:1"]).expect("config");
    let err = locks.lock_many(&[], TTL).await.expect_err("empty");
    assert!(
        matches!(err, Error::InvalidArgument(ArgumentError::NoResources)),
        "{err}"
    );
    let err = locks
        .try_lock_many(&["a", "b", "a"], TTL)
        .await
        .expect_err("duplicate");
    assert!(
        matches!(err, Error::InvalidArgument(ArgumentError::DuplicateResource { ref resource }) if resource == "a"),
        "{err}"
    );
    let err = locks
        .lock_many(&["a", ""], TTL)
        .await
        .expect_err("empty name");
    assert!(
        matches!(err, Error::InvalidArgument(ArgumentError::EmptyResource)),
        "{err}"
    );
}
