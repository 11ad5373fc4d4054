//! Auto-extension. One renewer task per manager keeps every auto-extended
//! lock alive: it wakes when the first lock is due, takes every lock whose
//! renewal window is open, and renews them all with one script call per
//! node (in chunks of `MAX_BATCH`). No timer or task per lock or per node.
//! It holds the [`Core`] weakly, and knows locks only by their [`LockState`].
//!
//! Where the nodes track keys for us ([`Tracking`]), a lock whose keys tell
//! by a read whether it still holds there is watched as well: a change to one of its keys by
//! anyone else makes it due at once ([`Renewer::renew_now`]), so the
//! restoring renewal puts a deleted key back, or finds another owner and
//! reports the loss, within a round trip instead of at the next scheduled
//! renewal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::contract::Extension;
use crate::error::{LossReason, NodeError, NodeFailure};
use crate::holding::lease::{Extended, LockState, RoundId};
use crate::metrics;
use crate::node::{ExtendReply, HeldKeyTracking, OnChange, Tracking};
use crate::quorum::decide::{Batch, Decide};
use crate::quorum::{Answer, Vote};
use crate::request::Ttl;
use crate::round::{Core, Traced, fan_out_with, follow};

/// The most locks renewed by one script call.
const MAX_BATCH: usize = 1000;
/// The shortest pause before retrying a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(5);

#[derive(Debug, Default)]
pub(crate) struct Renewer {
    registry: Mutex<HashMap<u64, Entry>>,
    next_id: std::sync::atomic::AtomicU64,
    wake: Notify,
    started: AtomicBool,
    /// Whether to watch held keys where the nodes can.
    setting: HeldKeyTracking,
    /// The watch over held keys, made with the first watched lock.
    tracking: OnceLock<Arc<Tracking>>,
}

#[derive(Debug)]
struct Entry {
    held: Arc<LockState>,
    ttl: Ttl,
    /// The validity window of a renewal: `ttl - drift`.
    w: Duration,
    plan: Plan,
    in_flight: bool,
    /// A key changed while a round was in flight for it: renew again as
    /// soon as it ends (the round may have passed that node before).
    again: bool,
    /// Whether its keys are watched (see [`Tracking`]).
    watched: bool,
}

/// When to renew a lock, relative to its validity window `W = ttl - drift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// No earlier than this: half of `W` left. Locks whose windows are open
    /// at the same time share a round.
    earliest: Instant,
    /// At the latest: a third of `W` left, time for several quick retries.
    due: Instant,
}

impl Plan {
    /// The plan for a lock valid until `deadline` with window `w`.
    pub(crate) fn for_deadline(deadline: Instant, w: Duration) -> Self {
        Self {
            earliest: deadline.checked_sub(w / 2).unwrap_or(deadline),
            due: deadline.checked_sub(w / 3).unwrap_or(deadline),
        }
    }

    /// After a failed round at `now`: retry soon, or give up when less than
    /// a sixth of `W` is left — too little for another round to help, and
    /// far enough ahead of the deadline for the holder to stop cleanly.
    pub(crate) fn after_failure(now: Instant, deadline: Instant, w: Duration) -> Option<Self> {
        if deadline.saturating_duration_since(now) < w / 6 {
            return None;
        }
        let retry = now + (w / 20).max(MIN_RETRY);
        Some(Self {
            earliest: retry,
            due: retry,
        })
    }
}

/// A lock taken for a round.
#[derive(Debug, Clone)]
struct Due {
    id: u64,
    held: Arc<LockState>,
    ttl: Ttl,
}

/// What a round decided for one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Renewed,
    /// Too few nodes answered yes, but not because the token was gone.
    Failed,
    /// Failed because so many nodes cannot run the renewal at all that no
    /// quorum ever will (see [`NodeError::is_incompatible`]).
    ///
    /// [`NodeError::is_incompatible`]: crate::NodeError::is_incompatible
    Incompatible,
    /// Lost (the loss is recorded) or released: nothing to do any more.
    Finished,
}

impl Renewer {
    /// A renewer that watches held keys as `setting` says.
    pub(crate) fn new(setting: HeldKeyTracking) -> Self {
        Self {
            setting,
            ..Self::default()
        }
    }

    /// Whether it watches held keys where the nodes can.
    pub(crate) fn setting(&self) -> HeldKeyTracking {
        self.setting
    }

