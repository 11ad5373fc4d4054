//! Leader election: three candidates take turns leading a "scheduler",
//! each doing its work only while it leads and stamping it with its term;
//! an observer watches the leader change. Then the leader is cut off (its
//! nodes are paused past the ttl) and learns it lost before anyone else
//! leads.
//!
//!     cargo run --example election --features testkit

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use quorumlock::testkit::RedisNodes;
use quorumlock::{Redlock, WakeOnRelease};
use tokio::time::Instant;

/// What the scheduler's work writes to: it keeps the highest term it has
/// seen and refuses writes from older terms.
#[derive(Default)]
struct Ledger {
    entries: Mutex<(u64, Vec<String>)>,
}

impl Ledger {
    fn write(&self, term: u64, entry: String) -> Result<(), String> {
        let mut state = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if term < state.0 {
            return Err(format!("refused `{entry}`: term {term} < {}", state.0));
        }
        state.0 = term;
        state.1.push(entry);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = RedisNodes::start(3)?;
    let manager = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .wake_on_release(WakeOnRelease::Subscribe)
            .build()
    };
    let started = Instant::now();
    let at = move || format!("{:>5.2}s", started.elapsed().as_secs_f64());
    let ttl = Duration::from_secs(1);

    // The observer: every change of leader, as a quorum of nodes confirms it.
    let observer = {
        let election = manager()?.election("scheduler");
        tokio::spawn(async move {
            let mut changes = Box::pin(election.observe());
            while let Some(change) = changes.next().await {
                match change {
                    Some(leader) => println!("{} observer: {leader} leads", at()),
                    None => println!("{} observer: no leader", at()),
                }
            }
        })
    };

    // Three candidates, two turns each: work only while leading, then resign.
    let ledger = Arc::new(Ledger::default());
    let mut candidates = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
        let (election, ledger) = (manager()?.election("scheduler"), ledger.clone());
        candidates.push(tokio::spawn(async move {
            for turn in 1..=2 {
                let leadership = election.campaign(&format!("{name}:starting"), ttl).await?;
                let term = leadership.term();
                leadership.proclaim(&format!("{name}:ready")).await?;
                ledger.write(term, format!("{name} turn {turn}"))?;
                tokio::time::sleep(Duration::from_millis(150)).await;
                println!("{} {name} resigns (term {term})", at());
                leadership.resign().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for candidate in candidates {
        candidate.await?.map_err(|e| e.to_string())?;
    }

    // A leader cut off from its nodes: renewals fail, and it knows it has
    // lost before the nodes let anyone else in.
    let election = manager()?.election("scheduler");
    let leadership = election.campaign("delta", ttl).await?;
    let old_term = leadership.term();
    println!(
        "{} delta leads in term {old_term}; its nodes are paused",
        at()
    );
    for server in &nodes {
        server.pause()?;
    }
    let reason = leadership.lost().await;
    let lost_at = Instant::now();
    println!("{} delta knows it lost: {reason}", at());
    for server in &nodes {
        server.resume()?;
    }
    let next = manager()?
        .election("scheduler")
        .campaign("epsilon", ttl)
        .await?;
    assert!(Instant::now() > lost_at && next.term() > old_term);
    println!("{} epsilon leads in term {}", at(), next.term());
    ledger.write(next.term(), "epsilon".into())?;
    match ledger.write(old_term, "delta, late".into()) {
        Ok(()) => return Err("the ledger took a write from an old term".into()),
        Err(why) => println!("{} ledger {why}", at()),
    }
    drop(leadership);
    next.resign().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    observer.abort();

    let entries = ledger.entries.lock().unwrap_or_else(|e| e.into_inner());
    println!("ledger, in term order: {:?}", entries.1);
    Ok(())
}
