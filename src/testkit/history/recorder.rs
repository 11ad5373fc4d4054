//! Recording a history as a test runs: the [`Recorder`] every task
//! shares, and the [`Attempt`] and [`Section`] it hands out, each writing
//! into the [`History`] what came of a call and the window it opened.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{
    Down, Fault, Grant, History, KeyLoss, Leftover, Loss, Op, OpKind, Outage, Outcome, Share, Span,
    Wipe, Wiped,
};
use crate::{Error, Lease, LockGuard, LossReason, ReleaseSummary};

/// The shared recorder: clone it into every task of a test. Times are taken
/// on tokio's clock (so a test with a paused clock records its virtual
/// times) and kept as offsets from the recorder's origin; an instant
/// before the origin counts as the origin.
#[derive(Debug, Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    history: Mutex<History>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// A recorder whose origin is now.
    pub fn new() -> Self {
        Self::with_origin(Instant::now())
    }

    /// A recorder whose origin is `origin`: record nothing before it.
    pub fn with_origin(origin: Instant) -> Self {
        Recorder {
            inner: Arc::new(Inner {
                origin,
                history: Mutex::new(History::default()),
            }),
        }
    }

    /// The origin of the recorder's times.
    pub fn origin(&self) -> Instant {
        self.inner.origin
    }

    /// `t` as an offset from the origin (zero before it).
    pub fn at(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.inner.origin)
    }

    /// Now, as an offset from the origin.
    pub fn now(&self) -> Duration {
        self.at(Instant::now())
    }

    fn with<R>(&self, f: impl FnOnce(&mut History) -> R) -> R {
        // A task that panicked while recording left a whole record or none.
        let mut history = self
            .inner
            .history
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut history)
    }

    /// Starts recording one attempt (`try_lock`, `try_lock_fenced`, a
    /// semaphore's `try_acquire`, …) by `client` on `resource`, now.
    pub fn try_lock(&self, client: usize, resource: impl Into<String>) -> Attempt {
        self.attempt(client, resource.into(), OpKind::TryLock)
    }

    /// Starts recording an acquisition that retries (`lock`, `acquire`,
    /// `read`, `write`, …) by `client` on `resource`, now.
    pub fn lock(&self, client: usize, resource: impl Into<String>) -> Attempt {
        self.attempt(client, resource.into(), OpKind::Lock)
    }

    fn attempt(&self, client: usize, resource: String, kind: OpKind) -> Attempt {
        Attempt {
            recorder: self.clone(),
            client,
            resource,
            kind,
            invoked: self.now(),
        }
    }

    /// Records a grant.
    pub fn grant(&self, grant: Grant) {
        self.with(|h| h.grants.push(grant));
    }

    /// Records a call and its outcome.
    pub fn op(&self, op: Op) {
        self.with(|h| h.ops.push(op));
    }

    /// Records a majority outage: down from `from`, certainly without a
    /// quorum until `to`, with one certainly back at `back`.
    pub fn outage(&self, from: Instant, to: Instant, back: Instant) {
        let outage = Outage {
            from: self.at(from),
            to: self.at(to),
            back: self.at(back),
        };
        self.with(|h| h.outages.push(outage));
    }

    /// Records a loss of an auto-extended lock (see [`Section::lost`]).
    pub fn loss(&self, loss: Loss) {
        self.with(|h| h.losses.push(loss));
    }

    /// Records a fault of `kind` on `nodes` (indices), from `from` until
    /// healed at `to`.
    pub fn fault(&self, nodes: Vec<usize>, kind: impl Into<String>, from: Instant, to: Instant) {
        let fault = Fault {
            nodes,
            kind: kind.into(),
            from: self.at(from),
            to: self.at(to),
        };
        self.with(|h| h.faults.push(fault));
    }

    /// Records that `node` could not answer from `from` until `to`.
    pub fn down(&self, node: usize, from: Instant, to: Instant) {
        let down = Down {
            node,
            from: self.at(from),
            to: self.at(to),
        };
        self.with(|h| h.down.push(down));
    }

    /// Records that `node` lost the key of `resource` holding `token`
    /// (the whole token or its first four characters) at `at`: it went
    /// down then and came back without it.
    pub fn key_lost(&self, node: usize, resource: impl Into<String>, token: &str, at: Instant) {
        let loss = KeyLoss {
            node,
            resource: resource.into(),
            token: token.chars().take(4).collect(),
            at: self.at(at),
        };
        self.with(|h| h.key_losses.push(loss));
    }

    /// Records a wipe of `kind` over `from..to` (`all_keys`: every key of
    /// its nodes went, not only lock keys) that left each `(node,
    /// resource, token)` of `removed` absent, `token` being what the key
    /// held before (the whole token or its first four characters; empty
    /// if none); `kept`, likewise, the lock keys of the nodes it did not
    /// hit, read just before it, each with when it was to expire.
    pub fn wipe(
        &self,
        kind: impl Into<String>,
        all_keys: bool,
        from: Instant,
        to: Instant,
        removed: impl IntoIterator<Item = (usize, String, String)>,
        kept: impl IntoIterator<Item = (usize, String, String, Option<Instant>)>,
    ) {
        let key = |node, resource, token: String, expires: Option<Instant>| Wiped {
            node,
            resource,
            token: token.chars().take(4).collect(),
            expires: expires.map(|e| self.at(e)),
        };
        let wipe = Wipe {
            kind: kind.into(),
            all_keys,
            from: self.at(from),
            to: self.at(to),
            removed: removed
                .into_iter()
                .map(|(node, resource, token)| key(node, resource, token, None))
                .collect(),
            kept: kept
                .into_iter()
                .map(|(node, resource, token, expires)| key(node, resource, token, expires))
                .collect(),
        };
        self.with(|h| h.wipes.push(wipe));
    }

    /// Records that `node` held the key of `resource` with `token` (the
    /// whole token or its first four characters) when read at `at`, once
    /// the run had settled.
    pub fn leftover(&self, node: usize, resource: impl Into<String>, token: &str, at: Instant) {
        let leftover = Leftover {
            node,
            resource: resource.into(),
            token: token.chars().take(4).collect(),
            at: self.at(at),
        };
        self.with(|h| h.leftovers.push(leftover));
    }

    /// Records how many nodes the locks run on.
    pub fn nodes(&self, n: usize) {
        self.with(|h| h.nodes = Some(n));
    }

    /// Records a stall of the client process: something due at `due` ran
    /// only at `ran`.
    pub fn stall(&self, due: Instant, ran: Instant) {
        let span = Span {
            from: self.at(due),
            to: self.at(ran),
        };
        self.with(|h| h.stalls.push(span));
    }

    /// Records that a majority of the nodes, pinged at `from`, answered only
    /// after the node timeout (by `to`).
    pub fn starved(&self, from: Instant, to: Instant) {
        let span = Span {
            from: self.at(from),
            to: self.at(to),
        };
        self.with(|h| h.starved.push(span));
    }

    /// Records the final value of the counter kept under `resource`'s lock.
    pub fn counter(&self, resource: impl Into<String>, value: u64) {
        let resource = resource.into();
        self.with(|h| h.counters.insert(resource, value));
    }

    /// Records the run's seed (written into the history file).
    pub fn seed(&self, seed: u64) {
        self.with(|h| h.seed = Some(seed));
    }

    /// Sets how long a failed single attempt may take.
    pub fn failure_bound(&self, bound: Duration) {
        self.with(|h| h.failure_bound = Some(bound));
    }

    /// How many grants are recorded so far.
    pub fn grants(&self) -> usize {
        self.with(|h| h.grants.len())
    }

    /// A copy of everything recorded so far.
    pub fn snapshot(&self) -> History {
        self.with(|h| h.clone())
    }

    /// Everything recorded so far, leaving the recorder empty.
    pub fn take(&self) -> History {
        self.with(std::mem::take)
    }
}

