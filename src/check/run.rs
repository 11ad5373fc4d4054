//! [`Redlock::check`]: what Redlock's safety rests on, checked node by node
//! (the probing is in `probe`, the judgement in `check`), and the check a
//! manager can run once on first use and log ([`StartupCheck`]).

use std::sync::atomic::Ordering;

use tracing::Instrument;

use crate::check::probe::node_facts;
use crate::check::{CheckOptions, Report, Settings, Severity, StartupCheck, judge};
use crate::redlock::Redlock;
use crate::round::shallow;
use crate::scripts::FUNCTIONS_LIBRARY;

impl Redlock {
    /// Checks the nodes against what Redlock's safety rests on, with
    /// [`CheckOptions::default()`]; see [`check_with`](Self::check_with).
    pub async fn check(&self) -> Report {
        self.check_with(&CheckOptions::default()).await
    }

    /// Checks every node against the assumptions Redlock's safety rests on
    /// and reports, per node, findings with a [`Severity`], what was seen
    /// and what to do:
    ///
    /// - **independence**: one server behind two URLs (same `run_id`), a
    ///   replica, nodes in one replication group (same `master_replid`);
    /// - **eviction**: `maxmemory` with a policy that evicts (unsafe), or
    ///   with `noeviction` (a note: full memory refuses lock writes);
    /// - **persistence**: `appendonly` and `appendfsync` (unsafe without
    ///   AOF for [fenced locks](CheckOptions::fenced_locks)), and an uptime
    ///   below [the longest ttl](CheckOptions::longest_ttl) without durable
    ///   persistence;
    /// - **clock**: the node's `TIME` against the client's monotonic clock
    ///   over [an interval](CheckOptions::clock_interval): a rate faster
    ///   than `1 + drift_factor` beyond the measuring error is unsafe;
    /// - **capability**: server and version, the Functions library in
    ///   [`ScriptMode::Functions`](crate::ScriptMode::Functions), and
    ///   whether the user may run every operation (an access probe: a lock
    ///   on `<prefix>quorumlock:doctor:<random>`, acquired, extended,
    ///   released, for at most 2 s);
    /// - **latency**: `PING` round trips, p50 and p99, against the node
    ///   timeout;
    /// - **cluster**: slot coverage, every master reachable (each master is
    ///   checked as above);
    /// - **replicas**: attached replicas, which a failover may promote
    ///   without the lock keys.
    ///
    /// The check never changes a node's data or configuration (apart from
    /// the probe key, which [`CheckOptions::skip_access_probe`] leaves out)
    /// and never reports a token or a password. It probes over connections
    /// of its own, all nodes at once; it takes about the clock interval
    /// plus a few round trips.
    ///
    /// Not everything can be seen from a client: whether failover is
    /// automatic (Sentinel), whether two servers share a machine or a
    /// power supply, and how the node's clock behaves later.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: dropped, it stops probing; an access
    /// probe's key expires by itself within 2 s.
    ///
    /// # Examples
    ///
    /// Refuse to start on nodes that cannot keep locks safe:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::Redlock;
    /// use quorumlock::check::CheckOptions;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let locks = Redlock::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let report = locks
    ///     .check_with(&CheckOptions::new().longest_ttl(Duration::from_secs(30)))
    ///     .await;
    /// println!("{report}");
    /// if report.is_unsafe() {
    ///     return Err("the lock nodes are not safe for Redlock".into());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_with(&self, options: &CheckOptions) -> Report {
        let manager = self.manager();
        let core = &manager.core;
        let probes = core
            .nodes()
            .iter()
            .map(|node| node_facts(node, &manager.key_prefix, options, manager.script_mode));
        let facts = shallow(futures::future::join_all(probes)).await;
        judge(
            &facts,
            Settings {
                drift_factor: core.drift_factor(),
                node_timeout: core.node_timeout(),
                options,
                library: FUNCTIONS_LIBRARY,
                quorum: core.quorum(),
            },
        )
    }

    /// Runs the [`StartupCheck`] in the background on the first use, once;
    /// [`settle`](Self::settle) waits for it.
    pub(crate) fn startup_check(&self) {
        let first_use = &self.manager().first_use;
        if first_use.check == StartupCheck::Skip || first_use.started.swap(true, Ordering::Relaxed)
        {
            return;
        }
        let this = self.clone();
        let span = tracing::info_span!("quorumlock_check");
        // Background work of the manager: `settle` waits for it.
        self.manager().core.background().spawn(
            async move {
                let report = this.check().await;
                log(&report);
            }
            .instrument(span),
        );
    }
}

/// Logs each finding: unsafe ones as warnings, degraded ones as info, notes
/// at debug level.
fn log(report: &Report) {
    for (node, f) in report.findings() {
        let (aspect, seen, advice) = (f.aspect.to_string(), &f.seen, &f.advice);
        match f.severity {
            Severity::Unsafe => {
                tracing::warn!(node, aspect, seen, advice, "unsafe for Redlock");
            }
            Severity::Degraded => tracing::info!(node, aspect, seen, advice, "degraded"),
            _ => tracing::debug!(node, aspect, seen, advice, "note"),
        }
    }
    if report.worst().is_none() {
        tracing::debug!(nodes = report.nodes.len(), "node check found nothing");
    }
}
