//! The benchmark: quorumlock against the floor — the same round trips done
//! raw with the `redis` crate — on 1, 3 and 5 nodes; lock handoffs under
//! contention (polling against wake-up on release); a semaphore's permit and
//! a reader-writer lock's read against the lock; and the cost of holding
//! 10,000 auto-extended locks. `--only replica` measures what replica sync
//! (`RedlockBuilder::replica_sync`) costs, on 3 masters with a replica each
//! (not part of a default run).
//!
//!     cargo run --release --example bench --features testkit -- [--json] [--quick]
//!
//! It starts its own nodes (or uses `QUORUMLOCK_NODES=redis://…,redis://…`).
//! Quote the ratios: absolute numbers drift on a shared machine, so floor and
//! library runs are interleaved and drift hits both. With `--json` the table
//! goes to stderr and JSON to stdout (`benches/baseline.json` is one full run).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use quorumlock::testkit::{RedisNodes, RedisServer, ServerOptions};
use quorumlock::{LockGuard, Redlock, Retry, WakeOnRelease};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The library's own release script, for the floor's release.
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../src/scripts/release.lua")));

/// Concurrency levels of the throughput rows.
const CONCURRENCY: [usize; 4] = [1, 16, 64, 256];
/// Tasks contending for one resource.
const CONTENDERS: usize = 16;
/// What a contender does between releasing and asking again: other work.
const THINK: Duration = Duration::from_millis(1);
/// Ttl of the locks taken in the latency and throughput rows.
const TTL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
struct Plan {
    quick: bool,
    /// Lock+release cycles per latency sample set, per side.
    latency_cycles: usize,
    /// Cycles per alternation block in the latency rows.
    latency_block: usize,
    /// Alternating rounds per throughput row, per side.
    rounds: usize,
    round: Duration,
    contention: Duration,
    held_locks: usize,
    held_ttl: Duration,
    held_for: Duration,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                quick,
                latency_cycles: 200,
                latency_block: 50,
                rounds: 2,
                round: Duration::from_millis(250),
                contention: Duration::from_secs(2),
                held_locks: 1_000,
                held_ttl: Duration::from_secs(2),
                held_for: Duration::from_secs(3),
            }
        } else {
            Self {
                quick,
                latency_cycles: 4_000,
                latency_block: 200,
                rounds: 6,
                round: Duration::from_secs(1),
                contention: Duration::from_secs(10),
                held_locks: 10_000,
                held_ttl: Duration::from_secs(2),
                held_for: Duration::from_secs(30),
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // On a worker thread, like the tasks it is compared with: the runtime's
    // main thread would add a cross-thread wake-up to every round trip.
    tokio::spawn(run()).await?
}

async fn run() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `--profile floor|library`: only one task's cycles on every node, for
    // `valgrind --tool=callgrind` or perf (instructions per cycle).
    if let [flag, side] = &args[..]
        && flag == "--profile"
    {
        return profile(side).await;
    }
    let (mut json, mut quick, mut only) = (false, false, None);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--quick" => quick = true,
            // One part only, while working on it.
            "--only" => only = rest.next().cloned(),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; use --json, --quick, --only held|speed|primitives|contention|replica, or --profile floor|library|library-wake"
                )
                .into());
            }
        }
    }
    let plan = Plan::new(quick);
    let runs = |part: &str| only.as_deref().is_none_or(|o| o == part);

    // Our own nodes unless the caller names theirs; kept alive to the end.
    let (_nodes, urls) = match std::env::var("QUORUMLOCK_NODES") {
        Ok(list) => (None, list.split(',').map(str::to_owned).collect::<Vec<_>>()),
        Err(_) => {
            let nodes = RedisNodes::start(5)?;
            let urls = nodes.urls();
            (Some(nodes), urls)
        }
    };
    let mut report = Report::new(plan, &urls).await?;
    progress(&format!(
        "bench ({}): {} nodes, {} cpus, {}",
        if plan.quick { "quick" } else { "full" },
        urls.len(),
        report.nproc,
        report.cpu
    ));

    // First, while the process is fresh: memory per held lock is measured
    // from the resident set before the locks are taken.
    if urls.len() >= 3 && runs("held") {
        report.held = Some(held_locks(&urls[..3], plan).await?);
    }
    for n in [1, 3, 5] {
        if n > urls.len() || !runs("speed") {
            continue;
        }
        speed_rows(&urls[..n], plan, &mut report).await?;
    }
    if runs("primitives") {
        let n = urls.len().min(5);
        primitive_rows(&urls[..n], plan, &mut report).await?;
    }
    for n in [1, 3, 5] {
        if n > urls.len() || !runs("contention") {
            continue;
        }
        for waiting in [Waiting::Polling, Waiting::WakeUp] {
            let row = contention(&urls[..n], waiting, plan).await?;
            report.contention.push(row);
        }
    }

    // Opt-in: it starts servers of its own, with replicas.
    if only.as_deref() == Some("replica") {
        replica_sync_cost(plan, &mut report).await?;
    }

    // Other work on the machine skews the ratios: say how much there was.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let load: Vec<&str> = load.split_whitespace().take(3).collect();
        report.notes.push(format!(
            "load average at the end (1, 5, 15 min): {}",
            load.join(" ")
        ));
    }
    let table = report.table();
    if json {
        eprint!("{table}");
        println!("{}", report.json());
    } else {
        print!("{table}");
    }
    // Held locks must never be lost: that is a bug, not a slow run.
    match &report.held {
        Some(held) if held.lost > 0 => {
            Err(format!("{} of {} held locks were lost", held.lost, held.locks).into())
        }
        _ => Ok(()),
    }
}

