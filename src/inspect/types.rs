//! The public result of an inspection: what each node keeps, the claims,
//! the verdict.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Following, Shared};
use crate::error::{NodeError, NodeFailure};
use crate::keys::Layout;
use crate::round::Core;
use crate::semaphore::Semaphore;
use crate::token::Token;

use super::verdict::{Judgement, judge};

/// What the nodes keep under one resource name, and what a quorum of them
/// confirms: the result of [`Redlock::inspect`](crate::Redlock::inspect).
///
/// Each node's answer is in [`nodes`](Self::nodes): what it keeps
/// ([`Stored`]), or why it did not answer. Every token seen is a
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
        let layout = &self.layout;
        match kind {
            ResourceKind::Lock => vec![
                layout.key.clone(),
                layout.fence(),
                layout.queue(),
                layout.queue_leases(),
                layout.queue_ticket(),
            ],
            ResourceKind::Election => {
                vec![layout.key.clone(), layout.fence(), layout.leader()]
            }
            ResourceKind::Semaphore => {
                let count = self.permit_count().unwrap_or(0).min(Semaphore::MAX_PERMITS);
                std::iter::once(layout.permits())
                    .chain((0..count).map(|slot| layout.permit(slot)))
                    .collect()
            }
            ResourceKind::RwLock => {
                vec![layout.writer(), layout.readers(), layout.writer_waiting()]
            }
        }
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
        self.judgement.leader.as_ref()
    }

    /// The value of the highest term any node that answered still keeps:
    /// the leader's, or a former leader's until it expires.
    pub fn last_leader(&self) -> Option<&Proclaimed> {
        self.judgement.last_leader.as_ref()
    }

    /// A semaphore's permit count, as most nodes that keep one keep it.
    pub fn permit_count(&self) -> Option<u32> {
        self.judgement.permit_count
    }

    /// The nodes that did not answer, with their errors (those
    /// [not waited for](NodeError::Unresponsive) included).
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

/// Whether a quorum holds a resource: the [`verdict`](Inspection::verdict)
/// of an [`Inspection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// A quorum of nodes holds a token of it: a lock's holder, a permit's,
    /// a writer or a reader ([`Inspection::confirmed`]).
    Held,
    /// No token can be on a quorum, even if every node that failed held
    /// it.
    Free,
    /// The nodes that failed could make it held or free: too few answered
    /// to tell.
    Unknown,
}

/// What a resource name is used as ([`Inspection::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResourceKind {
    /// A lock ([`Redlock::lock`](crate::Redlock::lock)), fenced or not.
    Lock,
    /// A [`Semaphore`](crate::Semaphore).
    Semaphore,
    /// A reader-writer lock ([`RwLock`](crate::RwLock)).
    RwLock,
    /// An [`Election`](crate::Election).
    Election,
}

/// One node of an [`Inspection`]: its label and its answer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InspectedNode {
    pub(super) node: Arc<str>,
    pub(super) state: NodeState,
    pub(super) path: Option<String>,
}

impl InspectedNode {
    /// The node, as [`Redlock::nodes`](crate::Redlock::nodes) names it (never with credentials).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// How this manager releases and extends plain locks on the node:
    /// `release DELIFEQ, extend SET IFEQ` where its server has native
    /// commands (see [`NativeCommands`](crate::NativeCommands)), `release
    /// script, extend script` where it has not; `None` if the node had not
    /// said when the inspection was decided.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// What it answered.
    pub fn state(&self) -> &NodeState {
        &self.state
    }
}

/// What one node answered an [`Inspection`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeState {
    /// What it keeps under the name.
    Answered(Stored),
    /// It failed, timed out, or was not waited for.
    Failed(NodeError),
    /// Its answer could not change the verdict and had not come when the
    /// inspection was made: [`Inspection::settled`] waits for it.
    Pending,
}

/// What one node keeps under a resource name. Plain reads, not atomic
/// together: each as the node kept it at about the same moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stored {
    pub(super) lock: Option<Holder>,
    pub(super) other_type: Option<String>,
    pub(super) fence: Option<u64>,
    pub(super) leader: Option<Proclaimed>,
    pub(super) permit_count: Option<u32>,
    pub(super) permits: Vec<HeldPermit>,
    pub(super) writer: Option<Holder>,
    pub(super) readers: Vec<Holder>,
    pub(super) writer_waiting: bool,
    pub(super) in_line: usize,
}

impl Stored {
    /// Whether the node keeps nothing of quorumlock's under the name.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The lock's holder: the token its key keeps.
    pub fn lock(&self) -> Option<&Holder> {
        self.lock.as_ref()
    }

    /// The Redis type of the lock's key when it is not a string (`hash`,
    /// `list`, …): then it is not a lock, and no lock of the name can be
    /// granted on this node.
    pub fn other_type(&self) -> Option<&str> {
        self.other_type.as_deref()
    }

    /// A fenced lock's (or an election's term) counter: the largest fence
    /// this node granted. It never expires.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// An election's leader value, as this node keeps it: the leader's (if
    /// its token is the [lock](Self::lock)'s), or a former leader's until
    /// it expires.
    pub fn leader(&self) -> Option<&Proclaimed> {
        self.leader.as_ref()
    }

