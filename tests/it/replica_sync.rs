//! Replica sync (`RedlockBuilder::replica_sync`): a node's write counts
//! only once its replicas acknowledged it, on a real master with a real
//! replica.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{RedisServer, ServerOptions};
use quorumlock::{ConfigError, Error, NodeError, Redlock, Retry};
use redis::AsyncCommands;
use support::{conn, no_hang};

/// A master with one replica in sync.
async fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start().expect("master");
    let replica = RedisServer::start_with(
        ServerOptions::new()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master.port().to_string()),
    )
    .expect("replica");
    no_hang("replication", async {
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn(&master.url()).await)
                .await
                .expect("INFO");
            if info.contains("connected_slaves:1") && info.contains("state=online") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    (master, replica)
}

fn synced(master: &RedisServer, wait: Duration) -> Redlock {
    Redlock::builder()
        .node(master.url())
        // Generous: a loaded machine must not time the node out; WAIT's own
        // timeout is what the tests are about.
        .node_timeout(Duration::from_secs(10))
        .retry(Retry::none())
        .replica_sync(1, wait)
        .build()
        .expect("config")
}

async fn get(url: &str, key: &str) -> Option<String> {
    conn(url).await.get(key).await.expect("GET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_lock_is_on_the_replica_when_it_is_granted() {
    let (master, replica) = master_and_replica().await;
    let locks = synced(&master, Duration::from_secs(10));
    let ttl = Duration::from_secs(30);

    let guard = no_hang("lock", locks.lock("jobs:a", ttl))
        .await
        .expect("lock");
    // WAIT returned 1: the replica holds the write already.
    assert_eq!(
        get(&replica.url(), "jobs:a").await.as_deref(),
        Some(guard.token().as_str())
    );
    no_hang("extend", guard.extend(ttl)).await.expect("extend");
    no_hang("release", guard.release()).await.expect("release");

    // The scripts go through the same path (EVALSHA, and EVAL on NOSCRIPT).
    let fenced = no_hang("fenced", locks.lock_fenced("jobs:b", ttl))
        .await
        .expect("fenced");
    let fence = fenced.fence().expect("fence").to_string();
    assert_eq!(
        get(&replica.url(), "jobs:b:fence").await.as_deref(),
        Some(fence.as_str())
    );
    no_hang("release", fenced.release()).await.expect("release");
    let many = no_hang("many", locks.lock_many(&["jobs:c", "jobs:d"], ttl))
        .await
        .expect("many");
    assert_eq!(
        get(&replica.url(), "jobs:d").await.as_deref(),
        Some(many.token().as_str())
    );
    no_hang("release", many.release()).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_write_is_not_a_yes_and_is_cleaned_up() {
    let (master, replica) = master_and_replica().await;
    // Long enough for a healthy replica on a loaded machine to acknowledge
    // the first lock (200 ms was not, in CI); the paused replica below
    // never acknowledges, whatever the timeout.
    let locks = synced(&master, Duration::from_secs(2));
    let ttl = Duration::from_secs(30);
    let guard = no_hang("lock", locks.lock("jobs:held", ttl))
        .await
        .expect("lock while the replica answers");

    replica.pause().expect("pause");
    let err = no_hang("try_lock", locks.try_lock("jobs:a", ttl))
        .await
        .expect_err("no acknowledgement, no lock");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        matches!(
            err.node_failures()[0].error,
            NodeError::ReplicasBehind {
                acknowledged: 0,
                wanted: 1,
                ..
            }
        ),
        "{err:?}"
    );
    // The write landed on the master; the failed attempt removed it.
    no_hang("settle", locks.settle()).await;
    assert_eq!(get(&master.url(), "jobs:a").await, None);

    // An extension is a write too.
    let err = no_hang("extend", guard.extend(ttl))
        .await
        .expect_err("no acknowledgement, no extension");
    assert!(
        err.node_failures()
            .iter()
            .any(|f| matches!(f.error, NodeError::ReplicasBehind { .. })),
        "{err:?}"
    );
    replica.resume().expect("resume");
}

#[test]
fn replica_sync_is_validated() {
    let build = |replicas, timeout| {
        Redlock::builder()
            .node("redis://127.0.0.1:1")
            .replica_sync(replicas, timeout)
            .build()
    };
    for (replicas, timeout) in [(0, Duration::from_millis(50)), (1, Duration::ZERO)] {
        assert!(
            matches!(
                build(replicas, timeout),
                Err(Error::InvalidConfig(ConfigError::ReplicaSync(_)))
            ),
            "{replicas} {timeout:?}"
        );
    }
    assert!(build(1, Duration::from_millis(1)).is_ok());
    assert!(matches!(
        Redlock::builder()
            .cluster(["redis://127.0.0.1:1"])
            .replica_sync(1, Duration::from_millis(50))
            .build(),
        Err(Error::InvalidConfig(ConfigError::ReplicaSync(_)))
    ));
}
