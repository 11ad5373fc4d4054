//! What every held primitive needs of a node: the token-checked release
//! and the extension (which restores the keys a node lost). What differs
//! between primitives — which script, which keys and arguments, what the
//! reply means — is the primitive's [`Shape`] (in the contract); this file
//! runs it, with nothing per primitive.

use std::collections::HashMap;
use std::sync::Arc;

use redis::cluster_routing::Slot;
use redis::{Cmd, Value};

use crate::contract::{Extension, Release, Shape};
use crate::error::NodeError;
use crate::node::batch::{Entry, SingleOp};
use crate::node::caps::Capabilities;
use crate::node::native::push_extend;
use crate::node::{Deadline, NativeDelete, Node, Resend, unexpected};
use crate::quorum::{Answer, Vote};

/// What a node did with one lock's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtendReply {
    /// Every key held the token and got the new ttl.
    Extended,
    /// Some keys were absent and were set again with the token (the rest
    /// held it and got the new ttl): the node holds the lock again.
    Restored,
    /// Some key holds another value (another owner's token, or not a
    /// string); nothing was touched.
    Refused,
}

impl ExtendReply {
    /// From its status as `batch.lua` (and the native pipeline) answers
    /// it: 1 extended, 2 restored, anything else refused.
    pub(crate) fn of(status: u8) -> Self {
        match status {
            1 => Self::Extended,
            2 => Self::Restored,
            _ => Self::Refused,
        }
    }

    /// Its status, as `batch.lua` answers it.
    pub(crate) fn status(self) -> u8 {
        match self {
            Self::Refused => 0,
            Self::Extended => 1,
            Self::Restored => 2,
        }
    }
}

/// Extended or restored (yes), or another value holds a key (no).
impl Answer for ExtendReply {
    fn vote(&self) -> Vote {
        match self {
            Self::Extended | Self::Restored => Vote::Yes,
            Self::Refused => Vote::No,
        }
    }
}

/// Which call an extension goes in: its shape's script (by its place in
/// the script list).
fn script_of(lock: &Extension<'_>) -> u32 {
    lock.shape.extend_script().index
}

/// The call of the extensions that go natively (no script has this index).
const NATIVE: u32 = u32::MAX;

/// The call of plain locks' extensions on a node without native commands:
/// `batch.lua` (no script list index either).
const BATCHED: u32 = u32::MAX - 1;

/// Whether an extension can go natively on a node that has `SET … IFEQ`:
/// one key holding just the token, nothing beside it to touch.
pub(crate) fn is_native(lock: &Extension<'_>) -> bool {
    lock.shape.token_keys() && lock.shape.keys_only() && lock.keys.len() == 1
}

/// The native delete a node with `caps` releases a holding of `shape`
/// with, if any: where its keys hold just the token and the server has a
/// compare-and-delete.
pub(crate) fn native_delete(caps: Option<Capabilities>, shape: &dyn Shape) -> Option<NativeDelete> {
    caps.filter(|_| shape.token_keys())
        .and_then(|caps| caps.delete())
}

impl Node {
    /// Token-checked delete of a holding's keys, as its `shape` says: true
    /// if this node held the token and deleted it. With `announce` (an id
    /// of this release), each deleted key's release is announced on its
    /// channel ([`channel`](crate::request::channel)).
    pub(crate) async fn release(
        &self,
        keys: &[Arc<str>],
        shape: &dyn Shape,
        token: &str,
        announce: Option<&str>,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        self.with_capabilities(deadline, async |caps| {
            if let Some(delete) = native_delete(caps, shape) {
                let deleted = self
                    .release_native(delete, keys, token, announce, deadline)
                    .await?;
                return Ok(deleted == keys.len());
            }
            let release = Release {
                keys,
                token,
                announce,
            };
            let fill = |cmd: &mut Cmd| shape.release_call(&release, cmd);
            // Keys, token, release id and a channel per key: about.
            let bytes: usize = keys.iter().map(|k| 2 * k.len()).sum::<usize>() + token.len() + 48;
            let size = (4 + 2 * keys.len(), bytes);
            let reply = self
                .run_script(shape.release_script(), fill, size, &[token], deadline)
                .await;
            match reply {
                // Refused as a script before the node's commands were known.
                Err(error) if error.is_incompatible() => {
                    match native_delete(self.capabilities(), shape) {
                        Some(delete) => {
                            let deleted = self
                                .release_native(delete, keys, token, announce, deadline)
                                .await?;
                            Ok(deleted == keys.len())
                        }
                        None => Err(error),
                    }
                }
                reply => shape.released(&release, &reply?),
            }
        })
        .await
    }

