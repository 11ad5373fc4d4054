//! Redis Cluster deployments as voting nodes: one cluster alone, clusters
//! mixed with standalone masters, the exact counter over three clusters,
//! and a cluster losing (or failing over) one of its masters.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{RedisCluster, RedisNodes, RedisServer, ServerOptions};
use quorumlock::{Error, NodeError, Redlock, RedlockBuilder, Retry, WakeOnRelease};
use redis::AsyncCommands;
use support::{conn, no_hang, until_subscribed, values};

const TTL: Duration = Duration::from_secs(10);
/// Generous: these tests assert which nodes answered, so a loaded machine
/// must not turn a healthy node into a timed-out one.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// A fast retry policy, as the other tests use.
fn fast_retry() -> Retry {
    Retry::default()
        .attempts(5)
        .delay(Duration::from_millis(10))
        .jitter(Duration::from_millis(10))
}

/// A manager whose only node is `cluster`.
fn on_cluster(cluster: &RedisCluster) -> RedlockBuilder {
    Redlock::builder()
        .cluster(cluster.seed_urls())
        .node_timeout(NODE_TIMEOUT)
        .retry(fast_retry())
}

/// Starts `count` clusters of `masters` masters at once: each spends most
/// of its start-up waiting for Redis' cluster state to settle.
fn start_clusters(count: usize, masters: usize) -> Vec<RedisCluster> {
    std::thread::scope(|scope| {
        let starting: Vec<_> = (0..count)
            .map(|_| scope.spawn(move || RedisCluster::start(masters)))
            .collect();
        starting
            .into_iter()
            .map(|s| s.join().expect("start thread").expect("cluster"))
            .collect()
    })
}

/// What `key` holds on the master owning its slot, read directly.
async fn on_owner(cluster: &RedisCluster, key: &str) -> Option<String> {
    let master = cluster.master_for_key(key).expect("owner");
    conn(&master.url()).await.get(key).await.expect("GET")
}

/// A hash-tagged key on each master of `cluster`, in the masters' order.
fn one_key_per_master(cluster: &RedisCluster) -> Vec<String> {
    let masters = cluster.masters().expect("masters");
    let mut keys: Vec<(u16, String)> = Vec::new();
    for id in 0.. {
        let key = format!("{{goods_{id}}}:300");
        let owner = cluster.master_for_key(&key).expect("owner").port();
        if !keys.iter().any(|(port, _)| *port == owner) {
            keys.push((owner, key));
        }
        if keys.len() == masters.len() {
            break;
        }
    }
    keys.into_iter().map(|(_, key)| key).collect()
}

