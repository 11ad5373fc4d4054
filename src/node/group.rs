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
//! behind and the release is shed (counted; the node is owed it, see
//! `owed`), so that a frozen node's queue cannot grow without bound. A slow node
//! delays only its own batches. One node's
//! requests go out in the order they came: nothing goes out alone while
//! anything is queued or a batch is not yet handed to the connection, Redis
//! runs one connection's calls in order, and a batch runs its entries in
//! order — so a release queued behind an acquire of the same token runs
//! after it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use futures::FutureExt;
use redis::cluster_routing::Slot;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::error::NodeError;
use crate::node::holding::native_delete;
use crate::node::replies::{Answer, Reply, Slots};
use crate::node::{
    Deadline, ExtendReply, Extension, NativeDelete, Node, Resend, ShapeRef, nth, push_extend,
    push_release, unexpected, within,
};
use crate::request::{Ttl, channel};
use crate::scripts::{Lua, Replicas};
use crate::token::Token;

/// When a node's lane batches (see [`Lane`]): how many lone requests it
/// may have in flight while its load is light, before requests start to
/// queue and batch; and the batch size below which the load is light
/// again, and lone requests may go out side by side once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pacing {
    pipelined: usize,
    small_batch: usize,
}

impl Pacing {
    /// A node whose batches are `batch.lua` calls: a script of a few
    /// entries costs the node and the client more than the same requests
    /// sent alone, so lone requests go side by side until many are in
    /// flight, and a batch must be large to be worth its call.
    const SCRIPTED: Self = Self {
        pipelined: 24,
        small_batch: 8,
    };

    /// A node whose batches are pipelines of native commands: a pipeline
    /// costs the node less per command at every depth (on Valkey 9.1, 1.3
    /// µs per `SET NX PX` and 0.8 µs per `DELIFEQ` pipelined 16 deep
    /// against about 7 µs each sent one per round trip, `redis-benchmark`,
    /// 16 to 64 clients), so the lane batches from a lower load and keeps
    /// batching down to batches of two. Measured (five Valkey 9.1.2 nodes,
    /// interleaved rounds, the medians against rslock's in the same
    /// rounds): 16 tasks 1.20x rslock's cycles/s with the scripted pacing,
    /// 1.40x with this one, at 0.78x the nodes' CPU per cycle; 4 and 8
    /// tasks alike within the machine's noise; batching from the first
    /// request in flight instead lost 7-16 % at 2 and 4 tasks.
    const NATIVE: Self = Self {
        pipelined: 8,
        small_batch: 2,
    };

    /// The pacing for `target` as its commands are known now.
    fn of(target: &Node) -> Self {
        match target.capabilities() {
            Some(caps) if caps.extend() && caps.delete().is_some() => Self::NATIVE,
            _ => Self::SCRIPTED,
        }
    }
}

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
    /// Whether this request for `holding` goes through its node's
    /// group-commit lane, and under which key: the one place that decides
    /// it. Only one-key holdings of a shape that
    /// [group-commits](crate::node::Shape::group_commits) do (`batch.lua`
    /// knows keys that hold just their token): every op of an unfenced
    /// one, and a fenced one's release (a token-checked delete, like an
    /// unfenced one's); a fenced acquire and extension touch its counter
    /// too, and go alone.
    fn batched<'k>(&self, holding: &OnNode<'k>) -> Option<&'k Arc<str>> {
        match holding.keys {
            [key]
                if holding.shape.group_commits()
                    && (!holding.fenced || matches!(self, Op::Release { .. })) =>
            {
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
    shape: ShapeRef,
    /// When it must have answered, and how long its caller gave it (for
    /// its timeout error).
    deadline: Deadline,
    reply: Answer,
}

impl Waiting {
    fn single(&self) -> Single<'_> {
        Single {
            op: self.op.borrow(),
            key: &self.key,
            token: self.token.as_str(),
            shape: &self.shape,
        }
    }

    /// Whether it still goes out: within its deadline, a release always
    /// (whoever gave up on it still wants the key gone), an acquire or an
    /// extension only while its caller waits. Past its deadline nothing
    /// goes: the node is far behind (a release is shed, and owed to the
    /// node), and its caller has stopped waiting for the answer.
    fn wanted(&self, now: Instant) -> bool {
        self.deadline.at() > now
            && (matches!(self.op, Op::Release { .. }) || !self.reply.is_abandoned())
    }
}

