//! The nodes' answers to an inspection as they come: the decision's, then
//! those of the reads still followed after it, shared by their follower and
//! the [`Inspection`](super::Inspection).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::contract::stored::{NodeState, Stored};
use crate::error::NodeError;
use crate::round::Core;

/// How `core`'s node `i` releases and extends plain locks, if it said.
pub(super) fn path_of(core: &Core, i: usize) -> Option<String> {
    core.node(i)
        .ok()
        .and_then(|n| n.capabilities())
        .map(|caps| caps.describe())
}

/// What the nodes said, as they say it: the decision's answers, then those
/// of the nodes followed after it. Shared by their follower and the
/// [`Inspection`].
#[derive(Debug)]
pub(super) struct Shared {
    nodes: Mutex<Vec<Slot>>,
}

#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) state: NodeState,
    /// How the node takes plain locks, once it answered a late read.
    pub(super) path: Option<String>,
    /// The node's read has ended: it answered, or failed for good (not
    /// merely not waited for).
    pub(super) settled: bool,
}

impl Shared {
    /// The answers at the decision; the reads to `in_flight` go on.
    pub(super) fn new(states: Vec<NodeState>, in_flight: &[usize]) -> Self {
        let slots = states
            .into_iter()
            .enumerate()
            .map(|(i, state)| Slot {
                state,
                path: None,
                settled: !in_flight.contains(&i),
            })
            .collect();
        Self {
            nodes: Mutex::new(slots),
        }
    }

    pub(super) fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn all_settled(&self) -> bool {
        self.slots().iter().all(|s| s.settled)
    }

    /// A followed read ended.
    pub(super) fn settle(
        &self,
        node: usize,
        answer: Result<Stored, NodeError>,
        path: Option<String>,
    ) {
        if let Some(slot) = self.slots().get_mut(node) {
            slot.settled = true;
            slot.path = path;
            slot.state = match answer {
                Ok(stored) => NodeState::Answered(stored),
                Err(error) => NodeState::Failed(error),
            };
        }
    }

    /// Nobody follows the reads still in flight: they count as failed.
    pub(super) fn abandon(&self) {
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
pub(super) struct Following {
    pub(super) shared: Arc<Shared>,
    pub(super) changes: watch::Receiver<()>,
}