/// Runs `BENCH_PROFILE_CYCLES` (default 2,000) cycles of one side (`floor`,
/// `library`, or `library-wake`: releases that announce themselves) in one
/// task (or many: `BENCH_PROFILE_TASKS`), on the nodes of `QUORUMLOCK_NODES` (or 5 of its own).
async fn profile(side: &str) -> Result<(), BoxError> {
    let cycles: usize = std::env::var("BENCH_PROFILE_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2_000);
    let (_nodes, urls) = match std::env::var("QUORUMLOCK_NODES") {
        Ok(list) => (None, list.split(',').map(str::to_owned).collect::<Vec<_>>()),
        Err(_) => {
            let nodes = RedisNodes::start(5)?;
            let urls = nodes.urls();
            (Some(nodes), urls)
        }
    };
    let side = match side {
        "floor" => Side::Floor(Arc::new(floor_connections(&urls).await?)),
        "library" => Side::Library(Redlock::new(&urls)?),
        // Releases announce themselves (nobody listens): what that costs.
        "library-wake" => Side::Library(
            Redlock::builder()
                .nodes(&urls)
                .wake_on_release(WakeOnRelease::Subscribe)
                .build()?,
        ),
        other => {
            return Err(format!("--profile {other:?}: use floor, library or library-wake").into());
        }
    };
    // `BENCH_PROFILE_TASKS=n`: that many tasks for `BENCH_PROFILE_CYCLES`
    // milliseconds instead (throughput).
    if let Some(tasks) = std::env::var("BENCH_PROFILE_TASKS")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        let period = Duration::from_millis(cycles as u64);
        let (rate, failed) = throughput(&side, tasks, period, 0).await;
        progress(&format!(
            "{tasks} tasks of {} on {} nodes: {rate:.0} cycles/s, {failed} failed",
            side.name(),
            urls.len()
        ));
        return Ok(());
    }
    let mut samples = Vec::new();
    let failed = latency_block(&side, cycles, 0, &mut samples).await;
    if let Side::Library(locks) = &side {
        locks.settle().await;
    }
    samples.sort_unstable();
    progress(&format!(
        "{} cycles of {} on {} nodes, p50 {:?}, {failed} failed",
        samples.len(),
        side.name(),
        urls.len(),
        percentile(&samples, 50.0)
    ));
    Ok(())
}

fn progress(line: &str) {
    eprintln!("# {line}");
}

// ---------------------------------------------------------------------------
// Floor and library cycles

/// One raw connection manager per node, configured as the library's.
async fn floor_connections(urls: &[String]) -> Result<Vec<ConnectionManager>, BoxError> {
    let mut conns = Vec::new();
    for url in urls {
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None);
        conns.push(
            ConnectionManager::new_with_config(redis::Client::open(url.as_str())?, config).await?,
        );
    }
    Ok(conns)
}

