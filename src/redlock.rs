//! The `Redlock` manager: `lock` and `try_lock`, and the fan-out of one
//! request to every node that feeds votes into the quorum logic.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::builder::MAX_TTL;
pub(crate) use crate::calls::Stragglers;
use crate::error::{ArgumentError, NodeError, NodeFailure};
use crate::guard::{InFlight, LockGuard};
use crate::lease::Lease;
use crate::node::{Deadline, Node};
use crate::quorum::{Decision, Shortfall, Tally, Vote, Window, drift};
use crate::renew::Renewer;
use crate::retry::{Next, jitter_unit};
use crate::tasks::Background;
use crate::wakeup::{WAKE_JITTER, Waiter, WakeOnRelease, Wakeups, release_id};
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
    pub(crate) script_mode: crate::ScriptMode,
    pub(crate) renewer: Arc<Renewer>,
    pub(crate) background: Arc<Background>,
    /// Waiters and pub/sub connections, with [`WakeOnRelease::Subscribe`].
    pub(crate) wakeups: Option<Arc<Wakeups>>,
}

impl Drop for Config {
    fn drop(&mut self) {
        // The renewer and the pub/sub tasks hold the manager weakly: let
        // them notice and stop.
        self.renewer.shutdown();
        if let Some(wakeups) = &self.wakeups {
            wakeups.stop();
        }
    }
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
            .field("script_mode", &c.script_mode)
            .field(
                "wake_on_release",
                &match c.wakeups {
                    Some(_) => WakeOnRelease::Subscribe,
                    None => WakeOnRelease::Never,
                },
            )
            .finish()
    }
}

/// A lock's Redis keys, shared cheaply by its guard and background tasks.
pub(crate) type Keys = Arc<[Arc<str>]>;

/// Appended to a lock's key to form its fence counter's key.
pub const FENCE_SUFFIX: &str = ":fence";

/// Whether a request wants a fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fencing {
    Off,
    On,
}

