//! A node's health as `Node` keeps it ([`Health`], its `health` field):
//! its timeouts in a row, whether it is not asked, and the fleet and
//! prober its manager gave it. Nothing here needs the node, so
//! `node/mod.rs` holds a `Health` without importing the file that reads
//! and changes it (this folder's `mod.rs`), which uses `Node`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::time::Instant;

/// Starts a node's prober; false where it cannot (no runtime).
pub(super) type StartProber = Box<dyn Fn() -> bool + Send + Sync>;

/// What a manager's nodes share: how many are not asked, and how many may
/// be — `N − Q`, the most a quorum can do without. More nodes silent at
/// once than that looks like a loaded machine rather than frozen nodes,
/// and asking them is the only way a call can still succeed.
#[derive(Debug)]
pub(super) struct Fleet {
    pub(super) not_asked: AtomicUsize,
    pub(super) most: usize,
}

/// What a manager sets on each of its nodes (see [`watch`](super::watch)).
pub(super) struct Watch {
    pub(super) fleet: Arc<Fleet>,
    pub(super) start: StartProber,
}

/// A node's health: its timeouts in a row, and while it is not asked,
/// since when and whether a prober runs.
#[derive(Default)]
pub(crate) struct Health {
    /// Requests in a row that timed out, with no answer since.
    pub(super) timeouts: AtomicU32,
    /// Whether it is not asked (holding one of its fleet's places).
    pub(super) not_asked: AtomicBool,
    /// When it stopped being asked.
    pub(super) since: Mutex<Option<Instant>>,
    /// Whether a prober task runs for it.
    pub(super) probing: AtomicBool,
    /// Its fleet and prober, set by the manager that owns the node; unset
    /// (a node of no manager), it is always asked.
    pub(super) watch: OnceLock<Watch>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("timeouts", &self.timeouts)
            .field("not_asked", &self.not_asked)
            .field("probing", &self.probing)
            .finish_non_exhaustive()
    }
}
