//! What a holder owns: `LockGuard`, with extend, auto-extension, release,
//! and a best-effort release on drop. Built on rounds and the [`Core`],
//! not on the manager.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, LossReason, NodeError};
use crate::holding::lease::{Extended, Lease, LockState, RoundId};
use crate::holding::renew::Renewer;
pub use crate::holding::summary::ReleaseSummary;
use crate::holding::summary::{Answers, Following};
use crate::metrics;
use crate::node::{Deadline, ExtendReply, Op};
use crate::quorum::{Answer, Rule, Vote, Window};
use crate::request::Ttl;
use crate::round::calls::Requests;
use crate::round::{Core, Grant, InFlight, Round, fan_out, follow, release_again, shallow};

/// A held lock.
///
/// The holder may trust the lock until [`deadline`](Self::deadline) (see
/// [`validity`](Self::validity)); [`extend`](Self::extend) moves the
/// deadline, [`auto_extend`](Self::auto_extend) keeps moving it in the
/// background, [`release`](Self::release) gives the lock up and reports per
/// node, and [`lost`](Self::lost) resolves once the lock can no longer be
/// trusted. [`lease`](Self::lease) hands out a [`Lease`]: the same
/// read-only getters, owned and cloneable, for code running under the lock.
///
/// Dropping a guard without calling `release` releases the lock in the
/// background when a tokio runtime is available; without one, the keys
/// simply expire after their ttl. Releasing consumes the guard, so a lock
/// cannot be released twice.
#[must_use = "dropping the guard releases the lock in the background; bind it (`let guard = …`) for as long as you need the lock"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    core: Arc<Core>,
    renewer: Arc<Renewer>,
    /// Read by the typed guards' getters (`typed_guard!`), in their
    /// primitives' folders.
    pub(crate) lease: Lease,
    /// The ttl the lock was acquired with; auto-extension renews with it.
    ttl: Ttl,
    /// Set once `release` has run, so that `Drop` does not release again.
    released: bool,
    /// Acquire requests that were still in flight at the quorum decision,
    /// raced against the release (see [`InFlight`]).
    in_flight: Option<Arc<InFlight>>,
}

/// The read-only getters every guard shares with its [`Lease`], each
/// answering what the lease's method of the same name does (documented
/// there). Written once, for [`LockGuard`] and the typed guards of the
/// other primitives; `$($lease)+` is the path from `self` to the lease.
macro_rules! lease_getters {
    ($($lease:ident).+) => {
        /// The resource name the lock is held on ([`Lease::resource`](crate::Lease::resource)).
        pub fn resource(&self) -> &str {
            self.$($lease).+.resource()
        }

        /// This grant's token ([`Lease::token`](crate::Lease::token)).
        pub fn token(&self) -> &$crate::Token {
            self.$($lease).+.token()
        }

        /// On how many nodes the token is confirmed ([`Lease::confirmed`](crate::Lease::confirmed)).
        pub fn confirmed(&self) -> usize {
            self.$($lease).+.confirmed()
        }

        /// The instant after which the holder must assume it no longer
        /// holds the lock ([`Lease::deadline`](crate::Lease::deadline)).
        pub fn deadline(&self) -> ::tokio::time::Instant {
            self.$($lease).+.deadline()
        }

        /// When the request behind the current deadline began
        /// ([`Lease::started`](crate::Lease::started)).
        pub fn started(&self) -> ::tokio::time::Instant {
            self.$($lease).+.started()
        }

        /// How much longer the lock can be trusted; zero once it is lost
        /// ([`Lease::validity`](crate::Lease::validity)).
        pub fn validity(&self) -> ::std::time::Duration {
            self.$($lease).+.validity()
        }

        /// Why the lock is lost, if it is; `None` while it can be trusted
        /// ([`Lease::loss_reason`](crate::Lease::loss_reason)).
        pub fn loss_reason(&self) -> Option<$crate::LossReason> {
            self.$($lease).+.loss_reason()
        }

        /// Resolves once the holder must assume the lock is gone, with the
        /// reason ([`Lease::lost`](crate::Lease::lost)). Cancel safe; the future borrows
        /// nothing.
        pub fn lost(
            &self,
        ) -> impl ::std::future::Future<Output = $crate::LossReason> + Send + 'static + use<> {
            self.$($lease).+.lost()
        }

        /// An owned, cloneable view of this lock for code running under it
        /// (see [`Lease`](crate::Lease)).
        pub fn lease(&self) -> $crate::Lease {
            self.$($lease).+.clone()
        }
    };
}

