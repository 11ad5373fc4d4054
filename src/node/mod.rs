//! One voting node — a standalone Redis master or a whole Redis Cluster —
//! and what it takes to talk to it, split by job:
//!
//! - here: the node itself and its shared connection;
//! - `health`: whether it answers (`note`, `unresponsive`), and while it
//!   does not, not asking it but probing it until it does;
//! - `identity`: which server answers it (`run_id`), so that one server
//!   reached by two nodes never votes twice;
//! - `owed`: the releases it did not answer, delivered before it is asked
//!   anything again;
//! - `ordered`: a standalone node's one multiplexed connection (lazy,
//!   reconnecting), with requests reaching the server in the order they
//!   were issued, from the first one;
//! - `options`: what every node of a manager shares (script mode, native
//!   commands, replica sync, TLS roots);
//! - `url`: node URLs, TLS, and labels without credentials;
//! - `redact`: keeping passwords and tokens out of errors;
//! - `deadline`: the per-call deadline;
//! - `run`: sending one request — commands and scripts (EVAL/EVALSHA/FCALL,
//!   with the NOSCRIPT and missing-library fallbacks), `WAIT` for replicas,
//!   resends after a dropped connection;
//! - `holding`: every primitive's release and extension, as the holding's
//!   [`Shape`] (a trait each primitive implements) describes them;
//! - `caps`: what the server offers natively (`SET … IFEQ`, `DELIFEQ`,
//!   `DELEX … IFEQ`), found from its command table once per connection;
//! - `native`: the token-checked release and extension with those
//!   commands, for holdings whose keys hold just the token;
//! - `batch`: the `batch.lua` encoding of many one-key holdings' requests
//!   in one call, for group commit and auto-extension alike;
//! - `group`: group commit — one-key holdings' requests that meet a call
//!   in flight go out together in one call once it answers, for any
//!   [`Shape`] that allows it;
//! - `tracking`: the keys of auto-extended holdings watched through the
//!   server's `CLIENT TRACKING`, on a connection of their own, so that a
//!   change by anyone else calls for a renewal at once.
//!
//! `caps`, `health`, `identity` and `owed` are folders of two files each:
//! the state `Node` keeps in a field (`state.rs`, which imports nothing
//! from here), and the job's `impl Node` (`mod.rs`), which imports `Node`;
//! so the imports between this file and theirs go one way.
//!
//! A primitive's own commands and reply decoding are in its folder, beside
//! its scripts: `src/lock/node.rs`, `src/election/node.rs`,
//! `src/semaphore/node.rs`, `src/rwlock/node.rs`.

mod batch;
mod buffers;
mod caps;
mod deadline;
mod group;
mod health;
mod holding;
mod identity;
mod native;
mod options;
mod ordered;
mod owed;
mod redact;
mod replies;
mod run;
mod tracking;
mod url;

pub(crate) mod pubsub;
#[cfg(test)]
pub(crate) mod testing;

#[cfg(any(test, feature = "testkit"))]
pub(crate) use batch::BATCH;
pub(crate) use caps::NativeDelete;
pub(crate) use deadline::{Deadline, within};
pub(crate) use group::{Lanes, OnNode, Op, Prepared, Spawn, Status, Step};
pub(crate) use health::{Heard, watch};
pub(crate) use holding::ExtendReply;
#[cfg(test)]
pub(crate) use holding::layout;
pub(crate) use identity::{Servers, watch as identify};
pub(crate) use native::{push_extend, push_release};
pub(crate) use options::{NodeOptions, ReplicaSync};
pub(crate) use owed::Debt;
#[cfg(feature = "testkit")]
pub(crate) use owed::keep_owed_releases;
pub(crate) use redact::redact;
pub(crate) use run::Resend;
pub use tracking::HeldKeyTracking;
pub(crate) use tracking::{OnChange, Tracking};
pub(crate) use url::install_crypto_provider;
pub(crate) use url::redact_url;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::PubSub;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::{ConfigError, NodeError};
use crate::scripts::{NativeCommands, ScriptMode};

use self::ordered::Ordered;
use self::redact::passwords;
#[cfg(feature = "tls")]
use self::url::tls_certificates;
use self::url::{is_tls, label, open};

