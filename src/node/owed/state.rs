//! A node's debts as `Node` keeps them ([`Owed`], its `owed` field): the
//! releases it is owed ([`Debt`]), bounded at [`MOST`], and taken in
//! batches for a payment. Nothing here needs the node, so `node/mod.rs`
//! holds an `Owed` without importing the file that owes and pays the
//! debts (this folder's `mod.rs`), which uses `Node`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::contract::ShapeRef;
use crate::request::Keys;
use crate::token::Token;

/// The most debts a node keeps.
pub(crate) const MOST: usize = 10_000;

/// The most debts paid in one pipeline: a node that owes more pays them
/// in several, each bounded by the node timeout.
const BATCH: usize = 512;

/// One owed release: an ended holding's keys, token and shape.
#[derive(Debug, Clone)]
pub(crate) struct Debt {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) shape: ShapeRef,
}

/// A node's debts.
#[derive(Debug, Default)]
pub(crate) struct Owed {
    /// Whether any debt is kept: the one load on a request's path.
    any: AtomicBool,
    debts: Mutex<VecDeque<Debt>>,
    /// Wakes the node's prober to pay now (see
    /// [`Node::gate`](crate::node::Node::gate)).
    pub(super) kicked: Arc<Notify>,
    /// Debts were dropped since the node last paid all it owed.
    pub(super) overflowing: AtomicBool,
}

impl Owed {
    /// Whether the node owes anything.
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    fn debts(&self) -> std::sync::MutexGuard<'_, VecDeque<Debt>> {
        self.debts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `debt`; the oldest is dropped past [`MOST`] (returned).
    pub(super) fn keep(&self, debt: Debt) -> Option<Debt> {
        let mut debts = self.debts();
        let dropped = (debts.len() >= MOST).then(|| debts.pop_front()).flatten();
        debts.push_back(debt);
        self.any.store(true, Ordering::Release);
        dropped
    }

    /// Takes up to [`BATCH`] debts, oldest first, for a payment.
    pub(super) fn take(&self) -> Vec<Debt> {
        let mut debts = self.debts();
        let n = debts.len().min(BATCH);
        let taken: Vec<Debt> = debts.drain(..n).collect();
        self.any.store(!debts.is_empty(), Ordering::Release);
        taken
    }

    /// Keeps again what a payment did not get answered, ahead of what
    /// came meanwhile.
    fn restore(&self, unpaid: Vec<Debt>) {
        if unpaid.is_empty() {
            return;
        }
        let mut debts = self.debts();
        for debt in unpaid.into_iter().rev() {
            if debts.len() >= MOST {
                break;
            }
            debts.push_front(debt);
        }
        self.any.store(true, Ordering::Release);
    }

    /// How many debts are kept.
    pub(super) fn len(&self) -> usize {
        self.debts().len()
    }
}

/// Debts taken for a payment: kept again if the payment is dropped before
/// its answers (its caller gave up), so that none is lost.
pub(super) struct Taken<'a> {
    pub(super) owed: &'a Owed,
    pub(super) debts: Vec<Debt>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.owed.restore(std::mem::take(&mut self.debts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn debt(n: usize) -> Debt {
        Debt {
            keys: std::sync::Arc::new([format!("k{n}").into()]),
            token: Token::generate().expect("random source"),
            shape: crate::contract::ShapeRef::LOCK,
        }
    }

    fn first_key(debts: &[Debt]) -> Option<String> {
        debts
            .first()
            .and_then(|d| d.keys.first())
            .map(ToString::to_string)
    }

    #[test]
    fn debts_are_bounded_oldest_dropped_and_taken_in_batches() {
        let owed = Owed::default();
        assert!(!owed.any());
        for n in 0..MOST {
            assert!(owed.keep(debt(n)).is_none());
        }
        assert!(owed.any());
        // Past the bound, the oldest goes.
        let dropped = owed.keep(debt(MOST)).expect("the oldest dropped");
        assert_eq!(&*dropped.keys[0], "k0");
        assert_eq!(owed.len(), MOST);
        let taken = owed.take();
        assert_eq!(taken.len(), BATCH);
        assert_eq!(first_key(&taken).as_deref(), Some("k1"));
        assert_eq!(owed.len(), MOST - BATCH);
        // What a payment did not get answered goes back first.
        owed.restore(taken);
        assert_eq!(owed.len(), MOST);
        assert_eq!(first_key(&owed.take()).as_deref(), Some("k1"));
        while !owed.take().is_empty() {}
        assert!(!owed.any());
    }

    #[test]
    fn debts_taken_by_a_payment_that_is_dropped_are_kept() {
        let owed = Owed::default();
        owed.keep(debt(1));
        let taken = Taken {
            owed: &owed,
            debts: owed.take(),
        };
        assert!(!owed.any());
        drop(taken);
        assert!(owed.any());
        assert_eq!(owed.len(), 1);
    }
}
