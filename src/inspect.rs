//! [`Redlock::inspect`]: what the nodes keep under a resource name — a
//! lock, a semaphore's permits, a reader-writer lock, an election — read on
//! every node with plain read commands through the round engine, and what
//! a quorum of them confirms ([`Inspection`]).
//!
//! The reads are one fan-out on the engine, decided by [`judge`]: it
//! returns once no answer still to come can change the verdict, and the
//! engine follows the other nodes in the background, for
//! [`Inspection::settled`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::decide::Decide;
use crate::error::{ArgumentError, Error, NodeError, NodeFailure};
use crate::keys::Layout;
use crate::node::{Deadline, nth};
use crate::redlock::Redlock;
use crate::round::{Core, Traced, fan_out_with, follow};
use crate::semaphore::Semaphore;
use crate::token::Token;

impl Redlock {
    /// Reads what every node keeps under the resource `name` — a lock, a
    /// fenced lock's counter, a [`Semaphore`](crate::Semaphore)'s permits,
    /// an [`RwLock`](crate::RwLock)'s writer and readers, an
    /// [`Election`](crate::Election)'s leader — and decides at a quorum
    /// whether it is held: see [`Inspection`].
    ///
    /// Every node is read in parallel with plain read commands (`GET`,
    /// `PTTL`, `HMGET`, `ZRANGE`, `EXISTS`, `TIME`, and `TYPE` for a key
    /// of another type) on the manager's connections: no script, and
    /// nothing is ever written, so a user allowed only to read may inspect.
    /// The reads of one node are not atomic; what a node shows is what it
    /// kept at about the same moment.
    ///
    /// It returns as soon as the answers decide the verdict: a token that a
    /// quorum of nodes holds is held; a token that no quorum can hold,
    /// even counting the nodes that failed, is not; and the nodes that
    /// failed may make a verdict unknowable. A node whose answer cannot
    /// change the verdict is not waited for (a frozen minority costs
    /// nothing) — it shows as [`NodeState::Pending`], its read is followed
    /// in the background, and [`Inspection::settled`] waits for it, within
    /// the node timeout. A node whose last requests all timed out is not
    /// waited for either ([`NodeError::Unresponsive`]).
    ///
    /// Tokens are never returned in full: see [`SeenToken`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name. Nodes that fail are
    /// not an error: they are in the inspection, and may make its verdict
    /// [`Verdict::Unknown`].
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only reads. Dropped, it stops
    /// waiting; reads already handed to the nodes' connections end within
    /// the node timeout.
    ///
    /// # Examples
    ///
    /// Who holds the nightly report's lock?
    ///
    /// ```no_run
    /// use quorumlock::{Redlock, Verdict};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// let locks = Redlock::new([
    ///     "redis://127.0.0.1:7001",
    ///     "redis://127.0.0.1:7002",
    ///     "redis://127.0.0.1:7003",
    /// ])?;
    /// let inspection = locks.inspect("reports:nightly").await?;
    /// match inspection.verdict() {
    ///     Verdict::Held => {
    ///         for claim in inspection.confirmed() {
    ///             println!("{:?} held by {} on {} nodes", claim.what(), claim.token(), claim.nodes());
    ///         }
    ///     }
    ///     Verdict::Free => println!("free"),
    ///     _ => println!("cannot tell: {} nodes failed", inspection.failures().len()),
    /// }
    /// // Every node's answer, waiting (within the node timeout) for the slow ones:
    /// for node in inspection.settled().await.nodes() {
    ///     println!("{}: {:?}", node.node(), node.state());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Inspection, Error> {
        if name.is_empty() {
            return Err(ArgumentError::EmptyResource.into());
        }
        let manager = self.manager();
        let layout = Arc::new(Layout::new(format!("{}{name}", manager.key_prefix)));
        let span = tracing::debug_span!("quorumlock", op = "inspect", resource = %name);
        Ok(inspect(&manager.core, name.into(), layout)
            .instrument(span)
            .await)
    }
}

/// Reads `layout`'s keys on every node of `core` and decides.
async fn inspect(core: &Arc<Core>, resource: Arc<str>, layout: Arc<Layout>) -> Inspection {
    let deadline = Instant::now() + core.node_timeout;
    let (looking, stragglers) = fan_out_with(
        &core.nodes,
        "inspect",
        deadline,
        Looking::new(core.nodes.len(), core.quorum()),
        |i, _, deadline| read(core.clone(), layout.clone(), i, deadline),
    )
    .await;
    let in_flight: Vec<usize> = stragglers.nodes().collect();
    let shared = Arc::new(Shared::new(looking.states, &in_flight));
    let (changed, changes) = watch::channel(());
    let follower = shared.clone();
    follow(core, "inspect", stragglers, move |node, answer| {
        follower.settle(node, answer);
        changed.send_replace(());
    });
    Inspection::new(resource, layout, core, Following { shared, changes })
}

