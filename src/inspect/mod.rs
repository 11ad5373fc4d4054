//! [`Redlock::inspect`]: what the nodes keep under a resource name — a
//! lock, a semaphore's permits, a reader-writer lock, an election — read on
//! every node with plain read commands through the round engine, and what
//! a quorum of them confirms ([`Inspection`]).
//!
//! The reads are one fan-out on the engine, decided by [`judge`]: it
//! returns once no answer still to come can change the verdict, and the
//! engine follows the other nodes in the background, for
//! [`Inspection::settled`].
//!
//! - this file: the call, its decision rule on the engine, and the
//!   following of the nodes after the decision;
//! - `read`: one node's read: the reads every primitive describes in its
//!   own folder (a `contract::Reads`, each listed once in `read`'s
//!   `PRIMITIVES`), sent together, and what they decode kept as the
//!   node's [`Stored`];
//! - `verdict`: the quorum verdict on the answers so far (pure);
//! - `types`: the public result ([`Inspection`] and what it holds).

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{ArgumentError, Error, NodeError, NodeFailure};
use crate::keys::Layout;
use crate::quorum::decide::Decide;
use crate::redlock::Redlock;
use crate::round::{Core, Traced, fan_out_with, follow, shallow};

mod answers;
mod inspection;
mod read;
mod serves;
mod verdict;

pub use crate::contract::stored::{
    Claim, Claimed, HeldPermit, Holder, InspectedNode, NodeState, Proclaimed, ResourceKind,
    SeenToken, Stored, Verdict,
};
use answers::{Following, Shared, path_of};
pub use inspection::Inspection;
use read::read;
use verdict::judge;

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
        Ok(shallow(inspect(&manager.core, name.into(), layout).instrument(span)).await)
    }
}

/// Reads `layout`'s keys on every node of `core` and decides.
async fn inspect(core: &Arc<Core>, resource: Arc<str>, layout: Arc<Layout>) -> Inspection {
    let deadline = core.timeout_from(Instant::now());
    let (looking, stragglers) = fan_out_with(
        core.nodes(),
        "inspect",
        deadline,
        Looking::new(core.len(), core.quorum()),
        |i, _, deadline| read(core.clone(), layout.clone(), i, deadline),
    )
    .await;
    let in_flight: Vec<usize> = stragglers.nodes().collect();
    let shared = Arc::new(Shared::new(looking.states, &in_flight));
    let (changed, changes) = watch::channel(());
    let follower = shared.clone();
    let nodes = Arc::downgrade(core);
    follow(core, "inspect", stragglers, move |node, answer| {
        // Known once the node answered: it is asked beside the first read.
        let path = nodes.upgrade().and_then(|core| path_of(&core, node));
        follower.settle(node, answer, path);
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
                value = kept.value.is_some(),
                slots = kept.slots.len(),
                exclusive = kept.exclusive.is_some(),
                shared = kept.shared.len(),
            ),
            Err(error) => tracing::debug!(op, node, late, error = %error, "node failed"),
        }
    }
}
