//! What a holder owns: `LockGuard`, with extend, auto-extension, release,
//! and a best-effort release on drop.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{NodeError, NodeFailure};
use crate::lease::{Held, Lease, LossReason, RoundId};
use crate::node::Extension;
use crate::quorum::{Decision, Vote, Window};
use crate::redlock::{
    Answer, Redlock, Request, Round, Stragglers, Until, fan_out, release_everywhere,
};
use crate::{Error, Token};

/// A held lock.
///
/// The holder may trust the lock until [`deadline`](Lease::deadline) (see
/// [`validity`](Lease::validity)); [`extend`](Self::extend) moves the
/// deadline, [`auto_extend`](Self::auto_extend) keeps moving it in the
/// background, [`release`](Self::release) gives the lock up and reports per
/// node, and [`lost`](Lease::lost) resolves once the lock can no longer be
/// trusted. The guard dereferences to a [`Lease`], the read-only view it
/// can also hand out with [`lease`](Self::lease).
///
/// Dropping a guard without calling `release` releases the lock in the
/// background when a tokio runtime is available; without one, the keys
/// simply expire after their ttl. Releasing consumes the guard, so a lock
/// cannot be released twice.
#[must_use = "dropping the guard releases the lock in the background; bind it (`let guard = …`) for as long as you need the lock"]
pub struct LockGuard {
    redlock: Redlock,
    lease: Lease,
    /// The ttl the lock was acquired with; auto-extension renews with it.
    ttl: Duration,
    ttl_ms: u64,
    /// Set once `release` has run, so that `Drop` does not release again.
    released: bool,
    /// Acquire requests that were still in flight at the quorum decision.
    in_flight: Option<Arc<InFlight>>,
}

impl Deref for LockGuard {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl LockGuard {
    pub(crate) fn new(
        redlock: Redlock,
        request: &Request,
        token: Token,
        fence: Option<u64>,
        window: Window,
    ) -> Self {
        let fence = fence.zip(request.fence_key.clone());
        let held = Held::new(
            request.resource.clone(),
            request.keys.clone(),
            token,
            fence,
            window.start(),
            window.deadline(),
            redlock.config().nodes.len(),
        );
        Self {
            redlock,
            lease: Lease {
                held: Arc::new(held),
            },
            ttl: request.ttl,
            ttl_ms: request.ttl_ms,
            released: false,
            in_flight: None,
        }
    }

    pub(crate) fn held(&self) -> &Arc<Held> {
        &self.lease.held
    }

    /// An owned, cloneable view of this lock for code running under it.
    pub fn lease(&self) -> Lease {
        self.lease.clone()
    }

    /// Records where the acquire's deciding answers put the token, and
    /// follows the requests that were still in flight at the quorum
    /// decision to their answers in a background task, at once: a request
    /// whose connection was still being set up (a fresh manager, a
    /// reconnect) is sent only while something polls it, and a held lock
    /// belongs on every node that can take it, so that it survives the
    /// loss of any minority. Releasing waits, node by node, until such a
    /// request has answered (or timed out), so that a late grant is removed
    /// too.
    pub(crate) fn follow_stragglers<T, F>(&mut self, round: &Round<T>, stragglers: Stragglers<F>)
    where
        T: Answer + Send + 'static,
        F: Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        let pending = confirm(self.held(), RoundId::ACQUIRE, round, &stragglers);
        tracing::debug!(
            confirmed = self.held().confirmations.count(),
            in_flight = pending.len(),
            "lock granted"
        );
        if pending.is_empty() {
            return;
        }
        let in_flight = Arc::new(InFlight::new(self.redlock.config().nodes.len(), pending));
        self.in_flight = Some(in_flight.clone());
        follow(
            &self.redlock,
            self.held().clone(),
            RoundId::ACQUIRE,
            "acquire",
            stragglers,
            Some(in_flight),
        );
    }

