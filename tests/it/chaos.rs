//! Safety under chaos, Jepsen-style: many clients contend for locks over
//! real redis-server nodes while a seeded injector kills, pauses, slows and
//! partitions them; every client's beliefs are recorded on one monotonic
//! clock and checked afterwards.
//!
//! - `chaos_ci_profile`: the CI run — at least 10,000 grants over 5 nodes,
//!   16 clients, every fault kind, however long a loaded machine takes for
//!   them (no grant for a minute fails it: a hang). `QUORUMLOCK_CHAOS_SEED=N`
//!   replays a run's fault schedule.
//! - `chaos_soak` (ignored): `QUORUMLOCK_SOAK_SECS=3600 cargo test --release
//!   --all-features --test it chaos_soak -- --ignored --nocapture` runs seed after
//!   seed for that long and prints totals.
//! - Holders keep auto-extended locks for seconds at a time through the
//!   same faults, including rolling restarts of every node; a holder that
//!   loses its lock while a majority of nodes was up is a failure.
//! - Negative controls: an immediate restart without persistence must be
//!   flagged by the checker every time; a delayed restart or persistence
//!   must not be. Nodes that evict lock keys under memory pressure
//!   (`allkeys-lru`) must be flagged by the checker, and by the node check
//!   before the first lock; with `noeviction` there is nothing to flag, and
//!   writes to full nodes fail with typed errors.
//! - Clocks: two of three nodes whose clocks run 50 % fast (a fault in the
//!   proxy: `FaultProxy::set_clock_rate`) expire a lock early; the checker
//!   flags the overlap and the node check flagged both nodes beforehand.
//!   Running 0.5 % fast, within the 1 % allowance: nothing to flag.

use crate::support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::{FaultProxy, Faults, RedisNodes, ServerOptions};
use quorumlock::{Error, LockGuard, LossReason, Redlock, Retry};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

const NODES: usize = 5;
const CLIENTS: usize = 16;
/// Clients that hold an auto-extended lock for seconds at a time, all on
/// the last resource.
const HOLDERS: usize = 2;
/// The clients' resources (one each, round robin), then the holders'.
const RESOURCES: [&str; 5] = [
    "chaos:fenced:a",
    "chaos:fenced:b",
    "chaos:plain:c",
    "chaos:plain:d",
    "chaos:held:e",
];
/// The holders' resource, an index into `RESOURCES`.
const HELD: usize = 4;
const TTL: Duration = Duration::from_millis(600);
/// How long a holder keeps its lock: several renewals.
const HOLD: Duration = Duration::from_secs(4);
/// The holders' ttl.
const HOLD_TTL: Duration = Duration::from_secs(2);
/// A scheduling stall of the client process at least this long (a tick
/// that many ms late) counts as the holder being paused: renewal has about
/// a sixth of the ttl to retry in, and a paused holder can lose its lock
/// whatever the library does (the "bounded pauses" assumption).
const STALL: Duration = Duration::from_millis(200);
const NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Time spent inside the critical section between reading and writing.
const SECTION: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------- history

/// One acquisition the library granted, as the client saw it.
#[derive(Debug, Clone)]
struct Grant {
    client: usize,
    resource: usize,
    token: String,
    fence: Option<u64>,
    /// When `lock` was called, and when it returned the guard.
    t_inv: Instant,
    t_ok: Instant,
    /// When the library says the attempt began (`Lease::started`): its
    /// deadline is measured from here.
    started: Instant,
    /// The library's deadline for the grant.
    deadline: Instant,
    /// Until when the client trusted the lock: its deadline, or for an
    /// auto-extended lock the moment `lost()` resolved (or far ahead).
    believed_until: Instant,
    /// When the client called `release` (its window ends at the earlier of
    /// this and `believed_until`).
    release_called: Instant,
    /// Whether the critical section wrote (it does only while valid).
    wrote: bool,
    /// The ttl requested.
    ttl: Duration,
}

impl Grant {
    fn window(&self) -> (Instant, Instant) {
        (self.t_ok, self.believed_until.min(self.release_called))
    }

    /// A plain lock on resource 0 as `client` saw it: asked for at `t_inv`,
    /// granted at `t_ok`, trusted until its deadline (it is not extended)
    /// or until `release_called`.
    fn of(
        client: usize,
        guard: &quorumlock::Lease,
        (t_inv, t_ok): (Instant, Instant),
        release_called: Instant,
        ttl: Duration,
    ) -> Self {
        Grant {
            client,
            resource: 0,
            token: guard.token().as_str().to_owned(),
            fence: None,
            t_inv,
            t_ok,
            started: guard.started(),
            deadline: guard.deadline(),
            believed_until: guard.deadline(),
            release_called,
            wrote: false,
            ttl,
        }
    }
}

/// What happened to one operation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ok,
    /// A documented failure, by kind.
    Failed(&'static str),
    /// The effect is unknown (e.g. a release that could not reach every
    /// node): its keys must be gone within their ttl.
    Ambiguous(&'static str),
    /// An error the library does not document for this call.
    Undocumented(String),
}

#[derive(Debug, Clone)]
struct Op {
    client: usize,
    what: &'static str,
    resource: usize,
    t_inv: Instant,
    t_end: Instant,
    outcome: Outcome,
}

/// A window during which a majority of nodes was down (or answered only
/// after the ttl).
#[derive(Debug, Clone, Copy)]
struct Outage {
    from: Instant,
    /// Until when a quorum was certainly missing: no grant may succeed
    /// within `from..to`.
    to: Instant,
    /// When a quorum was certainly back (`to` or later): a holder's loss
    /// until a holder ttl after this is excused, since its renewals may
    /// have needed the nodes until then.
    back: Instant,
}

/// A holder's lock that `lost()` declared lost before its release.
#[derive(Debug, Clone)]
struct Loss {
    client: usize,
    at: Instant,
    reason: LossReason,
}

#[derive(Debug, Default)]
struct History {
    grants: Vec<Grant>,
    ops: Vec<Op>,
    outages: Vec<Outage>,
    losses: Vec<Loss>,
    /// When the client process's runtime stalled for at least `STALL`:
    /// (tick due, tick run).
    stalls: Vec<(Instant, Instant)>,
    /// When a majority of the nodes, pinged directly (past the proxies and
    /// their faults), answered only after the node timeout: the machine
    /// starved the servers. (ping sent, last answer or give-up.)
    starved: Vec<(Instant, Instant)>,
    /// Every fault episode: what, from, to.
    faults: Vec<(String, Instant, Instant)>,
}

#[derive(Debug, Default)]
struct Recorder {
    history: Mutex<History>,
}

impl Recorder {
    fn grant(&self, grant: Grant) {
        self.history.lock().expect("history").grants.push(grant);
    }
    fn op(&self, op: Op) {
        self.history.lock().expect("history").ops.push(op);
    }
    fn outage(&self, outage: Outage) {
        self.history.lock().expect("history").outages.push(outage);
    }
    fn loss(&self, loss: Loss) {
        self.history.lock().expect("history").losses.push(loss);
    }
    fn fault(&self, what: String, from: Instant, to: Instant) {
        self.history
            .lock()
            .expect("history")
            .faults
            .push((what, from, to));
    }
    fn stall(&self, due: Instant, ran: Instant) {
        self.history
            .lock()
            .expect("history")
            .stalls
            .push((due, ran));
    }
    fn starved(&self, from: Instant, to: Instant) {
        self.history
            .lock()
            .expect("history")
            .starved
            .push((from, to));
    }
    fn take(&self) -> History {
        std::mem::take(&mut *self.history.lock().expect("history"))
    }
}

// ------------------------------------------------------------ renewal log

/// The renewer's debug events (`quorumlock::renew` only: a few per renewal
/// round), kept with their time so that an unexplained holder loss can be
/// shown with what its renewals saw. The last `RENEW_LOG` events are kept.
#[derive(Clone, Default)]
struct RenewLog(Arc<Mutex<std::collections::VecDeque<(Instant, String)>>>);

const RENEW_LOG: usize = 50_000;

/// One event being formatted; logged when dropped.
struct RenewLine(RenewLog, Vec<u8>);

impl std::io::Write for RenewLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.1.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RenewLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.1).trim_end().to_owned();
        let mut log = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == RENEW_LOG {
            log.pop_front();
        }
        log.push_back((Instant::now(), line));
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RenewLog {
    type Writer = RenewLine;
    fn make_writer(&'a self) -> RenewLine {
        RenewLine(self.clone(), Vec::new())
    }
}

