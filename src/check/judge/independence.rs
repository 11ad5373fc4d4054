//! Independence: each node a voter of its own. A replica is not one; nor
//! are two nodes behind one server, or in one replication group.

use super::facts::{Info, NodeFacts};
use crate::check::{Aspect, Finding, Severity};
use std::collections::BTreeMap;

/// Independence across nodes: one server behind two nodes (same
/// `run_id`), or one master and its replicas (same `master_replid`, when
/// not already one server). Each finding with the node it belongs to.
pub(super) fn shared_servers(facts: &[NodeFacts]) -> Vec<(usize, Finding)> {
    let (by_run_id, by_replid) = (by_info(facts, "run_id"), by_info(facts, "master_replid"));
    // Each pair of nodes in one group, once, the later node first.
    let pairs = |groups: BTreeMap<&str, Vec<(usize, &str)>>| {
        let mut pairs = Vec::new();
        for group in groups.into_values() {
            for (k, &(i, address)) in group.iter().enumerate() {
                for &(j, other) in &group[..k] {
                    if i != j {
                        pairs.push((i, address.to_owned(), j, other.to_owned()));
                    }
                }
            }
        }
        pairs
    };
    let mut findings = Vec::new();
    let mut flagged: Vec<(usize, usize)> = Vec::new();
    for (i, address, j, other) in pairs(by_run_id) {
        flagged.push((i.min(j), i.max(j)));
        findings.push((
            i,
            Finding::new(
                Severity::Unsafe,
                Aspect::Independence,
                format!(
                    "{address} is the same server as {other} (node {}): same run_id",
                    facts[j].node
                ),
                "list each server once: one server behind two URLs casts two votes",
            ),
        ));
    }
    for (i, address, j, other) in pairs(by_replid) {
        if flagged.contains(&(i.min(j), i.max(j))) {
            continue;
        }
        findings.push((i, Finding::new(
            Severity::Unsafe,
            Aspect::Independence,
            format!(
                "{address} replicates with {other} (node {}): same master_replid",
                facts[j].node
            ),
            "give independent masters: nodes in one replication group share their fate and their data",
        )));
    }
    findings
}

/// The servers that answered, by the value of their `INFO` `field`: each
/// value's (node, address) pairs.
fn by_info<'a>(facts: &'a [NodeFacts], field: &str) -> BTreeMap<&'a str, Vec<(usize, &'a str)>> {
    let mut groups: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
    for (i, node) in facts.iter().enumerate() {
        for (address, server) in &node.servers {
            let Ok(server) = server else { continue };
            let Ok(info) = &server.info else { continue };
            if let Some(id) = info.get(field) {
                groups.entry(id).or_default().push((i, address));
            }
        }
    }
    groups
}

/// A replica given as a node: it is not a voter of its own.
pub(super) fn replica(info: Info<'_>) -> Option<Finding> {
    if info.get("role") != Some("slave") {
        return None;
    }
    let master = format!(
        "{}:{}",
        info.get("master_host").unwrap_or("?"),
        info.get("master_port").unwrap_or("?")
    );
    Some(Finding::new(
        Severity::Unsafe,
        Aspect::Independence,
        format!("a replica of {master}"),
        "list masters only: a replica refuses lock writes, and holds its master's keys rather than votes of its own",
    ))
}

#[cfg(test)]
mod tests {
    use crate::check::Severity;
    use crate::check::judge::judge;
    use crate::check::judge::testing::{healthy, node, options, settings, with};

    #[test]
    fn one_server_twice_is_unsafe_once_per_pair() {
        let facts = [node("a", healthy("1")), node("b", healthy("1"))];
        let report = judge(&facts, settings(&options()));
        assert!(report.is_unsafe());
        let found: Vec<_> = report.findings().collect();
        // Flagged on the second node, by run_id, not again by replid.
        assert_eq!(found.len(), 1, "{report}");
        assert_eq!(found[0].0, "b");
        assert!(found[0].1.seen.contains("run_id"), "{report}");
    }

    #[test]
    fn replicas_and_replication_groups_are_unsafe() {
        let replica = with(
            with(healthy("2"), "role", "slave"),
            "master_replid",
            "1", // the master's replication id
        );
        let facts = [node("a", healthy("1")), node("b", replica)];
        let report = judge(&facts, settings(&options()));
        let b = &report.nodes[1].findings;
        assert!(
            b.iter().any(|f| f.seen.contains("a replica of")),
            "{report}"
        );
        assert!(
            b.iter().any(|f| f.seen.contains("master_replid")),
            "{report}"
        );
        assert!(b.iter().all(|f| f.severity == Severity::Unsafe));
    }
}
