//! A job that outlives its lock's ttl many times over, kept alive by
//! auto-extension — then a node kill that crosses the quorum, and the
//! lost-lock path it takes.
//!
//!     cargo run --example auto_extend --features testkit

use std::time::Duration;

use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, Redlock};
use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = &RedisNodes::start(5)?;
    let locks = Redlock::new(nodes.urls())?;
    let ttl = Duration::from_secs(1);
    let started = Instant::now();
    let at = || format!("{:>5.2}s", started.elapsed().as_secs_f64());

    // 1. A 3 s job on a 1 s lock: renewals keep it, even with one node dead.
    let done = locks
        .with_lock("reports:nightly", ttl, |lease| async move {
            println!(
                "{} job 1 starts; lock valid for {:?}",
                at(),
                lease.validity()
            );
            for step in 1..=3 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if step == 1 {
                    nodes[0].kill();
                    println!("{} killed node 0 (4 of 5 left)", at());
                }
                println!(
                    "{} job 1 step {step}/3; lock still valid for {:?}",
                    at(),
                    lease.validity()
                );
            }
            "report written"
        })
        .await?;
    println!("{} job 1 finished: {done}\n", at());

    // 2. The same job, but two more nodes die: 2 of 5 cannot renew.
    let result = locks
        .with_lock("reports:nightly", ttl, |lease| async move {
            println!("{} job 2 starts", at());
            tokio::time::sleep(Duration::from_millis(300)).await;
            nodes[1].kill();
            nodes[2].kill();
            println!("{} killed nodes 1 and 2 (2 of 5 left: no quorum)", at());
            println!("{} lock deadline is in {:?}", at(), lease.validity());
            // The work would run for a minute; the loss cuts it short.
            tokio::time::sleep(Duration::from_secs(60)).await;
            "never reached"
        })
        .await;
    match result {
        Err(Error::Lost { reason, .. }) => {
            println!("{} job 2 was stopped: the lock was lost ({reason})", at())
        }
        other => println!("{} unexpected: {other:?}", at()),
    }
    Ok(())
}
