//! The public result of an inspection, [`Inspection`]: each node's answer,
//! the claims, the verdict, and the reads still followed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::answers::{Following, Shared};
use crate::contract::stored::{
    Claim, Claimed, InspectedNode, NodeState, Proclaimed, ResourceKind, Verdict,
};
use crate::error::NodeFailure;
use crate::keys::Layout;
use crate::round::Core;

use super::verdict::{Judgement, judge};

/// What the nodes keep under one resource name, and what a quorum of them
/// confirms: the result of [`Redlock::inspect`](crate::Redlock::inspect).
///
/// Each node's answer is in [`nodes`](Self::nodes): what it keeps
/// ([`Stored`](crate::Stored)), or why it did not answer. Every token seen is a
/// [`Claim`] — a lock's holder, a permit's, a writer, a reader — counted
/// over the nodes that hold it, and **confirmed** when a quorum does. The
/// [`verdict`](Self::verdict) is [`Verdict::Held`] when a claim is
/// confirmed, [`Verdict::Free`] when none can be on a quorum even if every
/// node that failed held it, and [`Verdict::Unknown`] when the nodes that
/// failed could make it either.
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    pub(super) resource: Arc<str>,
    pub(super) layout: Arc<Layout>,
    pub(super) quorum: usize,
    pub(super) nodes: Vec<InspectedNode>,
    pub(super) failures: Vec<NodeFailure>,
    pub(super) pending: usize,
    pub(super) judgement: Judgement,
    /// The nodes still answering when the inspection was made.
    pub(super) following: Option<Following>,
}

impl Inspection {
    pub(super) fn new(
        resource: Arc<str>,
        layout: Arc<Layout>,
        core: &Core,
        following: Following,
    ) -> Self {
        let mut inspection = Self {
            resource,
            layout,
            quorum: core.quorum(),
            nodes: (0..core.len())
                .map(|i| InspectedNode {
                    node: core
                        .node(i)
                        .map_or_else(|_| Arc::from("?"), |n| n.label().clone()),
                    state: NodeState::Pending,
                    path: super::path_of(core, i),
                })
                .collect(),
            failures: Vec::new(),
            pending: 0,
            judgement: judge(&[], core.quorum()),
            following: None,
        };
        inspection.update(&following.shared);
        if inspection.pending > 0 {
            inspection.following = Some(following);
        }
        inspection
    }

    /// Takes in the nodes' answers as `shared` has them now.
    pub(super) fn update(&mut self, shared: &Shared) {
        let slots = shared.slots().clone();
        self.pending = slots.iter().filter(|s| !s.settled).count();
        for (node, slot) in self.nodes.iter_mut().zip(slots) {
            node.state = slot.state;
            if slot.path.is_some() {
                node.path = slot.path;
            }
        }
        self.failures = self
            .nodes
            .iter()
            .filter_map(|n| match &n.state {
                NodeState::Failed(error) => Some(NodeFailure {
                    node: n.node.clone(),
                    error: error.clone(),
                }),
                _ => None,
            })
            .collect();
        let states: Vec<NodeState> = self.nodes.iter().map(|n| n.state.clone()).collect();
        self.judgement = judge(&states, self.quorum);
    }

    /// The resource name inspected.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The resource's Redis key: the manager's key prefix and the name. A
    /// lock keeps its token there; every other key of the resource is
    /// named after it (see [`keys_for`](Self::keys_for)).
    pub fn key(&self) -> &str {
        &self.layout.key
    }