/// An inspection's decision rule: the nodes' answers so far, decided once
/// [`judge`] says no answer still to come can change the verdict.
#[derive(Debug)]
struct Looking {
    states: Vec<NodeState>,
    quorum: usize,
    decided: bool,
}

impl Looking {
    fn new(nodes: usize, quorum: usize) -> Self {
        Self {
            states: vec![NodeState::Pending; nodes],
            quorum,
            decided: false,
        }
    }
}

impl Decide for Looking {
    type Answer = Stored;

    fn record(&mut self, node: usize, answer: Result<Stored, NodeFailure>) {
        if let Some(state) = self.states.get_mut(node) {
            *state = match answer {
                Ok(stored) => NodeState::Answered(stored),
                Err(failure) => NodeState::Failed(failure.error),
            };
        }
        self.decided = judge(&self.states, self.quorum).decided;
    }

    fn decided(&self) -> bool {
        self.decided
    }
}

/// What the logs show of a node's answer: what it keeps, never a token or
/// a value.
impl Traced for Stored {
    fn trace(op: &'static str, node: &str, late: bool, answer: &Result<Self, NodeError>) {
        // Only late answers say so.
        let late = late.then_some(true);
        match answer {
            Ok(kept) => tracing::debug!(
                op,
                node,
                late,
                lock = kept.lock.is_some() || kept.other_type.is_some(),
                fence = kept.fence.is_some(),
                leader = kept.leader.is_some(),
                permits = kept.permits.len(),
                writer = kept.writer.is_some(),
                readers = kept.readers.len(),
            ),
            Err(error) => tracing::debug!(op, node, late, error = %error, "node failed"),
        }
    }
}

/// What the nodes said, as they say it: the decision's answers, then those
/// of the nodes followed after it. Shared by their follower and the
/// [`Inspection`].
#[derive(Debug)]
struct Shared {
    nodes: Mutex<Vec<Slot>>,
}

#[derive(Debug, Clone)]
struct Slot {
    state: NodeState,
    /// The node's read has ended: it answered, or failed for good (not
    /// merely not waited for).
    settled: bool,
}

impl Shared {
    /// The answers at the decision; the reads to `in_flight` go on.
    fn new(states: Vec<NodeState>, in_flight: &[usize]) -> Self {
        let slots = states
            .into_iter()
            .enumerate()
            .map(|(i, state)| Slot {
                state,
                settled: !in_flight.contains(&i),
            })
            .collect();
        Self {
            nodes: Mutex::new(slots),
        }
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn all_settled(&self) -> bool {
        self.slots().iter().all(|s| s.settled)
    }

    /// A followed read ended.
    fn settle(&self, node: usize, answer: Result<Stored, NodeError>) {
        if let Some(slot) = self.slots().get_mut(node) {
            slot.settled = true;
            slot.state = match answer {
                Ok(stored) => NodeState::Answered(stored),
                Err(error) => NodeState::Failed(error),
            };
        }
    }

    /// Nobody follows the reads still in flight: they count as failed.
    fn abandon(&self) {
        for slot in self.slots().iter_mut().filter(|s| !s.settled) {
            slot.settled = true;
            if matches!(slot.state, NodeState::Pending) {
                slot.state = NodeState::Failed(NodeError::UnexpectedReply(
                    "not followed: the runtime is shutting down".to_owned(),
                ));
            }
        }
    }
}

/// What an inspection still follows, for [`Inspection::settled`].
#[derive(Debug)]
struct Following {
    shared: Arc<Shared>,
    changes: watch::Receiver<()>,
}

/// What the nodes keep under one resource name, and what a quorum of them
/// confirms: the result of [`Redlock::inspect`].
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
    resource: Arc<str>,
    layout: Arc<Layout>,
    quorum: usize,
    nodes: Vec<InspectedNode>,
    failures: Vec<NodeFailure>,
    pending: usize,
    judgement: Judgement,
    /// The nodes still answering when the inspection was made.
    following: Option<Following>,
}

