//! What every round of a manager holds ([`Core`]) and what a held lock is
//! on the nodes ([`Holding`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::contract::{Extension, ShapeRef};
use crate::error::{ConfigError, Error, NodeError};
use crate::node::{Lanes, Node, OnNode, Servers, identify, nth, watch};
use crate::quorum::{Window, drift};
use crate::request::{Keys, Ttl};
use crate::round::follower::Followers;
use crate::round::tasks::Background;
use crate::token::Token;

/// What every round of a manager needs: the nodes, how long each may take,
/// the drift allowance, and the tasks that outlive a caller (cleanups,
/// releases of dropped guards, requests still in flight after a decision).
/// Guards, the renewer and the wake-ups hold it (`Arc` or `Weak`) rather
/// than the manager. Read through its methods: the nodes and one node
/// ([`node`](Self::node)), the deadlines of requests
/// ([`timeout_from`](Self::timeout_from)), a lock's validity
/// ([`window`](Self::window)).
#[derive(Debug)]
pub(crate) struct Core {
    nodes: Arc<[Node]>,
    /// Each node's queue of plain lock requests (group commit).
    lanes: Arc<Lanes>,
    node_timeout: Duration,
    drift_factor: f64,
    /// Whether releases announce themselves on the keys' channels, for the
    /// waiters of [`WakeOnRelease::Subscribe`](crate::WakeOnRelease).
    announce: bool,
    background: Arc<Background>,
    /// Each node's follower of requests still in flight after their call
    /// returned.
    followers: Followers,
    /// Which server each node reaches (one server, one vote).
    servers: Arc<Servers>,
}

impl Core {
    pub(crate) fn new(
        nodes: Vec<Node>,
        node_timeout: Duration,
        drift_factor: f64,
        announce: bool,
    ) -> Self {
        let nodes: Arc<[Node]> = nodes.into();
        // A node that stops answering is not asked until a probe answers.
        watch(&nodes, node_timeout);
        let servers = identify(&nodes);
        let background: Arc<Background> = Arc::default();
        Self {
            lanes: Lanes::new(nodes.clone(), Box::new(background.clone())),
            followers: Followers::new(nodes.len(), background.clone()),
            nodes,
            node_timeout,
            drift_factor,
            announce,
            background,
            servers,
        }
    }

    /// Why the manager may not acquire: two of its nodes were found to
    /// reach one server (see `node::identity`).
    pub(crate) fn misconfigured(&self) -> Option<ConfigError> {
        self.servers.clash()
    }

    /// The nodes, in the order the manager was given them: node `i` of a
    /// round is `nodes()[i]`.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// How many nodes there are: `N`.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i`, for a request to it (an error, for a request to fail with,
    /// if there is none).
    pub(crate) fn node(&self, i: usize) -> Result<&Node, NodeError> {
        nth(&self.nodes, i)
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub(crate) fn quorum(&self) -> usize {
        crate::quorum::quorum(self.len())
    }

    /// How long one request to a node may take.
    pub(crate) fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// The clock drift allowance, as a share of a ttl (see
    /// [`drift`](crate::quorum::drift)): for the configuration's reports and
    /// for checking a ttl against it.
    pub(crate) fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// A caller's `ttl`, checked against this manager's drift allowance
    /// (see [`Ttl::new`]).
    pub(crate) fn ttl(&self, ttl: Duration) -> Result<Ttl, Error> {
        Ttl::new(ttl, self.drift_factor)
    }

    /// The validity window of a lock with `ttl` whose request began at
    /// `start`: the ttl less the drift allowance.
    pub(crate) fn window(&self, start: Instant, ttl: Ttl) -> Window {
        Window::new(start, ttl.duration(), self.drift_factor)
    }

    /// The most validity a lock with `ttl` can have: the ttl less the drift
    /// allowance, the length of its [`window`](Self::window).
    pub(crate) fn validity(&self, ttl: Ttl) -> Duration {
        let ttl = ttl.duration();
        ttl.saturating_sub(drift(ttl, self.drift_factor))
    }

    /// Each node's queue of plain lock requests (group commit).
    pub(crate) fn lanes(&self) -> &Arc<Lanes> {
        &self.lanes
    }

    /// Whether releases announce themselves on the keys' channels.
    pub(crate) fn announces(&self) -> bool {
        self.announce
    }

    /// The tasks that outlive a caller.
    pub(crate) fn background(&self) -> &Arc<Background> {
        &self.background
    }

    /// Each node's follower of requests still in flight.
    pub(crate) fn followers(&self) -> &Followers {
        &self.followers
    }

    /// The nodes, shared, for what outlives a call.
    pub(crate) fn shared_nodes(&self) -> &Arc<[Node]> {
        &self.nodes
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
        self.node(node).map_or("?", |n| &**n.label())
    }
}

/// The pub/sub service reaches the nodes through the core, held weakly.
impl crate::node::pubsub::Nodes for Core {
    fn node(&self, i: usize) -> Result<&Node, NodeError> {
        Core::node(self, i)
    }

    fn node_timeout(&self) -> Duration {
        Core::node_timeout(self)
    }
}

/// What a held (or half-acquired) holding is on the nodes: its keys and
/// token, and its shape (which carries whatever else its primitive keeps
/// with it: a fenced lock's counter and fence). Extending and releasing
/// are described here, for every primitive.
#[derive(Debug, Clone)]
pub(crate) struct Holding {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) shape: ShapeRef,
}

impl Holding {
    /// What an extension (or renewal) with `ttl` asks of a node.
    pub(crate) fn extension(&self, ttl: Ttl) -> Extension<'_> {
        Extension {
            keys: &self.keys,
            token: self.token.as_str(),
            ttl,
            shape: &*self.shape,
        }
    }

    /// What the group-commit lanes need of it (see
    /// [`Lanes::send_or`]).
    pub(crate) fn on_node(&self) -> OnNode<'_> {
        OnNode {
            keys: &self.keys,
            token: &self.token,
            shape: &self.shape,
        }
    }

    /// The fence its guard shows, if its shape has one (a fenced lock's).
    pub(crate) fn fence(&self) -> Option<u64> {
        self.shape.fence()
    }
}