/// One validated lock request.
#[derive(Debug)]
pub(crate) struct Request {
    /// The resource name, or the names joined by `+` for a multi-lock.
    pub(crate) resource: Arc<str>,
    /// One key per resource: the prefix and the resource name.
    pub(crate) keys: Keys,
    /// The fence counter's key, for fenced locks.
    pub(crate) fence_key: Option<Arc<str>>,
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
        Self::from_shared(Arc::new(config))
    }

    pub(crate) fn from_shared(inner: Arc<Config>) -> Self {
        Self { inner }
    }

    pub(crate) fn shared(&self) -> Arc<Config> {
        self.inner.clone()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner
    }

    /// Waits until the manager's background work has finished: cleanup of
    /// cancelled or failed attempts, releases of dropped guards, and
    /// requests still answering after a quorum decided (an acquire's or an
    /// extension's). Renewal of auto-extended locks is not waited for;
    /// release those guards first.
    ///
    /// Call it before shutting down the runtime, so that no key is left to
    /// expire by its ttl instead of being released.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only observes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock("jobs:a", Duration::from_secs(10)).await?;
    /// drop(guard); // released in the background…
    /// locks.settle().await; // …and now that release has finished
    /// # Ok(())
    /// # }
    /// ```
    pub async fn settle(&self) {
        self.inner.background.idle().await;
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
        self.retrying(self.request(resource, ttl, Fencing::Off))
    }

    /// Like [`lock`](Self::lock), but the guard also carries a **fencing
    /// token**: a number that grows with every fenced grant of the same
    /// resource, in [`fence`](Lease::fence).
    ///
    /// Pass it to the storage your critical section writes to, and have
    /// the storage reject writes carrying a lower fence than one it has
    /// seen: a holder whose lock expired while it was paused (GC, swap, a
    /// slow network) is then stopped at the storage, which no lock can do
    /// on its own.
    ///
    /// # How it stays monotonic
    ///
    /// Each node keeps a counter beside the lock key (`<key>:fence`, never
    /// expiring). A node that grants the lock increments its counter in the
    /// same script; the fence is the largest value among the granting
    /// quorum. Before the lock counts as acquired, the nodes that granted it
    /// are asked to raise their counter to at least that fence, and a
    /// quorum of nodes must confirm — granting nodes only, while they still
    /// hold the lock (the validity is checked again afterwards). The next
    /// grant's quorum shares a node with that one, where it can only set its
    /// key after this lock's key is gone, so after the raise: it reads a
    /// counter at least this high and hands out a larger fence. Validity is
    /// measured from the start of the attempt, so the second round trip is
    /// paid for out of the ttl.
    ///
    /// (Confirmations from nodes that did *not* grant would not do: such a
    /// node may have granted a concurrent attempt a smaller counter value
    /// before the raise reached it. The model in `tests/model` finds that
    /// interleaving.)
    ///
    /// # Limits
    ///
    /// Counters live in node memory: a node that restarts without its data
    /// can hand out a fence already used. Run nodes with `appendonly yes`
    /// and `appendfsync always`, or keep a crashed node away for longer
    /// than the ttl *and* accept that fences may repeat after losing a
    /// majority's data. On a Redis Cluster node, the lock key and the
    /// counter key must share a hash slot: use a hash-tagged resource such
    /// as `{orders}:42`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); a write-back that cannot reach a quorum
    /// fails the attempt like unreachable nodes do (and cleans up).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`lock`](Self::lock) is.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn write_report(fence: u64) {}
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks.lock_fenced("reports:daily", Duration::from_secs(10)).await?;
    /// let fence = guard.fence().expect("fenced locks carry a fence");
    /// write_report(fence).await; // the store rejects fences lower than the last it saw
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_fenced(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.retrying(self.request(resource, ttl, Fencing::On))
    }

    /// Like [`try_lock`](Self::try_lock) (exactly one attempt), with a
    /// fencing token as [`lock_fenced`](Self::lock_fenced) describes.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`lock`](Self::lock) is.
    pub fn try_lock_fenced(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.once(self.request(resource, ttl, Fencing::On), "try_lock_fenced")
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
        self.once(self.request(resource, ttl, Fencing::Off), "try_lock")
    }

    /// Acquires several resources as one lock: all of them or none, with
    /// the retry policy. Released, extended and auto-extended together; the
    /// guard's [`resource`](Lease::resource) is the names joined by `+`.
    ///
    /// On each node one script checks that no key exists and then sets all
    /// of them, atomically, so two requests for overlapping sets can never
    /// each hold part of the other's set on a node: there is no deadlock to
    /// break, whatever order the resources are listed in. A failed attempt
    /// removes whatever it got, like a single-resource attempt, and the
    /// randomized retry delay keeps two competitors from colliding forever.
    ///
    /// On a Redis Cluster node, all keys of one request must share a hash
    /// slot: give the resources one hash tag, e.g. `{orders}:1`, `{orders}:2`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), plus [`Error::InvalidArgument`] for an empty
    /// list ([`ArgumentError::NoResources`]) or a resource named twice
    /// ([`ArgumentError::DuplicateResource`]).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`lock`](Self::lock) is.
    ///
    /// # Examples
    ///
    /// Move stock between two warehouses without either changing meanwhile:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let guard = locks
    ///     .lock_many(&["stock:berlin", "stock:paris"], Duration::from_secs(5))
    ///     .await?;
    /// // … move the stock …
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_many(
        &self,
        resources: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.retrying(self.request_many(resources, ttl, Fencing::Off))
    }

    /// Like [`lock_many`](Self::lock_many), with exactly one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock) and [`lock_many`](Self::lock_many).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`lock`](Self::lock) is.
    pub fn try_lock_many(
        &self,
        resources: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.once(
            self.request_many(resources, ttl, Fencing::Off),
            "try_lock_many",
        )
    }

    /// Runs `work` while holding `resource`: acquires (with the retry
    /// policy), keeps the lock alive with [`LockGuard::auto_extend`], runs
    /// the future `work` builds, and releases when it completes.
    ///
    /// `work` receives a [`Lease`]: an owned, cloneable view of the lock
    /// (resource, token, fence, validity, [`lost`](Lease::lost)) that
    /// `async move` blocks and spawned sub-tasks can keep.
    ///
    /// If the lock is lost while `work` runs (renewal found the token gone,
    /// or could not reach a quorum in time), the future of `work` is
    /// dropped at once and the call returns [`Error::Lost`] instead of its
    /// output. Sub-tasks spawned by `work` are not dropped with it: give
    /// them the lease and let them watch `lost()`.
    ///
    /// # Errors
    ///
    /// Those of [`lock`](Self::lock), and [`Error::Lost`] when the lock was
    /// lost before `work` completed. A failed release after `work`
    /// completed is not an error (the keys expire by ttl); it is logged.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: if its future is dropped, `work` is
    /// dropped and the guard inside releases the lock in the background.
    ///
    /// # Examples
    ///
    /// Settle payments at most once at a time across the fleet, however
    /// long it takes:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn settle(batch: u64) -> u64 { batch }
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let settled = locks
    ///     .with_lock("payments:settle", Duration::from_secs(10), |lease| async move {
    ///         println!("holding {} for {:?}", lease.resource(), lease.validity());
    ///         settle(42).await
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock(resource, ttl).await?;
        guard.auto_extend();
        let lost = guard.lost();
        let work = work(guard.lease());
        tokio::select! {
            biased;
            reason = lost => {
                let error = guard.held().lost_error(reason, 0, self.quorum(), Vec::new());
                // Dropping the guard releases whatever is left in the background.
                drop(guard);
                Err(error)
            }
            output = work => {
                if let Err(error) = guard.release().await {
                    tracing::debug!(error = %error, "release after with_lock failed");
                }
                Ok(output)
            }
        }
    }

    /// The future of a retrying entry point, for a request validated up
    /// front (so it borrows nothing and is `'static`).
    fn retrying(
        &self,
        request: Result<Request, Error>,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        let this = self.clone();
        async move { this.lock_with_retry(request?).await }
    }

    /// The future of a single-attempt entry point.
    fn once(
        &self,
        request: Result<Request, Error>,
        op: &'static str,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        let this = self.clone();
        async move {
            let request = request?;
            let span = lock_span(&request, op);
            this.attempt(&request).instrument(span).await
        }
    }

    /// Validates a call's arguments into a request. No I/O.
    fn request(&self, resource: &str, ttl: Duration, fencing: Fencing) -> Result<Request, Error> {
        self.request_many(&[resource], ttl, fencing)
    }

    /// Validates a (multi-)resource request. No I/O.
    fn request_many(
        &self,
        resources: &[&str],
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Request, Error> {
        if resources.is_empty() {
            return Err(ArgumentError::NoResources.into());
        }
        if resources.iter().any(|r| r.is_empty()) {
            return Err(ArgumentError::EmptyResource.into());
        }
        for (i, resource) in resources.iter().enumerate() {
            if resources[..i].contains(resource) {
                return Err(ArgumentError::DuplicateResource {
                    resource: (*resource).to_owned(),
                }
                .into());
            }
        }
        let (ttl, ttl_ms) = self.check_ttl(ttl)?;
        let prefix = &self.inner.key_prefix;
        let keys: Keys = resources
            .iter()
            .map(|resource| {
                if prefix.is_empty() {
                    Arc::from(*resource)
                } else {
                    Arc::from(format!("{prefix}{resource}"))
                }
            })
            .collect();
        let fence_key = match (&*keys, fencing) {
            (_, Fencing::Off) => None,
            ([key], Fencing::On) => Some(Arc::from(format!("{key}{FENCE_SUFFIX}"))),
            // Not offered by the public API; refuse rather than guess.
            (_, Fencing::On) => return Err(ArgumentError::NoResources.into()),
        };
        // One script may only touch one slot of a cluster: refuse now, with
        // an explanation, rather than fail on every cluster node later.
        let mut all_keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
        all_keys.extend(fence_key.as_deref());
        if all_keys.len() > 1
            && self.inner.nodes.iter().any(Node::is_cluster)
            && !crate::node::same_slot(&all_keys)
        {
            return Err(ArgumentError::CrossSlot {
                keys: all_keys.iter().map(|k| (*k).to_owned()).collect(),
            }
            .into());
        }
        let resource = match (resources, &*keys) {
            // Without a prefix the key is the resource name: share it.
            ([one], [key]) if **key == **one => key.clone(),
            ([one], _) => Arc::from(*one),
            (many, _) => Arc::from(many.join("+")),
        };
        Ok(Request {
            resource,
            keys,
            fence_key,
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
            let wakeups = self.inner.wakeups.as_ref();
            let mut waiter: Option<Waiter> = None;
            // Whether the last attempt was made on a wake-up.
            let mut woken = false;
            loop {
                let error = match self.attempt(&request).await {
                    Ok(guard) => return Ok(guard),
                    Err(e) if e.is_retryable() => e,
                    Err(e) => return Err(e),
                };
                // Someone else got the release this waiter was woken for.
                let collided = woken && matches!(error, Error::Contended { .. });
                match schedule.after_failure(Instant::now(), jitter_unit()) {
                    Next::RetryAfter(delay) => {
                        tracing::debug!(error = %error, ?delay, "attempt failed, retrying");
                        if let (None, Some(wakeups), Error::Contended { .. }) =
                            (&waiter, wakeups, &error)
                        {
                            waiter = Some(wakeups.waiter(&self.inner, &request.keys));
                        }
                        woken = match &waiter {
                            Some(waiter) => pause(waiter, delay, collided).await,
                            None => {
                                tokio::time::sleep(delay).await;
                                false
                            }
                        };
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
            keys: request.keys.clone(),
            token: token.clone(),
        };

        // Owned futures, so that requests still in flight at the decision
        // can be handed to the guard instead of being dropped.
        let ttl_ms = request.ttl_ms;
        let (refused, error) = match request.fence_key.clone() {
            None => {
                let (round, stragglers) = fan_out(
                    &config.nodes,
                    Until::Decided,
                    "acquire",
                    deadline,
                    |i, _, deadline| {
                        let (this, keys) = (self.clone(), request.keys.clone());
                        let token = token.clone();
                        async move {
                            let node = &this.inner.nodes[i];
                            match &*keys {
                                [key] => node.acquire(key, token.as_str(), ttl_ms, deadline).await,
                                keys => {
                                    node.acquire_many(keys, token.as_str(), ttl_ms, deadline)
                                        .await
                                }
                            }
                        }
                    },
                )
                .await;
                // Only a failed round needs it (see the cleanup below).
                let refused = round.refused_unless_reached();
                match self.granted(request, round, &window, start) {
                    Ok(round) => {
                        cleanup.disarm();
                        let mut guard = LockGuard::new(self.clone(), request, token, None, window);
                        guard.follow_stragglers(&round, stragglers);
                        return Ok(guard);
                    }
                    Err(error) => (refused, error),
                }
            }
            Some(fence_key) => {
                // Phase 1: SET NX PX, and INCR the counter where granted.
                let (round, stragglers) = fan_out(
                    &config.nodes,
                    Until::Decided,
                    "acquire",
                    deadline,
                    |i, _, deadline| {
                        let (this, keys) = (self.clone(), request.keys.clone());
                        let (token, fence_key) = (token.clone(), fence_key.clone());
                        async move {
                            // Fenced requests have exactly one key (see `request`).
                            let key = keys.first().map_or("", |k| &**k);
                            this.inner.nodes[i]
                                .acquire_fenced(key, &fence_key, token.as_str(), ttl_ms, deadline)
                                .await
                        }
                    },
                )
                .await;
                // Only a failed round needs it (see the cleanup below).
                let refused = round.refused_unless_reached();
                // The fence (a reached quorum holds at least one granted
                // counter value), and which nodes granted: they hold our key.
                let fence = |round: Round<Option<u64>>| {
                    let granters: Vec<bool> = round
                        .answers
                        .iter()
                        .map(|answer| matches!(answer, Some(Some(_))))
                        .collect();
                    let fence = round
                        .answers
                        .iter()
                        .flatten()
                        .flatten()
                        .max()
                        .copied()
                        .unwrap_or_default();
                    (fence, granters, round)
                };
                match self.granted(request, round, &window, start).map(fence) {
                    Err(error) => (refused, error),
                    Ok((fence, granters, granted)) => {
                        // Phase 2: raise the counter to the fence on a quorum
                        // of the nodes that granted phase 1, while they hold
                        // our key. Only those count: a node without our key
                        // may already have handed a later acquirer a smaller
                        // counter (see `lock_fenced`, and control j of the
                        // model in tests/model).
                        let deadline =
                            (Instant::now() + config.node_timeout).min(window.deadline());
                        let (writeback, _) = fan_out(
                            &config.nodes,
                            Until::Decided,
                            "fence",
                            deadline,
                            |i, node, deadline| {
                                let granted = granters.get(i).copied().unwrap_or(false);
                                let fence_key = &fence_key;
                                async move {
                                    if !granted {
                                        return Ok(false);
                                    }
                                    node.fence_writeback(fence_key, fence, deadline).await
                                }
                            },
                        )
                        .await;
                        // Granting nodes never refuse a write-back: short of
                        // a quorum, granting nodes failed.
                        let writeback = match writeback.decision {
                            Decision::Reached => Ok(writeback),
                            _ => Err(Error::FenceUnconfirmed {
                                resource: request.resource.to_string(),
                                confirmed: writeback.tally.yes(),
                                quorum: writeback.tally.quorum(),
                                failures: writeback.failures,
                            }),
                        };
                        match writeback.and_then(|w| self.granted(request, w, &window, start)) {
                            Ok(_) => {
                                cleanup.disarm();
                                let mut guard = LockGuard::new(
                                    self.clone(),
                                    request,
                                    token,
                                    Some(fence),
                                    window,
                                );
                                guard.follow_stragglers(&granted, stragglers);
                                return Ok(guard);
                            }
                            Err(error) => (refused, error),
                        }
                    }
                }
            }
        };
        tracing::debug!(error = %error, "attempt failed, cleaning up");
        // A node that answered "no" to SET NX certainly did not store our
        // token, and nothing else will: skip it. Every other node — granted,
        // failed, timed out or never heard from — may hold it.
        cleanup.run(refused).await;
        Err(error)
    }

    /// Whether a round grants the lock: a quorum said yes and validity is
    /// left, measured from the attempt's start.
    fn granted<T: Answer>(
        &self,
        request: &Request,
        round: Round<T>,
        window: &Window,
        start: Instant,
    ) -> Result<Round<T>, Error> {
        if round.decision != Decision::Reached {
            return Err(round.failure(&request.resource));
        }
        match window.validity_at(Instant::now()) {
            Some(validity) => {
                tracing::debug!(granted = round.tally.yes(), ?validity, "quorum reached");
                Ok(round)
            }
            None => Err(Error::ValidityExpired {
                resource: request.resource.to_string(),
                elapsed: start.elapsed(),
                ttl: request.ttl,
            }),
        }
    }
}

/// Sleeps `delay`, or less when the waiter's turn comes with a release;
/// returns whether it did. After a `collision` (the last wake-up went to
/// someone else: typically a waiter of another manager woken by the same
/// release), a random jitter follows the wake-up, so that the next one
/// does not collide again.
async fn pause(waiter: &Waiter, delay: Duration, collision: bool) -> bool {
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

/// A node's successful answer, which counts as a vote.
pub(crate) trait Answer: Copy {
    fn vote(&self) -> Vote;
}

/// Done (yes) or refused (no).
impl Answer for bool {
    fn vote(&self) -> Vote {
        if *self { Vote::Yes } else { Vote::No }
    }
}

/// Extended or restored (yes), or another value holds a key (no).
impl Answer for crate::node::ExtendReply {
    fn vote(&self) -> Vote {
        match self {
            Self::Extended | Self::Restored => Vote::Yes,
            Self::Refused => Vote::No,
        }
    }
}

/// A fenced grant with the node's counter value, or a refusal.
impl Answer for Option<u64> {
    fn vote(&self) -> Vote {
        self.map_or(Vote::No, |_| Vote::Yes)
    }
}

/// What one request to every node produced.
#[derive(Debug)]
pub(crate) struct Round<T = bool> {
    pub(crate) tally: Tally,
    pub(crate) decision: Decision,
    pub(crate) failures: Vec<NodeFailure>,
    /// Per node: its answer, if it answered (without error) before the
    /// decision.
    pub(crate) answers: Vec<Option<T>>,
}

impl<T: Answer> Round<T> {
    /// Per node: whether it answered "no".
    pub(crate) fn refused(&self) -> Vec<bool> {
        self.answers
            .iter()
            .map(|a| a.map(|a| a.vote()) == Some(Vote::No))
            .collect()
    }

    /// [`refused`](Self::refused), but `None` (no allocation) for a round
    /// that reached a quorum: should its lock still fail (no validity left,
    /// or the fence write-back failed), the cleanup then skips no node.
    fn refused_unless_reached(&self) -> Option<Vec<bool>> {
        (self.decision != Decision::Reached).then(|| self.refused())
    }

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

/// Sends one request to every node in parallel and tallies the answers.
/// Returns the requests still in flight (none with [`Until::AllAnswered`]).
///
/// `call` makes node `i`'s request, to be bounded by the [`Deadline`] it is
/// given: one timer at `deadline` bounds them all, in this fan-out and in
/// whoever follows its stragglers, rather than a timer per request.
pub(crate) async fn fan_out<'a, T, F, Fut>(
    nodes: &'a [Node],
    until: Until,
    op: &'static str,
    deadline: Instant,
    call: F,
) -> (Round<T>, Stragglers<Fut>)
where
    T: Answer,
    F: Fn(usize, &'a Node, Deadline) -> Fut,
    Fut: Future<Output = Result<T, NodeError>>,
{
    let mut round = Round {
        tally: Tally::new(nodes.len()),
        decision: Decision::Pending,
        failures: Vec::new(),
        answers: vec![None; nodes.len()],
    };
    // One node (single-node mode): nothing to run side by side or to leave
    // behind, so nothing to allocate.
    if let [only] = nodes {
        // Awaited alone, it keeps its own time.
        round.record(op, 0, only, call(0, only, deadline.into()).await);
        return (round, Stragglers::none());
    }
    let shared = Deadline::timed_by_caller(deadline);
    let mut calls = Stragglers::new(
        nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (i, call(i, node, shared))),
        Some(deadline),
    );
    while let Some((i, answer)) = calls.next().await {
        round.record(op, i, &nodes[i], answer);
        if until == Until::Decided && round.decision != Decision::Pending {
            break;
        }
    }
    (round, calls)
}

impl<T: Answer> Round<T> {
    /// Counts node `i`'s answer.
    fn record(&mut self, op: &'static str, i: usize, node: &Node, answer: Result<T, NodeError>) {
        let node = node.label();
        let vote = match answer {
            Ok(answer) => {
                if let Some(slot) = self.answers.get_mut(i) {
                    *slot = Some(answer);
                }
                answer.vote()
            }
            Err(error) => {
                tracing::debug!(op, node = %node, error = %error, "node failed");
                self.failures.push(NodeFailure {
                    node: node.clone(),
                    error,
                });
                Vote::Failed
            }
        };
        tracing::debug!(op, node = %node, ?vote);
        self.decision = self.tally.record(vote);
    }
}

/// Token-checked release on every node (except those `skip` marks),
/// waiting for each answer or the node timeout. A node whose acquire
/// request is still `in_flight` is sent the release once that request has
/// answered (or timed out): Redis answers one connection's requests in
/// order, so the release then runs after a late grant and removes it.
pub(crate) async fn release_everywhere(
    redlock: &Redlock,
    keys: &[Arc<str>],
    token: &Token,
    skip: Option<&[bool]>,
    in_flight: Option<&InFlight>,
) -> Round {
    let config = redlock.config();
    // With acquires in flight, a release may wait for one. That acquire's
    // own deadline was at most a node timeout after it started, before
    // now, so a second node timeout leaves every release a full one of its
    // own, under the fan-out's one timer.
    let rounds = if in_flight.is_some() { 2 } else { 1 };
    let deadline = Instant::now() + config.node_timeout * rounds;
    let id = config.wakeups.as_ref().map(|_| release_id());
    let announce = id.as_deref();
    fan_out(
        &config.nodes,
        Until::AllAnswered,
        "release",
        deadline,
        |i, node, deadline| async move {
            if skip.and_then(|s| s.get(i).copied()).unwrap_or(false) {
                return Ok(false);
            }
            if let Some(in_flight) = in_flight {
                in_flight.answered(i).await;
            }
            node.release(keys, token.as_str(), announce, deadline).await
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
    keys: Keys,
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
        let (keys, token) = (self.keys.clone(), self.token.clone());
        let background = redlock.inner.background.clone();
        let task = background.spawn(async move {
            release_everywhere(&redlock, &keys, &token, skip.as_deref(), None).await;
        });
        // Dropping the JoinHandle detaches the task; it still completes.
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(redlock) = self.redlock.take() else {
            return;
        };
        // Cancelled mid-attempt: we do not know which nodes refused, so
        // release everywhere. Without a runtime the keys expire by ttl.
        let (keys, token) = (self.keys.clone(), self.token.clone());
        let background = redlock.inner.background.clone();
        background.spawn(async move {
            release_everywhere(&redlock, &keys, &token, None, None).await;
        });
    }
}
