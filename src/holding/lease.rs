//! The state a holder shares with its observers — deadline and loss as a
//! watch channel, where the token is confirmed, and the one rule that turns
//! an extension's decision into a new deadline or a loss — and `Lease`, the
//! owned, cloneable view of a held lock.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, LossReason, NodeFailure};
use crate::metrics;
use crate::quorum::{Decision, Tally, Window};
use crate::round::{Core, Holding, OnNodes, release_again};
use crate::token::Token;

/// Shared by a guard, its leases, and the renewer.
#[derive(Debug)]
pub(crate) struct LockState {
    pub(crate) resource: Arc<str>,
    /// The lock on the nodes: keys, token, fence.
    pub(crate) holding: Holding,
    status: watch::Sender<Status>,
    /// Where the token is known to be, per node.
    pub(crate) confirmations: Confirmations,
    /// Set once the lock was handed to the renewer.
    auto_extended: AtomicBool,
    /// Per node, set just before the lock's release is handed to it: a
    /// restoring request's "yes" heard since may have set the key again
    /// after the release deleted it (see [`restored_late`](Self::restored_late)).
    release_sent: Box<[AtomicBool]>,
}

impl OnNodes for LockState {
    fn holding(&self) -> &Holding {
        &self.holding
    }

    fn sending_release(&self, node: usize) {
        if let Some(sent) = self.release_sent.get(node) {
            sent.store(true, Ordering::Release);
        }
    }
}

/// What an extension's (or renewal's) decided round means for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extended {
    /// The deadline moved.
    Yes,
    /// The lock is lost, for this reason (recorded).
    Lost(LossReason),
    /// Too few nodes extended, but nothing says the lock is gone: the
    /// previous deadline still holds.
    Failed,
}

/// Per node, whether the newest request about this lock's token has
/// answered that the node holds it: the acquire's answers (late ones
/// included), then each extension's and renewal's, and finally the
/// release's. A node whose newest request has not answered yet is not
/// confirmed, whatever it said before.
///
/// Answers of one lock are handled by several tasks (a straggling acquire
/// may be answered after a renewal that followed it), so each round of
/// requests has a number and an older round's answer never overwrites a
/// newer one's.
#[derive(Debug)]
pub(crate) struct Confirmations {
    /// Per node: `round << 1 | confirmed`, so that `fetch_max` keeps the
    /// newest round's answer; a round's start writes `round << 1` (not
    /// confirmed) until its answer comes.
    nodes: Box<[AtomicU64]>,
    /// The last round handed out; the acquire is round 1.
    rounds: AtomicU64,
}

/// The number of one round of requests about a lock (see [`Confirmations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoundId(u64);

impl RoundId {
    /// The acquiring round, which every lock starts with.
    pub(crate) const ACQUIRE: RoundId = RoundId(1);
}

impl Confirmations {
    fn new(nodes: usize) -> Self {
        Self {
            nodes: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            rounds: AtomicU64::new(RoundId::ACQUIRE.0),
        }
    }

    /// A new round of requests to every node, newer than every round
    /// before it. Until a node answers it, the node is not confirmed: what
    /// it said before may no longer be so (a node that restarted empty, say,
    /// is being restored by this very round).
    pub(crate) fn next_round(&self) -> RoundId {
        let round = RoundId(self.rounds.fetch_add(1, Ordering::Relaxed) + 1);
        for slot in &self.nodes {
            slot.fetch_max(round.0 << 1, Ordering::AcqRel);
        }
        round
    }

    /// Records what `node` answered in `round`, unless a newer round's
    /// answer is already known.
    pub(crate) fn record(&self, round: RoundId, node: usize, holds_token: bool) {
        if let Some(slot) = self.nodes.get(node) {
            slot.fetch_max(round.0 << 1 | u64::from(holds_token), Ordering::AcqRel);
        }
    }

    /// Marks the token confirmed nowhere (the lock is being released), in
    /// a round newer than any before.
    pub(crate) fn clear(&self) {
        self.next_round();
    }

    /// On how many nodes the newest answer confirmed the token.
    pub(crate) fn count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|slot| slot.load(Ordering::Acquire) & 1 == 1)
            .count()
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Status {
    /// When the request that set `deadline` began: validity is measured
    /// from here.
    pub(crate) started: Instant,
    /// After this instant the holder must assume the lock is gone.
    pub(crate) deadline: Instant,
    /// Set once the lock is known to be gone (or released) before then.
    pub(crate) lost: Option<LossReason>,
}

impl Status {
    pub(crate) fn trusted_at(&self, now: Instant) -> bool {
        self.lost.is_none() && now < self.deadline
    }
}

