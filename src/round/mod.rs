//! The round layer: the one fan-out ([`fan_out_with`]) that every call to
//! every node runs on — one request per node, decided by a rule
//! ([`Decide`]: one lock's votes, a [`Round`]; a renewal's batch; a leader
//! read), with the nodes' health, failure metrics and logs, and the
//! requests still in flight after it [followed](follow) — and the release
//! of every node that may hold a token, with the [`Core`] that guards,
//! renewals and wake-ups hold instead of the manager. A primitive plugs its
//! acquisition into [`attempt`] by describing it ([`Acquire`]); nothing
//! here knows guards, renewals or the manager.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use crate::calls::Requests;
use crate::coalesce::{Lanes, Op};
use crate::decide::{Decide, waits_only_on};
use crate::error::{Error, NodeError, NodeFailure};
use crate::metrics;
use crate::node::{Deadline, Extension, Node, ShapeRef, nth};
use crate::quorum::{Answer, Decision, Rule, Shortfall, Tally, Vote, Window};
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

/// What one request to every node produced: one lock's votes, decided by
/// its [`Rule`].
#[derive(Debug)]
pub(crate) struct Round<T = bool> {
    pub(crate) tally: Tally,
    pub(crate) decision: Decision,
    pub(crate) failures: Vec<NodeFailure>,
    /// Per node: its answer, if it answered (without error) before the
    /// decision.
    pub(crate) answers: Vec<Option<T>>,
    rule: Rule,
}

/// A node's answer is its vote: the round is decided once `rule` says so.
impl<T: Answer> Decide for Round<T> {
    type Answer = T;

    fn record(&mut self, node: usize, answer: Result<T, NodeFailure>) {
        let vote = match answer {
            Ok(answer) => {
                if let Some(slot) = self.answers.get_mut(node) {
                    *slot = Some(answer);
                }
                answer.vote()
            }
            Err(failure) => {
                self.failures.push(failure);
                Vote::Failed
            }
        };
        self.decision = self.tally.record(vote);
    }

    fn decided(&self) -> bool {
        self.tally.decides(self.rule)
    }
}