/// An attempt being recorded; say what came of it with
/// [`granted`](Attempt::granted) or [`failed`](Attempt::failed). Dropped
/// without an outcome, it records nothing (an attempt you do not want
/// judged).
#[derive(Debug)]
#[must_use = "an attempt is recorded only once its outcome is"]
pub struct Attempt {
    recorder: Recorder,
    client: usize,
    resource: String,
    kind: OpKind,
    invoked: Duration,
}

impl Attempt {
    /// The call returned a guard (now) whose lease is `lease`, asked for
    /// `ttl`: records the call, and opens the critical section. Pass the
    /// guard's [`lease`](LockGuard::lease).
    pub fn granted(self, lease: &Lease, ttl: Duration) -> Section {
        let recorder = self.recorder;
        let granted = recorder.now();
        recorder.op(Op {
            client: self.client,
            kind: self.kind,
            resource: self.resource.clone(),
            start: self.invoked,
            end: granted,
            outcome: Outcome::Ok,
        });
        let deadline = recorder.at(lease.deadline());
        let grant = Grant {
            client: self.client,
            resource: self.resource,
            token: lease.token().as_str().chars().take(4).collect(),
            fence: lease.fence(),
            ttl,
            share: Share::Alone,
            invoked: self.invoked,
            granted,
            started: recorder.at(lease.started()),
            deadline,
            believed_until: deadline,
            release_called: deadline,
            wrote: false,
        };
        Section {
            recorder,
            grant,
            auto_extended: false,
            open: true,
        }
    }

