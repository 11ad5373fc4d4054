//! `RedlockBuilder`: the configuration of a manager, its defaults, and its
//! validation. Building is pure: no I/O, no runtime needed.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::FirstUse;
use crate::acquire::call::Manager;
use crate::acquire::retry::Retry;
use crate::acquire::wakeup::{WakeOnRelease, Wakeups};
use crate::check::StartupCheck;
use crate::error::{ConfigError, Error};
use crate::holding::renew::Renewer;
use crate::node::pubsub::PubSub;
use crate::node::{HeldKeyTracking, Node, NodeOptions, ReplicaSync, redact_url};
use crate::redlock::Redlock;
use crate::round::Core;
use crate::scripts::{NativeCommands, ScriptMode};

/// Builds a [`Redlock`] manager.
///
/// Every setter returns the builder; [`build`](Self::build) validates the
/// whole configuration and returns a typed [`ConfigError`] for anything
/// nonsensical. Building does no I/O: it succeeds while every node is
/// down, and connections are made on first use.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{Redlock, Retry};
///
/// # fn main() -> Result<(), quorumlock::Error> {
/// let locks = Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .node_timeout(Duration::from_millis(100))
///     .drift_factor(0.01)
///     .retry(Retry::default().wait(Duration::from_secs(5)))
///     .key_prefix("myapp:lock:")
///     .build()?;
/// assert_eq!(locks.quorum(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    nodes: Vec<NodeSpec>,
    node_timeout: Duration,
    drift_factor: f64,
    retry: Retry,
    key_prefix: String,
    script_mode: ScriptMode,
    native_commands: NativeCommands,
    /// PEM CA certificates, concatenated; `None` when none was given.
    #[cfg(feature = "tls")]
    tls_roots: Option<Vec<u8>>,
    wake_on_release: WakeOnRelease,
    startup_check: StartupCheck,
    replica_sync: Option<ReplicaSync>,
    held_key_tracking: HeldKeyTracking,
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            node_timeout: Self::DEFAULT_NODE_TIMEOUT,
            drift_factor: Self::DEFAULT_DRIFT_FACTOR,
            retry: Retry::default(),
            key_prefix: String::new(),
            script_mode: ScriptMode::default(),
            native_commands: NativeCommands::default(),
            #[cfg(feature = "tls")]
            tls_roots: None,
            wake_on_release: WakeOnRelease::default(),
            startup_check: StartupCheck::default(),
            replica_sync: None,
            held_key_tracking: HeldKeyTracking::default(),
        }
    }
}

impl fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("RedlockBuilder");
        f.field("nodes", &self.nodes)
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("retry", &self.retry)
            .field("key_prefix", &self.key_prefix)
            .field("script_mode", &self.script_mode)
            .field("native_commands", &self.native_commands)
            .field("wake_on_release", &self.wake_on_release)
            .field("startup_check", &self.startup_check)
            .field("replica_sync", &self.replica_sync)
            .field("held_key_tracking", &self.held_key_tracking);
        #[cfg(feature = "tls")]
        f.field("tls_root_certificate", &self.tls_roots.is_some());
        f.finish()
    }
}

/// One voting node as configured, before validation.
#[derive(Clone)]
enum NodeSpec {
    Standalone(String),
    Cluster(Vec<String>),
}

