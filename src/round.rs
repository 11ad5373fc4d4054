//! The round layer: one request fanned out to every node, its votes and
//! decision, the requests still in flight after it, and the release of every
//! node that may hold a token — with the [`Core`] that guards, renewals and
//! wake-ups hold instead of the manager. A primitive plugs its acquisition
//! into [`attempt`] by describing it ([`Acquire`]); nothing here knows
//! guards, renewals or the manager.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::calls::Stragglers;
use crate::coalesce::{Lanes, Op};
use crate::error::{Error, NodeError, NodeFailure};
use crate::metrics;
use crate::node::{Deadline, Extension, Node};
use crate::quorum::{Answer, Decision, Shortfall, Tally, Vote, Window};
use crate::request::{Keys, Shape};
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

    /// Node `i`'s label, for logs.
    pub(crate) fn label(&self, node: usize) -> &str {
        self.nodes.get(node).map_or("?", |n| &**n.label())
    }
}

/// What a held (or half-acquired) lock is on the nodes: its keys and token,
/// and for a fenced lock its counter's key and fence. Extending and
/// releasing a lock are described here, for every primitive.
#[derive(Debug)]
pub(crate) struct Holding {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) fence: Option<(Arc<str>, u64)>,
    pub(crate) shape: Shape,
}

impl Holding {
    /// What an extension (or renewal) with `ttl_ms` asks of a node.
    pub(crate) fn extension(&self, ttl_ms: u64) -> Extension<'_> {
        Extension {
            keys: &self.keys,
            token: self.token.as_str(),
            ttl_ms,
            fence: self.fence.as_ref().map(|(key, fence)| (&**key, *fence)),
            shape: &self.shape,
        }
    }

    /// The fence of a fenced lock.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.fence.as_ref().map(|&(_, fence)| fence)
    }
}

/// Whether a fan-out stops at the quorum decision or waits for every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// Stop as soon as the decision is known; the requests still in flight
    /// are returned to the caller.
    Decided,
    /// Wait for every node's answer (or its deadline).
    AllAnswered,
}

/// What one request to every node produced.
#[derive(Debug)]
pub(crate) struct Round<T = bool> {
    pub(crate) tally: Tally,
    pub(crate) decision: Decision,
    pub(crate) failures: Vec<NodeFailure>,
    /// Per node: its answer, if it answered (without error) before the
    /// decision.
    pub(crate) answers: Vec<Option<T>>,
}

impl<T: Answer> Round<T> {
    /// Per node: whether it answered "no".
    pub(crate) fn refused(&self) -> Vec<bool> {
        self.answers
            .iter()
            .map(|a| a.map(|a| a.vote()) == Some(Vote::No))
            .collect()
    }

    /// [`refused`](Self::refused), but `None` (no allocation) for a round
    /// that reached a quorum: should its lock still fail (no validity left,
    /// or a second phase failed), the cleanup then skips no node.
    fn refused_unless_reached(&self) -> Option<Vec<bool>> {
        (self.decision != Decision::Reached).then(|| self.refused())
    }

    /// Whether so many nodes failed as incompatible (see
    /// [`NodeError::is_incompatible`]) that no quorum can ever answer.
    pub(crate) fn incompatible(&self) -> bool {
        let incompatible = self
            .failures
            .iter()
            .filter(|f| f.error.is_incompatible())
            .count();
        incompatible > self.tally.nodes() - self.tally.quorum()
    }

    /// [`Error::Incompatible`] for this round.
    pub(crate) fn incompatible_error(self, resource: &str) -> Error {
        Error::Incompatible {
            resource: resource.to_owned(),
            nodes: self.tally.nodes(),
            quorum: self.tally.quorum(),
            failures: self.failures,
        }
    }