pub(crate) use lease_getters;

impl LockGuard {
    /// The guard of a granted attempt. Records where the deciding answers
    /// put the token, and follows the requests still in flight at the
    /// decision to their answers at once (see [`follow`]): a held lock
    /// belongs on every node that can take it, so that it survives the
    /// loss of any minority. A release does not wait for them: a late grant
    /// that may have landed after it is released again (see [`InFlight`]).
    pub(crate) fn new<T, F>(
        core: Arc<Core>,
        renewer: Arc<Renewer>,
        resource: Arc<str>,
        ttl: Ttl,
        grant: Grant<T, F>,
    ) -> Self
    where
        T: Answer + Send + 'static,
        F: Future<Output = Result<T, NodeError>> + Unpin + Send + 'static,
    {
        let Grant {
            holding,
            window,
            round,
            stragglers,
        } = grant;
        let nodes = core.len();
        let held = Arc::new(LockState::new(
            resource,
            holding,
            window.start(),
            window.deadline(),
            nodes,
        ));
        metrics::granted();
        let pending = confirm(&held, RoundId::ACQUIRE, &round, &stragglers);
        tracing::debug!(
            confirmed = held.confirmations.count(),
            in_flight = pending.len(),
            "lock granted"
        );
        let in_flight = (!pending.is_empty()).then(|| Arc::new(InFlight::new(nodes, &pending)));
        follow_into(
            &core,
            &held,
            RoundId::ACQUIRE,
            "acquire",
            stragglers,
            Late::Grant(in_flight.clone()),
        );
        Self {
            core,
            renewer,
            lease: Lease { held },
            ttl,
            released: false,
            in_flight,
        }
    }

    pub(crate) fn held(&self) -> &Arc<LockState> {
        &self.lease.held
    }

    lease_getters!(lease);

    /// The fencing token of this grant, for fenced locks and elections;
    /// `None` otherwise ([`Lease::fence`]).
    pub fn fence(&self) -> Option<u64> {
        self.lease.fence()
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
    /// Where the nodes offer it (see
    /// [`HeldKeyTracking`](crate::HeldKeyTracking), on by default), they
    /// also watch the lock's keys: when anybody else deletes, evicts or
    /// overwrites one, the lock is renewed at once rather than on schedule,
    /// so a key nobody took is set again, and a lock another owner took
    /// resolves [`lost`](Lease::lost) within a round trip.
    ///
    /// Renewals of all auto-extended locks of a manager are batched: one
    /// script call per node per round, however many locks are due, and one
    /// background task per manager. Calling it again has no effect. Needs a
    /// tokio runtime; without one, the lock expires at its deadline.
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
        if self.held().start_auto_extension() {
            let held = self.held().clone();
            self.renewer.register(&self.core, held, self.ttl);
        }
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
        let ttl = self.core.ttl(ttl)?;
        let core = &self.core;
        let held = self.held();
        let span = tracing::debug_span!(
            "quorumlock",
            op = "extend",
            resource = %held.resource,
            ttl_ms = ttl.ms()
        );
        shallow(
            async {
                let start = Instant::now();
                let current = held.status();
                if !current.trusted_at(start) {
                    let reason = current.lost.unwrap_or(LossReason::Expired);
                    held.mark_lost(reason);
                    return Err(held.lost_error(reason, 0, core.quorum(), Vec::new()));
                }
                let window = core.window(start, ttl);
                let deadline = core.timeout_within(start, current.deadline);
                let id = held.confirmations.next_round();
                // Owned requests: the ones still in flight at the decision are
                // followed to their answers, so that every node that can hold
                // the lock is extended (or has it restored), not just a quorum.
                let (round, stragglers) = fan_out(
                    core.nodes(),
                    Rule::Quorum,
                    "extend",
                    deadline,
                    |i, _, deadline| extend_on(core.clone(), held.clone(), i, ttl, deadline),
                )
                .await;
                confirm(held, id, &round, &stragglers);
                follow_into(core, held, id, "extend", stragglers, Late::Restore);
                extension_outcome(core, held, round, &window)
            }
            .instrument(span),
        )
        .await
    }