impl LockState {
    /// A lock granted by a request begun at `started`, trusted until
    /// `deadline`, on a manager of `nodes` nodes.
    pub(crate) fn new(
        resource: Arc<str>,
        holding: Holding,
        started: Instant,
        deadline: Instant,
        nodes: usize,
    ) -> Self {
        let (status, _) = watch::channel(Status {
            started,
            deadline,
            lost: None,
        });
        Self {
            resource,
            holding,
            status,
            confirmations: Confirmations::new(nodes),
            auto_extended: AtomicBool::new(false),
            release_sent: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// A "yes" from node `node` to a request that restores missing keys (an
    /// extension's or a renewal's), heard after its round decided: the one
    /// rule for such late answers. Once the release has been handed to that
    /// node, the request may have run there after the release deleted the
    /// key (sent again after its connection dropped, sent behind the
    /// release, or on a connection whose order is not certain), and set the
    /// key again: the release goes out there once more. A restore heard
    /// before the release was handed to the node ran before it, so the
    /// release runs after it and deletes what it set; a second release
    /// would only race the first and make it find nothing. (A grant, which
    /// never sets a deleted key again, has a finer rule: see
    /// [`InFlight`](crate::round::InFlight).)
    pub(crate) fn restored_late(self: &Arc<Self>, core: &Arc<Core>, node: usize) {
        if self.restore_calls_for_release(node) {
            release_again(core, self, node);
        }
    }

    /// Whether a restoring request's "yes" heard now from `node` calls for
    /// the release once more there: whether the release was handed to it.
    fn restore_calls_for_release(&self, node: usize) -> bool {
        self.release_sent
            .get(node)
            .is_some_and(|sent| sent.load(Ordering::Acquire))
    }

    /// The token.
    pub(crate) fn token(&self) -> &Token {
        &self.holding.token
    }

    /// Marks the lock handed to the renewer; false if it already was.
    pub(crate) fn start_auto_extension(&self) -> bool {
        !self.auto_extended.swap(true, Ordering::AcqRel)
    }

    /// Applies an extension's decided round, begun in `window`: with a
    /// quorum and validity left the deadline moves; refusals alone ruling
    /// out a quorum (nodes holding another value: absent keys were set
    /// again) mean the token is gone for good; otherwise the extension
    /// failed and the previous deadline stands.
    pub(crate) fn settle_extension(
        &self,
        decision: Decision,
        tally: &Tally,
        window: &Window,
    ) -> Extended {
        match decision {
            Decision::Reached => {
                let now = Instant::now();
                if window.validity_at(now).is_some()
                    && self.extend_to(now, window.start(), window.deadline())
                {
                    return Extended::Yes;
                }
                // Too late, or lost (or released) meanwhile.
                let reason = self.status().lost.unwrap_or(LossReason::Expired);
                self.mark_lost(reason);
                Extended::Lost(self.status().lost.unwrap_or(reason))
            }
            _ if tally.refused_by_quorum_complement() => {
                self.mark_lost(LossReason::TokenGone);
                Extended::Lost(self.status().lost.unwrap_or(LossReason::TokenGone))
            }
            _ => Extended::Failed,
        }
    }

    pub(crate) fn status(&self) -> Status {
        *self.status.borrow()
    }

    /// Records the loss; the first reason wins, and loss is final.
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        self.status.send_if_modified(|s| {
            let first = s.lost.is_none();
            if first {
                s.lost = Some(reason);
                metrics::ended(reason, s.deadline);
            }
            // The value changes either way; waking nobody is skipped (the
            // notification costs eight mutexes on every release). A waiter
            // subscribing meanwhile reads the value after this write.
            first && self.status.receiver_count() > 0
        });
    }

    /// Moves the deadline if the lock is still trusted at `now`; returns
    /// whether it did. Lost is final: a late success cannot revive a lock
    /// whose deadline has passed (`lost()` may already have fired).
    fn extend_to(&self, now: Instant, started: Instant, deadline: Instant) -> bool {
        self.status.send_if_modified(|s| {
            let ok = s.trusted_at(now) && now < deadline;
            if ok {
                s.started = started;
                s.deadline = deadline;
            }
            ok
        })
    }

    pub(crate) fn lost_error(
        &self,
        reason: LossReason,
        held: usize,
        quorum: usize,
        failures: Vec<NodeFailure>,
    ) -> Error {
        Error::Lost {
            resource: self.resource.to_string(),
            reason,
            held,
            quorum,
            failures,
        }
    }
}

/// An owned, cloneable view of a held lock: what it is, how long it can be
/// trusted, and a signal for when it cannot.
///
/// Leases are for the code running under the lock — hand clones to
/// sub-tasks, move them into `async move` blocks. They cannot release or
/// extend; the [`LockGuard`](crate::LockGuard) (or
/// [`Redlock::with_lock`](crate::Redlock::with_lock)) does that. Every
/// method of `Lease` is also available on the guard.
#[derive(Clone)]
pub struct Lease {
    pub(crate) held: Arc<LockState>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("resource", &self.held.resource)
            .field("token", self.held.token())
            .field("fence", &self.fence())
            .field("validity", &self.validity())
            .field("confirmed", &self.confirmed())
            .finish()
    }
}

