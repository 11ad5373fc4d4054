//! The engine: the one fan-out ([`fan_out_with`]) every call to every node
//! runs on, one lock's [`Round`] of votes, and the following of requests
//! still in flight after a decision ([`follow`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use super::Core;
use crate::error::{Error, NodeError, NodeFailure};
use crate::metrics;
use crate::node::{Deadline, Heard, Node};
use crate::quorum::decide::{Decide, contest_patience, waits_only_on};
use crate::quorum::{Answer, Decision, Rule, Shortfall, Tally, Vote};
use crate::round::calls::Requests;
use crate::round::follower::Straggle;

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
    /// Whether a [contested](Decide::contested) round says so (an
    /// acquisition's, see [`Round::acquiring`]).
    gives_up_contests: bool,
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

    fn contested(&self) -> bool {
        let tally = &self.tally;
        self.gives_up_contests
            && self.rule == Rule::Quorum
            && tally.no() > 0
            && self.decision == Decision::Pending
            && tally.pending() <= tally.nodes() - tally.quorum()
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
            gives_up_contests: false,
        }
    }

    /// An acquisition's round of `nodes` nodes, none heard yet: decided by
    /// `rule`, and when [contested](Decide::contested), not waiting long for
    /// the nodes that alone could grant it (see
    /// [`contest_patience`](crate::quorum::decide::contest_patience)).
    pub(crate) fn acquiring(nodes: usize, rule: Rule) -> Self {
        Self {
            gives_up_contests: true,
            ..Self::new(nodes, rule)
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
    pub(super) fn refused_unless_reached(&self) -> Option<Vec<bool>> {
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
        // Nodes given up on in a contest answered nothing, but they are
        // not unreachable: only the others' failures make it unavailable.
        let outpaced = self
            .failures
            .iter()
            .filter(|f| matches!(f.error, NodeError::Outpaced { .. }))
            .count();
        match self.tally.shortfall(outpaced) {
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
    pub(crate) fn votes<'s, F>(
        &'s self,
        stragglers: &'s Requests<F>,
    ) -> impl Iterator<Item = Option<bool>> + 's {
        self.answers.iter().enumerate().map(move |(node, answer)| {
            let pending = stragglers.nodes().any(|straggler| straggler == node);
            (!pending).then(|| answer.is_some_and(|a| a.vote() == Vote::Yes))
        })
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
pub(crate) async fn fan_out<'a, 'f, T, F, Fut>(
    nodes: &'a [Node],
    rule: Rule,
    op: &'static str,
    deadline: Instant,
    call: F,
) -> (Round<T>, Requests<Call<'f, T>>)
where
    T: Answer,
    F: Fn(usize, &'a Node, Deadline) -> Fut,
    Fut: Future<Output = Result<T, NodeError>> + Send + 'f,
{
    fan_out_with(nodes, op, deadline, Round::new(nodes.len(), rule), call).await
}

/// A node's request in a fan-out, boxed (see [`fan_out_with`]).
pub(crate) type Call<'a, T> = Shallow<'a, Result<T, NodeError>>;

/// A future behind one allocation, as a `Send` trait object.
pub(crate) type Shallow<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// `future`, boxed: what a public call awaits of the layers below it. A
/// caller's future holds ours, and the compiler works out its layout and
/// auto traits through every level of both; behind a `dyn Future + Send`
/// it stops there (see tests/depth.rs). One allocation per call.
pub(crate) fn shallow<'a, T>(future: impl Future<Output = T> + Send + 'a) -> Shallow<'a, T> {
    Box::pin(future)
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
pub(crate) async fn fan_out_with<'a, 'f, D, F, Fut>(
    nodes: &'a [Node],
    op: &'static str,
    deadline: Instant,
    mut decide: D,
    call: F,
) -> (D, Requests<Call<'f, D::Answer>>)
where
    D: Decide<Answer: Traced>,
    F: Fn(usize, &'a Node, Deadline) -> Fut,
    Fut: Future<Output = Result<D::Answer, NodeError>> + Send + 'f,
{
    // Each request boxed (see `shallow`): the node layer's futures stay
    // out of the round's future and every caller's.
    let call = |i: usize, node: &'a Node, deadline: Deadline| -> Call<'f, D::Answer> {
        shallow(call(i, node, deadline))
    };
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
        Some(shared),
    );
    let start = Instant::now();
    // Set while the round is contested: until when the nodes that alone
    // could decide it are waited for.
    let mut patience: Option<Instant> = None;
    loop {
        let next = match patience {
            None => calls.next().await,
            Some(until) => match tokio::time::timeout_at(until, calls.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let behind = until.saturating_duration_since(start);
                    give_up(&calls, |n| {
                        record(&mut decide, n, Err(NodeError::Outpaced { behind }));
                    });
                    break;
                }
            },
        };
        let Some((i, answer)) = next else {
            break;
        };
        record(&mut decide, i, answer);
        if decide.decided() {
            break;
        }
        if waits_only_on_unresponsive(nodes, &calls, &decide) {
            give_up(&calls, |n| {
                record(&mut decide, n, Err(NodeError::Unresponsive))
            });
            break;
        }
        patience = decide
            .contested()
            .then(|| start + contest_patience(start.elapsed()));
    }
    (decide, calls)
}

/// Hands every node of `calls`, still in flight, to `fail`: a fan-out no
/// longer waits for them (their requests are left to its caller).
fn give_up<F>(calls: &Requests<F>, mut fail: impl FnMut(usize)) {
    let pending: Vec<usize> = calls.nodes().collect();
    for n in pending {
        fail(n);
    }
}

/// Whether the fan-out's `calls` still in flight are only to nodes that
/// do not answer, and `decide` may do without them: a frozen node does not
/// hold up a decision the others leave open (a split vote, say), it would
/// only time out.
fn waits_only_on_unresponsive<D: Decide, F>(
    nodes: &[Node],
    calls: &Requests<F>,
    decide: &D,
) -> bool {
    let unresponsive = calls
        .nodes()
        .filter(|&n| nodes.get(n).is_some_and(Node::unresponsive));
    !decide.waits_for_unresponsive()
        && waits_only_on(nodes.len(), calls.len(), unresponsive.count())
}

/// What every answer of a fan-out, or of its stragglers (`late`), tells
/// beyond its rule: how the node is doing, the failure metric, the logs.
fn heard<T: Traced>(node: &Node, op: &'static str, answer: &Result<T, NodeError>, late: bool) {
    // Only an answer or a timeout says how the node is doing.
    node.note(Heard::of(answer));
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
/// already there are handled at once, and the rest by their nodes'
/// followers (one task per node, see [`Followers`](super::follower)),
/// which [`Redlock::settle`](crate::Redlock::settle) waits for. Without a
/// runtime nothing can follow them: they are dropped, and their keys
/// expire by ttl.
pub(crate) fn follow<T, F, C>(
    core: &Arc<Core>,
    op: &'static str,
    mut stragglers: Requests<F>,
    on_answer: C,
) where
    T: Traced + Send + 'static,
    F: Future<Output = Result<T, NodeError>> + Unpin + Send + 'static,
    C: Fn(usize, Result<T, NodeError>) + Send + Sync + 'static,
{
    if stragglers.is_empty() || tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let late = Arc::new(Late {
        nodes: core.shared_nodes().clone(),
        op,
        on_answer,
    });
    while let Some(Some((node, answer))) = stragglers.next().now_or_never() {
        late.record(node, answer);
    }
    let (requests, due) = stragglers.into_parts();
    for (node, request) in requests {
        let late = late.clone();
        let straggler = Box::new(Straggler {
            node,
            request,
            late,
        });
        core.followers().follow(node, straggler, due);
    }
}

/// What a fan-out's late answers are for: the engine's notes (as for any
/// answer), then the caller's `on_answer`.
struct Late<C> {
    nodes: Arc<[Node]>,
    op: &'static str,
    on_answer: C,
}

impl<C> Late<C> {
    fn record<T: Traced>(&self, node: usize, answer: Result<T, NodeError>)
    where
        C: Fn(usize, Result<T, NodeError>),
    {
        if let Some(target) = self.nodes.get(node) {
            heard(target, self.op, &answer, true);
        }
        metrics::followed(self.op, answer.is_ok());
        (self.on_answer)(node, answer);
    }
}

/// One node's request still in flight, in its node's follower.
struct Straggler<F, C> {
    node: usize,
    request: F,
    late: Arc<Late<C>>,
}

impl<T, F, C> Straggle for Straggler<F, C>
where
    T: Traced,
    F: Future<Output = Result<T, NodeError>> + Unpin + Send,
    C: Fn(usize, Result<T, NodeError>) + Send + Sync,
{
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let answer = Pin::new(&mut self.request).poll(cx);
        answer.map(|answer| self.late.record(self.node, answer))
    }

    fn time_out(&mut self, given: Duration) {
        self.late.record(self.node, Err(NodeError::Timeout(given)));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::quorum::decide::{Batch, CONTEST_PATIENCE_FLOOR};
    use crate::round::tests::{freeze, nodes};

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
        assert_eq!(
            round.votes(&stragglers).collect::<Vec<_>>(),
            [Some(true), Some(true), None]
        );
        assert_eq!(Instant::now(), start + Duration::from_millis(20));
    }

    /// An acquisition's fan-out to five nodes: node `i` answers `votes[i]`
    /// after `delays[i]` ms. Returns the round, its nodes still in flight,
    /// and how long it took.
    async fn acquiring(delays: [u64; 5], votes: [bool; 5]) -> (Round, Vec<usize>, Duration) {
        let nodes = nodes(5);
        let start = Instant::now();
        let (round, stragglers) = fan_out_with(
            &nodes,
            "test",
            start + FAR,
            Round::acquiring(5, Rule::Quorum),
            |i, _, _| after(delays[i], votes[i]),
        )
        .await;
        (round, stragglers.nodes().collect(), start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_contested_acquisition_does_not_wait_long_for_a_node_far_behind() {
        // Two yes, two no in 1 ms: only node 4 could grant it, 40 ms away.
        // It is given up on at four times the others' 1 ms, floored at 2.
        let (round, left, took) =
            acquiring([1, 1, 1, 1, 40], [true, true, false, false, true]).await;
        assert_eq!(took, Duration::from_millis(4));
        assert_eq!(round.decision, Decision::Impossible);
        assert!(matches!(
            &round.failures[..],
            [failure] if *failure.node == *"127.0.0.1:1004"
                && matches!(failure.error, NodeError::Outpaced { behind } if behind == took)
        ));
        assert_eq!(left, [4], "its request is left in flight, for the cleanup");
        // Answers at once: the floor.
        let (round, _, took) = acquiring([0, 0, 0, 0, 40], [true, true, false, false, true]).await;
        assert_eq!(took, CONTEST_PATIENCE_FLOOR);
        assert_eq!(round.decision, Decision::Impossible);
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_within_the_patience_or_an_uncontested_round_is_waited_for() {
        // Contested, node 4 answers at 3 ms, within 4 x 1 ms: granted.
        let (round, _, took) = acquiring([1, 1, 1, 1, 3], [true, true, false, false, true]).await;
        assert_eq!(round.decision, Decision::Reached);
        assert_eq!(took, Duration::from_millis(3));
        // The answers trickling in stretch the patience: the last at 10 ms
        // gives node 4 until 40 ms.
        let (round, _, took) =
            acquiring([1, 5, 10, 10, 35], [true, true, false, false, true]).await;
        assert_eq!(round.decision, Decision::Reached);
        assert_eq!(took, Duration::from_millis(35));
        // Refused early, but most nodes have yet to answer: not a node far
        // behind the others, waited for.
        let (round, _, took) = acquiring([1, 30, 30, 30, 1], [false, true, true, true, true]).await;
        assert_eq!(round.decision, Decision::Reached);
        assert_eq!(took, Duration::from_millis(30));
        // Nobody refused (two yes, two failed to answer in time is not a
        // refusal; here two yes and node 4 far behind with nodes 2 and 3
        // slower still): waited for, however long.
        let (round, _, took) =
            acquiring([1, 1, 500, 500, 400], [true, true, true, true, true]).await;
        assert_eq!(round.decision, Decision::Reached);
        assert_eq!(took, Duration::from_millis(400));
        // A round not of an acquisition is never given up early.
        let nodes = nodes(5);
        let delays = [1, 1, 1, 1, 400];
        let (round, _) = fan_out(
            &nodes,
            Rule::Quorum,
            "test",
            Instant::now() + FAR,
            |i, _, _| after(delays[i], i != 2 && i != 3),
        )
        .await;
        assert_eq!(round.decision, Decision::Reached);
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
        nodes[1].note(Heard::Timeout);
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
}
