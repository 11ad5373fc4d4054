//! The node check: what [`Redlock::check`](crate::Redlock::check) reports
//! about the nodes — per node, findings with a [`Severity`], what was seen
//! and what to do — its [`CheckOptions`], and the [`StartupCheck`] a
//! manager can run on first use.
//!
//! ```no_run
//! use std::time::Duration;
//! use quorumlock::Redlock;
//! use quorumlock::check::{CheckOptions, Severity};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), quorumlock::Error> {
//! let locks = Redlock::new(["redis://127.0.0.1:7001"])?;
//! let options = CheckOptions::new().longest_ttl(Duration::from_secs(30));
//! let report = locks.check_with(&options).await;
//! if report.worst() == Some(Severity::Unsafe) {
//!     eprintln!("{report}");
//! }
//! # Ok(())
//! # }
//! ```
//
// Inside the crate, the node doctor in one room: these types; `judge`, the
// judgement that turns what each server showed into findings (no I/O);
// `probe`, what a node shows (the wire); and `run`, the check over a
// manager's nodes, which `Redlock::check` (in `redlock.rs`) delegates to.
// Nothing here imports the manager: the node check sits below it.

use std::fmt;
use std::time::Duration;

mod judge;
mod probe;
pub(crate) mod run;

pub(crate) use judge::{ClockSample, Library, NodeFacts, ServerFacts, Settings, SlotMap, judge};

/// How bad a [`Finding`] is. Ordered: `Note < Degraded < Unsafe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; neither safety nor availability is at stake as things
    /// stand.
    Note,
    /// Locks stay mutually exclusive, but the node may fail to vote (it is
    /// unreachable, slow, or refuses an operation), or a failure it could
    /// survive today would cost safety.
    Degraded,
    /// Mutual exclusion can break: two clients can hold the same lock.
    Unsafe,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Note => "note",
            Self::Degraded => "degraded",
            Self::Unsafe => "UNSAFE",
        })
    }
}

/// Which assumption of Redlock (or which practical need) a [`Finding`] is
/// about. See *The assumptions, and the checks that cover them* in
/// `docs/safety.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Aspect {
    /// The node answered at all.
    Reachability,
    /// Nodes are distinct, independent masters: not one server twice, not
    /// a replica, not replicating one another.
    Independence,
    /// Lock keys are kept until they expire: no eviction.
    Eviction,
    /// Locks and fence counters survive a restart, or the node stays away
    /// long enough.
    Persistence,
    /// The node's clock (which expires keys) runs at the client's rate,
    /// within the drift allowance.
    Clock,
    /// The server, the script mode and the user's permissions support
    /// every operation.
    Capability,
    /// Round trips fit the per-node timeout.
    Latency,
    /// A Redis Cluster node covers every slot with reachable masters.
    Cluster,
    /// Replicas behind a voter, which a failover may promote without the
    /// lock keys.
    Replicas,
}

impl fmt::Display for Aspect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Reachability => "reachability",
            Self::Independence => "independence",
            Self::Eviction => "eviction",
            Self::Persistence => "persistence",
            Self::Clock => "clock",
            Self::Capability => "capability",
            Self::Latency => "latency",
            Self::Cluster => "cluster",
            Self::Replicas => "replicas",
        })
    }
}

/// One thing the check found on one node: how bad, what was seen, and what
/// to do. Never holds a token or a password.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// Which assumption it is about.
    pub aspect: Aspect,
    /// What was seen, e.g. `maxmemory 1mb with maxmemory-policy allkeys-lru`.
    pub seen: String,
    /// What to do about it.
    pub advice: String,
}

impl Finding {
    fn new(severity: Severity, aspect: Aspect, seen: String, advice: &str) -> Self {
        Self {
            severity,
            aspect,
            seen,
            advice: advice.to_owned(),
        }
    }
}

/// Round-trip times of one node, from a series of `PING`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Latency {
    /// The median.
    pub p50: Duration,
    /// The 99th percentile (nearest rank: with fewer than 100 samples, the
    /// slowest).
    pub p99: Duration,
}

impl Latency {
    /// p50 and p99 of `samples` (nearest rank), or `None` without samples.
    pub(crate) fn of(samples: &[Duration]) -> Option<Self> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank = |p: usize| {
            let n = sorted.len();
            // Nearest rank: the smallest value with at least p % at or below it.
            let i = (p * n).div_ceil(100).clamp(1, n) - 1;
            sorted[i]
        };
        (!sorted.is_empty()).then(|| Self {
            p50: rank(50),
            p99: rank(99),
        })
    }
}

