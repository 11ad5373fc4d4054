//! A group-commit request as the lanes see it: what it asks ([`Op`], and
//! as sent, [`Single`]), of which holding ([`OnNode`]), what it got
//! ([`Status`]), and whether it goes through a lane at all
//! ([`Op::batched`]); or a primitive's own script call, prepared once
//! ([`Prepared`]), whose reply its caller decodes. A batch carries
//! either, as an [`Item`].

use std::sync::Arc;

use redis::Cmd;

use crate::contract::ShapeRef;
use crate::node::ExtendReply;
use crate::node::batch::{Entry, SingleOp};
use crate::request::Ttl;
use crate::scripts::Lua;
use crate::token::Token;

/// What a queued request asks (an owned [`SingleOp`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Acquire { ttl: Ttl },
    Release { announce: Option<Arc<str>> },
    Extend { ttl: Ttl },
}

impl Op {
    /// Whether this request for `holding` goes through its node's
    /// group-commit lane, and under which key: the one place that decides
    /// it. Only one-key holdings of a shape that
    /// [group-commits](crate::contract::Shape::group_commits) do (`batch.lua`
    /// knows keys that hold just their token): every op of one whose
    /// extension touches its key alone ([`keys_only`](crate::contract::Shape::keys_only)),
    /// and the release of one whose does not (a fenced lock's: a
    /// token-checked delete, like any lock's); a fenced lock's extension
    /// touches its counter too, and goes alone.
    pub(super) fn batched<'k>(&self, holding: &OnNode<'k>) -> Option<&'k Arc<str>> {
        match holding.keys {
            [key]
                if holding.shape.group_commits()
                    && (holding.shape.keys_only() || matches!(self, Op::Release { .. })) =>
            {
                Some(key)
            }
            _ => None,
        }
    }

    pub(super) fn borrow(&self) -> SingleOp<'_> {
        match self {
            Op::Acquire { ttl } => SingleOp::Acquire { ttl: *ttl },
            Op::Release { announce } => SingleOp::Release {
                announce: announce.as_deref(),
            },
            Op::Extend { ttl } => SingleOp::Extend { ttl: *ttl },
        }
    }
}

/// A holding's request as the lanes see it: its keys, token and shape
/// (see [`Op::batched`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OnNode<'a> {
    pub(crate) keys: &'a [Arc<str>],
    pub(crate) token: &'a Token,
    pub(crate) shape: &'a ShapeRef,
}

/// What a request that went through a lane got: `batch.lua`'s status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Refused (the key exists, or holds another token).
    Refused,
    /// Granted, deleted or extended.
    Done,
    /// Extended by setting the key again: the node had lost it.
    Restored,
}

impl Status {
    pub(super) fn of(code: u8) -> Self {
        match code {
            1 => Self::Done,
            2 => Self::Restored,
            _ => Self::Refused,
        }
    }
}

/// A release's answer: whether the node deleted the token.
impl From<Status> for bool {
    fn from(status: Status) -> bool {
        status == Status::Done
    }
}

/// An extension's answer.
impl From<Status> for ExtendReply {
    fn from(status: Status) -> Self {
        match status {
            Status::Done => Self::Extended,
            Status::Restored => Self::Restored,
            Status::Refused => Self::Refused,
        }
    }
}

/// One plain (one-key, unfenced) lock's request to a node, alone or in a
/// batch with others (see `batch.lua` and `group/`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Single<'a> {
    pub(crate) op: SingleOp<'a>,
    pub(crate) key: &'a Arc<str>,
    pub(crate) token: &'a str,
    pub(crate) shape: &'a ShapeRef,
}

impl<'a> From<Single<'a>> for Entry<'a> {
    fn from(request: Single<'a>) -> Self {
        Self {
            op: request.op,
            key: request.key,
            token: request.token,
        }
    }
}

/// Which step of a holding a [`Prepared`] call is: what decides whether
/// it still goes once its caller gave up (a release does, within its
/// deadline), and whether a later release in its batch makes its going
/// again moot (an extension's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Acquire,
    Release,
    Extend,
}

/// A primitive's own script call, prepared for a lane: `EVALSHA` of its
/// script with its `numkeys`, keys and arguments, written once. A batch
/// that goes as a pipeline sends it as it is; anything that goes alone
/// (a batch the pipeline cannot serve, or `NOSCRIPT`) sends its arguments
/// through [`Node::run_script`](crate::node::Node::run_script). The
/// lanes never learn which primitive it is: its reply goes back raw.
pub(crate) struct Prepared {
    pub(crate) lua: &'static Lua,
    /// `EVALSHA <sha> numkeys keys.. args..`.
    pub(crate) cmd: Cmd,
    /// How many arguments follow the hash, and about how many bytes.
    pub(crate) size: (usize, usize),
    /// The holding's token: scrubbed from errors, and what tells a later
    /// release of the same holding in a batch (a token is one holding's).
    pub(crate) token: Token,
    pub(crate) step: Step,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token, nor the arguments (which hold it).
        f.debug_struct("Prepared")
            .field("script", &self.lua.function)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// `lua` for `step` of the holding with `token`; `fill` writes
    /// `numkeys`, the keys and the arguments, about `size` of them (how
    /// many, and how many bytes).
    pub(crate) fn new(
        lua: &'static Lua,
        step: Step,
        token: &Token,
        size: (usize, usize),
        fill: impl FnOnce(&mut Cmd),
    ) -> Self {
        let hash = lua.script.get_hash();
        let mut cmd = Cmd::with_capacity(2 + size.0, 8 + hash.len() + size.1);
        cmd.arg("EVALSHA").arg(hash);
        fill(&mut cmd);
        Self {
            lua,
            cmd,
            size,
            token: token.clone(),
            step,
        }
    }

    /// Writes its `numkeys`, keys and arguments into `cmd` (to go alone).
    pub(crate) fn fill(&self, cmd: &mut Cmd) {
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
    }
}

/// One entry of a batch: a lock's request, or a prepared script call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Item<'a> {
    Single(Single<'a>),
    Script(&'a Prepared),
}

impl<'a> Item<'a> {
    pub(crate) fn single(self) -> Option<Single<'a>> {
        match self {
            Item::Single(request) => Some(request),
            Item::Script(_) => None,
        }
    }

    pub(crate) fn token(self) -> &'a str {
        match self {
            Item::Single(request) => request.token,
            Item::Script(call) => call.token.as_str(),
        }
    }

    /// Its step, as [`Prepared`] names them.
    pub(crate) fn step(self) -> Step {
        match self {
            Item::Single(Single { op, .. }) => match op {
                SingleOp::Acquire { .. } => Step::Acquire,
                SingleOp::Release { .. } => Step::Release,
                SingleOp::Extend { .. } => Step::Extend,
            },
            Item::Script(call) => call.step,
        }
    }
}
