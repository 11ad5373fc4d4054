//! Group commit per node: concurrent requests of plain (one-key, unfenced)
//! locks bound for the same node go out as one script call
//! (`batch.lua`), with an answer per request.
//!
//! No request waits for company. A node has at most one such call in
//! flight: a request that finds none goes out at once, alone, from its
//! caller's task; one that finds a call in flight queues, and everything
//! that queued goes out together as soon as that call answers. Under load
//! the batches grow by themselves; a lone caller pays nothing.
//!
//! A lone request holds its node's queue until its future is polled to
//! its answer or dropped: code that keeps a request's future without
//! polling it (a fan-out's stragglers) must follow it at once or drop it.
//!
//! Each request keeps its own deadline and its caller's cancellation: a
//! caller that gives up (its deadline passed, or its future was dropped)
//! stops waiting at once. Its acquire or extension, not yet sent, is then
//! never sent; a release still goes out, since whoever gave up on it still
//! wants the key gone. A slow node delays only its own batches. One node's
//! requests go out in the order they came (Redis runs one connection's
//! calls in order, and a batch runs its entries in order), so a release
//! queued behind an acquire of the same token runs after it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::NodeError;
use crate::node::{Deadline, Node, Single, SingleOp, within};
use crate::tasks::Background;
use crate::token::Token;

/// The most requests one call carries; the rest wait for the next one.
/// (A script blocks its node while it runs: about a microsecond an entry.)
const MOST: usize = 1024;

/// What a queued request asks (an owned [`SingleOp`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Acquire { ttl_ms: u64 },
    Release { announce: Option<Arc<str>> },
    Extend { ttl_ms: u64 },
}

impl Op {
    fn borrow(&self) -> SingleOp<'_> {
        match self {
            Op::Acquire { ttl_ms } => SingleOp::Acquire { ttl_ms: *ttl_ms },
            Op::Release { announce } => SingleOp::Release {
                announce: announce.as_deref(),
            },
            Op::Extend { ttl_ms } => SingleOp::Extend { ttl_ms: *ttl_ms },
        }
    }
}

/// A request waiting for its node's call in flight to answer.
struct Waiting {
    op: Op,
    key: Arc<str>,
    token: Token,
    deadline: Instant,
    /// How long its caller gave it, for its timeout error.
    given: Duration,
    reply: oneshot::Sender<Result<u8, NodeError>>,
}

impl Waiting {
    fn single(&self) -> Single<'_> {
        Single {
            op: self.op.borrow(),
            key: &self.key,
            token: self.token.as_str(),
        }
    }

    /// Whether it still goes out: a release always; an acquire or an
    /// extension only while its caller waits, within its deadline.
    fn wanted(&self, now: Instant) -> bool {
        matches!(self.op, Op::Release { .. }) || (!self.reply.is_closed() && self.deadline > now)
    }
}

/// One node's queue.
#[derive(Default)]
struct Lane {
    /// A call of this node is in flight (a lone request, or a batch).
    busy: bool,
    waiting: Vec<Waiting>,
}

