//! A retry policy reads as it behaves: `wait(d)` without an attempt limit
//! of its own retries until `d`, as the README configures it.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, Redlock, Retry};
use redis::AsyncCommands;
use support::{conn, no_hang};

/// Another owner holds `resource` on every node for `busy` (its ttl).
async fn held_elsewhere(nodes: &RedisNodes, resource: &str, busy: Duration) {
    for server in nodes {
        let ms = u64::try_from(busy.as_millis()).expect("ms");
        let _: () = conn(&server.url())
            .await
            .pset_ex(resource, "another owner", ms)
            .await
            .expect("PSETEX");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_deadline_waits_for_a_busy_resource() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // The README's form: a deadline, no attempt limit.
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .retry(Retry::default().wait(Duration::from_secs(8)))
        .build()
        .expect("config");
    // Busy for 2.5 s: far more than the default ten attempts (about 1.5 s).
    held_elsewhere(&nodes, "retry:busy", Duration::from_millis(2500)).await;
    let guard = no_hang("lock", locks.lock("retry:busy", Duration::from_secs(10)))
        .await
        .expect("granted once the other owner's lock expired");
    guard.release().await.expect("release");

    // An attempt limit set beside the deadline still applies.
    let limited = Redlock::builder()
        .nodes(nodes.urls())
        .retry(Retry::default().attempts(2).wait(Duration::from_secs(8)))
        .build()
        .expect("config");
    held_elsewhere(&nodes, "retry:busy", Duration::from_secs(60)).await;
    let error = no_hang("lock", limited.lock("retry:busy", Duration::from_secs(10)))
        .await
        .expect_err("two attempts, both contended");
    assert!(matches!(error, Error::Contended { .. }), "{error}");
}
