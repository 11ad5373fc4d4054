//! Safety under chaos, Jepsen-style: many clients contend for locks over
//! real redis-server nodes while a seeded injector kills, pauses, slows and
//! partitions them; every client's beliefs are recorded on one monotonic
//! clock and checked afterwards.
//!
//! - `chaos_ci_profile`: the CI run — at least 10,000 grants over 5 nodes,
//!   16 clients (fair and plain), every fault kind, however long a loaded
//!   machine takes for them (no grant for a minute fails it: a hang).
//!   `QUORUMLOCK_CHAOS_SEED=N` replays a run's fault schedule.
//! - `chaos_soak` (ignored): `QUORUMLOCK_SOAK_SEEDS=100 cargo test
//!   --all-features --test it chaos_soak -- --ignored --nocapture` runs 100
//!   seeds back to back (every fault kind in each), checks the negative
//!   controls before and after, appends a line per seed to
//!   `tests/it/soak-results.jsonl` and prints the totals.
//! - Holders keep auto-extended locks for seconds at a time through the
//!   same faults, including rolling restarts of every node; a holder that
//!   loses its lock while a majority of nodes was up is a failure.
//! - Key loss (issue #53): two fault kinds remove our lock keys from under
//!   their holders, past the proxies, on a minority or a majority:
//!   **keys deleted** (an operator's `DEL` of the lock keys, or
//!   `FLUSHALL`) and **eviction** (a node briefly at a `maxmemory` just
//!   above what it uses, `allkeys-lru`, filler keys written beside ours
//!   until ours are evicted, then its settings restored and the fillers
//!   deleted). Each is recorded as a wipe (what it removed, and the keys
//!   of the nodes it spared): where it left a majority without a holder's
//!   key, a second owner may legitimately be granted, and the checker
//!   excuses that overlap (that resource, that time window only) and
//!   measures it — from the later grant until the first holder learned
//!   it lost. Holders track their keys (`HeldKeyTracking::WhereAvailable`)
//!   in even seeds and not in odd ones; the soak row says which
//!   (`tracking`) and lists the holders' overlaps (`key_loss_overlaps_ms`),
//!   and the totals quote their p50/p99/max for each. Losses, lost updates
//!   and fence resets after such wipes are counted apart, not judged.
//! - Fair clients: 7 of the 16 clients call `fair_lock` (told their turn by
//!   releases) instead of single attempts: three on each of two resources
//!   of their own, and one on a resource it shares with a single-attempt
//!   client. Their grants are the same `LockGuard`s and the checker judges
//!   them as every other (no overlap — fair against plain too on the
//!   shared resource —, no lost update, honest deadlines). Each fair call
//!   is recorded from when it began to wait until it was granted or gave
//!   up, and the **starvation check** asserts that on the fair-only
//!   resources no fair call was passed over more than k times while it
//!   waited: k is the number of fair clients on the resource (the reason
//!   is at `fair_verdicts`), and a call is passed over by each grant to a
//!   call that began after it began and was granted before it ended. The
//!   worst case is printed; so is the same count on the shared resource,
//!   where plain calls barge (not judged: it shows what the check would
//!   see without a line). A unit test feeds the check a history with a
//!   call passed over k + 1 times: it must be flagged.
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
//!
//! The recorder and the checker are the testkit's
//! (`quorumlock::testkit::history`): its docs say what is checked and why.
//! Histories are saved as JSON Lines:
//!
//! - `QUORUMLOCK_CHAOS_HISTORY=<dir>`: every run writes
//!   `<dir>/chaos-<seed>.jsonl`.
//! - A failed run always writes its history (to that directory, or to the
//!   temp dir) and prints the path and the command that checks it again.
//! - `QUORUMLOCK_CHAOS_REPLAY=<file> cargo test --all-features --test it
//!   chaos_replay -- --ignored --nocapture` checks a saved history again,
//!   without servers (a few milliseconds).
//! - Beside each history file, its report (`chaos-<seed>.html`,
//!   `quorumlock::testkit::report`): one self-contained page with every
//!   client's held windows per resource, the faults per node, latency,
//!   rates and the violations marked. The soak writes the report of its
//!   worst seed (most violations, then most locks lost, then most stalls
//!   and preemptions counted) when it ends, and `chaos_replay` writes
//!   `<file>.html` beside the file it checked.
//!
//! Split by job: here the roles, the settings and one run (`chaos_run`,
//! the CI profile); the faults and the cluster they hit (`faults.rs`);
//! the clients and holders (`clients.rs`); the renewer's log of a run
//! (`renewals.rs`); history files and the watchers of stalls and nodes
//! (`history.rs`); the starvation check (`fairness.rs`); totals and the
//! figures they quote (`totals.rs`); the soak (`soak.rs`); negative
//! controls and single scenarios (`controls.rs`); the checkers fed known
//! histories, and replay (`checker.rs`); semaphores and reader-writer
//! locks (`primitives.rs`); nothing left behind (`left_behind.rs`).

