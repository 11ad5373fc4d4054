//! What every round of a manager holds ([`Core`]) and what a held lock is
//! on the nodes ([`Holding`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::coalesce::Lanes;
use crate::node::{Extension, Node, ShapeRef};
use crate::request::Keys;
use crate::tasks::Background;
use crate::token::Token;

/// What every round of a manager needs: the nodes, how long each may take,
/// the drift allowance, and the tasks that outlive a caller (cleanups,
/// releases of dropped guards, requests still in flight after a decision).
/// Guards, the renewer and the wake-ups hold it (`Arc` or `Weak`) rather
/// than the manager.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) nodes: Arc<[Node]>,
    /// Each node's queue of plain lock requests (group commit).
    pub(crate) lanes: Arc<Lanes>,
    pub(crate) node_timeout: Duration,
    pub(crate) drift_factor: f64,
    /// Whether releases announce themselves on the keys' channels, for the
    /// waiters of [`WakeOnRelease::Subscribe`](crate::WakeOnRelease).
    pub(crate) announce: bool,
    pub(crate) background: Arc<Background>,
}

impl Core {
    pub(crate) fn new(
        nodes: Vec<Node>,
        node_timeout: Duration,
        drift_factor: f64,
        announce: bool,
    ) -> Self {
        let nodes: Arc<[Node]> = nodes.into();
        let background: Arc<Background> = Arc::default();
        Self {
            lanes: Lanes::new(nodes.clone(), background.clone()),
            nodes,
            node_timeout,
            drift_factor,
            announce,
            background,
        }
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub(crate) fn quorum(&self) -> usize {
        crate::quorum::quorum(self.nodes.len())
    }

    /// When a request to the nodes begun at `start` stops waiting for
    /// them: the node timeout after it.
    pub(crate) fn timeout_from(&self, start: Instant) -> Instant {
        start + self.node_timeout
    }

    /// [`timeout_from`](Self::timeout_from), or `cap` (the deadline of
    /// the lock the request is about) if that comes first.
    pub(crate) fn timeout_within(&self, start: Instant, cap: Instant) -> Instant {
        self.timeout_from(start).min(cap)
    }

    /// Node `i`'s label, for logs.
    pub(crate) fn label(&self, node: usize) -> &str {
        self.nodes.get(node).map_or("?", |n| &**n.label())
    }
}

/// What a held (or half-acquired) lock is on the nodes: its keys and token,
/// and for a fenced lock its counter's key and fence. Extending and
/// releasing a lock are described here, for every primitive.
#[derive(Debug, Clone)]
pub(crate) struct Holding {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) fence: Option<(Arc<str>, u64)>,
    pub(crate) shape: ShapeRef,
}

impl Holding {
    /// What an extension (or renewal) with `ttl_ms` asks of a node.
    pub(crate) fn extension(&self, ttl_ms: u64) -> Extension<'_> {
        Extension {
            keys: &self.keys,
            token: self.token.as_str(),
            ttl_ms,
            fence: self.fence.as_ref().map(|(key, fence)| (&**key, *fence)),
            shape: &*self.shape,
        }
    }

    /// The fence of a fenced lock.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.fence.as_ref().map(|&(_, fence)| fence)
    }
}
