//! One server, one vote: which server answers a node, and the refusal of a
//! node that reaches a server another node of the manager already reaches.
//!
//! Redlock's safety rests on independent nodes. Two URLs can name one
//! server in ways the URLs do not show (a host alias, `localhost` beside
//! `127.0.0.1`, a proxy); the builder refuses what they do show (one
//! address, two databases). So each standalone node learns its server's
//! `run_id` (`INFO server`) on every new connection, beside the
//! connection's first request (see `caps`, which asks both in one
//! pipeline, answered before that request). The first node to report a
//! `run_id` keeps its vote; a later one reporting the same `run_id` is
//! **refused**: its requests fail at once with [`NodeError::SameServer`],
//! and the reply that brought it is not counted either, so one server's
//! answer never counts twice, not even within the call that found it. The
//! manager's acquisitions then fail with [`ConfigError::SameServer`]
//! (see [`Servers::clash`]): a configuration that names a server twice is
//! wrong however its calls turn out, and a refusal is kept for the
//! manager's life.
//!
//! A user denied `INFO` cannot be checked: its node is *unchecked*, said
//! once in a warning (the documented ACL lines grant `+info`). A cluster
//! node's members are checked against the other nodes by address only
//! (`ConfigError::SharedAddress`).
//!
//! A node whose `run_id` changed restarted: what it was sent before may
//! have come back from its persistence ([`Learned::Restarted`]).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use redis::Value;

use crate::error::{ConfigError, NodeError};
use crate::node::Node;

/// Not learned on the current connection.
const UNKNOWN: u8 = 0;
/// Learned, and no other node reaches its server.
const KNOWN: u8 = 1;
/// Cannot be learned (a cluster node, or a user denied `INFO`): counted
/// unchecked.
const UNCHECKED: u8 = 2;
/// Another node reaches its server: never counted again.
const REFUSED: u8 = 3;

/// What a manager's nodes share: each node's server as last learned, and
/// the first two nodes found to reach one server.
#[derive(Debug)]
pub(crate) struct Servers {
    labels: Box<[Arc<str>]>,
    run_ids: Mutex<Box<[Option<Arc<str>>]>>,
    /// `(first, second)`: node `second` reaches node `first`'s server.
    clash: OnceLock<(usize, usize)>,
}

/// What learning a node's `run_id` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Learned {
    /// The server it reached before, or its first.
    Same,
    /// Another server than last time: the node restarted (or its name
    /// moved).
    Restarted,
    /// The server another node reaches (that node's label): refused.
    Refused(Arc<str>),
}

impl Servers {
    /// The configuration error, once two nodes were found to reach one
    /// server.
    pub(crate) fn clash(&self) -> Option<ConfigError> {
        let &(first, second) = self.clash.get()?;
        let label = |i: usize| self.labels.get(i).map(ToString::to_string);
        Some(ConfigError::SameServer {
            first: label(first)?,
            second: label(second)?,
            why: "same run_id",
        })
    }

    /// Records that node `node` reaches the server `run_id`.
    fn record(&self, node: usize, run_id: &str) -> Learned {
        let mut run_ids = self.run_ids.lock().unwrap_or_else(|e| e.into_inner());
        let other = run_ids
            .iter()
            .enumerate()
            .find(|&(i, seen)| i != node && seen.as_deref() == Some(run_id))
            .map(|(i, _)| i);
        if let Some(first) = other {
            let _ = self.clash.set((first, node));
            let label = self.labels.get(first).cloned().unwrap_or_default();
            return Learned::Refused(label);
        }
        let Some(slot) = run_ids.get_mut(node) else {
            return Learned::Same;
        };
        let before = slot.replace(run_id.into());
        match before {
            Some(before) if *before != *run_id => Learned::Restarted,
            _ => Learned::Same,
        }
    }
}

/// A node's identity on its current connection.
#[derive(Debug, Default)]
pub(super) struct Identity {
    state: AtomicU8,
    /// Its manager's table, and its place there; unset (a node of no
    /// manager), nothing is compared.
    servers: OnceLock<(Arc<Servers>, usize)>,
    /// The other node, once refused.
    refused_for: OnceLock<Arc<str>>,
}

impl Identity {
    /// A cluster node's: its members are not compared by `run_id`.
    pub(super) fn unchecked() -> Self {
        Self {
            state: AtomicU8::new(UNCHECKED),
            ..Self::default()
        }
    }

    /// Whether there is nothing left to learn on this connection.
    pub(super) fn settled(&self) -> bool {
        self.state.load(Ordering::Acquire) != UNKNOWN
    }

    /// The error for a request to a refused node; `None` otherwise.
    pub(super) fn refusal(&self) -> Option<NodeError> {
        if self.state.load(Ordering::Acquire) != REFUSED {
            return None;
        }
        Some(NodeError::SameServer {
            other: self
                .refused_for
                .get()
                .map_or_else(String::new, ToString::to_string),
        })
    }