impl<T: Answer> Round<T> {
    /// A round of `nodes` nodes, none heard yet.
    pub(crate) fn new(nodes: usize, rule: Rule) -> Self {
        Self {
            tally: Tally::new(nodes),
            decision: Decision::Pending,
            failures: Vec::new(),
            answers: vec![None; nodes],
            rule,
        }
    }

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
    pub(crate) fn votes<F>(&self, stragglers: &Requests<F>) -> Vec<Option<bool>> {
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
}

/// How a node's answer to a fan-out (or its failure) shows in the logs,
/// which the engine writes for every answer it hears: for a lock's, its
/// vote, under this module's target. Other answers say what they are
/// (never a token or a value), under their own module's.
pub(crate) trait Traced: Sized {
    /// Logs `node`'s answer to `op`; `late`: heard after the decision.
    fn trace(op: &'static str, node: &str, late: bool, answer: &Result<Self, NodeError>);
}

impl<T: Answer> Traced for T {
    fn trace(op: &'static str, node: &str, late: bool, answer: &Result<Self, NodeError>) {
        // Only late answers say so.
        let late = late.then_some(true);
        match answer {
            Ok(answer) => tracing::debug!(op, node = %node, late, vote = ?answer.vote()),
            Err(error) => tracing::debug!(op, node = %node, late, error = %error, "node failed"),
        }
    }
}

/// Sends one request to every node in parallel and tallies one lock's
/// answers until `rule` says they decide: [`fan_out_with`] a [`Round`].
pub(crate) async fn fan_out<'a, T, F, Fut>(
    nodes: &'a [Node],
    rule: Rule,
    op: &'static str,
    deadline: Instant,
    call: F,
) -> (Round<T>, Requests<Fut>)
where
    T: Answer,
    F: Fn(usize, &'a Node, Deadline) -> Fut,
    Fut: Future<Output = Result<T, NodeError>>,
{
    fan_out_with(nodes, op, deadline, Round::new(nodes.len(), rule), call).await
}

/// The fan-out, for every request sent to every node: sends node `i`'s
/// request, made by `call`, to each node in parallel, and hands each
/// answer (or failure) to `decide` until it is decided. Returns it, with
/// the requests still in flight then, for the caller to [`follow`] (or
/// drop).
///
/// Every answer is noted on its node (see [`Node::note`]), and a failure
/// counted (`quorumlock_node_errors_total`, by `op`) and logged. A node
/// that is [unresponsive](Node::unresponsive) is not waited for once every
/// other node has answered, as long as a quorum can do without it (see
/// [`waits_only_on`]): it counts as failed
/// ([`NodeError::Unresponsive`]), and its request is still followed.
///
/// `call` makes node `i`'s request, to be bounded by the [`Deadline`] it is
/// given: one timer at `deadline` bounds them all, in this fan-out and in
/// whoever follows its stragglers, rather than a timer per request.
pub(crate) async fn fan_out_with<'a, D, F, Fut>(
    nodes: &'a [Node],
    op: &'static str,
    deadline: Instant,
    mut decide: D,
    call: F,
) -> (D, Requests<Fut>)
where
    D: Decide<Answer: Traced>,
    F: Fn(usize, &'a Node, Deadline) -> Fut,
    Fut: Future<Output = Result<D::Answer, NodeError>>,
{
    let record = |decide: &mut D, i: usize, answer| {
        let Some(node) = nodes.get(i) else {
            return;
        };
        heard(node, op, &answer, false);
        let answer = answer.map_err(|error| NodeFailure {
            node: node.label().clone(),
            error,
        });
        decide.record(i, answer);
    };
    // One node (single-node mode): nothing to run side by side or to leave
    // behind, so nothing to allocate.
    if let [only] = nodes {
        // Awaited alone, it keeps its own time.
        record(&mut decide, 0, call(0, only, deadline.into()).await);
        return (decide, Requests::none());
    }
    let shared = Deadline::timed_by_caller(deadline);
    let mut calls = Requests::new(
        nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (i, call(i, node, shared))),
        Some(deadline),
    );
    while let Some((i, answer)) = calls.next().await {
        record(&mut decide, i, answer);
        if decide.decided() {
            break;
        }
        // A frozen node does not hold up a decision the others leave open
        // (a split vote, say): it would only time out.
        let unresponsive = calls.nodes().filter(|&n| nodes[n].unresponsive());
        if !decide.waits_for_unresponsive()
            && waits_only_on(nodes.len(), calls.len(), unresponsive.count())
        {
            let pending: Vec<usize> = calls.nodes().collect();
            for n in pending {
                record(&mut decide, n, Err(NodeError::Unresponsive));
            }
            break;
        }
    }
    (decide, calls)
}

/// What every answer of a fan-out, or of its stragglers (`late`), tells
/// beyond its rule: how the node is doing, the failure metric, the logs.
fn heard<T: Traced>(node: &Node, op: &'static str, answer: &Result<T, NodeError>, late: bool) {
    // Only an answer or a timeout says how the node is doing.
    if !matches!(answer, Err(NodeError::Unresponsive)) {
        node.note(matches!(answer, Err(NodeError::Timeout(_))));
    }
    let node = &**node.label();
    if let Err(error) = answer {
        metrics::node_error(node, op, matches!(error, NodeError::Timeout(_)));
    }
    T::trace(op, node, late, answer);
}

/// Follows requests still in flight after their call returned (a round's
/// stragglers, or a release nobody waits for) to their answers, and hands
/// each answer to `on_answer`. Every request is polled once here, which
/// hands it to its node's connection (a request whose connection was still
/// being set up is sent only while something polls it: following at once
/// makes every reachable node get it within the node timeout); answers
/// already there are handled at once, and the rest in a background task
/// that [`Redlock::settle`](crate::Redlock::settle) waits for. Without a
/// runtime nothing can follow them: they are dropped, and their keys
/// expire by ttl.
pub(crate) fn follow<T, F>(
    core: &Arc<Core>,
    op: &'static str,
    mut stragglers: Requests<F>,
    on_answer: impl Fn(usize, Result<T, NodeError>) + Send + 'static,
) where
    T: Traced + Send + 'static,
    F: Future<Output = Result<T, NodeError>> + Send + 'static,
{
    if stragglers.is_empty() || tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let record = move |core: &Core, node: usize, answer: Result<T, NodeError>| {
        if let Some(target) = core.nodes.get(node) {
            heard(target, op, &answer, true);
        }
        metrics::followed(op, answer.is_ok());
        on_answer(node, answer);
    };
    while let Some(Some((node, answer))) = stragglers.next().now_or_never() {
        record(core, node, answer);
    }
    if stragglers.is_empty() {
        return;
    }
    let task_core = core.clone();
    core.background.spawn(async move {
        while let Some((node, answer)) = stragglers.next().await {
            record(&task_core, node, answer);
        }
    });
}

/// A held lock's requests that were still in flight when their round
/// decided (the acquire's, or an extension's), raced per node against the
/// lock's release.
///
/// A release does not wait for them: it goes out at once, behind them on
/// the node's connection, and Redis runs one connection's calls in order,
/// so it runs after them and removes what they set. Where that order is
/// not certain (a connection being set up or made anew, a request sent
/// again after its connection dropped, the group-commit queue's ACL
/// fallback), the two answers tell: a late "yes" that may have landed
/// after the release deleted nothing there — or, for a request that
/// restores missing keys (an extension), after any release — calls for the
/// release to go out once more on that node. Neither answer waits for the
/// other; whichever of a node's two answers comes second decides, from
/// both.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// Per node: the bits below.
    nodes: Box<[AtomicU8]>,
    /// The requests set the key again where it is missing (extensions):
    /// their "yes" may follow a release that deleted it.
    restores: bool,
}