    fn registry(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        // Entries stay consistent even if a holder of the lock panicked.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts renewing `held` until it is lost or released. Without a tokio
    /// runtime nothing can be renewed and the lock expires at its deadline.
    pub(crate) fn register(self: &Arc<Self>, core: &Arc<Core>, held: Arc<LockState>, ttl: Ttl) {
        if !self.started.swap(true, Ordering::AcqRel) {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                self.started.store(false, Ordering::Release);
                tracing::debug!("auto_extend outside a tokio runtime: the lock will expire");
                return;
            };
            runtime.spawn(run(Arc::downgrade(core), self.clone()));
        }
        let w = core.validity(ttl);
        let plan = Plan::for_deadline(held.status().deadline, w);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Holdings whose keys tell by a read whether they still hold: every
        // one today (locks, fenced ones so elections too, fair locks,
        // permits, a writer's hold by the keys' values; a reader's by its
        // token's membership of the readers' set).
        let token_at = held.holding.shape.token_at();
        let watched = self.setting == HeldKeyTracking::WhereAvailable && token_at.is_some();
        let keys = held.holding.keys.clone();
        let token = held.token().as_str().to_owned();
        self.registry().insert(
            id,
            Entry {
                held,
                ttl,
                w,
                plan,
                in_flight: false,
                again: false,
                watched,
            },
        );
        if let (true, Some(token_at)) = (watched, token_at) {
            self.tracking(core).watch(id, &keys, &token, token_at);
        }
        self.wake.notify_one();
    }

    /// The manager's watch over held keys, made on first use.
    fn tracking(self: &Arc<Self>, core: &Arc<Core>) -> &Arc<Tracking> {
        self.tracking.get_or_init(|| {
            let renewer = Arc::downgrade(self);
            let on_change: OnChange = Arc::new(move |id| {
                if let Some(renewer) = renewer.upgrade() {
                    renewer.renew_now(id);
                }
            });
            Arc::new(Tracking::new(
                Arc::<Core>::downgrade(core),
                core.len(),
                on_change,
            ))
        })
    }

    /// A key of lock `id` changed on a node under it (deleted, expired,
    /// evicted, overwritten): renews it now, or again right after the round
    /// in flight, which may have passed that node before the change.
    pub(crate) fn renew_now(&self, id: u64) {
        let mut registry = self.registry();
        let Some(entry) = registry.get_mut(&id) else {
            return;
        };
        let now = Instant::now();
        // A released lock's own delete is heard too: it is not renewed, but
        // woken all the same, the renewer forgets it (and its watch) now.
        let held = entry.held.status().trusted_at(now);
        if entry.in_flight {
            entry.again = true;
        } else {
            entry.plan = Plan {
                earliest: now,
                due: now,
            };
        }
        drop(registry);
        if held {
            metrics::renewal_woken();
        }
        self.wake.notify_one();
    }

    /// Stops watching a forgotten lock's keys.
    fn forget(&self, id: u64, entry: &Entry) {
        if let (true, Some(tracking)) = (entry.watched, self.tracking.get()) {
            tracking.forget(id, &entry.held.holding.keys);
        }
    }

    /// Wakes the renewer so that it notices its manager is gone.
    pub(crate) fn shutdown(&self) {
        self.wake.notify_one();
    }

    /// Takes every lock whose window is open; forgets finished ones.
    /// Returns the batch and when the next lock falls due.
    fn take_due(&self, now: Instant) -> (Vec<Due>, Option<Instant>) {
        let mut registry = self.registry();
        registry.retain(|&id, e| {
            let keep = e.held.status().trusted_at(now);
            if !keep {
                self.forget(id, e);
            }
            keep
        });
        let mut batch = Vec::new();
        let mut next: Option<Instant> = None;
        for (&id, entry) in registry.iter_mut() {
            if entry.in_flight {
                continue;
            }
            if entry.plan.earliest <= now {
                entry.in_flight = true;
                batch.push(Due {
                    id,
                    held: entry.held.clone(),
                    ttl: entry.ttl,
                });
            } else {
                next = Some(next.map_or(entry.plan.due, |n| n.min(entry.plan.due)));
            }
        }
        (batch, next)
    }

