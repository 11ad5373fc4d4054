//! Take, extend and release a lock, printing what happens.
//!
//! Against your own nodes:
//!     QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!         cargo run --example quickstart --features testkit
//! Without QUORUMLOCK_NODES it starts three local redis-server nodes itself.

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock::testkit::RedisNodes;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the spawned nodes alive until the end of main; they stop on drop.
    let (urls, _local_nodes) = match std::env::var("QUORUMLOCK_NODES") {
        Ok(list) => (list.split(',').map(str::to_owned).collect(), None),
        Err(_) => {
            let nodes = RedisNodes::start(3)?;
            println!(
                "started 3 local redis-server nodes: {}",
                nodes.urls().join(", ")
            );
            (nodes.urls(), Some(nodes))
        }
    };

    let locks = Redlock::new(&urls)?;
    println!("{} nodes, quorum {}", locks.nodes().len(), locks.quorum());

    let guard = locks
        .lock("quickstart:report", Duration::from_secs(10))
        .await?;
    println!(
        "locked `{}`, valid for {:?}",
        guard.resource(),
        guard.validity()
    );

    // A second client is kept out while we hold it.
    match locks
        .try_lock("quickstart:report", Duration::from_secs(10))
        .await
    {
        Ok(_) => println!("BUG: a second holder got in"),
        Err(e) => println!("a second try_lock is refused: {e}"),
    }

    guard.extend(Duration::from_secs(30)).await?;
    println!("extended, now valid for {:?}", guard.validity());

    // `release` returns once a quorum deleted the token; the release is
    // still on its way to the last node (followed in the background), and
    // the summary says so: "released on 2 of 3 nodes; on its way to …".
    let summary = guard.release().await?;
    println!("{summary}");
    Ok(())
}