/// The floor: one parallel `SET NX PX` to every node, then one parallel
/// token-checked release script. Returns whether a quorum granted.
async fn floor_cycle(conns: &[ConnectionManager], key: &str) -> bool {
    let token = format!("{:032x}", rand::random::<u128>());
    let ttl_ms = TTL.as_millis() as u64;
    let granted = join_all(conns.iter().map(|conn| {
        let mut conn = conn.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
        async move { matches!(cmd.query_async::<Value>(&mut conn).await, Ok(Value::Okay)) }
    }))
    .await;
    join_all(conns.iter().map(|conn| {
        let mut conn = conn.clone();
        let token = &token;
        async move {
            let _ = RELEASE
                .key(key)
                .arg(token.as_str())
                .invoke_async::<i64>(&mut conn)
                .await;
        }
    }))
    .await;
    granted.iter().filter(|&&g| g).count() > conns.len() / 2
}

async fn library_cycle(locks: &Redlock, key: &str) -> bool {
    match locks.lock(key, TTL).await {
        Ok(guard) => guard.release().await.is_ok(),
        Err(_) => false,
    }
}

#[derive(Clone)]
enum Side {
    Floor(Arc<Vec<ConnectionManager>>),
    Library(Redlock),
    /// A permit of a semaphore of [`PERMITS`] permits (one per key).
    Permit(Redlock),
    /// A reader of a reader-writer lock (one per key).
    Read(Redlock),
}

/// Permits of the semaphores in the primitives rows.
const PERMITS: u32 = 8;

impl Side {
    fn name(&self) -> &'static str {
        match self {
            Side::Floor(_) => "floor",
            Side::Library(_) => "lib",
            Side::Permit(_) => "permit",
            Side::Read(_) => "read",
        }
    }

    async fn cycle(&self, key: &str) -> bool {
        match self {
            Side::Floor(conns) => floor_cycle(conns, key).await,
            Side::Library(locks) => library_cycle(locks, key).await,
            Side::Permit(locks) => match locks.semaphore(key, PERMITS).acquire(TTL).await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            },
            Side::Read(locks) => match locks.rwlock(key).read(TTL).await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            },
        }
    }
}

/// Latency samples of `cycles` cycles run one after another by one task.
async fn latency_block(side: &Side, cycles: usize, offset: usize, into: &mut Vec<Duration>) -> u64 {
    let mut failures = 0;
    for i in 0..cycles {
        let key = format!("bench:{}:lat:{}", side.name(), offset + i);
        let started = Instant::now();
        if !side.cycle(&key).await {
            failures += 1;
        }
        into.push(started.elapsed());
    }
    failures
}

/// Cycles per second of `tasks` concurrent tasks over `period`.
async fn throughput(side: &Side, tasks: usize, period: Duration, round: usize) -> (f64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|t| {
            let (side, stop, failures) = (side.clone(), stop.clone(), failures.clone());
            tokio::spawn(async move {
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("bench:{}:tp:{round}:{t}:{done}", side.name());
                    if !side.cycle(&key).await {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    done += 1;
                }
                done
            })
        })
        .collect();
    tokio::time::sleep(period).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for worker in workers {
        total += worker.await.unwrap_or(0);
    }
    let elapsed = started.elapsed().as_secs_f64();
    (total as f64 / elapsed, failures.load(Ordering::Relaxed))
}

