//! Owed releases: the token-checked deletes a node was owed and did not
//! get, delivered before it is asked anything again.
//!
//! A request a node did not answer may still run on it: a frozen node runs
//! its socket's backlog when it thaws, a partition delivers late, a node
//! killed and restarted brings back what it persisted. So when the release
//! of a holding that has ended (released, lost, given up, a failed
//! attempt's cleanup) gets no answer from a node — it timed out, its
//! connection failed, or the node was not asked (see `health`) — the node
//! is owed that release: the holding's keys, token and [`Shape`], kept
//! here. A debt is only ever a token-checked release of a holding that
//! has ended, so paying it twice, or paying one the node no longer needs,
//! deletes nothing but that holding's own token.
//!
//! Paid by the node's prober (`health`), in its own task, pipelined on
//! the node's connection (each debt's release as the node releases that
//! shape: natively or by its script):
//!
//! - a node that is not asked is paid right after a probe answers (or a
//!   late answer wakes the prober), and asked again once that payment has
//!   had its answers: nothing new reaches it before what it was owed,
//!   which is on its connection first whatever the answers (a release that
//!   timed out there is kept, and paid again later). What it is owed while
//!   not asked is for requests never sent to it, so the payment does not
//!   wait for those: they follow in the next turn;
//! - a node that stayed asked (a restart refuses connections, it does not
//!   time out; a release that timed out on a loaded node) is paid as soon
//!   as it answers: a request to a node that owes wakes its prober, which
//!   then pays at once rather than after its backoff. A request racing
//!   that payment may find a released key still there and be refused
//!   once; the retry after it is not.
//!
//! Bounded: at most [`MOST`] debts per node (about 100 bytes each beside
//! the keys, which the holding shares). Past that the oldest is dropped,
//! counted (`quorumlock_owed_dropped_total`) and logged: its key expires
//! by its ttl, as every key did before debts were kept.
//!
//! Split in two, so that `Node` can hold its debts without a circle of
//! imports: the debts (`state.rs`, which imports nothing of the node), and
//! here, owing and paying them (`impl Node`).

mod state;

pub(crate) use state::Debt;
pub(super) use state::Owed;

use std::sync::Arc;
#[cfg(feature = "testkit")]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use self::state::{MOST, Taken};
use crate::error::NodeError;
use crate::metrics;
use crate::node::run::{PAYING, paying};
use crate::node::{Heard, Node};

/// Whether releases a node did not answer are kept as debts for it: off
/// only in a test build's negative control (see
/// [`testkit::owed_releases`](crate::testkit::owed_releases)).
#[cfg(feature = "testkit")]
static KEPT: AtomicBool = AtomicBool::new(true);

/// Switches owed releases on or off for every node of the process (see
/// [`KEPT`]).
#[cfg(feature = "testkit")]
pub(crate) fn keep_owed_releases(on: bool) {
    KEPT.store(on, Ordering::Release);
}

impl Node {
    /// The node is owed the release of an ended holding, which it did not
    /// answer: kept until paid (see the module), and the node's prober
    /// started to pay it.
    pub(crate) fn owe(&self, debt: Debt) {
        if self.identity.refusal().is_some() {
            // Never asked anything: nothing to owe.
            return;
        }
        #[cfg(feature = "testkit")]
        if !KEPT.load(Ordering::Acquire) {
            return; // a test build's negative control
        }
        if self.owed.keep(debt).is_some() {
            metrics::owed_dropped(&self.label);
            // Once per overflow, not per debt dropped.
            if !self.owed.overflowing.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    node = %self.label,
                    most = MOST,
                    "too many releases owed to a node: the oldest are dropped, their keys expire by their ttl"
                );
            }
        }
        self.start_prober();
    }

    /// Pays what the node is owed when the payment starts (its prober
    /// does), each release bounded by `timeout`: `Ok` once those are paid;
    /// the error of a release that got no answer otherwise (those kept).
    /// What is owed meanwhile is left to the next payment: while a node
    /// is not asked every release owes it one, and a payment that waited
    /// for all of them would not end while calls go on.
    pub(super) async fn pay(&self, timeout: Duration) -> Result<(), NodeError> {
        let mut left = self.owed.len();
        while left > 0 && self.owed.any() {
            let mut taken = Taken {
                owed: &self.owed,
                debts: self.owed.take(),
            };
            left = left.saturating_sub(taken.debts.len());
            let deadline = Instant::now() + timeout;
            let releases = taken.debts.iter().map(|debt| {
                self.release(
                    &debt.keys,
                    &*debt.shape,
                    debt.token.as_str(),
                    None,
                    deadline,
                )
            });
            let answers = PAYING.scope((), futures::future::join_all(releases)).await;
            let mut unanswered = None;
            let mut paid = 0;
            let debts = std::mem::take(&mut taken.debts);
            for (debt, answer) in debts.into_iter().zip(answers) {
                if Heard::of(&answer) == Heard::Answer {
                    paid += 1;
                } else {
                    unanswered = unanswered.or(answer.err());
                    taken.debts.push(debt);
                }
            }
            drop(taken);
            if paid > 0 {
                metrics::owed_paid(&self.label, paid);
                tracing::debug!(node = %self.label, paid, "owed releases delivered");
            }
            if let Some(error) = unanswered {
                return Err(error);
            }
        }
        self.owed.overflowing.store(false, Ordering::Release);
        Ok(())
    }

    /// What holds a request back from this node, unless the request is a
    /// payment of its debts: another node reaches its server (refused), or
    /// it is not asked. A request to a node not asked, or to one that owes
    /// releases, wakes its prober to probe or pay now.
    pub(super) fn gate(&self) -> Result<(), NodeError> {
        if let Some(refused) = self.identity.refusal() {
            return Err(refused);
        }
        if paying() {
            return Ok(());
        }
        if let Some(not_asked) = self.not_asked() {
            return Err(not_asked);
        }
        if self.owed.any() {
            self.owed.kicked.notify_one();
        }
        Ok(())
    }

    /// What wakes this node's prober to pay now.
    pub(super) fn kicked(&self) -> Arc<Notify> {
        self.owed.kicked.clone()
    }
}
