//! A node's identity as `Node` keeps it ([`Identity`], its `identity`
//! field: whether its server is learned, unchecked or refused on the
//! current connection), and the table of servers a manager's nodes share
//! ([`Servers`]). Nothing here needs the node, so `node/mod.rs` holds an
//! `Identity` without importing the file that learns it (this folder's
//! `mod.rs`), which uses `Node`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{ConfigError, NodeError};

/// Not learned on the current connection.
pub(super) const UNKNOWN: u8 = 0;
/// Learned, and no other node reaches its server.
pub(super) const KNOWN: u8 = 1;
/// Cannot be learned (a cluster node, or a user denied `INFO`): counted
/// unchecked.
pub(super) const UNCHECKED: u8 = 2;
/// Another node reaches its server: never counted again.
pub(super) const REFUSED: u8 = 3;

/// What a manager's nodes share: each node's server as last learned, and
/// the first two nodes found to reach one server.
#[derive(Debug)]
pub(crate) struct Servers {
    pub(super) labels: Box<[Arc<str>]>,
    pub(super) run_ids: Mutex<Box<[Option<Arc<str>>]>>,
    /// `(first, second)`: node `second` reaches node `first`'s server.
    pub(super) clash: OnceLock<(usize, usize)>,
}

/// What learning a node's `run_id` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Learned {
    /// The server it reached before, or its first.
    Same,
    /// Another server than last time: the node restarted (or its name
    /// moved).
    Restarted,
    /// The server another node reaches (that node's label): refused.
    Refused(Arc<str>),
}

impl Servers {
    /// The configuration error, once two nodes were found to reach one
    /// server: naming them in the configuration's order, whichever
    /// answered first (which one is refused follows the answers; the
    /// error reads the same whatever order they came in).
    pub(crate) fn clash(&self) -> Option<ConfigError> {
        let &(a, b) = self.clash.get()?;
        let (first, second) = (a.min(b), a.max(b));
        let label = |i: usize| self.labels.get(i).map(ToString::to_string);
        Some(ConfigError::SameServer {
            first: label(first)?,
            second: label(second)?,
            why: "same run_id",
        })
    }

    /// Records that node `node` reaches the server `run_id`.
    pub(super) fn record(&self, node: usize, run_id: &str) -> Learned {
        let mut run_ids = self.run_ids.lock().unwrap_or_else(|e| e.into_inner());
        let other = run_ids
            .iter()
            .enumerate()
            .find(|&(i, seen)| i != node && seen.as_deref() == Some(run_id))
            .map(|(i, _)| i);
        if let Some(first) = other {
            let _ = self.clash.set((first, node));
            let label = self.labels.get(first).cloned().unwrap_or_default();
            return Learned::Refused(label);
        }
        let Some(slot) = run_ids.get_mut(node) else {
            return Learned::Same;
        };
        let before = slot.replace(run_id.into());
        match before {
            Some(before) if *before != *run_id => Learned::Restarted,
            _ => Learned::Same,
        }
    }
}

/// A node's identity on its current connection.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    pub(super) state: AtomicU8,
    /// Its manager's table, and its place there; unset (a node of no
    /// manager), nothing is compared.
    pub(super) servers: OnceLock<(Arc<Servers>, usize)>,
    /// The other node, once refused.
    pub(super) refused_for: OnceLock<Arc<str>>,
}

impl Identity {
    /// A cluster node's: its members are not compared by `run_id`.
    pub(crate) fn unchecked() -> Self {
        Self {
            state: AtomicU8::new(UNCHECKED),
            ..Self::default()
        }
    }

    /// Whether there is nothing left to learn on this connection.
    pub(crate) fn settled(&self) -> bool {
        self.state.load(Ordering::Acquire) != UNKNOWN
    }

    /// The error for a request to a refused node; `None` otherwise.
    pub(crate) fn refusal(&self) -> Option<NodeError> {
        if self.state.load(Ordering::Acquire) != REFUSED {
            return None;
        }
        Some(NodeError::SameServer {
            other: self
                .refused_for
                .get()
                .map_or_else(String::new, ToString::to_string),
        })
    }

    /// The connection dropped: the next one may reach another server.
    pub(crate) fn forget(&self) {
        let _ = self
            .state
            .compare_exchange(KNOWN, UNKNOWN, Ordering::AcqRel, Ordering::Acquire);
    }
}