impl RenewLog {
    /// The process's log, installed once.
    fn get() -> &'static RenewLog {
        static LOG: std::sync::OnceLock<RenewLog> = std::sync::OnceLock::new();
        LOG.get_or_init(|| {
            use tracing_subscriber::layer::{Layer, SubscriberExt};
            let log = RenewLog::default();
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .without_time()
                .with_writer(log.clone());
            let filter = tracing_subscriber::filter::Targets::new()
                .with_target("quorumlock::renew", tracing::Level::DEBUG);
            let subscriber = tracing_subscriber::registry().with(layer.with_filter(filter));
            // Another subscriber may be installed already: then no log.
            let _ = tracing::subscriber::set_global_default(subscriber);
            log
        })
    }

    /// The events between `from` and `to`, with their time since `start`.
    fn between(&self, start: Instant, from: Instant, to: Instant) -> Vec<String> {
        let log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(at, line)| {
                let ms = at.saturating_duration_since(start).as_secs_f64() * 1000.0;
                format!("      {ms:.1}ms {line}")
            })
            .collect()
    }
}

// ---------------------------------------------------------------- checker

/// Everything the checker found, with enough history to understand it.
#[derive(Debug, Default)]
struct Report {
    violations: Vec<String>,
}

/// Grants whose deadline exceeds `t_inv + ttl` on the client's clock: the
/// client thread was preempted between reading its clock and calling the
/// library for longer than the drift allowance.
fn preempted(history: &History) -> usize {
    history
        .grants
        .iter()
        .filter(|g| g.deadline > g.t_inv + g.ttl)
        .count()
}

impl Report {
    fn flag(&mut self, what: String) {
        self.violations.push(what);
    }
}

fn show(start: Instant, g: &Grant) -> String {
    let ms = |t: Instant| t.saturating_duration_since(start).as_secs_f64() * 1000.0;
    format!(
        "client {} token {}… fence {:?}: invoked {:.1}ms, granted {:.1}ms, deadline {:.1}ms, release called {:.1}ms, wrote {}",
        g.client,
        &g.token[..4],
        g.fence,
        ms(g.t_inv),
        ms(g.t_ok),
        ms(g.deadline),
        ms(g.release_called),
        g.wrote
    )
}

/// How a grant of a semaphore or a reader-writer lock may share its
/// resource with others holding at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Share {
    /// A writer: with nobody.
    Alone,
    /// A reader: with readers only.
    Reader,
    /// A permit of a semaphore of this many permits: with fewer others.
    Permit(usize),
}

/// Checks the windows of a semaphore's or a reader-writer lock's grants
/// (all of one resource) against their sharing rules: at the moment each
/// window opens, the windows open then (including it) must be allowed side
/// by side — at most `L` permits; a writer alone; readers among readers.
/// (The most crowded moment of any set of windows is the opening of one.)
fn check_sharing(start: Instant, grants: &[(Grant, Share)]) -> Report {
    let mut report = Report::default();
    for (i, (a, share)) in grants.iter().enumerate() {
        let (a_from, a_to) = a.window();
        if a_from >= a_to {
            continue;
        }
        let open: Vec<&(Grant, Share)> = grants
            .iter()
            .enumerate()
            .filter(|&(j, (b, _))| {
                let (b_from, b_to) = b.window();
                j != i && b_from <= a_from && a_from < b_to
            })
            .map(|(_, g)| g)
            .collect();
        let broken = match share {
            Share::Permit(limit) => open.len() + 1 > *limit,
            Share::Alone => !open.is_empty(),
            Share::Reader => open.iter().any(|(_, s)| *s == Share::Alone),
        };
        if broken {
            let mut text = format!(
                "{} holders at once ({share:?} opening):\n    {}",
                open.len() + 1,
                show(start, a)
            );
            for (b, s) in &open {
                text.push_str(&format!("\n    {s:?} {}", show(start, b)));
            }
            report.flag(text);
        }
    }
    report
}

/// Checks a history: per grant, the deadline is never overstated; per
/// resource, believed-held windows never overlap, the counter equals the
/// writes, fences increase in grant order; no grant succeeds inside a
/// majority outage; every failure is a documented one.
fn check(start: Instant, history: &History, counters: &[u64], failure_bound: Duration) -> Report {
    let mut report = Report::default();
    for g in &history.grants {
        // The start lies within the call, and the deadline is never later
        // than start + ttl. (The stricter `deadline <= t_inv + ttl` on the
        // client's own clock also needs the client thread not to be
        // preempted for longer than the drift allowance between its clock
        // read and the library's; that is counted, not judged: see
        // `preempted`.)
        if g.started < g.t_inv || g.started > g.t_ok {
            report.flag(format!("start outside the call: {}", show(start, g)));
        }
        if g.deadline > g.started + g.ttl {
            report.flag(format!("deadline overstated: {}", show(start, g)));
        }
    }
    for (r, name) in RESOURCES.iter().enumerate().take(counters.len()) {
        let mut grants: Vec<&Grant> = history.grants.iter().filter(|g| g.resource == r).collect();
        grants.sort_by_key(|g| g.t_ok);
        for (i, a) in grants.iter().enumerate() {
            let (a_from, a_to) = a.window();
            for b in grants.iter().skip(i + 1) {
                let (b_from, b_to) = b.window();
                if b_from >= a_to {
                    break; // sorted by start: no later window can overlap `a`
                }
                if a_from < b_to && b_from < a_to {
                    report.flag(format!(
                        "overlapping windows on {name}:\n    {}\n    {}",
                        show(start, a),
                        show(start, b)
                    ));
                }
            }
        }
        let writes = grants.iter().filter(|g| g.wrote).count() as u64;
        if counters[r] != writes {
            report.flag(format!(
                "counter of {name} is {} but {writes} grants wrote: an update was lost",
                counters[r]
            ));
        }
        let fences: Vec<u64> = grants.iter().filter_map(|g| g.fence).collect();
        if let Some(w) = fences.windows(2).find(|w| w[0] >= w[1]) {
            report.flag(format!(
                "fences on {name} not increasing in grant order: {} then {}",
                w[0], w[1]
            ));
        }
    }
    for outage in &history.outages {
        for g in &history.grants {
            if g.t_inv >= outage.from && g.t_ok <= outage.to {
                report.flag(format!(
                    "granted during a majority outage: {}",
                    show(start, g)
                ));
            }
        }
    }
    let ms = |t: Instant| t.saturating_duration_since(start).as_secs_f64() * 1000.0;
    for loss in majority_up_losses(history) {
        let faults: Vec<String> = history
            .faults
            .iter()
            .filter(|(_, from, to)| *to + HOLD_TTL >= loss.at && *from <= loss.at)
            .map(|(what, from, to)| format!("{what} {:.1}..{:.1}ms", ms(*from), ms(*to)))
            .collect();
        let renewals = RenewLog::get().between(start, loss.at - HOLD_TTL, loss.at);
        report.flag(format!(
            "holder {} lost its lock ({}) at {:.1}ms while a majority of nodes was up; faults in the ttl before: {}; renewals then:\n{}",
            loss.client,
            loss.reason,
            ms(loss.at),
            faults.join(", "),
            renewals.join("\n")
        ));
    }
    for op in &history.ops {
        if let Outcome::Undocumented(e) = &op.outcome {
            report.flag(format!(
                "client {} {} {}: undocumented error: {e}",
                op.client, op.what, RESOURCES[op.resource]
            ));
        }
        if op.what == "lock"
            && matches!(op.outcome, Outcome::Failed(_))
            && op.t_end - op.t_inv > failure_bound
        {
            report.flag(format!(
                "client {} lock failed only after {:?} (bound {failure_bound:?})",
                op.client,
                op.t_end - op.t_inv
            ));
        }
    }
    report
}

