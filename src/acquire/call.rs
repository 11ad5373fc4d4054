//! One acquiring call, for every primitive: the manager's shared state
//! ([`Manager`], the inner half of the public `Redlock`), and the one path
//! every acquiring call takes through it — the startup check on first
//! use, the attempts a primitive describes ([`Acquisition`]), the retry
//! policy's delays and the wake-ups on release between them, metrics.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::retry::{Next, Retry, Schedule, jitter_unit};
use super::wakeup::{WAKE_JITTER, Waiter, Wakeups, unheard_backoff};
use super::{FirstUse, Singletons};
use crate::check::{self, CheckOptions, Report};
use crate::error::Error;
use crate::holding::guard::LockGuard;
use crate::holding::renew::Renewer;
use crate::metrics;
use crate::node::pubsub::PubSub;
use crate::request::{Keys, Request};
use crate::round::{Acquire, Core, attempt, shallow};

/// A manager's shared state: the round engine's core, and what only the
/// entry points and holders need besides.
pub(crate) struct Manager {
    pub(crate) core: Arc<Core>,
    pub(crate) retry: Retry,
    pub(crate) key_prefix: String,
    pub(crate) script_mode: crate::ScriptMode,
    pub(crate) renewer: Arc<Renewer>,
    /// The one pub/sub connection per node, for waiters and election
    /// observers alike.
    pub(crate) pubsub: Arc<PubSub>,
    /// Waiters woken by releases, with [`WakeOnRelease::Subscribe`].
    pub(crate) wakeups: Option<Arc<Wakeups>>,
    /// What primitives keep per manager (a fair lock's waiters told their
    /// turn).
    pub(crate) singletons: Singletons,
    /// The node check on first use (see `doctor`).
    pub(crate) first_use: FirstUse,
}

impl Drop for Manager {
    fn drop(&mut self) {
        // The renewer and the pub/sub tasks hold the core weakly: let them
        // notice (guards still held keep the renewer going).
        self.renewer.shutdown();
        self.pubsub.stop();
    }
}

impl Manager {
    /// Runs the [`StartupCheck`](crate::check::StartupCheck) in the
    /// background on the first use, once; `Redlock::settle` waits for it.
    fn startup_check(self: &Arc<Self>) {
        if !self.first_use.begin() {
            return;
        }
        let this = self.clone();
        let span = tracing::info_span!("quorumlock_check");
        // Background work of the manager: `settle` waits for it.
        self.core.background().spawn(
            async move {
                check::run::log(&this.check(&CheckOptions::default()).await);
            }
            .instrument(span),
        );
    }

    /// The node check over the manager's nodes (see `Redlock::check_with`).
    pub(crate) async fn check(&self, options: &CheckOptions) -> Report {
        let tracking = self.renewer.setting();
        check::run::run(
            &self.core,
            &self.key_prefix,
            self.script_mode,
            tracking,
            options,
        )
        .await
    }

    /// One attempt of a lock-like request on the round engine; a grant
    /// becomes a guard. Entry points call it from
    /// [`Acquisition::attempt`], never on their own: [`acquire`](Self::acquire)
    /// is the path every call takes.
    pub(crate) async fn attempt<A: Acquire>(&self, acquire: &A) -> Result<LockGuard, Error> {
        let core = &self.core;
        let grant = attempt(core, acquire).await?;
        Ok(LockGuard::new(
            core.clone(),
            self.renewer.clone(),
            acquire.target().resource.clone(),
            acquire.target().ttl,
            grant,
        ))
    }

    /// The one acquire path of every entry point — `lock` and `try_lock`
    /// in all their forms, semaphore permits, reader-writer holds and
    /// election campaigns: for a request validated up front (so the future
    /// borrows nothing and is `'static`), runs the [startup
    /// check](crate::check::StartupCheck) on first use, makes the attempts
    /// `attempts` allows with the retry policy's delays and the wake-ups on
    /// release between them, and reports the call to metrics (a request
    /// refused before any I/O as one of no attempts). Named `op` in its
    /// tracing span.
    pub(crate) fn acquire<A: Acquisition>(
        self: &Arc<Self>,
        request: Result<A, Error>,
        attempts: Attempts,
        op: &'static str,
    ) -> impl Future<Output = Result<A::Guard, Error>> + Send + use<A> {
        match request {
            Ok(request) => shallow(self.clone().acquiring(request, attempts, op)),
            // Refused before any I/O: counted as a call of no attempts
            // when awaited, as a valid one is.
            Err(error) => shallow(async move {
                metrics::acquisition(Err(&error), 0, Duration::ZERO);
                Err(error)
            }),
        }
    }