    /// Extends one holding on this node (see [`extend_many`](Self::extend_many)).
    pub(crate) async fn extend(
        &self,
        lock: Extension<'_>,
        deadline: impl Into<Deadline>,
    ) -> Result<ExtendReply, NodeError> {
        let answers = self
            .extend_many(std::slice::from_ref(&lock), deadline)
            .await?;
        answers
            .first()
            .copied()
            .ok_or_else(|| unexpected(&Value::Array(Vec::new())))
    }

    /// Extends many locks, each with its own token and ttl: per lock, where
    /// every key holds its token they get the new ttl, where keys are
    /// absent they are set again (and a fenced lock's counter raised to its
    /// fence), and where any key holds another value nothing is touched.
    /// One answer per lock, in order. One call per kind of lock on a
    /// standalone node (plain locks natively or in `batch.lua`, the others
    /// in their shape's extension script); on a cluster, one per hash slot
    /// among them as well (a script may only touch one slot; a lock's own
    /// keys share one), all in parallel.
    pub(crate) async fn extend_many(
        &self,
        locks: &[Extension<'_>],
        deadline: impl Into<Deadline>,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let deadline: Deadline = deadline.into();
        self.with_capabilities(deadline, async |caps| {
            let native = caps.is_some_and(|caps| caps.extend());
            self.extend_each(locks, native, deadline).await
        })
        .await
    }

    /// [`extend_many`](Self::extend_many), natively where `native` and the
    /// lock can.
    async fn extend_each(
        &self,
        locks: &[Extension<'_>],
        native: bool,
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        // One call per extension script (or `batch.lua`, or the native
        // commands), and on a cluster per hash slot as well.
        let call_of = |lock: &Extension<'_>| match (is_native(lock), native) {
            (true, true) => NATIVE,
            (true, false) if lock.shape.group_commits() => BATCHED,
            _ => script_of(lock),
        };
        let first = locks.first().map(call_of);
        let mixed = locks.iter().any(|lock| Some(call_of(lock)) != first);
        let groups: Vec<Vec<usize>> = if self.is_cluster() || mixed {
            let mut groups: HashMap<(u32, Option<Slot>), Vec<usize>> = HashMap::new();
            for (i, lock) in locks.iter().enumerate() {
                let key = lock.keys.first().map_or("", |k| &**k);
                let slot = self.is_cluster().then(|| Slot::for_key(key));
                groups.entry((call_of(lock), slot)).or_default().push(i);
            }
            groups.into_values().collect()
        } else {
            vec![(0..locks.len()).collect()]
        };
        let calls = groups.iter().map(|group| async move {
            let answers = match group.first().and_then(|&i| locks.get(i)).map(call_of) {
                Some(NATIVE) => return self.extend_natively(locks, group, deadline).await,
                Some(BATCHED) => self.extend_batched(locks, group, deadline).await,
                _ => self.extend_group(locks, group, deadline).await,
            };
            match answers {
                // Refused as a script before the node's commands were
                // known (see `capabilities_for_step`): natively, if the
                // server now says it can.
                Err(error)
                    if error.is_incompatible()
                        && self.capabilities().is_some_and(|caps| caps.extend())
                        && group.iter().all(|&i| locks.get(i).is_some_and(is_native)) =>
                {
                    self.extend_natively(locks, group, deadline).await
                }
                answers => answers,
            }
        });
        let mut answers = vec![ExtendReply::Refused; locks.len()];
        for (group, answer) in groups.iter().zip(futures::future::join_all(calls).await) {
            for (&i, extended) in group.iter().zip(answer?) {
                answers[i] = extended;
            }
        }
        Ok(answers)
    }

    /// Extends `group` of `locks` (each one key, unfenced, of a shape that
    /// [group-commits](Shape::group_commits)) in one `batch.lua` call, the
    /// encoding group commits use: measured against the shape's own
    /// extension script carrying the same locks, it costs the server about
    /// 10–15% less per lock. An entry's own error (e.g. `NOPERM` on its
    /// key) fails the call, as it does the extension script.
    async fn extend_batched(
        &self,
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let entries: Vec<Entry<'_>> = locks
            .iter()
            .map(|lock| Entry {
                op: SingleOp::Extend { ttl: lock.ttl },
                key: lock.keys.first().map_or("", |k| &**k),
                token: lock.token,
            })
            .collect();
        self.batch_call(&entries, group, deadline)
            .await?
            .into_iter()
            .map(|status| status.map(ExtendReply::of))
            .collect()
    }

    /// Extends `group` of `locks` (each one key, unfenced, of a shape whose
    /// keys hold just the token) with native commands, in one pipeline.
    async fn extend_natively(
        &self,
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        // Room for replica sync's `WAIT` too.
        let mut commands = redis::Pipeline::with_capacity(2 * group.len() + 1);
        let mut tokens: Vec<&str> = Vec::with_capacity(group.len());
        for &i in group {
            let lock = &locks[i];
            let key = lock.keys.first().map_or("", |k| &**k);
            push_extend(&mut commands, key, lock.token, lock.ttl);
            tokens.push(lock.token);
        }
        let replies = self
            .pipeline(commands, true, &tokens, Resend::IfDropped, deadline)
            .await?;
        group
            .iter()
            .zip(replies.chunks(2))
            .map(|(&i, pair)| self.extended(pair, locks[i].token).map(ExtendReply::of))
            .collect()
    }

    /// Extends `group` of `locks` (one extension script among them, on a
    /// cluster one slot) in one call: one answer per lock, in `group`'s
    /// order.
    async fn extend_group(
        &self,
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let Some(lua) = group
            .first()
            .and_then(|&i| locks.get(i))
            .map(|lock| lock.shape.extend_script())
        else {
            return Ok(Vec::new());
        };
        let mut keys: Vec<&str> = Vec::with_capacity(2 * group.len());
        let mut tokens: Vec<&str> = Vec::with_capacity(group.len());
        for &i in group {
            let lock = &locks[i];
            lock.shape.extend_keys(lock, &mut keys);
            tokens.push(lock.token);
        }
        let fill = |cmd: &mut Cmd| {
            cmd.arg(keys.len()).arg(&keys);
            for &i in group {
                let lock = &locks[i];
                lock.shape.extend_args(lock, cmd);
            }
        };
        // The keys, and per lock a token and a few numbers.
        let bytes: usize = keys.iter().map(|k| k.len()).sum::<usize>()
            + tokens.iter().map(|t| t.len() + 32).sum::<usize>();
        let size = (1 + keys.len() + 4 * group.len(), bytes + 4);
        match self.run_script(lua, fill, size, &tokens, deadline).await? {
            Value::Array(items) if items.len() == group.len() => items
                .iter()
                .map(|item| match item {
                    Value::Int(0) => Ok(ExtendReply::Refused),
                    Value::Int(1) => Ok(ExtendReply::Extended),
                    Value::Int(2) => Ok(ExtendReply::Restored),
                    other => Err(unexpected(other)),
                })
                .collect(),
            other => Err(unexpected(&other)),
        }
    }
}

/// What the node sends for extensions and releases, as text: for the
/// primitives' tests of their [`Shape`]s' layouts against their scripts.
#[cfg(test)]
pub(crate) mod layout {
    use super::*;

    pub(crate) fn texts(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not text>".to_owned(),
            })
            .collect()
    }

    /// One call's `numkeys`, keys and arguments for `locks`, all of one
    /// extension script.
    pub(crate) fn extension(locks: &[Extension<'_>]) -> Vec<String> {
        let mut keys: Vec<&str> = Vec::new();
        for lock in locks {
            lock.shape.extend_keys(lock, &mut keys);
        }
        let mut cmd = Cmd::new();
        cmd.arg(keys.len()).arg(&keys);
        for lock in locks {
            lock.shape.extend_args(lock, &mut cmd);
        }
        texts(&cmd)
    }

    /// The release call's `numkeys`, keys and arguments.
    pub(crate) fn release(shape: &dyn Shape, release: &Release<'_>) -> Vec<String> {
        let mut cmd = Cmd::new();
        shape.release_call(release, &mut cmd);
        texts(&cmd)
    }
}
