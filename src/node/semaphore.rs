//! A semaphore's commands on one node: a permit's acquire, extension and
//! release (`semaphore_*.lua`), and their replies.

use std::sync::Arc;

use redis::Value;

use super::*;
use crate::error::NodeError;
use crate::request::{Permits, Shape, channel};
use crate::scripts;

/// A node's answer to a semaphore permit's acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PermitReply {
    /// The slot was free and is now ours.
    Granted,
    /// The slot is taken; these slots are free on this node.
    Taken(Vec<u32>),
    /// The semaphore is held on this node with another permit count (as
    /// its limit key reads).
    OtherCount(String),
}

impl Node {
    /// Extends the semaphore permits `group` of `locks` in one call (see
    /// `semaphore_extend.lua`): one answer per permit, in `group`'s order.
    pub(super) async fn extend_permits(
        &self,
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let mut keys: Vec<&str> = Vec::with_capacity(2 * group.len());
        let mut ttls: Vec<String> = Vec::with_capacity(group.len());
        for &i in group {
            let lock = &locks[i];
            let Shape::Permit(permits) = lock.shape else {
                return Err(NodeError::UnexpectedReply(
                    "a lock among permits".to_owned(),
                ));
            };
            keys.extend(lock.keys.first().map(|k| &**k));
            keys.push(&permits.limit_key);
            ttls.push(lock.ttl_ms.to_string());
        }
        let mut args: Vec<&str> = Vec::with_capacity(3 * group.len());
        for (&i, ttl) in group.iter().zip(&ttls) {
            let lock = &locks[i];
            let count = match lock.shape {
                Shape::Permit(permits) => &*permits.count,
                _ => "",
            };
            args.extend([lock.token, ttl.as_str(), count]);
        }
        self.extend_script(
            &scripts::SEMAPHORE_EXTEND,
            &keys,
            &args,
            locks,
            group,
            deadline,
        )
        .await
    }

    /// A semaphore's acquire of permit `slot` (see
    /// `semaphore_acquire.lua`).
    pub(crate) async fn acquire_permit(
        &self,
        permits: &Permits,
        slot: u32,
        token: &str,
        ttl_ms: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<PermitReply, NodeError> {
        let deadline: Deadline = deadline.into();
        let mut keys: Vec<&str> = Vec::with_capacity(1 + permits.slots.len());
        keys.push(&permits.limit_key);
        keys.extend(permits.slots.iter().map(|k| &**k));
        let (slot_arg, ttl) = (slot.to_string(), ttl_ms.to_string());
        let args = [slot_arg.as_str(), token, ttl.as_str(), &permits.count];
        // Sent again if the connection dropped (as every script): the
        // script finds a grant that had landed and grants it again, so a
        // node never says "no" to a token it holds.
        let reply = self
            .script(
                &scripts::SEMAPHORE_ACQUIRE,
                &keys,
                &args,
                &[token],
                deadline,
            )
            .await?;
        let Value::Array(items) = &reply else {
            return Err(unexpected(&reply));
        };
        match items.as_slice() {
            [Value::Int(1)] => Ok(PermitReply::Granted),
            [Value::Int(0), free @ ..] => free
                .iter()
                .map(|slot| match slot {
                    Value::Int(i) => u32::try_from(*i).map_err(|_| unexpected(slot)),
                    other => Err(unexpected(other)),
                })
                .collect::<Result<Vec<u32>, _>>()
                .map(PermitReply::Taken),
            [Value::Int(-1), count] => match count {
                Value::BulkString(bytes) => Ok(PermitReply::OtherCount(
                    String::from_utf8_lossy(bytes).into_owned(),
                )),
                Value::SimpleString(text) => Ok(PermitReply::OtherCount(text.clone())),
                other => Err(unexpected(other)),
            },
            _ => Err(unexpected(&reply)),
        }
    }

    /// Token-checked release of a semaphore permit (see
    /// `semaphore_release.lua`).
    pub(super) async fn release_permit(
        &self,
        keys: &[Arc<str>],
        permits: &Permits,
        token: &str,
        announce: Option<&str>,
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        let Some(slot) = keys.first() else {
            return Ok(false);
        };
        let mut script_keys: Vec<&str> = Vec::with_capacity(2 + permits.slots.len());
        script_keys.extend([&**slot, &*permits.limit_key]);
        script_keys.extend(permits.slots.iter().map(|k| &**k));
        let channel = channel(slot);
        let mut args = vec![token, &*permits.count];
        if let Some(release) = announce {
            args.extend([release, channel.as_str()]);
        }
        match self
            .script(
                &scripts::SEMAPHORE_RELEASE,
                &script_keys,
                &args,
                &[token],
                deadline,
            )
            .await?
        {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected(&other)),
        }
    }
}