use crate::support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::history::{
    Grant, History, HistoryCheck, Op, OpKind, Outage, Outcome, Recorder, Section, Share, Violation,
    check,
};
use quorumlock::testkit::report::Page;
use quorumlock::testkit::{FaultProxy, Faults, RedisNodes, ServerOptions};
use quorumlock::{Error, HeldKeyTracking, LockGuard, LossReason, Redlock, Retry, WakeOnRelease};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

mod checker;
mod clients;
mod controls;
mod fairness;
mod faults;
mod history;
mod left_behind;
mod primitives;
mod renewals;
mod soak;
mod totals;

use self::clients::{Shared, backoff, client, fair_client, holder};
pub(crate) use self::controls::{Restart, restart_history};
use self::controls::{clock_scenario, eviction_scenario, overlapped};
use self::fairness::{Fairness, fair_verdicts, starvation};
use self::faults::{Cluster, FAULTS, Fault};
use self::history::{
    HISTORY_ENV, REPLAY_ENV, replay_command, watch_nodes, watch_stalls, write_history, write_report,
};
use self::left_behind::outage;
use self::renewals::{RENEWER, RenewLog};
use self::totals::{Totals, key_loss_overlaps, preempted, tracking, wipes_of_held};

const NODES: usize = 5;
const CLIENTS: usize = 16;
/// Clients that hold an auto-extended lock for seconds at a time, all on
/// the last resource.
const HOLDERS: usize = 2;
/// The clients' resources (see `ROLES`), then the holders'.
const RESOURCES: [&str; 8] = [
    "chaos:fenced:a",
    "chaos:fenced:b",
    "chaos:plain:c",
    "chaos:plain:d",
    "chaos:fair:f",
    "chaos:fair:g",
    "chaos:mixed:m",
    "chaos:held:e",
];
/// The holders' resource, an index into `RESOURCES`.
const HELD: usize = 7;
/// The resources only fair clients lock, indices into `RESOURCES`: the
/// starvation check judges these.
const FAIR: [usize; 2] = [4, 5];
/// The resource a single-attempt client and a fair client share: judged
/// for exclusion only (a plain call takes a free lock whatever the line
/// says), and its fair calls' passed-over counts printed for comparison.
const MIXED: usize = 6;

/// How a client asks for its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Single attempts (`try_lock`, or `try_lock_fenced` on a fenced
    /// resource), retried after a short random pause.
    Single,
    /// `fair_lock`, waiting its turn in line (told it by releases).
    Fair,
}

/// Each client's call and resource (an index into `RESOURCES`): two
/// single-attempt clients on each of the first four resources, three fair
/// clients on each fair one, one of each on the mixed one.
const ROLES: [(Call, usize); CLIENTS] = [
    (Call::Single, 0),
    (Call::Single, 1),
    (Call::Single, 2),
    (Call::Single, 3),
    (Call::Single, 0),
    (Call::Single, 1),
    (Call::Single, 2),
    (Call::Single, 3),
    (Call::Fair, 4),
    (Call::Fair, 4),
    (Call::Fair, 4),
    (Call::Fair, 5),
    (Call::Fair, 5),
    (Call::Fair, 5),
    (Call::Single, MIXED),
    (Call::Fair, MIXED),
];

/// How many fair clients lock `resource` (an index into `RESOURCES`).
fn fair_clients(resource: usize) -> usize {
    ROLES
        .iter()
        .filter(|&&(call, r)| call == Call::Fair && r == resource)
        .count()
}

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

// -------------------------------------------------------------------- run

