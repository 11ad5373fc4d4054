//! The node check over a manager's nodes: every node probed at once (the
//! probing is in `probe`), the facts judged (`judge`), and the findings
//! logged for a [`StartupCheck`](crate::check::StartupCheck). The public
//! entry points, [`Redlock::check`](crate::Redlock::check) and the startup
//! check, are the manager's and delegate here.

use crate::check::probe::node_facts;
use crate::check::{CheckOptions, Report, Settings, Severity, judge};
use crate::node::HeldKeyTracking;
use crate::round::{Core, shallow};
use crate::scripts::{FUNCTIONS_LIBRARY, ScriptMode};

/// Probes every node of `core` and judges what it found: the body of
/// [`Redlock::check_with`](crate::Redlock::check_with), which documents the
/// check.
pub(crate) async fn run(
    core: &Core,
    key_prefix: &str,
    script_mode: ScriptMode,
    tracking: HeldKeyTracking,
    options: &CheckOptions,
) -> Report {
    let probes = core
        .nodes()
        .iter()
        .map(|node| node_facts(node, key_prefix, options, script_mode, tracking));
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

/// Logs each finding: unsafe ones as warnings, degraded ones as info, notes
/// at debug level.
pub(crate) fn log(report: &Report) {
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