    /// Releases the lock: a token-checked delete on every node, decided at
    /// a quorum. Auto-extension stops, and [`lost`](Lease::lost) resolves,
    /// before any key goes.
    ///
    /// Returns as soon as the outcome is known: a quorum of nodes deleted
    /// the token, or so many found it gone that no quorum holds it (the
    /// lock was lost); the other nodes are followed in the background, each
    /// bounded by the node timeout, so a slow or frozen minority costs the
    /// caller nothing. (Failures alone do not decide it: with a majority
    /// failing it waits for every node, each within the node timeout.) The
    /// summary says what was known when it returned;
    /// [`ReleaseSummary::settled`] waits for the rest.
    ///
    /// A node whose acquire (or extension) request was still unanswered is
    /// not waited for either: the release goes out behind that request on
    /// the node's connection, where Redis runs it after the request; where
    /// that order is not certain, a late grant that may have landed after
    /// the release is released again.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when so many nodes no longer held the token that no
    /// quorum did: the lock had expired (or nodes restarted) before this
    /// call, so the critical section may not have been exclusive to the
    /// end. Nodes that did not answer are listed in the summary's
    /// [`failures`](ReleaseSummary::failures); they are owed the release,
    /// delivered once they answer (see `docs/how-it-works.md`).
    ///
    /// [`Error::Incompatible`] when so many nodes cannot run the release
    /// (in [`ScriptMode::Functions`](crate::ScriptMode::Functions): no
    /// Functions, or no library loaded) that no quorum released: the keys
    /// stay until their ttl, and every later lock will fail the same way.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe. If the future is dropped before the
    /// release was decided, the guard it owns is dropped with it, which
    /// releases again in the background.
    ///
    /// # Examples
    ///
    /// Find out whether the critical section stayed exclusive to its end:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock("ledger:close", Duration::from_secs(10)).await?;
    /// // … close the ledger …
    /// match guard.release().await {
    ///     Ok(summary) => println!("{summary}"), // released on 3 of 3 nodes
    ///     Err(quorumlock::Error::Lost { .. }) => eprintln!("the lock had expired: check the ledger"),
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<ReleaseSummary, Error> {
        let held = self.held().clone();
        let span = tracing::debug_span!("quorumlock", op = "release", resource = %held.resource);
        let giving_up = give_up(&self.core, &held, self.in_flight.take()).instrument(span);
        let (round, following) = shallow(giving_up).await;
        self.released = true;
        let quorum = round.tally.quorum();
        if round.tally.yes() < quorum && round.tally.refused_by_quorum_complement() {
            metrics::release("lost");
            return Err(held.lost_error(
                LossReason::TokenGone,
                round.tally.yes(),
                quorum,
                round.failures,
            ));
        }
        if round.incompatible() {
            metrics::release("incompatible");
            return Err(round.incompatible_error(&held.resource));
        }
        metrics::release(if round.failures.is_empty() {
            "released"
        } else {
            "partial"
        });
        let labels = || self.core.nodes().iter().map(|node| node.label().clone());
        let released_on = labels()
            .zip(&round.answers)
            .filter(|(_, answer)| **answer == Some(true))
            .map(|(label, _)| label)
            .collect();
        let following = following.map(|(nodes, answers)| Following {
            nodes: nodes
                .into_iter()
                .filter_map(|i| Some((i, self.core.node(i).ok()?.label().clone())))
                .collect(),
            answers,
        });
        Ok(ReleaseSummary::new(
            released_on,
            round.tally.nodes(),
            round.failures,
            following,
        ))
    }
}