fn seed() -> u64 {
    std::env::var("QUORUMLOCK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

/// The nodes' options: appendonly with `appendfsync no`. The tests kill
/// processes, not machines, so a write(2) of the AOF before the reply is
/// what every acknowledged write needs to survive SIGKILL (fences, and the
/// keys of a node restarted at once). Redis writes the AOF before replying
/// under `always` and `no`, but not under `everysec`: there, while a
/// background fsync is slow (a busy disk, as on a loaded CI machine), the
/// write is postponed for up to 2 s and the replies go out first (aof.c,
/// flushAppendOnlyFile), so a kill loses acknowledged writes — the
/// restarted node no longer holds a lock it granted (the likely cause of
/// two holders' overlap under load, seed 13836646362270815075; the node
/// check calls such a node unsafe). `always` would add an fsync per event
/// loop on a disk the five nodes share.
fn chaos_options() -> ServerOptions {
    ServerOptions::new()
        .persistent()
        .arg("--appendfsync")
        .arg("no")
}

/// One chaos run: clients contend while `seed`'s schedule of faults is
/// injected, until at least `min_grants` grants and every fault kind. How
/// long that takes depends on the machine's load: the run is not timed,
/// but fails if no grant at all comes for [`support::HANG_GUARD`] (a hang,
/// not a slow machine). Fails too on a violation, a leaked key, or a fair
/// call passed over more than its resource's `k` times (the starvation
/// check). Returns the run's history and its verdict.
async fn chaos_run(seed: u64, min_grants: usize, totals: &mut Totals) -> (History, HistoryCheck) {
    let tracking = tracking(seed);
    println!(
        "chaos seed = {seed} (replay with QUORUMLOCK_CHAOS_SEED={seed}); holders {} their keys",
        if tracking { "track" } else { "do not track" }
    );
    RenewLog::get();
    let cluster = Cluster::start(chaos_options()).await;
    let run = Run::start(&cluster, tracking);
    let (injected, stalled) = run.inject(&cluster, seed, min_grants).await;
    let judged = run.finish(&cluster, seed).await;
    // The holders renewed (a renewal every third of their ttl): where the
    // log is the process's subscriber, it heard them, or a loss would be
    // shown without what its renewals saw (the renewer's target moved once
    // and the log went silent unnoticed).
    let (log, installed) = RenewLog::installed();
    assert!(
        !installed || log.len() > 0,
        "the renewal log heard no event of {RENEWER}: is that still the renewer's module?"
    );
    totals.add(&judged, &injected);
    totals.print();
    judged.conclude(seed, stalled)
}

/// A run's clients, holders and watchers, and what they share.
struct Run {
    /// The clients' managers, then the holders'.
    managers: Vec<Redlock>,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The watchers of stalls and starved nodes: stopped after the tasks.
    watchers: Vec<tokio::task::JoinHandle<()>>,
    /// Whether the holders track their keys.
    tracking: bool,
}

/// A client's manager: single attempts, or (for a fair client) a wait in
/// line told its turn by releases, retried every few ms when it must poll
/// and given up after `HOLD` (an outage, not a busy line).
fn manager(cluster: &Cluster, call: Call) -> Redlock {
    let builder = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(NODE_TIMEOUT);
    match call {
        Call::Single => builder,
        Call::Fair => builder.wake_on_release(WakeOnRelease::Subscribe).retry(
            Retry::forever()
                .delay(Duration::from_millis(5))
                .jitter(Duration::from_millis(10))
                .wait(HOLD),
        ),
    }
    .build()
    .expect("config")
}

impl Run {
    /// Starts every client (as `ROLES` says), the holders (tracking their
    /// keys if `tracking`) and the watchers, on one recorder whose origin
    /// is now.
    fn start(cluster: &Cluster, tracking: bool) -> Self {
        let shared = Arc::new(Shared {
            recorder: Recorder::new(),
            counters: RESOURCES.iter().map(|_| AtomicU64::new(0)).collect(),
            stop: AtomicBool::new(false),
            watching_stop: AtomicBool::new(false),
        });
        shared.recorder.nodes(NODES);
        let mut managers = Vec::new();
        let mut tasks = Vec::new();
        for (id, &(call, resource)) in ROLES.iter().enumerate() {
            let locks = manager(cluster, call);
            let shared = shared.clone();
            tasks.push(match call {
                Call::Single => tokio::spawn(client(id, resource, locks.clone(), shared)),
                Call::Fair => tokio::spawn(fair_client(id, resource, locks.clone(), shared)),
            });
            managers.push(locks);
        }
        for i in 0..HOLDERS {
            let locks = Redlock::builder()
                .nodes(cluster.urls())
                .node_timeout(NODE_TIMEOUT)
                .retry(Retry::forever().wait(HOLD))
                .held_key_tracking(if tracking {
                    HeldKeyTracking::WhereAvailable
                } else {
                    HeldKeyTracking::Off
                })
                .build()
                .expect("config");
            tasks.push(tokio::spawn(holder(
                CLIENTS + i,
                locks.clone(),
                shared.clone(),
            )));
            managers.push(locks);
        }
        let direct = cluster.nodes.iter().map(|n| n.url()).collect();
        let watchers = vec![
            tokio::spawn(watch_stalls(shared.clone())),
            tokio::spawn(watch_nodes(direct, shared.clone())),
        ];
        Self {
            managers,
            shared,
            tasks,
            watchers,
            tracking,
        }
    }

    /// Injects `seed`'s schedule of faults (every kind once per round, in a
    /// seeded order) until `min_grants` grants and every kind; returns the
    /// faults injected, and the grant count and time of a hang if no grant
    /// came for [`support::HANG_GUARD`].
    async fn inject(
        &self,
        cluster: &Cluster,
        seed: u64,
        min_grants: usize,
    ) -> (BTreeMap<Fault, u64>, Option<(usize, Instant)>) {
        let recorder = &self.shared.recorder;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut injected: BTreeMap<Fault, u64> = BTreeMap::new();
        let mut schedule = Vec::new();
        // The grant count last seen to grow, and when.
        let mut progress = (0, Instant::now());
        loop {
            let grants = recorder.grants();
            if grants >= min_grants && injected.len() == FAULTS.len() {
                return (injected, None);
            }
            if grants > progress.0 {
                progress = (grants, Instant::now());
            } else if progress.1.elapsed() > support::HANG_GUARD {
                return (injected, Some(progress));
            }
            if schedule.is_empty() {
                schedule = FAULTS.to_vec();
                schedule.shuffle(&mut rng);
            }
            let fault = schedule.pop().expect("non-empty");
            let from = Instant::now();
            let nodes = cluster.inject(fault, &mut rng, recorder).await;
            recorder.fault(nodes, format!("{fault:?}"), from, Instant::now());
            *injected.entry(fault).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(rng.random_range(50..250))).await;
        }
    }

    /// Stops the clients, heals the nodes, waits out what ambiguous calls
    /// may have left, and judges the history.
    async fn finish(self, cluster: &Cluster, seed: u64) -> Judged {
        self.shared.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            support::no_hang("chaos client", task)
                .await
                .expect("client task");
        }
        // The holders kept their locks until now: stalls meanwhile count.
        self.shared.watching_stop.store(true, Ordering::Relaxed);
        for task in self.watchers {
            support::no_hang("chaos watcher", task)
                .await
                .expect("watcher task");
        }
        cluster.heal_all().await;
        for locks in &self.managers {
            locks.settle().await;
        }
        // Nothing left behind: once every node answers every manager again
        // (a node not asked is asked again only once paid what it is
        // owed), no node may hold a released lock's key.
        for locks in &self.managers {
            asked_by(locks).await;
        }
        for locks in &self.managers {
            locks.settle().await;
        }
        cluster.leftovers(&self.shared.recorder).await;
        // Keys that ambiguous operations may have left expire within their ttl.
        tokio::time::sleep(TTL + Duration::from_millis(100)).await;
        let leaked = cluster.leaked_keys().await;
        let recorder = &self.shared.recorder;
        for (name, counter) in RESOURCES.iter().zip(&self.shared.counters) {
            recorder.counter(*name, counter.load(Ordering::SeqCst));
        }
        recorder.seed(seed);
        // One attempt: acquire, write-back and cleanup, each within the node
        // timeout, with slack for a loaded 2-core machine.
        recorder.failure_bound(3 * NODE_TIMEOUT + Duration::from_secs(2));
        let start = recorder.origin();
        let history = recorder.take();
        Judged {
            tracking: self.tracking,
            verdict: check(&history),
            fairness: fair_verdicts(&history),
            mixed: starvation(&history, RESOURCES[MIXED], fair_clients(MIXED)),
            history,
            leaked,
            start,
        }
    }
}

