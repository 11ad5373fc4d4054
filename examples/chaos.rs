//! Chaos while locking: eight workers take and release a lock in a loop
//! while nodes are killed, paused, resumed and restarted under them. Each
//! phase prints how many critical sections ran and how attempts failed;
//! an in-process check counts any two critical sections that overlapped
//! (there must be none). Runs for about five seconds.
//!
//! A node that returns brings back keys it persisted, or runs late writes
//! it was sent while paused, of locks already released elsewhere: the
//! releases it did not answer are owed to it and delivered before it is
//! asked again, so every phase with a quorum up grants.
//!
//! Every attempt, critical section and fault is also recorded
//! (`quorumlock::testkit::history`) and checked when the run ends; with
//! `--report FILE` (or `QUORUMLOCK_CHAOS_REPORT=FILE`) the run is drawn as
//! one self-contained HTML page (`quorumlock::testkit::report`): each
//! worker's held windows, the faults per node, latency and rates. A run
//! the checker finds a violation in writes its report in any case (to the
//! temp dir if no file was named).
//!
//!     cargo run --example chaos --features testkit
//!     cargo run --example chaos --features testkit -- --report chaos.html

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::testkit::history::{Recorder, check};
use quorumlock::testkit::report::Page;
use quorumlock::testkit::{RedisNodes, ServerOptions};
use quorumlock::{Error, Redlock, Retry};
use tokio::time::Instant;

const WORKERS: usize = 8;
const PHASE: Duration = Duration::from_millis(450);
/// Far above any scheduling stall, so that an overlap could only mean a
/// broken lock, not a holder paused past its deadline.
const TTL: Duration = Duration::from_secs(2);
/// The one resource the workers lock.
const RESOURCE: &str = "chaos:job";

#[derive(Default)]
struct Stats {
    acquired: AtomicUsize,
    contended: AtomicUsize,
    unavailable: AtomicUsize,
    other: AtomicUsize,
    /// Critical sections that began while another was running.
    overlaps: AtomicUsize,
    /// Critical sections running right now.
    inside: AtomicUsize,
}

impl Stats {
    fn snapshot(&self) -> [usize; 4] {
        [
            self.acquired.load(Ordering::Relaxed),
            self.contended.load(Ordering::Relaxed),
            self.unavailable.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
        ]
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let report_to = report_path()?;
    // Persistent nodes: a restarted node comes back with its keys, as the
    // README's limits section asks of production nodes.
    let nodes = RedisNodes::start_with(5, ServerOptions::new().persistent())?;
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .retry(
            Retry::default()
                .attempts(3)
                .delay(Duration::from_millis(10))
                .jitter(Duration::from_millis(20)),
        )
        .build()?;
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let recorder = Recorder::new();
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| {
            let worker = Worker {
                id,
                locks: locks.clone(),
                stats: stats.clone(),
                stop: stop.clone(),
                recorder: recorder.clone(),
            };
            tokio::spawn(worker.run())
        })
        .collect();

    let started = Instant::now();
    let mut last = stats.snapshot();
    // Each line is a phase: from when its fault was made (the end of the
    // phase before) to now, and what the workers saw meanwhile.
    let mut since = 0.0;
    let mut report = |what: &str| {
        let now = stats.snapshot();
        let to = started.elapsed().as_secs_f64();
        println!(
            "{since:>5.2}-{to:<5.2}s  {what:<44} locked {:>4}  contended {:>4}  no quorum {:>4}  other {:>3}",
            now[0] - last[0],
            now[1] - last[1],
            now[2] - last[2],
            now[3] - last[3],
        );
        last = now;
        since = to;
    };
    // Blocking calls (signals, waiting for a restarted node to be ready)
    // must not stall the runtime's other tasks.
    let chaos = |f: &dyn Fn() -> Result<(), quorumlock::testkit::TestkitError>| {
        tokio::task::block_in_place(f)
    };