/// How long one connection attempt may take before it is abandoned (and
/// retried on the next request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One Redis deployment that votes as one member of the quorum.
pub(crate) struct Node {
    /// `host:port[/db]`, or `cluster(host:port,…)`: safe to log, never holds
    /// credentials.
    label: Arc<str>,
    /// `host:port` of every server the configuration names for this node
    /// (the seeds, for a cluster), to catch one server voting twice.
    addresses: Vec<String>,
    script_mode: ScriptMode,
    native_commands: NativeCommands,
    /// The native commands its server offers, as found on the current
    /// connection (see [`caps`]).
    caps: caps::Known,
    replica_sync: Option<ReplicaSync>,
    /// Whether it is reached over TLS (`rediss://`).
    tls: bool,
    /// The passwords of its URLs, scrubbed from every error it reports
    /// (with the tokens of the call): a server may echo anything.
    passwords: Vec<String>,
    /// What the server says it is (`redis 6.2.16`), asked on the first
    /// error that names it.
    server: OnceCell<Arc<str>>,
    /// Whether it answers, and while it does not, since when (see
    /// [`health`]).
    health: health::Health,
    /// Which server answers it, and whether another node reaches the same
    /// one (see [`identity`]).
    identity: identity::Identity,
    /// The releases it did not answer, delivered before it is asked
    /// anything again (see [`owed`]).
    owed: owed::Owed,
    /// Requests sent again after their connection dropped (see
    /// [`resent`](Node::resent)).
    resends: AtomicU64,
    /// Its spare command buffers (see [`buffers`]).
    buffers: buffers::Buffers,
    backend: Backend,
}

/// The cluster client's first wait before it retries a request, in ms.
const CLUSTER_RETRY_WAIT_MS: u64 = 10;

/// The cluster client over `infos` (the seeds): each request bounded by
/// `response_timeout` at most (every call has its own deadline too), and
/// with TLS seeds, the members it learns of checked against the same CA.
fn cluster_client(
    infos: Vec<ConnectionInfo>,
    response_timeout: Duration,
    tls: bool,
    options: &NodeOptions,
) -> redis::RedisResult<ClusterClient> {
    // Retries (after a connection error, TRYAGAIN or CLUSTERDOWN: a
    // failover under way) start at 10 ms and double. redis' own default
    // waits at least 1.28 s before each, longer than a node timeout: a
    // request that needed one retry after a failover timed out, however
    // soon the replica was promoted. Every call's deadline bounds them.
    let most = u64::try_from(response_timeout.as_millis()).unwrap_or(u64::MAX);
    let builder = ClusterClient::builder(infos)
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(response_timeout)
        .overall_response_timeout(None)
        .min_retry_wait(CLUSTER_RETRY_WAIT_MS)
        .max_retry_wait(most.max(CLUSTER_RETRY_WAIT_MS + 1))
        .retry_wait_formula(CLUSTER_RETRY_WAIT_MS, 2);
    // Only for TLS seeds: certificates would turn TLS on for plain ones.
    #[cfg(feature = "tls")]
    let builder = match &options.tls_roots {
        Some(roots) if tls => builder.certs(tls_certificates(roots)),
        _ => builder,
    };
    #[cfg(not(feature = "tls"))]
    let _ = (tls, options);
    builder.build()
}

// A manager holds a handful of nodes: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    /// Its connection is made on first use, inside the caller's runtime,
    /// so that building a manager needs neither I/O nor a runtime; and
    /// requests reach the server in the order they were issued, from the
    /// first one on (see [`Ordered`]).
    Standalone(Ordered),
    Cluster(ClusterBackend),
}

struct ClusterBackend {
    client: ClusterClient,
    config: ClusterConfig,
    /// Created on first use, as above. The cluster connection connects in
    /// the background, follows MOVED / ASK, refreshes its slot map after a
    /// failover, and reconnects to members that come back.
    conn: OnceLock<ClusterConnection>,
    /// Set once a member confirmed it runs in cluster mode. Until then no
    /// vote counts: standalone servers given as "seeds" would each get a
    /// random share of the requests, and two of them would both grant the
    /// same lock.
    verified: OnceCell<()>,
    /// A standalone client per seed, for pub/sub (see [`Node::pubsub`]).
    seeds: Vec<redis::Client>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

/// Node `i` of `nodes`: every per-node request looks its node up this way.
pub(crate) fn nth(nodes: &[Node], i: usize) -> Result<&Node, NodeError> {
    nodes
        .get(i)
        .ok_or_else(|| NodeError::UnexpectedReply("no such node".to_owned()))
}

impl Node {
    /// Parses a standalone node URL (`redis[s]://[user:password@]host:port[/db]`).
    /// No I/O.
    pub(crate) fn parse(url: &str, options: &NodeOptions) -> Result<Self, ConfigError> {
        let client = open(url, options)?;
        let info = client.get_connection_info().clone();
        let info = &info;
        let tls = is_tls(info);
        let backend = Backend::Standalone(Ordered::new(client, tls, CONNECT_TIMEOUT));
        let addresses = vec![info.addr().to_string()];
        Ok(Self::new(
            label(info).into(),
            addresses,
            tls,
            passwords([info]),
            options,
            backend,
        ))
    }

