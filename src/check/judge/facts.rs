//! What the judgement reads: the facts the probe gathers per node and per
//! server, a cluster's slot map, a server's `INFO` fields, and the
//! manager's settings. Every rule family reads these; none is judged here.

use std::collections::HashMap;
use std::time::Duration;

use crate::check::CheckOptions;

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
    /// Whether the node would track held keys for the manager
    /// (`CLIENT TRACKING` on a connection of its own), or why not; `None`
    /// if it was not asked.
    pub(crate) tracking: Option<Result<(), String>>,
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

/// A node's `INFO` fields.
#[derive(Clone, Copy)]
pub(super) struct Info<'a>(pub(super) &'a HashMap<String, String>);

impl<'a> Info<'a> {
    pub(super) fn get(self, key: &str) -> Option<&'a str> {
        self.0.get(key).map(String::as_str)
    }

    pub(super) fn number(self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| v.parse().ok())
    }
}

/// A cluster's slot map, as `CLUSTER SLOTS` gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// `(first slot, last slot, master host:port)`.
    pub(crate) ranges: Vec<(u16, u16, String)>,
}

/// Number of hash slots in a Redis Cluster.
pub(super) const SLOTS: u32 = 16384;

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