    /// What [`acquire`](Self::acquire) boxes for a valid request.
    async fn acquiring<A: Acquisition>(
        self: Arc<Self>,
        request: A,
        attempts: Attempts,
        op: &'static str,
    ) -> Result<A::Guard, Error> {
        let started = Instant::now();
        let mut made = 0;
        self.startup_check();
        let span = request.span(op);
        let result = self
            .retry(&request, attempts, &mut made)
            .instrument(span)
            .await;
        metrics::acquisition(result.as_ref().map(drop), made, started.elapsed());
        result
    }

    /// Runs `request`'s attempts until one grants or `attempts` gives up,
    /// counting them in `made`. Between attempts it waits out the policy's
    /// delay, or less when a release of the request's
    /// [`wake_keys`](Acquisition::wake_keys) is announced (with
    /// [`WakeOnRelease`](crate::WakeOnRelease) on).
    async fn retry<A: Acquisition>(
        self: &Arc<Self>,
        request: &A,
        attempts: Attempts,
        made: &mut u32,
    ) -> Result<A::Guard, Error> {
        let started = Instant::now();
        let mut schedule = attempts.schedule(&self.retry, started);
        let wakeups = self.wakeups.as_ref();
        let mut waiter: Option<Waiter> = None;
        // Whether the last attempt was made on a wake-up.
        let mut woken = false;
        // Attempts in a row that failed with nobody to announce a release.
        let mut unheard = 0;
        loop {
            *made += 1;
            let heard = waiter.as_ref().map(Waiter::heard);
            // Boxed: an attempt's future and this loop's are each under
            // 1000 bytes that way (see the test below), where together they
            // were 1.9 KB. glibc serves blocks under 1000 bytes from its
            // small bins (and a per-thread cache); a larger one first merges
            // its freed small blocks, which cost about 4 % of the client's
            // CPU at 256 tasks.
            let outcome = shallow(request.attempt(self)).await;
            // Two nodes found to reach one server (see `node::identity`):
            // whatever this attempt got, the configuration is wrong. A
            // hold it got is released in the background (its guard's
            // drop).
            if let Some(error) = self.core.misconfigured() {
                drop(outcome);
                return Err(Error::InvalidConfig(error));
            }
            let error = match outcome {
                Ok(held) => return Ok(held),
                Err(e) if e.is_retryable() => e,
                Err(e) => return Err(e),
            };
            let contended = matches!(error, Error::Contended { .. });
            // Someone else got the release this waiter was woken for, or
            // the release had not run on every node yet.
            let collided = woken && contended;
            // Something was announced while it tried: perhaps a node that
            // refused it is free now, and nothing more is coming for it.
            let news = matches!((&waiter, heard), (Some(w), Some(before)) if w.heard() != before);
            if let (true, Some(waiter)) = (collided, &waiter) {
                waiter.lost_turn();
            }
            let unavailable = matches!(error, Error::Unavailable { .. });
            match schedule.after_failure(Instant::now(), jitter_unit(), unavailable) {
                Next::RetryAfter(delay) => {
                    tracing::debug!(error = %error, ?delay, "attempt failed, retrying");
                    if let (None, Some(wakeups)) = (&waiter, wakeups) {
                        waiter = Some(wakeups.waiter(&request.wake_keys()));
                    }
                    let failed = Failed {
                        contended,
                        news,
                        collided,
                    };
                    woken = wait_to_retry(waiter.as_ref(), failed, delay, &mut unheard).await;
                }
                Next::AttemptsExhausted => return Err(error),
                Next::DeadlinePassed => {
                    return Err(Error::WaitTimeout {
                        resource: request.resource().to_owned(),
                        waited: started.elapsed(),
                        attempts: schedule.attempts_made(),
                        last: Box::new(error),
                    });
                }
            }
        }
    }
}

/// How an attempt failed, for [`wait_to_retry`].
#[derive(Debug, Clone, Copy)]
struct Failed {
    /// Some node refused it: it holds another's key.
    contended: bool,
    /// A release was announced while it tried.
    news: bool,
    /// It was made on a wake-up, and refused: someone else got the release.
    collided: bool,
}

/// Waits before the next attempt: the policy's `delay`, or less when a
/// release is announced (with a `waiter`); whether a release woke it.
/// `unheard` counts the attempts in a row that nobody refused.
async fn wait_to_retry(
    waiter: Option<&Waiter>,
    failed: Failed,
    delay: Duration,
    unheard: &mut u32,
) -> bool {
    match waiter {
        // Refused: whoever holds a key that refused it announces when it
        // deletes it.
        Some(waiter) if failed.contended && failed.news => {
            *unheard = 0;
            let jitter = WAKE_JITTER.mul_f64(jitter_unit()).min(delay);
            pause(waiter, jitter, false).await;
            true
        }
        Some(waiter) if failed.contended => {
            *unheard = 0;
            pause(waiter, delay, failed.collided).await
        }
        // Nobody refused it (too few nodes answered in time, or the
        // validity ran out): no release is coming to wake it, and it may
        // have been woken for the others, who sleep. It tries again soon,
        // backing off, still woken by a release meanwhile.
        Some(waiter) => {
            let backoff = unheard_backoff(*unheard, delay, jitter_unit());
            *unheard = unheard.saturating_add(1);
            pause(waiter, backoff, false).await
        }
        None => {
            tokio::time::sleep(delay).await;
            false
        }
    }
}

