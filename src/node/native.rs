//! The token-checked steps of a holding whose keys hold just its token (a
//! lock's), with the server's own compare-and-set commands where it has
//! them (see [`caps`](super::caps)), instead of a script.

use redis::{Cmd, Value};

use super::Deadline;
use super::{NativeDelete, Node, Resend, unexpected};
use crate::error::NodeError;
use crate::request::{Ttl, channel};

/// A holding's steps with the server's own compare-and-set commands, where it
/// has them (see [`Capabilities`](crate::node::Capabilities)): no script,
/// and the same value (the token) under the same key as the scripts write,
/// so every path excludes every other. Each command is atomic on its own;
/// none ever writes over a value that is not the token:
///
/// - release: `DELIFEQ key token` (or `DELEX key IFEQ token`) per key, and
///   with an announced release `PUBLISH channel id` behind each;
/// - extension: `SET key token NX PX ttl` then `SET key token IFEQ token PX
///   ttl`, pipelined: the first restores an absent key, the second extends
///   the token's key; a key holding anything else is written by neither
///   (a refusal). Another client's command between the two can only make
///   the second answer nil, which is a refusal, never a write;
/// - acquire in a batch: `SET key token NX PX ttl GET`, which is the plain
///   acquire made idempotent for a resend (the key already holding the
///   token is this grant).
impl Node {
    /// Token-checked delete of `keys` with `delete`, each announced with
    /// `announce` on its channel: how many keys were deleted.
    pub(crate) async fn release_native<K: AsRef<str>>(
        &self,
        delete: NativeDelete,
        keys: &[K],
        token: &str,
        announce: Option<&str>,
        deadline: Deadline,
    ) -> Result<usize, NodeError> {
        let inline = self.inline_announce(announce);
        if let ([key], None) = (keys, inline) {
            // One command: no pipeline to build or to answer.
            let deleted = self
                .delete_one(delete, key.as_ref(), token, deadline)
                .await?;
            if deleted && let Some(id) = announce {
                // Rare (wake-up on a cluster): boxed, so that a lone
                // release's future does not carry its size.
                Box::pin(self.announce(key.as_ref(), id, deadline)).await;
            }
            return Ok(usize::from(deleted));
        }
        // Several keys, or the announcement in the same pipeline: boxed,
        // so that a lone release's future does not carry the pipeline's
        // size as well as the lone command's.
        Box::pin(async move {
            let mut commands = redis::Pipeline::with_capacity(keys.len() * 2);
            for key in keys {
                push_release(&mut commands, delete, key.as_ref(), token, inline);
            }
            let replies = self
                .pipeline(commands, false, &[token], Resend::IfDropped, deadline)
                .await?;
            let step = if inline.is_some() { 2 } else { 1 };
            let mut deleted = 0;
            for (reply, key) in replies.iter().step_by(step).zip(keys) {
                if self.native_status(reply, token)? == 1 {
                    deleted += 1;
                    if inline.is_none()
                        && let Some(id) = announce
                    {
                        self.announce(key.as_ref(), id, deadline).await;
                    }
                }
            }
            Ok(deleted)
        })
        .await
    }

    /// One key's token-checked delete with `delete`, one command: whether
    /// it deleted the token.
    pub(crate) async fn delete_one(
        &self,
        delete: NativeDelete,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        let mut cmd = self.buffers.take(4, NativeDelete::bytes(key, token));
        delete.write(&mut cmd, key, token);
        let reply = match self
            .command(&cmd, &[token], Resend::IfDropped, deadline)
            .await
        {
            // A key of another type is simply not ours.
            Err(NodeError::Redis(e)) if e.code() == Some("WRONGTYPE") => Value::Int(0),
            reply => reply?,
        };
        Ok(self.native_status(&reply, token)? == 1)
    }

    /// `announce`, if it can go in the release's own pipeline: on a
    /// standalone node. A cluster routes a pipeline by its keys' slot, and
    /// a channel is not a key of that slot: there the announcement follows
    /// the release ([`announce`](Self::announce)).
    pub(crate) fn inline_announce<'a>(&self, announce: Option<&'a str>) -> Option<&'a str> {
        announce.filter(|_| !self.is_cluster())
    }

    /// `PUBLISH` of release `id` on `key`'s channel, best effort (an ACL
    /// without `PUBLISH` must not fail a release that happened; waiters
    /// then poll). A cluster forwards it to every member.
    pub(crate) async fn announce(&self, key: &str, id: &str, deadline: Deadline) {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(channel(key)).arg(id);
        if let Err(error) = self.command(&publish, &[], Resend::Never, deadline).await {
            tracing::debug!(node = %self.label, error = %error, "release not announced");
        }
    }

    /// What a native extension's two replies say: 2 restored (the `NX`
    /// set it), 1 extended (the `IFEQ` set it), 0 refused.
    pub(crate) fn extended(&self, replies: &[Value], token: &str) -> Result<u8, NodeError> {
        match replies {
            [restore, extend] => {
                if self.native_status(restore, token)? == 1 {
                    Ok(2)
                } else {
                    self.native_status(extend, token)
                }
            }
            other => Err(unexpected(&Value::Array(other.to_vec()))),
        }
    }

    /// One native command's answer as a status: 1 for `OK` or `1`, 0 for
    /// nil, `0`, or a key of another type (simply not ours, left
    /// untouched); any other error the server sent is the error.
    pub(crate) fn native_status(&self, reply: &Value, token: &str) -> Result<u8, NodeError> {
        match reply {
            Value::Okay | Value::Int(1) => Ok(1),
            Value::SimpleString(s) if s == "OK" => Ok(1),
            Value::Nil | Value::Int(0) => Ok(0),
            Value::ServerError(error) if error.code() == "WRONGTYPE" => Ok(0),
            Value::ServerError(error) => Err(self.redact(
                NodeError::Redis(redis::RedisError::from(error.clone())),
                &[token],
            )),
            other => Err(unexpected(other)),
        }
    }
}

/// A native release of `key` (see the `impl` above).
pub(crate) fn push_release(
    commands: &mut redis::Pipeline,
    delete: NativeDelete,
    key: &str,
    token: &str,
    announce: Option<&str>,
) {
    commands.add_command(delete.command(key, token));
    if let Some(id) = announce {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(channel(key)).arg(id);
        commands.add_command(publish);
    }
}

/// A native extension of `key` (see the `impl` above): restore, then extend.
pub(crate) fn push_extend(commands: &mut redis::Pipeline, key: &str, token: &str, ttl: Ttl) {
    let size = key.len() + 2 * token.len() + 32;
    let mut restore = Cmd::with_capacity(6, size);
    restore
        .arg("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl.ms());
    let mut extend = Cmd::with_capacity(7, size);
    extend
        .arg("SET")
        .arg(key)
        .arg(token)
        .arg("IFEQ")
        .arg(token)
        .arg("PX")
        .arg(ttl.ms());
    commands.add_command(restore).add_command(extend);
}
