//! A semaphore on one node: its scripts (`acquire.lua`, `extend.lua`,
//! `release.lua` beside this file), a permit's acquire and its reply, and
//! the permit's [`Shape`] — how a node extends and releases it.

use std::sync::{Arc, LazyLock};

use redis::{Cmd, Value};

use crate::contract::{Extension, Release, Shape, TokenAt};
use crate::error::NodeError;
use crate::node::{Deadline, Node, Prepared, Step, unexpected};
use crate::request::{Keys, Ttl, channel};
use crate::scripts::{Lua, Replicas};
use crate::token::Token;

/// Take one permit slot if free (and the permit count agrees), else report
/// the free slots.
pub(crate) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_semaphore_acquire",
        include_str!("acquire.lua"),
        Replicas::Wait,
    )
});

/// Extend (or restore) one permit or a batch, token-checked.
pub(crate) static EXTEND: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_semaphore_extend",
        include_str!("extend.lua"),
        Replicas::Wait,
    )
});

/// Token-checked release of a permit, and of the limit key with the
/// node's last permit.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_semaphore_release",
        include_str!("release.lua"),
        Replicas::DontWait,
    )
});

/// A semaphore on the nodes: its keys and permit count. The shape of a
/// permit: a lock on one slot key, beside the semaphore's limit key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Permits {
    /// Holds the permit count on a node while a permit is held there.
    pub(crate) limit_key: Arc<str>,
    /// One key per permit slot, slot `i` at `i`.
    pub(crate) slots: Keys,
    /// The permit count, as the limit key holds it.
    pub(crate) count: Arc<str>,
}

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

/// A semaphore's acquire of permit `slot` on `node` (see `acquire.lua`),
/// alone.
pub(crate) async fn acquire_permit(
    node: &Node,
    permits: &Permits,
    slot: u32,
    token: &str,
    ttl: Ttl,
    deadline: impl Into<Deadline>,
) -> Result<PermitReply, NodeError> {
    let deadline: Deadline = deadline.into();
    let fill = |cmd: &mut Cmd| permit_call(cmd, permits, slot, token, ttl);
    // Sent again if the connection dropped (as every script): the
    // script finds a grant that had landed and grants it again, so a
    // node never says "no" to a token it holds.
    let reply = node
        .run_script(
            &ACQUIRE,
            fill,
            permit_size(permits, token),
            &[token],
            deadline,
        )
        .await?;
    permit_reply(&reply)
}

/// The acquire's call of permit `slot` prepared for the node's lane (see
/// `node::Lanes::call_or`): the same call as [`acquire_permit`]'s.
pub(crate) fn prepare_permit(permits: &Permits, slot: u32, token: &Token, ttl: Ttl) -> Prepared {
    let size = permit_size(permits, token.as_str());
    Prepared::new(&ACQUIRE, Step::Acquire, token, size, |cmd| {
        permit_call(cmd, permits, slot, token.as_str(), ttl);
    })
}

/// How many arguments a permit's acquire writes, and about how many bytes.
fn permit_size(permits: &Permits, token: &str) -> (usize, usize) {
    let keys: usize = permits.slots.iter().map(|k| k.len()).sum();
    (
        6 + permits.slots.len(),
        keys + permits.limit_key.len() + token.len() + 48,
    )
}

/// The acquire's `numkeys`, keys (the limit key, then every slot's) and
/// arguments (the slot, the token, the ttl and the count).
fn permit_call(cmd: &mut Cmd, permits: &Permits, slot: u32, token: &str, ttl: Ttl) {
    cmd.arg(1 + permits.slots.len()).arg(&*permits.limit_key);
    for key in permits.slots.iter() {
        cmd.arg(&**key);
    }
    cmd.arg(slot).arg(token).arg(ttl.ms()).arg(&*permits.count);
}

/// What the acquire's reply says.
pub(crate) fn permit_reply(reply: &Value) -> Result<PermitReply, NodeError> {
    let Value::Array(items) = reply else {
        return Err(unexpected(reply));
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
        _ => Err(unexpected(reply)),
    }
}

/// A permit: a holding whose one key is its slot's.
impl Shape for Permits {
    /// The slot's key holds the permit's token, as a lock's key does.
    fn token_at(&self) -> Option<TokenAt> {
        Some(TokenAt::Value)
    }

    /// `extend.lua`.
    fn extend_script(&self) -> &'static Lua {
        &EXTEND
    }

    /// The slot's key and the limit key.
    fn extend_keys<'a>(&'a self, lock: &Extension<'a>, keys: &mut Vec<&'a str>) {
        keys.extend(lock.keys.first().map(|k| &**k));
        keys.push(&self.limit_key);
    }

    /// Token, ttl, and the permit count.
    fn extend_args(&self, lock: &Extension<'_>, cmd: &mut Cmd) {
        cmd.arg(lock.token).arg(lock.ttl.ms()).arg(&*self.count);
    }

    /// `release.lua`.
    fn release_script(&self) -> &'static Lua {
        &RELEASE
    }

    /// The slot's key, the limit key and every slot's key; the token, the
    /// count, and with an announced release its id and the slot's channel.
    fn release_call(&self, release: &Release<'_>, cmd: &mut Cmd) {
        // A permit holds its slot's key: always one.
        let slot = release.keys.first().map_or("", |k| &**k);
        cmd.arg(2 + self.slots.len())
            .arg(slot)
            .arg(&*self.limit_key);
        for key in self.slots.iter() {
            cmd.arg(&**key);
        }
        cmd.arg(release.token).arg(&*self.count);
        if let Some(id) = release.announce {
            cmd.arg(id).arg(channel(slot));
        }
    }

    /// 1: released.
    fn released(&self, _release: &Release<'_>, reply: &Value) -> Result<bool, NodeError> {
        match reply {
            Value::Int(n) => Ok(*n == 1),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::layout;

    fn permits() -> Permits {
        Permits {
            limit_key: "s:permits".into(),
            slots: Arc::from([Arc::from("s:permit:0"), Arc::from("s:permit:1")]),
            count: "2".into(),
        }
    }

    /// As `extend.lua` and `release.lua` beside this file read them.
    #[test]
    fn a_permits_extension_and_release_are_laid_out_as_its_scripts_read_them() {
        let permits = permits();
        let slot: Vec<Arc<str>> = vec!["s:permit:1".into()];
        let extension = Extension {
            keys: &slot,
            token: "t",
            ttl: Ttl::from_millis(1500),
            shape: &permits,
        };
        assert_eq!(
            layout::extension(&[extension, extension]),
            [
                "4",
                "s:permit:1",
                "s:permits",
                "s:permit:1",
                "s:permits",
                "t",
                "1500",
                "2",
                "t",
                "1500",
                "2"
            ]
        );
        let release = Release {
            keys: &slot,
            token: "t",
            announce: Some("id"),
        };
        assert_eq!(
            layout::release(&permits, &release),
            [
                "4",
                "s:permit:1",
                "s:permits",
                "s:permit:0",
                "s:permit:1",
                "t",
                "2",
                "id",
                "s:permit:1:released"
            ]
        );
        assert!(!permits.group_commits());
    }
}
