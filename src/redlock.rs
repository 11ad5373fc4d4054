//! The entry points: the `Redlock` manager — `lock`, `try_lock`, their
//! fenced and multi-resource forms, `with_lock` — and its retry loop. A
//! thin layer: requests are validated by `request`, attempts run on the
//! round engine, guards and waiters come from the holding layer.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::acquire::retry::{Next, Retry, Schedule, jitter_unit};
use crate::acquire::wakeup::{WAKE_JITTER, Waiter, WakeOnRelease, Wakeups, unheard_backoff};
use crate::acquire::{FirstUse, Kept};
use crate::check::{self, CheckOptions, Report};
use crate::error::Error;
use crate::holding::guard::LockGuard;
use crate::holding::lease::Lease;
use crate::holding::renew::Renewer;
use crate::metrics;
use crate::node::pubsub::PubSub;
use crate::request::{Fencing, Keys, Limits, Request};
use crate::round::{Acquire, Core, attempt, shallow};

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
    inner: Arc<Manager>,
}

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
    pub(crate) kept: Kept,
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

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.inner;
        f.debug_struct("Redlock")
            .field("nodes", &m.core.nodes())
            .field("quorum", &self.quorum())
            .field("node_timeout", &m.core.node_timeout())
            .field("drift_factor", &m.core.drift_factor())
            .field("retry", &m.retry)
            .field("key_prefix", &m.key_prefix)
            .field("script_mode", &m.script_mode)
            .field("startup_check", &m.first_use.check)
            .field(
                "wake_on_release",
                &match m.wakeups {
                    Some(_) => WakeOnRelease::Subscribe,
                    None => WakeOnRelease::Never,
                },
            )
            .finish()
    }
}

impl Redlock {
    pub(crate) fn from_manager(manager: Manager) -> Self {
        Self {
            inner: Arc::new(manager),
        }
    }

    /// The manager's shared state, for the entry points built beside this
    /// one (elections).
    pub(crate) fn manager(&self) -> &Arc<Manager> {
        &self.inner
    }