/// Gives a lock up: renewal stops and `lost()` resolves before the keys
/// go, then a token-checked delete on every node, decided at a quorum —
/// the one release of both [`LockGuard::release`] and a dropped guard.
/// The nodes still answering then are followed in the background; with
/// them, the nodes they are and where their answers will show.
///
/// Requests of the lock still in flight (the acquire's, `in_flight`, and
/// the newest explicit extension's) are raced, not waited for: see
/// [`InFlight`].
async fn give_up(
    core: &Arc<Core>,
    held: &Arc<LockState>,
    in_flight: Option<Arc<InFlight>>,
) -> (Round, Option<(Vec<usize>, watch::Receiver<Answers>)>) {
    held.mark_lost(LossReason::Released);
    held.confirmations.clear();
    // Per node, the acquire's requests this release races: those still in
    // flight now, before it is sent. (Extensions' and renewals' late
    // answers go by `restored_late`.)
    let mut races: Vec<(usize, Arc<InFlight>)> = Vec::new();
    if let Some(requests) = in_flight {
        for node in (0..core.len()).filter(|&node| requests.pending(node)) {
            races.push((node, requests.clone()));
        }
    }
    let (round, stragglers) = crate::round::release(core, held).await;
    // (Nothing to allocate when it raced none: the usual case.)
    let settle = (!races.is_empty()).then(|| settle_races(core, held, races));
    // The nodes that answered in the round; those still in flight, below.
    if let Some(settle) = &settle {
        for (node, vote) in round.votes(&stragglers).enumerate() {
            if let Some(deleted) = vote {
                settle(node, deleted);
            }
        }
    }
    tracing::debug!(
        resource = %held.resource,
        released = round.tally.yes(),
        failed = round.failures.len(),
        in_flight = stragglers.nodes().count(),
        "lock released"
    );
    if stragglers.is_empty() {
        return (round, None);
    }
    let nodes: Vec<usize> = stragglers.nodes().collect();
    let (answers, following) = watch::channel(vec![None; core.len()]);
    follow(core, "release", stragglers, move |node, answer| {
        if let Some(settle) = &settle {
            settle(node, answer.as_ref().is_ok_and(|&deleted| deleted));
        }
        answers.send_modify(|answers| {
            if let Some(slot) = answers.get_mut(node) {
                *slot = Some(answer);
            }
        });
    });
    (round, Some((nodes, following)))
}

/// The extension of `held` with `ttl` on node `i`, owned (it may be
/// followed after the decision): with whatever else is bound for the node
/// meanwhile, where it can.
async fn extend_on(
    core: Arc<Core>,
    held: Arc<LockState>,
    i: usize,
    ttl: Ttl,
    deadline: Deadline,
) -> Result<ExtendReply, NodeError> {
    let holding = &held.holding;
    let alone = async || core.node(i)?.extend(holding.extension(ttl), deadline).await;
    let (op, on_node) = (Op::Extend { ttl }, holding.on_node());
    core.lanes().send_or(i, op, on_node, deadline, alone).await
}

/// What an extension's round means for its caller (and the metrics).
fn extension_outcome(
    core: &Arc<Core>,
    held: &Arc<LockState>,
    round: Round<ExtendReply>,
    window: &Window,
) -> Result<(), Error> {
    match held.settle_extension(round.decision, &round.tally, window) {
        Extended::Yes => {
            metrics::extension("extended");
            let confirmed = held.confirmations.count();
            tracing::debug!(extended = round.tally.yes(), confirmed, "lock extended");
            Ok(())
        }
        Extended::Lost(reason) => {
            metrics::extension("lost");
            Err(held.lost_error(reason, round.tally.yes(), core.quorum(), round.failures))
        }
        Extended::Failed => {
            metrics::extension("failed");
            Err(round.failure(&held.resource))
        }
    }
}

/// Each of a release's answers, with the requests it raced on that node
/// (`races`), may call for the release to go out there again: what hears
/// the answer of node `node` (`deleted`: whether it deleted our token).
fn settle_races(
    core: &Arc<Core>,
    held: &Arc<LockState>,
    races: Vec<(usize, Arc<InFlight>)>,
) -> impl Fn(usize, bool) + Send + Sync + 'static + use<> {
    let (core, held) = (core.clone(), held.clone());
    move |node: usize, deleted: bool| {
        // Every raced request hears the answer (no short-circuit).
        let again = races
            .iter()
            .filter(|(raced, _)| *raced == node)
            .fold(false, |again, (_, requests)| {
                requests.released(node, deleted) | again
            });
        if again {
            release_again(&core, &held, node);
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.lease)
            .field("ttl", &self.ttl.duration())
            .finish_non_exhaustive()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (core, held) = (self.core.clone(), self.held().clone());
        // At once, not when the task runs: renewal stops and `lost()`
        // resolves with the drop.
        held.mark_lost(LossReason::Released);
        let in_flight = self.in_flight.take();
        metrics::release("dropped");
        // Best effort: without a runtime the keys expire after their ttl.
        let spawned = self.core.background().spawn(async move {
            give_up(&core, &held, in_flight).await;
        });
        if spawned.is_none() {
            tracing::debug!(resource = %self.lease.resource(), "guard dropped outside a runtime; keys will expire");
        }
    }
}

