//! The `Redlock` manager: `lock` and `try_lock`, and the fan-out of one
//! request to every node that feeds votes into the quorum logic.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::{Join, Ready, join, ready};
use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tracing::Instrument;

use crate::builder::MAX_TTL;
use crate::error::{ArgumentError, NodeError, NodeFailure};
use crate::guard::LockGuard;
use crate::node::Node;
use crate::quorum::{Decision, Shortfall, Tally, Vote, Window, drift};
use crate::retry::{Next, jitter_unit};
use crate::{Error, RedlockBuilder, Retry, Token};

/// A distributed lock manager over N independent Redis nodes.
///
/// Cheap to clone (an `Arc` inside): clones share the nodes' connections,
/// one multiplexed connection per node for every lock and task.
///
/// # Examples
///
/// Run a nightly job on at most one machine of the fleet:
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// let locks = Redlock::new([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])?;
/// let guard = locks.lock("jobs:nightly-report", Duration::from_secs(30)).await?;
/// // … at most one holder runs here, until guard.validity() runs out …
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Config>,
}

/// A validated configuration; the manager's shared state.
pub(crate) struct Config {
    pub(crate) nodes: Vec<Node>,
    pub(crate) node_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) retry: Retry,
    pub(crate) key_prefix: String,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.inner;
        f.debug_struct("Redlock")
            .field("nodes", &c.nodes)
            .field("quorum", &self.quorum())
            .field("node_timeout", &c.node_timeout)
            .field("drift_factor", &c.drift_factor)
            .field("retry", &c.retry)
            .field("key_prefix", &c.key_prefix)
            .finish()
    }
}

/// One validated lock request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) resource: Arc<str>,
    pub(crate) key: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) ttl_ms: u64,
}