    /// The error for a round that did not reach a quorum.
    pub(crate) fn failure(self, resource: &str) -> Error {
        if self.incompatible() {
            return self.incompatible_error(resource);
        }
        match self.tally.shortfall() {
            Shortfall::Unreachable => Error::Unavailable {
                resource: resource.to_owned(),
                nodes: self.tally.nodes(),
                quorum: self.tally.quorum(),
                failures: self.failures,
            },
            Shortfall::Refused => Error::Contended {
                resource: resource.to_owned(),
                granted: self.tally.yes(),
                quorum: self.tally.quorum(),
                failures: self.failures,
            },
        }
    }

    /// Per node, what the answers that decided this round say: `Some(yes)`
    /// for a node that answered or failed, `None` for one still in flight.
    pub(crate) fn votes<F>(&self, stragglers: &Stragglers<F>) -> Vec<Option<bool>> {
        let mut votes: Vec<Option<bool>> = self
            .answers
            .iter()
            .map(|answer| Some(answer.is_some_and(|a| a.vote() == Vote::Yes)))
            .collect();
        for node in stragglers.nodes() {
            if let Some(vote) = votes.get_mut(node) {
                *vote = None;
            }
        }
        votes
    }

    /// Counts node `i`'s answer.
    fn record(&mut self, op: &'static str, i: usize, node: &Node, answer: Result<T, NodeError>) {
        let node = node.label();
        let vote = match answer {
            Ok(answer) => {
                if let Some(slot) = self.answers.get_mut(i) {
                    *slot = Some(answer);
                }
                answer.vote()
            }
            Err(error) => {
                metrics::node_error(node, op, matches!(error, NodeError::Timeout(_)));
                tracing::debug!(op, node = %node, error = %error, "node failed");
                self.failures.push(NodeFailure {
                    node: node.clone(),
                    error,
                });
                Vote::Failed
            }
        };
        tracing::debug!(op, node = %node, ?vote);
        self.decision = self.tally.record(vote);
    }
}

/// Sends one request to every node in parallel and tallies the answers.
/// Returns the requests still in flight (none with [`Until::AllAnswered`]).
///
/// `call` makes node `i`'s request, to be bounded by the [`Deadline`] it is
/// given: one timer at `deadline` bounds them all, in this fan-out and in
/// whoever follows its stragglers, rather than a timer per request.
pub(crate) async fn fan_out<'a, T, F, Fut>(
    nodes: &'a [Node],
    until: Until,
    op: &'static str,
    deadline: Instant,
    call: F,
) -> (Round<T>, Stragglers<Fut>)
where
    T: Answer,
    F: Fn(usize, &'a Node, Deadline) -> Fut,
    Fut: Future<Output = Result<T, NodeError>>,
{
    let mut round = Round {
        tally: Tally::new(nodes.len()),
        decision: Decision::Pending,
        failures: Vec::new(),
        answers: vec![None; nodes.len()],
    };
    // One node (single-node mode): nothing to run side by side or to leave
    // behind, so nothing to allocate.
    if let [only] = nodes {
        // Awaited alone, it keeps its own time.
        round.record(op, 0, only, call(0, only, deadline.into()).await);
        return (round, Stragglers::none());
    }
    let shared = Deadline::timed_by_caller(deadline);
    let mut calls = Stragglers::new(
        nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (i, call(i, node, shared))),
        Some(deadline),
    );
    while let Some((i, answer)) = calls.next().await {
        round.record(op, i, &nodes[i], answer);
        if until == Until::Decided && round.decision != Decision::Pending {
            break;
        }
    }
    (round, calls)
}