impl Inspection {
    fn new(resource: Arc<str>, layout: Arc<Layout>, core: &Core, following: Following) -> Self {
        let mut inspection = Self {
            resource,
            layout,
            quorum: core.quorum(),
            nodes: (0..core.nodes.len())
                .map(|i| InspectedNode {
                    node: core
                        .nodes
                        .get(i)
                        .map_or_else(|| Arc::from("?"), |n| n.label().clone()),
                    state: NodeState::Pending,
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
    fn update(&mut self, shared: &Shared) {
        let slots = shared.slots().clone();
        self.pending = slots.iter().filter(|s| !s.settled).count();
        for (node, slot) in self.nodes.iter_mut().zip(slots) {
            node.state = slot.state;
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
    /// a node: a lock's key and fence counter; an election's lock key, term
    /// counter and leader value; a semaphore's limit key and its permits'
    /// keys (as many as the [permit count](Self::permit_count) the nodes
    /// keep); a reader-writer lock's writer, readers and waiting-writer
    /// keys.
    pub fn keys_for(&self, kind: ResourceKind) -> Vec<String> {
        let layout = &self.layout;
        match kind {
            ResourceKind::Lock => vec![layout.key.clone(), layout.fence()],
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

    /// Each node's answer, in the order of [`Redlock::nodes`].
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
    /// For those who want to see every node, as `quorumlock status` does.
    /// With a node frozen it takes the node timeout.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only observes. The reads end within
    /// the node timeout whether or not anybody waits for them.
    pub async fn settled(mut self) -> Inspection {
        let Some(mut following) = self.following.take() else {
            return self;
        };
        while !following.shared.all_settled() {
            if following.changes.changed().await.is_err() {
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
    /// A lock ([`Redlock::lock`]), fenced or not.
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
    node: Arc<str>,
    state: NodeState,
}

impl InspectedNode {
    /// The node, as [`Redlock::nodes`] names it (never with credentials).
    pub fn node(&self) -> &str {
        &self.node
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
    lock: Option<Holder>,
    other_type: Option<String>,
    fence: Option<u64>,
    leader: Option<Proclaimed>,
    permit_count: Option<u32>,
    permits: Vec<HeldPermit>,
    writer: Option<Holder>,
    readers: Vec<Holder>,
    writer_waiting: bool,
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

    /// Every token this node holds, by what it holds.
    fn claims(&self) -> impl Iterator<Item = (Claimed, &Holder)> {
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
    token: SeenToken,
    ttl: Option<Duration>,
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
    slot: u32,
    holder: Holder,
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
    token: SeenToken,
    term: u64,
    revision: u64,
    value: String,
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
pub struct SeenToken(Arc<str>);

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
    what: Claimed,
    token: SeenToken,
    nodes: usize,
    ttl: Option<Duration>,
    confirmed: bool,
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

/// What the answers so far say.
#[derive(Debug)]
struct Judgement {
    /// No answer still to come can change the verdict.
    decided: bool,
    verdict: Verdict,
    kind: Option<ResourceKind>,
    claims: Vec<Claim>,
    leader: Option<Proclaimed>,
    last_leader: Option<Proclaimed>,
    permit_count: Option<u32>,
}

/// Where one token stands, with `pending` nodes still to answer and
/// `failed` that did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// On a quorum.
    Confirmed,
    /// On no quorum, even if every pending and failed node holds it.
    RuledOut,
    /// The pending nodes cannot put it on a quorum, and even if they all
    /// answer without it the failed nodes could: nobody can tell.
    Unknowable,
    /// The pending nodes decide it.
    Open,
}

fn standing(nodes: usize, pending: usize, failed: usize, quorum: usize) -> Standing {
    if nodes >= quorum {
        Standing::Confirmed
    } else if nodes + pending + failed < quorum {
        Standing::RuledOut
    } else if nodes + pending < quorum && nodes + failed >= quorum {
        Standing::Unknowable
    } else {
        Standing::Open
    }
}

/// Judges the nodes' answers so far. Every token is judged on its own
/// ([`standing`]), and so is a token no node that answered holds (the
/// others may). The verdict is decided once no token is open; a confirmed
/// election's value is waited for too while nodes are pending. Once
/// decided it stands, whatever the pending nodes say: a token's node
/// count and pending nodes together only shrink, and its node count and
/// failed nodes together only grow.
fn judge(states: &[NodeState], quorum: usize) -> Judgement {
    let pending = states
        .iter()
        .filter(|s| matches!(s, NodeState::Pending))
        .count();
    let failed = states
        .iter()
        .filter(|s| matches!(s, NodeState::Failed(_)))
        .count();
    let answered: Vec<&Stored> = states
        .iter()
        .filter_map(|s| match s {
            NodeState::Answered(stored) => Some(stored),
            _ => None,
        })
        .collect();

    let mut seen: HashMap<(Claimed, &SeenToken), Vec<Option<Duration>>> = HashMap::new();
    for stored in &answered {
        for (what, holder) in stored.claims() {
            seen.entry((what, &holder.token))
                .or_default()
                .push(holder.ttl);
        }
    }
    let mut decided = true;
    let mut unknowable = false;
    let mut claims: Vec<Claim> = Vec::with_capacity(seen.len());
    // A token no node that answered holds, first.
    for (key, ttls) in
        std::iter::once((None, Vec::new())).chain(seen.into_iter().map(|(k, t)| (Some(k), t)))
    {
        let standing = standing(ttls.len(), pending, failed, quorum);
        match standing {
            Standing::Open => decided = false,
            Standing::Unknowable => unknowable = true,
            Standing::Confirmed | Standing::RuledOut => {}
        }
        if let Some((what, token)) = key {
            let confirmed = standing == Standing::Confirmed;
            claims.push(Claim {
                what,
                token: token.clone(),
                nodes: ttls.len(),
                ttl: if confirmed {
                    quorum_ttl(&ttls, quorum)
                } else {
                    None
                },
                confirmed,
            });
        }
    }
    claims.sort_by(|a, b| {
        (a.what, std::cmp::Reverse(a.nodes), a.token.prefix()).cmp(&(
            b.what,
            std::cmp::Reverse(b.nodes),
            b.token.prefix(),
        ))
    });

    let kind = kind_of(&answered);
    let holder = claims
        .iter()
        .find(|c| c.confirmed && c.what == Claimed::Lock);
    let leader = holder.and_then(|holder| {
        answered
            .iter()
            .filter(|s| s.lock.as_ref().is_some_and(|l| l.token == holder.token))
            .filter_map(|s| s.leader.as_ref())
            .filter(|l| l.token == holder.token)
            .max_by_key(|l| l.revision)
            .cloned()
    });
    // An election's leader holds the lock; its value may be on a node yet
    // to answer.
    if kind == Some(ResourceKind::Election) && holder.is_some() && leader.is_none() && pending > 0 {
        decided = false;
    }
    let last_leader = answered
        .iter()
        .filter_map(|s| s.leader.as_ref())
        .max_by_key(|l| (l.term, l.revision))
        .cloned();
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for count in answered.iter().filter_map(|s| s.permit_count) {
        match counts.iter_mut().find(|(c, _)| *c == count) {
            Some((_, n)) => *n += 1,
            None => counts.push((count, 1)),
        }
    }
    let permit_count = counts
        .into_iter()
        .max_by_key(|&(c, n)| (n, c))
        .map(|(c, _)| c);
    let verdict = if claims.iter().any(|c| c.confirmed) {
        Verdict::Held
    } else if unknowable {
        Verdict::Unknown
    } else {
        Verdict::Free
    };
    Judgement {
        decided,
        verdict,
        kind,
        claims,
        leader,
        last_leader,
        permit_count,
    }
}

/// What the nodes that answered keep, the most telling first.
fn kind_of(answered: &[&Stored]) -> Option<ResourceKind> {
    let any = |keeps: fn(&Stored) -> bool| answered.iter().any(|s| keeps(s));
    if any(|s| s.leader.is_some()) {
        Some(ResourceKind::Election)
    } else if any(|s| s.permit_count.is_some() || !s.permits.is_empty()) {
        Some(ResourceKind::Semaphore)
    } else if any(|s| s.writer.is_some() || !s.readers.is_empty() || s.writer_waiting) {
        Some(ResourceKind::RwLock)
    } else if any(|s| s.lock.is_some() || s.fence.is_some() || s.other_type.is_some()) {
        Some(ResourceKind::Lock)
    } else {
        None
    }
}

/// How long a quorum keeps holding a token: the quorum-th longest ttl
/// among the nodes that hold it. `None` if some hold it without a ttl.
fn quorum_ttl(ttls: &[Option<Duration>], quorum: usize) -> Option<Duration> {
    let mut known: Vec<Duration> = ttls.iter().copied().collect::<Option<_>>()?;
    known.sort_unstable_by(|a, b| b.cmp(a));
    known.get(quorum.checked_sub(1)?).copied()
}

// ---------------------------------------------------------------------
// One node's read.

fn command(name: &str, args: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(name);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// Reads what node `node` keeps under `layout`'s keys: every key at once,
/// then a semaphore's permits (their count is in the limit key) and the
/// type of a lock key that is not a string.
async fn read(
    core: Arc<Core>,
    layout: Arc<Layout>,
    node: usize,
    deadline: Deadline,
) -> Result<Stored, NodeError> {
    let target = nth(&core.nodes, node)?;
    let key = layout.key.as_str();
    let (fence, leader, permits) = (layout.fence(), layout.leader(), layout.permits());
    let (writer, readers, waiting) = (layout.writer(), layout.readers(), layout.writer_waiting());
    let commands = [
        command("GET", &[key]),
        command("PTTL", &[key]),
        command("GET", &[&fence]),
        command("HMGET", &[&leader, "token", "term", "rev", "value"]),
        command("GET", &[&permits]),
        command("GET", &[&writer]),
        command("PTTL", &[&writer]),
        command("ZRANGE", &[&readers, "0", "-1", "WITHSCORES"]),
        command("EXISTS", &[&waiting]),
        command("TIME", &[]),
    ];
    let replies =
        futures::future::join_all(commands.iter().map(|c| target.read(c, deadline))).await;
    let mut replies = replies.into_iter();
    let mut next = || {
        replies
            .next()
            .unwrap_or_else(|| Err(NodeError::UnexpectedReply("a reply is missing".to_owned())))
    };
    let (lock, lock_ttl) = (ours(next())?, integer(next()?, "PTTL")?);
    let fence = ours(next())?
        .as_ref()
        .and_then(text)
        .and_then(|t| t.parse().ok());
    let leader = ours(next())?.map(proclaimed).transpose()?.flatten();
    let permit_count = ours(next())?
        .as_ref()
        .and_then(text)
        .and_then(|t| t.parse::<u32>().ok())
        .filter(|&count| count > 0);
    let (writer, writer_ttl) = (ours(next())?, integer(next()?, "PTTL")?);
    let readers = ours(next())?.map(scored).transpose()?.unwrap_or_default();
    let writer_waiting = integer(next()?, "EXISTS")? > 0;
    let now_ms = clock(next()?)?;

    let mut stored = Stored {
        fence,
        leader,
        permit_count,
        writer_waiting,
        ..Stored::default()
    };
    match lock {
        // Another type under the lock key: not a lock.
        None => {
            let kind = target.read(&command("TYPE", &[key]), deadline).await?;
            stored.other_type =
                Some(text(&kind).unwrap_or_else(|| "value of another type".to_owned()));
        }
        Some(value) => stored.lock = holder(&value, lock_ttl)?,
    }
    if let Some(value) = writer {
        stored.writer = holder(&value, writer_ttl)?;
    }
    stored.readers = readers
        .into_iter()
        .filter_map(|(token, expiry)| {
            let left = expiry - now_ms as f64;
            (left > 0.0).then(|| Holder {
                token: SeenToken(token.into()),
                ttl: Some(Duration::from_millis(left as u64)),
            })
        })
        .collect();
    if let Some(count) = permit_count {
        stored.permits =
            read_permits(target, &layout, count.min(Semaphore::MAX_PERMITS), deadline).await?;
    }
    Ok(stored)
}

/// The permits held on `target` of a semaphore of `count` permits.
async fn read_permits(
    target: &crate::node::Node,
    layout: &Layout,
    count: u32,
    deadline: Deadline,
) -> Result<Vec<HeldPermit>, NodeError> {
    let commands: Vec<(u32, Cmd, Cmd)> = (0..count)
        .map(|slot| {
            let key = layout.permit(slot);
            (slot, command("GET", &[&key]), command("PTTL", &[&key]))
        })
        .collect();
    let replies = futures::future::join_all(commands.iter().map(|(slot, get, pttl)| async move {
        let (value, ttl) =
            futures::future::join(target.read(get, deadline), target.read(pttl, deadline)).await;
        (*slot, value, ttl)
    }))
    .await;
    let mut held = Vec::new();
    for (slot, value, ttl) in replies {
        if let Some(value) = ours(value)?
            && let Some(holder) = holder(&value, integer(ttl?, "PTTL")?)?
        {
            held.push(HeldPermit { slot, holder });
        }
    }
    Ok(held)
}

/// A reply, with `None` for a key of another type (WRONGTYPE): not ours.
fn ours(reply: Result<Value, NodeError>) -> Result<Option<Value>, NodeError> {
    match reply {
        Err(NodeError::Redis(e)) if e.code() == Some("WRONGTYPE") => Ok(None),
        Err(e) => Err(e),
        Ok(value) => Ok(Some(value)),
    }
}

/// An error for a reply of the wrong shape: names the command, never the
/// reply (it may hold a token).
fn unexpected(command: &str) -> NodeError {
    NodeError::UnexpectedReply(format!("a reply of an unexpected type to {command}"))
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn integer(value: Value, command: &str) -> Result<i64, NodeError> {
    match &value {
        Value::Int(n) => Ok(*n),
        other => text(other)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| unexpected(command)),
    }
}

fn float(value: &Value) -> Option<f64> {
    match value {
        Value::Double(f) => Some(*f),
        Value::Int(n) => Some(*n as f64),
        other => text(other).and_then(|t| t.parse().ok()),
    }
}

/// A string key's value (`Nil`: absent) and its `PTTL` (-1: no expiry,
/// -2: gone since).
fn holder(value: &Value, pttl: i64) -> Result<Option<Holder>, NodeError> {
    if matches!(value, Value::Nil) || pttl == -2 {
        return Ok(None);
    }
    let token = text(value).ok_or_else(|| unexpected("GET"))?;
    Ok(Some(Holder {
        token: SeenToken(token.into()),
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
    }))
}

/// `HMGET <key>:leader token term rev value`: a leader's value, when all
/// four are there.
fn proclaimed(value: Value) -> Result<Option<Proclaimed>, NodeError> {
    let Value::Array(fields) = value else {
        return Err(unexpected("HMGET"));
    };
    let number = |v: &Value| text(v).and_then(|t| t.parse::<u64>().ok());
    Ok(match &fields[..] {
        [token, term, rev, value] => match (text(token), number(term), number(rev), text(value)) {
            (Some(token), Some(term), Some(revision), Some(value)) => Some(Proclaimed {
                token: SeenToken(token.into()),
                term,
                revision,
                value,
            }),
            _ => None,
        },
        _ => return Err(unexpected("HMGET")),
    })
}

/// `ZRANGE … WITHSCORES`: members and scores, flat (RESP2) or in pairs
/// (RESP3).
fn scored(value: Value) -> Result<Vec<(String, f64)>, NodeError> {
    let bad = || unexpected("ZRANGE");
    let Value::Array(items) = value else {
        return Err(bad());
    };
    let pair = |member: &Value, score: &Value| Some((text(member)?, float(score)?));
    if items.iter().all(|i| matches!(i, Value::Array(_))) {
        items
            .iter()
            .map(|item| match item {
                Value::Array(p) => match &p[..] {
                    [member, score] => pair(member, score).ok_or_else(bad),
                    _ => Err(bad()),
                },
                _ => Err(bad()),
            })
            .collect()
    } else if items.len() % 2 == 0 {
        items
            .chunks(2)
            .map(|p| match p {
                [member, score] => pair(member, score).ok_or_else(bad),
                _ => Err(bad()),
            })
            .collect()
    } else {
        Err(bad())
    }
}

/// `TIME`: the node's clock, in ms.
fn clock(value: Value) -> Result<u64, NodeError> {
    let bad = || unexpected("TIME");
    let Value::Array(parts) = value else {
        return Err(bad());
    };
    let number = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other).and_then(|t| t.parse::<u64>().ok()),
    };
    match &parts[..] {
        [seconds, micros] => {
            let (seconds, micros) = (
                number(seconds).ok_or_else(bad)?,
                number(micros).ok_or_else(bad)?,
            );
            Ok(seconds.saturating_mul(1000).saturating_add(micros / 1000))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q3: usize = 2;

    fn token(t: &str) -> SeenToken {
        SeenToken(t.into())
    }

    fn held(t: &str) -> Holder {
        Holder {
            token: token(t),
            ttl: Some(Duration::from_secs(10)),
        }
    }

    fn lock(t: &str) -> NodeState {
        NodeState::Answered(Stored {
            lock: Some(held(t)),
            ..Stored::default()
        })
    }

    fn proclaimed(t: &str, term: u64, revision: u64, value: &str) -> NodeState {
        NodeState::Answered(Stored {
            lock: Some(held(t)),
            leader: Some(Proclaimed {
                token: token(t),
                term,
                revision,
                value: value.to_owned(),
            }),
            ..Stored::default()
        })
    }

    fn empty() -> NodeState {
        NodeState::Answered(Stored::default())
    }

    fn failed() -> NodeState {
        NodeState::Failed(NodeError::Unresponsive)
    }

    /// The verdict, with the confirmed lock holder's token, or `None`
    /// while undecided.
    fn outcome(states: &[NodeState]) -> Option<(Verdict, Option<String>)> {
        let judgement = judge(states, crate::quorum::quorum(states.len()));
        judgement.decided.then(|| {
            let holder = judgement
                .claims
                .iter()
                .find(|c| c.confirmed && c.what == Claimed::Lock)
                .map(|c| c.token.0.to_string());
            (judgement.verdict, holder)
        })
    }

    #[test]
    fn a_token_on_a_quorum_is_held_without_the_others() {
        let states = [lock("a"), lock("a"), NodeState::Pending];
        assert_eq!(
            outcome(&states),
            Some((Verdict::Held, Some("a".to_owned())))
        );
        let judgement = judge(&states, Q3);
        assert_eq!(judgement.kind, Some(ResourceKind::Lock));
        assert_eq!(judgement.claims.len(), 1);
        assert_eq!(judgement.claims[0].nodes, 2);
        assert_eq!(judgement.claims[0].ttl, Some(Duration::from_secs(10)));
    }

    #[test]
    fn free_once_no_token_can_reach_a_quorum() {
        assert_eq!(
            outcome(&[empty(), NodeState::Pending, NodeState::Pending]),
            None
        );
        assert_eq!(
            outcome(&[empty(), empty(), NodeState::Pending]),
            Some((Verdict::Free, None))
        );
        // One holds a token, one holds nothing: the third decides.
        assert_eq!(outcome(&[lock("a"), empty(), NodeState::Pending]), None);
        assert_eq!(
            outcome(&[lock("a"), empty(), empty()]),
            Some((Verdict::Free, None))
        );
    }

    #[test]
    fn failed_nodes_that_could_hold_a_quorums_token_make_it_unknown() {
        assert_eq!(
            outcome(&[lock("a"), failed(), failed()]),
            Some((Verdict::Unknown, None))
        );
        assert_eq!(
            outcome(&[empty(), failed(), failed()]),
            Some((Verdict::Unknown, None))
        );
        // With one node failed a token on one other can still be on two.
        assert_eq!(
            outcome(&[lock("a"), empty(), failed()]),
            Some((Verdict::Unknown, None))
        );
        assert_eq!(
            outcome(&[empty(), empty(), failed()]),
            Some((Verdict::Free, None))
        );
        // Five nodes, one failed, one pending: the pending one decides.
        let states = [lock("a"), lock("a"), empty(), failed(), NodeState::Pending];
        assert_eq!(outcome(&states), None);
    }

    #[test]
    fn an_elections_leader_waits_for_its_value_while_nodes_are_pending() {
        let value_elsewhere = [
            lock("a"),
            lock("a"),
            NodeState::Pending,
            proclaimed("old", 1, 0, "x"),
            NodeState::Pending,
        ];
        assert_eq!(outcome(&value_elsewhere), None);
        let led = [
            proclaimed("a", 2, 0, "x"),
            proclaimed("a", 2, 1, "y"),
            lock("a"),
            NodeState::Pending,
            NodeState::Pending,
        ];
        assert_eq!(outcome(&led), Some((Verdict::Held, Some("a".to_owned()))));
        let judgement = judge(&led, 3);
        assert_eq!(judgement.kind, Some(ResourceKind::Election));
        let leader = judgement.leader.expect("a leader");
        assert_eq!(
            (leader.term, leader.revision, leader.value.as_str()),
            (2, 1, "y")
        );
        // A plain lock does not wait for a value.
        let plain = [
            lock("a"),
            lock("a"),
            lock("a"),
            NodeState::Pending,
            NodeState::Pending,
        ];
        assert_eq!(outcome(&plain), Some((Verdict::Held, Some("a".to_owned()))));
    }

    #[test]
    fn the_last_leader_is_the_highest_term_kept() {
        let states = [
            NodeState::Answered(Stored {
                leader: Some(Proclaimed {
                    token: token("old"),
                    term: 3,
                    revision: 4,
                    value: "x".to_owned(),
                }),
                ..Stored::default()
            }),
            proclaimed("new", 4, 0, "y"),
            empty(),
        ];
        let judgement = judge(&states, Q3);
        assert!(judgement.decided);
        assert_eq!(judgement.verdict, Verdict::Free);
        assert_eq!(judgement.last_leader.map(|l| l.term), Some(4));
    }

    #[test]
    fn permits_and_readers_are_each_judged_on_their_own() {
        let node = |permits: &[(u32, &str)], readers: &[&str]| {
            NodeState::Answered(Stored {
                permit_count: Some(3),
                permits: permits
                    .iter()
                    .map(|&(slot, t)| HeldPermit {
                        slot,
                        holder: held(t),
                    })
                    .collect(),
                readers: readers.iter().map(|t| held(t)).collect(),
                ..Stored::default()
            })
        };
        let states = [
            node(&[(0, "a"), (1, "b")], &["r", "s"]),
            node(&[(0, "a"), (1, "c")], &["r"]),
            node(&[(0, "a")], &["s"]),
        ];
        let judgement = judge(&states, Q3);
        assert!(judgement.decided);
        assert_eq!(judgement.verdict, Verdict::Held);
        assert_eq!(judgement.kind, Some(ResourceKind::Semaphore));
        assert_eq!(judgement.permit_count, Some(3));
        let confirmed: Vec<(Claimed, &str)> = judgement
            .claims
            .iter()
            .filter(|c| c.confirmed)
            .map(|c| (c.what, &*c.token.0))
            .collect();
        assert_eq!(
            confirmed,
            [
                (Claimed::Permit(0), "a"),
                (Claimed::Reader, "r"),
                (Claimed::Reader, "s")
            ]
        );
        // A second permit on one node of two, the third to answer: open.
        let open = [
            node(&[(0, "a"), (1, "b")], &[]),
            node(&[(0, "a")], &[]),
            NodeState::Pending,
        ];
        assert_eq!(outcome(&open), None);
    }

    #[test]
    fn quorum_ttl_is_the_quorum_th_longest() {
        let ms = |v: u64| Some(Duration::from_millis(v));
        assert_eq!(
            quorum_ttl(&[ms(900), ms(500), ms(700)], 2),
            Some(Duration::from_millis(700))
        );
        assert_eq!(quorum_ttl(&[ms(900), None], 1), None);
        assert_eq!(quorum_ttl(&[ms(900)], 2), None);
        assert_eq!(quorum_ttl(&[ms(900)], 0), None);
    }

    #[test]
    fn tokens_show_four_characters() {
        let seen = token("0123456789abcdef");
        assert_eq!(seen.to_string(), "0123…");
        assert_eq!(format!("{seen:?}"), "SeenToken(0123…)");
        assert_eq!(token("ab").to_string(), "ab…");
        assert_eq!(token("äöüßx").prefix(), "äöüß");
        let real = Token::generate().expect("random source");
        assert!(SeenToken(real.as_str().into()).is(&real));
        assert!(!seen.is(&real));
    }

    /// What a node that answered can say: nothing, or one of two tokens,
    /// with or without a value.
    fn sayings() -> Vec<NodeState> {
        let mut out = vec![empty()];
        for t in ["a", "b"] {
            out.push(lock(t));
            out.push(proclaimed(t, 1, 0, "v"));
        }
        out
    }

    /// Every way `nodes` nodes can each pick one of `options`.
    fn patterns<T: Clone>(nodes: usize, options: &[T]) -> Vec<Vec<T>> {
        let mut out = vec![Vec::new()];
        for _ in 0..nodes {
            out = out
                .into_iter()
                .flat_map(|pattern| {
                    options.iter().map(move |option| {
                        let mut next = pattern.clone();
                        next.push(option.clone());
                        next
                    })
                })
                .collect();
        }
        out
    }

    #[test]
    fn a_verdict_is_what_every_answer_the_failed_nodes_could_have_given_agrees_on() {
        let said = sayings();
        let outcomes: Vec<NodeState> = said.iter().cloned().chain([failed()]).collect();
        for nodes in 1..=5 {
            for states in patterns(nodes, &outcomes) {
                let failed: Vec<usize> = (0..nodes)
                    .filter(|&i| matches!(states[i], NodeState::Failed(_)))
                    .collect();
                let mut truths = Vec::new();
                for hidden in patterns(failed.len(), &said) {
                    let mut whole = states.clone();
                    for (&i, state) in failed.iter().zip(hidden) {
                        whole[i] = state;
                    }
                    let truth = outcome(&whole).expect("every node answered");
                    if !truths.contains(&truth) {
                        truths.push(truth);
                    }
                }
                let expected = match truths.as_slice() {
                    [one] => one.clone(),
                    _ => (Verdict::Unknown, None),
                };
                // A holder is held whatever the failed nodes hold.
                let got = outcome(&states).expect("none pending");
                if got.0 == Verdict::Held {
                    assert!(truths.iter().all(|t| *t == got), "{states:?}");
                } else {
                    assert_eq!(got, expected, "{states:?}");
                }
            }
        }
    }

    #[test]
    fn once_decided_a_verdict_stands_whatever_the_pending_nodes_say() {
        let outcomes: Vec<NodeState> = sayings().into_iter().chain([failed()]).collect();
        let picks: Vec<NodeState> = outcomes
            .iter()
            .cloned()
            .chain([NodeState::Pending])
            .collect();
        for nodes in 1..=5 {
            for states in patterns(nodes, &picks) {
                let waiting: Vec<usize> = (0..nodes)
                    .filter(|&i| matches!(states[i], NodeState::Pending))
                    .collect();
                let Some(decided) = outcome(&states) else {
                    assert!(
                        !waiting.is_empty(),
                        "{states:?}: undecided with every answer in"
                    );
                    continue;
                };
                for fill in patterns(waiting.len(), &outcomes) {
                    let mut filled = states.clone();
                    for (&i, state) in waiting.iter().zip(fill) {
                        filled[i] = state;
                    }
                    assert_eq!(
                        outcome(&filled),
                        Some(decided.clone()),
                        "{states:?} then {filled:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn replies_are_parsed_in_both_protocols() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let flat = Value::Array(vec![bulk("r1"), bulk("1500"), bulk("r2"), bulk("2500.5")]);
        assert_eq!(
            scored(flat).expect("resp2"),
            [("r1".to_owned(), 1500.0), ("r2".to_owned(), 2500.5)]
        );
        let pairs = Value::Array(vec![Value::Array(vec![bulk("r1"), Value::Double(1500.0)])]);
        assert_eq!(scored(pairs).expect("resp3"), [("r1".to_owned(), 1500.0)]);
        assert!(scored(Value::Array(vec![bulk("r1")])).is_err());
        assert_eq!(
            clock(Value::Array(vec![bulk("12"), bulk("345678")])).expect("time"),
            12_345
        );
        let fields = Value::Array(vec![bulk("tok"), bulk("7"), bulk("2"), bulk("web")]);
        let leader = super::proclaimed(fields).expect("hmget").expect("complete");
        assert_eq!(
            (leader.term, leader.revision, leader.value.as_str()),
            (7, 2, "web")
        );
        let partial = Value::Array(vec![bulk("tok"), Value::Nil, bulk("2"), bulk("web")]);
        assert_eq!(super::proclaimed(partial).expect("hmget"), None);
        assert_eq!(holder(&Value::Nil, -2).expect("absent"), None);
        let no_expiry = holder(&bulk("tok"), -1).expect("held").expect("a holder");
        assert_eq!(no_expiry.ttl, None);
        assert_eq!(holder(&bulk("tok"), -2).expect("gone"), None);
    }

    #[test]
    fn errors_about_replies_never_show_them() {
        let error = integer(Value::BulkString(b"0123456789abcdef".to_vec()), "PTTL")
            .expect_err("not a number");
        assert!(!error.to_string().contains("0123"), "{error}");
    }
}