/// Records, per node, what the answers that decided `round` (number `id`)
/// say of the token; nodes that failed hold it no longer, as far as the
/// holder knows. Returns the nodes whose requests are still in flight.
fn confirm<T: Answer, F>(
    held: &LockState,
    id: RoundId,
    round: &Round<T>,
    stragglers: &Requests<F>,
) -> Vec<usize> {
    let mut pending = Vec::new();
    for (node, vote) in round.votes(stragglers).enumerate() {
        match vote {
            Some(yes) => held.confirmations.record(id, node, yes),
            None => pending.push(node),
        }
    }
    pending
}

/// What a round's late "yes" may call for once the lock's release was
/// handed to its node: a release once more on that node, by one of two
/// rules.
enum Late {
    /// The acquire's grants in flight at the decision, raced against the
    /// release (see [`InFlight`]).
    Grant(Option<Arc<InFlight>>),
    /// An extension's restores (see [`LockState::restored_late`]).
    Restore,
}

/// Follows a round's stragglers, recording their answers in the lock's
/// confirmations; a late "yes" that may have landed after the lock's
/// release is released again, as `late` says.
fn follow_into<T, F>(
    core: &Arc<Core>,
    held: &Arc<LockState>,
    id: RoundId,
    op: &'static str,
    stragglers: Requests<F>,
    late: Late,
) where
    T: Answer + Send + 'static,
    F: Future<Output = Result<T, NodeError>> + Unpin + Send + 'static,
{
    let (task_core, held) = (core.clone(), held.clone());
    follow(core, op, stragglers, move |node, answer| {
        let yes = answer.is_ok_and(|answer| answer.vote() == Vote::Yes);
        held.confirmations.record(id, node, yes);
        tracing::debug!(op, confirmed = held.confirmations.count());
        match &late {
            // Every answer is recorded in the race, a "no" too.
            Late::Grant(Some(requests)) => {
                if requests.answered(node, yes) {
                    release_again(&task_core, &held, node);
                }
            }
            Late::Grant(None) => {}
            Late::Restore => {
                if yes {
                    held.restored_late(&task_core, node);
                }
            }
        }
    });
}

/// A guard for a primitive other than the plain lock: the same holding as
/// a [`LockGuard`] (`extend`, `auto_extend`, `release`, `lost` and the
/// lease's getters, each documented there), under a type that says what
/// is held, as tokio's `SemaphorePermit`, `RwLockReadGuard` and
/// `RwLockWriteGuard` do. Dropped unreleased, it is released in the
/// background, as a `LockGuard` is.
macro_rules! typed_guard {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[must_use = concat!("dropping the ", $what, " releases it in the background; bind it (`let guard = …`) for as long as you need it")]
        #[clippy::has_significant_drop]
        pub struct $name {
            guard: $crate::LockGuard,
        }

        impl $name {
            pub(crate) fn new(guard: $crate::LockGuard) -> Self {
                Self { guard }
            }

            $crate::holding::guard::lease_getters!(guard.lease);

            /// Extends the hold to `ttl` from now, on a quorum (see
            /// [`LockGuard::extend`](crate::LockGuard::extend)).
            ///
            /// # Errors
            ///
            /// As [`LockGuard::extend`](crate::LockGuard::extend).
            pub async fn extend(&self, ttl: ::std::time::Duration) -> Result<(), $crate::Error> {
                self.guard.extend(ttl).await
            }

            /// Keeps the hold alive in the background until it is released,
            /// dropped or lost (see
            /// [`LockGuard::auto_extend`](crate::LockGuard::auto_extend)).
            pub fn auto_extend(&self) {
                self.guard.auto_extend();
            }

            /// Gives the hold up, decided at a quorum (see
            /// [`LockGuard::release`](crate::LockGuard::release)).
            ///
            /// # Errors
            ///
            /// As [`LockGuard::release`](crate::LockGuard::release).
            pub async fn release(self) -> Result<$crate::ReleaseSummary, $crate::Error> {
                self.guard.release().await
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_tuple(stringify!($name)).field(&self.guard).finish()
            }
        }

        impl From<$name> for $crate::LockGuard {
            /// The same hold as a plain [`LockGuard`](crate::LockGuard),
            /// for code that holds any primitive alike.
            fn from(typed: $name) -> $crate::LockGuard {
                typed.guard
            }
        }
    };
}
pub(crate) use typed_guard;