/// Follows a round's requests still in flight after its decision to their
/// answers, in a background task, and hands each vote to `on_answer` (and
/// marks it in `in_flight`, for a release waiting on it). Answers already
/// there are handled at once, without a task. Without a runtime nothing can
/// follow them; `in_flight` is then marked answered at once, so that a
/// release does not wait for them.
///
/// A request whose connection was still being set up (a fresh manager, a
/// reconnect) is sent only while something polls it: following at once
/// makes every reachable node get it within the node timeout.
pub(crate) fn follow<T, F>(
    core: &Arc<Core>,
    op: &'static str,
    mut stragglers: Stragglers<F>,
    in_flight: Option<Arc<InFlight>>,
    on_answer: impl Fn(usize, Vote) + Send + 'static,
) where
    T: Answer + Send + 'static,
    F: Future<Output = Result<T, NodeError>> + Send + 'static,
{
    let record = move |core: &Core, node: usize, answer: Result<T, NodeError>| {
        let vote = answer.as_ref().map(Answer::vote).unwrap_or(Vote::Failed);
        tracing::debug!(op, node = %core.label(node), late = true, ?vote);
        on_answer(node, vote);
    };
    while let Some(Some((node, answer))) = stragglers.next().now_or_never() {
        record(core, node, answer);
        if let Some(in_flight) = &in_flight {
            in_flight.answer(node);
        }
    }
    if stragglers.is_empty() {
        return;
    }
    // Marks every node answered when the task ends, however it ends (also
    // when it is dropped unfinished, or never spawned).
    let settled = in_flight.map(AllAnswered);
    let task_core = core.clone();
    core.background.spawn(async move {
        while let Some((node, answer)) = stragglers.next().await {
            record(&task_core, node, answer);
            if let Some(settled) = &settled {
                settled.0.answer(node);
            }
        }
        drop(settled);
    });
}

/// Which acquire requests of a held lock were still in flight when the
/// quorum decided, per node, until each has answered or timed out.
#[derive(Debug)]
pub(crate) struct InFlight {
    pending: Box<[AtomicBool]>,
    answered: Notify,
}

impl InFlight {
    pub(crate) fn new(nodes: usize, in_flight: impl IntoIterator<Item = usize>) -> Self {
        let pending: Box<[AtomicBool]> = (0..nodes).map(|_| AtomicBool::new(false)).collect();
        for node in in_flight {
            if let Some(flag) = pending.get(node) {
                flag.store(true, Ordering::Relaxed);
            }
        }
        Self {
            pending,
            answered: Notify::new(),
        }
    }

    fn answer(&self, node: usize) {
        if let Some(flag) = self.pending.get(node) {
            flag.store(false, Ordering::Release);
        }
        self.answered.notify_waiters();
    }

    fn pending(&self, node: usize) -> bool {
        self.pending
            .get(node)
            .is_some_and(|flag| flag.load(Ordering::Acquire))
    }

    /// Resolves once every request has answered or timed out.
    pub(crate) async fn all_answered(&self) {
        for node in 0..self.pending.len() {
            self.answered(node).await;
        }
    }

    /// Resolves once `node`'s request has answered or timed out.
    async fn answered(&self, node: usize) {
        while self.pending(node) {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            // Register before checking again, so an answer in between is
            // not missed.
            answered.as_mut().enable();
            if !self.pending(node) {
                break;
            }
            answered.await;
        }
    }
}

/// Marks every node of an [`InFlight`] answered when dropped.
struct AllAnswered(Arc<InFlight>);

impl Drop for AllAnswered {
    fn drop(&mut self) {
        for flag in &self.0.pending {
            flag.store(false, Ordering::Release);
        }
        self.0.answered.notify_waiters();
    }
}

