//! Group commit per node: concurrent requests of plain (one-key, unfenced)
//! locks bound for the same node go out as one script call
//! (`batch.lua`), with an answer per request.
//!
//! No request waits for company. Under light load a request goes out at
//! once, alone, from its caller's task, side by side with the node's other
//! calls in flight. Once a node has many in flight (heavy load), it takes
//! one call at a time: a request that finds a call in flight queues, and
//! everything that queued goes out together as soon as that call answers,
//! so the batches grow with the load. A small batch means the load is
//! light again (see [`Lane`] for the numbers and why).
//!
//! A lone request holds its place until its future is polled to its answer
//! or dropped: code that keeps a request's future without polling it (a
//! fan-out's stragglers) must follow it at once or drop it, or the node's
//! queue may wait behind it.
//!
//! Each request keeps its own deadline and its caller's cancellation: a
//! caller that gives up (its deadline passed, or its future was dropped)
//! stops waiting at once. Its acquire or extension, not yet sent, is then
//! never sent; a release still goes out within its deadline, since whoever
//! gave up on it still wants the key gone — past it, the node is far
//! behind and the release is shed (counted; its key expires by ttl), so
//! that a frozen node's queue cannot grow without bound. A slow node
//! delays only its own batches. One node's
//! requests go out in the order they came: nothing goes out alone while
//! anything is queued or a batch is not yet handed to the connection, Redis
//! runs one connection's calls in order, and a batch runs its entries in
//! order — so a release queued behind an acquire of the same token runs
//! after it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::NodeError;
use crate::lock::node::{Single, SingleOp};
use crate::node::{Deadline, Node, Shape, nth, within};
use crate::request::Ttl;
use crate::round::tasks::Background;
use crate::token::Token;

/// How many lone requests a node may have in flight while its load is
/// light, before requests start to queue and batch.
const PIPELINED: usize = 24;

/// A batch smaller than this says the load is light again: lone requests
/// may go out side by side once more.
const SMALL_BATCH: usize = 8;

/// The most requests one call carries; the rest wait for the next one.
/// (A script blocks its node while it runs: about a microsecond an entry.)
const MOST: usize = 1024;

/// What a queued request asks (an owned [`SingleOp`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Acquire { ttl: Ttl },
    Release { announce: Option<Arc<str>> },
    Extend { ttl: Ttl },
}

impl Op {
    /// Whether this request for a holding of `shape` on `keys` goes through
    /// its node's group-commit lane, and under which key: the one place
    /// that decides it. Only one-key locks do (`batch.lua` knows nothing
    /// else): every op of a plain lock, and a fenced lock's release (a
    /// token-checked delete, like a plain one's); a fenced lock's acquire
    /// and extension touch its counter too, and go alone.
    pub(crate) fn batched<'k>(
        &self,
        shape: &dyn Shape,
        keys: &'k [Arc<str>],
        fenced: bool,
    ) -> Option<&'k Arc<str>> {
        match keys {
            [key] if shape.group_commits() && (!fenced || matches!(self, Op::Release { .. })) => {
                Some(key)
            }
            _ => None,
        }
    }

    fn borrow(&self) -> SingleOp<'_> {
        match self {
            Op::Acquire { ttl } => SingleOp::Acquire { ttl: *ttl },
            Op::Release { announce } => SingleOp::Release {
                announce: announce.as_deref(),
            },
            Op::Extend { ttl } => SingleOp::Extend { ttl: *ttl },
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

    /// Whether it still goes out: within its deadline, a release always
    /// (whoever gave up on it still wants the key gone), an acquire or an
    /// extension only while its caller waits. Past its deadline nothing
    /// goes: the node is far behind (a release is shed, its key expires by
    /// ttl), and its caller has stopped waiting for the answer.
    fn wanted(&self, now: Instant) -> bool {
        self.deadline > now && (matches!(self.op, Op::Release { .. }) || !self.reply.is_closed())
    }
}

/// One node's queue.
///
/// Under light load, lone requests go out side by side, pipelined on the
/// node's connection, as many as [`PIPELINED`]: a batch of a few requests
/// costs the node and the client more than the same requests sent alone,
/// and while one call is in flight the client and the node would take
/// turns, each idle while the other works. Once that many are in flight
/// the node is `batching`: a lone request goes out only when nothing else
/// is in flight, and everything else queues and goes out one batch at a
/// time — fewer, larger calls, which is what saves CPU on both sides under
/// heavy load. A small batch ([`SMALL_BATCH`]) ends it.
#[derive(Default)]
struct Lane {
    /// Calls of this node in flight: lone requests, and the batch.
    in_flight: usize,
    /// Heavy load: one call in flight at a time.
    batching: bool,
    /// A task sends what queues, one batch at a time.
    flushing: bool,
    /// That task took a batch it has not yet handed to the connection:
    /// until it has, a lone request must queue behind it.
    dispatching: bool,
    waiting: Vec<Waiting>,
}

