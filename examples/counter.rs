//! The exact counter: 200 tasks each lock, read a shared counter, sleep
//! about a millisecond, write it back plus one, and release. Any overlap of
//! two critical sections loses an update, so the result is exactly 200 only
//! if the lock excluded every time. The same run without the lock shows
//! what it prevents.
//!
//!     cargo run --example counter --features testkit

use std::time::Duration;

use quorumlock::testkit::{RedisNodes, RedisServer};
use quorumlock::{Redlock, Retry};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

const TASKS: i64 = 200;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = RedisNodes::start(5)?;
    // The counter lives in a separate store, as shared data would.
    let store = RedisServer::start()?;
    // redis-rs gives up on a reply after 500 ms by default; a busy machine
    // can take longer, and a failed SET would spoil the count.
    let patient =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    let conn = redis::Client::open(store.url())?
        .get_multiplexed_async_connection_with_config(&patient)
        .await?;
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        // 200 contenders: keep retrying, quickly, with jitter.
        .retry(
            Retry::forever()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(20)),
        )
        .build()?;

    let unlocked = count(None, conn.clone(), "counter:unlocked").await?;
    println!("without a lock: {TASKS} tasks added 1 each; the counter says {unlocked}");

    let locked = count(Some(&locks), conn, "counter:locked").await?;
    println!("with the lock:  {TASKS} tasks added 1 each; the counter says {locked}");

    if locked != TASKS {
        return Err(format!("lost updates under the lock: {locked} != {TASKS}").into());
    }
    println!("exact: no two critical sections overlapped");
    Ok(())
}

/// Runs the read–sleep–write increment in `TASKS` concurrent tasks, under
/// the lock if one is given, and returns the final count.
async fn count(
    locks: Option<&Redlock>,
    conn: MultiplexedConnection,
    key: &'static str,
) -> Result<i64, Box<dyn std::error::Error>> {
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locks, mut conn) = (locks.cloned(), conn.clone());
        tasks.push(tokio::spawn(async move {
            let guard = match &locks {
                Some(locks) => Some(locks.lock("counter-lock", Duration::from_secs(5)).await?),
                None => None,
            };
            let value: Option<i64> = conn.get(key).await?;
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _: () = conn.set(key, value.unwrap_or(0) + 1).await?;
            if let Some(guard) = guard {
                guard.release().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await?.map_err(|e| e.to_string())?;
    }
    let mut conn = conn;
    Ok(conn.get(key).await?)
}