    /// Keeps the lock alive in the background until it is released,
    /// dropped or lost: it is renewed (with the ttl it was acquired with)
    /// on a quorum when between a half and a third of its validity is
    /// left, and failed renewals are retried quickly. Renewal stops for
    /// good once the lock is lost; watch [`lost`](Lease::lost). Like
    /// [`extend`](Self::extend), a renewal sets the lock again on nodes
    /// that lost its key (restarted empty, evicted it), so the lock lives
    /// through rolling restarts of its nodes.
    ///
    /// Renewals of all auto-extended locks of a manager are batched: one
    /// script call per node per round, however many locks are due, and one
    /// background task per manager. Calling it twice has no further effect
    /// than renewing a little more often. Needs a tokio runtime; without
    /// one, the lock expires at its deadline.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn rebuild_cache() {}
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// // A 10 s ttl, held for as long as the rebuild takes.
    /// let guard = locks.lock("cache:rebuild", Duration::from_secs(10)).await?;
    /// guard.auto_extend();
    /// tokio::select! {
    ///     _ = rebuild_cache() => { guard.release().await?; }
    ///     reason = guard.lost() => eprintln!("lost the lock: {reason}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn auto_extend(&self) {
        let renewer = self.redlock.config().renewer.clone();
        renewer.register(&self.redlock, self.held().clone(), self.ttl, self.ttl_ms);
    }

    /// Extends the lock to `ttl` from now, on a quorum of nodes: a Redlock
    /// round with the lock's own token.
    ///
    /// On each node, atomically: where every key of the lock holds its
    /// token, they get the new ttl; where keys are absent (the node
    /// restarted empty, or evicted them), they are set again with the token
    /// and the new ttl, and a fenced lock's counter there is raised to the
    /// lock's fence; where a key holds another value (another owner's
    /// token), nothing is touched and the node refuses. The extension
    /// counts with a quorum of nodes that extended or restored. Any quorum
    /// shares a node with any other owner's quorum, where that owner's key
    /// made this one refuse, so restoring is as safe as acquiring.
    ///
    /// The new deadline is `start + ttl - drift`, with `start` taken when
    /// the extension began. Nodes are not waited for past the current
    /// deadline: once the lock's deadline has passed it is lost for good
    /// and cannot be extended. Nodes still answering at the decision are
    /// followed in the background, so that every node that can hold the
    /// lock does ([`confirmed`](Lease::confirmed) counts them).
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`]: the deadline already passed, or so many nodes hold
    ///   another value in place of the token that no quorum can hold it.
    ///   The lock is then lost for good ([`lost`](Lease::lost) resolves).
    /// - [`Error::Unavailable`]: too few nodes answered. Nothing is known
    ///   to be lost: the previous deadline still holds, and a later
    ///   `extend` may succeed.
    /// - [`Error::Contended`]: too few nodes extended, and some of them
    ///   hold another owner's value; the previous deadline still holds.
    /// - [`Error::InvalidArgument`]: a ttl that `lock` would reject.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe. If the future is dropped, some nodes may
    /// have been extended and others not; the deadline stays where it was,
    /// which remains a safe bound.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock("reports:daily", Duration::from_secs(10)).await?;
    /// // … the job needs longer than planned …
    /// guard.extend(Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<(), Error> {
        let (ttl, ttl_ms) = self.redlock.check_ttl(ttl)?;
        let config = self.redlock.config();
        let quorum = self.redlock.quorum();
        let held = self.held();
        let span =
            tracing::debug_span!("quorumlock", op = "extend", resource = %held.resource, ttl_ms);
        async {
            let start = Instant::now();
            let current = held.status();
            if !current.trusted_at(start) {
                let reason = current.lost.unwrap_or(LossReason::Expired);
                held.mark_lost(reason);
                return Err(held.lost_error(reason, 0, quorum, Vec::new()));
            }
            let window = Window::new(start, ttl, config.drift_factor);
            let deadline = (start + config.node_timeout).min(current.deadline);
            let id = held.confirmations.next_round();
            // Owned requests: the ones still in flight at the decision are
            // followed to their answers, so that every node that can hold
            // the lock is extended (or has it restored), not just a quorum.
            let (round, stragglers) = fan_out(
                &config.nodes,
                Until::Decided,
                "extend",
                deadline,
                |i, _, deadline| {
                    let (redlock, held) = (self.redlock.clone(), held.clone());
                    async move {
                        let lock = extension(&held, ttl_ms);
                        redlock.config().nodes[i].extend(lock, deadline).await
                    }
                },
            )
            .await;
            confirm(held, id, &round, &stragglers);
            follow(&self.redlock, held.clone(), id, "extend", stragglers, None);

            if round.decision == Decision::Reached {
                let now = Instant::now();
                if window.validity_at(now).is_some()
                    && held.extend_to(now, window.start(), window.deadline())
                {
                    tracing::debug!(
                        extended = round.tally.yes(),
                        confirmed = held.confirmations.count(),
                        "lock extended"
                    );
                    return Ok(());
                }
                let reason = held.status().lost.unwrap_or(LossReason::Expired);
                held.mark_lost(reason);
                return Err(held.lost_error(reason, round.tally.yes(), quorum, round.failures));
            }
            // A "no" is a node holding another value: absent keys were set
            // again, so refusals alone ruling out a quorum mean the token is
            // gone for good.
            if round.tally.refused_by_quorum_complement() {
                held.mark_lost(LossReason::TokenGone);
                return Err(held.lost_error(
                    LossReason::TokenGone,
                    round.tally.yes(),
                    quorum,
                    round.failures,
                ));
            }
            Err(round.failure(&held.resource))
        }
        .instrument(span)
        .await
    }

    /// Releases the lock: a token-checked delete on every node, waiting for
    /// each node's answer (or its timeout). Auto-extension stops.
    ///
    /// A node whose acquire request was still unanswered when the lock was
    /// granted is sent its release once that request has answered or timed
    /// out, so that a late grant is removed too: right after acquiring,
    /// with a node that hangs, releasing can take two node timeouts.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when so many nodes no longer held the token that no
    /// quorum did: the lock had expired (or nodes restarted) before this
    /// call, so the critical section may not have been exclusive to the
    /// end. Nodes that did not answer are listed in the summary's
    /// [`failures`](ReleaseSummary::failures); their keys expire by ttl.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe. If the future is dropped before every
    /// node answered, the guard it owns is dropped with it, which releases
    /// again in the background.
    pub async fn release(mut self) -> Result<ReleaseSummary, Error> {
        let held = self.held().clone();
        let span = tracing::debug_span!("quorumlock", op = "release", resource = %held.resource);
        // Renewal stops and `lost()` resolves before the keys go.
        held.mark_lost(LossReason::Released);
        held.confirmations.clear();
        let in_flight = self.in_flight.as_deref();
        let round = release_everywhere(&self.redlock, &held.keys, &held.token, None, in_flight)
            .instrument(span)
            .await;
        self.released = true;
        tracing::debug!(
            resource = %held.resource,
            released = round.tally.yes(),
            failed = round.failures.len(),
            "lock released"
        );
        let quorum = round.tally.quorum();
        if round.tally.yes() < quorum && round.tally.refused_by_quorum_complement() {
            return Err(held.lost_error(
                LossReason::TokenGone,
                round.tally.yes(),
                quorum,
                round.failures,
            ));
        }
        let released_on = self
            .redlock
            .config()
            .nodes
            .iter()
            .zip(&round.answers)
            .filter(|(_, answer)| **answer == Some(true))
            .map(|(node, _)| node.label().clone())
            .collect();
        Ok(ReleaseSummary {
            released_on,
            nodes: round.tally.nodes(),
            failures: round.failures,
        })
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.lease)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let held = self.held().clone();
        held.mark_lost(LossReason::Released);
        held.confirmations.clear();
        let redlock = self.redlock.clone();
        let in_flight = self.in_flight.take();
        let background = redlock.config().background.clone();
        // Best effort: without a runtime the keys expire after their ttl.
        let spawned = background.spawn(async move {
            let in_flight = in_flight.as_deref();
            release_everywhere(&redlock, &held.keys, &held.token, None, in_flight).await;
        });
        if spawned.is_none() {
            tracing::debug!(resource = %self.lease.resource(), "guard dropped outside a runtime; keys will expire");
        }
    }
}

/// What a lock asks of a node when it is extended or renewed.
pub(crate) fn extension(held: &Held, ttl_ms: u64) -> Extension<'_> {
    Extension {
        keys: &held.keys,
        token: held.token.as_str(),
        ttl_ms,
        fence: held.fence_key.as_deref().zip(held.fence),
    }
}

/// Records, per node, what the answers that decided `round` (number `id`)
/// say of the token; nodes that failed hold it no longer, as far as the
/// holder knows. Returns the nodes whose requests are still in flight.
pub(crate) fn confirm<T: Answer, F: Future<Output = Result<T, NodeError>>>(
    held: &Held,
    id: RoundId,
    round: &Round<T>,
    stragglers: &Stragglers<F>,
) -> Vec<usize> {
    let pending: Vec<usize> = stragglers.nodes().collect();
    for (node, answer) in round.answers.iter().enumerate() {
        if !pending.contains(&node) {
            let yes = answer.is_some_and(|answer| answer.vote() == Vote::Yes);
            held.confirmations.record(id, node, yes);
        }
    }
    pending
}

/// Follows a round's requests still in flight after its decision to their
/// answers in a background task, recording each in the lock's
/// confirmations (and in `in_flight`, for a release waiting on them).
/// Without a runtime nothing can follow them; `in_flight` is then marked
/// answered at once, so that a release does not wait for them.
pub(crate) fn follow<T, F>(
    redlock: &Redlock,
    held: Arc<Held>,
    id: RoundId,
    op: &'static str,
    mut stragglers: Stragglers<F>,
    in_flight: Option<Arc<InFlight>>,
) where
    T: Answer + Send + 'static,
    F: Future<Output = Result<T, NodeError>> + Send + 'static,
{
    let record = move |held: &Held, labels: &Redlock, node: usize, answer: Result<T, NodeError>| {
        let vote = answer.as_ref().map(Answer::vote).unwrap_or(Vote::Failed);
        held.confirmations.record(id, node, vote == Vote::Yes);
        let label = labels.config().nodes[node].label();
        let confirmed = held.confirmations.count();
        tracing::debug!(op, node = %label, late = true, ?vote, confirmed);
    };
    // Answers that arrived with the deciding ones need no task.
    while let Some(Some((node, answer))) = stragglers.next().now_or_never() {
        record(&held, redlock, node, answer);
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
    let labels = redlock.clone();
    redlock.config().background.spawn(async move {
        while let Some((node, answer)) = stragglers.next().await {
            record(&held, &labels, node, answer);
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
    fn new(nodes: usize, in_flight: impl IntoIterator<Item = usize>) -> Self {
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

    /// Resolves once `node`'s request has answered or timed out.
    pub(crate) async fn answered(&self, node: usize) {
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

/// The outcome of [`LockGuard::release`], per node.
#[derive(Debug)]
#[non_exhaustive]
pub struct ReleaseSummary {
    released_on: Vec<Arc<str>>,
    nodes: usize,
    failures: Vec<NodeFailure>,
}

impl ReleaseSummary {
    /// How many nodes held the token and deleted it.
    pub fn released(&self) -> usize {
        self.released_on.len()
    }

    /// The nodes that held the token and deleted it.
    pub fn released_on(&self) -> impl ExactSizeIterator<Item = &str> {
        self.released_on.iter().map(|n| &**n)
    }

    /// How many nodes were asked. Those neither in
    /// [`released_on`](Self::released_on) nor in
    /// [`failures`](Self::failures) answered that they did not hold the
    /// token.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The nodes that did not answer, with their errors. Their keys, if
    /// any, expire after the ttl.
    pub fn failures(&self) -> &[NodeFailure] {
        &self.failures
    }
}