    /// The call failed (now) with `error`.
    pub fn failed(self, error: &Error) {
        self.outcome(Outcome::of_lock_error(error));
    }

    /// The call ended (now) with `outcome`.
    pub fn outcome(self, outcome: Outcome) {
        let end = self.recorder.now();
        self.recorder.op(Op {
            client: self.client,
            kind: self.kind,
            resource: self.resource,
            start: self.invoked,
            end,
            outcome,
        });
    }
}

/// A critical section under a granted lock, being recorded. Its window
/// closes with [`end`](Section::end) or [`release`](Section::release) (or
/// when it is dropped): the grant is recorded then.
#[derive(Debug)]
#[must_use = "the window closes when the section ends; end or release it where the critical section ends"]
pub struct Section {
    recorder: Recorder,
    grant: Grant,
    auto_extended: bool,
    open: bool,
}

impl Section {
    /// The critical section wrote the counter kept under this lock.
    pub fn wrote(&mut self) {
        self.grant.wrote = true;
    }

    /// The lock is auto-extended: the client trusts it until it is lost
    /// ([`lost`](Section::lost)) or released, not only until its first
    /// deadline.
    pub fn auto_extended(&mut self) {
        self.auto_extended = true;
    }

    /// The grant shares its resource by `share` (a semaphore's permit, a
    /// reader); a plain lock is [`Share::Alone`].
    pub fn share(&mut self, share: Share) {
        self.grant.share = share;
    }

    /// `lost()` resolved now with `reason`: the client stops trusting the
    /// lock, and the loss is recorded.
    pub fn lost(&mut self, reason: LossReason) {
        let at = self.recorder.now();
        self.grant.believed_until = at;
        self.auto_extended = false;
        self.recorder.loss(Loss {
            client: self.grant.client,
            resource: self.grant.resource.clone(),
            at,
            reason,
            ttl: self.grant.ttl,
        });
    }

    /// The grant as recorded so far.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The client calls release now: the window closes, and the grant is
    /// recorded.
    pub fn end(mut self) {
        self.close();
    }

    /// Closes the window now, releases `guard` (a [`LockGuard`], or a
    /// permit, read or write guard) and records how that went.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// An auto-extended lock is trusted until its deadline as the last
    /// renewal left it, if that came before the release: a holder that
    /// checks [`validity`](LockGuard::validity) before acting (as it must)
    /// trusts it no longer. A loss the client did not watch for by then
    /// (`lost()` resolved while it was busy) is recorded, as
    /// [`lost`](Section::lost) would have.
    pub async fn release(mut self, guard: impl Into<LockGuard>) -> Result<ReleaseSummary, Error> {
        let guard = guard.into();
        if self.open && self.auto_extended {
            let until = self.recorder.now().min(self.recorder.at(guard.deadline()));
            self.grant.believed_until = until;
            self.auto_extended = false;
            if let Some(reason) = guard.loss_reason() {
                self.recorder.loss(Loss {
                    client: self.grant.client,
                    resource: self.grant.resource.clone(),
                    at: until,
                    reason,
                    ttl: self.grant.ttl,
                });
            }
        }
        self.close();
        let start = self.grant.release_called;
        let result = guard.release().await;
        self.recorder.op(Op {
            client: self.grant.client,
            kind: OpKind::Release,
            resource: self.grant.resource.clone(),
            start,
            end: self.recorder.now(),
            outcome: Outcome::of_release(&result),
        });
        result
    }

    fn close(&mut self) {
        if !self.open {
            return;
        }
        self.open = false;
        let now = self.recorder.now();
        self.grant.release_called = now;
        if self.auto_extended {
            self.grant.believed_until = now;
        }
        self.recorder.grant(self.grant.clone());
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        self.close();
    }
}
