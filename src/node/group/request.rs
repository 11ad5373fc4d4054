//! A group-commit request as the lanes see it: what it asks ([`Op`], and
//! as sent, [`Single`]), of which holding ([`OnNode`]), what it got
//! ([`Status`]), and whether it goes through a lane at all
//! ([`Op::batched`]).

use std::sync::Arc;

use crate::contract::ShapeRef;
use crate::node::ExtendReply;
use crate::node::batch::{Entry, SingleOp};
use crate::request::Ttl;
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