/// Token-checked release on every node (except those `skip` marks),
/// waiting for each answer or the node timeout. A node whose acquire
/// request is still `in_flight` is sent the release once that request has
/// answered (or timed out): Redis answers one connection's requests in
/// order, so the release then runs after a late grant and removes it.
pub(crate) async fn release_everywhere(
    core: &Core,
    keys: &[Arc<str>],
    shape: &Shape,
    token: &Token,
    skip: Option<&[bool]>,
    in_flight: Option<&InFlight>,
) -> Round {
    // With acquires in flight, a release may wait for one. That acquire's
    // own deadline was at most a node timeout after it started, before
    // now, so a second node timeout leaves every release a full one of its
    // own, under the fan-out's one timer.
    let rounds = if in_flight.is_some() { 2 } else { 1 };
    let deadline = Instant::now() + core.node_timeout * rounds;
    let id: Option<Arc<str>> = core.announce.then(|| release_id().into());
    let (id, announce) = (&id, id.as_deref());
    fan_out(
        &core.nodes,
        Until::AllAnswered,
        "release",
        deadline,
        |i, node, deadline| async move {
            if skip.and_then(|s| s.get(i).copied()).unwrap_or(false) {
                return Ok(false);
            }
            if let Some(in_flight) = in_flight {
                in_flight.answered(i).await;
            }
            if let (Shape::Lock, [key]) = (shape, keys) {
                // With whatever else is bound for this node meanwhile.
                let op = Op::Release {
                    announce: id.clone(),
                };
                let status = core.lanes.send(i, op, key, token, deadline).await?;
                return Ok(status == 1);
            }
            node.release(keys, shape, token.as_str(), announce, deadline)
                .await
        },
    )
    .await
    .0
}

/// What a release announces: a random id, so that the waiters can tell one
/// release announced by several nodes from several releases.
fn release_id() -> String {
    // Never 0, which stands for "no id".
    format!("{:016x}", rand::random::<u64>().max(1))
}

/// One primitive's acquisition, as [`attempt`] runs it: what each node is
/// asked, how its answer votes, and what a grant still needs once a quorum
/// said yes.
pub(crate) trait Acquire: Sync {
    /// A node's answer to the request.
    type Answer: Answer + Send + 'static;

    /// The resource, for errors and logs.
    fn resource(&self) -> &Arc<str>;

    /// The keys a grant holds (and a failed attempt releases).
    fn keys(&self) -> &Keys;

    /// The requested ttl, in milliseconds too.
    fn ttl(&self) -> (Duration, u64);

    /// What a grant is on the nodes beyond its keys: a lock unless said
    /// otherwise.
    fn shape(&self) -> Shape {
        Shape::Lock
    }