/// What the check found on one configured node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeReport {
    /// The node as [`Redlock::nodes`](crate::Redlock::nodes) names it.
    pub node: String,
    /// The server software and version (`redis 7.0.15`), if it answered;
    /// for a cluster node, its first master's.
    pub server: Option<String>,
    /// Round-trip times; for a cluster node, its slowest master's.
    pub latency: Option<Latency>,
    /// How plain locks are released and extended on this node, as the
    /// manager does it: `release DELIFEQ, extend SET IFEQ` where the
    /// server has native commands (see
    /// [`NativeCommands`](crate::NativeCommands)), `release script, extend
    /// script` where it has not; `None` if the node did not say.
    pub path: Option<String>,
    /// Which primitives the node serves, as its access probe showed; `None`
    /// without a probe (`probe_access` off, the node not asked, or a
    /// cluster member given as a plain node).
    pub serves: Option<Serves>,
    /// Whether the node watches the keys of held locks for the manager
    /// (see [`HeldKeyTracking`](crate::HeldKeyTracking)): `held keys:
    /// changes heard at once`, or `no: …` with the reason (a server
    /// without `CLIENT TRACKING`, an ACL refusing it, a cluster node, the
    /// setting turned off); `None` if the node was not asked.
    pub watches: Option<String>,
    /// The findings, worst first.
    pub findings: Vec<Finding>,
}

/// Which primitives a node serves, as the access probe showed: what a
/// user may build on it with this manager's settings (its user, its
/// [`ScriptMode`](crate::ScriptMode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Serves {
    /// Every primitive: the probe's plain lock steps and its script ran.
    Every,
    /// Plain locks only — `lock`, `try_lock`, `with_lock`, auto-extension —
    /// with the server's native commands: its script was refused or cannot
    /// run (no scripting permission, no scripting engine, no Functions
    /// library). Fenced and multi-resource locks, semaphores,
    /// reader-writer locks, fair locks and elections need scripts.
    PlainLocks,
    /// No lock: a plain lock's own steps were refused (see the findings).
    Nothing,
}

impl fmt::Display for Serves {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Serves::Every => "every primitive",
            Serves::PlainLocks => {
                "plain locks only (lock, with_lock, auto-extension): the other primitives need scripts, which did not run here"
            }
            Serves::Nothing => "no lock: a plain lock's own steps were refused (see above)",
        })
    }
}

impl NodeReport {
    /// The worst severity among the findings, `None` when there are none.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// The outcome of [`Redlock::check`](crate::Redlock::check): per node, what
/// was found. Its `Display` is a table, one row per finding.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// One entry per configured node, in configuration order.
    pub nodes: Vec<NodeReport>,
    /// What holds for the nodes together: too few of them answering for a
    /// quorum is [`Severity::Unsafe`] (no lock can be taken), whatever each
    /// node's own verdict.
    pub fleet: Vec<Finding>,
}

impl Report {
    /// The worst severity found on any node, `None` when nothing was found.
    pub fn worst(&self) -> Option<Severity> {
        self.nodes
            .iter()
            .filter_map(NodeReport::worst)
            .chain(self.fleet.iter().map(|f| f.severity))
            .max()
    }

    /// Whether any finding is [`Severity::Unsafe`], the fleet's included
    /// (fewer nodes answering than a quorum).
    pub fn is_unsafe(&self) -> bool {
        self.worst() == Some(Severity::Unsafe)
    }

    /// Every finding with its node's name, node by node, worst first
    /// within a node, then the fleet's, named [`FLEET`].
    pub fn findings(&self) -> impl Iterator<Item = (&str, &Finding)> {
        self.nodes
            .iter()
            .flat_map(|n| n.findings.iter().map(move |f| (&*n.node, f)))
            .chain(self.fleet.iter().map(|f| (FLEET, f)))
    }
}

/// The name [`Report::findings`] and the table give the fleet's findings.
pub const FLEET: &str = "(all nodes)";

/// One row per finding (`node severity aspect seen → advice`), and a row
/// saying `ok` for a node without findings.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .nodes
            .iter()
            .map(|n| n.node.len())
            .chain((!self.fleet.is_empty()).then_some(FLEET.len()))
            .max()
            .unwrap_or(4);
        let row = |f: &mut fmt::Formatter<'_>, node: &str, severity: &str, check: &str, text| {
            writeln!(f, "{node:<width$}  {severity:<8}  {check:<12}  {text}")
        };
        row(f, "NODE", "SEVERITY", "CHECK", "FINDING".to_owned())?;
        for node in &self.nodes {
            if node.findings.is_empty() {
                row(f, &node.node, "ok", "-", node.server_line())?;
            }
            for finding in &node.findings {
                row(
                    f,
                    &node.node,
                    &finding.severity.to_string(),
                    &finding.aspect.to_string(),
                    finding.line(),
                )?;
            }
        }
        for node in &self.nodes {
            if let Some(path) = &node.path {
                row(f, &node.node, "path", "-", path.clone())?;
            }
        }
        for node in &self.nodes {
            if let Some(serves) = node.serves {
                row(f, &node.node, "serves", "-", serves.to_string())?;
            }
        }
        for node in &self.nodes {
            if let Some(watches) = &node.watches {
                row(f, &node.node, "watches", "-", watches.clone())?;
            }
        }
        for finding in &self.fleet {
            row(
                f,
                FLEET,
                &finding.severity.to_string(),
                &finding.aspect.to_string(),
                finding.line(),
            )?;
        }
        self.summary(f)
    }
}