    /// The Redis keys that a resource of `kind` keeps under this name on
    /// a node: a lock's key and fence counter (and a fair lock's line:
    /// waiters, their leases, the ticket counter); an election's lock key, term
    /// counter and leader value; a semaphore's limit key and its permits'
    /// keys (as many as the [permit count](Self::permit_count) the nodes
    /// keep); a reader-writer lock's writer, readers and waiting-writer
    /// keys.
    pub fn keys_for(&self, kind: ResourceKind) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for primitive in crate::primitives::PRIMITIVES {
            if primitive.kind == kind {
                for key in primitive.reads.keys(&self.layout, self.judgement.count) {
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
        }
        keys
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Whether a quorum holds it, holds nothing, or the nodes that failed
    /// leave that open.
    pub fn verdict(&self) -> Verdict {
        self.judgement.verdict
    }

    /// What the name is used as, by what the nodes that answered keep
    /// under it: an election where a leader's value is kept, else a
    /// semaphore where a permit count or permit is, else a reader-writer
    /// lock where a writer, reader or waiting writer is, else a lock where
    /// its key or fence counter is. `None` when they keep nothing.
    pub fn kind(&self) -> Option<ResourceKind> {
        self.judgement.kind
    }

    /// Each node's answer, in the order of [`Redlock::nodes`](crate::Redlock::nodes).
    pub fn nodes(&self) -> &[InspectedNode] {
        &self.nodes
    }

    /// Every token the nodes that answered hold, by what it holds: the
    /// lock first, then the permits by slot, the writer, the readers; each
    /// group with the tokens on most nodes first.
    pub fn claims(&self) -> &[Claim] {
        &self.judgement.claims
    }

    /// The claims a quorum of nodes confirms.
    pub fn confirmed(&self) -> impl Iterator<Item = &Claim> {
        self.claims().iter().filter(|c| c.confirmed)
    }

    /// The lock's holder (an election's leader's token), if a quorum
    /// confirms one. At most one token can be: any two quorums share a
    /// node, and a node keeps one.
    pub fn holder(&self) -> Option<&Claim> {
        self.confirmed().find(|c| c.what == Claimed::Lock)
    }

    /// An election's leader: the newest value the [holder](Self::holder)
    /// proclaimed, as the nodes holding its token keep it. `None` without
    /// a holder, or when no node that answered keeps its value (not written
    /// yet).
    pub fn leader(&self) -> Option<&Proclaimed> {
        self.judgement.value.as_ref()
    }

    /// The value of the highest term any node that answered still keeps:
    /// the leader's, or a former leader's until it expires.
    pub fn last_leader(&self) -> Option<&Proclaimed> {
        self.judgement.last_value.as_ref()
    }

    /// A semaphore's permit count, as most nodes that keep one keep it.
    pub fn permit_count(&self) -> Option<u32> {
        self.judgement.count
    }

    /// The nodes that did not answer, with their errors (those
    /// [not waited for](crate::NodeError::Unresponsive) included).
    pub fn failures(&self) -> &[NodeFailure] {
        &self.failures
    }

    /// How many nodes' reads were still in flight when the inspection was
    /// made: those [`Pending`](NodeState::Pending), and those not waited
    /// for. [`settled`](Self::settled) waits for them.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Waits for every node's answer — each bounded by the node timeout —
    /// and returns the whole inspection, with nothing
    /// [`pending`](Self::pending). The verdict stays what it was (it was
    /// decided); the claims may be confirmed on more nodes.
    ///
    /// For those who want to see every node. With a node frozen it takes
    /// the node timeout: [`settled_within`](Self::settled_within) bounds
    /// the wait.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only observes. The reads end within
    /// the node timeout whether or not anybody waits for them.
    pub async fn settled(self) -> Inspection {
        self.settle_until(None).await
    }

    /// [`settled`](Self::settled), waiting at most `limit`: the nodes
    /// that have not answered by then stay [`Pending`](NodeState::Pending)
    /// (and counted in [`pending`](Self::pending)), and a later
    /// `settled` can still wait for them. `quorumlock status` waits so
    /// for the nodes a decided verdict did not need.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let inspection = locks.inspect("ledger:close").await?;
    /// // Every node that answers within 50 ms, a frozen one left pending.
    /// let inspection = inspection.settled_within(Duration::from_millis(50)).await;
    /// println!("{:?}, {} node(s) yet to answer", inspection.verdict(), inspection.pending());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`settled`](Self::settled).
    pub async fn settled_within(self, limit: Duration) -> Inspection {
        self.settle_until(Some(Instant::now() + limit)).await
    }

    async fn settle_until(mut self, until: Option<Instant>) -> Inspection {
        let Some(mut following) = self.following.take() else {
            return self;
        };
        while !following.shared.all_settled() {
            let changed = following.changes.changed();
            let changed = match until {
                None => changed.await,
                Some(until) => match tokio::time::timeout_at(until, changed).await {
                    Ok(changed) => changed,
                    Err(_) => {
                        self.update(&following.shared);
                        self.following = Some(following);
                        return self;
                    }
                },
            };
            if changed.is_err() {
                following.shared.abandon();
            }
        }
        self.update(&following.shared);
        self
    }
}
