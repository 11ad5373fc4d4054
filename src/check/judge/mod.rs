//! The judgement: what each server showed (gathered by `probe`) turned
//! into findings, per node and for the whole set. Pure: no I/O, every rule
//! unit-tested beside it.
//!
//! Here: the facts the probe gathers, the entry point, and the walk over
//! each node's servers that asks every rule. The rules, one family a file:
//! `independence` (a voter of its own), `durability` (what can make a node
//! forget a lock: eviction, persistence, replicas), `access` (answering,
//! credentials, the operations and library locks need, a quorum),
//! `timing` (clock rate, round trips) and `cluster` (slot maps, a member
//! given as a plain node).

use super::{Aspect, Finding, Latency, NodeReport, Report, Severity};

mod access;
mod cluster;
mod durability;
mod facts;
mod independence;
#[cfg(test)]
mod testing;
mod timing;

use facts::Info;
pub(crate) use facts::{ClockSample, Library, NodeFacts, ServerFacts, Settings, SlotMap};

/// Judges every node's facts: per-server findings, then the findings that
/// need every node at once (one server or one replication group behind two
/// nodes; too few nodes answering for a quorum).
pub(crate) fn judge(facts: &[NodeFacts], settings: Settings<'_>) -> Report {
    let mut nodes: Vec<NodeReport> = facts
        .iter()
        .map(|node| judge_node(node, settings))
        .collect();
    for (i, finding) in independence::shared_servers(facts) {
        nodes[i].findings.push(finding);
    }
    for node in &mut nodes {
        node.findings
            .sort_by(|a, b| b.severity.cmp(&a.severity).then(a.aspect.cmp(&b.aspect)));
    }
    let fleet = access::quorum(facts, settings.quorum).into_iter().collect();
    Report { nodes, fleet }
}

/// One node's report: its cluster's slot map, each of its servers, and
/// what the access probe was refused.
fn judge_node(facts: &NodeFacts, settings: Settings<'_>) -> NodeReport {
    let mut findings: Vec<Finding> = cluster::slot_map(facts).into_iter().collect();
    let servers = judge_servers(facts, settings);
    findings.extend(servers.findings);
    // A Redis Cluster member given as a plain node answers for the slots
    // it owns and redirects the rest (MOVED): whether the probe key lands
    // on it is chance. One finding, every time, instead of a verdict that
    // depends on the probe key (and its refusals are not judged).
    let mut serves = None;
    if let Some(finding) = cluster::given_as_plain_node(facts) {
        findings.push(finding);
    } else if !servers.credentials_refused {
        // Probed: the probe ran, on a node the manager asks, that answered.
        let answered = facts.servers.iter().any(|(_, server)| server.is_ok());
        let probed = settings.options.probe_access && facts.not_asked_for.is_none() && answered;
        serves = probed.then(|| access::serves(&facts.refused)).flatten();
        // Credentials refused: one finding says it (above); every probe
        // operation failing for the same reason would only repeat it.
        findings.extend(access::refusals(&facts.refused));
    }
    findings.extend(facts.not_asked_for.map(access::not_asked));
    NodeReport {
        node: facts.node.clone(),
        server: servers.server,
        latency: servers.latency,
        path: facts.path.clone(),
        serves,
        watches: facts.tracking.as_ref().map(|tracking| match tracking {
            Ok(()) => "held keys: changes heard at once (CLIENT TRACKING)".to_owned(),
            Err(why) => format!("no: {why}; held locks learn of changes at renewal"),
        }),
        findings,
    }
}

/// What a node's servers showed: the first one's name, the worst
/// latency, and the findings (each a cluster master's, named so).
struct Servers {
    server: Option<String>,
    latency: Option<Latency>,
    findings: Vec<Finding>,
    /// A server refused the node's credentials (said in `findings`).
    credentials_refused: bool,
}

