//! Metrics (feature `metrics`): a lock, an extension, a release, a
//! contended attempt and a lost lock record what the crate docs' table
//! says, and no label carries a token or a resource name; an election's
//! campaign counts as an acquisition, as a lock does.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use quorumlock::testkit::RedisNodes;
use quorumlock::{ArgumentError, Error, LossReason, Retry};
use support::{builder, no_hang};

/// Every metric as `name{label=value,…}` (labels sorted) with its value.
fn snapshot(snapshotter: &Snapshotter) -> HashMap<String, DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn counter(metrics: &HashMap<String, DebugValue>, key: &str) -> u64 {
    match metrics.get(key) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{key}: {other:?} in {:#?}", metrics.keys()),
    }
}

// Current-thread runtime: everything this test starts (renewals, drops)
// runs on this thread, where the recorder set here counts it. The other
// tests of this binary run on other threads: not counted.
#[tokio::test]
async fn a_lock_extend_release_and_loss_record_what_the_table_says() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = ::metrics::set_default_local_recorder(&recorder);

    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let ttl = Duration::from_secs(1);

    let guard = locks.lock("metered", ttl).await.expect("lock");
    let token = guard.token().as_str().to_owned();
    guard.extend(ttl).await.expect("extend");
    let rival = builder(&nodes)
        .retry(Retry::none())
        .build()
        .expect("config");
    rival.try_lock("metered", ttl).await.expect_err("contended");
    guard.release().await.expect("release");

    // A lock lost to a majority of dead nodes.
    let lost = locks.lock("metered", ttl).await.expect("lock");
    lost.auto_extend();
    nodes[0].kill();
    nodes[1].kill();
    assert_eq!(
        no_hang("lost()", lost.lost()).await,
        LossReason::Unreachable
    );
    drop(lost);

    let metrics = snapshot(&snapshotter);
    assert_eq!(
        counter(&metrics, "quorumlock_acquisitions_total{outcome=granted}"),
        2
    );
    assert_eq!(
        counter(&metrics, "quorumlock_acquisitions_total{outcome=contended}"),
        1
    );
    assert!(matches!(
        metrics.get("quorumlock_acquire_seconds{outcome=granted}"),
        Some(DebugValue::Histogram(samples)) if samples.len() == 2
    ));
    assert!(matches!(
        metrics.get("quorumlock_acquire_attempts{outcome=contended}"),
        Some(DebugValue::Histogram(samples)) if samples.iter().all(|a| a.into_inner() == 1.0)
    ));
    assert_eq!(
        counter(&metrics, "quorumlock_extensions_total{outcome=extended}"),
        1
    );
    assert_eq!(
        counter(&metrics, "quorumlock_releases_total{outcome=released}"),
        1
    );
    assert_eq!(
        counter(&metrics, "quorumlock_releases_total{outcome=dropped}"),
        1
    );
    assert_eq!(
        counter(&metrics, "quorumlock_locks_lost_total{reason=unreachable}"),
        1
    );
    assert!(counter(&metrics, "quorumlock_renewals_total{outcome=failed}") >= 1);
    let renewal_calls: u64 = metrics
        .keys()
        .filter(|k| k.starts_with("quorumlock_renewal_calls_total{node="))
        .map(|k| counter(&metrics, k))
        .sum();
    assert!(renewal_calls >= 1);
    let node_errors: u64 = metrics
        .keys()
        .filter(|k| k.starts_with("quorumlock_node_errors_total{"))
        .map(|k| counter(&metrics, k))
        .sum();
    assert!(node_errors >= 1, "the dead nodes failed requests");
    // Both locks ended: none held.
    assert!(matches!(
        metrics.get("quorumlock_locks_held{}"),
        Some(DebugValue::Gauge(held)) if held.into_inner() == 0.0
    ));
    for key in metrics.keys() {
        assert!(!key.contains(&token), "a token in {key}");
        assert!(!key.contains("metered"), "a resource name in {key}");
    }
}

/// The samples of histogram `key`.
fn samples(metrics: &HashMap<String, DebugValue>, key: &str) -> Vec<f64> {
    match metrics.get(key) {
        Some(DebugValue::Histogram(samples)) => samples.iter().map(|s| s.into_inner()).collect(),
        other => panic!("{key}: {other:?} in {:#?}", metrics.keys()),
    }
}

// Current-thread runtime, as above.
#[tokio::test]
async fn a_campaign_is_counted_as_an_acquisition() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = ::metrics::set_default_local_recorder(&recorder);

    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let ttl = Duration::from_secs(5);

    let election = locks.election("metered-election");
    let leadership = no_hang("campaign", election.campaign("me", ttl))
        .await
        .expect("campaign");
    leadership.resign().await.expect("resign");
    let term = no_hang(
        "with_leadership",
        election.with_leadership("me", ttl, |lease| async move { lease.fence() }),
    )
    .await
    .expect("with_leadership");
    assert!(term.is_some());
    // Refused before any I/O: an acquisition of no attempts.
    let refused = locks.election("").campaign("me", ttl).await;
    assert!(
        matches!(
            refused,
            Err(Error::InvalidArgument(ArgumentError::EmptyResource))
        ),
        "{refused:?}"
    );

    let metrics = snapshot(&snapshotter);
    assert_eq!(
        counter(&metrics, "quorumlock_acquisitions_total{outcome=granted}"),
        2
    );
    // At least one attempt each (more if a loaded node was slow).
    let attempts = samples(&metrics, "quorumlock_acquire_attempts{outcome=granted}");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert!(attempts.iter().all(|&a| a >= 1.0), "{attempts:?}");
    assert_eq!(
        samples(&metrics, "quorumlock_acquire_seconds{outcome=granted}").len(),
        2
    );
    assert_eq!(
        counter(
            &metrics,
            "quorumlock_acquisitions_total{outcome=invalid_argument}"
        ),
        1
    );
    assert_eq!(
        samples(
            &metrics,
            "quorumlock_acquire_attempts{outcome=invalid_argument}"
        ),
        [0.0]
    );
    for key in metrics.keys() {
        assert!(
            !key.contains("metered-election"),
            "an election's name in {key}"
        );
    }
}

// Current-thread runtime, as above: the tracking connection's task runs
// here and is counted.
#[tokio::test]
async fn a_held_lock_taken_on_a_majority_is_renewed_at_once_and_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = ::metrics::set_default_local_recorder(&recorder);

    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    // Ten minutes: no scheduled renewal runs during the test.
    let guard = locks
        .lock("watched", Duration::from_secs(600))
        .await
        .expect("lock");
    guard.auto_extend();
    for i in [0, 1] {
        let mut c = support::conn(&nodes[i].url()).await;
        let () = redis::pipe()
            .atomic()
            .del("watched")
            .ignore()
            .set("watched", "another-owner")
            .ignore()
            .query_async(&mut c)
            .await
            .expect("take the key");
    }
    assert_eq!(no_hang("lost", guard.lost()).await, LossReason::TokenGone);
    let metrics = snapshot(&snapshotter);
    assert!(counter(&metrics, "quorumlock_renewals_woken_total{}") >= 1);
    assert_eq!(
        counter(&metrics, "quorumlock_renewals_total{outcome=lost}"),
        1
    );
}