/// Holders' losses that no majority outage explains: renewals need a
/// quorum within the validity, so a loss is excused when an outage
/// overlapped the last holder ttl before it. Losses after a stall of the
/// client process, or after a majority of the nodes was starved (see
/// `watch_nodes`), are not judged either; they are counted (see
/// `stalled_losses`).
fn majority_up_losses(history: &History) -> Vec<&Loss> {
    unexcused_by_outages(history)
        .filter(|loss| !stalled_before(history, loss))
        .collect()
}

/// Holders' losses with no majority outage in the holder ttl before them.
fn unexcused_by_outages(history: &History) -> impl Iterator<Item = &Loss> {
    history.losses.iter().filter(|loss| {
        !history
            .outages
            .iter()
            .any(|o| o.from <= loss.at && loss.at <= o.back + HOLD_TTL)
    })
}

/// Whether the client process stalled, or a majority of the nodes was
/// starved, within the holder ttl before `loss`: a renewal then needs
/// answers no node gives within the node timeout, whatever the library
/// does (the "bounded pauses" assumption, for clients and servers alike).
fn stalled_before(history: &History, loss: &Loss) -> bool {
    history
        .stalls
        .iter()
        .chain(&history.starved)
        .any(|&(from, to)| to + HOLD_TTL >= loss.at && from <= loss.at)
}

/// Holders' losses with a majority up that followed a stall of the client
/// process or a starved majority of nodes.
fn stalled_losses(history: &History) -> usize {
    unexcused_by_outages(history)
        .filter(|loss| stalled_before(history, loss))
        .count()
}

/// Records every tick of a 10 ms interval that ran `STALL` or more late:
/// the runtime (and so the renewer) could not run meanwhile.
async fn watch_stalls(shared: Arc<Shared>) {
    let period = Duration::from_millis(10);
    let mut due = Instant::now() + period;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(due).await;
        let ran = Instant::now();
        if ran.saturating_duration_since(due) >= STALL {
            shared.recorder.stall(due, ran);
        }
        due = ran + period;
    }
}

/// Pings every node every 50 ms on direct connections (past the proxies,
/// so no injected fault but a frozen or killed node shows) and records
/// when a majority answered only after the node timeout: a machine so
/// loaded that the servers (or this process's runtime) starve. A killed
/// node's refused ping is not counted as slow, a frozen one's is (only one
/// node is frozen at a time).
async fn watch_nodes(urls: Vec<String>, shared: Arc<Shared>) {
    let mut conns: Vec<Option<redis::aio::MultiplexedConnection>> = vec![None; urls.len()];
    let patience = Duration::from_secs(1);
    while !shared.stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let slow =
            futures::future::join_all(conns.iter_mut().zip(&urls).map(|(conn, url)| async move {
                if conn.is_none() {
                    let config = redis::AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(patience))
                        .set_response_timeout(Some(patience));
                    let client = redis::Client::open(url.as_str()).expect("url");
                    *conn = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .ok();
                }
                let Some(c) = conn.as_mut() else {
                    return false; // down: an outage, not a slow node
                };
                match redis::cmd("PING").query_async::<()>(c).await {
                    Ok(()) => sent.elapsed() > NODE_TIMEOUT,
                    Err(e) if e.is_timeout() => true,
                    Err(_) => {
                        *conn = None;
                        false
                    }
                }
            }))
            .await;
        if slow.iter().filter(|&&slow| slow).count() > NODES / 2 {
            shared.recorder.starved(sent, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sorts a lock failure into a documented kind, or says it is not one.
fn classify(error: &Error) -> Outcome {
    match error {
        Error::Contended { .. } => Outcome::Failed("contended"),
        Error::Unavailable { .. } => Outcome::Failed("unavailable"),
        Error::FenceUnconfirmed { .. } => Outcome::Failed("fence unconfirmed"),
        Error::ValidityExpired { .. } => Outcome::Failed("validity expired"),
        Error::WaitTimeout { .. } => Outcome::Failed("wait timeout"),
        other => Outcome::Undocumented(other.to_string()),
    }
}

// ---------------------------------------------------------------- faults

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillRestart,
    Pause,
    Slow,
    MajorityLoss,
    Latency,
    DropConnections,
    Blackhole,
    HoldReplies,
    RollingRestart,
    SlowMinority,
    FrozenMinority,
}

const FAULTS: [Fault; 11] = [
    Fault::KillRestart,
    Fault::Pause,
    Fault::Slow,
    Fault::MajorityLoss,
    Fault::Latency,
    Fault::DropConnections,
    Fault::Blackhole,
    Fault::HoldReplies,
    Fault::RollingRestart,
    Fault::SlowMinority,
    Fault::FrozenMinority,
];

struct Cluster {
    nodes: Arc<RedisNodes>,
    proxies: Vec<FaultProxy>,
}

impl Cluster {
    async fn start(options: ServerOptions) -> Self {
        let nodes = Arc::new(RedisNodes::start_with(NODES, options).expect("nodes"));
        let mut proxies = Vec::new();
        for server in nodes.iter() {
            proxies.push(FaultProxy::start(server.port()).await.expect("proxy"));
        }
        Self { nodes, proxies }
    }

    fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(FaultProxy::url).collect()
    }

    async fn restart(&self, i: usize) {
        let nodes = self.nodes.clone();
        tokio::task::spawn_blocking(move || nodes[i].restart())
            .await
            .expect("restart task")
            .expect("restart");
    }

    /// Applies one fault episode and heals it.
    async fn inject(&self, fault: Fault, rng: &mut rand::rngs::StdRng, recorder: &Recorder) {
        let victim = rng.random_range(0..NODES);
        let hold = Duration::from_millis(rng.random_range(50..400));
        match fault {
            Fault::KillRestart => {
                self.nodes[victim].kill();
                tokio::time::sleep(hold).await;
                self.restart(victim).await;
            }
            Fault::Pause => {
                self.nodes[victim].pause().expect("pause");
                tokio::time::sleep(hold).await;
                self.nodes[victim].resume().expect("resume");
            }
            Fault::Slow => {
                // The node itself stalls (DEBUG SLEEP), connections stay up.
                let mut admin = support::conn(&self.nodes[victim].url()).await;
                let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg(hold.as_secs_f64())
                    .query_async(&mut admin)
                    .await;
            }
            Fault::MajorityLoss => {
                let mut all: Vec<usize> = (0..NODES).collect();
                all.shuffle(rng);
                let majority = &all[..NODES / 2 + 1];
                for &i in majority {
                    self.nodes[i].kill();
                }
                let from = Instant::now();
                tokio::time::sleep(hold + Duration::from_millis(300)).await;
                // A quorum is certainly missing until the restart that
                // brings it back begins (that node may answer before
                // `restart` returns: it waits for the server to be ready,
                // and for this task to be scheduled), and certainly back
                // once it returned.
                let survivors = NODES - majority.len();
                for (k, &i) in majority.iter().enumerate() {
                    let to = Instant::now();
                    self.restart(i).await;
                    if survivors + k + 1 == NODES / 2 + 1 {
                        let back = Instant::now();
                        recorder.outage(Outage { from, to, back });
                    }
                }
            }
            Fault::Latency => {
                self.proxies[victim].set(Faults::latency(
                    Duration::from_millis(rng.random_range(1..30)),
                    Duration::from_millis(rng.random_range(1..30)),
                    Duration::from_millis(rng.random_range(0..20)),
                ));
                tokio::time::sleep(hold).await;
                self.proxies[victim].heal();
            }
            Fault::DropConnections => {
                self.proxies[victim].drop_connections();
                tokio::time::sleep(hold).await;
            }
            Fault::Blackhole => {
                self.proxies[victim].set(Faults::blackhole());
                tokio::time::sleep(hold + NODE_TIMEOUT).await;
                self.proxies[victim].heal();
            }
            Fault::HoldReplies => {
                // Requests land, replies come back after the ttl: on a
                // majority, no grant may be believed, and cleanup (whose
                // requests still land) must remove what the SETs wrote.
                let mut all: Vec<usize> = (0..NODES).collect();
                all.shuffle(rng);
                let from = Instant::now();
                for &i in &all[..NODES / 2 + 1] {
                    self.proxies[i].set(Faults::hold_replies(TTL + Duration::from_millis(100)));
                }
                tokio::time::sleep(hold).await;
                for proxy in &self.proxies {
                    proxy.heal();
                }
                // No grant can be believed meanwhile, and a holder may lose
                // its lock (replies held past its renewal's timeout).
                let to = Instant::now();
                recorder.outage(Outage { from, to, back: to });
            }
            Fault::SlowMinority => {
                // One node slow (+10 ms each way: a far zone, an fsync
                // stall) for longer than a holder's ttl: it must cost
                // nobody a lock, and no call may wait for it.
                let ms = Duration::from_millis(10);
                self.proxies[victim].set(Faults::latency(ms, ms, Duration::ZERO));
                tokio::time::sleep(HOLD_TTL + hold).await;
                self.proxies[victim].heal();
            }
            Fault::FrozenMinority => {
                // One node frozen (SIGSTOP: a hung host) for longer than a
                // holder's ttl, with requests piling up behind it: renewals
                // and releases decide without it.
                self.nodes[victim].pause().expect("pause");
                tokio::time::sleep(HOLD_TTL + hold).await;
                self.nodes[victim].resume().expect("resume");
            }
            Fault::RollingRestart => {
                // Every node, one at a time, back at once with its data
                // (the nodes persist), a renewal period apart.
                for i in 0..NODES {
                    self.nodes[i].kill();
                    self.restart(i).await;
                    tokio::time::sleep(HOLD_TTL / 2).await;
                }
            }
        }
    }

    /// Heals every proxy and brings every node back.
    async fn heal_all(&self) {
        for proxy in &self.proxies {
            proxy.heal();
        }
        for i in 0..NODES {
            if self.nodes[i].is_running() {
                let _ = self.nodes[i].resume();
            } else {
                self.restart(i).await;
            }
        }
    }

    /// How many of `RESOURCES` still have a lock key on some node.
    async fn leaked_keys(&self) -> usize {
        let mut leaked = 0;
        for resource in RESOURCES {
            leaked += support::values(&self.nodes, resource)
                .await
                .iter()
                .filter(|v| v.is_some())
                .count();
        }
        leaked
    }
}

