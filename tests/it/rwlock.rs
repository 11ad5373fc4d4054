//! The reader-writer lock over real nodes: readers share, a writer is
//! alone (also while a node restarts), a waiting writer is not starved by a
//! stream of readers, holds are kept and restored only where an acquire
//! would be admitted, bad input is refused before any I/O, and nothing is
//! left on the nodes afterwards.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::{FaultProxy, Faults, RedisNodes, ServerOptions, server_version};
use quorumlock::{ArgumentError, Error, FUNCTIONS_LIBRARY, Redlock, Retry, ScriptMode};
use support::{builder, conn, keys_left, no_hang, no_stall, patient, until_no_keys_left};
use tokio::time::Instant;

/// One try at a time, with a node timeout a loaded machine meets.
fn impatient(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .retry(Retry::none())
        .node_timeout(Duration::from_secs(2))
        .build()
        .expect("config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_is_alone() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = impatient(&nodes);
    let ttl = Duration::from_secs(10);
    let rw = locks.rwlock("doc");
    let r1 = rw.try_read(ttl).await.expect("reader 1");
    let r2 = rw.try_read(ttl).await.expect("reader 2 beside reader 1");
    assert_eq!(r1.resource(), "doc");
    assert!(matches!(
        rw.try_write(ttl).await,
        Err(Error::Contended { .. })
    ));
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    // The writer's refusal marked it waiting for a ttl; a writer of its own
    // (another call) is not held back by a mark on no readers.
    let w = rw
        .try_write(ttl)
        .await
        .expect("writer once the readers left");
    assert!(matches!(
        rw.try_read(ttl).await,
        Err(Error::Contended { .. })
    ));
    assert!(matches!(
        rw.try_write(ttl).await,
        Err(Error::Contended { .. })
    ));
    w.extend(ttl).await.expect("extend");
    let summary = w.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 3, "{summary:?}");
    // The mark of the refused writer expires by itself; nothing else is left.
    // release and cleanup return at the decision; the other nodes follow
    locks.settle().await;
    let left = keys_left(&nodes, "doc").await;
    assert!(left.iter().all(|k| k == "doc:writer-waiting"), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_new_readers_back_and_gets_in() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = impatient(&nodes);
    let ttl = Duration::from_secs(10);
    let rw = locks.rwlock("pref");
    let reader = rw.try_read(ttl).await.expect("reader");
    let writers = patient(&nodes);
    let writer = writers.rwlock("pref");
    let waiting = tokio::spawn(writer.write(ttl));
    // The writer's mark shows on a majority of nodes: it waits.
    no_hang("the writer's mark", async {
        while support::values(&nodes, "pref:writer-waiting")
            .await
            .iter()
            .filter(|v| v.is_some())
            .count()
            < 2
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // A new reader is held back while the writer waits…
    assert!(matches!(
        rw.try_read(ttl).await,
        Err(Error::Contended { .. })
    ));
    // …the reader already in keeps its hold…
    reader.extend(ttl).await.expect("extend the reader");
    reader.release().await.expect("release");
    // …and once it is gone the writer gets in.
    let w = no_hang("the writer", waiting)
        .await
        .expect("task")
        .expect("the writer gets in");
    // Its release takes its mark too, also from a node that never heard
    // of its grant: nothing is left.
    w.release().await.expect("release");
    // The writer's release and its attempts' cleanups follow on the
    // writer's own manager: settle that one too.
    writers.settle().await;
    locks.settle().await;
    let left = keys_left(&nodes, "pref").await;
    assert_eq!(left, Vec::<String>::new(), "{left:?}");
}

/// A writer refused by a majority while its request to a slow node is
/// still on its way cleans up after that attempt there — but the writer's
/// call still waits, so its mark must stay there too, or a new reader gets
/// in wherever the writer's requests come late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writers_mark_stays_where_its_request_came_late() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = impatient(&nodes);
    let ttl = Duration::from_secs(30);
    let reader = locks.rwlock("late").try_read(ttl).await.expect("reader");
    // The writer reaches the first node through a slow link: that node
    // answers after the other two refused, every attempt.
    let slow = FaultProxy::start(nodes[0].port()).await.expect("proxy");
    slow.set(Faults::latency(
        Duration::from_millis(300),
        Duration::ZERO,
        Duration::ZERO,
    ));
    let mut urls = nodes.urls();
    urls[0] = slow.url();
    // One attempt, then a long wait before the next: what the first
    // attempt's cleanup did shows until then.
    let writers = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(5))
        .retry(Retry::forever().delay(Duration::from_secs(20)))
        .build()
        .expect("config");
    // Its connections made first: a request still waiting for one when the
    // attempt is decided is never sent.
    let warm = writers.try_lock("late-warm", ttl).await.expect("warm-up");
    warm.release().await.expect("release");
    writers.settle().await;
    let waiting = tokio::spawn(writers.rwlock("late").write(ttl));
    no_hang("the writer's mark on every node, the slow one too", async {
        while support::values(&nodes, "late:writer-waiting")
            .await
            .iter()
            .any(Option::is_none)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(matches!(
        locks.rwlock("late").try_read(ttl).await,
        Err(Error::Contended { .. })
    ));
    waiting.abort();
    reader.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_in_despite_a_stream_of_readers() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = patient(&nodes);
    let ttl = Duration::from_secs(5);
    let stop = Arc::new(AtomicBool::new(false));
    // Four readers, each taking the lock again at once after releasing it:
    // without writer preference some reader always holds.
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (rw, stop) = (locks.rwlock("stream"), stop.clone());
            tokio::spawn(async move {
                let mut reads = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let r = rw.read(ttl).await.expect("read");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    r.release().await.expect("release");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    // Let the stream flow, then write.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let w = no_hang("the writer", locks.rwlock("stream").write(ttl))
        .await
        .expect("the writer gets in");
    w.release().await.expect("release");
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        let reads = no_hang("reader", reader).await.expect("task");
        assert!(reads > 0);
    }
}

/// Who held, how, and when: (writer?, from, until).
type Windows = Arc<Mutex<Vec<(bool, Instant, Instant)>>>;

async fn mixed_run(n: usize, restart: bool) {
    let nodes =
        Arc::new(RedisNodes::start_with(n, ServerOptions::new().persistent()).expect("nodes"));
    let locks = patient(&nodes);
    let ttl = Duration::from_secs(5);
    let windows: Windows = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let chaos = restart.then(|| support::keep_restarting(nodes.clone(), done.clone()));
    let tasks: Vec<_> = (0..12)
        .map(|t| {
            let (rw, windows) = (locks.rwlock("mixed"), windows.clone());
            let writer = t % 4 == 0;
            tokio::spawn(async move {
                for _ in 0..5 {
                    let hold = if writer {
                        rw.write(ttl).await.map(quorumlock::LockGuard::from)
                    } else {
                        rw.read(ttl).await.map(quorumlock::LockGuard::from)
                    }
                    .expect("a hold, sooner or later");
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    assert_eq!(hold.loss_reason(), None, "lost with a majority up");
                    let until = Instant::now().min(hold.deadline());
                    windows.lock().expect("windows").push((writer, from, until));
                    hold.release().await.expect("release with a majority up");
                }
            })
        })
        .collect();
    let released = || windows.lock().expect("windows").len();
    for task in tasks {
        no_stall("the tasks", released, task).await.expect("task");
    }
    done.store(true, Ordering::SeqCst);
    if let Some(chaos) = chaos {
        assert!(chaos.await.expect("chaos") > 0, "no node was restarted");
    }
    let windows = windows.lock().expect("windows").clone();
    assert_eq!(windows.len(), 60);
    let overlap =
        |a: &(bool, Instant, Instant), b: &(bool, Instant, Instant)| a.1 < b.2 && b.1 < a.2;
    let mut readers_together = 0;
    for (i, a) in windows.iter().enumerate() {
        for b in &windows[i + 1..] {
            if overlap(a, b) {
                assert!(!a.0 && !b.0, "a writer beside another hold: {a:?} {b:?}");
                readers_together += 1;
            }
        }
    }
    assert!(readers_together > 0, "readers never shared the lock");
    until_no_keys_left(&nodes, "mixed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_mixed_on_three_nodes() {
    mixed_run(3, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_mixed_on_five_nodes_while_nodes_restart() {
    mixed_run(5, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_are_restored_only_where_an_acquire_would_be_admitted() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .node_timeout(Duration::from_secs(1))
        .build()
        .expect("config");
    // Long beside the node timeout: a renewal round held up by the load
    // for a node timeout still leaves time for another before the lease
    // ends (2 s left the writer to expire under load in CI).
    let ttl = Duration::from_secs(5);
    // A reader, auto-extended: restored on a node that restarted empty.
    let reader = locks.rwlock("rr").try_read(ttl).await.expect("reader");
    reader.auto_extend();
    let token = reader.token().as_str().to_owned();
    nodes[0].restart().expect("restart");
    no_hang("the reader restored on node 0", async {
        loop {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg("rr:readers")
                .arg(&token)
                .query_async(&mut conn(&nodes[0].url()).await)
                .await
                .expect("ZSCORE");
            if score.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    reader.release().await.expect("release");

    // A writer, auto-extended; node 0 loses the writer's key and a reader
    // shows up there in the same step (as if admitted while the writer's
    // key was gone, after a restart): the writer is not set again beside
    // it, and keeps its majority elsewhere. One transaction, so that no
    // renewal can restore the key between the loss and the reader (a
    // restart, then the reader, left that window open under load).
    let writer = locks.rwlock("ww").try_write(ttl).await.expect("writer");
    writer.auto_extend();
    let mut c0 = conn(&nodes[0].url()).await;
    let far: u64 = 4_000_000_000_000;
    let _: () = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("ww:writer")
        .ignore()
        .cmd("ZADD")
        .arg("ww:readers")
        .arg(far)
        .arg("someone")
        .ignore()
        .query_async(&mut c0)
        .await
        .expect("MULTI DEL ZADD");
    // Two renewals that began after it, each confirmed by a quorum.
    let mut since = Instant::now();
    for _ in 0..2 {
        since = no_hang("a renewal", async {
            loop {
                let lease = writer.lease();
                if lease.started() > since || writer.loss_reason().is_some() {
                    break lease.started();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
    assert_eq!(writer.loss_reason(), None);
    let held: Option<String> = redis::cmd("GET")
        .arg("ww:writer")
        .query_async(&mut c0)
        .await
        .expect("GET");
    assert_eq!(held, None, "a writer restored beside a live reader");
    assert_eq!(
        support::holding(&nodes, "ww:writer", writer.token().as_str()).await,
        2
    );
    writer.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_any_io() {
    // Nothing listens here: any I/O would fail as unreachable instead.
    let locks = Redlock::new(["redis://127.0.0.1:1"]).expect("config");
    let ttl = Duration::from_secs(1);
    fn refused<T: std::fmt::Debug>(result: Result<T, Error>) -> ArgumentError {
        match result {
            Err(Error::InvalidArgument(e)) => e,
            other => panic!("not refused: {other:?}"),
        }
    }
    assert_eq!(
        refused(locks.rwlock("").read(ttl).await),
        ArgumentError::EmptyResource
    );
    assert_eq!(
        refused(locks.rwlock("").try_write(ttl).await),
        ArgumentError::EmptyResource
    );
    assert_eq!(
        refused(locks.rwlock("x").write(Duration::ZERO).await),
        ArgumentError::ZeroTtl
    );
    let with = locks
        .rwlock("")
        .with_write(ttl, |_| async { unreachable!("no hold") })
        .await;
    assert_eq!(refused(with), ArgumentError::EmptyResource);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_forms_and_functions_mode() {
    let version = server_version().expect("server version");
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    // Open connections: on a connection still being set up, requests go
    // out in no certain order, and a writer could meet the reader whose
    // release it followed (and leave its waiting mark until its ttl).
    support::warm(&locks, Duration::from_secs(5)).await;
    let out = locks
        .rwlock("scoped")
        .with_read(Duration::from_secs(5), |lease| async move {
            lease.resource().to_owned()
        })
        .await
        .expect("with_read");
    assert_eq!(out, "scoped");
    let out = locks
        .rwlock("scoped")
        .with_write(Duration::from_secs(5), |_| async { 7 })
        .await
        .expect("with_write");
    assert_eq!(out, 7);
    locks.settle().await;
    assert_eq!(keys_left(&nodes, "scoped").await, Vec::<String>::new());

    if !version.has_functions() {
        crate::support::skip(
            "rwlock::scoped_forms_and_functions_mode",
            crate::support::Skip::NoFunctions,
            format_args!("(its Functions half) {version} has no Redis Functions (7.0+)"),
        );
        return;
    }
    for server in &nodes {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(FUNCTIONS_LIBRARY)
            .query_async(&mut conn(&server.url()).await)
            .await
            .expect("FUNCTION LOAD");
    }
    let functions = builder(&nodes)
        .script_mode(ScriptMode::Functions)
        .retry(Retry::none())
        .node_timeout(Duration::from_secs(2))
        .build()
        .expect("config");
    let ttl = Duration::from_secs(5);
    let rw = functions.rwlock("fn");
    let r = rw.try_read(ttl).await.expect("read");
    assert!(matches!(
        rw.try_write(ttl).await,
        Err(Error::Contended { .. })
    ));
    r.extend(ttl).await.expect("extend");
    r.release().await.expect("release");
    let w = rw.try_write(ttl).await.expect("write");
    w.release().await.expect("release");
}