/// One node's queue.
///
/// Under light load, lone requests go out side by side, pipelined on the
/// node's connection, as many as its [`Pacing`] allows: while one call is
/// in flight the client and the node would take turns, each idle while
/// the other works. Once that many are in flight the node is `batching`:
/// a lone request goes out only when nothing else is in flight, and
/// everything else queues and goes out one batch at a time — fewer,
/// larger calls, which is what saves CPU on both sides under heavy load.
/// A small batch ends it.
struct Lane {
    /// Calls of this node in flight: lone requests, and the batch.
    in_flight: usize,
    /// Heavy load: one call in flight at a time.
    batching: bool,
    /// When it batches, as last found from its node's commands.
    pacing: Pacing,
    /// A task sends what queues, one batch at a time.
    flushing: bool,
    /// That task took a batch it has not yet handed to the connection:
    /// until it has, a lone request must queue behind it.
    dispatching: bool,
    waiting: Vec<Waiting>,
    /// The last batch's emptied vector, for the queue after the next
    /// batch: a queue that starts from nothing grows by reallocation, and
    /// under heavy load every batch would pay that again.
    spare: Vec<Waiting>,
    /// Where the requests queued since the last batch was taken get their
    /// answers (the last of their blocks).
    slots: Arc<Slots>,
    /// How many requests queued since the last batch was taken.
    queued: usize,
}

impl Default for Lane {
    fn default() -> Self {
        Self {
            in_flight: 0,
            batching: false,
            pacing: Pacing::SCRIPTED,
            flushing: false,
            dispatching: false,
            waiting: Vec::new(),
            spare: Vec::new(),
            slots: Slots::with_capacity(0),
            queued: 0,
        }
    }
}

/// The fewest slots a lane's block of answer slots has.
const FIRST_SLOTS: usize = 8;

impl Lane {
    /// A queued request's two ends, in the lane's block of slots, or in a
    /// new one twice its size when it is full.
    fn open(&mut self) -> (Answer, Reply) {
        self.queued += 1;
        loop {
            if let Some(ends) = self.slots.open() {
                return ends;
            }
            self.slots = Slots::with_capacity((2 * self.slots.capacity()).max(FIRST_SLOTS));
        }
    }

    /// The next batch (at most [`MOST`] requests, oldest first), marked
    /// as being dispatched.
    fn take(&mut self) -> Vec<Waiting> {
        self.dispatching = true;
        // The next requests' answers go to slots of their own, sized for
        // as many as queued this time.
        self.slots = Slots::with_capacity(self.queued.max(FIRST_SLOTS));
        self.queued = 0;
        if self.waiting.len() < self.pacing.small_batch {
            self.batching = false;
        }
        let rest = if self.waiting.len() > MOST {
            self.waiting.split_off(MOST)
        } else {
            std::mem::take(&mut self.spare)
        };
        std::mem::replace(&mut self.waiting, rest)
    }
}

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

/// A holding's request as the lanes see it: its keys, token and shape, and
/// whether it is fenced (see [`Op::batched`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OnNode<'a> {
    pub(crate) keys: &'a [Arc<str>],
    pub(crate) token: &'a Token,
    pub(crate) shape: &'a ShapeRef,
    pub(crate) fenced: bool,
}

/// What a request that went through a lane got: `batch.lua`'s status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Refused (the key exists, or holds another token).
    Refused,
    /// Granted, deleted or extended.
    Done,
    /// Extended by setting the key again: the node had lost it.
    Restored,
}

impl Status {
    fn of(code: u8) -> Self {
        match code {
            1 => Self::Done,
            2 => Self::Restored,
            _ => Self::Refused,
        }
    }
}

/// A release's answer: whether the node deleted the token.
impl From<Status> for bool {
    fn from(status: Status) -> bool {
        status == Status::Done
    }
}

