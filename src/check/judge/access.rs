//! Reachability and access: whether a node answers, accepts the
//! credentials in its URL and lets the lock user do what locks need (the
//! access probe's refusals, the Functions library); and whether enough
//! nodes answer for a quorum.

use super::cluster::plain_cluster_member;
use super::facts::{Library, NodeFacts};
use crate::check::{Aspect, Finding, Serves, Severity};
use std::time::Duration;

/// Too few nodes answering for a quorum: no lock can be taken. Whatever
/// each node's own verdict, the fleet is not fit to gate a deploy on.
pub(super) fn quorum(facts: &[NodeFacts], quorum: usize) -> Option<Finding> {
    let voting = facts.iter().filter(|node| answered(node)).count();
    (voting < quorum).then(|| {
        Finding::new(
            Severity::Unsafe,
            Aspect::Reachability,
            format!(
                "only {voting} of {} nodes answered: a quorum of {quorum} cannot be reached, no lock can be taken",
                facts.len(),
            ),
            "bring nodes back, or fix their addresses and credentials (see each node's rows)",
        )
    })
}

/// Whether a node answered the check: every server it names was probed,
/// and a cluster's slot map was read. A cluster member given as a plain
/// node does not count: most keys are not its to answer for.
fn answered(node: &NodeFacts) -> bool {
    !node.servers.is_empty()
        && node.servers.iter().all(|(_, probed)| probed.is_ok())
        && node.slots.as_ref().is_none_or(Result::is_ok)
        && !plain_cluster_member(node)
}

/// Whether a probe's error says the server refused the credentials.
pub(super) fn credentials_refused(error: &str) -> bool {
    error.contains("WRONGPASS")
        || error.contains("refused the credentials")
        || error.to_ascii_lowercase().contains("authentication failed")
}

/// The manager does not ask the node (see `node::health`), for `silent`.
pub(super) fn not_asked(silent: Duration) -> Finding {
    Finding::new(
        Severity::Degraded,
        Aspect::Reachability,
        format!(
            "the manager has not asked this node for {}ms: its last requests timed out",
            silent.as_millis()
        ),
        "it is probed until it answers, then asked again; meanwhile every call does without it (a paused, overloaded or partitioned server)",
    )
}

/// A server that did not answer the probe (`prefix` names a cluster's
/// master): refused credentials are a configuration error, named as such,
/// not an outage.
pub(super) fn unanswered(prefix: &str, error: &str, cluster: bool) -> Finding {
    if credentials_refused(error) {
        return Finding::new(
            Severity::Degraded,
            Aspect::Capability,
            format!("{prefix}the server refused the credentials in the node's URL: {error}"),
            "fix the user and password in the node's URL (or enable the user): a node that refuses them cannot vote",
        );
    }
    Finding::new(
        Severity::Degraded,
        if cluster {
            Aspect::Cluster
        } else {
            Aspect::Reachability
        },
        format!("{prefix}no answer: {error}"),
        "a node that does not answer cannot vote; check the address, credentials and network",
    )
}

/// What the access probe was refused, each with what to do about it.
pub(super) fn refusals(refused: &Result<Vec<(String, String)>, String>) -> Vec<Finding> {
    let refused = match refused {
        Ok(refused) => refused,
        Err(e) => {
            return vec![Finding::new(
                Severity::Note,
                Aspect::Capability,
                format!("the access probe could not run: {e}"),
                "run the check again when the node answers",
            )];
        }
    };
    refused
        .iter()
        // A node refused as another name of a server the manager already
        // has: its independence finding says so, once.
        .filter(|(_, error)| !error.contains("reaches the same server as node"))
        .map(|(operation, error)| {
            let lower = error.to_lowercase();
            let advice = if lower.contains("read only replica") {
                "the node is a read-only replica: list masters only"
            } else if lower.contains("noperm")
                || lower.contains("no permissions")
                || lower.contains("can't run this command")
            {
                "grant the lock user these commands on the key prefix (docs/security.md), or use ScriptMode::Functions with +fcall"
            } else {
                "the node fails this operation: see its error"
            };
            Finding::new(
                Severity::Degraded,
                Aspect::Capability,
                format!("{operation} on the probe key was refused: {error}"),
                advice,
            )
        })
        .collect()
}

