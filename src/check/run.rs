//! The node check over a manager's nodes: every node probed at once (the
//! probing is in `probe`), the facts judged (`judge`), and the findings
//! logged for a [`StartupCheck`](crate::check::StartupCheck). The public
//! entry points, [`Redlock::check`](crate::Redlock::check) and the startup
//! check, are the manager's and delegate here.

use crate::check::probe::{node_facts, servers_of};
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
    let nodes = core.nodes();
    let seen = nodes
        .iter()
        .map(|node| servers_of(node, options, script_mode));
    let seen = shallow(futures::future::join_all(seen)).await;
    // Each answering node's own connection, made in the configuration's
    // order: of two nodes that reach one server, the library refuses the
    // later to report it (it keeps the vote it counted first), so the one
    // refused is the later-listed, as the independence finding names it,
    // whatever the timing. One round trip each; silent nodes are skipped.
    for (node, seen) in nodes.iter().zip(&seen) {
        if seen.answered(options) {
            let deadline = tokio::time::Instant::now() + options.probe_timeout;
            shallow(node.capabilities_within(deadline.into())).await;
        }
    }
    let probes = nodes
        .iter()
        .zip(seen)
        .map(|(node, seen)| node_facts(node, seen, key_prefix, options, tracking));
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
