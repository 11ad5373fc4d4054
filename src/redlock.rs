//! The public face of the manager: [`Redlock`] — `lock`, `try_lock`,
//! their fenced and multi-resource forms, `with_lock`, the node check. A
//! thin layer: requests are validated by `request`, every acquiring call
//! goes through `acquire::call` (the manager's state and its one retry
//! loop), guards come from the holding layer.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::call::{Acquisition, Attempts, Manager};
use crate::acquire::wakeup::WakeOnRelease;
use crate::check::{CheckOptions, Report};
use crate::error::Error;
use crate::holding::guard::LockGuard;
use crate::holding::lease::Lease;
use crate::request::{Fencing, Limits, Request};

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
        self.inner.check(options).await
    }

    /// Acquires `resource` for `ttl`, retrying per the manager's [`Retry`](crate::Retry)
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

    /// The one acquire path of every entry point (see
    /// [`Manager::acquire`]).
    pub(crate) fn acquire<A: Acquisition>(
        &self,
        request: Result<A, Error>,
        attempts: Attempts,
        op: &'static str,
    ) -> impl Future<Output = Result<A::Guard, Error>> + Send + use<A> {
        self.inner.acquire(request, attempts, op)
    }
}