/// Each of a node's servers judged (see [`judge_server`]), or named as
/// not answering.
fn judge_servers(facts: &NodeFacts, settings: Settings<'_>) -> Servers {
    let cluster = facts.slots.is_some();
    let mut judged = Servers {
        server: None,
        latency: None,
        findings: Vec::new(),
        credentials_refused: false,
    };
    for (address, probed) in &facts.servers {
        let prefix = if cluster {
            format!("master {address}: ")
        } else {
            String::new()
        };
        match probed {
            Err(e) => {
                judged.credentials_refused |= access::credentials_refused(e);
                judged
                    .findings
                    .push(access::unanswered(&prefix, e, cluster));
            }
            Ok(s) => {
                judged.server.get_or_insert_with(|| server_name(s));
                if let Some(l) = Latency::of(&s.rtts)
                    && judged.latency.is_none_or(|worst| l.p99 > worst.p99)
                {
                    judged.latency = Some(l);
                }
                for mut finding in judge_server(s, settings) {
                    finding.seen.insert_str(0, &prefix);
                    judged.findings.push(finding);
                }
            }
        }
    }
    judged
}

/// `redis 7.0.15` (or `valkey 8.0.1`, from `server_name`).
fn server_name(s: &ServerFacts) -> String {
    let Ok(info) = &s.info else {
        return "server ? (INFO refused)".to_owned();
    };
    let name = info.get("server_name").map_or("redis", String::as_str);
    let version = info
        .get(&format!("{name}_version"))
        .or_else(|| info.get("redis_version"))
        .map_or("?", String::as_str);
    format!("{name} {version}")
}

/// One server's findings: the rules that read its `INFO`, then the rest
/// ([`judge_rest`]).
fn judge_server(s: &ServerFacts, settings: Settings<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    match &s.info {
        Ok(fields) => {
            let info = Info(fields);
            out.extend(independence::replica(info));
            out.extend(durability::replicas(info));
            out.extend(durability::eviction(info));
            out.extend(durability::persistence(info, &s.config, settings.options));
        }
        Err(e) => out.push(Finding::new(
            Severity::Note,
            Aspect::Capability,
            format!("INFO refused: {e}"),
            "independence, eviction, persistence and replicas are unchecked: run the check as a user allowed INFO, CONFIG GET, TIME and PING",
        )),
    }
    out.extend(judge_rest(s, settings));
    out
}

/// What needs no `INFO`: clock, Functions library, `CONFIG GET`, latency.
fn judge_rest(s: &ServerFacts, settings: Settings<'_>) -> Vec<Finding> {
    let mut out = match s.clock {
        Ok(clock) => timing::judge_clock(clock, settings.drift_factor),
        Err(ref e) => vec![Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!("could not read TIME: {e}"),
            "the clock rate is unchecked; run the check as a user allowed TIME",
        )],
    };
    out.extend(access::library(s.library.as_ref(), settings.library));
    if let Err(e) = &s.config {
        out.push(Finding::new(
            Severity::Note,
            Aspect::Capability,
            format!("CONFIG GET refused: {e}"),
            "persistence settings could not be read in full; run the check as a user allowed CONFIG GET",
        ));
    }
    out.extend(Latency::of(&s.rtts).and_then(|l| timing::latency(l, settings.node_timeout)));
    out
}

#[cfg(test)]
mod tests {
    use super::testing::{healthy, node, options, settings};
    use super::*;

    #[test]
    fn a_healthy_set_has_no_findings() {
        let facts = [node("a", healthy("1")), node("b", healthy("2"))];
        let report = judge(&facts, settings(&options()));
        assert_eq!(report.worst(), None, "{report}");
        assert!(!report.is_unsafe());
        assert!(report.to_string().contains("ok"), "{report}");
    }

    #[test]
    fn a_user_without_info_or_time_gets_notes_not_silence() {
        let mut s = healthy("1");
        s.info = Err("NOPERM info".into());
        s.clock = Err("NOPERM time".into());
        let report = judge(&[node("n", s)], settings(&options()));
        let found: Vec<_> = report.nodes[0]
            .findings
            .iter()
            .map(|f| (f.severity, f.aspect))
            .collect();
        assert_eq!(
            found,
            [
                (Severity::Note, Aspect::Clock),
                (Severity::Note, Aspect::Capability)
            ],
            "{report}"
        );
        assert_eq!(
            report.nodes[0].server.as_deref(),
            Some("server ? (INFO refused)")
        );
    }
}