// ---------------------------------------------------------------- clients

struct Shared {
    recorder: Recorder,
    counters: Vec<AtomicU64>,
    stop: AtomicBool,
}

async fn client(id: usize, locks: Redlock, shared: Arc<Shared>) {
    let resource = id % HELD;
    let name = RESOURCES[resource];
    let fenced = name.contains("fenced");
    while !shared.stop.load(Ordering::Relaxed) {
        let t_inv = Instant::now();
        // One attempt per recorded operation, so that its invocation time
        // is the start the library measures the deadline from.
        let result = if fenced {
            locks.try_lock_fenced(name, TTL).await
        } else {
            locks.try_lock(name, TTL).await
        };
        let t_end = Instant::now();
        let guard = match result {
            Ok(guard) => guard,
            Err(error) => {
                shared.recorder.op(Op {
                    client: id,
                    what: "lock",
                    resource,
                    t_inv,
                    t_end,
                    outcome: classify(&error),
                });
                // Randomized backoff, as lock() would do.
                let pause = Duration::from_micros(2000 + rand::random::<u64>() % 8000);
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        shared.recorder.op(Op {
            client: id,
            what: "lock",
            resource,
            t_inv,
            t_end,
            outcome: Outcome::Ok,
        });
        // The protected update: read, pause, write — lost if two overlap.
        let counter = &shared.counters[resource];
        let value = counter.load(Ordering::SeqCst);
        tokio::time::sleep(SECTION).await;
        let wrote = !guard.validity().is_zero();
        if wrote {
            counter.store(value + 1, Ordering::SeqCst);
        }
        let release_called = Instant::now();
        let grant = Grant {
            client: id,
            resource,
            token: guard.token().as_str().to_owned(),
            fence: guard.fence(),
            t_inv,
            t_ok: t_end,
            started: guard.started(),
            deadline: guard.deadline(),
            believed_until: guard.deadline(),
            release_called,
            wrote,
            ttl: TTL,
        };
        release(guard, id, resource, release_called, &shared.recorder).await;
        shared.recorder.grant(grant);
    }
}

/// Releases `guard` and records how that went.
async fn release(
    guard: LockGuard,
    client: usize,
    resource: usize,
    release_called: Instant,
    recorder: &Recorder,
) {
    let outcome = match guard.release().await {
        Ok(summary) if summary.failures().is_empty() => Outcome::Ok,
        Ok(_) => Outcome::Ambiguous("partial release"),
        // Known not to be held any more: nothing left behind.
        Err(Error::Lost { .. }) => Outcome::Failed("lost before release"),
        Err(other) => Outcome::Undocumented(other.to_string()),
    };
    recorder.op(Op {
        client,
        what: "release",
        resource,
        t_inv: release_called,
        t_end: Instant::now(),
        outcome,
    });
}

/// Holds the shared resource for `HOLD` at a time with auto-extension,
/// through whatever faults come, and records the window it trusted it for
/// and any loss.
async fn holder(id: usize, locks: Redlock, shared: Arc<Shared>) {
    let name = RESOURCES[HELD];
    while !shared.stop.load(Ordering::Relaxed) {
        let t_inv = Instant::now();
        // Contending as users do, with `lock`'s randomized retry delays (a
        // contender that tries again every few ms keeps the nodes the
        // holder lost a key on occupied, so that no extension can put it
        // back there). Its deadline is measured from the attempt that
        // succeeded, within this call.
        let result = locks.lock(name, HOLD_TTL).await;
        let t_end = Instant::now();
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(error) => classify(error),
        };
        shared.recorder.op(Op {
            client: id,
            // Not an attempt: `lock` retries up to HOLD, unlike the
            // single attempts whose failures must come quickly.
            what: "hold",
            resource: HELD,
            t_inv,
            t_end,
            outcome,
        });
        let Ok(guard) = result else {
            continue;
        };
        let (started, deadline) = (guard.started(), guard.deadline());
        guard.auto_extend();
        let lost = tokio::select! {
            reason = guard.lost() => Some((reason, Instant::now())),
            () = tokio::time::sleep(HOLD) => None,
        };
        // The protected update, at the end of the hold.
        let counter = &shared.counters[HELD];
        let value = counter.load(Ordering::SeqCst);
        tokio::time::sleep(SECTION).await;
        let wrote = !guard.validity().is_zero();
        if wrote {
            counter.store(value + 1, Ordering::SeqCst);
        }
        let release_called = Instant::now();
        if let Some((reason, at)) = lost {
            shared.recorder.loss(Loss {
                client: id,
                at,
                reason,
            });
        }
        shared.recorder.grant(Grant {
            client: id,
            resource: HELD,
            token: guard.token().as_str().to_owned(),
            fence: None,
            t_inv,
            t_ok: t_end,
            started,
            deadline,
            believed_until: lost.map_or(release_called, |(_, at)| at),
            release_called,
            wrote,
            ttl: HOLD_TTL,
        });
        release(guard, id, HELD, release_called, &shared.recorder).await;
    }
}

/// Totals of one or more runs.
#[derive(Debug, Default)]
struct Totals {
    runs: u64,
    grants: u64,
    outcomes: BTreeMap<String, u64>,
    faults: BTreeMap<String, u64>,
    violations: u64,
    leaked_keys: u64,
    preempted: u64,
    holds: u64,
    losses: u64,
    losses_with_majority_up: u64,
    losses_after_stalls: u64,
    stalls: u64,
    starved: u64,
}

impl Totals {
    fn print(&self) {
        let mut out = String::new();
        let _ = writeln!(out, "chaos totals over {} run(s):", self.runs);
        let _ = writeln!(out, "  grants (acquisitions): {}", self.grants);
        for (outcome, n) in &self.outcomes {
            let _ = writeln!(out, "  {outcome}: {n}");
        }
        for (fault, n) in &self.faults {
            let _ = writeln!(out, "  fault {fault}: {n}");
        }
        let _ = writeln!(
            out,
            "  grants whose client thread was preempted past the drift allowance before the call began: {}",
            self.preempted
        );
        let _ = writeln!(
            out,
            "  holders' auto-extended locks: {} held, {} lost, {} of them while a majority was up",
            self.holds, self.losses, self.losses_with_majority_up
        );
        let _ = writeln!(
            out,
            "  client stalls of {STALL:?} or more: {}; pings a majority of nodes answered after the node timeout: {}; followed by {} holder losses (not judged)",
            self.stalls, self.starved, self.losses_after_stalls
        );
        let _ = writeln!(out, "  violations: {}", self.violations);
        let _ = write!(out, "  leaked keys: {}", self.leaked_keys);
        println!("{out}");
    }
}

fn seed() -> u64 {
    std::env::var("QUORUMLOCK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

/// One chaos run: clients contend while `seed`'s schedule of faults is
/// injected, until at least `min_grants` grants and every fault kind. How long that takes depends on the
/// machine's load: the run is not timed, but fails if no grant at all
/// comes for [`support::HANG_GUARD`] (a hang, not a slow machine).
async fn chaos_run(seed: u64, min_grants: usize, totals: &mut Totals) {
    println!("chaos seed = {seed} (replay with QUORUMLOCK_CHAOS_SEED={seed})");
    RenewLog::get();
    // appendonly with `appendfsync no`: the tests kill processes, not
    // machines, so a write(2) of the AOF before the reply is what every
    // acknowledged write needs to survive SIGKILL (fences, and the keys of
    // a node restarted at once). Redis writes the AOF before replying under
    // `always` and `no`, but not under `everysec`: there, while a background
    // fsync is slow (a busy disk, as on a loaded CI machine), the write is
    // postponed for up to 2 s and the replies go out first (aof.c,
    // flushAppendOnlyFile), so a kill loses acknowledged writes — the
    // restarted node no longer holds a lock it granted (the likely cause of
    // two holders' overlap under load, seed 13836646362270815075; the
    // node check calls such a node unsafe). `always` would add an fsync
    // per event loop on a disk the five nodes share.
    let options = ServerOptions::new()
        .persistent()
        .arg("--appendfsync")
        .arg("no");
    let cluster = Cluster::start(options).await;
    let shared = Arc::new(Shared {
        recorder: Recorder::default(),
        counters: RESOURCES.iter().map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
    });
    let managers: Vec<Redlock> = (0..CLIENTS)
        .map(|_| {
            Redlock::builder()
                .nodes(cluster.urls())
                .node_timeout(NODE_TIMEOUT)
                .build()
                .expect("config")
        })
        .collect();
    let start = Instant::now();
    let mut clients: Vec<_> = managers
        .iter()
        .enumerate()
        .map(|(id, locks)| tokio::spawn(client(id, locks.clone(), shared.clone())))
        .collect();
    let holders: Vec<Redlock> = (0..HOLDERS)
        .map(|_| {
            Redlock::builder()
                .nodes(cluster.urls())
                .node_timeout(NODE_TIMEOUT)
                .retry(Retry::forever().wait(HOLD))
                .build()
                .expect("config")
        })
        .collect();
    clients.extend(
        holders
            .iter()
            .enumerate()
            .map(|(i, locks)| tokio::spawn(holder(CLIENTS + i, locks.clone(), shared.clone()))),
    );
    clients.push(tokio::spawn(watch_stalls(shared.clone())));
    let direct = cluster.nodes.iter().map(|n| n.url()).collect();
    clients.push(tokio::spawn(watch_nodes(direct, shared.clone())));

    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut injected: BTreeMap<Fault, u64> = BTreeMap::new();
    let mut schedule = Vec::new();
    // The grant count last seen to grow, and when.
    let mut progress = (0, Instant::now());
    let stalled = loop {
        let grants = shared
            .recorder
            .history
            .lock()
            .expect("history")
            .grants
            .len();
        let every_kind = injected.len() == FAULTS.len();
        if grants >= min_grants && every_kind {
            break None;
        }
        if grants > progress.0 {
            progress = (grants, Instant::now());
        } else if progress.1.elapsed() > support::HANG_GUARD {
            break Some(progress);
        }
        if schedule.is_empty() {
            // Every kind once per round, in a seeded order.
            schedule = FAULTS.to_vec();
            schedule.shuffle(&mut rng);
        }
        let fault = schedule.pop().expect("non-empty");
        let from = Instant::now();
        cluster.inject(fault, &mut rng, &shared.recorder).await;
        shared
            .recorder
            .fault(format!("{fault:?}"), from, Instant::now());
        *injected.entry(fault).or_default() += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..250))).await;
    };
    shared.stop.store(true, Ordering::Relaxed);
    for c in clients {
        support::no_hang("chaos client", c)
            .await
            .expect("client task");
    }
    cluster.heal_all().await;
    for locks in managers.iter().chain(&holders) {
        locks.settle().await;
    }
    // Keys that ambiguous operations may have left expire within their ttl.
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    let leaked = cluster.leaked_keys().await;

    let history = shared.recorder.take();
    let counters: Vec<u64> = shared
        .counters
        .iter()
        .map(|c| c.load(Ordering::SeqCst))
        .collect();
    // One attempt: acquire, write-back and cleanup, each within the node
    // timeout, with slack for a loaded 2-core machine.
    let failure_bound = 3 * NODE_TIMEOUT + Duration::from_secs(2);
    let report = check(start, &history, &counters, failure_bound);

    totals.runs += 1;
    totals.grants += history.grants.len() as u64;
    for op in &history.ops {
        let key = format!("{} {:?}", op.what, op.outcome);
        *totals.outcomes.entry(key).or_default() += 1;
    }
    for (fault, n) in injected {
        *totals.faults.entry(format!("{fault:?}")).or_default() += n;
    }
    totals.violations += report.violations.len() as u64;
    totals.leaked_keys += leaked as u64;
    totals.preempted += preempted(&history) as u64;
    totals.holds += history.grants.iter().filter(|g| g.resource == HELD).count() as u64;
    totals.losses += history.losses.len() as u64;
    totals.losses_with_majority_up += majority_up_losses(&history).len() as u64;
    totals.losses_after_stalls += stalled_losses(&history) as u64;
    totals.stalls += history.stalls.len() as u64;
    totals.starved += history.starved.len() as u64;
    totals.print();

    assert!(
        report.violations.is_empty(),
        "seed {seed}: {} violation(s):\n{}",
        report.violations.len(),
        report.violations.join("\n")
    );
    assert_eq!(leaked, 0, "seed {seed}: lock keys left after their ttl");
    if let Some((grants, since)) = stalled {
        panic!(
            "seed {seed}: no grant for {:?} after {grants} grants (at {:?} into the run)",
            support::HANG_GUARD,
            since - start
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_ci_profile() {
    let mut totals = Totals::default();
    chaos_run(seed(), 10_000, &mut totals).await;
    assert_eq!(
        totals.faults.len(),
        FAULTS.len(),
        "every fault kind was injected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: set QUORUMLOCK_SOAK_SECS and run with --ignored"]
async fn chaos_soak() {
    let secs = std::env::var("QUORUMLOCK_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let until = Instant::now() + Duration::from_secs(secs);
    let mut totals = Totals::default();
    while Instant::now() < until {
        chaos_run(rand::random(), 10_000, &mut totals).await;
    }
}

// ------------------------------------------------------- negative controls

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restart {
    /// Straight back up, empty: the known way to break Redlock.
    Immediate,
    /// Kept down until the first holder's ttl has passed.
    Delayed,
    /// Straight back up, but with every write persisted.
    Persistent,
}

/// B's side of a two-client scenario: single attempts on `control` until
/// one is granted (a failed attempt's invocation is not B's). Returns the
/// guard, when the granted attempt was called and when it returned.
async fn until_granted(b_locks: &Redlock, ttl: Duration) -> (LockGuard, Instant, Instant) {
    support::no_hang("B locks, sooner or later", async {
        loop {
            let b_inv = Instant::now();
            if let Ok(b) = b_locks.try_lock("control", ttl).await {
                break (b, b_inv, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A holds the lock on all 3 nodes; 2 of them restart; B then tries. Returns
/// what the checker says about the two grants.
async fn restart_scenario(mode: Restart) -> Report {
    let options = match mode {
        Restart::Persistent => ServerOptions::new().persistent(),
        Restart::Immediate | Restart::Delayed => ServerOptions::new(),
    };
    let nodes = RedisNodes::start_with(3, options).expect("nodes");
    let ttl = Duration::from_secs(2);
    let retry = Retry::forever()
        .delay(Duration::from_millis(20))
        .wait(Duration::from_secs(10));
    let client = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .retry(retry)
            // Generous: a loaded machine must not turn a grant into a timeout.
            .node_timeout(Duration::from_secs(2))
            .build()
            .expect("config")
    };
    let (a_locks, b_locks) = (client(), client());
    // Warm A's connections so that its grant reaches all three nodes.
    support::warm(&a_locks, ttl).await;
    let start = Instant::now();

    let t_inv = Instant::now();
    let a = a_locks.lock("control", ttl).await.expect("A locks");
    let a_ok = Instant::now();
    // A holds a quorum (2 of 3) at least; with any two nodes restarted
    // empty, B can then assemble a quorum of its own while A still believes
    // it holds the lock.
    assert!(support::holding(&nodes, "control", a.token().as_str()).await >= 2);
    for i in 0..2 {
        nodes[i].kill();
        if mode == Restart::Delayed {
            // Down for longer than any lock it held may live.
            tokio::time::sleep(ttl).await;
        }
        nodes[i].restart().expect("restart");
    }
    // B retries with single attempts, so its invocation time is the start of
    // the attempt that succeeded.
    let (b, b_inv, b_ok) = until_granted(&b_locks, ttl).await;
    let a_release = Instant::now();
    let history = History {
        grants: vec![
            Grant::of(0, &a.lease(), (t_inv, a_ok), a_release, ttl),
            Grant::of(1, &b.lease(), (b_inv, b_ok), Instant::now(), ttl),
        ],
        ..History::default()
    };
    let _ = a.release().await;
    let _ = b.release().await;
    check(start, &history, &[0], Duration::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_empty_restart_is_flagged_every_time() {
    for run in 0..5 {
        let report = restart_scenario(Restart::Immediate).await;
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.contains("overlapping windows")),
            "run {run}: the checker missed the known violation: {report:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_or_persistent_restart_is_not_flagged() {
    for mode in [Restart::Delayed, Restart::Persistent] {
        let report = restart_scenario(mode).await;
        assert!(report.violations.is_empty(), "{mode:?}: {report:?}");
    }
}

// ----------------------------------------------------- eviction

/// A holds the lock on 3 nodes that evict (or refuse writes) when full; 2
/// of them are filled until A's key is gone (or writes are refused); B then
/// tries once. Returns the node check's report from before the first lock,
/// the checker's verdict on the two clients, and B's error if it failed.
async fn eviction_scenario(policy: &str) -> (quorumlock::check::Report, Report, Option<Error>) {
    let nodes = RedisNodes::start_with(
        3,
        ServerOptions::new()
            .arg("--maxmemory")
            .arg("4mb")
            .arg("--maxmemory-policy")
            .arg(policy),
    )
    .expect("nodes");
    let ttl = Duration::from_secs(10);
    let client = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .retry(Retry::none())
            .node_timeout(Duration::from_secs(2))
            .build()
            .expect("config")
    };
    let (a_locks, b_locks) = (client(), client());
    // The node check, before any lock.
    let doctor = a_locks
        .check_with(
            &quorumlock::check::CheckOptions::new()
                .clock_interval(Duration::from_millis(100))
                .latency_samples(3)
                .skip_access_probe(),
        )
        .await;
    support::warm(&a_locks, ttl).await;
    let start = Instant::now();
    let t_inv = Instant::now();
    let a = a_locks.lock("control", ttl).await.expect("A locks");
    let a_ok = Instant::now();
    // `lock` returns at the quorum's decision; the third node's answer is
    // followed in the background.
    a_locks.settle().await;
    assert_eq!(
        support::holding(&nodes, "control", a.token().as_str()).await,
        3
    );

    // Memory pressure on nodes 0 and 1: values of shrinking size, each
    // until the node refuses it (a refused large value frees its buffer,
    // leaving room for smaller ones), or until the lock key is evicted.
    for server in nodes.iter().take(2) {
        let mut c = support::conn(&server.url()).await;
        support::no_hang("memory pressure", async {
            let mut n = 0;
            for size in [64 * 1024, 4096, 256, 16, 1] {
                let filler = "x".repeat(size);
                loop {
                    n += 1;
                    let set: redis::RedisResult<()> = redis::cmd("SET")
                        .arg(format!("f{n}"))
                        .arg(&filler)
                        .query_async(&mut c)
                        .await;
                    if let Err(e) = set {
                        assert!(e.to_string().contains("OOM"), "{e}");
                        if size == 1 {
                            // Full. Keep it full while B tries: the server
                            // shrinks idle client buffers in the background,
                            // which would make room for a small write again.
                            let _: () = redis::cmd("CONFIG")
                                .arg("SET")
                                .arg("maxmemory")
                                .arg("1mb")
                                .query_async(&mut c)
                                .await
                                .expect("CONFIG SET");
                        }
                        break;
                    }
                    let exists: bool = redis::cmd("EXISTS")
                        .arg("control")
                        .query_async(&mut c)
                        .await
                        .expect("EXISTS");
                    if !exists {
                        return;
                    }
                }
            }
        })
        .await;
    }

    let b_inv = Instant::now();
    let b = b_locks.try_lock("control", ttl).await;
    let b_ok = Instant::now();
    let a_release = Instant::now();
    let mut grants = vec![Grant::of(0, &a.lease(), (t_inv, a_ok), a_release, ttl)];
    let error = match b {
        Ok(b) => {
            grants.push(Grant::of(1, &b.lease(), (b_inv, b_ok), Instant::now(), ttl));
            let _ = b.release().await;
            None
        }
        Err(e) => Some(e),
    };
    let history = History {
        grants,
        ..History::default()
    };
    let _ = a.release().await;
    (doctor, check(start, &history, &[0], Duration::MAX), error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_lock_keys_breaks_the_lock_and_the_doctor_said_so() {
    let (doctor, report, error) = eviction_scenario("allkeys-lru").await;
    // Flagged before the first lock…
    assert!(doctor.is_unsafe(), "{doctor}");
    assert!(
        doctor.nodes.iter().all(|n| n
            .findings
            .iter()
            .any(|f| f.aspect == quorumlock::check::Aspect::Eviction
                && f.severity == quorumlock::check::Severity::Unsafe)),
        "{doctor}"
    );
    // …and the checker sees what it costs: B got the lock A still holds.
    assert!(error.is_none(), "B was refused: {error:?}");
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("overlapping windows")),
        "the checker missed the eviction: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_keeps_the_lock_and_refuses_writes_with_typed_errors() {
    let (doctor, report, error) = eviction_scenario("noeviction").await;
    assert!(!doctor.is_unsafe(), "{doctor}");
    assert!(report.violations.is_empty(), "{report:?}");
    let error = error.expect("B cannot lock what A holds");
    // The full nodes answer B with an error of their own, not a grant (the
    // attempt may decide before both of them answered).
    assert!(
        error
            .node_failures()
            .iter()
            .any(|f| f.error.to_string().contains("OOM")),
        "{error:?}"
    );
    assert!(error.is_retryable(), "{error:?}");
}

// ------------------------------------------------------------------ clock

/// Two of three nodes run their clocks `rate` times as fast as the
/// client's (a fault in the proxy in front of them: plain locks' expiries
/// shrink, `TIME` runs fast). A holds the lock; B tries until it gets it.
/// Returns the node check's report from before the first lock, and the
/// checker's verdict on the two grants.
async fn clock_scenario(rate: f64) -> (quorumlock::check::Report, Report) {
    let nodes = RedisNodes::start(3).expect("nodes");
    let mut proxies = Vec::new();
    for server in &nodes {
        proxies.push(FaultProxy::start(server.port()).await.expect("proxy"));
    }
    for proxy in &proxies[..2] {
        proxy.set_clock_rate(rate);
    }
    let ttl = Duration::from_secs(2);
    let client = || {
        Redlock::builder()
            .nodes(proxies.iter().map(FaultProxy::url))
            .retry(Retry::none())
            .node_timeout(Duration::from_secs(2))
            .build()
            .expect("config")
    };
    let (a_locks, b_locks) = (client(), client());
    let doctor = a_locks
        .check_with(
            &quorumlock::check::CheckOptions::new()
                .clock_interval(Duration::from_millis(500))
                .latency_samples(3)
                .skip_access_probe(),
        )
        .await;
    support::warm(&a_locks, ttl).await;
    support::warm(&b_locks, ttl).await;
    let start = Instant::now();
    let t_inv = Instant::now();
    let a = a_locks.lock("control", ttl).await.expect("A locks");
    let a_ok = Instant::now();
    let (b, b_inv, b_ok) = until_granted(&b_locks, ttl).await;
    let a_release = Instant::now();
    let history = History {
        grants: vec![
            Grant::of(0, &a.lease(), (t_inv, a_ok), a_release, ttl),
            Grant::of(1, &b.lease(), (b_inv, b_ok), Instant::now(), ttl),
        ],
        ..History::default()
    };
    let _ = a.release().await;
    let _ = b.release().await;
    (doctor, check(start, &history, &[0], Duration::MAX))
}

fn clock_findings(
    doctor: &quorumlock::check::Report,
    i: usize,
) -> Vec<quorumlock::check::Severity> {
    doctor.nodes[i]
        .findings
        .iter()
        .filter(|f| f.aspect == quorumlock::check::Aspect::Clock)
        .map(|f| f.severity)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_fast_beyond_the_drift_allowance_break_the_lock_and_the_doctor_said_so() {
    let (doctor, report) = clock_scenario(1.5).await;
    for i in 0..2 {
        assert_eq!(
            clock_findings(&doctor, i),
            [quorumlock::check::Severity::Unsafe],
            "{doctor}"
        );
    }
    assert!(
        !clock_findings(&doctor, 2).contains(&quorumlock::check::Severity::Unsafe),
        "{doctor}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("overlapping windows")),
        "the checker missed the fast clocks: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_fast_within_the_drift_allowance_are_safe() {
    // 0.5 % fast, against the default 1 % allowance.
    let (doctor, report) = clock_scenario(1.005).await;
    for i in 0..3 {
        assert!(
            !clock_findings(&doctor, i).contains(&quorumlock::check::Severity::Unsafe),
            "{doctor}"
        );
    }
    assert!(report.violations.is_empty(), "{report:?}");
}

// ----------------------------------------------------- single scenarios

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_paused_past_its_deadline_learns_it_and_is_fenced_off() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let retry = Retry::forever()
        .delay(Duration::from_millis(10))
        .wait(Duration::from_secs(10));
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .retry(retry)
        .build()
        .expect("config");
    // A toy store that rejects writes fenced lower than the highest it saw.
    let store = Mutex::new((0u64, String::new()));
    let write = |fence: u64, value: &str| {
        let mut s = store.lock().expect("store");
        if fence < s.0 {
            return false;
        }
        *s = (fence, value.to_owned());
        true
    };

    let stale = locks
        .lock_fenced("report", Duration::from_millis(400))
        .await
        .expect("lock");
    // The "pause": the holder does nothing until well past its deadline.
    assert_eq!(
        stale.lost().await,
        LossReason::Expired,
        "lost() reports the pause"
    );
    let fresh = locks
        .lock_fenced("report", TTL)
        .await
        .expect("lock after expiry");
    assert!(fresh.fence() > stale.fence());
    assert!(write(fresh.fence().expect("fence"), "fresh"));
    // The stale holder wakes up and writes: the store turns it away.
    assert!(!write(stale.fence().expect("fence"), "stale"));
    assert_eq!(store.lock().expect("store").1, "fresh");
    fresh.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_held_back_past_the_ttl_refuse_the_grant_and_clean_up() {
    let cluster = Cluster::start(ServerOptions::new()).await;
    let locks = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry(Retry::none())
        .build()
        .expect("config");
    support::warm(&locks, TTL).await;
    for proxy in &cluster.proxies[..3] {
        proxy.set(Faults::hold_replies(TTL + Duration::from_millis(200)));
    }
    let err = locks
        .try_lock("late", TTL)
        .await
        .expect_err("replies come too late");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    // The SETs landed; the cleanup requests behind them land too. Settled,
    // and with the proxies healed, no node holds the key — well before the
    // ttl could have removed it.
    locks.settle().await;
    for proxy in &cluster.proxies {
        proxy.heal();
    }
    assert_eq!(
        support::values(&cluster.nodes, "late").await,
        vec![None; NODES]
    );
}

// ------------------------------------------------------- checker self-test

#[tokio::test(start_paused = true)]
async fn the_checker_sees_each_kind_of_violation() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let g = |client, from, to, fence, wrote| Grant {
        client,
        resource: 0,
        token: "abcdef".into(),
        fence,
        t_inv: ms(from),
        t_ok: ms(from),
        started: ms(from),
        deadline: ms(to),
        believed_until: ms(to),
        release_called: ms(to),
        wrote,
        ttl: Duration::from_secs(1),
    };
    let history = |grants| History {
        grants,
        ops: Vec::new(),
        outages: Vec::new(),
        losses: Vec::new(),
        stalls: Vec::new(),
        starved: Vec::new(),
        faults: Vec::new(),
    };
    let clean = history(vec![
        g(0, 0, 100, Some(1), true),
        g(1, 100, 200, Some(2), true),
    ]);
    assert!(check(t0, &clean, &[2], Duration::MAX).violations.is_empty());

    let overlap = history(vec![g(0, 0, 150, None, true), g(1, 100, 200, None, true)]);
    assert!(check(t0, &overlap, &[2], Duration::MAX).violations[0].contains("overlapping"));

    let lost_update = history(vec![g(0, 0, 100, None, true), g(1, 100, 200, None, true)]);
    assert!(check(t0, &lost_update, &[1], Duration::MAX).violations[0].contains("lost"));

    let fences = history(vec![
        g(0, 0, 100, Some(5), true),
        g(1, 100, 200, Some(5), true),
    ]);
    assert!(check(t0, &fences, &[2], Duration::MAX).violations[0].contains("fences"));

    let mut outside = g(0, 0, 100, None, false);
    outside.started = ms(50);
    let report = check(t0, &history(vec![outside]), &[0], Duration::MAX);
    assert!(report.violations[0].contains("outside the call"));

    let mut overstated = g(0, 0, 100, None, false);
    overstated.deadline = ms(5000);
    let report = check(t0, &history(vec![overstated]), &[0], Duration::MAX);
    assert!(report.violations[0].contains("overstated"));

    let mut during = history(vec![g(0, 200, 300, None, false)]);
    during.outages.push(Outage {
        from: ms(100),
        to: ms(400),
        back: ms(400),
    });
    assert!(check(t0, &during, &[0], Duration::MAX).violations[0].contains("outage"));

    // A holder's loss is excused only by a majority outage shortly before.
    let mut lost = history(Vec::new());
    let loss = |at| Loss {
        client: 0,
        at: ms(at),
        reason: LossReason::Unreachable,
    };
    lost.outages.push(Outage {
        from: ms(100),
        to: ms(300),
        back: ms(400),
    });
    lost.losses.push(loss(300));
    lost.losses.push(Loss {
        at: ms(400) + HOLD_TTL,
        ..loss(0)
    });
    // Excused until a ttl after the quorum was back, not after it began
    // to come back.
    lost.losses.push(Loss {
        at: ms(350) + HOLD_TTL,
        ..loss(0)
    });
    assert!(check(t0, &lost, &[0], Duration::MAX).violations.is_empty());
    lost.losses.push(loss(50));
    let report = check(t0, &lost, &[0], Duration::MAX);
    assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    assert!(report.violations[0].contains("while a majority of nodes was up"));
    // After the client process stalled, or a majority of nodes was
    // starved, a loss is counted, not judged.
    let mut starved = History {
        losses: lost.losses.clone(),
        outages: lost.outages.clone(),
        ..History::default()
    };
    lost.stalls.push((ms(10), ms(40)));
    assert!(check(t0, &lost, &[0], Duration::MAX).violations.is_empty());
    assert_eq!(stalled_losses(&lost), 1);
    starved.starved.push((ms(20), ms(30)));
    assert!(
        check(t0, &starved, &[0], Duration::MAX)
            .violations
            .is_empty()
    );
    assert_eq!(stalled_losses(&starved), 1);
}

// ------------------------------------------- semaphore and reader-writer lock

/// Records one grant of a semaphore or reader-writer lock as the checker
/// sees it: asked for at `t_inv`, held from when the call returned until
/// release was called.
fn shared_grant(
    client: usize,
    guard: &quorumlock::Lease,
    t_inv: Instant,
    t_ok: Instant,
    ttl: Duration,
) -> Grant {
    Grant::of(client, guard, (t_inv, t_ok), Instant::now(), ttl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_rwlock_windows_hold_their_rules_while_nodes_restart() {
    // Persistent nodes, one at a time killed and restarted at once.
    let nodes =
        Arc::new(RedisNodes::start_with(5, ServerOptions::new().persistent()).expect("nodes"));
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .retry(
            Retry::forever()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(10))
                .wait(Duration::from_secs(60)),
        )
        .build()
        .expect("config");
    let ttl = Duration::from_secs(3);
    let start = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let chaos = {
        let (nodes, done) = (nodes.clone(), done.clone());
        // Every node once, then some: the holders keep going until then.
        tokio::spawn(async move {
            for restart in 0..8 {
                let i = restart % nodes.len();
                nodes[i].kill();
                tokio::time::sleep(Duration::from_millis(100)).await;
                nodes[i].restart().expect("restart");
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    const PERMITS: usize = 3;
    let permits: Arc<Mutex<Vec<(Grant, Share)>>> = Arc::default();
    let rw: Arc<Mutex<Vec<(Grant, Share)>>> = Arc::default();
    let mut tasks = Vec::new();
    for client in 0..15 {
        let (semaphore, permits) = (
            locks.semaphore("chaos:sem", PERMITS as u32),
            permits.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let t_inv = Instant::now();
                let guard = semaphore
                    .acquire(ttl)
                    .await
                    .expect("a permit, sooner or later");
                let t_ok = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let grant = shared_grant(client, &guard.lease(), t_inv, t_ok, ttl);
                permits
                    .lock()
                    .expect("grants")
                    .push((grant, Share::Permit(PERMITS)));
                guard.release().await.expect("release with a majority up");
            }
        }));
    }
    for client in 0..10 {
        let (lock, rw) = (locks.rwlock("chaos:rw"), rw.clone());
        let writer = client % 3 == 0;
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut rounds = 0;
            while rounds < 2 || !done.load(Ordering::SeqCst) {
                rounds += 1;
                let t_inv = Instant::now();
                let guard = if writer {
                    lock.write(ttl).await.map(LockGuard::from)
                } else {
                    lock.read(ttl).await.map(LockGuard::from)
                }
                .expect("a hold, sooner or later");
                let t_ok = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let grant = shared_grant(client, &guard.lease(), t_inv, t_ok, ttl);
                let share = if writer { Share::Alone } else { Share::Reader };
                rw.lock().expect("grants").push((grant, share));
                guard.release().await.expect("release with a majority up");
            }
        }));
    }
    let granted = || permits.lock().expect("grants").len() + rw.lock().expect("grants").len();
    for task in tasks {
        support::no_stall("the tasks", granted, task)
            .await
            .expect("task");
    }
    chaos.await.expect("chaos");
    for (grants, tasks) in [(&permits, 15), (&rw, 10)] {
        let grants = grants.lock().expect("grants");
        assert!(grants.len() >= 2 * tasks, "{}", grants.len());
        let report = check_sharing(start, &grants);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_counting_holders_per_node_is_flagged_and_ours_refuses_the_third() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let ttl = Duration::from_secs(10);
    // The naive design: each node admits up to 2 holders of any token, a
    // holder needs a majority. A on nodes {0, 1}, B on {1, 2}, C on {0, 2}.
    let admit = redis::Script::new(
        "if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then \
           redis.call('SADD', KEYS[1], ARGV[1]) return 1 end return 0",
    );
    let start = Instant::now();
    let mut grants = Vec::new();
    for (client, on) in [[0, 1], [1, 2], [0, 2]].into_iter().enumerate() {
        let token = format!("naive-token-{client}");
        let t_inv = Instant::now();
        let mut yes = 0;
        for i in on {
            let mut c = support::conn(&nodes[i].url()).await;
            let admitted: i64 = admit
                .key("naive")
                .arg(&token)
                .arg(2)
                .invoke_async(&mut c)
                .await
                .expect("admit");
            yes += admitted;
        }
        assert_eq!(yes, 2, "a majority of 3");
        let t_ok = Instant::now();
        let deadline = t_ok + ttl;
        grants.push((
            Grant {
                client,
                resource: 0,
                token,
                fence: None,
                t_inv,
                t_ok,
                started: t_inv,
                deadline,
                believed_until: deadline,
                release_called: deadline,
                wrote: false,
                ttl,
            },
            Share::Permit(2),
        ));
    }
    let report = check_sharing(start, &grants);
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("3 holders at once")),
        "the checker missed three holders of two permits: {report:?}"
    );
    // quorumlock's semaphore, the same three clients on the same nodes:
    // the third is refused.
    let locks = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(2))
        .retry(Retry::none())
        .build()
        .expect("config");
    let a = locks
        .semaphore("ours", 2)
        .try_acquire(ttl)
        .await
        .expect("A");
    let b = locks
        .semaphore("ours", 2)
        .try_acquire(ttl)
        .await
        .expect("B");
    assert!(matches!(
        locks.semaphore("ours", 2).try_acquire(ttl).await,
        Err(Error::Contended { .. })
    ));
    a.release().await.expect("release");
    b.release().await.expect("release");
}