/// An extension's answer.
impl From<Status> for ExtendReply {
    fn from(status: Status) -> Self {
        match status {
            Status::Done => Self::Extended,
            Status::Restored => Self::Restored,
            Status::Refused => Self::Refused,
        }
    }
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
    /// when [`Op::batched`] says it goes there, else `alone` (the
    /// holding's own request, not yet polled). The one place where a
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
            None => Box::pin(alone()).await,
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
        let Some(answer) = self.queue(node, &op, key, holding, deadline) else {
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
        within(deadline, answer).await
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
        holding: &OnNode<'_>,
        deadline: Deadline,
    ) -> Option<Reply> {
        let pacing = Pacing::of(self.nodes.get(node)?);
        let mut lane = self.lane(node)?;
        lane.pacing = pacing;
        let limit = if lane.batching { 1 } else { pacing.pipelined };
        if lane.in_flight < limit && lane.waiting.is_empty() && !lane.dispatching {
            lane.in_flight += 1;
            return None;
        }
        lane.batching = true;
        let (reply, answer) = lane.open();
        lane.waiting.push(Waiting {
            op: op.clone(),
            key: key.clone(),
            token: holding.token.clone(),
            shape: holding.shape.clone(),
            deadline,
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
            for waiting in batch.extract_if(.., |waiting| !waiting.wanted(now)) {
                if matches!(waiting.op, Op::Release { .. }) {
                    crate::metrics::shed(target.label(), "release");
                }
                waiting
                    .reply
                    .send(Err(NodeError::Timeout(waiting.deadline.given())));
            }
            let requests: Vec<Single<'_>> = batch.iter().map(Waiting::single).collect();
            let deadline = batch.iter().map(|w| w.deadline.at()).max();
            let answers = {
                let mut call = std::pin::pin!(send_batch(target, &requests, deadline));
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
        let spawned = self
            .background
            .spawn_boxed(Box::pin(self.clone().flush(node, batch)));
        if !spawned {
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

/// Sends `requests` (a batch, oldest first) to `target` in one call, or
/// one alone: an answer per request, in order. Every request keeps the
/// batch's latest `deadline`; none, nothing to send.
async fn send_batch(
    target: &Node,
    requests: &[Single<'_>],
    deadline: Option<Instant>,
) -> Vec<Result<u8, NodeError>> {
    let Some(deadline) = deadline else {
        return Vec::new();
    };
    match requests {
        [one] => vec![target.single(*one, deadline.into()).await],
        _ => match target.batch(requests, deadline.into()).await {
            Ok(answers) => answers,
            // The ACL refused some key before anything ran: each request
            // alone, in order, gets its own answer.
            Err(error) if is_key_refusal(&error) => {
                let mut answers = Vec::with_capacity(requests.len());
                for request in requests {
                    answers.push(target.single(*request, deadline.into()).await);
                }
                answers
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
    /// The next batch, or `None` once the queue is empty; `sent`, the
    /// batch it sent (emptied), is kept for the queue to reuse.
    fn next(&mut self, sent: Vec<Waiting>) -> Option<Vec<Waiting>> {
        let mut lane = self.lanes.lane(self.node)?;
        if sent.capacity() > lane.spare.capacity() && sent.capacity() <= 2 * MOST {
            lane.spare = sent;
        }
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

/// Plain locks: many acquires, releases and extensions of one node in one
/// call (group commit, see this file's docs).
pub(crate) static BATCH: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_batch",
        include_str!("batch.lua"),
        Replicas::Wait,
    )
});

/// One plain (one-key, unfenced) lock's request to a node, alone or in a
/// batch with others (see `batch.lua` and this file).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Single<'a> {
    pub(crate) op: SingleOp<'a>,
    pub(crate) key: &'a Arc<str>,
    pub(crate) token: &'a str,
    pub(crate) shape: &'a ShapeRef,
}

/// One entry of a `batch.lua` call: what it asks, of which key, with
/// which token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) op: SingleOp<'a>,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
}

impl<'a> From<Single<'a>> for Entry<'a> {
    fn from(request: Single<'a>) -> Self {
        Self {
            op: request.op,
            key: request.key,
            token: request.token,
        }
    }
}

/// What a [`Single`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SingleOp<'a> {
    /// `SET key token NX PX ttl`: 1 granted, 0 refused.
    Acquire { ttl: Ttl },
    /// Token-checked delete, announced with this release id on the key's
    /// channel when given: 1 deleted, 0 not ours.
    Release { announce: Option<&'a str> },
    /// Token-checked extension (or restore): 1 extended, 2 restored, 0
    /// refused.
    Extend { ttl: Ttl },
}

impl SingleOp<'_> {
    /// Its op in `batch.lua`.
    fn code(&self) -> &'static str {
        match self {
            Self::Acquire { .. } => "a",
            Self::Release { .. } => "r",
            Self::Extend { .. } => "e",
        }
    }
}

impl Node {
    /// `SET key token NX PX ttl`: true if granted, false if the key exists
    /// (whatever its type: NX never touches an existing key).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        token: &str,
        ttl: Ttl,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let mut cmd = Cmd::with_capacity(6, key.len() + token.len() + 32);
        cmd.arg("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.ms());
        // Never sent twice: a SET that landed before the connection dropped
        // would answer "no" the second time, and a node that said "no" is
        // skipped by the cleanup of a failed attempt.
        match self.write(&cmd, &[token], Resend::Never, deadline).await? {
            Value::Okay => Ok(true),
            Value::SimpleString(s) if s == "OK" => Ok(true),
            Value::Nil => Ok(false),
            other => Err(unexpected(&other)),
        }
    }

    /// One request on its own: `SET NX PX` for an acquire (never sent
    /// twice: a SET that landed before the connection dropped would answer
    /// "no" the second time, and a node that said "no" is skipped by the
    /// cleanup of a failed attempt), the holding's own release and
    /// extension (see [`release`](Node::release), [`extend`](Node::extend),
    /// natively where the node can) for the others. Its status as
    /// `batch.lua` answers it.
    ///
    /// Boxed, each op's future on its own (one allocation per lone
    /// request, with the connection's send in it): the ops' futures differ
    /// by half in size, a release that may run a script the largest, and
    /// the most frequent lone requests, an acquire and a native release,
    /// do not carry its path (see the test below).
    pub(crate) fn single<'a>(
        &'a self,
        request: Single<'a>,
        deadline: Deadline,
    ) -> Pin<Box<dyn Future<Output = Result<u8, NodeError>> + Send + 'a>> {
        let Single {
            key, token, shape, ..
        } = request;
        let keys = std::slice::from_ref(key);
        // Each op's own future, mapped to its status: no async block around
        // it to hold its arguments a second time.
        match request.op {
            SingleOp::Acquire { ttl } => Box::pin(
                self.acquire(key, token, ttl, deadline)
                    .map(|granted| granted.map(u8::from)),
            ),
            // Known to have a native delete, and nothing to announce: one
            // command (what `release` would send).
            SingleOp::Release { announce: None }
                if let Some(delete) = native_delete(self.capabilities(), &**shape) =>
            {
                Box::pin(
                    self.delete_one(delete, key, token, deadline)
                        .map(|deleted| deleted.map(u8::from)),
                )
            }
            SingleOp::Release { announce } => Box::pin(
                self.release(keys, &**shape, token, announce, deadline)
                    .map(|released| released.map(u8::from)),
            ),
            SingleOp::Extend { ttl } => {
                let lock = Extension {
                    keys,
                    token,
                    ttl,
                    fence: None,
                    shape: &**shape,
                };
                Box::pin(
                    self.extend(lock, deadline)
                        .map(|extended| extended.map(|reply| reply.status())),
                )
            }
        }
    }

    /// Many plain locks' requests in one script call (`batch.lua`), one
    /// answer per request, in order; on a cluster one call per hash slot
    /// among them, all in parallel. An error of the whole call is the
    /// `Err`; a request whose own command failed gets its error in its
    /// place. Every request of a batch is idempotent for its own token, so
    /// a call whose connection dropped goes out once more.
    pub(crate) async fn batch(
        &self,
        requests: &[Single<'_>],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        let groups: Vec<Vec<usize>> = if self.is_cluster() {
            let mut slots: Vec<(Slot, Vec<usize>)> = Vec::new();
            for (i, request) in requests.iter().enumerate() {
                let slot = Slot::for_key(request.key.as_bytes());
                match slots.iter_mut().find(|(s, _)| *s == slot) {
                    Some((_, group)) => group.push(i),
                    None => slots.push((slot, vec![i])),
                }
            }
            slots.into_iter().map(|(_, group)| group).collect()
        } else {
            vec![(0..requests.len()).collect()]
        };
        // Natively where the node can do every step of a batch; else
        // `batch.lua`.
        let replies = self
            .with_capabilities(deadline, async |caps| {
                let native = caps.filter(|c| c.extend()).and_then(|c| c.delete());
                let entries: Vec<Entry<'_>> = match native {
                    Some(_) => Vec::new(),
                    None => requests.iter().map(|r| Entry::from(*r)).collect(),
                };
                let entries = &entries;
                let calls = groups.iter().map(|group| async move {
                    if let Some(delete) = native {
                        return self.batch_native(delete, requests, group, deadline).await;
                    }
                    match self.batch_call(entries, group, deadline).await {
                        // Refused as a script before the node's commands were known.
                        Err(error) if error.is_incompatible() => {
                            match self
                                .capabilities()
                                .filter(|c| c.extend())
                                .and_then(|c| c.delete())
                            {
                                Some(delete) => {
                                    self.batch_native(delete, requests, group, deadline).await
                                }
                                None => Err(error),
                            }
                        }
                        answers => answers,
                    }
                });
                futures::future::join_all(calls).await
            })
            .await;
        let mut answers: Vec<Option<Result<u8, NodeError>>> =
            (0..requests.len()).map(|_| None).collect();
        for (group, answer) in groups.iter().zip(replies) {
            for (&i, status) in group.iter().zip(answer?) {
                answers[i] = Some(status);
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(unexpected(&Value::Nil))))
            .collect())
    }

