//! Fencing tokens at work: a holder is paused (think of a long GC pause)
//! past its lock's deadline, a second client takes the lock and writes, and
//! then the first one wakes up and writes too — believing it still holds
//! the lock. A toy storage that remembers the highest fence it has seen
//! rejects that stale write; no lock alone could have stopped it.
//!
//!     cargo run --example fencing --features testkit

use std::sync::Mutex;
use std::time::Duration;

use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, Redlock, Retry};

/// Storage that accepts a write only if its fence is at least the highest
/// fence it has accepted so far.
#[derive(Default)]
struct Storage {
    state: Mutex<(u64, Vec<String>)>,
}

impl Storage {
    fn write(&self, fence: u64, record: &str) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (highest, records) = &mut *state;
        if fence < *highest {
            return Err(format!(
                "rejected `{record}`: fence {fence} is older than {highest}"
            ));
        }
        *highest = fence;
        records.push(record.to_owned());
        Ok(())
    }

    fn records(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = RedisNodes::start(3)?;
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .retry(
            Retry::default()
                .unlimited_attempts()
                .wait(Duration::from_secs(10))
                .delay(Duration::from_millis(50))
                .jitter(Duration::from_millis(50)),
        )
        .build()?;
    let storage = Storage::default();
    let ttl = Duration::from_millis(500);

    let a = locks.lock_fenced("ledger", ttl).await?;
    let fence_a = a.fence().ok_or("a fenced lock carries a fence")?;
    storage.write(fence_a, "A: balance = 100")?;
    println!("A holds `ledger` with fence {fence_a} and writes: accepted");

    println!("A is paused (a long GC pause); its lock expires meanwhile");
    let b = locks.lock_fenced("ledger", ttl).await?;
    let fence_b = b.fence().ok_or("a fenced lock carries a fence")?;
    storage.write(fence_b, "B: balance = 50")?;
    println!("B gets the lock with fence {fence_b} and writes: accepted");

    println!("A wakes up, still believing it holds the lock, and writes");
    match storage.write(fence_a, "A: balance = 200") {
        Ok(()) => return Err("the storage accepted a stale write".into()),
        Err(why) => println!("  the storage {why}"),
    }
    match a.release().await {
        Err(Error::Lost { reason, .. }) => {
            println!("  A's release confirms it had lost the lock ({reason})")
        }
        other => println!("  A's release: {other:?}"),
    }
    b.release().await?;

    println!("records kept: {:?}", storage.records());
    Ok(())
}
