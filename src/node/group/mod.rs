//! Group commit per node: concurrent requests bound for the same node go
//! out in one call, with an answer per request. A plain (one-key,
//! unfenced) lock's requests go as a pipeline of native commands on a
//! node that has them, a pipeline of the holdings' own commands and
//! scripts on a standalone node that does not (`scripted.rs`), else one
//! `batch.lua` call. Every other primitive's requests that run a script
//! of its own (a permit's, a reader-writer hold's: acquire, release,
//! extension) are prepared script calls ([`Prepared`]): they queue only
//! where the node's batches are pipelines that carry them (a standalone
//! node running scripts by `EVALSHA`, its commands known), go there as
//! `EVALSHA` of their script, and get the script's raw reply back for
//! their caller to read; anywhere else they go alone, as they would
//! without a lane. The lanes never learn which primitive a call is.
//!
//! Split by job: here the lanes (every node's queue and its flusher, and
//! whether a request goes alone or queues); one node's queue and when it
//! batches (`lane.rs`); a request as the lanes see it (`request.rs`);
//! sending one request alone, or a batch in one call (`send.rs`, and on
//! a script-path node `scripted.rs`). The
//! `batch.lua` encoding, which auto-extension's batches use too, is
//! `node/batch.rs`. A batch with prepared script calls that finds its
//! node no longer pipelining them (rare: the lane queued them only where
//! it did) sends each of its requests alone, in order.
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
//! behind and the release is shed (counted; the node is owed it, see
//! `owed`), so that a frozen node's queue cannot grow without bound. A slow node
//! delays only its own batches. One node's
//! requests go out in the order they came: nothing goes out alone while
//! anything is queued or a batch is not yet handed to the connection, Redis
//! runs one connection's calls in order, and a batch runs its entries in
//! order — so a release queued behind an acquire of the same token runs
//! after it.

mod lane;
mod request;
mod scripted;
mod send;

pub(crate) use request::{OnNode, Op, Prepared, Status, Step};

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use redis::{ErrorKind, ServerErrorKind, Value};
use tokio::time::Instant;

use self::lane::{Lane, MOST, Pacing, Queued, Waiting};
use self::request::{Item, Single};
use crate::contract::{Extension, Release};
use crate::error::NodeError;
use crate::node::holding::{is_native, native_delete};
use crate::node::replies::{Answered, Reply};
use crate::node::{Deadline, Node, nth, unexpected, within};

/// Every node's queue, and what a batch needs to go out on its own.
pub(crate) struct Lanes {
    nodes: Arc<[Node]>,
    lanes: Box<[Mutex<Lane>]>,
    background: Box<dyn Spawn>,
}