impl Lease {
    /// The resource name the lock is held on.
    pub fn resource(&self) -> &str {
        &self.held.resource
    }

    /// This grant's token (see [`Token`]).
    pub fn token(&self) -> &Token {
        self.held.token()
    }

    /// The fencing token of this grant, for fenced locks; `None` otherwise.
    pub fn fence(&self) -> Option<u64> {
        self.held.holding.fence()
    }

    /// On how many nodes the token is confirmed: nodes whose answer to the
    /// newest request about this lock — the acquire (late answers
    /// included), the last extension or renewal — said they hold it. Nodes
    /// that refused, failed or have not answered that request yet do not
    /// count, whatever they said before: while an extension or renewal is
    /// in flight, only the nodes that already answered it count. After a
    /// release, none do.
    ///
    /// Right after a grant it is at least the quorum and grows as the
    /// remaining nodes answer (each within the node timeout); likewise
    /// after an extension. A lock on every one of its N nodes survives the
    /// loss of any minority of them; one on a bare quorum is lost with a
    /// single node, until an extension or renewal restores it where it is
    /// missing. To see every node's answer to the requests made so far,
    /// wait for [`Redlock::settle`](crate::Redlock::settle) first.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock("jobs:compact", Duration::from_secs(10)).await?;
    /// assert!(guard.confirmed() >= locks.quorum());
    /// # Ok(())
    /// # }
    /// ```
    pub fn confirmed(&self) -> usize {
        self.held.confirmations.count()
    }

    /// The instant (on tokio's monotonic clock) after which the holder must
    /// assume it no longer holds the lock: `start + ttl - drift`, where
    /// `start` is when the acquiring (or last extending) request began.
    pub fn deadline(&self) -> Instant {
        self.held.status().deadline
    }

    /// When the request behind the current deadline began — the acquiring
    /// attempt, or the last successful extension. Validity is measured from
    /// this instant (`deadline = started + ttl - drift`); it lies within the
    /// call that returned the guard (or extended it), before any of that
    /// request's commands reached a node.
    pub fn started(&self) -> Instant {
        self.held.status().started
    }

    /// How much longer the lock can be trusted; zero once it is lost,
    /// released or past its deadline.
    pub fn validity(&self) -> Duration {
        let status = self.held.status();
        if status.lost.is_some() {
            Duration::ZERO
        } else {
            status.deadline.saturating_duration_since(Instant::now())
        }
    }

    /// Why the lock is lost, if it is (including a passed deadline);
    /// `None` while it can be trusted. The synchronous counterpart of
    /// [`lost`](Self::lost).
    pub fn loss_reason(&self) -> Option<LossReason> {
        let status = self.held.status();
        status
            .lost
            .or_else(|| (Instant::now() >= status.deadline).then_some(LossReason::Expired))
    }

    /// Resolves once the holder must assume the lock is gone, with the
    /// reason: its deadline passed without a successful extension, a
    /// renewal found the token gone on too many nodes or could not reach a
    /// quorum in time, or the guard was released or dropped.
    ///
    /// The future does not borrow anything (it is `Send + 'static`), so it
    /// can be handed to another task or raced with `tokio::select!` against
    /// a critical section. Each call subscribes anew; it is cheap.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only observes.
    ///
    /// # Examples
    ///
    /// Abandon the work the moment the lock can no longer be trusted:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn settle_payments() {}
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock("payments:settle", Duration::from_secs(30)).await?;
    /// guard.auto_extend();
    /// tokio::select! {
    ///     _ = settle_payments() => { guard.release().await?; }
    ///     reason = guard.lost() => eprintln!("lock lost ({reason}); settlement abandoned"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static + use<> {
        wait_lost(self.held.status.subscribe())
    }
}