/// How many attempts a call of [`Manager::acquire`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempts {
    /// Exactly one: the `try_` forms.
    Once,
    /// As the manager's [`Retry`] policy allows: `lock` and its kin.
    PerPolicy,
    /// Without limit or deadline while the resource is held by another,
    /// with the policy's delays, and as the policy allows while too few
    /// nodes are reachable (see [`Retry::campaign`]): an election's
    /// campaign.
    WhileContended,
}

impl Attempts {
    /// When a call that started at `started` tries again, under `policy`.
    fn schedule(self, policy: &Retry, started: Instant) -> Schedule {
        match self {
            Attempts::Once => Retry::none().schedule(started),
            Attempts::PerPolicy => policy.schedule(started),
            Attempts::WhileContended => policy.campaign(started),
        }
    }
}

/// What a call of [`Manager::acquire`] acquires: a validated request of
/// one entry point, and how one attempt at it goes.
pub(crate) trait Acquisition: Send + Sync + 'static {
    /// What a granted attempt gives the caller.
    type Guard: Send + 'static;

    /// The name errors give the acquisition (a resource, a semaphore's, a
    /// reader-writer lock's or an election's name).
    fn resource(&self) -> &str;

    /// The keys whose announced release wakes a caller waiting to retry.
    fn wake_keys(&self) -> Keys;

    /// The call's tracing span, for operation `op`.
    fn span(&self, op: &'static str) -> tracing::Span;

    /// One attempt, on `manager`'s nodes.
    fn attempt(
        &self,
        manager: &Arc<Manager>,
    ) -> impl Future<Output = Result<Self::Guard, Error>> + Send;
}

/// A lock: plain, fenced or of several resources.
impl Acquisition for Request {
    type Guard = LockGuard;

    fn resource(&self) -> &str {
        &self.target.resource
    }

    fn wake_keys(&self) -> Keys {
        self.target.keys.clone()
    }

    fn span(&self, op: &'static str) -> tracing::Span {
        self.target.span(op)
    }

    fn attempt(
        &self,
        manager: &Arc<Manager>,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send {
        manager.attempt(self)
    }
}

/// Sleeps `delay`, or less when the waiter's turn comes with a release;
/// returns whether it did. After a `collision` (the last wake-up went to
/// someone else: typically a waiter of another manager woken by the same
/// release), a random jitter follows the wake-up, so that the next one
/// does not collide again.
pub(crate) async fn pause(waiter: &Waiter, delay: Duration, collision: bool) -> bool {
    let until = Instant::now() + delay;
    if tokio::time::timeout_at(until, waiter.woken())
        .await
        .is_err()
    {
        return false;
    }
    tracing::debug!("release announced, retrying");
    if collision {
        let jitter = WAKE_JITTER.mul_f64(jitter_unit());
        tokio::time::sleep_until(until.min(Instant::now() + jitter)).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::request::Fencing;

    /// A lock call boxes its whole future, and boxes each attempt's: both
    /// stay under 1000 bytes (see [`Manager::retry`]), 912 and 864 now.
    /// glibc's small bins end there: a 1016-byte future (which a 1 KB
    /// limit let through) was served from its large bins, after merging
    /// its freed small blocks, as the 1.9 KB one was.
    #[tokio::test]
    async fn an_acquisitions_boxed_futures_stay_under_1_kb() {
        const AT_MOST: usize = 1000;
        let locks = crate::Redlock::new(["redis://127.0.0.1:1"]).expect("a valid URL");
        let request = || locks.request(&["r"], Duration::from_secs(1), Fencing::Off);
        let manager = locks.manager();
        let call = manager.clone().acquiring(
            request().expect("a valid request"),
            Attempts::PerPolicy,
            "lock",
        );
        let size = std::mem::size_of_val(&call);
        assert!(size <= AT_MOST, "a lock call's future: {size} bytes");
        let request = request().expect("a valid request");
        let attempt = manager.attempt(&request);
        let size = std::mem::size_of_val(&attempt);
        assert!(size <= AT_MOST, "an attempt's future: {size} bytes");
    }
}