/// Where a node's flusher runs: the manager's counted background tasks,
/// so that whoever waits for those waits for the batches in flight too.
pub(crate) trait Spawn: Send + Sync {
    /// Runs `work` in the background; false when there is no runtime to
    /// run it on.
    fn spawn_boxed(&self, work: Pin<Box<dyn Future<Output = ()> + Send>>) -> bool;
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl Lanes {
    pub(crate) fn new(nodes: Arc<[Node]>, background: Box<dyn Spawn>) -> Arc<Self> {
        let lanes = nodes.iter().map(|_| Mutex::new(Lane::default())).collect();
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

    /// Sends `op` for `holding` to node `node`: through the node's lane
    /// when [`Op::batched`] says it goes there, or as its shape's own
    /// release or extension script where the lane's batches are pipelines
    /// that can carry it (see [`prepared`](Self::prepared)), else `alone`
    /// (the holding's own request, not yet polled). The one place where a
    /// request is batched or not, for every step of every primitive.
    pub(crate) async fn send_or<T: From<Status>>(
        self: &Arc<Self>,
        node: usize,
        op: Op,
        holding: OnNode<'_>,
        deadline: Deadline,
        alone: impl AsyncFnOnce() -> Result<T, NodeError>,
    ) -> Result<T, NodeError> {
        match op.batched(&holding) {
            Some(key) => {
                let code = self.send(node, op, key, &holding, deadline).await?;
                Ok(Status::of(code).into())
            }
            // Boxed: a plain lock's requests, the most frequent, never go
            // alone, and their futures need not carry this one's size.
            None => Box::pin(self.prepared(node, op, holding, deadline, alone)).await,
        }
    }

    /// [`send_or`](Self::send_or) for a request [`Op::batched`] keeps out
    /// of `batch.lua`: a release or an extension that alone would run its
    /// shape's script (not native commands) goes through the lane as that
    /// script's call ([`call_or`](Self::call_or)), its reply read as the
    /// shape reads it alone; anything else, `alone`.
    async fn prepared<T: From<Status>>(
        self: &Arc<Self>,
        node: usize,
        op: Op,
        holding: OnNode<'_>,
        deadline: Deadline,
        alone: impl AsyncFnOnce() -> Result<T, NodeError>,
    ) -> Result<T, NodeError> {
        let OnNode { keys, token, shape } = holding;
        let caps = self.nodes.get(node).and_then(Node::capabilities);
        match op {
            Op::Release { announce } if native_delete(caps, &**shape).is_none() => {
                let release = Release {
                    keys,
                    token: token.as_str(),
                    announce: announce.as_deref(),
                };
                let prepare = || {
                    let bytes =
                        keys.iter().map(|k| 2 * k.len()).sum::<usize>() + token.as_str().len() + 48;
                    let size = (4 + 2 * keys.len(), bytes);
                    Prepared::new(shape.release_script(), Step::Release, token, size, |cmd| {
                        shape.release_call(&release, cmd);
                    })
                };
                let decode = |reply: &Value| {
                    let released = shape.released(&release, reply)?;
                    Ok(Status::of(u8::from(released)).into())
                };
                self.call_or(node, deadline, prepare, decode, alone).await
            }
            Op::Extend { ttl } => {
                let lock = Extension {
                    keys,
                    token: token.as_str(),
                    ttl,
                    shape: &**shape,
                };
                if is_native(&lock) {
                    return alone().await;
                }
                let prepare = || {
                    let mut names: Vec<&str> = Vec::with_capacity(2 + keys.len());
                    shape.extend_keys(&lock, &mut names);
                    let bytes =
                        names.iter().map(|k| k.len()).sum::<usize>() + token.as_str().len() + 48;
                    let size = (4 + names.len(), bytes);
                    Prepared::new(shape.extend_script(), Step::Extend, token, size, |cmd| {
                        cmd.arg(names.len()).arg(&names);
                        shape.extend_args(&lock, cmd);
                    })
                };
                // As `extend_many` reads it alone: a status per holding.
                let decode = |reply: &Value| match reply {
                    Value::Array(items) => match items.as_slice() {
                        [Value::Int(status @ 0..=2)] => Ok(Status::of(*status as u8).into()),
                        _ => Err(unexpected(reply)),
                    },
                    _ => Err(unexpected(reply)),
                };
                self.call_or(node, deadline, prepare, decode, alone).await
            }
            _ => alone().await,
        }
    }

    /// Sends a primitive's own script call to node `node` through its
    /// lane, where the node's batches are pipelines that carry script
    /// calls (a standalone node whose scripts run by `EVALSHA`, its
    /// commands known: see `scripted.rs`); else `alone` (the call as the
    /// primitive sends it alone, not yet polled), as it is when the lane
    /// lets it go at once. `prepare` writes the call, only when it
    /// queues; `decode` reads its reply as `alone` would, the script's own
    /// error having become the `Err`.
    pub(crate) async fn call_or<T>(
        self: &Arc<Self>,
        node: usize,
        deadline: Deadline,
        prepare: impl FnOnce() -> Prepared,
        decode: impl FnOnce(&Value) -> Result<T, NodeError>,
        alone: impl AsyncFnOnce() -> Result<T, NodeError>,
    ) -> Result<T, NodeError> {
        let pipelines = self
            .nodes
            .get(node)
            .and_then(|target| target.pipelines_scripts(target.capabilities()));
        let Some(target) = self.nodes.get(node).filter(|_| pipelines.is_some()) else {
            return alone().await;
        };
        // Not behind a call in flight to a node that is not asked (see
        // `send`).
        if let Some(not_asked) = target.not_asked() {
            return Err(not_asked);
        }
        let Some(answer) = self.queue(node, deadline, || Queued::Script(prepare())) else {
            // Hands what queues meanwhile to a batch when this call ends.
            let _turn = Lone {
                lanes: self.clone(),
                node,
            };
            return alone().await;
        };
        match within(deadline, answer).await? {
            Answered::Value(reply) => decode(&reply),
            Answered::Status(code) => Err(unexpected(&Value::Int(code.into()))),
        }
    }

    /// Sends one one-key request to node `node`: at once if the node has
    /// no call in flight, else with whatever else queued behind that call.
    /// Its status as `batch.lua` answers it (1 granted / deleted /
    /// extended, 2 restored, 0 refused).
    async fn send(
        self: &Arc<Self>,
        node: usize,
        op: Op,
        key: &Arc<str>,
        holding: &OnNode<'_>,
        deadline: Deadline,
    ) -> Result<u8, NodeError> {
        let target = nth(&self.nodes, node)?;
        // Not behind a call in flight to a node that is not asked: that
        // call waits out its deadline, and this one would fail after it.
        if let Some(not_asked) = target.not_asked() {
            return Err(not_asked);
        }
        let token = holding.token;
        let queued = || Queued::Single {
            op: op.clone(),
            key: key.clone(),
            token: token.clone(),
            shape: holding.shape.clone(),
        };
        let Some(answer) = self.queue(node, deadline, queued) else {
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
                shape: holding.shape,
            };
            // Boxed by `single`: under load most requests queue, and every
            // request's future (boxed whole by its fan-out) would otherwise
            // carry this path's size: 2.6 KB instead of under 1 KB.
            return target.single(request, deadline).await;
        };
        match within(deadline, answer).await? {
            Answered::Status(code) => Ok(code),
            Answered::Value(reply) => Err(unexpected(&reply)),
        }
    }

    /// Queues the request if node `node` has as many calls in flight as
    /// its load allows (see [`Lane`]), or requests queued, or a batch not
    /// yet sent, returning where its
    /// answer will come; else counts it in flight and returns `None`: the
    /// caller sends it at once. Either way it goes out after every request
    /// that came before it.
    /// `queued` makes what waits, only if it queues.
    fn queue(
        self: &Arc<Self>,
        node: usize,
        deadline: Deadline,
        queued: impl FnOnce() -> Queued,
    ) -> Option<Reply> {
        let pacing = Pacing::of(self.nodes.get(node)?, self.nodes.len());
        let (answer, second) = {
            let mut lane = self.lane(node)?;
            let answer = Self::queue_in(&mut lane, pacing, deadline, queued)?;
            (answer, Self::second_batch(&mut lane))
        };
        if let Some(batch) = second {
            self.spawn_flusher(node, batch);
        }
        Some(answer)
    }

    /// [`queue`](Self::queue) in node's lane `lane`.
    fn queue_in(
        lane: &mut Lane,
        pacing: Pacing,
        deadline: Deadline,
        queued: impl FnOnce() -> Queued,
    ) -> Option<Reply> {
        lane.pacing = pacing;
        let limit = if lane.batching { 1 } else { pacing.pipelined };
        if lane.in_flight < limit && lane.waiting.is_empty() && !lane.dispatching {
            lane.in_flight += 1;
            return None;
        }
        lane.batching = true;
        let (reply, answer) = lane.open();
        lane.waiting.push(Waiting {
            queued: queued(),
            deadline,
            reply,
        });
        Some(answer)
    }

    /// A batch for another flusher, beside the one whose batch is in
    /// flight, where the node's [`Pacing`] allows more than one batch in
    /// flight (and none is being handed to the connection: the next
    /// batch must not overtake it). Counted in flight.
    ///
    /// Why: with one batch in flight the client and a lone node take
    /// turns, each idle while the other works; see [`Pacing`] for where
    /// it is allowed and the figures.
    fn second_batch(lane: &mut Lane) -> Option<Vec<Waiting>> {
        if lane.flushers == 0
            || lane.flushers >= lane.pacing.batches
            || lane.dispatching
            || lane.waiting.is_empty()
        {
            return None;
        }
        lane.flushers += 1;
        lane.in_flight += 1;
        // However small: the batches in flight share the load from now.
        Some(lane.take(false))
    }

    /// Sends `batch`, then whatever queued meanwhile, one batch at a time,
    /// until the node's queue is empty.
    async fn flush(self: Arc<Self>, node: usize, mut batch: Vec<Waiting>) {
        let mut flusher = Flusher {
            lanes: self.clone(),
            node,
            done: false,
            dispatching: true,
        };
        let Some(target) = self.nodes.get(node) else {
            return;
        };
        loop {
            let now = Instant::now();
            for waiting in batch.extract_if(.., |waiting| !waiting.wanted(now)) {
                if waiting.is_release() {
                    crate::metrics::shed(target.label(), "release");
                }
                waiting
                    .reply
                    .send(Err(NodeError::Timeout(waiting.deadline.given())));
            }
            let requests: Vec<Item<'_>> = batch.iter().map(Waiting::item).collect();
            let deadline = batch.iter().map(|w| w.deadline.at()).max();
            let answers = {
                let mut call = std::pin::pin!(send_batch(target, &requests, deadline));
                let mut sent = false;
                std::future::poll_fn(|cx| {
                    let answers = call.as_mut().poll(cx);
                    if !sent {
                        // Handed to the connection on its first poll: a lone
                        // request, or another batch, may go out behind it now.
                        sent = true;
                        flusher.dispatching = false;
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
                waiting.reply.send(answer);
            }
            match flusher.next(std::mem::take(&mut batch)) {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// A batch for a new flusher, if requests wait and none runs; the
    /// batch is counted in flight.
    fn hand_over(lane: &mut Lane) -> Option<Vec<Waiting>> {
        // A batch being handed to the connection: its flusher takes what
        // waits next, in order.
        if lane.waiting.is_empty() || lane.flushers >= lane.pacing.batches || lane.dispatching {
            return None;
        }
        lane.flushers += 1;
        lane.in_flight += 1;
        Some(lane.take(true))
    }

    /// A call of node `node` ended without taking the next batch: a lone
    /// request answered or dropped (`None`), or a flusher dropped mid-way
    /// (whether its batch was still being handed to the connection).
    /// Whatever waits goes to a new flusher.
    fn call_ended(self: &Arc<Self>, node: usize, flusher: Option<bool>) {
        let batch = {
            let Some(mut lane) = self.lane(node) else {
                return;
            };
            if let Some(dispatching) = flusher {
                lane.flushers = lane.flushers.saturating_sub(1);
                if dispatching {
                    lane.dispatching = false;
                }
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
        let spawned = self
            .background
            .spawn_boxed(Box::pin(self.clone().flush(node, batch)));
        if !spawned {
            // No runtime to send them: their callers get an error (the
            // senders are dropped with the batch).
            if let Some(mut lane) = self.lane(node) {
                lane.flushers = lane.flushers.saturating_sub(1);
                lane.dispatching = false;
                lane.in_flight = lane.in_flight.saturating_sub(1);
            }
        }
    }
}

/// Sends `requests` (a batch, oldest first) to `target` in one call, or
/// one alone: an answer per request, in order. Every request keeps the
/// batch's latest `deadline`; none, nothing to send.
async fn send_batch(
    target: &Node,
    requests: &[Item<'_>],
    deadline: Option<Instant>,
) -> Vec<Result<Answered, NodeError>> {
    let Some(deadline) = deadline else {
        return Vec::new();
    };
    match requests {
        [one] => vec![target.alone(*one, deadline.into()).await],
        _ => match target.batch(requests, deadline.into()).await {
            Ok(answers) => answers,
            // The ACL refused some key before anything ran: each request
            // alone, in order, gets its own answer.
            Err(error) if is_key_refusal(&error) => {
                target.each_alone(requests, deadline.into()).await
            }
            Err(error) => vec![Err(error); requests.len()],
        },
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
        self.lanes.call_ended(self.node, None);
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
    /// Its batch was taken and not yet handed to the connection.
    dispatching: bool,
}

impl Flusher {
    /// The next batch, or `None` once the queue is empty; `sent`, the
    /// batch it sent (emptied), is kept for the queue to reuse.
    fn next(&mut self, sent: Vec<Waiting>) -> Option<Vec<Waiting>> {
        let mut lane = self.lanes.lane(self.node)?;
        if sent.capacity() > lane.spare.capacity() && sent.capacity() <= 2 * MOST {
            lane.spare = sent;
        }
        // Another flusher handing its batch to the connection takes what
        // waits when it is done (in order); this one stops.
        if lane.waiting.is_empty() || lane.dispatching {
            lane.flushers = lane.flushers.saturating_sub(1);
            lane.in_flight = lane.in_flight.saturating_sub(1);
            self.done = true;
            return None;
        }
        self.dispatching = true;
        Some(lane.take(true))
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        if !self.done {
            self.lanes.call_ended(self.node, Some(self.dispatching));
        }
    }
}