impl Report {
    /// The last line: nodes by their worst finding, the findings counted
    /// apart, and whether the fleet as a whole is unsafe.
    fn summary(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes = |s: Option<Severity>| self.nodes.iter().filter(|n| n.worst() == s).count();
        let found = |s: Severity| self.findings().filter(|(_, f)| f.severity == s).count();
        let count = self.nodes.len();
        write!(
            f,
            "{count} {}: {} unsafe, {} degraded, {} ok ({} with notes only); findings: {} unsafe, {} degraded, {} notes",
            if count == 1 { "node" } else { "nodes" },
            nodes(Some(Severity::Unsafe)),
            nodes(Some(Severity::Degraded)),
            nodes(None) + nodes(Some(Severity::Note)),
            nodes(Some(Severity::Note)),
            found(Severity::Unsafe),
            found(Severity::Degraded),
            found(Severity::Note)
        )?;
        if self.fleet.iter().any(|f| f.severity == Severity::Unsafe) {
            write!(
                f,
                "; UNSAFE as a whole: too few nodes answered for a quorum"
            )?;
        }
        Ok(())
    }
}

impl NodeReport {
    /// Its server and round trips, for a node without findings.
    fn server_line(&self) -> String {
        let mut s = self.server.clone().unwrap_or_else(|| "-".to_owned());
        if let Some(latency) = self.latency {
            s.push_str(&format!(
                ", rtt p50 {:?} p99 {:?}",
                latency.p50, latency.p99
            ));
        }
        s
    }
}

impl Finding {
    /// What was seen, and what to do about it.
    fn line(&self) -> String {
        format!("{} -> {}", self.seen, self.advice)
    }
}

/// What the check should assume about how the locks are used.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::check::CheckOptions;
///
/// let options = CheckOptions::new()
///     .longest_ttl(Duration::from_secs(60))
///     .fenced_locks();
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct CheckOptions {
    pub(crate) longest_ttl: Option<Duration>,
    pub(crate) fenced: bool,
    pub(crate) clock_interval: Duration,
    pub(crate) latency_samples: usize,
    pub(crate) probe_timeout: Duration,
    pub(crate) probe_access: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            longest_ttl: None,
            fenced: false,
            clock_interval: Self::DEFAULT_CLOCK_INTERVAL,
            latency_samples: Self::DEFAULT_LATENCY_SAMPLES,
            probe_timeout: Self::DEFAULT_PROBE_TIMEOUT,
            probe_access: true,
        }
    }
}

impl CheckOptions {
    /// Default interval between the two readings of a node's clock: long
    /// enough that a round trip of a few milliseconds still resolves a rate
    /// difference well below the default 1 % drift allowance.
    pub const DEFAULT_CLOCK_INTERVAL: Duration = Duration::from_secs(1);

    /// Default number of `PING`s timed per server.
    pub const DEFAULT_LATENCY_SAMPLES: usize = 50;

    /// Default bound on each probe request (a fresh connection included).
    pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

    /// Every option at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest ttl the application locks with. A node without durable
    /// persistence that has been up for less than this may have restarted
    /// empty while a lock it granted was still held: unsafe until it has
    /// been up for that long. Defaults to unknown: uptime is not judged.
    pub fn longest_ttl(mut self, ttl: Duration) -> Self {
        self.longest_ttl = Some(ttl);
        self
    }

    /// The application takes fenced locks
    /// ([`Redlock::lock_fenced`](crate::Redlock::lock_fenced)), whose
    /// counters must survive restarts: a node without `appendonly yes` is
    /// then unsafe. Defaults to plain locks only.
    pub fn fenced_locks(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// How long to wait between the two readings of each node's clock
    /// (`TIME`). Longer resolves smaller rate differences. Defaults to
    /// [`Self::DEFAULT_CLOCK_INTERVAL`].
    pub fn clock_interval(mut self, interval: Duration) -> Self {
        self.clock_interval = interval;
        self
    }

    /// How many `PING`s to time per server (at least 1). Defaults to
    /// [`Self::DEFAULT_LATENCY_SAMPLES`].
    pub fn latency_samples(mut self, samples: usize) -> Self {
        self.latency_samples = samples.max(1);
        self
    }

    /// The bound on each probe request, a fresh connection included.
    /// Defaults to [`Self::DEFAULT_PROBE_TIMEOUT`].
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// Skips the access probe: the short-lived lock on
    /// `<prefix>quorumlock:doctor:<random>` that shows whether the user may
    /// run every command the operations need. The check then writes
    /// nothing at all. Defaults to probing.
    pub fn skip_access_probe(mut self) -> Self {
        self.probe_access = false;
        self
    }
}

/// Whether a manager checks its nodes on first use
/// ([`RedlockBuilder::startup_check`](crate::RedlockBuilder::startup_check)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum StartupCheck {
    /// No check.
    #[default]
    Skip,
    /// On the first acquire of any kind (a lock, a permit, a read or write
    /// hold, a campaign), [`Redlock::check`](crate::Redlock::check)
    /// runs once in the background, and its findings are logged through
    /// `tracing`: unsafe ones as warnings, degraded ones at info level,
    /// notes at debug level.
    Log,
}
