//! The judgement: what each server showed (gathered by `probe`) turned
//! into findings, per node and for the whole set. Pure: no I/O, every rule
//! unit-tested below.

use super::{Aspect, CheckOptions, Finding, Latency, NodeReport, Report, Severity};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

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

/// A cluster's slot map, as `CLUSTER SLOTS` gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// `(first slot, last slot, master host:port)`.
    pub(crate) ranges: Vec<(u16, u16, String)>,
}

/// Number of hash slots in a Redis Cluster.
const SLOTS: u32 = 16384;

impl SlotMap {
    /// How many of the 16384 slots no range covers.
    pub(crate) fn uncovered(&self) -> u32 {
        let mut covered = vec![false; SLOTS as usize];
        for (first, last, _) in &self.ranges {
            for slot in *first..=*last {
                if let Some(c) = covered.get_mut(usize::from(slot)) {
                    *c = true;
                }
            }
        }
        covered.iter().filter(|c| !**c).count() as u32
    }

    /// The masters, each once, in slot order.
    pub(crate) fn masters(&self) -> Vec<String> {
        let mut masters: Vec<String> = Vec::new();
        for (_, _, master) in &self.ranges {
            if !masters.contains(master) {
                masters.push(master.clone());
            }
        }
        masters
    }
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
/// nodes).
pub(crate) fn judge(facts: &[NodeFacts], settings: Settings<'_>) -> Report {
    let mut nodes: Vec<NodeReport> = facts
        .iter()
        .map(|node| judge_node(node, settings))
        .collect();
    for (i, finding) in shared_servers(facts) {
        nodes[i].findings.push(finding);
    }
    for node in &mut nodes {
        node.findings
            .sort_by(|a, b| b.severity.cmp(&a.severity).then(a.aspect.cmp(&b.aspect)));
    }
    // Too few nodes answering for a quorum: no lock can be taken. Whatever
    // each node's own verdict, the fleet is not fit to gate a deploy on.
    let voting = facts.iter().filter(|node| answered(node)).count();
    let mut fleet = Vec::new();
    if voting < settings.quorum {
        fleet.push(Finding::new(
            Severity::Unsafe,
            Aspect::Reachability,
            format!(
                "only {voting} of {} nodes answered: a quorum of {} cannot be reached, no lock can be taken",
                facts.len(),
                settings.quorum
            ),
            "bring nodes back, or fix their addresses and credentials (see each node's rows)",
        ));
    }
    Report { nodes, fleet }
}

/// Independence across nodes: one server behind two nodes (same
/// `run_id`), or one master and its replicas (same `master_replid`, when
/// not already one server). Each finding with the node it belongs to.
fn shared_servers(facts: &[NodeFacts]) -> Vec<(usize, Finding)> {
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

/// Whether a node answered the check: every server it names was probed,
/// and a cluster's slot map was read. A cluster member given as a plain
/// node does not count: most keys are not its to answer for.
fn answered(node: &NodeFacts) -> bool {
    !node.servers.is_empty()
        && node.servers.iter().all(|(_, probed)| probed.is_ok())
        && node.slots.as_ref().is_none_or(Result::is_ok)
        && !plain_cluster_member(node)
}

/// Whether a node given as a plain (standalone) node is a Redis Cluster
/// member, as its `INFO` says.
fn plain_cluster_member(node: &NodeFacts) -> bool {
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

/// Whether a probe's error says the server refused the credentials.
fn credentials_refused(error: &str) -> bool {
    error.contains("WRONGPASS")
        || error.contains("refused the credentials")
        || error.to_ascii_lowercase().contains("authentication failed")
}

/// One node's report: its cluster's slot map, each of its servers, and
/// what the access probe was refused.
fn judge_node(facts: &NodeFacts, settings: Settings<'_>) -> NodeReport {
    let mut findings: Vec<Finding> = slot_map(facts).into_iter().collect();
    let servers = judge_servers(facts, settings);
    findings.extend(servers.findings);
    // A Redis Cluster member given as a plain node answers for the slots
    // it owns and redirects the rest (MOVED): whether the probe key lands
    // on it is chance. One finding, every time, instead of a verdict that
    // depends on the probe key (and its refusals are not judged).
    if plain_cluster_member(facts) {
        findings.push(Finding::new(
            Severity::Degraded,
            Aspect::Cluster,
            "this server is a Redis Cluster member (cluster_enabled:1), given as a plain node".to_owned(),
            "give its cluster as one node (RedlockBuilder::cluster with its members' URLs): as a plain node it refuses every key of a slot it does not own",
        ));
    } else if !servers.credentials_refused {
        // Credentials refused: one finding says it (above); every probe
        // operation failing for the same reason would only repeat it.
        findings.extend(refusals(&facts.refused));
    }
    findings.extend(facts.not_asked_for.map(not_asked));
    NodeReport {
        node: facts.node.clone(),
        server: servers.server,
        latency: servers.latency,
        path: facts.path.clone(),
        findings,
    }
}

/// The manager does not ask the node (see `node::health`), for `silent`.
fn not_asked(silent: Duration) -> Finding {
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

/// A cluster node's slot map, if it is missing or leaves slots uncovered.
fn slot_map(facts: &NodeFacts) -> Option<Finding> {
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

/// What a node's servers showed: the first one's name, the worst
/// latency, and the findings (each a cluster master's, named so).
struct Servers {
    server: Option<String>,
    latency: Option<Latency>,
    findings: Vec<Finding>,
    /// A server refused the node's credentials (said in `findings`).
    credentials_refused: bool,
}

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
                judged.credentials_refused |= credentials_refused(e);
                judged.findings.push(unanswered(&prefix, e, cluster));
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

/// A server that did not answer the probe (`prefix` names a cluster's
/// master): refused credentials are a configuration error, named as such,
/// not an outage.
fn unanswered(prefix: &str, error: &str, cluster: bool) -> Finding {
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
fn refusals(refused: &Result<Vec<(String, String)>, String>) -> Vec<Finding> {
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

fn judge_server(s: &ServerFacts, settings: Settings<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    match &s.info {
        Ok(fields) => {
            let info = Info(fields);
            out.extend(independence(info));
            out.extend(replicas(info));
            out.extend(eviction(info));
            out.extend(persistence(info, &s.config, settings.options));
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

/// Independence: a replica is not a voter of its own.
fn independence(info: Info<'_>) -> Option<Finding> {
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

/// Replicas behind the voter, which a failover may promote.
fn replicas(info: Info<'_>) -> Option<Finding> {
    let replicas = info.number("connected_slaves").filter(|n| *n > 0)?;
    Some(Finding::new(
        Severity::Degraded,
        Aspect::Replicas,
        format!("{replicas} replica(s) attached"),
        "a failover can promote a replica that never received a lock key, and the node forgets the lock: run without automatic failover, or turn on replica sync (RedlockBuilder::replica_sync, standalone nodes)",
    ))
}

/// Eviction: an evicted lock key lets a second client in.
fn eviction(info: Info<'_>) -> Option<Finding> {
    let maxmemory = info.number("maxmemory").unwrap_or(0);
    let policy = info.get("maxmemory_policy").unwrap_or("noeviction");
    Some(match (maxmemory > 0, policy == "noeviction") {
        (true, true) => Finding::new(
            Severity::Note,
            Aspect::Eviction,
            format!("maxmemory {maxmemory} bytes with noeviction"),
            "when memory is full, lock writes fail (the node refuses to vote) but no lock is lost",
        ),
        (true, false) => Finding::new(
            Severity::Unsafe,
            Aspect::Eviction,
            format!("maxmemory {maxmemory} bytes with maxmemory-policy {policy}"),
            "use maxmemory-policy noeviction (or no maxmemory): an evicted lock key lets a second client in",
        ),
        (false, false) => Finding::new(
            Severity::Note,
            Aspect::Eviction,
            format!("maxmemory-policy {policy} (no maxmemory set)"),
            "nothing is evicted today; setting maxmemory would evict lock keys: prefer noeviction",
        ),
        (false, true) => return None,
    })
}

/// Persistence: what a restart keeps of the locks and fence counters, and
/// whether a node that may have restarted empty has been up for longer
/// than the longest ttl.
fn persistence(
    info: Info<'_>,
    config: &Result<HashMap<String, String>, String>,
    options: &CheckOptions,
) -> Vec<Finding> {
    let aof = info.get("aof_enabled") == Some("1");
    let fsync = config
        .as_ref()
        .ok()
        .and_then(|c| c.get("appendfsync").cloned());
    let durable = aof && fsync.as_deref() == Some("always");
    let mut out: Vec<Finding> = (!durable)
        .then(|| not_durable(aof, fsync.as_deref(), config, options.fenced))
        .into_iter()
        .collect();
    if let (Some(longest), Some(uptime), false) = (
        options.longest_ttl,
        info.number("uptime_in_seconds"),
        durable,
    ) {
        let uptime = Duration::from_secs(uptime);
        if uptime < longest {
            out.push(Finding::new(
                Severity::Unsafe,
                Aspect::Persistence,
                format!(
                    "up for {uptime:?}, less than the longest ttl {longest:?}, without durable persistence"
                ),
                "if it restarted empty, locks it granted before may be granted again until it has been up for the longest ttl: delay restarts by the longest ttl",
            ));
        }
    }
    out
}

/// A server without durable persistence (`appendonly yes` with
/// `appendfsync always`): what a restart or a crash loses.
fn not_durable(
    aof: bool,
    fsync: Option<&str>,
    config: &Result<HashMap<String, String>, String>,
    fenced: bool,
) -> Finding {
    if !aof {
        return if fenced {
            Finding::new(
                Severity::Unsafe,
                Aspect::Persistence,
                "appendonly no".to_owned(),
                "set appendonly yes and appendfsync always: a restart loses the fence counters, and fences repeat",
            )
        } else {
            Finding::new(
                Severity::Note,
                Aspect::Persistence,
                "appendonly no".to_owned(),
                "after a crash, keep the node down for longer than the longest ttl before it rejoins (or persist with appendfsync always)",
            )
        };
    }
    let seen = match (fsync, config) {
        (Some(fsync), _) => format!("appendonly yes, appendfsync {fsync}"),
        (None, Err(e)) => format!("appendonly yes, appendfsync unknown ({e})"),
        (None, Ok(_)) => "appendonly yes, appendfsync unknown".to_owned(),
    };
    Finding::new(
        if fenced {
            Severity::Degraded
        } else {
            Severity::Note
        },
        Aspect::Persistence,
        seen,
        if fsync == Some("everysec") {
            // aof.c: under everysec, a write is postponed (for up to 2 s)
            // while a background fsync is still running, and the replies go
            // out before it.
            "on a busy disk Redis replies before it writes the AOF (for up to 2 s), so even a killed process can lose acknowledged lock writes, and a machine crash the last second or more: use appendfsync always"
        } else {
            "a machine crash can lose the writes not yet synced (locks, fence counters): use appendfsync always"
        },
    )
}

/// What needs no `INFO`: clock, Functions library, `CONFIG GET`, latency.
fn judge_rest(s: &ServerFacts, settings: Settings<'_>) -> Vec<Finding> {
    let mut out = match s.clock {
        Ok(clock) => judge_clock(clock, settings.drift_factor),
        Err(ref e) => vec![Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!("could not read TIME: {e}"),
            "the clock rate is unchecked; run the check as a user allowed TIME",
        )],
    };
    out.extend(library(s.library.as_ref(), settings.library));
    if let Err(e) = &s.config {
        out.push(Finding::new(
            Severity::Note,
            Aspect::Capability,
            format!("CONFIG GET refused: {e}"),
            "persistence settings could not be read in full; run the check as a user allowed CONFIG GET",
        ));
    }
    out.extend(Latency::of(&s.rtts).and_then(|l| latency(l, settings.node_timeout)));
    out
}

/// The Functions library on a server, in Functions mode (`ours` is the
/// library this version loads).
fn library(found: Option<&Library>, ours: &str) -> Option<Finding> {
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

/// Round trips against the node timeout.
fn latency(latency: Latency, timeout: Duration) -> Option<Finding> {
    let seen = format!(
        "round trip p50 {}, p99 {}, node timeout {}",
        ms(latency.p50),
        ms(latency.p99),
        ms(timeout)
    );
    let (severity, advice) = if latency.p50 >= timeout {
        (
            Severity::Degraded,
            "most requests time out: raise node_timeout or move the node closer",
        )
    } else if latency.p99 >= timeout {
        (
            Severity::Degraded,
            "some requests time out and the node misses votes: raise node_timeout",
        )
    } else if latency.p99 * 2 >= timeout {
        (
            Severity::Note,
            "slow round trips eat into every lock's validity; consider a larger node_timeout",
        )
    } else {
        return None;
    };
    Some(Finding::new(severity, Aspect::Latency, seen, advice))
}

/// A duration in milliseconds, to two decimals: `0.27ms`.
fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1000.0)
}

/// Largest offset between the node's wall clock and the client's that
/// passes without a note.
const OFFSET_NOTE: Duration = Duration::from_secs(1);

/// The node's clock rate against the client's, bounded by the round trips:
/// unsafe when even the slowest rate the readings allow is faster than
/// `1 + drift_factor` (keys expire early), a note when the readings are too
/// coarse to tell, when the node runs slow, or when its wall clock is far
/// off.
fn judge_clock(clock: ClockSample, drift_factor: f64) -> Vec<Finding> {
    let mut out: Vec<Finding> = clock_rate(clock, drift_factor).into_iter().collect();
    let offset = Duration::from_millis(clock.offset_ms.unsigned_abs());
    if offset > OFFSET_NOTE {
        out.push(Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!(
                "wall clock {} by {offset:?}",
                if clock.offset_ms > 0 {
                    "ahead"
                } else {
                    "behind"
                }
            ),
            "Redlock needs no agreement on the time, only on its rate; a step in the node's clock would expire keys early: synchronise with NTP (slewing)",
        ));
    }
    out
}

/// The node's clock rate against the client's, if it is worth a finding.
fn clock_rate(clock: ClockSample, drift_factor: f64) -> Option<Finding> {
    let node = clock.node_elapsed.as_secs_f64();
    let (min, max) = (
        clock.client_min.as_secs_f64(),
        clock.client_max.as_secs_f64(),
    );
    if max <= 0.0 {
        return None;
    }
    // The rate lies in [node/max, node/min].
    let low = node / max;
    let high = if min > 0.0 { node / min } else { f64::INFINITY };
    let percent = |r: f64| (r - 1.0) * 100.0;
    if low > 1.0 + drift_factor {
        Some(Finding::new(
            Severity::Unsafe,
            Aspect::Clock,
            format!(
                "the node's clock runs {:.1}% to {:.1}% fast against the client's, beyond the drift allowance of {:.1}%",
                percent(low),
                percent(high),
                drift_factor * 100.0
            ),
            "fix the node's time keeping (NTP slews at most 0.05%), or raise drift_factor above the measured rate",
        ))
    } else if high - low > drift_factor.max(0.001) {
        Some(Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!(
                "clock rate between {:+.1}% and {:+.1}%: round trips too slow to judge against the {:.1}% allowance",
                percent(low),
                percent(high),
                drift_factor * 100.0
            ),
            "check again with a longer clock interval",
        ))
    } else if high < 1.0 - drift_factor {
        Some(Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!(
                "the node's clock runs {:.1}% slow against the client's",
                -percent(high)
            ),
            "locks outlive their ttl on this node (safe, but a crashed holder's lock stays longer)",
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::FLEET;

    fn options() -> CheckOptions {
        CheckOptions::default()
    }

    fn settings(options: &CheckOptions) -> Settings<'_> {
        Settings {
            drift_factor: 0.01,
            node_timeout: Duration::from_millis(250),
            options,
            library: "#!lua name=quorumlock\n",
            quorum: 1,
        }
    }

    /// A healthy master as INFO shows it.
    fn healthy(run_id: &str) -> ServerFacts {
        let info = [
            ("redis_version", "7.0.15"),
            ("run_id", run_id),
            ("master_replid", run_id),
            ("uptime_in_seconds", "100000"),
            ("role", "master"),
            ("connected_slaves", "0"),
            ("maxmemory", "0"),
            ("maxmemory_policy", "noeviction"),
            ("aof_enabled", "1"),
        ];
        ServerFacts {
            address: "h:1".into(),
            info: Ok(info
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()),
            config: Ok([("appendfsync".to_owned(), "always".to_owned())].into()),
            clock: Ok(ClockSample {
                node_elapsed: Duration::from_millis(1000),
                client_min: Duration::from_millis(999),
                client_max: Duration::from_millis(1001),
                offset_ms: 3,
            }),
            rtts: vec![Duration::from_millis(1); 10],
            library: None,
        }
    }

    fn node(name: &str, server: ServerFacts) -> NodeFacts {
        NodeFacts {
            node: name.into(),
            servers: vec![(server.address.clone(), Ok(server))],
            slots: None,
            refused: Ok(Vec::new()),
            path: Some("release DELIFEQ, extend SET IFEQ".into()),
            not_asked_for: None,
        }
    }

    fn findings(server: ServerFacts, options: &CheckOptions) -> Vec<(Severity, Aspect)> {
        judge(&[node("n", server)], settings(options)).nodes[0]
            .findings
            .iter()
            .map(|f| (f.severity, f.aspect))
            .collect()
    }

    fn with(mut s: ServerFacts, k: &str, v: &str) -> ServerFacts {
        if let Ok(info) = &mut s.info {
            info.insert(k.into(), v.into());
        }
        s
    }

    #[test]
    fn a_healthy_set_has_no_findings() {
        let facts = [node("a", healthy("1")), node("b", healthy("2"))];
        let report = judge(&facts, settings(&options()));
        assert_eq!(report.worst(), None, "{report}");
        assert!(!report.is_unsafe());
        assert!(report.to_string().contains("ok"), "{report}");
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

    #[test]
    fn attached_replicas_are_a_risk() {
        let found = findings(with(healthy("1"), "connected_slaves", "2"), &options());
        assert_eq!(found, [(Severity::Degraded, Aspect::Replicas)]);
    }

    #[test]
    fn eviction_policies() {
        let limited = with(healthy("1"), "maxmemory", "1048576");
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "allkeys-random",
            "volatile-lru",
        ] {
            let found = findings(
                with(limited.clone(), "maxmemory_policy", policy),
                &options(),
            );
            assert_eq!(found, [(Severity::Unsafe, Aspect::Eviction)], "{policy}");
        }
        assert_eq!(
            findings(limited, &options()),
            [(Severity::Note, Aspect::Eviction)]
        );
        assert_eq!(
            findings(
                with(healthy("1"), "maxmemory_policy", "allkeys-lru"),
                &options()
            ),
            [(Severity::Note, Aspect::Eviction)]
        );
    }

    #[test]
    fn persistence_depends_on_fencing_and_uptime() {
        let no_aof = with(healthy("1"), "aof_enabled", "0");
        assert_eq!(
            findings(no_aof.clone(), &options()),
            [(Severity::Note, Aspect::Persistence)]
        );
        assert_eq!(
            findings(no_aof.clone(), &options().fenced_locks()),
            [(Severity::Unsafe, Aspect::Persistence)]
        );
        let mut everysec = healthy("1");
        everysec.config = Ok([("appendfsync".to_owned(), "everysec".to_owned())].into());
        assert_eq!(
            findings(everysec.clone(), &options().fenced_locks()),
            [(Severity::Degraded, Aspect::Persistence)]
        );
        // Up for less than the longest ttl without durable persistence.
        let young = with(no_aof, "uptime_in_seconds", "5");
        let long = options().longest_ttl(Duration::from_secs(60));
        assert_eq!(
            findings(young.clone(), &long),
            [
                (Severity::Unsafe, Aspect::Persistence),
                (Severity::Note, Aspect::Persistence)
            ]
        );
        // Durable: the uptime does not matter.
        assert_eq!(
            findings(with(healthy("1"), "uptime_in_seconds", "5"), &long),
            []
        );
    }

    #[test]
    fn a_refused_config_get_is_a_note_and_leaves_fsync_unknown() {
        let mut s = healthy("1");
        s.config = Err("NOPERM".into());
        let found = findings(s, &options());
        assert!(found.contains(&(Severity::Note, Aspect::Persistence)));
        assert!(found.contains(&(Severity::Note, Aspect::Capability)));
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

    fn clock(node_ms: u64, min_ms: u64, max_ms: u64) -> ClockSample {
        ClockSample {
            node_elapsed: Duration::from_millis(node_ms),
            client_min: Duration::from_millis(min_ms),
            client_max: Duration::from_millis(max_ms),
            offset_ms: 0,
        }
    }

    #[test]
    fn the_clock_rate_is_judged_by_its_bounds() {
        let severities = |c| {
            judge_clock(c, 0.01)
                .iter()
                .map(|f| f.severity)
                .collect::<Vec<_>>()
        };
        // 5 % fast, measured tightly: unsafe.
        assert_eq!(severities(clock(1050, 999, 1001)), [Severity::Unsafe]);
        // 0.5 % fast: within the allowance.
        assert_eq!(severities(clock(1005, 999, 1001)), []);
        // 5 % fast in the best case, but the round trips allow 1 %: unsure.
        assert_eq!(severities(clock(1050, 900, 1040)), [Severity::Note]);
        // 5 % slow: a note.
        assert_eq!(severities(clock(950, 999, 1001)), [Severity::Note]);
        // A wall clock far off is a note, whatever the rate.
        let mut off = clock(1000, 999, 1001);
        off.offset_ms = -5000;
        let found = judge_clock(off, 0.01);
        assert_eq!(found.len(), 1);
        assert!(found[0].seen.contains("behind"), "{:?}", found[0]);
    }

    #[test]
    fn latency_against_the_node_timeout() {
        let ms = Duration::from_millis;
        let mut s = healthy("1");
        // A tenth of the round trips exceed the timeout: p99 does, p50 not.
        s.rtts = vec![ms(1); 90];
        s.rtts.extend([ms(300); 10]);
        assert_eq!(
            findings(s.clone(), &options()),
            [(Severity::Degraded, Aspect::Latency)]
        );
        s.rtts = vec![ms(130); 10];
        assert_eq!(findings(s, &options()), [(Severity::Note, Aspect::Latency)]);
        let l = Latency::of(&[ms(3), ms(1), ms(2)]).expect("samples");
        assert_eq!((l.p50, l.p99), (ms(2), ms(3)));
        assert_eq!(Latency::of(&[]), None);
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
