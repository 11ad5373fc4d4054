//! The lock primitives, each a description on the round engine
//! ([`Acquire`]): what a node is asked, how its answer votes, and what a
//! grant still needs. A plain lock is `SET key token NX PX ttl`; a
//! multi-resource lock sets all of its keys or none (`acquire_many.lua`); a
//! fenced lock also increments a counter beside its key
//! (`acquire_fenced.lua`) and, once a quorum granted, raises the counter on
//! the granting nodes to the fence (`fence_writeback.lua`). Holding,
//! extending and releasing them is the same for all three (see
//! [`Holding`](crate::round::Holding)).
//!
//! The folder stands on two levels of the layers: `node` (the commands
//! on one node, the scripts beside it, the lock's `Shape`) on the wire,
//! and this file, the acquisitions, on the round engine. A plain lock's
//! requests go through the node's group commit (`node/group/`), which
//! serves any `Shape` that allows it (and any other's release and
//! extension, as its own script's call, where a node's batches carry
//! them).
//!
//! `inspect.rs` is what [`Redlock::inspect`](crate::Redlock::inspect)
//! reads of a primitive, as each primitive describes it (`Reads`), with
//! the lock's own reads: here, below every other primitive, so that each
//! describes its reads in its own folder.

pub(crate) mod inspect;
pub(crate) mod node;

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use crate::contract::Primitive;
use crate::contract::ShapeRef;
use crate::error::{Error, NodeError};
use crate::keys::{FENCE_MARK_SUFFIX, FENCE_SUFFIX, RELEASED_SUFFIX};
use crate::node::{OnNode, Op, Status};
use crate::quorum::{Answer, Decision, Rule, Vote, Window};
use crate::request::{Kind, Request, Target};
use crate::round::{Acquire, Core, NodeCall, Round, fan_out, follow, shallow};
use node::FencedShape;

/// The lock (plain, fenced, multi-resource) in the list of primitives.
pub(crate) static PRIMITIVE: Primitive = Primitive {
    name: "lock",
    scripts: &[
        &node::RELEASE,
        &node::EXTEND,
        &node::ACQUIRE_MANY,
        &node::ACQUIRE_FENCED,
        &node::FENCE_WRITEBACK,
    ],
    keys: &["", FENCE_SUFFIX, FENCE_MARK_SUFFIX, RELEASED_SUFFIX],
    kind: crate::contract::stored::ResourceKind::Lock,
    reads: &inspect::LockReads,
    reads_only: None,
};

/// A node's answer to a lock's acquire request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The key exists (whatever its type): NX never touches it.
    Refused,
    /// Set, with the counter's new value for a fenced lock.
    Granted { counter: Option<u64> },
}

impl Answer for Acquired {
    fn vote(&self) -> Vote {
        match self {
            Acquired::Granted { .. } => Vote::Yes,
            Acquired::Refused => Vote::No,
        }
    }
}

/// Granted (without a counter: a lane carries no fenced acquire) or not.
impl From<Status> for Acquired {
    fn from(status: Status) -> Self {
        (status == Status::Done).into()
    }
}

impl From<bool> for Acquired {
    fn from(granted: bool) -> Self {
        if granted {
            Acquired::Granted { counter: None }
        } else {
            Acquired::Refused
        }
    }
}

impl Acquire for Request {
    type Answer = Acquired;

    fn target(&self) -> &Target {
        &self.target
    }