    /// A node reached through `backend`, with the settings of `options`.
    fn new(
        label: Arc<str>,
        addresses: Vec<String>,
        tls: bool,
        passwords: Vec<String>,
        options: &NodeOptions,
        backend: Backend,
    ) -> Self {
        Self {
            label,
            addresses,
            script_mode: options.script_mode,
            native_commands: options.native_commands,
            caps: caps::Known::default(),
            replica_sync: options.replica_sync,
            tls,
            passwords,
            server: OnceCell::new(),
            health: health::Health::default(),
            identity: match backend {
                Backend::Cluster(_) => identity::Identity::unchecked(),
                Backend::Standalone(_) => identity::Identity::default(),
            },
            owed: owed::Owed::default(),
            resends: AtomicU64::new(0),
            buffers: buffers::Buffers::default(),
            backend,
        }
    }

    /// A node that is one Redis Cluster, found through `seeds` (URLs of some
    /// of its members; a seed listed twice counts once). Requests route to
    /// the master owning the key's slot. No I/O.
    ///
    /// `node_timeout` (at least [`CONNECT_TIMEOUT`]) bounds each request the
    /// cluster client sends on its own, such as slot map refreshes, so that
    /// a paused member cannot stall it; it never cuts a call shorter than
    /// the call's own deadline.
    pub(crate) fn cluster<S: AsRef<str>>(
        seeds: &[S],
        node_timeout: Duration,
        options: &NodeOptions,
    ) -> Result<Self, ConfigError> {
        let mut infos: Vec<ConnectionInfo> = Vec::with_capacity(seeds.len());
        let mut clients = Vec::with_capacity(seeds.len());
        for seed in seeds {
            let client = open(seed.as_ref(), options)?;
            let info = client.get_connection_info().clone();
            if !infos.iter().any(|seen| label(seen) == label(&info)) {
                infos.push(info);
                clients.push(client);
            }
        }
        if infos.is_empty() {
            return Err(ConfigError::EmptyCluster);
        }
        let node_label = format!(
            "cluster({})",
            infos.iter().map(label).collect::<Vec<_>>().join(",")
        );
        let addresses = infos.iter().map(|i| i.addr().to_string()).collect();
        let tls = infos.first().is_some_and(is_tls);
        let passwords = passwords(&infos);
        let response_timeout = node_timeout.max(CONNECT_TIMEOUT);
        let client = cluster_client(infos, response_timeout, tls, options).map_err(|e| {
            ConfigError::InvalidCluster {
                node: node_label.clone(),
                // Says which setting the seeds disagree on, never its value.
                reason: e.to_string(),
            }
        })?;
        let config = ClusterConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(response_timeout);
        let backend = Backend::Cluster(ClusterBackend {
            client,
            config,
            conn: OnceLock::new(),
            verified: OnceCell::new(),
            seeds: clients,
        });
        Ok(Self::new(
            node_label.into(),
            addresses,
            tls,
            passwords,
            options,
            backend,
        ))
    }

    pub(crate) fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// `host:port` of every server named for this node: its own address, or
    /// a cluster's seeds.
    pub(crate) fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// Standalone clients of the servers this node names: its own, or a
    /// cluster's seeds (for the node check, which probes servers one by one).
    pub(crate) fn servers(&self) -> &[redis::Client] {
        match &self.backend {
            Backend::Standalone(ordered) => std::slice::from_ref(ordered.client()),
            Backend::Cluster(cluster) => &cluster.seeds,
        }
    }

    /// A standalone client for `host:port`, a member of this cluster node
    /// that the seeds led to, with the seeds' credentials and TLS settings
    /// (its CA included). `None` for a standalone node.
    pub(crate) fn member(&self, host: &str, port: u16) -> Option<redis::Client> {
        let Backend::Cluster(cluster) = &self.backend else {
            return None;
        };
        let info = cluster.seeds.first()?.get_connection_info().clone();
        let addr = match info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        redis::Client::open(info.set_addr(addr)).ok()
    }