/// The node's request (of an [`InFlight`]) has answered…
const ANSWERED: u8 = 1;
/// …that it holds the token;
const YES: u8 = 2;
/// the lock's release has answered on the node…
const RELEASED: u8 = 4;
/// …that it deleted the token.
const DELETED: u8 = 8;

impl InFlight {
    /// The requests of a round still in flight to the nodes `in_flight`,
    /// out of `nodes`; `restores` for an extension's.
    pub(crate) fn new(nodes: usize, in_flight: &[usize], restores: bool) -> Self {
        let nodes: Box<[AtomicU8]> = (0..nodes)
            .map(|node| {
                AtomicU8::new(if in_flight.contains(&node) {
                    0
                } else {
                    ANSWERED
                })
            })
            .collect();
        Self { nodes, restores }
    }

    /// Whether `node`'s request has not answered yet.
    pub(crate) fn pending(&self, node: usize) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|slot| slot.load(Ordering::Acquire) & ANSWERED == 0)
    }

    /// `node`'s request answered (`yes`: the node holds the token). Returns
    /// whether the lock's release must go out on that node again.
    pub(crate) fn answered(&self, node: usize, yes: bool) -> bool {
        let Some(slot) = self.nodes.get(node) else {
            return false;
        };
        let before = slot.fetch_or(ANSWERED | if yes { YES } else { 0 }, Ordering::AcqRel);
        before & RELEASED != 0 && self.again(yes, before & DELETED != 0)
    }

    /// The lock's release answered on `node` (`deleted`: it deleted the
    /// token there), having been sent while the node's request was
    /// [`pending`](Self::pending). Returns whether the release must go out
    /// on that node again.
    pub(crate) fn released(&self, node: usize, deleted: bool) -> bool {
        let Some(slot) = self.nodes.get(node) else {
            return false;
        };
        let before = slot.fetch_or(
            RELEASED | if deleted { DELETED } else { 0 },
            Ordering::AcqRel,
        );
        before & ANSWERED != 0 && self.again(before & YES != 0, deleted)
    }

    /// With both answers: whether the request may have set the key after
    /// the release ran. A grant (`SET NX`) that the release found deleted
    /// ran before it; one it did not find may have come after. A restore
    /// may follow a release that deleted the key.
    fn again(&self, yes: bool, deleted: bool) -> bool {
        yes && (self.restores || !deleted)
    }
}