/// Latency and throughput rows for one node count, floor and library
/// interleaved.
async fn speed_rows(urls: &[String], plan: Plan, report: &mut Report) -> Result<(), BoxError> {
    let n = urls.len();
    progress(&format!("N={n}: latency and throughput"));
    let floor = Side::Floor(Arc::new(floor_connections(urls).await?));
    let library = Side::Library(Redlock::new(urls)?);
    let sides = [floor, library];

    // Warm up: connections, script caches, allocator.
    let mut scratch = Vec::new();
    for side in &sides {
        latency_block(side, 100, 1_000_000, &mut scratch).await;
    }

    let mut samples = [Vec::new(), Vec::new()];
    let mut failures = [0, 0];
    let mut offset = 0;
    while samples[1].len() < plan.latency_cycles {
        // ABBA order, so neither side always runs right after the other.
        let order = if (offset / plan.latency_block).is_multiple_of(2) {
            [0, 1]
        } else {
            [1, 0]
        };
        for s in order {
            failures[s] +=
                latency_block(&sides[s], plan.latency_block, offset, &mut samples[s]).await;
        }
        offset += plan.latency_block;
    }
    let [floor_lat, lib_lat] = samples.map(|mut s| {
        s.sort_unstable();
        (percentile(&s, 50.0), percentile(&s, 99.0))
    });
    report.row(
        n,
        "lock+release p50, 1 task (µs)",
        micros(floor_lat.0),
        micros(lib_lat.0),
        Better::Lower,
    );
    report.row(
        n,
        "lock+release p99, 1 task (µs)",
        micros(floor_lat.1),
        micros(lib_lat.1),
        Better::Lower,
    );

    for tasks in CONCURRENCY {
        // Medians: a burst of load from elsewhere on a shared machine skews
        // one round, not the result. The ratio is the median of the rounds'
        // ratios, each between runs one right after the other.
        let mut rates = [Vec::new(), Vec::new()];
        for round in 0..plan.rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for s in order {
                let (rate, failed) = throughput(&sides[s], tasks, plan.round, round).await;
                rates[s].push(rate);
                failures[s] += failed;
            }
        }
        let mut ratios: Vec<f64> = rates[1].iter().zip(&rates[0]).map(|(l, f)| l / f).collect();
        report.row_with_ratio(
            n,
            &format!("cycles/s, {tasks} tasks"),
            median(&mut rates[0]),
            median(&mut rates[1]),
            median(&mut ratios),
            Better::Higher,
        );
    }
    if failures.iter().any(|&f| f > 0) {
        report.notes.push(format!(
            "N={n}: failed cycles: floor {}, quorumlock {}",
            failures[0], failures[1]
        ));
    }
    if let Side::Library(locks) = &sides[1] {
        locks.settle().await;
    }
    Ok(())
}

/// The semaphore's permit and the reader-writer lock's read against the
/// lock, on the same nodes and manager, interleaved: acquire+release p50
/// of one task and cycles/s of 64 tasks (each on keys of its own, so the
/// primitive's cost is measured, not contention). Reported as notes.
async fn primitive_rows(urls: &[String], plan: Plan, report: &mut Report) -> Result<(), BoxError> {
    let n = urls.len();
    progress(&format!(
        "N={n}: semaphore and reader-writer lock against the lock"
    ));
    let locks = Redlock::new(urls)?;
    let sides = [
        Side::Library(locks.clone()),
        Side::Permit(locks.clone()),
        Side::Read(locks.clone()),
    ];
    let mut scratch = Vec::new();
    for side in &sides {
        latency_block(side, 50, 2_000_000, &mut scratch).await;
    }
    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    let mut failures = [0, 0, 0];
    let mut offset = 0;
    while samples[0].len() < plan.latency_cycles / 2 {
        for (s, side) in sides.iter().enumerate() {
            failures[s] += latency_block(side, plan.latency_block, offset, &mut samples[s]).await;
        }
        offset += plan.latency_block;
    }
    let p50 = samples.map(|mut s| {
        s.sort_unstable();
        micros(percentile(&s, 50.0))
    });
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..plan.rounds {
        for (s, side) in sides.iter().enumerate() {
            let (rate, failed) = throughput(side, 64, plan.round, 100 + round).await;
            rates[s].push(rate);
            failures[s] += failed;
        }
    }
    let rates = rates.map(|mut r| median(&mut r));
    for (s, what) in [
        (1, format!("semaphore permit (L = {PERMITS})")),
        (2, "rwlock read".to_owned()),
    ] {
        report.notes.push(format!(
            "N={n}: {what} acquire+release p50 {:.0} µs vs lock {:.0} µs ({:.2}x); \
             64 tasks {:.0} vs {:.0} cycles/s ({:.2}x of the lock's)",
            p50[s],
            p50[0],
            p50[s] / p50[0],
            rates[s],
            rates[0],
            rates[s] / rates[0]
        ));
    }
    if failures.iter().any(|&f| f > 0) {
        report.notes.push(format!(
            "N={n}: failed primitive cycles: lock {}, permit {}, read {}",
            failures[0], failures[1], failures[2]
        ));
    }
    locks.settle().await;
    Ok(())
}