/// Locks and releases `resource` until all `nodes` held it. A decision does
/// not wait for stragglers, so one attempt may end before a node (a cold
/// cluster connection, say) has granted; each node that stays out forever
/// makes this hang, and the test fail.
async fn all_grant(locks: &Redlock, resource: &str, nodes: usize) {
    no_hang("every node grants", async {
        loop {
            let guard = locks.lock(resource, TTL).await.expect("lock");
            if support::release_settled(guard).await == nodes {
                break;
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_alone_is_a_single_node_redlock() {
    let cluster = RedisCluster::start(3).expect("cluster");
    let locks = on_cluster(&cluster).build().expect("config");
    assert_eq!(locks.quorum(), 1);
    assert!(
        locks
            .nodes()
            .next()
            .expect("one node")
            .starts_with("cluster(")
    );

    let mut resources = vec!["{lock_goods}:300".to_owned(), "orders:42".to_owned()];
    resources.extend(one_key_per_master(&cluster));
    for resource in &resources {
        let guard = no_hang("lock", locks.lock(resource, TTL))
            .await
            .expect("lock");
        // Stored once, on the master that owns the key's slot.
        assert_eq!(
            on_owner(&cluster, resource).await.as_deref(),
            Some(guard.token().as_str()),
            "{resource}"
        );
        let err = locks.try_lock(resource, TTL).await.expect_err("held");
        assert!(matches!(err, Error::Contended { .. }), "{err}");

        guard.extend(TTL * 2).await.expect("extend");
        let master = cluster.master_for_key(resource).expect("owner");
        let pttl: i64 = conn(&master.url())
            .await
            .pttl(resource)
            .await
            .expect("PTTL");
        assert!(pttl > TTL.as_millis() as i64, "extended: pttl {pttl}");

        let summary = guard.release().await.expect("release").settled().await;
        assert_eq!((summary.released(), summary.asked()), (1, 1));
        assert_eq!(on_owner(&cluster, resource).await, None, "{resource}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_and_standalone_masters_vote_together() {
    // Five votes, seven processes: two 2-master clusters and three masters.
    let clusters = start_clusters(2, 2);
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = Redlock::builder()
        .cluster(clusters[0].seed_urls())
        .nodes(nodes.urls())
        .cluster(clusters[1].seed_urls())
        .node_timeout(NODE_TIMEOUT)
        .retry(fast_retry())
        .build()
        .expect("config");
    assert_eq!((locks.nodes().len(), locks.quorum()), (5, 3));

    let resource = "{lock_goods}:300";
    all_grant(&locks, resource, 5).await;

    // A minority down — one whole cluster and one master — still grants.
    for server in &clusters[1] {
        server.kill();
    }
    nodes[0].kill();
    let guard = no_hang("lock with 2 of 5 down", locks.lock(resource, TTL))
        .await
        .expect("3 of 5 suffice");
    let summary = guard.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 3);
    let mut failed: Vec<&str> = summary.failures().iter().map(|f| &*f.node).collect();
    failed.sort_unstable();
    let mut down = vec![
        locks.nodes().nth(4).expect("cluster 1"),
        locks.nodes().nth(1).expect("node 0"),
    ];
    down.sort_unstable();
    assert_eq!(failed, down);

    // A majority down fails, naming the dead cluster as one node.
    nodes[1].kill();
    let err = no_hang("lock with 3 of 5 down", locks.lock(resource, TTL))
        .await
        .expect_err("2 of 5 cannot grant");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert_eq!(err.node_failures().len(), 3, "{err}");
    assert!(err.to_string().contains("cluster("), "{err}");

    // The dead cluster comes back (empty: no persistence, no scripts
    // cached) and the same manager uses it again.
    for server in &clusters[1] {
        server.restart().expect("restart");
    }
    clusters[1].wait_ready().expect("cluster back");
    nodes[0].restart().expect("restart");
    nodes[1].restart().expect("restart");
    no_hang("every node back", async {
        loop {
            match locks.lock(resource, TTL).await {
                Ok(guard) => {
                    if support::release_settled(guard).await == 5 {
                        break;
                    }
                }
                Err(e) => assert!(e.is_retryable(), "{e}"),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_counter_on_three_clusters() {
    const TASKS: usize = 200;
    let clusters = start_clusters(3, 3);
    let store = RedisServer::start().expect("counter store");
    let mut builder = Redlock::builder().retry(
        Retry::forever()
            .delay(Duration::from_millis(30))
            .jitter(Duration::from_millis(50)),
    );
    for cluster in &clusters {
        builder = builder.cluster(cluster.seed_urls());
    }
    let locks = builder.build().expect("config");
    assert_eq!((locks.nodes().len(), locks.quorum()), (3, 2));
    let store_conn = conn(&store.url()).await;

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locks, mut conn) = (locks.clone(), store_conn.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locks.lock("{counter}:lock", TTL).await.expect("lock");
            let value: i64 = conn
                .get::<_, Option<i64>>("counter")
                .await
                .expect("GET")
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _: () = conn.set("counter", value + 1).await.expect("SET");
            guard.release().await.expect("release");
        }));
    }
    for task in tasks {
        no_hang("counter task", task).await.expect("task panicked");
    }
    let mut conn = store_conn;
    let total: i64 = conn.get("counter").await.expect("GET");
    assert_eq!(total, TASKS as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_fails_only_its_slots_on_that_node() {
    let cluster = RedisCluster::start(3).expect("cluster");
    let nodes = RedisNodes::start(2).expect("nodes");
    // Three votes: the cluster and two masters.
    let locks = Redlock::builder()
        .cluster(cluster.seed_urls())
        .nodes(nodes.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry(fast_retry())
        .build()
        .expect("config");
    let alone = on_cluster(&cluster).build().expect("config");
    let cluster_label = locks.nodes().next().expect("cluster").to_owned();

    let keys = one_key_per_master(&cluster);
    let dead_key = keys[0].as_str();
    let dead = cluster.master_for_key(dead_key).expect("owner");
    // Every node takes part (and caches the scripts) before a master dies.
    for key in &keys {
        all_grant(&locks, key, 3).await;
    }

    cluster.kill_master_owning(dead_key).expect("kill");
    for key in &keys[1..] {
        // Other slots: the cluster still votes (alone, it still locks).
        all_grant(&locks, key, 3).await;
        let guard = no_hang("lock", alone.lock(key, TTL)).await.expect("lock");
        assert_eq!(support::release_settled(guard).await, 1);
    }
    // The dead master's slots: the cluster votes Failed, the two masters
    // still make a quorum, and a cluster-only manager cannot lock at all.
    let guard = no_hang("lock", locks.lock(dead_key, TTL))
        .await
        .expect("2 of 3");
    let err = locks.try_lock(dead_key, TTL).await.expect_err("held");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    let summary = guard.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 2);
    let failed: Vec<&str> = summary.failures().iter().map(|f| &*f.node).collect();
    assert_eq!(failed, [cluster_label.as_str()]);
    let err = no_hang("lock", alone.try_lock(dead_key, TTL))
        .await
        .expect_err("the only node failed");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert_eq!(&*err.node_failures()[0].node, cluster_label, "{err}");

    // Back, empty: its script cache too, so release goes through EVAL.
    dead.restart().expect("restart");
    cluster.wait_ready().expect("cluster back");
    no_hang("dead master back", async {
        loop {
            match locks.lock(dead_key, TTL).await {
                Ok(guard) => {
                    if support::release_settled(guard).await == 3 {
                        break;
                    }
                }
                Err(e) => assert!(e.is_retryable(), "{e}"),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_script_cache_is_refilled_on_its_master_alone() {
    // redis' own NOSCRIPT reload sends SCRIPT LOAD to every member and
    // waits for all of them: with a paused master, it would hang until the
    // node timeout on keys of every other master too.
    let cluster = RedisCluster::start(3).expect("cluster");
    let locks = on_cluster(&cluster)
        .node_timeout(Duration::from_secs(2))
        .build()
        .expect("config");
    let keys = one_key_per_master(&cluster);
    let (paused_key, key) = (&keys[0], &keys[1]);
    // Connect and cache the scripts everywhere first.
    for k in &keys {
        let guard = locks.lock(k, TTL).await.expect("lock");
        guard.release().await.expect("release");
    }

    let owner = cluster.master_for_key(key).expect("owner");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn(&owner.url()).await)
        .await
        .expect("SCRIPT FLUSH");
    let paused = cluster.master_for_key(paused_key).expect("owner");
    paused.pause().expect("pause");
    let outcome = no_hang("lock, extend, release", async {
        let guard = locks.try_lock(key, TTL).await?;
        guard.extend(TTL).await?;
        guard.release().await
    })
    .await;
    paused.resume().expect("resume");
    let summary = outcome.expect("a paused master elsewhere does not matter");
    assert_eq!(summary.released(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_by_the_cluster_client() {
    let cluster = RedisCluster::start_with(3, 1, ServerOptions::new()).expect("cluster");
    let locks = on_cluster(&cluster).build().expect("config");
    let resource = "{lock_goods}:300";
    let guard = locks.lock(resource, TTL).await.expect("lock");
    guard.release().await.expect("release");

    let old = cluster.kill_master_owning(resource).expect("kill").port();
    // Until a replica is promoted the slot is down; then the client follows
    // the new topology by itself.
    let guard = no_hang("lock after failover", async {
        loop {
            match locks.lock(resource, TTL).await {
                Ok(guard) => break guard,
                Err(e) => assert!(e.is_retryable(), "{e}"),
            }
        }
    })
    .await;
    let promoted = cluster.master_for_key(resource).expect("owner");
    assert_ne!(promoted.port(), old);
    assert_eq!(
        on_owner(&cluster, resource).await.as_deref(),
        Some(guard.token().as_str())
    );
    guard
        .extend(TTL)
        .await
        .expect("extend on the promoted replica");
    assert_eq!(support::release_settled(guard).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_servers_given_as_a_cluster_never_vote() {
    // A cluster client over standalone servers has no slot map and would
    // send each request to any of them: two holders of one lock.
    let nodes = RedisNodes::start(2).expect("nodes");
    let locks = Redlock::builder()
        .cluster(nodes.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry(Retry::none())
        .build()
        .expect("config");
    for _ in 0..4 {
        let err = locks.try_lock("x", TTL).await.expect_err("not a cluster");
        assert!(matches!(err, Error::Unavailable { .. }), "{err}");
        assert!(
            matches!(err.node_failures()[0].error, NodeError::NotACluster),
            "{err}"
        );
    }
    assert_eq!(values(&nodes, "x").await, [None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_tags_make_fenced_and_multi_resource_locks_work_on_a_cluster() {
    let cluster = RedisCluster::start(3).expect("cluster");
    let standalone = RedisNodes::start(2).expect("nodes");
    // A mixed quorum: the cluster votes once, next to two standalone masters.
    let locks = on_cluster(&cluster)
        .nodes(standalone.urls())
        .build()
        .expect("config");

    let first = locks
        .lock_fenced("{lock_goods}:300", TTL)
        .await
        .expect("fenced");
    let f1 = first.fence().expect("fence");
    first.release().await.expect("release");
    let second = locks
        .lock_fenced("{lock_goods}:300", TTL)
        .await
        .expect("fenced");
    assert!(second.fence().expect("fence") > f1);
    second.release().await.expect("release");

    let many = locks
        .lock_many(&["{orders}:1", "{orders}:2", "{orders}:3"], TTL)
        .await
        .expect("lock_many");
    let err = locks
        .try_lock_many(&["{orders}:3", "{orders}:4"], TTL)
        .await
        .expect_err("{orders}:3 is held");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    many.release().await.expect("release");

    // Untagged keys of one request land in different slots: refused before
    // any I/O, with an explanation.
    for err in [
        locks
            .lock_many(&["orders:1", "orders:2"], TTL)
            .await
            .expect_err("cross-slot"),
        locks
            .lock_fenced("orders:42", TTL)
            .await
            .expect_err("cross-slot"),
    ] {
        assert!(
            matches!(
                err,
                Error::InvalidArgument(quorumlock::ArgumentError::CrossSlot { .. })
            ),
            "{err}"
        );
        assert!(err.to_string().contains("hash tag"), "{err}");
    }
    assert_eq!(on_owner(&cluster, "orders:1").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rwlocks_need_hash_tags_on_a_cluster_and_work_with_them() {
    let cluster = RedisCluster::start(3).expect("cluster");
    let standalone = RedisNodes::start(2).expect("nodes");
    let locks = on_cluster(&cluster)
        .nodes(standalone.urls())
        .build()
        .expect("config");
    // Untagged: the keys of one semaphore or rwlock land in different
    // slots, refused before any I/O.
    let errors = [
        locks
            .semaphore("api", 3)
            .try_acquire(TTL)
            .await
            .expect_err("cross-slot"),
        locks
            .rwlock("catalog")
            .try_read(TTL)
            .await
            .expect_err("cross-slot"),
    ];
    for err in errors {
        assert!(
            matches!(
                err,
                Error::InvalidArgument(quorumlock::ArgumentError::CrossSlot { .. })
            ),
            "{err}"
        );
    }
    // Tagged: they work, renewals and releases included.
    let semaphore = locks.semaphore("{api}", 2);
    let a = semaphore.try_acquire(TTL).await.expect("permit");
    let b = semaphore.try_acquire(TTL).await.expect("permit");
    assert!(matches!(
        semaphore.try_acquire(TTL).await,
        Err(Error::Contended { .. })
    ));
    a.extend(TTL).await.expect("extend");
    let rw = locks.rwlock("{catalog}");
    let r = rw.try_read(TTL).await.expect("read");
    assert!(matches!(
        rw.try_write(TTL).await,
        Err(Error::Contended { .. })
    ));
    r.extend(TTL).await.expect("extend");
    for guard in [quorumlock::LockGuard::from(a), b.into(), r.into()] {
        guard.release().await.expect("release");
    }
    let w = rw
        .try_write(TTL)
        .await
        .expect("write once the reader is gone");
    w.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_renewal_on_a_cluster_splits_by_slot() {
    let cluster = RedisCluster::start(3).expect("cluster");
    let locks = on_cluster(&cluster).build().expect("config");
    // Keys on every master: one renewal round must call each slot apart.
    let keys = one_key_per_master(&cluster);
    let mut guards = Vec::new();
    for key in &keys {
        let guard = locks.lock(key, Duration::from_secs(2)).await.expect("lock");
        guard.auto_extend();
        guards.push(guard);
    }
    // Renewed twice each (the renewals moved every deadline), never lost.
    for guard in &guards {
        support::until_renewed_on(&guard.lease(), 1).await;
    }
    for (key, guard) in keys.iter().zip(&guards) {
        assert_eq!(guard.loss_reason(), None, "{key} lost while renewed");
        assert_eq!(
            on_owner(&cluster, key).await.as_deref(),
            Some(guard.token().as_str())
        );
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_a_cluster_wakes_a_waiter() {
    let cluster = RedisCluster::start(3).expect("cluster");
    // A retry delay no test waits out: getting in means being woken.
    let waking = || {
        on_cluster(&cluster)
            .wake_on_release(WakeOnRelease::Subscribe)
            .retry(Retry::forever().delay(Duration::from_secs(3600)))
            .build()
            .expect("config")
    };
    let (holder, waiter) = (waking(), waking());
    // A key whose owner is not the first seed, which the waiter listens
    // on: the cluster forwards the announcement.
    let first_seed = cluster.iter().next().expect("a member").port();
    let resource = (0..)
        .map(|i| format!("job:{i}"))
        .find(|key| cluster.master_for_key(key).expect("owner").port() != first_seed)
        .expect("a key on another master");
    let guard = holder.lock(&resource, TTL).await.expect("lock");
    let waiting = {
        let resource = resource.clone();
        tokio::spawn(async move { waiter.lock(&resource, TTL).await })
    };
    let masters: Vec<String> = cluster
        .masters()
        .expect("masters")
        .iter()
        .map(|master| master.url())
        .collect();
    until_subscribed(&masters, &format!("{resource}:released")).await;
    guard.release().await.expect("release");
    let next = no_hang("woken waiter", waiting)
        .await
        .expect("task")
        .expect("lock");
    assert_eq!(
        on_owner(&cluster, &resource).await.as_deref(),
        Some(next.token().as_str())
    );
    next.release().await.expect("release");
}

/// Concurrent plain locks on a cluster node go out batched per hash slot:
/// keys of one hash tag share calls, keys on other masters go to theirs,
/// and every lock is held on the master owning its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_locks_on_a_cluster_are_batched_per_slot() {
    let cluster = RedisCluster::start(3).expect("cluster");
    let locks = on_cluster(&cluster).build().expect("config");
    let tags = one_key_per_master(&cluster);
    all_grant(&locks, &tags[0], 1).await;
    let keys: Vec<String> = (0..48)
        .map(|i| format!("{}:{i}", &tags[i % tags.len()]))
        .collect();
    let attempts = keys.iter().map(|key| locks.try_lock(key, TTL));
    let guards: Vec<_> = no_hang("a burst", futures::future::join_all(attempts))
        .await
        .into_iter()
        .map(|guard| guard.expect("distinct keys"))
        .collect();
    for (key, guard) in keys.iter().zip(&guards) {
        assert_eq!(
            on_owner(&cluster, key).await.as_deref(),
            Some(guard.token().as_str()),
            "{key}"
        );
    }
    let releases = guards.into_iter().map(|guard| guard.release());
    for released in futures::future::join_all(releases).await {
        assert_eq!(released.expect("release").released(), 1);
    }
    for key in &keys {
        assert_eq!(on_owner(&cluster, key).await, None, "{key}");
    }
}
