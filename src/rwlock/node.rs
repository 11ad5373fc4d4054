//! A reader-writer lock on one node: its scripts (`acquire.lua`,
//! `extend.lua`, `release.lua` beside this file), a hold's acquire, and the
//! hold's [`Shape`] — how a node extends and releases it.

use std::sync::{Arc, LazyLock};

use redis::{Cmd, Value};

use crate::contract::{Extension, Release, Shape, TokenAt};
use crate::error::NodeError;
use crate::node::{Deadline, Node, Prepared, Step, unexpected};
use crate::request::{Ttl, channel};
use crate::scripts::{Lua, Replicas};
use crate::token::Token;

/// Admit a reader or a writer, with writer preference.
pub(crate) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_rw_acquire",
        include_str!("acquire.lua"),
        Replicas::Wait,
    )
});

/// Extend (or restore) holds, token-checked.
pub(crate) static EXTEND: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_rw_extend",
        include_str!("extend.lua"),
        Replicas::Wait,
    )
});

/// Token-checked release of a hold.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_rw_release",
        include_str!("release.lua"),
        Replicas::DontWait,
    )
});

/// A reader-writer lock's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RwKeys {
    /// The writer's token, while a writer holds.
    pub(crate) writer: Arc<str>,
    /// The readers: a sorted set of tokens scored with their expiries.
    pub(crate) readers: Arc<str>,
    /// The mark of a writer waiting for the readers to leave.
    pub(crate) waiting: Arc<str>,
    /// The id a writer's mark holds: one per call, across its attempts.
    /// Empty in a release that must leave the mark (no mark holds an
    /// empty id: `release.lua` finds none to delete).
    pub(crate) waiter: Arc<str>,
}

/// The shape of a reader's hold (its token in the readers set) or of the
/// writer's (its token in the writer key).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RwShape {
    pub(crate) rw: RwKeys,
    /// A reader's hold, else the writer's.
    pub(crate) read: bool,
}

impl RwShape {
    /// The hold's mode, as the scripts take it.
    pub(crate) fn mode(&self) -> &'static str {
        if self.read { "r" } else { "w" }
    }
}

/// A reader-writer lock's acquire on `node` (see `acquire.lua`), alone:
/// whether it admitted the hold `shape` describes (a reader or the
/// writer). A refused writer's mark (its call's id, across its attempts)
/// lives `mark`.
pub(crate) async fn acquire_hold(
    node: &Node,
    shape: &RwShape,
    token: &str,
    ttl: Ttl,
    mark: Ttl,
    deadline: impl Into<Deadline>,
) -> Result<bool, NodeError> {
    let deadline: Deadline = deadline.into();
    let fill = |cmd: &mut Cmd| hold_call(cmd, shape, token, ttl, mark);
    let reply = node
        .run_script(&ACQUIRE, fill, hold_size(shape, token), &[token], deadline)
        .await?;
    hold_reply(&reply)
}

/// The acquire's call prepared for the node's lane (see
/// `node::Lanes::call_or`): the same call as [`acquire_hold`]'s.
pub(crate) fn prepare_hold(shape: &RwShape, token: &Token, ttl: Ttl, mark: Ttl) -> Prepared {
    let size = hold_size(shape, token.as_str());
    Prepared::new(&ACQUIRE, Step::Acquire, token, size, |cmd| {
        hold_call(cmd, shape, token.as_str(), ttl, mark);
    })
}

/// How many arguments a hold's acquire writes, and about how many bytes.
fn hold_size(shape: &RwShape, token: &str) -> (usize, usize) {
    let rw = &shape.rw;
    let bytes = rw.writer.len() + rw.readers.len() + rw.waiting.len() + rw.waiter.len();
    (9, bytes + token.len() + 48)
}