/// What replica sync costs: lock+release on 3 masters with one replica
/// each, without and with `replica_sync(1, 100ms)`, interleaved as the
/// speed rows are. Reported as notes.
async fn replica_sync_cost(plan: Plan, report: &mut Report) -> Result<(), BoxError> {
    progress("replica sync: 3 masters with a replica each");
    let masters = (0..3)
        .map(|_| RedisServer::start())
        .collect::<Result<Vec<_>, _>>()?;
    let replicas = masters
        .iter()
        .map(|m| {
            RedisServer::start_with(
                ServerOptions::new()
                    .arg("--replicaof")
                    .arg("127.0.0.1")
                    .arg(m.port().to_string()),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for master in &masters {
        let mut conn = redis::Client::open(master.url())?
            .get_multiplexed_async_connection()
            .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await?;
            if info.contains("state=online") {
                break;
            }
            if Instant::now() > deadline {
                return Err("replicas did not come online".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let sides = [
        Side::Library(Redlock::new(&urls)?),
        Side::Library(
            Redlock::builder()
                .nodes(&urls)
                .replica_sync(1, Duration::from_millis(100))
                .build()?,
        ),
    ];
    let mut scratch = Vec::new();
    for side in &sides {
        latency_block(side, 100, 1_000_000, &mut scratch).await;
    }
    let mut samples = [Vec::new(), Vec::new()];
    let mut failures = [0, 0];
    let mut offset = 0;
    while samples[1].len() < plan.latency_cycles {
        let order = if (offset / plan.latency_block).is_multiple_of(2) {
            [0, 1]
        } else {
            [1, 0]
        };
        for s in order {
            failures[s] +=
                latency_block(&sides[s], plan.latency_block, offset, &mut samples[s]).await;
        }
        offset += plan.latency_block;
    }
    let [plain, synced] = samples.map(|mut s| {
        s.sort_unstable();
        (percentile(&s, 50.0), percentile(&s, 99.0))
    });
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..plan.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for s in order {
            let (rate, failed) = throughput(&sides[s], 16, plan.round, round).await;
            rates[s].push(rate);
            failures[s] += failed;
        }
    }
    report.notes.push(format!(
        "replica sync, N=3 masters with a replica each: lock+release p50 {:.0} → {:.0} µs, p99 {:.0} → {:.0} µs (1 task); {:.0} → {:.0} cycles/s (16 tasks); failed cycles {} → {}",
        micros(plain.0),
        micros(synced.0),
        micros(plain.1),
        micros(synced.1),
        median(&mut rates[0]),
        median(&mut rates[1]),
        failures[0],
        failures[1],
    ));
    drop(replicas);
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p / 100.0) as usize).min(sorted.len() - 1);
    sorted[i]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

// ---------------------------------------------------------------------------
// Contention: 16 tasks, one resource

#[derive(Debug)]
struct ContentionRow {
    nodes: usize,
    mode: &'static str,
    grants_per_s: f64,
    handoffs_per_s: f64,
    fairness_min: u64,
    fairness_max: u64,
    /// From one release to the next grant, whoever gets it.
    gap_p50_ms: f64,
    gap_p99_ms: f64,
    /// From a release to a grant to another task.
    handoff_gap_p50_ms: f64,
    handoff_gap_p99_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    Grant(usize),
    Release,
}

/// How contenders wait for a held lock.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    /// Retry after the retry policy's randomized delay.
    Polling,
    /// Also retry when a release is announced.
    WakeUp,
}

async fn contention(
    urls: &[String],
    waiting: Waiting,
    plan: Plan,
) -> Result<ContentionRow, BoxError> {
    let n = urls.len();
    let (mode, wake) = match waiting {
        Waiting::Polling => ("polling", WakeOnRelease::Never),
        Waiting::WakeUp => ("wake-up", WakeOnRelease::Subscribe),
    };
    progress(&format!("N={n}: contention, {CONTENDERS} tasks, {mode}"));
    // The default retry delay and jitter; never give up.
    let locks = Redlock::builder()
        .nodes(urls)
        .retry(Retry::forever())
        .wake_on_release(wake)
        .build()?;
    let resource = format!("bench:contended:{mode}:{n}");
    let events = Arc::new(Mutex::new(Vec::<(Instant, Event)>::new()));
    let started = Instant::now();
    let until = started + plan.contention;
    let workers: Vec<_> = (0..CONTENDERS)
        .map(|task| {
            let (locks, resource, events) = (locks.clone(), resource.clone(), events.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    let guard: LockGuard = match locks.lock(&resource, TTL).await {
                        Ok(guard) => guard,
                        Err(_) => continue,
                    };
                    let granted = Instant::now();
                    {
                        let mut events = events.lock().unwrap_or_else(|e| e.into_inner());
                        events.push((granted, Event::Grant(task)));
                        events.push((Instant::now(), Event::Release));
                    }
                    let _ = guard.release().await;
                    tokio::time::sleep(THINK).await;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await?;
    }
    locks.settle().await;

    let mut events = std::mem::take(&mut *events.lock().unwrap_or_else(|e| e.into_inner()));
    events.sort_by_key(|(at, _)| *at);
    events.retain(|(at, _)| *at < until);
    let mut per_task = [0u64; CONTENDERS];
    let (mut handoffs, mut last_holder, mut last_release) = (0u64, None, None);
    let (mut gaps, mut handoff_gaps) = (Vec::new(), Vec::new());
    for (at, event) in &events {
        match *event {
            Event::Grant(task) => {
                per_task[task] += 1;
                let handoff = last_holder.is_some_and(|h| h != task);
                if handoff {
                    handoffs += 1;
                }
                last_holder = Some(task);
                if let Some(released) = last_release.take() {
                    let gap = at.saturating_duration_since(released);
                    gaps.push(gap);
                    if handoff {
                        handoff_gaps.push(gap);
                    }
                }
            }
            Event::Release => last_release = Some(*at),
        }
    }
    gaps.sort_unstable();
    handoff_gaps.sort_unstable();
    let secs = plan.contention.as_secs_f64();
    Ok(ContentionRow {
        nodes: n,
        mode,
        grants_per_s: per_task.iter().sum::<u64>() as f64 / secs,
        handoffs_per_s: handoffs as f64 / secs,
        fairness_min: per_task.iter().copied().min().unwrap_or(0),
        fairness_max: per_task.iter().copied().max().unwrap_or(0),
        gap_p50_ms: percentile(&gaps, 50.0).as_secs_f64() * 1e3,
        gap_p99_ms: percentile(&gaps, 99.0).as_secs_f64() * 1e3,
        handoff_gap_p50_ms: percentile(&handoff_gaps, 50.0).as_secs_f64() * 1e3,
        handoff_gap_p99_ms: percentile(&handoff_gaps, 99.0).as_secs_f64() * 1e3,
    })
}

// ---------------------------------------------------------------------------
// Held locks: batched auto-extension

#[derive(Debug)]
struct HeldRow {
    locks: usize,
    seconds: f64,
    renewals_per_s: f64,
    script_calls_per_s: f64,
    cpu_percent: f64,
    bytes_per_lock: f64,
    peak_rss_kib: u64,
    lost: usize,
}

async fn held_locks(urls: &[String], plan: Plan) -> Result<HeldRow, BoxError> {
    let count = plan.held_locks;
    progress(&format!(
        "holding {count} auto-extended locks (ttl {:?}) on {} nodes for {:?}",
        plan.held_ttl,
        urls.len(),
        plan.held_for
    ));
    let locks = Redlock::new(urls)?;
    // Connect and load scripts before the memory baseline.
    library_cycle(&locks, "bench:held:warmup").await;
    locks.settle().await;
    // Reset the peak resident set to the current one (Linux >= 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_before = proc_status_kib("VmRSS").unwrap_or(0);

    let guards = Arc::new(Mutex::new(Vec::with_capacity(count)));
    let next = Arc::new(AtomicU64::new(0));
    let takers: Vec<_> = (0..32)
        .map(|_| {
            let (locks, guards, next) = (locks.clone(), guards.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count as u64 {
                        return Ok::<_, quorumlock::Error>(());
                    }
                    let guard = locks
                        .lock(&format!("bench:held:{i}"), plan.held_ttl)
                        .await?;
                    guard.auto_extend();
                    guards.lock().unwrap_or_else(|e| e.into_inner()).push(guard);
                }
            })
        })
        .collect();
    for taker in takers {
        taker.await??;
    }
    let guards = std::mem::take(&mut *guards.lock().unwrap_or_else(|e| e.into_inner()));

    let mut stats = redis::Client::open(urls[0].as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut stats)
        .await?;
    let cpu_before = cpu_time();
    let started = Instant::now();
    tokio::time::sleep(plan.held_for).await;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let seconds = started.elapsed().as_secs_f64();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut stats)
        .await?;
    let calls = |name: &str| -> u64 {
        info.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .and_then(|l| l.split("calls=").nth(1))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let peak = proc_status_kib("VmHWM").unwrap_or(0);
    let steady = proc_status_kib("VmRSS").unwrap_or(0);
    progress(&format!(
        "resident: {rss_before} KiB before taking the locks, {steady} KiB at the end, peak {peak} KiB"
    ));
    let lost = guards.iter().filter(|g| g.loss_reason().is_some()).count();
    if lost > 0 {
        let mut reasons: HashMap<String, usize> = HashMap::new();
        for guard in &guards {
            if let Some(reason) = guard.loss_reason() {
                *reasons.entry(format!("{reason:?}")).or_default() += 1;
            }
        }
        progress(&format!("lost locks by reason: {reasons:?}"));
    }
    let row = HeldRow {
        locks: count,
        seconds,
        renewals_per_s: calls("pexpire") as f64 / seconds,
        script_calls_per_s: (calls("evalsha") + calls("eval")) as f64 / seconds,
        cpu_percent: cpu.as_secs_f64() / seconds * 100.0,
        bytes_per_lock: peak.saturating_sub(rss_before) as f64 * 1024.0 / count as f64,
        peak_rss_kib: peak,
        lost,
    };
    join_all(guards.into_iter().map(|g| g.release())).await;
    locks.settle().await;
    Ok(row)
}

/// User plus system CPU time of this process so far.
fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
            };
            tv(usage.user_time()) + tv(usage.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// A `kB` field of /proc/self/status.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------
// Report

#[derive(Debug, Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

#[derive(Debug)]
struct Row {
    nodes: usize,
    what: String,
    floor: f64,
    quorumlock: f64,
    ratio: f64,
    better: Better,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.ratio
    }
}

#[derive(Debug)]
struct Report {
    plan: Plan,
    nproc: usize,
    cpu: String,
    redis: String,
    rows: Vec<Row>,
    contention: Vec<ContentionRow>,
    held: Option<HeldRow>,
    notes: Vec<String>,
}

impl Report {
    async fn new(plan: Plan, urls: &[String]) -> Result<Self, BoxError> {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map_or("unknown".to_owned(), |m| m.trim().to_owned());
        let mut conn = redis::Client::open(urls.first().ok_or("no nodes")?.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        let redis = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_owned();
        Ok(Self {
            plan,
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            redis,
            rows: Vec::new(),
            contention: Vec::new(),
            held: None,
            notes: Vec::new(),
        })
    }

    fn row(&mut self, nodes: usize, what: &str, floor: f64, quorumlock: f64, better: Better) {
        let ratio = if floor == 0.0 {
            0.0
        } else {
            quorumlock / floor
        };
        self.row_with_ratio(nodes, what, floor, quorumlock, ratio, better);
    }

    fn row_with_ratio(
        &mut self,
        nodes: usize,
        what: &str,
        floor: f64,
        quorumlock: f64,
        ratio: f64,
        better: Better,
    ) {
        self.rows.push(Row {
            nodes,
            what: what.to_owned(),
            floor,
            quorumlock,
            ratio,
            better,
        });
    }

    fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "machine: {} cpus, {}; redis {}; {} run",
            self.nproc,
            self.cpu,
            self.redis,
            if self.plan.quick { "quick" } else { "full" }
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "| N | measure | floor | quorumlock | ratio |");
        let _ = writeln!(out, "|---|---|---:|---:|---:|");
        for row in &self.rows {
            let better = match row.better {
                Better::Lower => "lower is better",
                Better::Higher => "higher is better",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.0} | {:.2} ({better}) |",
                row.nodes,
                row.what,
                row.floor,
                row.quorumlock,
                row.ratio()
            );
        }
        if !self.contention.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "{CONTENDERS} tasks on one resource (default retry delay; {THINK:?} between release and the next lock):"
            );
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "| N | waiting | grants/s | handoffs/s | grants per task min/max | release→next grant p50 / p99 | release→grant to another task p50 / p99 |"
            );
            let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
            let mut polling: HashMap<usize, f64> = HashMap::new();
            for row in &self.contention {
                let speedup = match polling.get(&row.nodes) {
                    Some(&base) if row.mode == "wake-up" && base > 0.0 => {
                        format!(" ({:.1}x)", row.handoffs_per_s / base)
                    }
                    _ => String::new(),
                };
                if row.mode == "polling" {
                    polling.insert(row.nodes, row.handoffs_per_s);
                }
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.0} | {:.0}{speedup} | {}/{} | {:.2} / {:.2} ms | {:.2} / {:.2} ms |",
                    row.nodes,
                    row.mode,
                    row.grants_per_s,
                    row.handoffs_per_s,
                    row.fairness_min,
                    row.fairness_max,
                    row.gap_p50_ms,
                    row.gap_p99_ms,
                    row.handoff_gap_p50_ms,
                    row.handoff_gap_p99_ms
                );
            }
        }
        if let Some(h) = &self.held {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "{} auto-extended locks, ttl {:?}, held {:.0} s on 3 nodes: {:.0} renewals/s and {:.1} script calls/s per node, {:.1} % of one core, {:.0} bytes per held lock (peak RSS {} KiB), {} lost",
                h.locks,
                self.plan.held_ttl,
                h.seconds,
                h.renewals_per_s,
                h.script_calls_per_s,
                h.cpu_percent,
                h.bytes_per_lock,
                h.peak_rss_kib,
                h.lost
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    fn json(&self) -> String {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|row| {
                json!({
                    "nodes": row.nodes,
                    "measure": row.what,
                    "floor": row.floor,
                    "quorumlock": row.quorumlock,
                    "ratio": row.ratio(),
                })
            })
            .collect();
        let contention: Vec<_> = self
            .contention
            .iter()
            .map(|row| {
                json!({
                    "nodes": row.nodes,
                    "waiting": row.mode,
                    "grants_per_s": row.grants_per_s,
                    "handoffs_per_s": row.handoffs_per_s,
                    "grants_min": row.fairness_min,
                    "grants_max": row.fairness_max,
                    "gap_p50_ms": row.gap_p50_ms,
                    "gap_p99_ms": row.gap_p99_ms,
                    "handoff_gap_p50_ms": row.handoff_gap_p50_ms,
                    "handoff_gap_p99_ms": row.handoff_gap_p99_ms,
                })
            })
            .collect();
        let held = self.held.as_ref().map(|h| {
            json!({
                "locks": h.locks,
                "ttl_ms": self.plan.held_ttl.as_millis() as u64,
                "seconds": h.seconds,
                "renewals_per_s": h.renewals_per_s,
                "script_calls_per_s": h.script_calls_per_s,
                "cpu_percent_of_one_core": h.cpu_percent,
                "bytes_per_lock": h.bytes_per_lock,
                "peak_rss_kib": h.peak_rss_kib,
                "lost": h.lost,
            })
        });
        let report = json!({
            "machine": {"nproc": self.nproc, "cpu": self.cpu, "redis": self.redis},
            "mode": if self.plan.quick { "quick" } else { "full" },
            "rows": rows,
            "contention": contention,
            "held": held,
            "notes": self.notes,
        });
        serde_json::to_string_pretty(&report).unwrap_or_default()
    }
}