/// Which primitives a node serves, from what its access probe was refused
/// (`None`: the probe could not run). A plain lock's steps are its
/// acquire, extension and release; the multi-resource acquire is the
/// probe's script, which every other primitive needs too.
pub(super) fn serves(refused: &Result<Vec<(String, String)>, String>) -> Option<Serves> {
    let refused = refused.as_ref().ok()?;
    let step = |prefix: &str| refused.iter().any(|(op, _)| op.starts_with(prefix));
    Some(if step("acquire (") || step("extend") || step("release") {
        Serves::Nothing
    } else if step("acquire_many") {
        Serves::PlainLocks
    } else {
        Serves::Every
    })
}

/// The Functions library on a server, in Functions mode (`ours` is the
/// library this version loads).
pub(super) fn library(found: Option<&Library>, ours: &str) -> Option<Finding> {
    match found? {
        Library::Missing => Some(Finding::new(
            Severity::Degraded,
            Aspect::Capability,
            "Functions mode, but the library `quorumlock` is not loaded".to_owned(),
            "load quorumlock::FUNCTIONS_LIBRARY with FUNCTION LOAD REPLACE on this server",
        )),
        Library::Loaded { code } if code.trim() != ours.trim() => Some(Finding::new(
            Severity::Degraded,
            Aspect::Capability,
            "the library `quorumlock` loaded here is another version".to_owned(),
            "load this version's quorumlock::FUNCTIONS_LIBRARY with FUNCTION LOAD REPLACE",
        )),
        Library::Loaded { .. } => None,
        Library::Unknown(e) => Some(Finding::new(
            Severity::Note,
            Aspect::Capability,
            format!("could not list functions: {e}"),
            "the access probe still shows whether the functions run",
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::check::judge::testing::{findings, healthy, node, options, settings};
    use crate::check::judge::{Library, NodeFacts, Settings, judge};
    use crate::check::{Aspect, FLEET, Severity};
    use std::time::Duration;

    #[test]
    fn what_a_node_serves_follows_its_probe() {
        use super::serves;
        use crate::check::Serves;
        let refused = |ops: &[&str]| -> Result<Vec<(String, String)>, String> {
            Ok(ops
                .iter()
                .map(|op| ((*op).to_owned(), "refused".to_owned()))
                .collect())
        };
        assert_eq!(serves(&refused(&[])), Some(Serves::Every));
        assert_eq!(
            serves(&refused(&["acquire_many (script: GET, SET)"])),
            Some(Serves::PlainLocks)
        );
        for step in [
            "acquire (SET NX PX)",
            "extend (script: GET, PEXPIRE, SET)",
            "release (DELIFEQ, PUBLISH)",
        ] {
            assert_eq!(
                serves(&refused(&[step, "acquire_many (script: GET, SET)"])),
                Some(Serves::Nothing),
                "{step}"
            );
        }
        assert_eq!(serves(&Err("no answer".to_owned())), None);
        // Not probed: nothing said.
        let mut unprobed = options();
        unprobed.probe_access = false;
        let report = judge(&[node("a", healthy("1"))], settings(&unprobed));
        assert_eq!(report.nodes[0].serves, None);
        let report = judge(&[node("a", healthy("1"))], settings(&options()));
        assert_eq!(report.nodes[0].serves, Some(Serves::Every));
        // A node that did not answer: nothing said either.
        let mut silent = node("b", healthy("2"));
        silent.servers = vec![("h:2".into(), Err("none within 2s".into()))];
        let report = judge(&[silent], settings(&options()));
        assert_eq!(report.nodes[0].serves, None);
    }

    #[test]
    fn a_node_the_manager_does_not_ask_is_reported_with_how_long() {
        let mut silent = node("b", healthy("2"));
        silent.not_asked_for = Some(Duration::from_millis(3200));
        let report = judge(&[node("a", healthy("1")), silent], settings(&options()));
        assert_eq!(report.nodes[0].worst(), None, "{report}");
        let finding = &report.nodes[1].findings[0];
        assert_eq!(
            (finding.severity, finding.aspect),
            (Severity::Degraded, Aspect::Reachability)
        );
        assert!(
            finding.seen.contains("not asked this node for 3200ms"),
            "{report}"
        );
    }

    #[test]
    fn functions_library_missing_or_another_version() {
        let mut s = healthy("1");
        s.library = Some(Library::Missing);
        assert_eq!(
            findings(s.clone(), &options()),
            [(Severity::Degraded, Aspect::Capability)]
        );
        s.library = Some(Library::Loaded {
            code: "#!lua name=quorumlock\n-- old".into(),
        });
        assert_eq!(
            findings(s.clone(), &options()),
            [(Severity::Degraded, Aspect::Capability)]
        );
        s.library = Some(Library::Loaded {
            code: "#!lua name=quorumlock".into(),
        });
        assert_eq!(findings(s, &options()), []);
    }

    #[test]
    fn refused_operations_and_unreachable_nodes_are_degraded() {
        let mut n = node("a", healthy("1"));
        n.refused = Ok(vec![("release".into(), "NOPERM no GET".into())]);
        let unreachable = NodeFacts {
            node: "b".into(),
            servers: vec![("h:2".into(), Err("connection refused".into()))],
            slots: None,
            refused: Err("connection refused".into()),
            path: None,
            not_asked_for: None,
            tracking: None,
        };
        let report = judge(&[n, unreachable], settings(&options()));
        assert_eq!(report.worst(), Some(Severity::Degraded));
        // The path each node's locks take is reported, and shown.
        assert_eq!(
            report.nodes[0].path.as_deref(),
            Some("release DELIFEQ, extend SET IFEQ")
        );
        assert_eq!(report.nodes[1].path, None);
        assert!(
            report
                .to_string()
                .contains("path      -             release DELIFEQ, extend SET IFEQ"),
            "{report}"
        );
        assert_eq!(report.nodes[0].findings[0].aspect, Aspect::Capability);
        assert_eq!(report.nodes[1].findings[0].aspect, Aspect::Reachability);
    }

    /// Fewer nodes answering than a quorum is unsafe for the fleet, though
    /// each node alone is only degraded; refused credentials are named as
    /// such. The summary counts nodes by verdict, findings apart.
    #[test]
    fn too_few_nodes_answering_for_a_quorum_is_unsafe() {
        let down = |node: &str, error: &str| NodeFacts {
            node: node.into(),
            servers: vec![(format!("{node}:1"), Err(error.into()))],
            slots: None,
            refused: Err(error.into()),
            path: None,
            not_asked_for: None,
            tracking: None,
        };
        let facts = [
            node("a", healthy("r1")),
            down("b", "connection refused"),
            down(
                "c",
                "WRONGPASS invalid username-password pair or user is disabled.",
            ),
        ];
        let options = options();
        let quorum_of = |quorum| Settings {
            quorum,
            ..settings(&options)
        };
        let report = judge(&facts, quorum_of(2));
        assert!(report.is_unsafe(), "{report}");
        assert_eq!(report.fleet.len(), 1);
        assert!(report.fleet[0].seen.contains("only 1 of 3 nodes answered"));
        assert!(
            report
                .nodes
                .iter()
                .all(|n| n.worst() != Some(Severity::Unsafe))
        );
        let refused = &report.nodes[2].findings[0];
        assert_eq!(refused.aspect, Aspect::Capability);
        assert!(
            refused.seen.contains("refused the credentials"),
            "{refused:?}"
        );
        let text = report.to_string();
        assert!(
            text.contains("3 nodes: 0 unsafe, 2 degraded, 1 ok (0 with notes only); findings: 1 unsafe, 2 degraded"),
            "{text}"
        );
        assert!(text.contains(FLEET), "{text}");
        // With a quorum of one, the one answering node is enough.
        let report = judge(&facts, quorum_of(1));
        assert!(report.fleet.is_empty() && !report.is_unsafe(), "{report}");
    }
}