impl Redlock {
    /// A builder with every option at its default.
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    /// A manager over `urls` with every other option at its default. One URL
    /// gives single-node mode (quorum 1); it runs the same code.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] as for [`RedlockBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// let single = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(single.quorum(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().nodes(urls).build()
    }

    pub(crate) fn from_config(config: Config) -> Self {
        Self {
            inner: Arc::new(config),
        }
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        crate::quorum::quorum(self.inner.nodes.len())
    }

    /// The nodes, as `host:port[/db]`, or `cluster(host:port,…)` with its
    /// seeds for a cluster node (never with credentials).
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &str> {
        self.inner.nodes.iter().map(|n| &**n.label())
    }

    /// Acquires `resource` for `ttl`, retrying per the manager's [`Retry`]
    /// policy.
    ///
    /// Each attempt sends `SET key token NX PX ttl` to every node in
    /// parallel, decides as soon as a quorum granted (or can no longer
    /// grant), and holds the lock only if validity remains after
    /// subtracting the time spent and the clock-drift allowance. A failed
    /// attempt removes its token from every node that may have stored it
    /// before the next attempt starts.
    ///
    /// The returned future is `Send + 'static`, so it can be spawned.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidArgument`]: empty resource, ttl under 1 ms, over
    ///   [`MAX_TTL`](crate::MAX_TTL), or not above the drift allowance.
    /// - [`Error::Contended`], [`Error::Unavailable`],
    ///   [`Error::ValidityExpired`]: the last attempt's failure, once the
    ///   attempt limit is reached.
    /// - [`Error::WaitTimeout`]: the policy's wait deadline passed.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe. If the future is dropped mid-attempt,
    /// a background task removes the attempt's token from every node, as
    /// a failed attempt would (when a tokio runtime is still running).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock("orders:42", Duration::from_secs(10)).await?;
    /// println!("held for another {:?}", guard.validity());
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        let this = self.clone();
        let request = self.request(resource, ttl);
        async move { this.lock_with_retry(request?).await }
    }

    /// Makes exactly one attempt to acquire `resource` for `ttl`; see
    /// [`lock`](Self::lock) for the algorithm.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for bad input; otherwise the attempt's
    /// failure: [`Error::Contended`], [`Error::Unavailable`] or
    /// [`Error::ValidityExpired`].
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`lock`](Self::lock) is.
    ///
    /// # Examples
    ///
    /// Skip the work if another process is already doing it:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// match locks.try_lock("cache:rebuild", Duration::from_secs(60)).await {
    ///     Ok(guard) => { /* rebuild */ guard.release().await?; }
    ///     Err(e) if e.is_retryable() => println!("someone else is on it: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        let this = self.clone();
        let request = self.request(resource, ttl);
        async move {
            let request = request?;
            let span = lock_span(&request, "try_lock");
            this.attempt(&request).instrument(span).await
        }
    }

    /// Validates a call's arguments into a request. No I/O.
    fn request(&self, resource: &str, ttl: Duration) -> Result<Request, Error> {
        if resource.is_empty() {
            return Err(ArgumentError::EmptyResource.into());
        }
        let (ttl, ttl_ms) = self.check_ttl(ttl)?;
        let key = if self.inner.key_prefix.is_empty() {
            Arc::from(resource)
        } else {
            Arc::from(format!("{}{resource}", self.inner.key_prefix))
        };
        Ok(Request {
            resource: Arc::from(resource),
            key,
            ttl,
            ttl_ms,
        })
    }

    /// Rounds a ttl down to Redis' millisecond resolution and checks it;
    /// validity is computed from the rounded value, so it is never
    /// overstated.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<(Duration, u64), Error> {
        if ttl > MAX_TTL {
            return Err(ArgumentError::TtlTooLong { ttl, max: MAX_TTL }.into());
        }
        // Cannot truncate: MAX_TTL in ms fits u64 by far.
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ttl_ms == 0 {
            return Err(ArgumentError::ZeroTtl.into());
        }
        let ttl = Duration::from_millis(ttl_ms);
        let drift = drift(ttl, self.inner.drift_factor);
        if ttl <= drift {
            return Err(ArgumentError::TtlNotAboveDrift { ttl, drift }.into());
        }
        Ok((ttl, ttl_ms))
    }

    async fn lock_with_retry(&self, request: Request) -> Result<LockGuard, Error> {
        let span = lock_span(&request, "lock");
        async {
            let started = Instant::now();
            let mut schedule = self.inner.retry.schedule(started);
            loop {
                let error = match self.attempt(&request).await {
                    Ok(guard) => return Ok(guard),
                    Err(e) if e.is_retryable() => e,
                    Err(e) => return Err(e),
                };
                match schedule.after_failure(Instant::now(), jitter_unit()) {
                    Next::RetryAfter(delay) => {
                        tracing::debug!(error = %error, ?delay, "attempt failed, retrying");
                        tokio::time::sleep(delay).await;
                    }
                    Next::AttemptsExhausted => return Err(error),
                    Next::DeadlinePassed => {
                        return Err(Error::WaitTimeout {
                            resource: request.resource.to_string(),
                            waited: started.elapsed(),
                            attempts: schedule.attempts_made(),
                            last: Box::new(error),
                        });
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt: fan out, decide, and either hand out a guard or clean up.
    async fn attempt(&self, request: &Request) -> Result<LockGuard, Error> {
        let config = &*self.inner;
        let start = Instant::now();
        let token = Token::generate()?;
        let window = Window::new(start, request.ttl, config.drift_factor);
        // Never wait for a node past the point where no validity would be left.
        let deadline = (start + config.node_timeout).min(window.deadline());

        // Armed until the attempt ends: if this future is dropped mid-flight,
        // the token is removed from every node in the background.
        let cleanup = Cleanup {
            redlock: Some(self.clone()),
            key: request.key.clone(),
            token: token.clone(),
        };

        // Owned futures, so that requests still in flight at the decision
        // can be handed to the guard instead of being dropped.
        let ttl_ms = request.ttl_ms;
        let (mut round, stragglers) = fan_out(&config.nodes, Until::Decided, "acquire", |i, _| {
            let (this, key, token) = (self.clone(), request.key.clone(), token.clone());
            async move {
                this.inner.nodes[i]
                    .acquire(&key, token.as_str(), ttl_ms, deadline)
                    .await
            }
        })
        .await;
        let refused = std::mem::take(&mut round.refused);

        let error = match round.decision {
            Decision::Reached => match window.validity_at(Instant::now()) {
                Some(validity) => {
                    cleanup.disarm();
                    tracing::debug!(granted = round.tally.yes(), ?validity, "lock acquired");
                    let guard = LockGuard::new(self.clone(), request, token, window);
                    guard.follow_stragglers(stragglers);
                    return Ok(guard);
                }
                None => Error::ValidityExpired {
                    resource: request.resource.to_string(),
                    elapsed: start.elapsed(),
                    ttl: request.ttl,
                },
            },
            Decision::Impossible | Decision::Pending => round.failure(&request.resource),
        };
        tracing::debug!(error = %error, "attempt failed, cleaning up");
        // A node that answered "no" to SET NX certainly did not store our
        // token, and nothing else will: skip it. Every other node — granted,
        // failed, timed out or never heard from — may hold it.
        cleanup.run(Some(refused)).await;
        Err(error)
    }
}

fn lock_span(request: &Request, op: &'static str) -> tracing::Span {
    tracing::debug_span!("quorumlock", op, resource = %request.resource, ttl_ms = request.ttl_ms)
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
pub(crate) struct Round {
    pub(crate) tally: Tally,
    pub(crate) decision: Decision,
    pub(crate) failures: Vec<NodeFailure>,
    /// Per node: whether it answered "no".
    pub(crate) refused: Vec<bool>,
}

impl Round {
    /// The error for a round that did not reach a quorum.
    pub(crate) fn failure(self, resource: &str) -> Error {
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
}

/// Requests still in flight when a fan-out decided, each with its node's
/// index. A concrete type (not `impl Future`), so that it does not capture
/// the request-building closure and can outlive it.
pub(crate) type Stragglers<Fut> = FuturesUnordered<Join<Ready<usize>, Fut>>;

/// Sends one request to every node in parallel and tallies the answers.
/// Returns the requests still in flight (none with [`Until::AllAnswered`]).
pub(crate) async fn fan_out<'a, F, Fut>(
    nodes: &'a [Node],
    until: Until,
    op: &'static str,
    call: F,
) -> (Round, Stragglers<Fut>)
where
    F: Fn(usize, &'a Node) -> Fut,
    Fut: Future<Output = Result<bool, NodeError>>,
{
    let mut calls: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| join(ready(i), call(i, node)))
        .collect();
    let mut round = Round {
        tally: Tally::new(nodes.len()),
        decision: Decision::Pending,
        failures: Vec::new(),
        refused: vec![false; nodes.len()],
    };
    while let Some((i, answer)) = calls.next().await {
        let node = nodes[i].label();
        let vote = match answer {
            Ok(true) => Vote::Yes,
            Ok(false) => {
                round.refused[i] = true;
                Vote::No
            }
            Err(error) => {
                tracing::debug!(op, node = %node, error = %error, "node failed");
                round.failures.push(NodeFailure {
                    node: node.clone(),
                    error,
                });
                Vote::Failed
            }
        };
        tracing::debug!(op, node = %node, ?vote);
        round.decision = round.tally.record(vote);
        if until == Until::Decided && round.decision != Decision::Pending {
            break;
        }
    }
    (round, calls)
}

/// Token-checked release on every node (except those `skip` marks),
/// waiting for each answer or the node timeout.
pub(crate) async fn release_everywhere(
    redlock: &Redlock,
    key: &str,
    token: &Token,
    skip: Option<&[bool]>,
) -> Round {
    let config = redlock.config();
    let deadline = Instant::now() + config.node_timeout;
    fan_out(
        &config.nodes,
        Until::AllAnswered,
        "release",
        |i, node| async move {
            if skip.and_then(|s| s.get(i).copied()).unwrap_or(false) {
                Ok(false)
            } else {
                node.release(key, token.as_str(), deadline).await
            }
        },
    )
    .await
    .0
}

/// Removes an attempt's token from the nodes, even if the attempt's future
/// is dropped halfway.
struct Cleanup {
    /// `None` once disarmed.
    redlock: Option<Redlock>,
    key: Arc<str>,
    token: Token,
}

impl Cleanup {
    /// The attempt succeeded: the guard now owns the token.
    fn disarm(mut self) {
        self.redlock = None;
    }

    /// Releases on every node except the ones `skip` marks, in a task of
    /// its own so that dropping the caller cannot cut it short.
    async fn run(mut self, skip: Option<Vec<bool>>) {
        let Some(redlock) = self.redlock.take() else {
            return;
        };
        if skip
            .as_ref()
            .is_some_and(|s| s.iter().all(|&refused| refused))
        {
            return;
        }
        let (key, token) = (self.key.clone(), self.token.clone());
        let task = tokio::spawn(
            async move {
                release_everywhere(&redlock, &key, &token, skip.as_deref()).await;
            }
            .in_current_span(),
        );
        // Dropping the JoinHandle detaches the task; it still completes.
        let _ = task.await;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(redlock) = self.redlock.take() else {
            return;
        };
        // Cancelled mid-attempt: we do not know which nodes refused, so
        // release everywhere. Without a runtime the keys expire by ttl.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (key, token) = (self.key.clone(), self.token.clone());
            runtime.spawn(async move {
                release_everywhere(&redlock, &key, &token, None).await;
            });
        }
    }
}