    /// Whether it is reached over TLS (`rediss://`).
    #[cfg(feature = "tls")]
    pub(crate) fn is_tls(&self) -> bool {
        self.tls
    }

    /// How many requests went out to this node a second time because their
    /// connection dropped before the answer came (see
    /// [`Resend`]). A reply to such a request may describe
    /// what its first sending left behind: a release whose first sending
    /// deleted the token finds it gone. Read before and after a call, it
    /// tells whether a request may have been sent twice meanwhile.
    pub(crate) fn resent(&self) -> u64 {
        self.resends.load(Ordering::Acquire)
    }

    /// Whether this node is a Redis Cluster, where every key of one script
    /// call must hash to the same slot (see
    /// [`same_slot`](crate::request::same_slot)).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster(_))
    }

    /// A cluster node's shared connection. Reconnection is the
    /// connection's job: a dropped connection is re-established on a later
    /// request, so a member that comes back (or comes up late) is used
    /// again. (A standalone node's is its [`Ordered`].)
    async fn cluster_connection(
        &self,
        cluster: &ClusterBackend,
    ) -> Result<ClusterConnection, NodeError> {
        match (cluster.conn.get(), cluster.verified.get()) {
            (Some(conn), Some(_)) => Ok(conn.clone()),
            // Boxed: every request's future would otherwise have room for
            // setting the connection up, which happens once.
            _ => Box::pin(self.connect_cluster(cluster)).await,
        }
    }

    /// Sets the cluster connection up, or waits for whoever is doing so.
    async fn connect_cluster(
        &self,
        cluster: &ClusterBackend,
    ) -> Result<ClusterConnection, NodeError> {
        if self.tls {
            install_crypto_provider();
        }
        // Returns at once: it connects in a background task, and requests
        // wait for it (bounded by their deadline). Nothing here awaits, so a
        // cancelled call cannot leave it half made.
        let conn = cluster.conn.get_or_init(|| {
            cluster
                .client
                .get_pending_async_connection_with_config(cluster.config.clone())
        });
        cluster
            .verified
            .get_or_try_init(|| verify_cluster(conn.clone()))
            .await?;
        Ok(conn.clone())
    }

    /// A pub/sub connection of its own (not the shared one), made within
    /// `timeout`.
    ///
    /// For a cluster, a connection to the first seed that answers: Redis
    /// Cluster forwards every `PUBLISH` to all of its members, so any one
    /// of them hears every release.
    pub(crate) async fn pubsub(&self, timeout: Duration) -> Result<PubSub, NodeError> {
        if self.tls {
            install_crypto_provider();
        }
        let servers = match &self.backend {
            Backend::Standalone(ordered) => std::slice::from_ref(ordered.client()),
            Backend::Cluster(cluster) => &cluster.seeds[..],
        };
        let deadline = Instant::now() + timeout;
        let mut last = NodeError::Timeout(timeout);
        for server in servers {
            match tokio::time::timeout_at(deadline, server.get_async_pubsub()).await {
                Ok(Ok(connection)) => return Ok(connection),
                Ok(Err(e)) => last = self.redact(e.into(), &[]),
                Err(_) => return Err(NodeError::Timeout(timeout)),
            }
        }
        Err(last)
    }
}

/// Asks a member for `CLUSTER INFO`: a standalone server refuses it. (A
/// cluster client over standalone servers knows no slot map and sends each
/// request to any of them.)
async fn verify_cluster(mut conn: ClusterConnection) -> Result<(), NodeError> {
    match redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async::<Value>(&mut conn)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("cluster support disabled") => Err(NodeError::NotACluster),
        Err(e) => Err(e.into()),
    }
}

/// An error for a reply the node should not have given: the reply, cut
/// short.
pub(crate) fn unexpected(value: &Value) -> NodeError {
    let mut text = format!("{value:?}");
    if text.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    NodeError::UnexpectedReply(text)
}

/// A server's error reply, as the redis crate parses it.
#[cfg(test)]
fn server_error(line: &str) -> redis::RedisError {
    match redis::parse_redis_value(line.as_bytes()).map(Value::extract_error) {
        Ok(Err(e)) => e,
        other => panic!("not an error reply: {other:?}"),
    }
}