/// Waits until the status says lost, its deadline passes, or every holder
/// of the state is gone.
pub(crate) async fn wait_lost(mut status: watch::Receiver<Status>) -> LossReason {
    loop {
        let current = *status.borrow_and_update();
        if let Some(reason) = current.lost {
            return reason;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(current.deadline) => return LossReason::Expired,
            changed = status.changed() => {
                if changed.is_err() {
                    return LossReason::Released;
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn held(deadline: Instant) -> Arc<LockState> {
        let holding = Holding {
            keys: Arc::new(["r".into()]),
            token: Token::generate().expect("random source"),
            shape: crate::contract::ShapeRef::LOCK,
        };
        Arc::new(LockState::new(
            "r".into(),
            holding,
            Instant::now(),
            deadline,
            3,
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_restore_calls_for_the_release_again_where_it_was_sent_whatever_the_loss() {
        let held = held(Instant::now() + Duration::from_secs(10));
        assert!(
            !held.restore_calls_for_release(0),
            "held: the restore is ours"
        );
        // Lost first for another reason (say, a renewal round without a
        // quorum): a late restore still keeps the key until the release.
        held.mark_lost(LossReason::Expired);
        assert!(!held.restore_calls_for_release(0));
        // The release handed to node 1 only: a restore heard from node 0
        // ran before the release that node is still to get.
        held.sending_release(1);
        assert!(!held.restore_calls_for_release(0));
        assert!(held.restore_calls_for_release(1));
        assert!(!held.restore_calls_for_release(7), "no such node");
        assert_eq!(held.status().lost, Some(LossReason::Expired));
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_at_the_deadline_as_expired() {
        let deadline = Instant::now() + Duration::from_secs(1);
        let lease = Lease {
            held: held(deadline),
        };
        assert_eq!(lease.loss_reason(), None);
        assert_eq!(lease.lost().await, LossReason::Expired);
        assert!(Instant::now() >= deadline);
        assert_eq!(lease.loss_reason(), Some(LossReason::Expired));
        assert_eq!(lease.validity(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_follows_an_extended_deadline() {
        let start = Instant::now();
        let lease = Lease {
            held: held(start + Duration::from_secs(1)),
        };
        let waiter = tokio::spawn(lease.lost());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(lease.held.extend_to(
            Instant::now(),
            Instant::now(),
            start + Duration::from_secs(3)
        ));
        assert_eq!(waiter.await.expect("waiter"), LossReason::Expired);
        assert!(Instant::now() >= start + Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn loss_is_final_and_the_first_reason_wins() {
        let far = Instant::now() + Duration::from_secs(3600);
        let lease = Lease { held: held(far) };
        let waiter = tokio::spawn(lease.lost());
        lease.held.mark_lost(LossReason::TokenGone);
        lease.held.mark_lost(LossReason::Released);
        assert_eq!(waiter.await.expect("waiter"), LossReason::TokenGone);
        assert!(Instant::now() < far);
        assert!(
            !lease.held.extend_to(Instant::now(), Instant::now(), far),
            "cannot revive"
        );
        assert_eq!(lease.loss_reason(), Some(LossReason::TokenGone));
    }

    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_cannot_be_moved() {
        let start = Instant::now();
        let lease = Lease {
            held: held(start + Duration::from_secs(1)),
        };
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!lease.held.extend_to(
            Instant::now(),
            Instant::now(),
            start + Duration::from_secs(10)
        ));
    }

    #[test]
    fn the_newest_round_decides_where_the_token_is() {
        let c = Confirmations::new(3);
        assert_eq!(c.count(), 0);
        c.record(RoundId::ACQUIRE, 0, true);
        c.record(RoundId::ACQUIRE, 1, true);
        assert_eq!(c.count(), 2);
        let extension = c.next_round();
        assert_ne!(extension, RoundId::ACQUIRE);
        assert_eq!(c.count(), 0, "no node has answered the extension yet");
        c.record(extension, 0, false);
        c.record(extension, 2, true);
        // A straggling acquire answer, handled after the extension's.
        c.record(RoundId::ACQUIRE, 0, true);
        c.record(RoundId::ACQUIRE, 2, false);
        // Nor does one, to the acquire, that came before the extension
        // began: node 1 has not answered the extension (it may be a node
        // that restarted empty, being restored).
        c.record(RoundId::ACQUIRE, 1, true);
        assert_eq!(c.count(), 1, "node 2 (extension)");
        c.record(extension, 1, true);
        assert_eq!(c.count(), 2, "nodes 1 and 2 (extension)");
        let release = c.next_round();
        for node in 0..3 {
            c.record(release, node, false);
        }
        c.record(extension, 1, true);
        assert_eq!(c.count(), 0);
        // Out of range: ignored.
        c.record(release, 7, true);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_resolves_when_every_holder_is_gone() {
        let far = Instant::now() + Duration::from_secs(3600);
        let lease = Lease { held: held(far) };
        let lost = lease.lost();
        drop(lease);
        assert_eq!(lost.await, LossReason::Released);
        assert!(Instant::now() < far);
    }
}