    tokio::time::sleep(PHASE).await;
    report("all 5 nodes up");
    let killed0 = Instant::now();
    nodes[0].kill();
    tokio::time::sleep(PHASE).await;
    report("node 0 killed (4 up)");
    let paused1 = Instant::now();
    chaos(&|| nodes[1].pause())?;
    tokio::time::sleep(PHASE).await;
    report("node 1 paused too (3 answer)");
    chaos(&|| nodes[1].resume())?;
    recorder.fault(vec![1], "Pause", paused1, Instant::now());
    chaos(&|| nodes[0].restart())?;
    recorder.fault(vec![0], "KillRestart", killed0, Instant::now());
    tokio::time::sleep(PHASE).await;
    report("node 1 resumed, node 0 restarted (5 up)");
    let killed34 = Instant::now();
    nodes[3].kill();
    nodes[4].kill();
    tokio::time::sleep(PHASE).await;
    report("nodes 3 and 4 killed (3 up)");
    let killed2 = Instant::now();
    nodes[2].kill();
    tokio::time::sleep(PHASE).await;
    report("node 2 killed too (2 up: no quorum)");
    let restarting = Instant::now();
    for i in 2..5 {
        chaos(&|| nodes[i].restart())?;
    }
    // No quorum from node 2's kill until the restarts began; one certainly
    // back once they are done.
    let back = Instant::now();
    recorder.outage(killed2, restarting, back);
    recorder.fault(vec![2], "KillRestart", killed2, back);
    recorder.fault(vec![3, 4], "KillRestart", killed34, back);
    // The restarted nodes come back with the keys they persisted, some of
    // locks released while they were down: they are owed those releases,
    // and get them as soon as they answer.
    let restarted = Instant::now();
    loop {
        let before = stats.acquired.load(Ordering::Relaxed);
        tokio::time::sleep(PHASE).await;
        if stats.acquired.load(Ordering::Relaxed) > before {
            report("nodes 2, 3, 4 restarted: locking again");
            break;
        }
        report("nodes 2, 3, 4 restarted: not granting yet");
        if restarted.elapsed() > 3 * TTL {
            break;
        }
    }

    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await?;
    }
    locks.settle().await;
    let overlaps = stats.overlaps.load(Ordering::Relaxed);
    println!(
        "total: {} critical sections, {overlaps} overlapping",
        stats.acquired.load(Ordering::Relaxed)
    );
    let history = recorder.take();
    let verdict = check(&history);
    println!("checker: {verdict}");
    // A run with a violation leaves its report behind in any case.
    let report_to = match report_to {
        Some(path) => Some(path),
        None if !verdict.is_ok() => Some(std::env::temp_dir().join("quorumlock-chaos-report.html")),
        None => None,
    };
    if let Some(path) = report_to {
        Page::new(&history, &verdict)
            .title(
                "examples/chaos.rs: eight workers on five nodes; node 0 killed and restarted, \
                 node 1 paused and resumed, nodes 3, 4 then 2 killed and restarted",
            )
            .replay(format!(
                "cargo run --example chaos --features testkit -- --report {}",
                path.display()
            ))
            .write(&path)?;
        println!("report written to {}", path.display());
    }
    if overlaps > 0 {
        return Err(format!("{overlaps} critical sections overlapped").into());
    }
    if !verdict.is_ok() {
        return Err(format!("the checker found {verdict}").into());
    }
    Ok(())
}

/// Where to write the report: `--report FILE`, else
/// `$QUORUMLOCK_CHAOS_REPORT`, else nowhere.
fn report_path() -> Result<Option<std::path::PathBuf>, Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next(), args.next()) {
        (None, ..) => Ok(std::env::var_os("QUORUMLOCK_CHAOS_REPORT").map(Into::into)),
        (Some(flag), Some(path), None) if flag == "--report" => Ok(Some(path.into())),
        _ => Err("usage: chaos [--report FILE]".into()),
    }
}

/// One worker: locks, runs a short critical section, releases, again.
struct Worker {
    id: usize,
    locks: Redlock,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    recorder: Recorder,
}

impl Worker {
    async fn run(self) {
        let stats = &self.stats;
        while !self.stop.load(Ordering::Relaxed) {
            let attempt = self.recorder.lock(self.id, RESOURCE);
            match self.locks.lock(RESOURCE, TTL).await {
                Ok(guard) => {
                    let section = attempt.granted(&guard.lease(), TTL);
                    if stats.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        stats.overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    stats.acquired.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    stats.inside.fetch_sub(1, Ordering::SeqCst);
                    // A release that finds the token gone is counted as "other".
                    if section.release(guard).await.is_err() {
                        stats.other.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(error) => {
                    attempt.failed(&error);
                    match error {
                        Error::Contended { .. } => {
                            stats.contended.fetch_add(1, Ordering::Relaxed);
                        }
                        Error::Unavailable { .. } => {
                            stats.unavailable.fetch_add(1, Ordering::Relaxed);
                            // No quorum: back off a little instead of spinning.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        _ => {
                            stats.other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
    }
}