    fn call(
        &self,
        call: NodeCall,
    ) -> impl Future<Output = Result<Acquired, NodeError>> + Send + 'static + use<> {
        let (keys, fence) = (self.target.keys.clone(), self.fence.clone());
        let (kind, ttl) = (self.kind, self.target.ttl);
        async move {
            let NodeCall {
                token, deadline, ..
            } = &call;
            let node = call.server()?;
            let alone = async || match (kind, &*keys, &fence) {
                (Kind::Fenced, [key], Some(fence)) => {
                    let counter = node
                        .acquire_fenced(key, fence, token.as_str(), ttl, *deadline)
                        .await?;
                    Ok(
                        counter.map_or(Acquired::Refused, |counter| Acquired::Granted {
                            counter: Some(counter),
                        }),
                    )
                }
                (_, keys, _) => Ok(node
                    .acquire_many(keys, token.as_str(), ttl, *deadline)
                    .await?
                    .into()),
            };
            // A fenced lock's touches its counter too: alone (boxed, as
            // the lanes box a request that goes alone).
            if kind == Kind::Fenced {
                return Box::pin(alone()).await;
            }
            // A plain lock's, with whatever else is bound for this node
            // meanwhile (a multi-resource lock's goes alone).
            let on_node = OnNode {
                keys: &keys,
                token,
                shape: &ShapeRef::LOCK,
            };
            let op = Op::Acquire { ttl };
            let lanes = call.core.lanes();
            lanes
                .send_or(call.node, op, on_node, *deadline, alone)
                .await
        }
    }

    /// Every lock's releases and extensions are a lock's, until a fenced
    /// one is granted (see [`complete`](Self::complete)).
    fn shape(&self) -> ShapeRef {
        ShapeRef::LOCK
    }

    /// A fenced lock's second phase: the fence is the largest counter value
    /// among the granting quorum, and the granting nodes are asked to raise
    /// their counter to it while they hold our key; a quorum of them must
    /// confirm. Only those count: a node without our key may already have
    /// handed a later acquirer a smaller counter (see
    /// [`Redlock::lock_fenced`](crate::Redlock::lock_fenced), and control j
    /// of the model in tests/model). A grant holds a fenced lock's shape:
    /// its counter (which its restores raise) and its fence.
    async fn complete(
        &self,
        core: &Arc<Core>,
        round: &Round<Acquired>,
        window: &Window,
    ) -> Result<Option<ShapeRef>, Error> {
        let Some(keys) = &self.fence else {
            return Ok(None);
        };
        let counter = |answer: &Option<Acquired>| match answer {
            Some(Acquired::Granted { counter }) => *counter,
            _ => None,
        };
        // A reached quorum holds at least one granted counter value.
        let fence = round
            .answers
            .iter()
            .filter_map(counter)
            .max()
            .unwrap_or_default();
        let deadline = core.timeout_within(Instant::now(), window.deadline());
        // Owned requests: the granting nodes still writing back at the
        // decision are followed, so that their counters rise too.
        // Boxed: only a fenced lock makes this second fan-out, and every
        // attempt's future would otherwise carry its size (1.4 KB instead
        // of 0.9, see `Redlock::retry`).
        let (writeback, stragglers) = shallow(fan_out(
            core.nodes(),
            Rule::Quorum,
            "fence",
            deadline,
            |i, _, deadline| {
                let granted = round.answers.get(i).is_some_and(|a| counter(a).is_some());
                let (core, keys) = (core.clone(), keys.clone());
                async move {
                    if !granted {
                        return Ok(false);
                    }
                    let node = core.node(i)?;
                    node.fence_writeback(&keys, fence, deadline).await
                }
            },
        ))
        .await;
        follow(core, "fence", stragglers, |_, _| {});
        // Granting nodes never refuse a write-back: short of a quorum,
        // granting nodes failed.
        match writeback.decision {
            Decision::Reached => Ok(Some(ShapeRef::from(Arc::new(FencedShape {
                counter: keys.counter.clone(),
                fence,
            })))),
            _ => Err(Error::FenceUnconfirmed {
                resource: self.target.resource.to_string(),
                confirmed: writeback.tally.yes(),
                quorum: writeback.tally.quorum(),
                failures: writeback.failures,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::request::{Fencing, Limits};

    /// A node's acquire request is boxed (moved whole) for every node of
    /// every attempt: it stays small, as a release's does (see
    /// `round::release`'s `a_node_requests_future_stays_small`, and why
    /// under 1000 bytes). It was 15 KB while a request that goes alone sat
    /// inline, then 2.6 KB while the lane's lone path did.
    #[tokio::test]
    async fn a_node_acquire_requests_future_stays_small() {
        const AT_MOST: usize = 1000;
        let limits = Limits {
            prefix: "",
            drift_factor: 0.01,
            cluster: false,
        };
        let request =
            Request::new(&["r"], Duration::from_secs(1), Fencing::Off, limits).expect("valid");
        let core = Arc::new(Core::new(
            crate::round::tests::nodes(3),
            Duration::from_secs(1),
            0.01,
            false,
        ));
        let call = request.call(NodeCall {
            core,
            node: 0,
            token: crate::token::Token::generate().expect("random source"),
            deadline: Instant::now().into(),
        });
        let size = std::mem::size_of_val(&call);
        assert!(size <= AT_MOST, "an acquire request's future: {size} bytes");
    }
}
