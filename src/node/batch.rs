//! The `batch.lua` encoding: many one-key holdings' acquires, releases
//! and extensions on one node in one script call, one status per entry;
//! the group commit's batches (`group/`) and auto-extension's batches of
//! plain locks (`holding.rs`) both go out this way.

use std::sync::LazyLock;

use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::node::{Deadline, Node, unexpected};
use crate::request::{Ttl, channel};
use crate::scripts::{Lua, Replicas};

/// Plain locks: many acquires, releases and extensions of one node in one
/// call (group commit, see `group/`).
pub(crate) static BATCH: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_batch",
        include_str!("batch.lua"),
        Replicas::Wait,
    )
});

/// One entry of a `batch.lua` call: what it asks, of which key, with
/// which token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) op: SingleOp<'a>,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
}

/// What one entry of a batch asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SingleOp<'a> {
    /// `SET key token NX PX ttl`: 1 granted, 0 refused.
    Acquire { ttl: Ttl },
    /// Token-checked delete, announced with this release id on the key's
    /// channel when given: 1 deleted, 0 not ours.
    Release { announce: Option<&'a str> },
    /// Token-checked extension (or restore): 1 extended, 2 restored, 0
    /// refused.
    Extend { ttl: Ttl },
}

impl SingleOp<'_> {
    /// Its op in `batch.lua`.
    fn code(&self) -> &'static str {
        match self {
            Self::Acquire { .. } => "a",
            Self::Release { .. } => "r",
            Self::Extend { .. } => "e",
        }
    }
}

impl Node {
    /// One `batch.lua` call for `group` of `requests` (on a cluster, all
    /// in one hash slot): the one encoding of plain locks' requests in one
    /// call, for group commits and for auto-extension batches alike.
    pub(crate) async fn batch_call(
        &self,
        requests: &[Entry<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        // Written straight into the command: keys, then four args each.
        let fill = |cmd: &mut Cmd| {
            cmd.arg(group.len());
            for &i in group {
                cmd.arg(requests[i].key);
            }
            for &i in group {
                let request = &requests[i];
                cmd.arg(request.op.code()).arg(request.token);
                match request.op {
                    SingleOp::Acquire { ttl } | SingleOp::Extend { ttl } => {
                        cmd.arg(ttl.ms()).arg("");
                    }
                    SingleOp::Release { announce: None } => {
                        cmd.arg("").arg("");
                    }
                    SingleOp::Release { announce: Some(id) } => {
                        cmd.arg(id).arg(channel(request.key));
                    }
                }
            }
        };
        let tokens: Vec<&str> = group.iter().map(|&i| requests[i].token).collect();
        // A key, a token, a ttl or release id, and a channel per entry.
        let bytes: usize = group
            .iter()
            .map(|&i| 2 * requests[i].key.len() + requests[i].token.len() + 32)
            .sum();
        let size = (1 + 5 * group.len(), bytes + 4);
        match self
            .run_script(&BATCH, fill, size, &tokens, deadline)
            .await?
        {
            Value::Array(items) if items.len() == group.len() => Ok(items
                .into_iter()
                .zip(group)
                .map(|(item, &i)| match item {
                    Value::Int(status @ 0..=2) => Ok(status as u8),
                    Value::ServerError(error) => {
                        Err(self.redact(NodeError::Redis(error.into()), &[requests[i].token]))
                    }
                    other => Err(unexpected(&other)),
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }
}