impl Lane {
    /// The next batch (at most [`MOST`] requests, oldest first), marked
    /// as being dispatched.
    fn take(&mut self) -> Vec<Waiting> {
        self.dispatching = true;
        if self.waiting.len() < SMALL_BATCH {
            self.batching = false;
        }
        let most = self.waiting.len().min(MOST);
        let rest = self.waiting.split_off(most);
        std::mem::replace(&mut self.waiting, rest)
    }
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
        let target = nth(&self.nodes, node)?;
        let Some(answer) = self.queue(node, &op, key, token, deadline) else {
            // Hands what queues meanwhile to a batch when this call ends,
            // however it ends (a dropped caller included).
            let _turn = Lone {
                lanes: self.clone(),
                node,
            };
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

    /// Queues the request if node `node` has as many calls in flight as
    /// its load allows (see [`Lane`]), or requests queued, or a batch not
    /// yet sent, returning where its
    /// answer will come; else counts it in flight and returns `None`: the
    /// caller sends it at once. Either way it goes out after every request
    /// that came before it.
    fn queue(
        &self,
        node: usize,
        op: &Op,
        key: &Arc<str>,
        token: &Token,
        deadline: Deadline,
    ) -> Option<oneshot::Receiver<Result<u8, NodeError>>> {
        let mut lane = self.lane(node)?;
        let limit = if lane.batching { 1 } else { PIPELINED };
        if lane.in_flight < limit && lane.waiting.is_empty() && !lane.dispatching {
            lane.in_flight += 1;
            return None;
        }
        lane.batching = true;
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

    /// Sends `batch`, then whatever queued meanwhile, one batch at a time,
    /// until the node's queue is empty.
    async fn flush(self: Arc<Self>, node: usize, mut batch: Vec<Waiting>) {
        let mut flusher = Flusher {
            lanes: self.clone(),
            node,
            done: false,
        };
        let Some(target) = self.nodes.get(node) else {
            return;
        };
        loop {
            let now = Instant::now();
            let (wanted, given_up): (Vec<_>, Vec<_>) =
                batch.drain(..).partition(|waiting| waiting.wanted(now));
            for waiting in given_up {
                if matches!(waiting.op, Op::Release { .. }) {
                    crate::metrics::shed(target.label(), "release");
                }
                let _ = waiting.reply.send(Err(NodeError::Timeout(waiting.given)));
            }
            batch = wanted;
            let requests: Vec<Single<'_>> = batch.iter().map(Waiting::single).collect();
            let deadline = batch.iter().map(|w| w.deadline).max();
            let answers = {
                let call = async {
                    let Some(deadline) = deadline else {
                        return Vec::new();
                    };
                    match &*requests {
                        [one] => vec![target.single(*one, deadline.into()).await],
                        _ => match target.batch(&requests, deadline.into()).await {
                            Ok(answers) => answers,
                            // The ACL refused some key before anything ran:
                            // each request alone, in order, gets its own answer.
                            Err(error) if is_key_refusal(&error) => {
                                let mut answers = Vec::with_capacity(requests.len());
                                for request in &requests {
                                    answers.push(target.single(*request, deadline.into()).await);
                                }
                                answers
                            }
                            Err(error) => vec![Err(error); requests.len()],
                        },
                    }
                };
                let mut call = std::pin::pin!(call);
                let mut sent = false;
                std::future::poll_fn(|cx| {
                    let answers = call.as_mut().poll(cx);
                    if !sent {
                        // Handed to the connection on its first poll: a lone
                        // request may go out behind it now.
                        sent = true;
                        if let Some(mut lane) = self.lane(node) {
                            lane.dispatching = false;
                        }
                    }
                    answers
                })
                .await
            };
            drop(requests);
            for (waiting, answer) in batch.drain(..).zip(answers) {
                // The caller may have stopped waiting.
                let _ = waiting.reply.send(answer);
            }
            match flusher.next() {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// A batch for a new flusher, if requests wait and none runs; the
    /// batch is counted in flight.
    fn hand_over(lane: &mut Lane) -> Option<Vec<Waiting>> {
        if lane.waiting.is_empty() || lane.flushing {
            return None;
        }
        lane.flushing = true;
        lane.in_flight += 1;
        Some(lane.take())
    }

    /// A call of node `node` ended without taking the next batch: a lone
    /// request answered or dropped, or a flusher dropped mid-way (`flusher`).
    /// Whatever waits goes to a new flusher.
    fn call_ended(self: &Arc<Self>, node: usize, flusher: bool) {
        let batch = {
            let Some(mut lane) = self.lane(node) else {
                return;
            };
            if flusher {
                lane.flushing = false;
                lane.dispatching = false;
            }
            lane.in_flight = lane.in_flight.saturating_sub(1);
            Self::hand_over(&mut lane)
        };
        if let Some(batch) = batch {
            self.spawn_flusher(node, batch);
        }
    }

    /// Starts a flusher with `batch` (see [`hand_over`](Self::hand_over)).
    fn spawn_flusher(self: &Arc<Self>, node: usize, batch: Vec<Waiting>) {
        let spawned = self.background.spawn(self.clone().flush(node, batch));
        if spawned.is_none() {
            // No runtime to send them: their callers get an error (the
            // senders are dropped with the batch).
            if let Some(mut lane) = self.lane(node) {
                lane.flushing = false;
                lane.dispatching = false;
                lane.in_flight = lane.in_flight.saturating_sub(1);
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

/// A lone request in flight. When it ends, however it ends (a dropped
/// caller included), whatever queued meanwhile goes out as a batch.
struct Lone {
    lanes: Arc<Lanes>,
    node: usize,
}

impl Drop for Lone {
    fn drop(&mut self) {
        self.lanes.call_ended(self.node, false);
    }
}

/// A node's flusher. Takes the next batch while requests wait; when none
/// do, or when the task is dropped, it stops (handing what waits to a new
/// one if it was dropped).
struct Flusher {
    lanes: Arc<Lanes>,
    node: usize,
    /// The queue was found empty and the flusher stopped.
    done: bool,
}

impl Flusher {
    /// The next batch, or `None` once the queue is empty.
    fn next(&mut self) -> Option<Vec<Waiting>> {
        let mut lane = self.lanes.lane(self.node)?;
        if lane.waiting.is_empty() {
            lane.flushing = false;
            lane.in_flight = lane.in_flight.saturating_sub(1);
            self.done = true;
            return None;
        }
        Some(lane.take())
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        if !self.done {
            self.lanes.call_ended(self.node, true);
        }
    }
}
