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
//!
//! Split in two, so that `Node` can hold its identity without a circle of
//! imports: the state and the table (`state.rs`, which imports nothing of
//! the node), and here, learning it (`impl Node`).
//!
//! [`NodeError::SameServer`]: crate::error::NodeError::SameServer
//! [`ConfigError::SameServer`]: crate::error::ConfigError::SameServer

mod state;

pub(super) use state::Identity;
pub(crate) use state::Servers;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use redis::Value;

use self::state::{KNOWN, Learned, REFUSED, UNCHECKED, UNKNOWN};
use crate::node::Node;

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
    use crate::error::{ConfigError, NodeError};

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

    /// The later node answered first (a loaded machine, a slower first
    /// node): the earlier is refused, and the error still names them in
    /// the configuration's order.
    #[test]
    fn the_error_names_the_nodes_in_their_order_whichever_answered_first() {
        let nodes: Arc<[Node]> = crate::node::testing::nodes(2).into();
        let servers = watch(&nodes);
        assert_eq!(nodes[1].identified(&info("a")), Learned::Same);
        let later = nodes[1].label().clone();
        assert_eq!(nodes[0].identified(&info("a")), Learned::Refused(later));
        assert_eq!(
            servers.clash(),
            Some(ConfigError::SameServer {
                first: "127.0.0.1:1000".into(),
                second: "127.0.0.1:1001".into(),
                why: "same run_id",
            })
        );
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