/// What a lock's release asks of the nodes: a held lock's [`LockState`] or
/// a failed attempt's [`Holding`], shared by every node's request.
///
/// [`LockState`]: crate::lease::LockState
pub(crate) trait OnNodes: Send + Sync + 'static {
    fn holding(&self) -> &Holding;
}

impl OnNodes for Holding {
    fn holding(&self) -> &Holding {
        self
    }
}

/// The token-checked release of `lock` on node `node`, owned, so that it
/// can be followed after its caller returned. A one-key lock goes with
/// whatever else is bound for the node meanwhile (see [`Op::batched`]).
async fn release_request<L: OnNodes>(
    core: Arc<Core>,
    lock: Arc<L>,
    node: usize,
    announce: Option<Arc<str>>,
    deadline: Deadline,
) -> Result<bool, NodeError> {
    let holding = lock.holding();
    let op = Op::Release {
        announce: announce.clone(),
    };
    if let Some(key) = op.batched(&*holding.shape, &holding.keys, holding.fence.is_some()) {
        let status = core
            .lanes
            .send(node, op, key, &holding.token, deadline)
            .await?;
        return Ok(status == 1);
    }
    let target = nth(&core.nodes, node)?;
    let announce = announce.as_deref();
    let token = holding.token.as_str();
    target
        .release(&holding.keys, &*holding.shape, token, announce, deadline)
        .await
}

/// Token-checked release of `lock` on every node, decided at a quorum:
/// returns as soon as a quorum deleted the token, or as soon as that has
/// become impossible, with the requests still in flight for the caller to
/// [`follow`]. Each request is bounded by the node timeout.
pub(crate) async fn release<L: OnNodes>(
    core: &Arc<Core>,
    lock: &Arc<L>,
) -> (
    Round,
    Requests<impl Future<Output = Result<bool, NodeError>> + Send + 'static + use<L>>,
) {
    let deadline = core.timeout_from(Instant::now());
    let announce: Option<Arc<str>> = core.announce.then(|| release_id().into());
    fan_out(
        &core.nodes,
        Rule::Release,
        "release",
        deadline,
        |i, _, deadline| release_request(core.clone(), lock.clone(), i, announce.clone(), deadline),
    )
    .await
}

/// Token-checked release of `lock` on every node but those `skip` marks,
/// followed entirely in the background: the caller waits for no node. The
/// requests are handed to the nodes' connections before this returns, so
/// whatever the caller sends those nodes next goes out behind them.
pub(crate) fn release_in_background<L: OnNodes>(
    core: &Arc<Core>,
    lock: Arc<L>,
    skip: Option<&[bool]>,
) {
    if tokio::runtime::Handle::try_current().is_err() {
        // Nothing can send them: the keys expire by ttl.
        return;
    }
    let deadline = core.timeout_from(Instant::now());
    let shared = Deadline::timed_by_caller(deadline);
    let announce: Option<Arc<str>> = core.announce.then(|| release_id().into());
    let skipped = |i: usize| skip.and_then(|s| s.get(i).copied()).unwrap_or(false);
    let requests = (0..core.nodes.len()).filter(|&i| !skipped(i)).map(|i| {
        let request = release_request(core.clone(), lock.clone(), i, announce.clone(), shared);
        (i, request)
    });
    let stragglers = Requests::new(requests, Some(deadline));
    follow(core, "release", stragglers, |_, _| {});
}

