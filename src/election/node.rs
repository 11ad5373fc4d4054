//! Election commands: the value beside a lock key, and the atomic read of
//! both, with their scripts (`elect_proclaim.lua`, `elect_leader.lua`
//! beside this file). (Acquiring and keeping the lock are the fenced
//! lock's.)

use std::sync::LazyLock;

use redis::Value;

use crate::error::NodeError;
use crate::node::{Deadline, Node, unexpected};
use crate::request::Ttl;
use crate::scripts::{Lua, Replicas};

/// Election: the leader's value beside its lock key, token-checked.
pub(crate) static ELECT_PROCLAIM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_elect_proclaim",
        include_str!("elect_proclaim.lua"),
        Replicas::Wait,
    )
});

/// Election: the lock key's holder and its value, read atomically.
pub(crate) static ELECT_LEADER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_elect_leader",
        include_str!("elect_leader.lua"),
        Replicas::Wait,
    )
});

/// What one node says about an election: who holds its lock key, and what
/// that holder proclaimed there (see `elect_leader.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The lock key is absent: no leader on this node.
    Nobody,
    /// The lock key holds `token`, but this node has no value of it.
    Holder { token: String },
    /// The lock key holds `token`, which proclaimed `value` as revision
    /// `rev` of its term `term`.
    Proclaimed {
        token: String,
        term: u64,
        rev: u64,
        value: String,
    },
}

impl Node {
    /// Writes revision `rev` of the leader's `value` for `term` into
    /// `leader_key`, if `key` holds `token`: true if it did (or holds a
    /// newer revision), false if the node does not count `token` as leader.
    /// Either way where it holds the token, `leader_key` then expires
    /// `ttl` later. With `announce` (a channel), a write is announced
    /// there.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn proclaim(
        &self,
        key: &str,
        leader_key: &str,
        token: &str,
        term: u64,
        rev: u64,
        value: &str,
        ttl: Ttl,
        announce: Option<&str>,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let (term, rev, ttl) = (term.to_string(), rev.to_string(), ttl.ms().to_string());
        let mut args = vec![token, &term, &rev, value, &ttl];
        args.extend(announce);
        self.flag_script(
            &ELECT_PROCLAIM,
            &[key, leader_key],
            &args,
            &[token],
            deadline,
        )
        .await
    }

    /// Who holds `key` on this node, with its value from `leader_key`.
    pub(crate) async fn read_leader(
        &self,
        key: &str,
        leader_key: &str,
        deadline: impl Into<Deadline>,
    ) -> Result<Seen, NodeError> {
        let deadline: Deadline = deadline.into();
        let reply = self
            .script(&ELECT_LEADER, &[key, leader_key], &[], &[], deadline)
            .await?;
        let text = |value: &Value| match value {
            Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let number = |value: &Value| text(value).and_then(|t| t.parse::<u64>().ok());
        match &reply {
            Value::Array(items) => match &items[..] {
                [] => Ok(Seen::Nobody),
                [token] => Ok(Seen::Holder {
                    token: text(token).ok_or_else(|| unexpected(&reply))?,
                }),
                [token, term, rev, value] => {
                    match (text(token), number(term), number(rev), text(value)) {
                        (Some(token), Some(term), Some(rev), Some(value)) => Ok(Seen::Proclaimed {
                            token,
                            term,
                            rev,
                            value,
                        }),
                        _ => Err(unexpected(&reply)),
                    }
                }
                _ => Err(unexpected(&reply)),
            },
            other => Err(unexpected(other)),
        }
    }
}