/// Waits until a call of `locks` is answered by every node: each is asked
/// again, and was given what it was owed first (a call to a node that
/// owes wakes its prober). A scratch lock, taken and released.
async fn asked_by(locks: &Redlock) {
    const SCRATCH: &str = "chaos:settled";
    support::no_hang("every node to answer again", async {
        loop {
            match locks.try_lock(SCRATCH, TTL).await {
                Ok(guard) => {
                    if let Ok(summary) = guard.release().await
                        && summary.settled().await.failures().is_empty()
                    {
                        return;
                    }
                }
                Err(_) => tokio::time::sleep(backoff()).await,
            }
        }
    })
    .await;
}

/// A run's history and what was found in it.
struct Judged {
    history: History,
    verdict: HistoryCheck,
    /// The starvation check of each fair resource.
    fairness: Vec<Fairness>,
    /// The same count on the mixed resource, for comparison (not judged).
    mixed: Fairness,
    /// Lock keys still on a node after their ttl.
    leaked: usize,
    /// The recorder's origin.
    start: Instant,
    /// Whether the holders tracked their keys.
    tracking: bool,
}

impl Judged {
    /// Prints the starvation check, saves the history and its report
    /// where asked (and always when the run failed), and fails the run on
    /// a violation, a leaked key, a starved fair call or a hang.
    fn conclude(self, seed: u64, stalled: Option<(usize, Instant)>) -> (History, HistoryCheck) {
        for fairness in &self.fairness {
            println!("  starvation check, {fairness}{}", fairness.starved_text());
        }
        println!("  for comparison (not judged), {}", self.mixed);
        let starved = self.fairness.iter().any(|f| !f.starved.is_empty());
        let failed = !self.verdict.is_ok() || self.leaked > 0 || starved || stalled.is_some();
        let saved = self.save(seed, failed);
        let verdict = &self.verdict;
        assert!(
            verdict.is_ok(),
            "seed {seed}: {saved}\n{verdict}\n{}",
            renewals_before_losses(self.start, verdict)
        );
        assert_eq!(
            self.leaked, 0,
            "seed {seed}: lock keys left after their ttl; {saved}"
        );
        assert!(
            !starved,
            "seed {seed}: a fair call passed over more than k times; {saved}{}",
            self.fairness
                .iter()
                .map(Fairness::starved_text)
                .collect::<String>()
        );
        if let Some((grants, since)) = stalled {
            panic!(
                "seed {seed}: no grant for {:?} after {grants} grants (at {:?} into the run); {saved}",
                support::HANG_GUARD,
                since - self.start
            );
        }
        (self.history, self.verdict)
    }

