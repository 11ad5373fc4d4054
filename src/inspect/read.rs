//! One node's read: the reads each primitive describes
//! ([`Reads`](crate::contract::Reads), listed once in the list of primitives),
//! sent together, each decoding into the node's [`Stored`].

use std::sync::Arc;

use redis::{Cmd, Value};

use crate::contract::Replies;
use crate::contract::stored::Stored;
use crate::error::NodeError;
use crate::keys::Layout;
use crate::node::{Deadline, Node};
use crate::primitives::PRIMITIVES;
use crate::round::Core;

/// Reads what node `node` keeps under `layout`'s keys: every primitive's
/// first reads at once, then at once the reads that depend on them (a
/// semaphore's permits, once their count is known; the type of a lock key
/// that is not a string).
pub(super) async fn read(
    core: Arc<Core>,
    layout: Arc<Layout>,
    node: usize,
    deadline: Deadline,
) -> Result<Stored, NodeError> {
    let target = core.node(node)?;
    let first: Vec<Vec<Cmd>> = PRIMITIVES.iter().map(|p| p.reads.reads(&layout)).collect();
    let mut stored = Stored::default();
    let mut more = Vec::with_capacity(PRIMITIVES.len());
    for (primitive, replies) in PRIMITIVES.iter().zip(send(target, &first, deadline).await) {
        more.push(primitive.reads.decode(&layout, replies, &mut stored)?);
    }
    if more.iter().any(|commands| !commands.is_empty()) {
        let replies = send(target, &more, deadline).await;
        for ((primitive, sent), replies) in PRIMITIVES.iter().zip(&more).zip(replies) {
            if !sent.is_empty() {
                primitive.reads.decode_more(replies, &mut stored)?;
            }
        }
    }
    Ok(stored)
}

/// Sends every primitive's `commands` to `target` at once, and hands each
/// primitive's replies back to it.
async fn send(target: &Node, commands: &[Vec<Cmd>], deadline: Deadline) -> Vec<Replies> {
    let all = commands.iter().flatten();
    let replies: Vec<Result<Value, NodeError>> =
        futures::future::join_all(all.map(|c| target.read(c, deadline))).await;
    let mut replies = replies.into_iter();
    commands
        .iter()
        .map(|sent| Replies::new(replies.by_ref().take(sent.len()).collect()))
        .collect()
}