    /// Applies a round's outcomes and wakes the loop to reschedule.
    fn finish(&self, outcomes: Vec<(u64, Outcome)>) {
        let now = Instant::now();
        let mut registry = self.registry();
        for (id, outcome) in outcomes {
            let Some(entry) = registry.get_mut(&id) else {
                continue;
            };
            let deadline = entry.held.status().deadline;
            let w = entry.w;
            let again = std::mem::take(&mut entry.again);
            let next = match outcome {
                Outcome::Renewed if again => Some(Plan {
                    earliest: now,
                    due: now,
                }),
                Outcome::Renewed => Some(Plan::for_deadline(deadline, w)),
                Outcome::Failed => {
                    let next = Plan::after_failure(now, deadline, w);
                    if next.is_none() {
                        entry.held.mark_lost(LossReason::Unreachable);
                    }
                    next
                }
                Outcome::Incompatible => {
                    entry.held.mark_lost(LossReason::Incompatible);
                    None
                }
                Outcome::Finished => None,
            };
            match next {
                Some(plan) => {
                    entry.plan = plan;
                    entry.in_flight = false;
                }
                None => {
                    if let Some(entry) = registry.remove(&id) {
                        self.forget(id, &entry);
                    }
                }
            }
        }
        drop(registry);
        self.wake.notify_one();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.registry().len()
    }
}

/// The renewer loop. Holds the core only weakly between rounds, so it ends
/// once every handle and guard of the manager is gone.
async fn run(core: Weak<Core>, renewer: Arc<Renewer>) {
    loop {
        let woken = renewer.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let Some(core) = core.upgrade() else {
            return;
        };
        let (batch, next) = renewer.take_due(Instant::now());
        if !batch.is_empty() {
            tokio::spawn(renew_chunks(core.clone(), renewer.clone(), batch));
        }
        drop(core);
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = &mut woken => {}
                }
            }
            None => woken.await,
        }
    }
}

/// Renews a round's locks chunk after chunk, most urgent first, each chunk
/// starting once the previous one is decided.
///
/// Not all at once: concurrent chunks hold every chunk's request and answer
/// buffers at the same time (a resident-memory peak that the allocator
/// keeps), and on a busy machine could all miss their deadline together.
/// Nodes still answering a decided chunk are followed in the background, so
/// a slow minority does not hold up the next chunk. When fewer than a
/// quorum of nodes answered a chunk, the rest of the round fails at once
/// (waiting a node timeout per chunk would only delay the retry).
async fn renew_chunks(core: Arc<Core>, renewer: Arc<Renewer>, mut batch: Vec<Due>) {
    batch.sort_by_cached_key(|due| due.held.status().deadline);
    let mut reachable = true;
    for chunk in batch.chunks(MAX_BATCH) {
        let outcomes = if reachable {
            let renewal = renew_round(&core, chunk.to_vec()).await;
            reachable = renewal.batch.reachable();
            renewal.outcomes()
        } else {
            chunk.iter().map(|due| (due.id, Outcome::Failed)).collect()
        };
        renewer.finish(outcomes);
    }
}

/// Renews a batch: one script call per node carrying every lock, on the
/// round engine, each lock settled as soon as its quorum is known. Returns
/// once every lock is decided; the nodes still answering then are followed
/// in the background (dropping their requests could keep them from being
/// sent, and the lock should stay on every node it can).
async fn renew_round(core: &Arc<Core>, due: Vec<Due>) -> Renewal<'_> {
    let start = Instant::now();
    let rounds = due
        .iter()
        .map(|due| due.held.confirmations.next_round())
        .collect();
    let locks = Arc::new(Locks { due, rounds });
    let renewal = Renewal {
        core,
        locks: locks.clone(),
        start,
        batch: Batch::new(core.len(), locks.due.len()),
        outcomes: vec![None; locks.due.len()],
    };
    let deadline = core.timeout_from(start);
    let (renewal, stragglers) = fan_out_with(
        core.nodes(),
        "renew",
        deadline,
        renewal,
        |i, node, deadline| {
            metrics::renewal_call(node.label());
            let (core, locks) = (core.clone(), locks.clone());
            // Owned, so that it can be followed after the decision.
            async move {
                let extensions: Vec<Extension<'_>> = locks
                    .due
                    .iter()
                    .map(|due| due.held.holding.extension(due.ttl))
                    .collect();
                core.node(i)?.extend_many(&extensions, deadline).await
            }
        },
    )
    .await;
    let task_core = core.clone();
    follow(core, "renew", stragglers, move |node, answer| {
        locks.heard(&task_core, node, answer.as_deref().ok());
    });
    renewal
}