    /// Waits until the manager's background work has finished: cleanup of
    /// cancelled or failed attempts, releases of dropped guards, requests
    /// still answering after a quorum decided (an acquire's, an
    /// extension's or a release's: every call returns at its decision and
    /// leaves the other nodes to the background), and a
    /// [startup check](crate::check::StartupCheck). Each of those requests ends
    /// within the node timeout. Renewal of auto-extended locks is not
    /// waited for; release those guards first.
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
        self.inner.core.background().idle().await;
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.core.quorum()
    }

    /// The nodes, as `host:port[/db]`, or `cluster(host:port,…)` with its
    /// seeds for a cluster node (never with credentials).
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &str> {
        self.inner.core.nodes().iter().map(|n| &**n.label())
    }

    /// Checks the nodes against what Redlock's safety rests on, with
    /// [`CheckOptions::default()`]; see [`check_with`](Self::check_with).
    pub async fn check(&self) -> Report {
        self.check_with(&CheckOptions::default()).await
    }

    /// Checks every node against the assumptions Redlock's safety rests on
    /// and reports, per node, findings with a [`Severity`](crate::check::Severity), what was seen
    /// and what to do:
    ///
    /// - **independence**: one server behind two URLs (same `run_id`), a
    ///   replica, nodes in one replication group (same `master_replid`);
    /// - **eviction**: `maxmemory` with a policy that evicts (unsafe), or
    ///   with `noeviction` (a note: full memory refuses lock writes);
    /// - **persistence**: `appendonly` and `appendfsync` (unsafe without
    ///   AOF for [fenced locks](CheckOptions::fenced_locks)), and an uptime
    ///   below [the longest ttl](CheckOptions::longest_ttl) without durable
    ///   persistence;
    /// - **clock**: the node's `TIME` against the client's monotonic clock
    ///   over [an interval](CheckOptions::clock_interval): a rate faster
    ///   than `1 + drift_factor` beyond the measuring error is unsafe;
    /// - **capability**: server and version, the Functions library in
    ///   [`ScriptMode::Functions`](crate::ScriptMode::Functions), and
    ///   whether the user may run every operation (an access probe: a lock
    ///   on `<prefix>quorumlock:doctor:<random>`, acquired, extended,
    ///   released, for at most 2 s);
    /// - **latency**: `PING` round trips, p50 and p99, against the node
    ///   timeout;
    /// - **cluster**: slot coverage, every master reachable (each master is
    ///   checked as above);
    /// - **replicas**: attached replicas, which a failover may promote
    ///   without the lock keys.
    ///
    /// The check never changes a node's data or configuration (apart from
    /// the probe key, which [`CheckOptions::skip_access_probe`] leaves out)
    /// and never reports a token or a password. It probes over connections
    /// of its own, all nodes at once; it takes about the clock interval
    /// plus a few round trips.
    ///
    /// Not everything can be seen from a client: whether failover is
    /// automatic (Sentinel), whether two servers share a machine or a
    /// power supply, and how the node's clock behaves later.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: dropped, it stops probing; an access
    /// probe's key expires by itself within 2 s.
    ///
    /// # Examples
    ///
    /// Refuse to start on nodes that cannot keep locks safe:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::Redlock;
    /// use quorumlock::check::CheckOptions;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let locks = Redlock::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let report = locks
    ///     .check_with(&CheckOptions::new().longest_ttl(Duration::from_secs(30)))
    ///     .await;
    /// println!("{report}");
    /// if report.is_unsafe() {
    ///     return Err("the lock nodes are not safe for Redlock".into());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_with(&self, options: &CheckOptions) -> Report {
        let manager = &self.inner;
        let (core, prefix) = (&manager.core, &manager.key_prefix);
        check::run::run(core, prefix, manager.script_mode, options).await
    }

    /// Runs the [`StartupCheck`] in the background on the first use, once;
    /// [`settle`](Self::settle) waits for it.
    pub(crate) fn startup_check(&self) {
        if !self.inner.first_use.begin() {
            return;
        }
        let this = self.clone();
        let span = tracing::info_span!("quorumlock_check");
        // Background work of the manager: `settle` waits for it.
        self.inner.core.background().spawn(
            async move {
                check::run::log(&this.check().await);
            }
            .instrument(span),
        );
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
    ///   [`Redlock::MAX_TTL`](crate::Redlock::MAX_TTL), or not above the drift allowance.
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
        self.acquire(
            self.request(&[resource], ttl, Fencing::Off),
            Attempts::PerPolicy,
            "lock",
        )
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
        self.acquire(
            self.request(&[resource], ttl, Fencing::On),
            Attempts::PerPolicy,
            "lock",
        )
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
    ///
    /// # Examples
    ///
    /// Send the day's report unless another instance already is:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn send_report(fence: u64) {}
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// if let Ok(guard) = locks.try_lock_fenced("reports:send", Duration::from_secs(30)).await {
    ///     send_report(guard.fence().unwrap_or_default()).await;
    ///     guard.release().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_fenced(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.acquire(
            self.request(&[resource], ttl, Fencing::On),
            Attempts::Once,
            "try_lock_fenced",
        )
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
        self.acquire(
            self.request(&[resource], ttl, Fencing::Off),
            Attempts::Once,
            "try_lock",
        )
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
    /// list ([`ArgumentError::NoResources`](crate::ArgumentError::NoResources)) or a resource named twice
    /// ([`ArgumentError::DuplicateResource`](crate::ArgumentError::DuplicateResource)).
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
        self.acquire(
            self.request(resources, ttl, Fencing::Off),
            Attempts::PerPolicy,
            "lock",
        )
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
    ///
    /// # Examples
    ///
    /// Merge two accounts now, or report that one of them is busy:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// match locks
    ///     .try_lock_many(&["account:17", "account:42"], Duration::from_secs(5))
    ///     .await
    /// {
    ///     Ok(guard) => { /* merge */ guard.release().await?; }
    ///     Err(e) if e.is_retryable() => println!("busy, try later: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_many(
        &self,
        resources: &[&str],
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.acquire(
            self.request(resources, ttl, Fencing::Off),
            Attempts::Once,
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
    /// completed is not an error (nodes that did not answer are owed the
    /// release); it is logged —
    /// except [`Error::Incompatible`] (nodes that cannot run the release
    /// at all, e.g. Functions mode without the library), which is returned
    /// instead of `work`'s output.
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
        self.hold_while(guard, work).await
    }

    /// The holding half of `with_lock` and its kin (`with_permit`,
    /// `with_read`, `with_write`, `with_leadership`): keeps `guard`
    /// auto-extended while the future `work` builds runs, and releases it
    /// when that completes, returning at the release's decision;
    /// [`Error::Lost`] instead if it is lost first (`work` races the loss).
    pub(crate) async fn hold_while<F, Fut, T>(&self, guard: LockGuard, work: F) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
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
                match guard.release().await {
                    Err(error @ Error::Incompatible { .. }) => Err(error),
                    Err(error) => {
                        tracing::debug!(error = %error, "release after with_lock failed");
                        Ok(output)
                    }
                    Ok(_) => Ok(output),
                }
            }
        }
    }

    /// Whether some node is a Redis Cluster, where one script's keys must
    /// share a hash slot.
    pub(crate) fn has_cluster_node(&self) -> bool {
        self.inner.core.nodes().iter().any(|node| node.is_cluster())
    }

    /// What the manager's configuration says about requests: the one place
    /// every entry point (elections too) takes them from.
    pub(crate) fn limits(&self) -> Limits<'_> {
        Limits {
            prefix: &self.inner.key_prefix,
            drift_factor: self.inner.core.drift_factor(),
            cluster: self.has_cluster_node(),
        }
    }

    /// Validates a call's arguments into a request. No I/O.
    pub(crate) fn request(
        &self,
        resources: &[&str],
        ttl: Duration,
        fencing: Fencing,
    ) -> Result<Request, Error> {
        Request::new(resources, ttl, fencing, self.limits())
    }

    /// One attempt of a lock-like request on the round engine; a grant
    /// becomes a guard. Entry points call it from
    /// [`Acquisition::attempt`], never on their own: [`acquire`](Self::acquire)
    /// is the path every call takes.
    pub(crate) async fn attempt<A: Acquire>(&self, acquire: &A) -> Result<LockGuard, Error> {
        let core = &self.inner.core;
        let grant = attempt(core, acquire).await?;
        Ok(LockGuard::new(
            core.clone(),
            self.inner.renewer.clone(),
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
        &self,
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
        self,
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
        &self,
        request: &A,
        attempts: Attempts,
        made: &mut u32,
    ) -> Result<A::Guard, Error> {
        let started = Instant::now();
        let mut schedule = attempts.schedule(&self.inner.retry, started);
        let wakeups = self.inner.wakeups.as_ref();
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
            if let Some(error) = self.inner.core.misconfigured() {
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

/// How many attempts a call of [`Redlock::acquire`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempts {
    /// Exactly one: the `try_` forms.
    Once,
    /// As the manager's [`Retry`] policy allows: `lock` and its kin.
    PerPolicy,
    /// A campaign's, with the policy's delays: without limit or deadline
    /// while another candidate leads, as the policy allows while too few
    /// nodes are reachable (see [`Retry::campaign`]).
    Campaign,
}

impl Attempts {
    /// When a call that started at `started` tries again, under `policy`.
    fn schedule(self, policy: &Retry, started: Instant) -> Schedule {
        match self {
            Attempts::Once => Retry::none().schedule(started),
            Attempts::PerPolicy => policy.schedule(started),
            Attempts::Campaign => policy.campaign(started),
        }
    }
}

/// What a call of [`Redlock::acquire`] acquires: a validated request of
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

    /// One attempt, on `locks`' nodes.
    fn attempt(&self, locks: &Redlock) -> impl Future<Output = Result<Self::Guard, Error>> + Send;
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
        let target = &self.target;
        tracing::debug_span!("quorumlock", op, resource = %target.resource, ttl_ms = target.ttl.ms())
    }

    fn attempt(&self, locks: &Redlock) -> impl Future<Output = Result<LockGuard, Error>> + Send {
        locks.attempt(self)
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

    /// A lock call boxes its whole future, and boxes each attempt's: both
    /// stay under 1000 bytes (see [`Redlock::retry`]), 912 and 864 now.
    /// glibc's small bins end there: a 1016-byte future (which a 1 KB
    /// limit let through) was served from its large bins, after merging
    /// its freed small blocks, as the 1.9 KB one was.
    #[tokio::test]
    async fn an_acquisitions_boxed_futures_stay_under_1_kb() {
        const AT_MOST: usize = 1000;
        let locks = Redlock::new(["redis://127.0.0.1:1"]).expect("a valid URL");
        let request = || locks.request(&["r"], Duration::from_secs(1), Fencing::Off);
        let call = locks.clone().acquiring(
            request().expect("a valid request"),
            Attempts::PerPolicy,
            "lock",
        );
        let size = std::mem::size_of_val(&call);
        assert!(size <= AT_MOST, "a lock call's future: {size} bytes");
        let request = request().expect("a valid request");
        let attempt = locks.attempt(&request);
        let size = std::mem::size_of_val(&attempt);
        assert!(size <= AT_MOST, "an attempt's future: {size} bytes");
    }
}