    /// The connection dropped: the next one may reach another server.
    pub(super) fn forget(&self) {
        let _ = self
            .state
            .compare_exchange(KNOWN, UNKNOWN, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Gives every node of `nodes` its place in one table of servers, and
/// returns the table.
pub(crate) fn watch(nodes: &Arc<[Node]>) -> Arc<Servers> {
    let servers = Arc::new(Servers {
        labels: nodes.iter().map(|n| n.label().clone()).collect(),
        run_ids: Mutex::new(nodes.iter().map(|_| None).collect()),
        clash: OnceLock::new(),
    });
    for (i, node) in nodes.iter().enumerate() {
        // Set once, when the manager is built.
        let _ = node.identity.servers.set((servers.clone(), i));
    }
    servers
}

impl Node {
    /// Records what `INFO server` answered on the current connection (an
    /// error: the user may not run it) and what it means for the node.
    pub(super) fn identified(&self, info: &Value) -> Learned {
        let identity = &self.identity;
        let run_id = match info {
            Value::ServerError(error) => {
                tracing::warn!(
                    node = %self.label,
                    error = %error.details().unwrap_or(error.code()),
                    "INFO refused: cannot check that no other node reaches this server (grant the lock user +info)"
                );
                None
            }
            reply => run_id(reply),
        };
        let (Some(run_id), Some((servers, i))) = (run_id, identity.servers.get()) else {
            let _ = identity.state.compare_exchange(
                UNKNOWN,
                UNCHECKED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            return Learned::Same;
        };
        let learned = servers.record(*i, &run_id);
        match &learned {
            Learned::Refused(other) => {
                let _ = identity.refused_for.set(other.clone());
                identity.state.store(REFUSED, Ordering::Release);
                tracing::error!(
                    node = %self.label,
                    other = %other,
                    "two nodes reach one server (same run_id): this one's answers do not count"
                );
            }
            _ => {
                let _ = identity.state.compare_exchange(
                    UNKNOWN,
                    KNOWN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
        }
        learned
    }
}

/// The `run_id` of an `INFO server` reply.
fn run_id(reply: &Value) -> Option<String> {
    let text = match reply {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    text.lines()
        .find_map(|line| line.trim().strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: &str) -> Value {
        Value::BulkString(
            format!("# Server\r\nredis_version:7.2.6\r\nrun_id:{run_id}\r\ntcp_port:6379\r\n")
                .into_bytes(),
        )
    }

    #[test]
    fn the_second_node_to_reach_a_server_is_refused_and_the_manager_told() {
        let nodes: Arc<[Node]> = crate::node::testing::nodes(3).into();
        let servers = watch(&nodes);
        assert_eq!(nodes[0].identified(&info("a")), Learned::Same);
        assert_eq!(nodes[2].identified(&info("b")), Learned::Same);
        assert!(servers.clash().is_none());
        assert!(nodes.iter().all(|n| n.identity.refusal().is_none()));
        let first = nodes[0].label().clone();
        assert_eq!(nodes[1].identified(&info("a")), Learned::Refused(first));
        assert!(matches!(
            nodes[1].identity.refusal(),
            Some(NodeError::SameServer { other }) if other == "127.0.0.1:1000"
        ));
        assert_eq!(
            servers.clash(),
            Some(ConfigError::SameServer {
                first: "127.0.0.1:1000".into(),
                second: "127.0.0.1:1001".into(),
                why: "same run_id",
            })
        );
        // Kept after a reconnection: a configuration that named one server
        // twice is wrong however the next connection turns out.
        nodes[1].identity.forget();
        assert!(nodes[1].identity.refusal().is_some());
        assert!(nodes[0].identity.refusal().is_none());
    }

    #[test]
    fn a_new_run_id_on_a_new_connection_is_a_restart() {
        let nodes: Arc<[Node]> = crate::node::testing::nodes(2).into();
        let _servers = watch(&nodes);
        assert_eq!(nodes[0].identified(&info("a")), Learned::Same);
        assert!(nodes[0].identity.settled());
        nodes[0].identity.forget();
        assert!(!nodes[0].identity.settled());
        assert_eq!(nodes[0].identified(&info("a")), Learned::Same);
        nodes[0].identity.forget();
        assert_eq!(nodes[0].identified(&info("a2")), Learned::Restarted);
        // The old run_id is free: another node may reach it now.
        assert_eq!(nodes[1].identified(&info("a")), Learned::Same);
    }

    #[test]
    fn a_user_denied_info_is_unchecked_not_refused() {
        let nodes: Arc<[Node]> = crate::node::testing::nodes(2).into();
        let servers = watch(&nodes);
        let denied = redis::parse_redis_value(
            b"-NOPERM User locker has no permissions to run the 'info' command\r\n",
        )
        .expect("an error reply");
        assert!(matches!(denied, Value::ServerError(_)));
        for node in nodes.iter() {
            assert_eq!(node.identified(&denied), Learned::Same);
            assert!(node.identity.settled());
            assert!(node.identity.refusal().is_none());
        }
        assert!(servers.clash().is_none());
        assert_eq!(run_id(&Value::Nil), None);
    }
}