/// A renewal round's locks, each with its round of requests (see
/// [`Confirmations`](crate::holding::lease::Confirmations)): shared by the requests
/// and by whoever follows their late answers.
struct Locks {
    due: Vec<Due>,
    rounds: Vec<RoundId>,
}

impl Locks {
    /// Node `node`'s votes, lock by lock, from its `replies` (none: it
    /// failed). Each is recorded in its lock's confirmations, also after
    /// the lock's decision; a "yes" that came after its lock's release may
    /// have restored the key after the release deleted it: the release
    /// goes out there again.
    fn heard(&self, core: &Arc<Core>, node: usize, replies: Option<&[ExtendReply]>) -> Vec<Vote> {
        let locks = self.due.iter().zip(&self.rounds).enumerate();
        locks
            .map(|(j, (Due { held, .. }, &round))| {
                let vote = replies
                    .and_then(|replies| replies.get(j))
                    .map_or(Vote::Failed, Answer::vote);
                held.confirmations.record(round, node, vote == Vote::Yes);
                if vote == Vote::Yes {
                    held.restored_late(core, node);
                }
                vote
            })
            .collect()
    }
}

/// A renewal round as the engine decides it: a [`Batch`] of the locks'
/// tallies, each lock settled as soon as its own is decided.
struct Renewal<'a> {
    core: &'a Arc<Core>,
    locks: Arc<Locks>,
    start: Instant,
    batch: Batch,
    outcomes: Vec<Option<Outcome>>,
}

impl Decide for Renewal<'_> {
    type Answer = Vec<ExtendReply>;

    fn record(&mut self, node: usize, answer: Result<Vec<ExtendReply>, NodeFailure>) {
        let votes = self.locks.heard(self.core, node, answer.as_deref().ok());
        let answer = answer.as_ref().map(|_| &votes[..]).map_err(|f| &f.error);
        for lock in self.batch.record(answer) {
            self.settle(lock);
        }
    }

    fn decided(&self) -> bool {
        self.batch.decided()
    }

    /// No holder waits for a renewal: the renewer waits for every node it
    /// may need, each until the round's deadline.
    fn waits_for_unresponsive(&self) -> bool {
        true
    }
}

impl Renewal<'_> {
    /// Applies lock `lock`'s decided tally to it.
    fn settle(&mut self, lock: usize) {
        let (Some(due), Some(tally)) = (self.locks.due.get(lock), self.batch.tally(lock)) else {
            return;
        };
        let held = &due.held;
        let window = self.core.window(self.start, due.ttl);
        let outcome = match held.settle_extension(tally.decision(), tally, &window) {
            Extended::Yes => Outcome::Renewed,
            Extended::Lost(_) => Outcome::Finished,
            Extended::Failed if self.batch.hopeless() => Outcome::Incompatible,
            Extended::Failed => Outcome::Failed,
        };
        metrics::renewal(match outcome {
            Outcome::Renewed => "renewed",
            Outcome::Failed => "failed",
            Outcome::Finished | Outcome::Incompatible => "lost",
        });
        tracing::debug!(
            op = "renew",
            resource = %held.resource,
            ?outcome,
            confirmed = held.confirmations.count(),
        );
        if let Some(slot) = self.outcomes.get_mut(lock) {
            *slot = Some(outcome);
        }
    }

    /// Each lock's outcome; undecided ones failed.
    fn outcomes(&self) -> Vec<(u64, Outcome)> {
        let locks = self.locks.due.iter().zip(&self.outcomes);
        locks
            .map(|(due, outcome)| (due.id, outcome.unwrap_or(Outcome::Failed)))
            .collect()
    }
}

