//! The cluster rules: a cluster node's slot map (every slot has a
//! master), and a cluster member given as a plain node.

use super::facts::{NodeFacts, SLOTS};
use crate::check::{Aspect, Finding, Severity};

/// Whether a node given as a plain (standalone) node is a Redis Cluster
/// member, as its `INFO` says.
pub(super) fn plain_cluster_member(node: &NodeFacts) -> bool {
    node.slots.is_none()
        && node.servers.iter().any(|(_, probed)| {
            probed.as_ref().is_ok_and(|server| {
                server
                    .info
                    .as_ref()
                    .is_ok_and(|info| info.get("cluster_enabled").is_some_and(|v| v == "1"))
            })
        })
}

/// A Redis Cluster member given as a plain node, named as such (see
/// [`plain_cluster_member`]).
pub(super) fn given_as_plain_node(facts: &NodeFacts) -> Option<Finding> {
    plain_cluster_member(facts).then(|| {
        Finding::new(
            Severity::Degraded,
            Aspect::Cluster,
            "this server is a Redis Cluster member (cluster_enabled:1), given as a plain node".to_owned(),
            "give its cluster as one node (RedlockBuilder::cluster with its members' URLs): as a plain node it refuses every key of a slot it does not own",
        )
    })
}

/// A cluster node's slot map, if it is missing or leaves slots uncovered.
pub(super) fn slot_map(facts: &NodeFacts) -> Option<Finding> {
    match facts.slots.as_ref()? {
        Err(e) => Some(Finding::new(
            Severity::Degraded,
            Aspect::Cluster,
            format!("no slot map: {e}"),
            "check that the seeds are reachable members of one cluster",
        )),
        Ok(map) => {
            let uncovered = map.uncovered();
            (uncovered > 0).then(|| {
                Finding::new(
                    Severity::Degraded,
                    Aspect::Cluster,
                    format!("{uncovered} of {SLOTS} slots have no master"),
                    "assign every slot: locks on keys in uncovered slots fail on this node",
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::facts::SlotMap;
    use super::*;
    use crate::check::judge::testing::{healthy, node, options, settings};
    use crate::check::judge::{Settings, judge};

    /// A cluster member given as a plain node gets one finding whatever
    /// the probe key met, and does not count towards a quorum.
    #[test]
    fn a_cluster_member_given_as_a_plain_node_is_named_as_such() {
        let mut member = healthy("m1");
        if let Ok(info) = &mut member.info {
            info.insert("cluster_enabled".into(), "1".into());
        }
        let mut facts = node("m", member);
        facts.refused = Ok(vec![(
            "acquire (SET NX PX)".into(),
            "Moved: 15130 127.0.0.1:7003".into(),
        )]);
        let options = options();
        let report = judge(
            &[facts],
            Settings {
                quorum: 1,
                ..settings(&options)
            },
        );
        let findings = &report.nodes[0].findings;
        assert_eq!(findings.len(), 1, "{report}");
        assert_eq!(findings[0].aspect, Aspect::Cluster);
        assert!(
            findings[0].seen.contains("Redis Cluster member"),
            "{report}"
        );
        assert!(!report.to_string().contains("Moved"), "{report}");
        // It cannot answer for most keys: no quorum of one.
        assert!(report.is_unsafe(), "{report}");
    }

    #[test]
    fn cluster_slot_coverage() {
        let full = SlotMap {
            ranges: vec![(0, 8191, "a:1".into()), (8192, 16383, "b:1".into())],
        };
        assert_eq!(full.uncovered(), 0);
        assert_eq!(full.masters(), ["a:1", "b:1"]);
        let partial = SlotMap {
            ranges: vec![(0, 8191, "a:1".into())],
        };
        let mut n = node("c", healthy("1"));
        n.slots = Some(Ok(partial));
        let report = judge(&[n], settings(&options()));
        let f = &report.nodes[0].findings;
        assert_eq!(f.len(), 1, "{report}");
        assert_eq!(
            (f[0].severity, f[0].aspect),
            (Severity::Degraded, Aspect::Cluster)
        );
        assert!(f[0].seen.contains("8192 of 16384"), "{report}");
    }
}