impl fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeSpec::Standalone(url) => f.write_str(&redact_url(url)),
            NodeSpec::Cluster(seeds) => f
                .debug_tuple("cluster")
                .field(&seeds.iter().map(|s| redact_url(s)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// The manager's constructors live with its configuration.
impl Redlock {
    /// The largest accepted lock time-to-live (24 hours). Hold longer with
    /// [`LockGuard::extend`](crate::LockGuard::extend) or
    /// [`auto_extend`](crate::LockGuard::auto_extend).
    pub const MAX_TTL: Duration = crate::request::MAX_TTL;

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
}

impl RedlockBuilder {
    /// Default per-node timeout for one request.
    ///
    /// Large enough that a loaded but healthy node is not declared down (a
    /// fixed 50 ms was seen failing healthy nodes with 256 concurrent lockers on
    /// 2 cores), small against typical lock TTLs. A lock attempt never waits
    /// longer than its validity budget, whatever this is set to.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(250);

    /// Default clock drift factor: nodes' clocks may run up to 1 % fast
    /// against the client's.
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

    /// Adds nodes, one independent Redis master each, as URLs:
    /// `redis://[[user]:password@]host:port[/db]`. Password and ACL user in
    /// the URL are used to authenticate. Calls accumulate, and may be mixed
    /// with [`cluster`](Self::cluster).
    ///
    /// With the `tls` feature, `rediss://…` connects over TLS and verifies
    /// the server's certificate and host name against Mozilla's root CAs,
    /// or against [`tls_root_certificate`](Self::tls_root_certificate) if
    /// given. Verification cannot be turned off: a `#insecure` URL is
    /// refused by [`build`](Self::build).
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.nodes.extend(
            urls.into_iter()
                .map(|u| NodeSpec::Standalone(u.as_ref().to_owned())),
        );
        self
    }

    /// Adds **one** node that is a whole Redis Cluster, found through
    /// `seed_urls`: URLs (as for [`nodes`](Self::nodes)) of some of its
    /// members. The cluster casts one vote in the quorum, like a standalone
    /// master; each lock key is sent to the master owning the key's hash
    /// slot, and the cluster client follows `MOVED` / `ASK` redirections and
    /// failovers by itself. Calls accumulate, one node per call, and mix
    /// with standalone nodes.
    ///
    /// While a master of the cluster is down (and not failed over), locks
    /// on keys in its slots fail on this node: it counts as a failed node
    /// for them. Other keys keep working if the cluster runs with
    /// `cluster-require-full-coverage no`; with Redis' default the whole
    /// cluster refuses every key once the master is marked failed.
    ///
    /// Seeds must be members of this one cluster and share their password,
    /// user name and TLS mode; a seed listed twice counts once. They are
    /// only where the client starts: members it learns of later need no
    /// listing. If the seeds turn out to be standalone servers, the node
    /// fails every call with [`NodeError::NotACluster`](crate::NodeError::NotACluster)
    /// instead of voting.
    ///
    /// Hash tags: a key's slot is computed from the part between the first
    /// `{` and the next `}` when that part is not empty, so
    /// `{lock_goods}:300` and `{lock_goods}:301` share a slot. Plain lock,
    /// extend and release touch one key and need no tag.
    ///
    /// Defaults to no cluster node.
    ///
    /// # Examples
    ///
    /// Five votes: two clusters and three standalone masters (quorum 3).
    ///
    /// ```
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// let locks = quorumlock::Redlock::builder()
    ///     .cluster(["redis://10.0.1.1:7000", "redis://10.0.1.2:7000", "redis://10.0.1.3:7000"])
    ///     .cluster(["redis://10.0.2.1:7000", "redis://10.0.2.2:7000"])
    ///     .nodes(["redis://10.0.3.1:6379", "redis://10.0.3.2:6379", "redis://10.0.3.3:6379"])
    ///     .build()?;
    /// assert_eq!(locks.nodes().len(), 5);
    /// assert_eq!(locks.quorum(), 3);
    /// assert_eq!(
    ///     locks.nodes().next(),
    ///     Some("cluster(10.0.1.1:7000,10.0.1.2:7000,10.0.1.3:7000)"),
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn cluster<I, S>(mut self, seed_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.nodes.push(NodeSpec::Cluster(
            seed_urls
                .into_iter()
                .map(|u| u.as_ref().to_owned())
                .collect(),
        ));
        self
    }

    /// Adds one node; see [`nodes`](Self::nodes).
    pub fn node(self, url: impl AsRef<str>) -> Self {
        self.nodes([url])
    }

    /// How long one request to one node may take before the node counts as
    /// failed for that request. A lock attempt additionally never waits
    /// past its validity budget (`ttl - drift`). Must be greater than zero.
    /// Defaults to [`Self::DEFAULT_NODE_TIMEOUT`].
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The clock drift factor: the allowance subtracted from every validity
    /// is `ttl * drift_factor + 2ms`. Must be finite and in `[0, 1)`.
    /// Defaults to [`Self::DEFAULT_DRIFT_FACTOR`].
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The retry policy of [`Redlock::lock`]. Defaults to
    /// [`Retry::default()`].
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// A prefix put in front of every resource name to form the Redis key,
    /// e.g. `"myapp:lock:"`. Defaults to none: the key is the resource name
    /// verbatim, so other Redlock clients locking the same names on the
    /// same nodes exclude and are excluded by quorumlock.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// How release, extension, fenced and multi-resource locks run their
    /// Lua scripts: [`ScriptMode::Eval`] (`EVALSHA`, needs scripting
    /// permission) or [`ScriptMode::Functions`] (`FCALL` of
    /// [`FUNCTIONS_LIBRARY`](crate::FUNCTIONS_LIBRARY), which an
    /// administrator loads on every node beforehand). Defaults to
    /// [`ScriptMode::Eval`].
    pub fn script_mode(mut self, mode: ScriptMode) -> Self {
        self.script_mode = mode;
        self
    }

    /// Whether plain locks use a node's native compare-and-set commands
    /// (`SET … IFEQ`, `DELIFEQ`, `DELEX … IFEQ`) where its server has them,
    /// or scripts everywhere (see [`NativeCommands`]). Each node is asked
    /// what it offers on its own connection. Defaults to
    /// [`NativeCommands::WhereAvailable`].
    pub fn native_commands(mut self, native: NativeCommands) -> Self {
        self.native_commands = native;
        self
    }

    /// Trusts the CA certificate(s) in `pem` for every `rediss://` node
    /// (and every member a TLS cluster node discovers), **instead of**
    /// Mozilla's root CAs: use it for a private CA. Server certificates
    /// must chain to one of the given CAs and name the host of the URL
    /// (DNS name or IP address). Calls accumulate.
    ///
    /// Defaults to none: Mozilla's root CAs, as bundled by the
    /// `webpki-roots` crate (the system's trust store is not read).
    ///
    /// [`build`](Self::build) fails with [`ConfigError::TlsRootCertificate`]
    /// if `pem` holds no certificate or a malformed one, and with
    /// [`ConfigError::TlsWithoutTlsNode`] if no node URL is `rediss://`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let locks = quorumlock::Redlock::builder()
    ///     .nodes(["rediss://redis-1.internal:6380", "rediss://redis-2.internal:6380", "rediss://redis-3.internal:6380"])
    ///     .tls_root_certificate(ca)
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl AsRef<[u8]>) -> Self {
        let roots = self.tls_roots.get_or_insert_with(Vec::new);
        if !roots.is_empty() {
            roots.push(b'\n');
        }
        roots.extend_from_slice(pem.as_ref());
        self
    }

    /// The options every node shares, with the CA certificates checked.
    fn node_options(&self) -> Result<NodeOptions, ConfigError> {
        #[cfg(feature = "tls")]
        let tls_roots = if let Some(roots) = &self.tls_roots {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let certificates = CertificateDer::pem_slice_iter(roots)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ConfigError::TlsRootCertificate {
                    reason: e.to_string(),
                })?;
            if certificates.is_empty() {
                return Err(ConfigError::TlsRootCertificate {
                    reason: "no PEM CERTIFICATE block found".into(),
                });
            }
            Some(roots.clone())
        } else {
            None
        };
        if let Some(sync) = self.replica_sync {
            if sync.replicas == 0 {
                return Err(ConfigError::ReplicaSync(
                    "at least one replica must be asked for",
                ));
            }
            if sync.timeout.as_millis() == 0 {
                return Err(ConfigError::ReplicaSync(
                    "the timeout must be at least 1ms (WAIT takes 0 as forever)",
                ));
            }
            if self.nodes.iter().any(|n| matches!(n, NodeSpec::Cluster(_))) {
                return Err(ConfigError::ReplicaSync(
                    "not available on Redis Cluster nodes yet",
                ));
            }
        }
        Ok(NodeOptions {
            script_mode: self.script_mode,
            native_commands: self.native_commands,
            replica_sync: self.replica_sync,
            #[cfg(feature = "tls")]
            tls_roots,
        })
    }

    /// How [`Redlock::lock`] waits while a resource is held: by polling
    /// after the retry delay, or woken by the release (see
    /// [`WakeOnRelease`]). Defaults to [`WakeOnRelease::Never`].
    pub fn wake_on_release(mut self, wake: WakeOnRelease) -> Self {
        self.wake_on_release = wake;
        self
    }

    /// Replica sync: after each lock write on a node (acquire, extend,
    /// fenced and multi-resource acquire; not release), `WAIT replicas
    /// timeout` on the same connection, and the node's answer counts as a
    /// yes only if at least `replicas` of its replicas acknowledged the
    /// write in time; otherwise the node counts as failed for that request
    /// ([`NodeError::ReplicasBehind`](crate::NodeError::ReplicasBehind)).
    ///
    /// For nodes that are masters with replicas and automatic failover
    /// (Sentinel): without it, a failover can promote a replica that never
    /// received a lock key, and the node forgets the lock (the node check
    /// reports such nodes, [`Redlock::check`]). `WAIT` narrows that window
    /// to writes that reached `replicas` replicas' memory, not their disks,
    /// and a failover may still pick a replica that did not acknowledge;
    /// it does not make replicas into independent votes.
    ///
    /// The cost: one more round trip to the replicas per write, and while a
    /// `WAIT` blocks, the node's shared connection holds back the requests
    /// queued behind it. Keep `timeout` well below the node timeout.
    ///
    /// Not available for Redis Cluster nodes yet: [`build`](Self::build)
    /// refuses it with [`ConfigError::ReplicaSync`], as it does zero
    /// replicas or a timeout under 1 ms. Defaults to off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// let locks = quorumlock::Redlock::builder()
    ///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
    ///     .replica_sync(1, Duration::from_millis(50))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn replica_sync(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_sync = Some(ReplicaSync { replicas, timeout });
        self
    }

    /// Whether the manager checks its nodes once, in the background, on its
    /// first lock call, and logs what it finds through `tracing` (unsafe
    /// findings as warnings): [`StartupCheck::Log`] runs
    /// [`Redlock::check`] (a second connection per server, about a second
    /// of clock sampling, a short-lived probe lock under the key prefix).
    ///
    /// Defaults to [`StartupCheck::Skip`]: a library should not open
    /// connections, write a probe key or log warnings its user did not ask
    /// for, and a check that only logs is easy to miss. Run the check where
    /// its answer is acted on: `quorumlock doctor` in a deployment
    /// pipeline, or [`Redlock::check`] at start-up with a decision on
    /// [`Report::is_unsafe`](crate::check::Report::is_unsafe). Turn this on where
    /// the logs are watched.
    ///
    /// # Examples
    ///
    /// ```
    /// use quorumlock::Redlock;
    /// use quorumlock::check::StartupCheck;
    ///
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// let locks = Redlock::builder()
    ///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    ///     .startup_check(StartupCheck::Log)
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn startup_check(mut self, check: StartupCheck) -> Self {
        self.startup_check = check;
        self
    }

    /// Whether auto-extended locks (and [`Redlock::with_lock`], elections'
    /// leadership, fair locks, semaphore permits, a reader-writer lock's
    /// writer and readers) have their keys watched by the nodes themselves
    /// (`CLIENT TRACKING`), so that a holder learns within a round trip
    /// that its key was deleted, expired early, evicted or overwritten on a
    /// node — instead of at its next renewal, up to a third of its ttl
    /// later. The change makes it renew at once: the renewal puts a deleted
    /// key back, or finds another owner there and reports the lock
    /// [`lost`](crate::Lease::lost).
    ///
    /// [`HeldKeyTracking::WhereAvailable`] watches on every standalone
    /// node whose server offers it (Redis ≥ 6, every Valkey), over one more
    /// connection per node, opened when the first lock is auto-extended;
    /// locks that are taken and released without auto-extension never use
    /// it. A node that refuses it (an older server, an ACL without
    /// `+client|tracking` or `+mget`) and Redis Cluster nodes fall back to
    /// detection at renewal time, and say so once at `info` level through
    /// `tracing`; `quorumlock doctor` shows which nodes can be watched.
    /// A reader's hold is watched in the readers' set it shares with every
    /// other reader, whose every arrival and departure costs each watching
    /// manager one read. [`HeldKeyTracking::Off`] turns it off.
    ///
    /// Defaults to [`HeldKeyTracking::WhereAvailable`].
    ///
    /// # Examples
    ///
    /// ```
    /// use quorumlock::{HeldKeyTracking, Redlock};
    ///
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// // One connection per node fewer; losses are found at renewal time.
    /// let locks = Redlock::builder()
    ///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    ///     .held_key_tracking(HeldKeyTracking::Off)
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn held_key_tracking(mut self, tracking: HeldKeyTracking) -> Self {
        self.held_key_tracking = tracking;
        self
    }

    /// Validates the configuration and builds the manager. No I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] with a [`ConfigError`] for: no nodes, a
    /// malformed URL (shown with credentials masked), the same node twice,
    /// one address in two nodes (a standalone node that is also a cluster
    /// seed, or a seed of two clusters), a cluster without seeds or with
    /// seeds that disagree on credentials or TLS, a zero node timeout, a
    /// drift factor that is negative, NaN, infinite or not below 1, a
    /// retry policy allowing zero attempts, a `rediss://…#insecure` URL, and
    /// (feature `tls`) an unusable TLS root certificate or one given
    /// without any `rediss://` node.
    ///
    /// Two seed lists naming different members of the same cluster cannot
    /// be told apart without connecting: give each cluster once.
    pub fn build(self) -> Result<Redlock, Error> {
        if self.nodes.is_empty() {
            return Err(ConfigError::NoNodes.into());
        }
        if self.node_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout.into());
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return Err(ConfigError::DriftFactor(self.drift_factor).into());
        }
        self.retry.validate()?;
        let nodes = self.checked_nodes()?;
        let announce = self.wake_on_release == WakeOnRelease::Subscribe;
        let core = Arc::new(Core::new(
            nodes,
            self.node_timeout,
            self.drift_factor,
            announce,
        ));
        let pubsub = Arc::new(PubSub::new(Arc::<Core>::downgrade(&core), core.len()));
        Ok(Redlock::from_manager(Manager {
            core,
            retry: self.retry,
            key_prefix: self.key_prefix,
            script_mode: self.script_mode,
            renewer: Arc::new(Renewer::new(self.held_key_tracking)),
            wakeups: announce.then(|| Arc::new(Wakeups::new(pubsub.clone()))),
            singletons: Default::default(),
            pubsub,
            first_use: FirstUse {
                check: self.startup_check,
                started: Default::default(),
            },
        }))
    }
}