    /// Node `node`'s request in the attempt with `token`. Owned, so that a
    /// request still in flight at the decision can be followed.
    fn call(
        &self,
        core: &Arc<Core>,
        node: usize,
        token: &Token,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Self::Answer, NodeError>> + Send + 'static + use<Self>;

    /// After a quorum said yes (with validity left): whatever the grant
    /// still needs, within `window` — the fence write-back of a fenced
    /// lock. Returns the lock's fence counter key and fence, if any.
    fn complete(
        &self,
        core: &Arc<Core>,
        round: &Round<Self::Answer>,
        window: &Window,
    ) -> impl Future<Output = Result<Option<(Arc<str>, u64)>, Error>> + Send;
}

/// A successful attempt: what is now held, its window, and the round that
/// granted it with the requests still in flight.
pub(crate) struct Grant<T, F> {
    pub(crate) holding: Holding,
    pub(crate) window: Window,
    pub(crate) round: Round<T>,
    pub(crate) stragglers: Stragglers<F>,
}

/// One attempt: fan out, decide, complete, and either grant or clean up.
///
/// A failed attempt removes its token from every node that may hold it
/// before returning; a cancelled one, in the background.
pub(crate) async fn attempt<A: Acquire>(
    core: &Arc<Core>,
    acquire: &A,
) -> Result<
    Grant<A::Answer, impl Future<Output = Result<A::Answer, NodeError>> + Send + 'static>,
    Error,
> {
    let start = Instant::now();
    let token = Token::generate()?;
    let (ttl, _) = acquire.ttl();
    let window = Window::new(start, ttl, core.drift_factor);
    // Never wait for a node past the point where no validity would be left.
    let deadline = (start + core.node_timeout).min(window.deadline());

    // Armed until the attempt ends: if this future is dropped mid-flight,
    // the token is removed from every node in the background.
    let cleanup = Cleanup {
        core: Some(core.clone()),
        keys: acquire.keys().clone(),
        shape: acquire.shape(),
        token: token.clone(),
    };
    let (round, stragglers) = fan_out(
        &core.nodes,
        Until::Decided,
        "acquire",
        deadline,
        |i, _, deadline| acquire.call(core, i, &token, deadline),
    )
    .await;
    // Only a failed round needs it (see the cleanup below).
    let refused = round.refused_unless_reached();
    let granted = match granted(acquire.resource(), round, &window, start, ttl) {
        Ok(round) => match acquire.complete(core, &round, &window).await {
            // Checked again: completing took time out of the validity.
            Ok(fence) => match window.validity_at(Instant::now()) {
                Some(_) => Ok((round, fence)),
                None => Err(validity_expired(acquire.resource(), start, ttl)),
            },
            Err(error) => Err(error),
        },
        Err(error) => Err(error),
    };
    match granted {
        Ok((round, fence)) => {
            cleanup.disarm();
            Ok(Grant {
                holding: Holding {
                    keys: acquire.keys().clone(),
                    token,
                    fence,
                    shape: acquire.shape(),
                },
                window,
                round,
                stragglers,
            })
        }
        Err(error) => {
            tracing::debug!(error = %error, "attempt failed, cleaning up");
            // Not followed: the cleanup releases those nodes anyway. Dropped
            // first, since a node's lone request holds its queue (see
            // `coalesce`) until it is polled to its answer or dropped, and
            // the cleanup's release may be queued behind it.
            drop(stragglers);
            // A node that answered "no" certainly did not store our token,
            // and nothing else will: skip it. Every other node — granted,
            // failed, timed out or never heard from — may hold it.
            cleanup.run(refused).await;
            Err(error)
        }
    }
}

/// Whether a round grants the lock: a quorum said yes and validity is
/// left, measured from the attempt's start.
fn granted<T: Answer>(
    resource: &str,
    round: Round<T>,
    window: &Window,
    start: Instant,
    ttl: Duration,
) -> Result<Round<T>, Error> {
    if round.decision != Decision::Reached {
        return Err(round.failure(resource));
    }
    match window.validity_at(Instant::now()) {
        Some(validity) => {
            tracing::debug!(granted = round.tally.yes(), ?validity, "quorum reached");
            Ok(round)
        }
        None => Err(validity_expired(resource, start, ttl)),
    }
}

fn validity_expired(resource: &str, start: Instant, ttl: Duration) -> Error {
    Error::ValidityExpired {
        resource: resource.to_owned(),
        elapsed: start.elapsed(),
        ttl,
    }
}

/// Removes an attempt's token from the nodes, even if the attempt's future
/// is dropped halfway.
struct Cleanup {
    /// `None` once disarmed.
    core: Option<Arc<Core>>,
    keys: Keys,
    shape: Shape,
    token: Token,
}

impl Cleanup {
    /// The attempt succeeded: the guard now owns the token.
    fn disarm(mut self) {
        self.core = None;
    }

    /// Releases on every node except the ones `skip` marks, in a task of
    /// its own so that dropping the caller cannot cut it short.
    async fn run(mut self, skip: Option<Vec<bool>>) {
        let Some(core) = self.core.take() else {
            return;
        };
        if skip
            .as_ref()
            .is_some_and(|s| s.iter().all(|&refused| refused))
        {
            return;
        }
        let (keys, shape, token) = (self.keys.clone(), self.shape.clone(), self.token.clone());
        let background = core.background.clone();
        let task = background.spawn(async move {
            release_everywhere(&core, &keys, &shape, &token, skip.as_deref(), None).await;
        });
        // Dropping the JoinHandle detaches the task; it still completes.
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(core) = self.core.take() else {
            return;
        };
        // Cancelled mid-attempt: we do not know which nodes refused, so
        // release everywhere. Without a runtime the keys expire by ttl.
        let (keys, shape, token) = (self.keys.clone(), self.shape.clone(), self.token.clone());
        let background = core.background.clone();
        background.spawn(async move {
            release_everywhere(&core, &keys, &shape, &token, None, None).await;
        });
    }
}
