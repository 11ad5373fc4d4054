//! What a holder owns: `LockGuard`, with extend, release, the lost-lock
//! signal, and a best-effort release on drop.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::NodeFailure;
use crate::quorum::{Decision, Window};
use crate::redlock::{Redlock, Request, Stragglers, Until, fan_out, release_everywhere};
use crate::{Error, Token};

/// A held lock.
///
/// The holder may trust the lock until [`deadline`](Self::deadline) (see
/// [`validity`](Self::validity)); [`extend`](Self::extend) moves the
/// deadline, [`release`](Self::release) gives the lock up and reports per
/// node, and [`lost`](Self::lost) resolves once the lock can no longer be
/// trusted.
///
/// Dropping a guard without calling `release` releases the lock in the
/// background when a tokio runtime is available; without one, the keys
/// simply expire after their ttl.
#[must_use = "dropping the guard releases the lock in the background; bind it (`let guard = …`) for as long as you need the lock"]
pub struct LockGuard {
    redlock: Redlock,
    held: Arc<Held>,
    /// Set once `release` has run, so that `Drop` does not release again.
    released: bool,
}

/// The state a guard shares with its `lost()` watchers.
#[derive(Debug)]
struct Held {
    resource: Arc<str>,
    key: Arc<str>,
    token: Token,
    status: watch::Sender<Status>,
}

#[derive(Debug, Clone, Copy)]
struct Status {
    /// After this instant the holder must assume the lock is gone.
    deadline: Instant,
    /// Set when the lock is known to be gone (or released) before then.
    lost: bool,
}

impl Status {
    fn trusted_at(&self, now: Instant) -> bool {
        !self.lost && now < self.deadline
    }
}

impl Held {
    fn mark_lost(&self) {
        self.status
            .send_if_modified(|s| !std::mem::replace(&mut s.lost, true));
    }

    fn lost_error(&self, held: usize, quorum: usize, failures: Vec<NodeFailure>) -> Error {
        Error::Lost {
            resource: self.resource.to_string(),
            held,
            quorum,
            failures,
        }
    }
}

impl LockGuard {
    pub(crate) fn new(redlock: Redlock, request: &Request, token: Token, window: Window) -> Self {
        let (status, _) = watch::channel(Status {
            deadline: window.deadline(),
            lost: false,
        });
        Self {
            redlock,
            held: Arc::new(Held {
                resource: request.resource.clone(),
                key: request.key.clone(),
                token,
                status,
            }),
            released: false,
        }
    }

    /// Lets acquire requests that were still in flight at the quorum
    /// decision finish in the background, so that the lock ends up on every
    /// node that grants it (more nodes tolerate more failures while held).
    /// A node that grants after the holder let go is released right away:
    /// the holder marks itself lost *before* sending its own release, so
    /// either that release runs after the grant, or this task sees the mark.
    pub(crate) fn follow_stragglers<F>(&self, mut stragglers: Stragglers<F>)
    where
        F: Future<Output = Result<bool, crate::NodeError>> + Send + 'static,
    {
        if stragglers.is_empty() {
            return;
        }
        let (redlock, held) = (self.redlock.clone(), self.held.clone());
        tokio::spawn(
            async move {
                while let Some((i, answer)) = futures::StreamExt::next(&mut stragglers).await {
                    tracing::debug!(op = "acquire", node = %redlock.config().nodes[i].label(), late = true, granted = ?answer.as_ref().ok());
                    if matches!(answer, Ok(true)) && held.status.borrow().lost {
                        let node = &redlock.config().nodes[i];
                        let deadline = Instant::now() + redlock.config().node_timeout;
                        let _ = node.release(&held.key, held.token.as_str(), deadline).await;
                    }
                }
            }
            .in_current_span(),
        );
    }

    /// The resource name this lock is held on.
    pub fn resource(&self) -> &str {
        &self.held.resource
    }

    /// This grant's token (see [`Token`]).
    pub fn token(&self) -> &Token {
        &self.held.token
    }

    /// The fencing token of this grant, for fenced locks; `None` otherwise.
    pub fn fence(&self) -> Option<u64> {
        None
    }

    /// The instant (on tokio's monotonic clock) after which the holder must
    /// assume it no longer holds the lock: `start + ttl - drift`, where
    /// `start` is when the acquiring (or last extending) request began.
    pub fn deadline(&self) -> Instant {
        self.held.status.borrow().deadline
    }

    /// How much longer the lock can be trusted; zero once it is lost,
    /// released or past its deadline.
    pub fn validity(&self) -> Duration {
        let status = *self.held.status.borrow();
        if status.lost {
            Duration::ZERO
        } else {
            status.deadline.saturating_duration_since(Instant::now())
        }
    }