/// The acquire's `numkeys`, keys (writer, readers, waiting) and
/// arguments (mode, token, ttl, the waiter's id, the mark's ttl).
fn hold_call(cmd: &mut Cmd, shape: &RwShape, token: &str, ttl: Ttl, mark: Ttl) {
    let rw = &shape.rw;
    cmd.arg(3)
        .arg(&*rw.writer)
        .arg(&*rw.readers)
        .arg(&*rw.waiting)
        .arg(shape.mode())
        .arg(token)
        .arg(ttl.ms())
        .arg(&*rw.waiter)
        .arg(mark.ms());
}

/// Whether the acquire's reply says admitted (1) or not (0).
pub(crate) fn hold_reply(reply: &Value) -> Result<bool, NodeError> {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected(other)),
    }
}

impl Shape for RwShape {
    /// The writer's key holds its token; a reader's token is a member of
    /// the readers' sorted set (which every other reader's arrival and
    /// departure changes too).
    fn token_at(&self) -> Option<TokenAt> {
        Some(if self.read {
            TokenAt::Member
        } else {
            TokenAt::Value
        })
    }

    /// `extend.lua`.
    fn extend_script(&self) -> &'static Lua {
        &EXTEND
    }

    /// The writer key and the readers key.
    fn extend_keys<'a>(&'a self, _lock: &Extension<'a>, keys: &mut Vec<&'a str>) {
        keys.extend([&*self.rw.writer, &*self.rw.readers]);
    }

    /// Mode, token and ttl.
    fn extend_args(&self, lock: &Extension<'_>, cmd: &mut Cmd) {
        cmd.arg(self.mode()).arg(lock.token).arg(lock.ttl.ms());
    }

    /// `release.lua`.
    fn release_script(&self) -> &'static Lua {
        &RELEASE
    }

    /// The writer, readers and waiting keys; the mode, the token, the
    /// waiter's id, and with an announced release its id and the channel
    /// of the key the hold was in.
    fn release_call(&self, release: &Release<'_>, cmd: &mut Cmd) {
        let rw = &self.rw;
        cmd.arg(3)
            .arg(&*rw.writer)
            .arg(&*rw.readers)
            .arg(&*rw.waiting);
        cmd.arg(self.mode()).arg(release.token).arg(&*rw.waiter);
        if let Some(id) = release.announce {
            let held = if self.read { &rw.readers } else { &rw.writer };
            cmd.arg(id).arg(channel(held));
        }
    }

    /// 1 released, 0 not ours.
    fn released(&self, _release: &Release<'_>, reply: &Value) -> Result<bool, NodeError> {
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::layout;

    fn shape(read: bool) -> RwShape {
        RwShape {
            rw: RwKeys {
                writer: "c:writer".into(),
                readers: "c:readers".into(),
                waiting: "c:writer-waiting".into(),
                waiter: "w1".into(),
            },
            read,
        }
    }

    /// As `extend.lua` and `release.lua` beside this file read them.
    #[test]
    fn a_holds_extension_and_release_are_laid_out_as_its_scripts_read_them() {
        let (reader, writer) = (shape(true), shape(false));
        let keys: Vec<Arc<str>> = vec!["c:readers".into()];
        let read = Extension {
            keys: &keys,
            token: "r",
            ttl: Ttl::from_millis(1000),
            shape: &reader,
        };
        let write = Extension {
            token: "w",
            shape: &writer,
            ..read
        };
        assert_eq!(
            layout::extension(&[read, write]),
            [
                "4",
                "c:writer",
                "c:readers",
                "c:writer",
                "c:readers",
                "r",
                "r",
                "1000",
                "w",
                "w",
                "1000"
            ]
        );
        let release = Release {
            keys: &keys,
            token: "r",
            announce: Some("id"),
        };
        let sent = [
            "3",
            "c:writer",
            "c:readers",
            "c:writer-waiting",
            "r",
            "r",
            "w1",
            "id",
            "c:readers:released",
        ];
        assert_eq!(layout::release(&reader, &release), sent);
        let release = Release {
            announce: None,
            ..release
        };
        assert_eq!(
            layout::release(&writer, &release),
            [
                "3",
                "c:writer",
                "c:readers",
                "c:writer-waiting",
                "w",
                "r",
                "w1"
            ]
        );
    }
}
