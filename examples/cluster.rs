//! A Redis Cluster as one voting node: lock hash-tagged resources such as
//! `{lock_goods}:300`, printing what happens.
//!
//! Against your own cluster (seed URLs of some of its members):
//!     QUORUMLOCK_CLUSTER=redis://127.0.0.1:7000,redis://127.0.0.1:7001 \
//!         cargo run --example cluster --features testkit
//! Without QUORUMLOCK_CLUSTER it starts a local 3-master cluster itself.
//!
//! Why hash tags matter: a cluster spreads keys over 16384 hash slots, each
//! owned by one master, and a Lua script may only touch keys of one slot
//! (otherwise CROSSSLOT). A plain lock, extend or release touches one key,
//! so any name works. Scripts over several keys — a lock key with its
//! fencing counter, or several resources locked at once — need keys that
//! share a slot, and the only way to guarantee that is a hash tag: when a
//! key contains `{…}` (not empty), only that part is hashed. So
//! `{lock_goods}:300` and `{lock_goods}:300:fence` always live on the same
//! master, whatever the cluster's layout.

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock::testkit::RedisCluster;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the spawned cluster alive until the end of main; it stops on drop.
    let (seeds, local) = match std::env::var("QUORUMLOCK_CLUSTER") {
        Ok(list) => (list.split(',').map(str::to_owned).collect(), None),
        Err(_) => {
            let cluster = RedisCluster::start(3)?;
            println!(
                "started a local 3-master Redis Cluster: {}",
                cluster.seed_urls().join(", ")
            );
            (cluster.seed_urls(), Some(cluster))
        }
    };

    // One cluster is one node, one vote: here N = 1. Add more clusters with
    // further .cluster(…) calls, or standalone masters with .nodes(…).
    let locks = Redlock::builder().cluster(&seeds).build()?;
    println!(
        "nodes: {:?}, quorum {}",
        locks.nodes().collect::<Vec<_>>(),
        locks.quorum()
    );

    let ttl = Duration::from_secs(10);
    for resource in ["{lock_goods}:300", "{lock_goods}:301", "orders:42"] {
        let guard = locks.lock(resource, ttl).await?;
        // The key went to the master owning its slot; the client followed
        // the cluster's slot map (and would follow MOVED / ASK by itself).
        if let Some(cluster) = &local {
            let master = cluster.master_for_key(resource)?;
            println!(
                "locked `{resource}` (slot {}, on the master at port {}), valid for {:?}",
                cluster.key_slot(resource)?,
                master.port(),
                guard.validity()
            );
        } else {
            println!("locked `{resource}`, valid for {:?}", guard.validity());
        }

        // A second client is kept out while we hold it.
        match locks.try_lock(resource, ttl).await {
            Ok(_) => println!("BUG: a second holder got into `{resource}`"),
            Err(e) => println!("  a second try_lock is refused: {e}"),
        }

        guard.extend(ttl * 3).await?;
        println!("  extended, now valid for {:?}", guard.validity());
        let summary = guard.release().await?;
        println!("  {summary}");
    }

    // Same tag, same slot, same master: safe to combine in one script.
    if let Some(cluster) = &local {
        println!(
            "`{{lock_goods}}:300` and `{{lock_goods}}:300:fence` share slot {} and {}; \
             `lock_goods:300` without a tag is in slot {}",
            cluster.key_slot("{lock_goods}:300")?,
            cluster.key_slot("{lock_goods}:300:fence")?,
            cluster.key_slot("lock_goods:300")?,
        );
    }
    Ok(())
}
