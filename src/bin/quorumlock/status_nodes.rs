//! What `quorumlock status` shows whatever the resource is: one line per
//! node, the keys, and the exit status of the library's verdict.

use std::time::Duration;

use quorumlock::check::Serves;
use quorumlock::{Claimed, Inspection, NodeError, NodeState, Stored, Verdict};

use crate::duration::show;
use crate::exit;

/// How long `status` waited for the nodes, and what they serve.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waits<'a> {
    /// The node timeout each read was given.
    pub(crate) node_timeout: Duration,
    /// How long the inspection had run when it was shown: a node still
    /// pending then had not answered in that time.
    pub(crate) waited: Duration,
    /// What each node serves (`Redlock::serves`), by node; empty if that
    /// had not answered in time.
    pub(crate) serves: &'a [Option<Serves>],
}

/// Prints one line per node: `describe` of what it keeps, or why it did
/// not answer.
pub(crate) fn print_nodes(
    inspection: &Inspection,
    waits: Waits<'_>,
    describe: impl Fn(&Stored) -> String,
) {
    let width = inspection
        .nodes()
        .iter()
        .map(|n| n.node().len())
        .max()
        .unwrap_or(0);
    for (i, node) in inspection.nodes().iter().enumerate() {
        let label = node.node();
        let mut line = match node.state() {
            NodeState::Answered(stored) => describe(stored),
            NodeState::Failed(error) => {
                format!("unreachable: {}", failure(error, waits.node_timeout))
            }
            _ => format!(
                "no answer in {} (not waited for: the verdict did not need it; --every-node waits)",
                show(waits.waited)
            ),
        };
        if let Some(path) = node.path() {
            line.push_str(&format!("  [{path}]"));
        }
        // Said only where it is not every primitive.
        match waits.serves.get(i).copied().flatten() {
            Some(Serves::PlainLocks) => {
                line.push_str("  (plain locks only: no script runs here)");
            }
            Some(Serves::Nothing) => {
                line.push_str("  (no lock: no script runs here, and no native commands)");
            }
            _ => {}
        }
        println!("  {label:<width$}  {line}");
    }
}

/// Why a node did not answer, in a node line.
fn failure(error: &NodeError, timeout: Duration) -> String {
    match error {
        NodeError::Timeout(_) => format!("no answer within {}", show(timeout)),
        other => other.to_string(),
    }
}

/// How many nodes did not answer: failed, or not in yet.
pub(crate) fn unreachable(inspection: &Inspection) -> usize {
    inspection
        .nodes()
        .iter()
        .filter(|n| !matches!(n.state(), NodeState::Answered(_)))
        .count()
}

/// `keys` for a header line, in backquotes; a long list (a semaphore's
/// permits) by its first and last keys.
pub(crate) fn listed(keys: &[String]) -> String {
    let quoted = |k: &String| format!("`{k}`");
    match keys {
        [first, second, .., last] if keys.len() > 4 => {
            format!("{}, {} … {}", quoted(first), quoted(second), quoted(last))
        }
        _ => keys.iter().map(quoted).collect::<Vec<_>>().join(", "),
    }
}

/// The exit status of an inspection's verdict: held (0), free, or
/// unknown — because nodes refused the credentials in their URLs (a
/// configuration error, as for `exec`), or did not answer.
pub(crate) fn status_of(inspection: &Inspection) -> u8 {
    match inspection.verdict() {
        Verdict::Held => 0,
        Verdict::Free => exit::FREE,
        _ if inspection
            .failures()
            .iter()
            .any(|f| matches!(f.error, NodeError::AuthRefused { .. })) =>
        {
            exit::AUTH_REFUSED
        }
        _ => exit::UNAVAILABLE,
    }
}

/// The verdict line when a quorum holds something other than what the
/// view shows (say, a lock looked at with `--semaphore`).
pub(crate) fn held_otherwise(inspection: &Inspection) {
    let held: Vec<String> = inspection
        .confirmed()
        .map(|c| {
            format!(
                "{} by token {} on {} nodes",
                what(c.what()),
                c.token(),
                c.nodes()
            )
        })
        .collect();
    println!(
        "verdict: held — but as something else: {} (quorum {}; see `status` without \
         --semaphore or --rwlock)",
        held.join(", "),
        inspection.quorum()
    );
}

/// What a token holds, in words.
fn what(claimed: Claimed) -> String {
    match claimed {
        Claimed::Lock => "the lock".to_owned(),
        Claimed::Permit(slot) => format!("permit {slot}"),
        Claimed::Writer => "the writer's hold".to_owned(),
        Claimed::Reader => "a reader's hold".to_owned(),
        _ => "a hold".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_key_lists_show_their_ends() {
        let keys: Vec<String> = ["a", "b", "c"].map(str::to_owned).into();
        assert_eq!(listed(&keys), "`a`, `b`, `c`");
        let many: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        assert_eq!(listed(&many), "`k0`, `k1` … `k9`");
    }
}