    /// Resolves once the holder must assume the lock is gone: its deadline
    /// passed without a successful extension, an extension found the token
    /// gone on too many nodes, or the guard was released or dropped.
    ///
    /// The future does not borrow the guard (it is `Send + 'static`), so it
    /// can be handed to another task or raced with `tokio::select!` against
    /// a critical section. Each call subscribes anew; calling it in a loop
    /// is cheap.
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
    /// tokio::select! {
    ///     _ = settle_payments() => { guard.release().await?; }
    ///     _ = guard.lost() => eprintln!("lock lost; settlement abandoned"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        wait_lost(self.held.status.subscribe())
    }

    /// Extends the lock to `ttl` from now, on a quorum of nodes, checking
    /// the token on each.
    ///
    /// The new deadline is `start + ttl - drift`, with `start` taken when
    /// the extension began. Nodes are not waited for past the current
    /// deadline: once the lock's deadline has passed it is lost for good
    /// and cannot be extended.
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`]: the deadline already passed, or the token was gone
    ///   on so many nodes that no quorum could hold it. The guard is then
    ///   lost for good ([`lost`](Self::lost) resolves).
    /// - [`Error::Unavailable`]: too few nodes answered. Nothing is known
    ///   to be lost: the previous deadline still holds, and a later
    ///   `extend` may succeed.
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
        let span = tracing::debug_span!("quorumlock", op = "extend", resource = %self.held.resource, ttl_ms);
        async {
            let start = Instant::now();
            let current = *self.held.status.borrow();
            if !current.trusted_at(start) {
                self.held.mark_lost();
                return Err(self.held.lost_error(0, quorum, Vec::new()));
            }
            let window = Window::new(start, ttl, config.drift_factor);
            let deadline = (start + config.node_timeout).min(current.deadline);
            let (key, token) = (&*self.held.key, self.held.token.as_str());
            // Late PEXPIREs are harmless (token-checked): stragglers are dropped.
            let (round, _) = fan_out(&config.nodes, Until::Decided, "extend", |_, node| {
                node.extend(key, token, ttl_ms, deadline)
            })
            .await;

            if round.decision == Decision::Reached {
                let now = Instant::now();
                // Move the deadline only if the lock is still trusted now;
                // otherwise lost() may already have fired, and lost is final.
                let extended = self.held.status.send_if_modified(|s| {
                    let ok = s.trusted_at(now) && window.validity_at(now).is_some();
                    if ok {
                        s.deadline = window.deadline();
                    }
                    ok
                });
                if extended {
                    tracing::debug!(extended = round.tally.yes(), "lock extended");
                    return Ok(());
                }
                self.held.mark_lost();
                return Err(self
                    .held
                    .lost_error(round.tally.yes(), quorum, round.failures));
            }
            if round.tally.refused_by_quorum_complement() {
                self.held.mark_lost();
                return Err(self
                    .held
                    .lost_error(round.tally.yes(), quorum, round.failures));
            }
            Err(round.failure(&self.held.resource))
        }
        .instrument(span)
        .await
    }

    /// Releases the lock: a token-checked delete on every node, waiting for
    /// each node's answer (or its timeout).
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
        let span =
            tracing::debug_span!("quorumlock", op = "release", resource = %self.held.resource);
        let round = release_everywhere(&self.redlock, &self.held.key, &self.held.token, None)
            .instrument(span)
            .await;
        self.released = true;
        self.held.mark_lost();
        tracing::debug!(
            resource = %self.held.resource,
            released = round.tally.yes(),
            failed = round.failures.len(),
            "lock released"
        );
        if round.tally.yes() < round.tally.quorum() && round.tally.refused_by_quorum_complement() {
            return Err(self.held.lost_error(
                round.tally.yes(),
                round.tally.quorum(),
                round.failures,
            ));
        }
        Ok(ReleaseSummary {
            released: round.tally.yes(),
            nodes: round.tally.nodes(),
            failures: round.failures,
        })
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.held.resource)
            .field("token", &self.held.token)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.held.mark_lost();
        // Best effort: without a runtime the keys expire after their ttl.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let redlock = self.redlock.clone();
            let held = self.held.clone();
            runtime.spawn(async move {
                release_everywhere(&redlock, &held.key, &held.token, None).await;
            });
        } else {
            tracing::debug!(resource = %self.held.resource, "guard dropped outside a runtime; keys will expire");
        }
    }
}

/// Waits until the status says lost, its deadline passes, or the guard
/// (the sender) is gone.
async fn wait_lost(mut status: watch::Receiver<Status>) {
    loop {
        let current = *status.borrow_and_update();
        if current.lost {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(current.deadline) => return,
            changed = status.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// The outcome of [`LockGuard::release`], per node.
#[derive(Debug)]
#[non_exhaustive]
pub struct ReleaseSummary {
    released: usize,
    nodes: usize,
    failures: Vec<NodeFailure>,
}

impl ReleaseSummary {
    /// How many nodes held the token and deleted it.
    pub fn released(&self) -> usize {
        self.released
    }

    /// How many nodes were asked.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The nodes that did not answer, with their errors. Their keys, if
    /// any, expire after the ttl.
    pub fn failures(&self) -> &[NodeFailure] {
        &self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(deadline: Instant) -> (watch::Sender<Status>, watch::Receiver<Status>) {
        watch::channel(Status {
            deadline,
            lost: false,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_at_the_deadline() {
        let deadline = Instant::now() + Duration::from_secs(1);
        let (_tx, rx) = status(deadline);
        wait_lost(rx).await;
        assert!(Instant::now() >= deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_follows_a_moved_deadline() {
        let start = Instant::now();
        let (tx, rx) = status(start + Duration::from_secs(1));
        let waiter = tokio::spawn(wait_lost(rx));
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.send_modify(|s| s.deadline = start + Duration::from_secs(3));
        waiter.await.expect("waiter");
        assert!(Instant::now() >= start + Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_when_marked_or_when_the_guard_is_gone() {
        let far = Instant::now() + Duration::from_secs(3600);
        let (tx, rx) = status(far);
        let waiter = tokio::spawn(wait_lost(rx));
        tx.send_modify(|s| s.lost = true);
        waiter.await.expect("waiter");
        assert!(Instant::now() < far);

        let (tx, rx) = status(far);
        let waiter = tokio::spawn(wait_lost(rx));
        drop(tx);
        waiter.await.expect("waiter");
        assert!(Instant::now() < far);
    }
}