/// Every node's queue, and what a batch needs to go out on its own.
pub(crate) struct Lanes {
    nodes: Arc<[Node]>,
    lanes: Box<[Mutex<Lane>]>,
    background: Arc<Background>,
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl Lanes {
    pub(crate) fn new(nodes: Arc<[Node]>, background: Arc<Background>) -> Arc<Self> {
        let lanes = nodes.iter().map(|_| Mutex::default()).collect();
        Arc::new(Self {
            nodes,
            lanes,
            background,
        })
    }

    fn lane(&self, node: usize) -> Option<MutexGuard<'_, Lane>> {
        let lane = self.lanes.get(node)?;
        Some(lane.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Sends one plain lock's request to node `node`: at once if the node
    /// has no call in flight, else with whatever else queued behind that
    /// call. Its status as `batch.lua` answers it (1 granted / deleted /
    /// extended, 2 restored, 0 refused).
    pub(crate) async fn send(
        self: &Arc<Self>,
        node: usize,
        op: Op,
        key: &Arc<str>,
        token: &Token,
        deadline: Deadline,
    ) -> Result<u8, NodeError> {
        let Some(target) = self.nodes.get(node) else {
            return Err(NodeError::UnexpectedReply("no such node".to_owned()));
        };
        let Some(answer) = self.queue(node, &op, key, token, deadline) else {
            // Hands what queues meanwhile to a batch when this call ends,
            // however it ends (a dropped caller included).
            let _turn = Turn::new(self, node);
            let request = Single {
                op: op.borrow(),
                key,
                token: token.as_str(),
            };
            return target.single(request, deadline).await;
        };
        within(deadline, async {
            answer.await.unwrap_or_else(|_| {
                Err(NodeError::UnexpectedReply(
                    "request dropped: the runtime is shutting down".to_owned(),
                ))
            })
        })
        .await
    }

    /// Queues the request if node `node` has a call in flight, returning
    /// where its answer will come; else marks the node busy and returns
    /// `None`: the caller sends it at once.
    fn queue(
        &self,
        node: usize,
        op: &Op,
        key: &Arc<str>,
        token: &Token,
        deadline: Deadline,
    ) -> Option<oneshot::Receiver<Result<u8, NodeError>>> {
        let mut lane = self.lane(node)?;
        if !lane.busy {
            lane.busy = true;
            return None;
        }
        let (reply, answer) = oneshot::channel();
        lane.waiting.push(Waiting {
            op: op.clone(),
            key: key.clone(),
            token: token.clone(),
            deadline: deadline.at(),
            given: deadline.at().saturating_duration_since(Instant::now()),
            reply,
        });
        Some(answer)
    }

    /// Sends `batch`, then whatever queued meanwhile, until the node's
    /// queue is empty.
    async fn flush(self: Arc<Self>, node: usize, mut batch: Vec<Waiting>) {
        let mut turn = Turn::new(&self, node);
        let Some(target) = self.nodes.get(node) else {
            return;
        };
        loop {
            let now = Instant::now();
            let (wanted, given_up): (Vec<_>, Vec<_>) =
                batch.drain(..).partition(|waiting| waiting.wanted(now));
            for waiting in given_up {
                let _ = waiting.reply.send(Err(NodeError::Timeout(waiting.given)));
            }
            batch = wanted;
            if let Some(deadline) = batch.iter().map(|w| w.deadline).max() {
                let requests: Vec<Single<'_>> = batch.iter().map(Waiting::single).collect();
                let answers = match &*requests {
                    [one] => vec![target.single(*one, deadline.into()).await],
                    _ => match target.batch(&requests, deadline.into()).await {
                        Ok(answers) => answers,
                        // The ACL refused some key before anything ran: each
                        // request alone, in order, gets its own answer.
                        Err(error) if is_key_refusal(&error) => {
                            let mut answers = Vec::with_capacity(requests.len());
                            for request in &requests {
                                answers.push(target.single(*request, deadline.into()).await);
                            }
                            answers
                        }
                        Err(error) => vec![Err(error); requests.len()],
                    },
                };
                drop(requests);
                for (waiting, answer) in batch.drain(..).zip(answers) {
                    // The caller may have stopped waiting.
                    let _ = waiting.reply.send(answer);
                }
            }
            match turn.next() {
                Some(next) => batch = next,
                None => return,
            }
        }
    }
}

/// Whether a call was refused for want of a key permission: Redis checks
/// a script's keys against the user's ACL before running it, so one key
/// out of the user's patterns refuses the whole batch.
fn is_key_refusal(error: &NodeError) -> bool {
    matches!(error, NodeError::Redis(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm))
}

/// A node's call in flight. When it ends, whatever queued behind it goes
/// out as the next batch, or the node is marked idle.
struct Turn {
    lanes: Arc<Lanes>,
    node: usize,
    /// The queue was found empty and the node marked idle.
    done: bool,
}

impl Turn {
    fn new(lanes: &Arc<Lanes>, node: usize) -> Self {
        Self {
            lanes: lanes.clone(),
            node,
            done: false,
        }
    }

    /// The next batch (at most [`MOST`] requests, oldest first), or `None`
    /// once the queue is empty and the node idle.
    fn next(&mut self) -> Option<Vec<Waiting>> {
        let mut lane = self.lanes.lane(self.node)?;
        if lane.waiting.is_empty() {
            lane.busy = false;
            self.done = true;
            return None;
        }
        let most = lane.waiting.len().min(MOST);
        let rest = lane.waiting.split_off(most);
        Some(std::mem::replace(&mut lane.waiting, rest))
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(batch) = self.next() else {
            return;
        };
        let (lanes, node) = (self.lanes.clone(), self.node);
        let spawned = self.lanes.background.spawn(lanes.flush(node, batch));
        if spawned.is_none() {
            // No runtime to send them: their callers get an error (the
            // senders are dropped with the batch) and the node is idle.
            if let Some(mut lane) = self.lanes.lane(self.node) {
                lane.busy = false;
            }
        }
    }
}
