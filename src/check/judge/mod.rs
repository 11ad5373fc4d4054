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

use super::{Aspect, CheckOptions, Finding, Latency, NodeReport, Report, Severity};
use std::collections::HashMap;
use std::time::Duration;

mod access;
mod cluster;
mod durability;
mod independence;
#[cfg(test)]
mod testing;
mod timing;

pub(crate) use cluster::SlotMap;

/// Two readings of a node's clock (`TIME`), each with the client's
/// monotonic clock just before sending and just after the answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ClockSample {
    /// Node time of the second reading minus the first.
    pub(crate) node_elapsed: Duration,
    /// Client time from the first reading's answer to the second's request:
    /// the least the node's clock can have seen pass.
    pub(crate) client_min: Duration,
    /// Client time from the first request to the second answer: the most.
    pub(crate) client_max: Duration,
    /// Node wall clock minus the client's wall clock, in ms, at the first
    /// reading (positive: the node is ahead).
    pub(crate) offset_ms: i64,
}

/// How the Functions library looks on a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Library {
    Missing,
    Loaded {
        code: String,
    },
    /// `FUNCTION LIST` was refused or failed.
    Unknown(String),
}

/// What one server showed the probe.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerFacts {
    /// `host:port` as probed.
    pub(crate) address: String,
    /// `INFO` fields (server, replication, memory, persistence sections),
    /// or why `INFO` was refused (an ACL user without it).
    pub(crate) info: Result<HashMap<String, String>, String>,
    /// `CONFIG GET` results that `INFO` lacks (`appendfsync`), or why they
    /// could not be read.
    pub(crate) config: Result<HashMap<String, String>, String>,
    /// Two readings of `TIME`, or why they could not be taken.
    pub(crate) clock: Result<ClockSample, String>,
    pub(crate) rtts: Vec<Duration>,
    /// `None` in [`ScriptMode::Eval`](crate::ScriptMode::Eval).
    pub(crate) library: Option<Library>,
}

/// What the probe got from one configured node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeFacts {
    pub(crate) node: String,
    /// Each server probed (a standalone node's one; a cluster's masters),
    /// or why it could not be.
    pub(crate) servers: Vec<(String, Result<ServerFacts, String>)>,
    /// For a cluster node: its slot map, or why none could be read.
    pub(crate) slots: Option<Result<SlotMap, String>>,
    /// Operations the lock user was refused on the probe key: `(operation,
    /// error)`; an `Err` if the probe itself could not run.
    pub(crate) refused: Result<Vec<(String, String)>, String>,
    /// How plain locks are released and extended there (native commands
    /// or scripts), if the node said.
    pub(crate) path: Option<String>,
    /// How long the manager has not asked the node, if it does not (its
    /// last requests timed out; see `node::health`).
    pub(crate) not_asked_for: Option<Duration>,
}

/// What the judgement needs besides the facts: the manager's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Settings<'a> {
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) options: &'a CheckOptions,
    /// The library text the nodes should hold, in Functions mode.
    pub(crate) library: &'a str,
    /// How many nodes must vote for a lock.
    pub(crate) quorum: usize,
}

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
    if let Some(finding) = cluster::given_as_plain_node(facts) {
        findings.push(finding);
    } else if !servers.credentials_refused {
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

/// A node's `INFO` fields.
#[derive(Clone, Copy)]
struct Info<'a>(&'a HashMap<String, String>);

impl<'a> Info<'a> {
    fn get(self, key: &str) -> Option<&'a str> {
        self.0.get(key).map(String::as_str)
    }

    fn number(self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| v.parse().ok())
    }
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