/// A renewal call's answer: how many locks it carried, on how many the
/// node had lost the key and set it again, and on how many another token
/// held it. Under the renewer's target,
/// whose log tells what a lost lock's renewals saw.
impl Traced for Vec<ExtendReply> {
    fn trace(op: &'static str, node: &str, late: bool, answer: &Result<Self, NodeError>) {
        // Only late answers say so.
        let late = late.then_some(true);
        match answer {
            Ok(replies) => {
                let count = |reply| replies.iter().filter(|&&r| r == reply).count();
                let (restored, refused) =
                    (count(ExtendReply::Restored), count(ExtendReply::Refused));
                tracing::debug!(op, node, late, locks = replies.len(), restored, refused);
            }
            Err(error) => tracing::debug!(op, node, late, error = %error, "node failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_millis(900);

    #[tokio::test(start_paused = true)]
    async fn renews_between_half_and_a_third_of_the_window_left() {
        let deadline = Instant::now() + W;
        let plan = Plan::for_deadline(deadline, W);
        assert_eq!(plan.earliest, deadline - Duration::from_millis(450));
        assert_eq!(plan.due, deadline - Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_quickly_then_gives_up_ahead_of_the_deadline() {
        let now = Instant::now();
        let deadline = now + Duration::from_millis(300);
        let retry = Plan::after_failure(now, deadline, W).expect("time left");
        assert_eq!(retry.due, now + Duration::from_millis(45));
        // Under a sixth of the window left: give up, still before the deadline.
        let late = deadline - Duration::from_millis(149);
        assert_eq!(Plan::after_failure(late, deadline, W), None);
        assert!(late < deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn tiny_windows_never_underflow() {
        let now = Instant::now();
        let plan = Plan::for_deadline(now, Duration::from_millis(1));
        assert!(plan.earliest <= plan.due);
        let retry = Plan::after_failure(now, now + Duration::from_secs(1), Duration::ZERO)
            .expect("time left");
        assert_eq!(retry.due, now + MIN_RETRY);
    }

    #[tokio::test(start_paused = true)]
    async fn take_due_batches_open_windows_and_forgets_finished_locks() {
        let renewer = Renewer::default();
        let now = Instant::now();
        let mk = crate::holding::lease::tests::held;
        let insert = |id, held: Arc<LockState>, plan| {
            renewer.registry().insert(
                id,
                Entry {
                    held,
                    ttl: Ttl::from_millis(900),
                    w: W,
                    plan,
                    in_flight: false,
                    again: false,
                    watched: false,
                },
            );
        };
        let far = now + Duration::from_secs(60);
        let open = Plan {
            earliest: now,
            due: now + Duration::from_millis(10),
        };
        let later = Plan {
            earliest: now + Duration::from_millis(20),
            due: now + Duration::from_millis(30),
        };
        insert(1, mk(far), open);
        insert(2, mk(far), open);
        insert(3, mk(far), later);
        let released = mk(far);
        released.mark_lost(LossReason::Released);
        insert(4, released, open);

        let (batch, next) = renewer.take_due(now);
        let mut ids: Vec<u64> = batch.iter().map(|due| due.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [1, 2], "open windows share one round");
        assert_eq!(next, Some(later.due));
        assert_eq!(renewer.len(), 3, "the released lock is forgotten");
        let (again, _) = renewer.take_due(now);
        assert!(again.is_empty(), "in-flight locks are not taken twice");
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_key_makes_its_lock_due_now_or_right_after_the_round_in_flight() {
        let renewer = Renewer::default();
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        let later = Plan::for_deadline(far, W);
        for id in [1, 2] {
            renewer.registry().insert(
                id,
                Entry {
                    held: crate::holding::lease::tests::held(far),
                    ttl: Ttl::from_millis(900),
                    w: W,
                    plan: later,
                    in_flight: false,
                    again: false,
                    watched: true,
                },
            );
        }
        let (batch, _) = renewer.take_due(now);
        assert!(batch.is_empty(), "nothing due yet");

        renewer.renew_now(1);
        renewer.renew_now(7); // forgotten meanwhile: nothing to do
        let (batch, next) = renewer.take_due(now);
        assert_eq!(batch.iter().map(|d| d.id).collect::<Vec<_>>(), [1]);
        assert_eq!(next, Some(later.due), "the other keeps its plan");

        // Changed again while its round is in flight: that round may have
        // passed the node before the change, so another follows at once.
        renewer.renew_now(1);
        let (batch, _) = renewer.take_due(now);
        assert!(batch.is_empty(), "not taken twice");
        renewer.finish(vec![(1, Outcome::Renewed)]);
        let (batch, _) = renewer.take_due(Instant::now());
        assert_eq!(batch.iter().map(|d| d.id).collect::<Vec<_>>(), [1]);
        // Then back on schedule.
        renewer.finish(vec![(1, Outcome::Renewed)]);
        let (batch, _) = renewer.take_due(Instant::now());
        assert!(batch.is_empty());
    }
}