/// Sends `lock`'s release to node `node` once more, in the background: a
/// late answer says the lock's key may have been set there after the
/// release ran (see [`InFlight`]).
pub(crate) fn release_again<L: OnNodes>(core: &Arc<Core>, lock: &Arc<L>, node: usize) {
    metrics::released_again();
    tracing::debug!(
        node = %core.label(node),
        "a late grant may have landed after the release: releasing there again"
    );
    let deadline = core.timeout_from(Instant::now());
    let request = release_request(core.clone(), lock.clone(), node, None, deadline.into());
    core.background.spawn(async move {
        let _ = request.await;
    });
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
    fn shape(&self) -> ShapeRef {
        ShapeRef::LOCK
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
    pub(crate) stragglers: Requests<F>,
}

/// One attempt: fan out, decide, complete, and either grant or clean up.
///
/// A failed (or cancelled) attempt removes its token from every node that
/// may hold it, in the background: its requests are on their way to the
/// nodes when this returns, ahead of whatever the caller sends next.
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
    let deadline = core.timeout_within(start, window.deadline());

    // Armed until the attempt ends: if this future is dropped mid-flight,
    // the token is removed from every node in the background.
    let cleanup = Cleanup {
        core: Some(core.clone()),
        lock: Holding {
            keys: acquire.keys().clone(),
            token: token.clone(),
            fence: None,
            shape: acquire.shape(),
        },
    };
    let (round, stragglers) = fan_out(
        &core.nodes,
        Rule::Quorum,
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
            cleanup.run(refused);
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
    lock: Holding,
}

impl Cleanup {
    /// The attempt succeeded: the guard now owns the token.
    fn disarm(mut self) {
        self.core = None;
    }

    /// Releases on every node except the ones `skip` marks, in the
    /// background: neither the caller's error nor its next attempt waits
    /// for a node (the next attempt's requests go out behind these).
    fn run(mut self, skip: Option<Vec<bool>>) {
        let Some(core) = self.core.take() else {
            return;
        };
        if skip
            .as_ref()
            .is_some_and(|s| s.iter().all(|&refused| refused))
        {
            return;
        }
        let lock = Arc::new(self.lock.clone());
        release_in_background(&core, lock, skip.as_deref());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(core) = self.core.take() else {
            return;
        };
        // Cancelled mid-attempt: we do not know which nodes refused, so
        // release everywhere. Without a runtime the keys expire by ttl.
        release_in_background(&core, Arc::new(self.lock.clone()), None);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::decide::Batch;
    use crate::node::NodeOptions;
    use crate::quorum::Vote;

    /// `n` nodes that are never connected to: the fan-outs below run fake
    /// requests.
    pub(crate) fn nodes(n: usize) -> Vec<Node> {
        (0..n)
            .map(|i| {
                Node::parse(
                    &format!("redis://127.0.0.1:{}", 1000 + i),
                    &NodeOptions::default(),
                )
                .expect("a node URL")
            })
            .collect()
    }

    /// Makes `node` unresponsive: its last requests timed out.
    pub(crate) fn freeze(node: &Node) {
        while !node.unresponsive() {
            node.note(true);
        }
    }

    /// A fake request: `answer` after `ms` milliseconds.
    async fn after<T>(ms: u64, answer: T) -> Result<T, NodeError> {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(answer)
    }

    const FAR: Duration = Duration::from_secs(600);

    #[tokio::test(start_paused = true)]
    async fn a_fan_out_decides_at_a_quorum_and_leaves_the_rest_in_flight() {
        let nodes = nodes(3);
        let start = Instant::now();
        let delays = [10, 20, 1_000];
        let (round, stragglers) = fan_out(&nodes, Rule::Quorum, "test", start + FAR, |i, _, _| {
            after(delays[i], true)
        })
        .await;
        assert_eq!(round.decision, Decision::Reached);
        assert_eq!(round.tally.yes(), 2);
        assert_eq!(stragglers.nodes().collect::<Vec<_>>(), [2]);
        assert_eq!(round.votes(&stragglers), [Some(true), Some(true), None]);
        assert_eq!(Instant::now(), start + Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn a_split_vote_is_not_left_to_an_unresponsive_node() {
        // Two yes, two no: only the fifth node could decide.
        let split = |i: usize| after(if i == 4 { 1_000 } else { 10 }, i < 2);
        let nodes = nodes(5);
        let start = Instant::now();
        // A responsive fifth node is waited for.
        let (round, _) = fan_out(&nodes, Rule::Quorum, "test", start + FAR, |i, _, _| {
            split(i)
        })
        .await;
        assert_eq!(round.decision, Decision::Impossible);
        assert!(round.failures.is_empty());
        assert_eq!(Instant::now(), start + Duration::from_millis(1_000));
        // An unresponsive one is not, once the others have answered: it
        // counts as failed, and its request is left in flight.
        freeze(&nodes[4]);
        let start = Instant::now();
        let (round, stragglers) = fan_out(&nodes, Rule::Quorum, "test", start + FAR, |i, _, _| {
            split(i)
        })
        .await;
        assert_eq!(Instant::now(), start + Duration::from_millis(10));
        assert_eq!(round.decision, Decision::Impossible);
        assert!(matches!(
            &round.failures[..],
            [failure] if *failure.node == *"127.0.0.1:1004"
                && matches!(failure.error, NodeError::Unresponsive)
        ));
        assert_eq!(stragglers.nodes().collect::<Vec<_>>(), [4]);
        assert!(
            nodes[4].unresponsive(),
            "not waiting for it says nothing of it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn two_unresponsive_nodes_of_three_are_waited_for() {
        // More than N - Q: perhaps a loaded machine rather than frozen nodes.
        let nodes = nodes(3);
        freeze(&nodes[1]);
        freeze(&nodes[2]);
        let start = Instant::now();
        let delays = [10, 50, 60];
        let (round, _) = fan_out(&nodes, Rule::Quorum, "test", start + FAR, |i, _, _| {
            after(delays[i], true)
        })
        .await;
        assert_eq!(round.decision, Decision::Reached);
        assert_eq!(Instant::now(), start + Duration::from_millis(50));
        assert!(
            !nodes[1].unresponsive(),
            "its answer makes it responsive again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_node_times_out_at_the_deadline_and_is_noted() {
        let nodes = nodes(3);
        let start = Instant::now();
        let delays = [10, 1_000, 1_000];
        let (round, stragglers) = fan_out(
            &nodes,
            Rule::Quorum,
            "test",
            start + Duration::from_millis(100),
            |i, _, _| after(delays[i], true),
        )
        .await;
        assert!(stragglers.is_empty());
        assert_eq!(round.decision, Decision::Impossible);
        assert_eq!(round.failures.len(), 2);
        assert!(
            round
                .failures
                .iter()
                .all(|f| matches!(f.error, NodeError::Timeout(_)))
        );
        assert_eq!(Instant::now(), start + Duration::from_millis(100));
        // One timeout each: not yet unresponsive, but on the way.
        assert!(!nodes[1].unresponsive());
        nodes[1].note(true);
        assert!(nodes[1].unresponsive());
    }

    /// A batch of locks, each node's answer a vote per lock.
    struct Locks(Batch);

    impl Decide for Locks {
        type Answer = Vec<Vote>;

        fn record(&mut self, _: usize, answer: Result<Vec<Vote>, NodeFailure>) {
            self.0.record(answer.as_deref().map_err(|f| &f.error));
        }

        fn decided(&self) -> bool {
            self.0.decided()
        }
    }

    impl Traced for Vec<Vote> {
        fn trace(_: &'static str, _: &str, _: bool, _: &Result<Self, NodeError>) {}
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_is_decided_once_every_lock_is_and_not_by_a_frozen_node() {
        use Vote::{No, Yes};
        let nodes = nodes(5);
        let answers = [
            vec![Yes, Yes],
            vec![Yes, Yes],
            vec![Yes, No],
            vec![No, No],
            vec![Yes, Yes],
        ];
        let delays = [10, 20, 30, 40, 1_000];
        let start = Instant::now();
        let call = |i: usize, _: &Node, _| after(delays[i], answers[i].clone());
        // Lock 0 is decided at the third answer; lock 1, two against two,
        // only by the fifth node.
        let (locks, _) =
            fan_out_with(&nodes, "test", start + FAR, Locks(Batch::new(5, 2)), call).await;
        assert!(locks.decided());
        assert_eq!(Instant::now(), start + Duration::from_millis(1_000));
        assert_eq!(
            locks.0.tally(1).map(Tally::decision),
            Some(Decision::Reached)
        );
        // Frozen, the fifth node is not waited for: lock 1 fails.
        freeze(&nodes[4]);
        let start = Instant::now();
        let (locks, stragglers) =
            fan_out_with(&nodes, "test", start + FAR, Locks(Batch::new(5, 2)), call).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(40));
        assert_eq!(
            locks.0.tally(0).map(Tally::decision),
            Some(Decision::Reached)
        );
        assert_eq!(
            locks.0.tally(1).map(Tally::decision),
            Some(Decision::Impossible)
        );
        assert_eq!(stragglers.len(), 1);
        // A rule that waits for unresponsive nodes (a renewal's: no caller
        // waits on it, and a loaded node may still answer in time) waits
        // for the frozen fifth node, which decides lock 1.
        let start = Instant::now();
        let (locks, stragglers) =
            fan_out_with(&nodes, "test", start + FAR, Patient(Batch::new(5, 2)), call).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(1_000));
        assert_eq!(
            locks.0.tally(1).map(Tally::decision),
            Some(Decision::Reached)
        );
        assert!(stragglers.is_empty());
    }

    /// [`Locks`], waiting for unresponsive nodes as a renewal does.
    struct Patient(Batch);

    impl Decide for Patient {
        type Answer = Vec<Vote>;

        fn record(&mut self, _: usize, answer: Result<Vec<Vote>, NodeFailure>) {
            self.0.record(answer.as_deref().map_err(|f| &f.error));
        }

        fn decided(&self) -> bool {
            self.0.decided()
        }

        fn waits_for_unresponsive(&self) -> bool {
            true
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_node_is_awaited_alone() {
        let nodes = nodes(1);
        freeze(&nodes[0]);
        let start = Instant::now();
        let (round, stragglers) = fan_out(&nodes, Rule::Quorum, "test", start + FAR, |_, _, _| {
            after(30, true)
        })
        .await;
        assert_eq!(round.decision, Decision::Reached);
        assert!(stragglers.is_empty());
        assert_eq!(Instant::now(), start + Duration::from_millis(30));
    }

    /// Node 1's request is in flight (of three nodes); `restores` for an
    /// extension's.
    fn racing(restores: bool) -> InFlight {
        let requests = InFlight::new(3, &[1], restores);
        assert!(requests.pending(1));
        assert!(!requests.pending(0) && !requests.pending(2));
        requests
    }

    #[test]
    fn a_grant_the_release_deleted_ran_before_it() {
        // In order on the connection: the grant, then the release that
        // deletes it — whichever answer is handled first.
        let requests = racing(false);
        assert!(!requests.answered(1, true));
        assert!(!requests.released(1, true));
        let requests = racing(false);
        assert!(!requests.released(1, true));
        assert!(!requests.answered(1, true));
    }

    #[test]
    fn a_grant_the_release_did_not_find_is_released_again() {
        // The release overtook the grant (found nothing), or failed: the
        // grant may have landed after it. Whichever answer comes second
        // says so, once.
        let requests = racing(false);
        assert!(!requests.released(1, false));
        assert!(requests.answered(1, true));
        let requests = racing(false);
        assert!(!requests.answered(1, true));
        assert!(requests.released(1, false));
    }

    #[test]
    fn a_refused_or_failed_request_needs_nothing_more() {
        for deleted in [true, false] {
            let requests = racing(false);
            assert!(!requests.released(1, deleted));
            assert!(!requests.answered(1, false));
            let requests = racing(true);
            assert!(!requests.answered(1, false));
            assert!(!requests.released(1, deleted));
        }
    }

    #[test]
    fn a_restore_may_follow_any_release() {
        // An extension that restored the key may have run after a release
        // that deleted it.
        let requests = racing(true);
        assert!(!requests.released(1, true));
        assert!(requests.answered(1, true));
        let requests = racing(true);
        assert!(!requests.answered(1, true));
        assert!(requests.released(1, true));
    }

    #[test]
    fn nodes_not_in_flight_never_race() {
        let requests = racing(true);
        for node in [0, 2, 7] {
            assert!(!requests.released(node, false));
            assert!(!requests.released(node, true));
        }
    }
}
