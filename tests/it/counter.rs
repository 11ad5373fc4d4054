//! The exact-counter test: 200 concurrent tasks increment a counter under
//! the lock (read, sleep, write). Any overlap loses an update, so the final
//! value is exactly 200 only if the lock excluded every time — with 5 nodes
//! and with 1, and with holders that crash (never release).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::testkit::{RedisNodes, RedisServer};
use quorumlock::{Redlock, Retry};
use redis::AsyncCommands;
use support::no_hang;

const TASKS: usize = 200;

#[derive(Clone, Copy, PartialEq)]
enum Holder {
    Releases,
    /// Forgets the guard: the lock only goes away when its ttl runs out.
    Crashes,
}

async fn run_counter(nodes: usize, ttl: Duration, holder: Holder) {
    let nodes = RedisNodes::start(nodes).expect("nodes");
    let store = RedisServer::start().expect("counter store");
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .retry(
            Retry::forever()
                .delay(Duration::from_millis(30))
                .jitter(Duration::from_millis(50)),
        )
        .build()
        .expect("config");
    let store_conn = support::conn(&store.url()).await;
    // Critical sections that ended after their lock's deadline: if the count
    // is ever off, this says whether the machine stalled a holder.
    let late = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locks, mut conn, late) = (locks.clone(), store_conn.clone(), late.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let guard = locks.lock("counter-lock", ttl).await.expect("lock");
                let value: i64 = conn
                    .get::<_, Option<i64>>("counter")
                    .await
                    .expect("GET")
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(1)).await;
                // A correct client writes only while its lock is valid. A
                // holder the machine stalled past its deadline must not
                // write; it tries again, as a real one would.
                let valid = !guard.validity().is_zero();
                if valid {
                    let _: () = conn.set("counter", value + 1).await.expect("SET");
                } else {
                    late.fetch_add(1, Ordering::Relaxed);
                }
                match holder {
                    Holder::Releases => {
                        let _ = guard.release().await;
                    }
                    Holder::Crashes => std::mem::forget(guard),
                }
                if valid {
                    break;
                }
            }
        }));
    }
    for task in tasks {
        no_hang("counter task", task).await.expect("task panicked");
    }
    let mut conn = store_conn;
    let total: i64 = conn.get("counter").await.expect("GET");
    assert_eq!(
        total,
        TASKS as i64,
        "lost updates ({} holders were stalled past their deadline and retried)",
        late.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_counter_on_five_nodes() {
    run_counter(5, Duration::from_secs(5), Holder::Releases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_counter_on_one_node() {
    run_counter(1, Duration::from_secs(5), Holder::Releases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_counter_when_holders_crash_on_five_nodes() {
    run_counter(5, Duration::from_millis(100), Holder::Crashes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_counter_when_holders_crash_on_one_node() {
    run_counter(1, Duration::from_millis(100), Holder::Crashes).await;
}