    /// One `batch.lua` call for `group` of `requests` (on a cluster, all
    /// in one hash slot): the one encoding of plain locks' requests in one
    /// call, for group commits and for auto-extension batches alike.
    pub(crate) async fn batch_call(
        &self,
        requests: &[Entry<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        // Written straight into the command: keys, then four args each.
        let fill = |cmd: &mut Cmd| {
            cmd.arg(group.len());
            for &i in group {
                cmd.arg(requests[i].key);
            }
            for &i in group {
                let request = &requests[i];
                cmd.arg(request.op.code()).arg(request.token);
                match request.op {
                    SingleOp::Acquire { ttl } | SingleOp::Extend { ttl } => {
                        cmd.arg(ttl.ms()).arg("");
                    }
                    SingleOp::Release { announce: None } => {
                        cmd.arg("").arg("");
                    }
                    SingleOp::Release { announce: Some(id) } => {
                        cmd.arg(id).arg(channel(request.key));
                    }
                }
            }
        };
        let tokens: Vec<&str> = group.iter().map(|&i| requests[i].token).collect();
        // A key, a token, a ttl or release id, and a channel per entry.
        let bytes: usize = group
            .iter()
            .map(|&i| 2 * requests[i].key.len() + requests[i].token.len() + 32)
            .sum();
        let size = (1 + 5 * group.len(), bytes + 4);
        match self
            .run_script(&BATCH, fill, size, &tokens, deadline)
            .await?
        {
            Value::Array(items) if items.len() == group.len() => Ok(items
                .into_iter()
                .zip(group)
                .map(|(item, &i)| match item {
                    Value::Int(status @ 0..=2) => Ok(status as u8),
                    Value::ServerError(error) => {
                        Err(self.redact(NodeError::Redis(error.into()), &[requests[i].token]))
                    }
                    other => Err(unexpected(&other)),
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }
}

impl Node {
    /// Many plain locks' requests in one pipeline of native commands, one
    /// answer per request, in order, as [`batch_call`](Self::batch_call)
    /// answers them.
    async fn batch_native(
        &self,
        delete: NativeDelete,
        requests: &[Single<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        // Room for replica sync's `WAIT` too.
        let mut commands = redis::Pipeline::with_capacity(2 * group.len() + 1);
        let mut writes = false;
        for &i in group {
            writes |= self.push_native(&mut commands, delete, requests[i]);
        }
        let tokens: Vec<&str> = group.iter().map(|&i| requests[i].token).collect();
        let replies = self
            .pipeline(commands, writes, &tokens, Resend::IfDropped, deadline)
            .await?;
        let mut replies = replies.iter();
        let mut answers = Vec::with_capacity(group.len());
        // Releases to announce after the pipeline (on a cluster).
        let mut late: Vec<(&str, &str)> = Vec::new();
        for &i in group {
            let request = requests[i];
            let answer = self.native_answer(request, &mut replies);
            if let SingleOp::Release { announce: Some(id) } = request.op
                && self.inline_announce(Some(id)).is_none()
                && matches!(answer, Ok(1))
            {
                late.push((&**request.key, id));
            }
            answers.push(answer);
        }
        for (key, id) in late {
            self.announce(key, id, deadline).await;
        }
        Ok(answers)
    }

    /// Appends `request`'s native commands; whether they write a lock
    /// (for replica sync's `WAIT`).
    fn push_native(
        &self,
        commands: &mut redis::Pipeline,
        delete: NativeDelete,
        request: Single<'_>,
    ) -> bool {
        let Single { op, key, token, .. } = request;
        let key = &**key;
        match op {
            SingleOp::Acquire { ttl } => {
                let mut cmd = Cmd::with_capacity(7, key.len() + token.len() + 32);
                cmd.arg("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.ms())
                    .arg("GET");
                commands.add_command(cmd);
                true
            }
            SingleOp::Release { announce } => {
                let inline = self.inline_announce(announce);
                push_release(commands, delete, key, token, inline);
                false
            }
            SingleOp::Extend { ttl } => {
                push_extend(commands, key, token, ttl);
                true
            }
        }
    }

    /// `request`'s status from its replies, taken from `replies` (as many
    /// as [`push_native`](Self::push_native) sent for it).
    fn native_answer(
        &self,
        request: Single<'_>,
        replies: &mut std::slice::Iter<'_, Value>,
    ) -> Result<u8, NodeError> {
        let Single { op, token, .. } = request;
        match op {
            SingleOp::Acquire { .. } => match replies.next() {
                // Nil: set now; our token: set by this request before its
                // connection dropped and it went out again.
                Some(Value::Nil) => Ok(1),
                Some(Value::BulkString(value)) => Ok(u8::from(value == token.as_bytes())),
                Some(reply) => self.native_status(reply, token).map(|_| 0),
                None => Err(unexpected(&Value::Nil)),
            },
            SingleOp::Release { announce } => {
                let status = replies.next().map(|r| self.native_status(r, token));
                if self.inline_announce(announce).is_some() {
                    // The announcement's own reply.
                    replies.next();
                }
                status.unwrap_or_else(|| Err(unexpected(&Value::Nil)))
            }
            SingleOp::Extend { .. } => {
                let pair: Vec<Value> = replies.by_ref().take(2).cloned().collect();
                self.extended(&pair, token)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::caps::Capabilities;
    use std::time::Duration;

    /// A lone request is one allocation, the size of its own op: the
    /// connection's send is held in it (see `run.rs`'s `query_on`), and
    /// the most frequent lone requests (an acquire; a release, natively on
    /// a node known to have a delete) do not carry a script call's path.
    /// Every op took one box the size of a release that may run a script,
    /// and each command a second box of `redis`' own, 1,152 bytes.
    #[test]
    fn a_lone_request_carries_only_its_own_path() {
        let node = crate::node::testing::nodes(1).remove(0);
        let key: Arc<str> = "k".into();
        let ttl = Ttl::new(Duration::from_secs(1), 0.01).expect("a ttl");
        let deadline = Deadline::from(Instant::now());
        let alone = |op| {
            let request = Single {
                op,
                key: &key,
                token: "t",
                shape: &ShapeRef::LOCK,
            };
            std::mem::size_of_val(&*node.single(request, deadline))
        };
        // The commands not known yet: a release takes the path that may run
        // a script.
        let scripted = alone(SingleOp::Release { announce: None });
        node.caps.set(Some(Capabilities {
            set_ifeq: true,
            delifeq: true,
            delex_ifeq: false,
        }));
        let native = alone(SingleOp::Release { announce: None });
        let acquire = alone(SingleOp::Acquire { ttl });
        // Were the ops' paths in one future, each would be as large.
        for (op, size) in [("an acquire", acquire), ("a native release", native)] {
            assert!(
                size < scripted,
                "{op} alone: {size} bytes, a release that may run a script {scripted}"
            );
        }
    }
}