impl RedlockBuilder {
    /// The nodes, each checked, and checked against each other: no node
    /// twice, no address shared by a cluster and another node, and TLS
    /// roots only with a TLS node.
    fn checked_nodes(&self) -> Result<Vec<Node>, ConfigError> {
        let options = self.node_options()?;
        let mut labels = HashSet::new();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for spec in &self.nodes {
            let node = match spec {
                NodeSpec::Standalone(url) => Node::parse(url, &options)?,
                NodeSpec::Cluster(seeds) => Node::cluster(seeds, self.node_timeout, &options)?,
            };
            if !labels.insert(node.label().clone()) {
                return Err(ConfigError::DuplicateNode {
                    node: node.label().to_string(),
                });
            }
            nodes.push(node);
        }
        #[cfg(feature = "tls")]
        if options.tls_roots.is_some() && !nodes.iter().any(Node::is_tls) {
            return Err(ConfigError::TlsWithoutTlsNode);
        }
        shared_addresses(&nodes)?;
        Ok(nodes)
    }
}

/// No address may belong to two nodes: two databases of one server are
/// one server, and would vote twice (what the URLs cannot show, an alias
/// of a host, each node's `run_id` shows once connected: see
/// `node::identity`); a cluster member serves only its cluster.
fn shared_addresses(nodes: &[Node]) -> Result<(), ConfigError> {
    // Per address: the first node naming it, and whether it is a cluster.
    let mut owners: HashMap<&str, (Arc<str>, bool)> = HashMap::new();
    for node in nodes {
        let cluster = node.is_cluster();
        for address in node.addresses() {
            let (first, first_is_cluster) = owners
                .entry(address)
                .or_insert_with(|| (node.label().clone(), cluster));
            if *first == *node.label() {
                continue;
            }
            if cluster || *first_is_cluster {
                return Err(ConfigError::SharedAddress {
                    address: address.clone(),
                    first: first.to_string(),
                    second: node.label().to_string(),
                });
            }
            return Err(ConfigError::SameServer {
                first: first.to_string(),
                second: node.label().to_string(),
                why: "same address",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(result: Result<Redlock, Error>) -> ConfigError {
        match result {
            Err(Error::InvalidConfig(e)) => e,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn builds_without_io_or_runtime() {
        // Nothing listens on port 1; building must not care.
        let locks = Redlock::new(["redis://127.0.0.1:1", "redis://127.0.0.1:2"]).expect("valid");
        assert_eq!(locks.quorum(), 2);
    }

    #[test]
    fn debug_output_masks_credentials() {
        let builder = Redlock::builder().node("redis://user:hunter2@127.0.0.1:1");
        assert!(!format!("{builder:?}").contains("hunter2"));
        let locks = builder.build().expect("valid");
        assert!(!format!("{locks:?}").contains("hunter2"));
        let err = config_error(Redlock::new(["redis://user:hunter2@h:notaport"]));
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn a_cluster_is_one_voting_node() {
        let locks = Redlock::builder()
            .cluster(["redis://127.0.0.1:1", "redis://127.0.0.1:2"])
            .build()
            .expect("builds without I/O");
        assert_eq!(locks.quorum(), 1);
        let mixed = Redlock::builder()
            .node("redis://127.0.0.1:3")
            .cluster(["redis://127.0.0.1:1", "redis://127.0.0.1:2"])
            .cluster(["redis://127.0.0.1:4"])
            .nodes(["redis://127.0.0.1:5", "redis://127.0.0.1:6"])
            .build()
            .expect("valid");
        assert_eq!(mixed.quorum(), 3);
        assert_eq!(
            mixed.nodes().collect::<Vec<_>>(),
            [
                "127.0.0.1:3",
                "cluster(127.0.0.1:1,127.0.0.1:2)",
                "cluster(127.0.0.1:4)",
                "127.0.0.1:5",
                "127.0.0.1:6",
            ]
        );
    }

    #[test]
    fn bad_cluster_nodes_are_config_errors() {
        let no_seeds: [&str; 0] = [];
        assert_eq!(
            config_error(Redlock::builder().cluster(no_seeds).build()),
            ConfigError::EmptyCluster
        );
        assert!(matches!(
            config_error(Redlock::builder().cluster(["redis://h:notaport"]).build()),
            ConfigError::MalformedUrl { .. }
        ));
        assert_eq!(
            config_error(
                Redlock::builder()
                    .cluster(["redis://h:1", "redis://h:2"])
                    .cluster(["redis://h:1", "redis://h:2"])
                    .build()
            ),
            ConfigError::DuplicateNode {
                node: "cluster(h:1,h:2)".into()
            }
        );
    }

    #[test]
    fn one_address_cannot_vote_in_two_nodes() {
        let shared = |builder: RedlockBuilder| match config_error(builder.build()) {
            ConfigError::SharedAddress { address, .. } => address,
            other => panic!("expected SharedAddress, got {other:?}"),
        };
        // A standalone node that is also a cluster seed, either way round.
        assert_eq!(
            shared(
                Redlock::builder()
                    .node("redis://h:2")
                    .cluster(["redis://h:1", "redis://h:2"])
            ),
            "h:2"
        );
        assert_eq!(
            shared(
                Redlock::builder()
                    .cluster(["redis://h:1", "redis://h:2"])
                    .node("redis://h:2/3")
            ),
            "h:2"
        );
        // Two clusters sharing a seed.
        assert_eq!(
            shared(
                Redlock::builder()
                    .cluster(["redis://h:1", "redis://h:2"])
                    .cluster(["redis://h:2", "redis://h:3"])
            ),
            "h:2"
        );
    }

    #[test]
    fn two_databases_of_one_server_are_one_server() {
        assert_eq!(
            config_error(Redlock::new([
                "redis://h:1/0",
                "redis://h:1/1",
                "redis://g:1/0"
            ])),
            ConfigError::SameServer {
                first: "h:1".into(),
                second: "h:1/1".into(),
                why: "same address",
            }
        );
        // Another port of the same host is another server.
        assert!(Redlock::new(["redis://h:1", "redis://h:2", "redis://h:3/1"]).is_ok());
    }

    #[test]
    fn cluster_debug_and_errors_mask_credentials() {
        let builder = Redlock::builder().cluster(["redis://:hunter2@127.0.0.1:1"]);
        assert!(!format!("{builder:?}").contains("hunter2"), "{builder:?}");
        let locks = builder.build().expect("valid");
        assert!(!format!("{locks:?}").contains("hunter2"));
        let err = config_error(
            Redlock::builder()
                .cluster(["redis://:hunter2@h:1", "redis://:hunter3@h:2"])
                .build(),
        );
        assert!(matches!(err, ConfigError::InvalidCluster { .. }), "{err:?}");
        assert!(!err.to_string().contains("hunter"), "{err}");
    }
}