    /// A semaphore's permit count, as this node keeps it while one of its
    /// permits is held here.
    pub fn permit_count(&self) -> Option<u32> {
        self.permit_count
    }

    /// A semaphore's permits held on this node, by slot.
    pub fn permits(&self) -> &[HeldPermit] {
        &self.permits
    }

    /// A reader-writer lock's writer.
    pub fn writer(&self) -> Option<&Holder> {
        self.writer.as_ref()
    }

    /// A reader-writer lock's readers whose expiry has not passed (by the
    /// node's clock).
    pub fn readers(&self) -> &[Holder] {
        &self.readers
    }

    /// Whether a writer waits for a reader-writer lock's readers to leave
    /// (and holds new readers back).
    pub fn writer_waiting(&self) -> bool {
        self.writer_waiting
    }

    /// How many waiters stand in a fair lock's line on this node
    /// ([`Redlock::fair_lock`](crate::Redlock::fair_lock)), those whose
    /// lease has not ended by the node's clock.
    pub fn in_line(&self) -> usize {
        self.in_line
    }

    /// Every token this node holds, by what it holds.
    pub(super) fn claims(&self) -> impl Iterator<Item = (Claimed, &Holder)> {
        self.lock
            .iter()
            .map(|h| (Claimed::Lock, h))
            .chain(
                self.permits
                    .iter()
                    .map(|p| (Claimed::Permit(p.slot), &p.holder)),
            )
            .chain(self.writer.iter().map(|h| (Claimed::Writer, h)))
            .chain(self.readers.iter().map(|h| (Claimed::Reader, h)))
    }
}

/// A token a node keeps, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    pub(super) token: SeenToken,
    pub(super) ttl: Option<Duration>,
}

impl Holder {
    /// The holder's token (shown by its first characters only).
    pub fn token(&self) -> &SeenToken {
        &self.token
    }

    /// How long the node keeps it; `None` when it never expires there.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

/// A semaphore's permit held on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermit {
    pub(super) slot: u32,
    pub(super) holder: Holder,
}

impl HeldPermit {
    /// The permit's slot: `0 ≤ slot <` the permit count.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Its holder.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

/// An election's leader value, as a node keeps it beside the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Proclaimed {
    pub(super) token: SeenToken,
    pub(super) term: u64,
    pub(super) revision: u64,
    pub(super) value: String,
}

impl Proclaimed {
    /// The token of the leader that proclaimed it.
    pub fn token(&self) -> &SeenToken {
        &self.token
    }

    /// The leader's term: its fencing token.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Which of the leader's values it is: each new value proclaimed in a
    /// term has the next revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The value.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// A token as a node keeps it, never shown in full: `Display` and `Debug`
/// show its first four characters — enough to tell grants apart, too
/// little to release or extend someone else's lock. Two are equal when
/// the tokens are; [`is`](Self::is) tells whether it is a token of yours.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SeenToken(pub(super) Arc<str>);

impl SeenToken {
    /// Its first four characters (all of it, if shorter).
    pub fn prefix(&self) -> &str {
        match self.0.char_indices().nth(4) {
            Some((end, _)) => &self.0[..end],
            None => &self.0,
        }
    }

    /// Whether this is `token`.
    pub fn is(&self, token: &Token) -> bool {
        *self.0 == *token.as_str()
    }
}

impl fmt::Display for SeenToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.prefix())
    }
}

impl fmt::Debug for SeenToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeenToken({}…)", self.prefix())
    }
}

/// What a token holds ([`Claim::what`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Claimed {
    /// The lock (or an election's lock).
    Lock,
    /// A semaphore's permit, by slot.
    Permit(u32),
    /// A reader-writer lock's writer.
    Writer,
    /// One of a reader-writer lock's readers.
    Reader,
}

/// One token, what it holds, and on how many nodes ([`Inspection::claims`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claim {
    pub(super) what: Claimed,
    pub(super) token: SeenToken,
    pub(super) nodes: usize,
    pub(super) ttl: Option<Duration>,
    pub(super) confirmed: bool,
}

impl Claim {
    /// What the token holds.
    pub fn what(&self) -> Claimed {
        self.what
    }

    /// The token.
    pub fn token(&self) -> &SeenToken {
        &self.token
    }

    /// How many nodes that answered hold it.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Whether a quorum of nodes holds it.
    pub fn is_confirmed(&self) -> bool {
        self.confirmed
    }

    /// For a confirmed claim, how long a quorum keeps holding it at most:
    /// the quorum-th longest of the ttls of the nodes that hold it. `None`
    /// when it is not confirmed, or some node keeps it without expiry.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_show_four_characters() {
        let seen = SeenToken("0123456789abcdef".into());
        assert_eq!(seen.to_string(), "0123…");
        assert_eq!(format!("{seen:?}"), "SeenToken(0123…)");
        assert_eq!(SeenToken("ab".into()).to_string(), "ab…");
        assert_eq!(SeenToken("äöüßx".into()).prefix(), "äöüß");
        let real = Token::generate().expect("random source");
        assert!(SeenToken(real.as_str().into()).is(&real));
        assert!(!seen.is(&real));
    }
}