    /// Writes the history and its report to `QUORUMLOCK_CHAOS_HISTORY`,
    /// and when the run `failed` always (to the temp dir without it);
    /// returns where, and the command that checks it again, for a failure.
    fn save(&self, seed: u64, failed: bool) -> String {
        let (history, verdict) = (&self.history, &self.verdict);
        let dir = std::env::var_os(HISTORY_ENV);
        let saved = dir
            .as_ref()
            .map(|dir| write_history(Path::new(dir), seed, history));
        match &saved {
            Some(Ok(path)) => println!("history written to {}", path.display()),
            Some(Err(e)) => println!("history not written: {e}"),
            None => {}
        }
        if let Some(dir) = &dir {
            match write_report(Path::new(dir), seed, history, verdict) {
                Ok(path) => println!("report written to {}", path.display()),
                Err(e) => println!("report not written: {e}"),
            }
        }
        if !failed {
            return String::new();
        }
        // A failed run always leaves its history behind, to be checked
        // again, and its report beside it.
        let saved = match saved {
            Some(Ok(path)) => Ok(path),
            _ => write_history(&std::env::temp_dir(), seed, history),
        };
        match saved {
            Ok(path) => {
                let dir = path.parent().unwrap_or(Path::new("."));
                let report = match write_report(dir, seed, history, verdict) {
                    Ok(report) => format!("; its report: {}", report.display()),
                    Err(e) => format!("; report not written: {e}"),
                };
                format!(
                    "history in {}; check it again without servers: {}{report}",
                    path.display(),
                    replay_command(&path)
                )
            }
            Err(e) => format!("history not written: {e}"),
        }
    }
}

/// What the renewals saw in the ttl before each loss with a majority up.
fn renewals_before_losses(start: Instant, verdict: &HistoryCheck) -> String {
    let mut out = String::new();
    for violation in &verdict.violations {
        if let Violation::LossWithMajorityUp { loss, .. } = violation {
            let at = start + loss.at;
            let lines = RenewLog::get().between(start, at - loss.ttl, at);
            let _ = writeln!(
                out,
                "renewals in the ttl before holder {}'s loss at {:?}:\n{}",
                loss.client,
                loss.at,
                lines.join("\n")
            );
        }
    }
    out
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
