//! One voting node — a standalone Redis master or a whole Redis Cluster —
//! its shared multiplexed connection (lazy, reconnecting), the per-call
//! deadline, and the lock commands and scripts.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use futures::future::Either;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, ServerErrorKind, Value};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::{ConfigError, NodeError};
use crate::quorum::{Answer, Vote};
use crate::request::{Permits, RwKeys, Shape, channel};
use crate::scripts::{self, Lua, ScriptMode};

/// How long one connection attempt may take before it is abandoned (and
/// retried on the next request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How many requests in a row must time out, with no answer between them,
/// before a node counts as unresponsive (see [`Node::unresponsive`]).
const UNRESPONSIVE: u32 = 2;

/// What every node of a manager shares: how scripts run, and whom to trust
/// over TLS.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeOptions {
    pub(crate) script_mode: ScriptMode,
    /// `WAIT` for replicas after each lock write.
    pub(crate) replica_sync: Option<ReplicaSync>,
    /// PEM CA certificates that `rediss://` nodes must chain to, instead of
    /// Mozilla's root CAs.
    #[cfg(feature = "tls")]
    pub(crate) tls_roots: Option<Vec<u8>>,
}

/// Replica sync: `WAIT replicas timeout` sent right behind each lock write
/// (acquire, extend, fenced acquire and write-back, multi-resource acquire;
/// not release) on the same connection, in one pipeline; the node's answer
/// counts only when at least `replicas` replicas acknowledged the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaSync {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl ReplicaSync {
    fn wait(&self) -> Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas)
            .arg(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX));
        cmd
    }

    /// The reply to a write, if `acknowledged` replicas are enough.
    fn check(&self, reply: Value, acknowledged: i64) -> Result<Value, NodeError> {
        if acknowledged >= i64::from(self.replicas) {
            Ok(reply)
        } else {
            Err(NodeError::ReplicasBehind {
                acknowledged: u32::try_from(acknowledged).unwrap_or(0),
                wanted: self.replicas,
            })
        }
    }
}

/// One Redis deployment that votes as one member of the quorum.
pub(crate) struct Node {
    /// `host:port[/db]`, or `cluster(host:port,…)`: safe to log, never holds
    /// credentials.
    label: Arc<str>,
    /// `host:port` of every server the configuration names for this node
    /// (the seeds, for a cluster), to catch one server voting twice.
    addresses: Vec<String>,
    script_mode: ScriptMode,
    replica_sync: Option<ReplicaSync>,
    /// Whether it is reached over TLS (`rediss://`).
    tls: bool,
    /// The passwords of its URLs, scrubbed from every error it reports
    /// (with the tokens of the call): a server may echo anything.
    passwords: Vec<String>,
    /// What the server says it is (`redis 6.2.16`), asked on the first
    /// error that names it.
    server: OnceCell<Arc<str>>,
    /// Requests in a row that timed out, with no answer since (see
    /// [`unresponsive`](Node::unresponsive)).
    timeouts: AtomicU32,
    /// Per script (bit [`Lua::index`]): known to be in the node's script
    /// cache, so that EVALSHA finds it.
    cached: AtomicU32,
    backend: Backend,
}

// A manager holds a handful of nodes: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Standalone {
        client: redis::Client,
        /// Created on first use, inside the caller's runtime, so that
        /// building a manager needs neither I/O nor a runtime.
        conn: OnceCell<ConnectionManager>,
    },
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

/// A handle on a node's shared connection.
enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

/// One lock to extend on a node: its keys, token and new ttl, for a
/// fenced lock its counter's key and fence, and what it is (a lock, a
/// permit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extension<'a> {
    pub(crate) keys: &'a [Arc<str>],
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) fence: Option<(&'a str, u64)>,
    pub(crate) shape: &'a Shape,
}

/// One plain (one-key, unfenced) lock's request to a node, alone or in a
/// batch with others (see `batch.lua` and `coalesce.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Single<'a> {
    pub(crate) op: SingleOp<'a>,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
}

/// What a [`Single`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SingleOp<'a> {
    /// `SET key token NX PX ttl`: 1 granted, 0 refused.
    Acquire { ttl_ms: u64 },
    /// Token-checked delete, announced with this release id on the key's
    /// channel when given: 1 deleted, 0 not ours.
    Release { announce: Option<&'a str> },
    /// Token-checked extension (or restore): 1 extended, 2 restored, 0
    /// refused.
    Extend { ttl_ms: u64 },
}

impl SingleOp<'_> {
    /// Its op in `batch.lua`.
    fn code(&self) -> &'static str {
        match self {
            Self::Acquire { .. } => "a",
            Self::Release { .. } => "r",
            Self::Extend { .. } => "e",
        }
    }
}

/// Which extension script serves a holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ScriptKind {
    Lock,
    Permit,
    Rw,
}

impl ScriptKind {
    fn of(shape: &Shape) -> Self {
        match shape {
            Shape::Lock => Self::Lock,
            Shape::Permit(_) => Self::Permit,
            Shape::Read(_) | Shape::Write(_) => Self::Rw,
        }
    }
}

/// A node's answer to a semaphore permit's acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PermitReply {
    /// The slot was free and is now ours.
    Granted,
    /// The slot is taken; these slots are free on this node.
    Taken(Vec<u32>),
    /// The semaphore is held on this node with another permit count (as
    /// its limit key reads).
    OtherCount(String),
}

/// What a node did with one lock's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtendReply {
    /// Every key held the token and got the new ttl.
    Extended,
    /// Some keys were absent and were set again with the token (the rest
    /// held it and got the new ttl): the node holds the lock again.
    Restored,
    /// Some key holds another value (another owner's token, or not a
    /// string); nothing was touched.
    Refused,
}

/// Extended or restored (yes), or another value holds a key (no).
impl Answer for ExtendReply {
    fn vote(&self) -> Vote {
        match self {
            Self::Extended | Self::Restored => Vote::Yes,
            Self::Refused => Vote::No,
        }
    }
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
        let info = client.get_connection_info();
        Ok(Self {
            label: label(info).into(),
            addresses: vec![info.addr().to_string()],
            script_mode: options.script_mode,
            replica_sync: options.replica_sync,
            tls: is_tls(info),
            passwords: passwords([info]),
            server: OnceCell::new(),
            timeouts: AtomicU32::new(0),
            cached: AtomicU32::new(0),
            backend: Backend::Standalone {
                client,
                conn: OnceCell::new(),
            },
        })
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
        let builder = ClusterClient::builder(infos)
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(response_timeout)
            // Every call is bounded by its own deadline instead.
            .overall_response_timeout(None);
        // The cluster client connects to members it learns of from the
        // seeds: they must chain to the same CA. (Only for TLS seeds:
        // certificates would turn TLS on for plain ones.)
        #[cfg(feature = "tls")]
        let builder = match &options.tls_roots {
            Some(roots) if tls => builder.certs(tls_certificates(roots)),
            _ => builder,
        };
        let client = builder.build().map_err(|e| ConfigError::InvalidCluster {
            node: node_label.clone(),
            // Says which setting the seeds disagree on, never its value.
            reason: e.to_string(),
        })?;
        let config = ClusterConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(response_timeout);
        Ok(Self {
            label: node_label.into(),
            addresses,
            script_mode: options.script_mode,
            replica_sync: options.replica_sync,
            tls,
            passwords,
            server: OnceCell::new(),
            timeouts: AtomicU32::new(0),
            cached: AtomicU32::new(0),
            backend: Backend::Cluster(ClusterBackend {
                client,
                config,
                conn: OnceLock::new(),
                verified: OnceCell::new(),
                seeds: clients,
            }),
        })
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
            Backend::Standalone { client, .. } => std::slice::from_ref(client),
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

    /// Records how a request to this node ended: timed out, or answered
    /// (an error the node sent back is an answer too).
    pub(crate) fn note(&self, timed_out: bool) {
        if timed_out {
            self.timeouts.fetch_add(1, Ordering::Relaxed);
        } else if self.timeouts.load(Ordering::Relaxed) != 0 {
            self.timeouts.store(0, Ordering::Relaxed);
        }
    }

    /// Whether the node's last requests all timed out ([`UNRESPONSIVE`] in
    /// a row, none answered since): a frozen node, or one far behind. A
    /// fan-out does not wait for it once the other nodes have answered
    /// (see [`Tally::waits_only_on`](crate::quorum::Tally::waits_only_on));
    /// its requests still go out and are followed, and its first answer
    /// makes it responsive again. A loaded but healthy node answers between
    /// its timeouts, and keeps its place.
    pub(crate) fn unresponsive(&self) -> bool {
        self.timeouts.load(Ordering::Relaxed) >= UNRESPONSIVE
    }

    /// Whether this node is a Redis Cluster, where every key of one script
    /// call must hash to the same slot (see
    /// [`same_slot`](crate::request::same_slot)).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster(_))
    }

    /// The shared connection. Reconnection is the connection's job: a
    /// dropped connection is re-established on a later request, so a node
    /// that comes back (or comes up late) is used again.
    async fn connection(&self) -> Result<Connection, NodeError> {
        let ready = match &self.backend {
            Backend::Standalone { conn, .. } => conn.get().cloned().map(Connection::Standalone),
            Backend::Cluster(cluster) => match (cluster.conn.get(), cluster.verified.get()) {
                (Some(conn), Some(_)) => Some(Connection::Cluster(conn.clone())),
                _ => None,
            },
        };
        match ready {
            Some(conn) => Ok(conn),
            // Boxed: every request's future would otherwise have room for
            // setting the connection up, which happens once.
            None => Box::pin(self.connect()).await,
        }
    }

    /// Sets the shared connection up, or waits for whoever is doing so.
    async fn connect(&self) -> Result<Connection, NodeError> {
        if self.tls {
            install_crypto_provider();
        }
        match &self.backend {
            Backend::Standalone { client, conn } => {
                let conn = conn
                    .get_or_try_init(|| async {
                        let config = ConnectionManagerConfig::new()
                            // Fail a dead node fast and try again on the next
                            // request instead of parking requests behind a long
                            // backoff: the per-call deadline bounds waiting anyway.
                            .set_number_of_retries(0)
                            .set_connection_timeout(Some(CONNECT_TIMEOUT))
                            .set_response_timeout(None);
                        ConnectionManager::new_lazy_with_config(client.clone(), config)
                    })
                    .await?;
                Ok(Connection::Standalone(conn.clone()))
            }
            Backend::Cluster(cluster) => {
                // Returns at once: it connects in a background task, and
                // requests wait for it (bounded by their deadline). Nothing
                // here awaits, so a cancelled call cannot leave it half made.
                let conn = cluster.conn.get_or_init(|| {
                    cluster
                        .client
                        .get_pending_async_connection_with_config(cluster.config.clone())
                });
                cluster
                    .verified
                    .get_or_try_init(|| verify_cluster(conn.clone()))
                    .await?;
                Ok(Connection::Cluster(conn.clone()))
            }
        }
    }

    /// `SET key token NX PX ttl`: true if granted, false if the key exists
    /// (whatever its type: NX never touches an existing key).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let mut cmd = Cmd::with_capacity(6, key.len() + token.len() + 32);
        cmd.arg("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        // Never sent twice: a SET that landed before the connection dropped
        // would answer "no" the second time, and a node that said "no" is
        // skipped by the cleanup of a failed attempt.
        match self.write(&cmd, &[token], Resend::Never, deadline).await? {
            Value::Okay => Ok(true),
            Value::SimpleString(s) if s == "OK" => Ok(true),
            Value::Nil => Ok(false),
            other => Err(unexpected(&other)),
        }
    }

    /// Fenced acquire, phase 1: the node's new fence counter value if it
    /// granted the lock, `None` if the key exists.
    pub(crate) async fn acquire_fenced(
        &self,
        key: &str,
        fence_key: &str,
        token: &str,
        ttl_ms: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<Option<u64>, NodeError> {
        let deadline: Deadline = deadline.into();
        let ttl_ms = ttl_ms.to_string();
        let keys = [key, fence_key];
        match self
            .script(
                &scripts::ACQUIRE_FENCED,
                &keys,
                &[token, &ttl_ms],
                &[token],
                deadline,
            )
            .await?
        {
            Value::Int(0) => Ok(None),
            Value::Int(fence) => u64::try_from(fence)
                .map(Some)
                .map_err(|_| unexpected(&Value::Int(fence))),
            other => Err(unexpected(&other)),
        }
    }

    /// Fenced acquire, phase 2: `counter = max(counter, fence)`.
    pub(crate) async fn fence_writeback(
        &self,
        fence_key: &str,
        fence: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let fence = fence.to_string();
        self.flag_script(
            &scripts::FENCE_WRITEBACK,
            &[fence_key],
            &[&fence],
            &[],
            deadline,
        )
        .await
    }

    /// All of `keys` or none, atomically: true if every key was set.
    pub(crate) async fn acquire_many(
        &self,
        keys: &[Arc<str>],
        token: &str,
        ttl_ms: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let ttl_ms = ttl_ms.to_string();
        let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
        self.flag_script(
            &scripts::ACQUIRE_MANY,
            &keys,
            &[token, &ttl_ms],
            &[token],
            deadline,
        )
        .await
    }

    /// Token-checked delete of a lock's keys: true if this node held the
    /// token on every key and deleted them. With `announce` (an id of this
    /// release), each deleted key's release is announced on its channel
    /// ([`channel`](crate::request::channel)).
    pub(crate) async fn release(
        &self,
        keys: &[Arc<str>],
        shape: &Shape,
        token: &str,
        announce: Option<&str>,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        match shape {
            Shape::Lock => {}
            Shape::Permit(permits) => {
                return self
                    .release_permit(keys, permits, token, announce, deadline)
                    .await;
            }
            Shape::Read(rw) | Shape::Write(rw) => {
                let read = matches!(shape, Shape::Read(_));
                return self.release_rw(rw, read, token, announce, deadline).await;
            }
        }
        // One key (most locks): no allocation for the list.
        let (one, many): ([&str; 1], Vec<&str>);
        let keys: &[&str] = match keys {
            [key] => {
                one = [&**key];
                &one
            }
            keys => {
                many = keys.iter().map(|k| &**k).collect();
                &many
            }
        };
        self.release_lock(keys, token, announce, deadline).await
    }

    /// Token-checked delete of a lock's keys (`release.lua`).
    async fn release_lock(
        &self,
        keys: &[&str],
        token: &str,
        announce: Option<&str>,
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        let reply = match announce {
            Some(release) => {
                let channels: Vec<String> = keys.iter().map(|k| channel(k)).collect();
                let mut args = Vec::with_capacity(2 + channels.len());
                args.extend([token, release]);
                args.extend(channels.iter().map(String::as_str));
                self.script(&scripts::RELEASE, keys, &args, &[token], deadline)
                    .await?
            }
            None => {
                self.script(&scripts::RELEASE, keys, &[token], &[token], deadline)
                    .await?
            }
        };
        match reply {
            Value::Int(n) => Ok(usize::try_from(n).is_ok_and(|n| n == keys.len())),
            other => Err(unexpected(&other)),
        }
    }

    /// Extends one lock on this node (see [`extend_many`](Self::extend_many)).
    pub(crate) async fn extend(
        &self,
        lock: Extension<'_>,
        deadline: impl Into<Deadline>,
    ) -> Result<ExtendReply, NodeError> {
        let answers = self
            .extend_many(std::slice::from_ref(&lock), deadline)
            .await?;
        answers
            .first()
            .copied()
            .ok_or_else(|| unexpected(&Value::Array(Vec::new())))
    }

    /// Extends many locks, each with its own token and ttl: per lock, where
    /// every key holds its token they get the new ttl, where keys are
    /// absent they are set again (and a fenced lock's counter raised to its
    /// fence), and where any key holds another value nothing is touched.
    /// One answer per lock, in order. One script call on a standalone node;
    /// on a cluster, one call per hash slot among the locks (a script may
    /// only touch one slot; a lock's own keys share one), all in parallel.
    pub(crate) async fn extend_many(
        &self,
        locks: &[Extension<'_>],
        deadline: impl Into<Deadline>,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let deadline: Deadline = deadline.into();
        // One call per kind of holding (its own script), and on a cluster
        // per hash slot as well.
        let kind = |lock: &Extension<'_>| ScriptKind::of(lock.shape);
        let mixed = locks.iter().any(|lock| kind(lock) != ScriptKind::Lock);
        let groups: Vec<(ScriptKind, Vec<usize>)> = if self.is_cluster() || mixed {
            let mut groups: HashMap<(ScriptKind, Option<Slot>), Vec<usize>> = HashMap::new();
            for (i, lock) in locks.iter().enumerate() {
                let key = lock.keys.first().map_or("", |k| &**k);
                let slot = self.is_cluster().then(|| Slot::for_key(key));
                groups.entry((kind(lock), slot)).or_default().push(i);
            }
            groups
                .into_iter()
                .map(|((kind, _), group)| (kind, group))
                .collect()
        } else {
            vec![(ScriptKind::Lock, (0..locks.len()).collect())]
        };
        let calls = groups.iter().map(|(kind, group)| async move {
            match kind {
                ScriptKind::Lock => {}
                ScriptKind::Permit => return self.extend_permits(locks, group, deadline).await,
                ScriptKind::Rw => return self.extend_rw(locks, group, deadline).await,
            }
            let mut keys: Vec<&str> = Vec::new();
            let mut numbers: Vec<[String; 3]> = Vec::with_capacity(group.len());
            for &i in group {
                let lock = &locks[i];
                keys.extend(lock.keys.iter().map(|k| &**k));
                keys.extend(lock.fence.map(|(key, _)| key));
                numbers.push([
                    lock.ttl_ms.to_string(),
                    lock.keys.len().to_string(),
                    lock.fence.map_or(0, |(_, fence)| fence).to_string(),
                ]);
            }
            let args: Vec<&str> = group
                .iter()
                .zip(&numbers)
                .flat_map(|(&i, [ttl, n, fence])| {
                    [locks[i].token, ttl.as_str(), n.as_str(), fence.as_str()]
                })
                .collect();
            self.extend_script(&scripts::EXTEND, &keys, &args, locks, group, deadline)
                .await
        });
        let mut answers = vec![ExtendReply::Refused; locks.len()];
        for ((_, group), answer) in groups.iter().zip(futures::future::join_all(calls).await) {
            for (&i, extended) in group.iter().zip(answer?) {
                answers[i] = extended;
            }
        }
        Ok(answers)
    }

    /// One plain lock's request on its own, as it was sent before batching
    /// (so that a deployment with only those scripts loaded keeps working
    /// while nothing is concurrent): `SET NX PX` for an acquire (never sent
    /// twice: a SET that landed before the connection dropped would answer
    /// "no" the second time, and a node that said "no" is skipped by the
    /// cleanup of a failed attempt), `release.lua` and `extend.lua` for the
    /// others. Its status as `batch.lua` answers it.
    pub(crate) async fn single(
        &self,
        request: Single<'_>,
        deadline: Deadline,
    ) -> Result<u8, NodeError> {
        let Single { key, token, .. } = request;
        match request.op {
            SingleOp::Acquire { ttl_ms } => {
                let granted = self.acquire(key, token, ttl_ms, deadline).await?;
                Ok(u8::from(granted))
            }
            SingleOp::Release { announce } => {
                let released = self.release_lock(&[key], token, announce, deadline).await?;
                Ok(u8::from(released))
            }
            SingleOp::Extend { ttl_ms } => {
                let ttl = ttl_ms.to_string();
                let args = [token, ttl.as_str(), "1", "0"];
                match self
                    .script(&scripts::EXTEND, &[key], &args, &[token], deadline)
                    .await?
                {
                    Value::Array(items) => match items.as_slice() {
                        [Value::Int(status @ 0..=2)] => Ok(*status as u8),
                        _ => Err(unexpected(&Value::Array(items))),
                    },
                    other => Err(unexpected(&other)),
                }
            }
        }
    }

    /// Many plain locks' requests in one script call (`batch.lua`), one
    /// answer per request, in order; on a cluster one call per hash slot
    /// among them, all in parallel. An error of the whole call is the
    /// `Err`; a request whose own command failed gets its error in its
    /// place. Every request of a batch is idempotent for its own token, so
    /// a call whose connection dropped goes out once more.
    pub(crate) async fn batch(
        &self,
        requests: &[Single<'_>],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        let groups: Vec<Vec<usize>> = if self.is_cluster() {
            let mut slots: Vec<(Slot, Vec<usize>)> = Vec::new();
            for (i, request) in requests.iter().enumerate() {
                let slot = Slot::for_key(request.key);
                match slots.iter_mut().find(|(s, _)| *s == slot) {
                    Some((_, group)) => group.push(i),
                    None => slots.push((slot, vec![i])),
                }
            }
            slots.into_iter().map(|(_, group)| group).collect()
        } else {
            vec![(0..requests.len()).collect()]
        };
        let calls = groups
            .iter()
            .map(|group| self.batch_call(requests, group, deadline));
        let mut answers: Vec<Option<Result<u8, NodeError>>> =
            (0..requests.len()).map(|_| None).collect();
        for (group, answer) in groups.iter().zip(futures::future::join_all(calls).await) {
            for (&i, status) in group.iter().zip(answer?) {
                answers[i] = Some(status);
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(unexpected(&Value::Nil))))
            .collect())
    }

    /// One `batch.lua` call for `group` of `requests` (on a cluster, all
    /// in one hash slot).
    async fn batch_call(
        &self,
        requests: &[Single<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        // Written straight into the command: keys, then four args each.
        let fill = |cmd: &mut Cmd| {
            cmd.arg(group.len());
            for &i in group {
                cmd.arg(requests[i].key);
            }
            for &i in group {
                let request = &requests[i];
                cmd.arg(request.op.code()).arg(request.token);
                match request.op {
                    SingleOp::Acquire { ttl_ms } | SingleOp::Extend { ttl_ms } => {
                        cmd.arg(ttl_ms).arg("");
                    }
                    SingleOp::Release { announce: None } => {
                        cmd.arg("").arg("");
                    }
                    SingleOp::Release { announce: Some(id) } => {
                        cmd.arg(id).arg(channel(request.key));
                    }
                }
            }
        };
        let tokens: Vec<&str> = group.iter().map(|&i| requests[i].token).collect();
        // A key, a token, a ttl or release id, and a channel per entry.
        let bytes: usize = group
            .iter()
            .map(|&i| 2 * requests[i].key.len() + requests[i].token.len() + 32)
            .sum();
        let size = (1 + 5 * group.len(), bytes + 4);
        match self
            .run_script(&scripts::BATCH, fill, size, &tokens, deadline)
            .await?
        {
            Value::Array(items) if items.len() == group.len() => Ok(items
                .into_iter()
                .zip(group)
                .map(|(item, &i)| match item {
                    Value::Int(status @ 0..=2) => Ok(status as u8),
                    Value::ServerError(error) => {
                        Err(self.redact(NodeError::Redis(error.into()), &[requests[i].token]))
                    }
                    other => Err(unexpected(&other)),
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs the extension script `lua` for `group` of `locks` (its `keys`
    /// and `args` already laid out): one status per entry, in `group`'s
    /// order (0 refused, 1 extended, 2 restored).
    async fn extend_script(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&str],
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let tokens: Vec<&str> = group.iter().map(|&i| locks[i].token).collect();
        match self.script(lua, keys, args, &tokens, deadline).await? {
            Value::Array(items) if items.len() == group.len() => items
                .iter()
                .map(|item| match item {
                    Value::Int(0) => Ok(ExtendReply::Refused),
                    Value::Int(1) => Ok(ExtendReply::Extended),
                    Value::Int(2) => Ok(ExtendReply::Restored),
                    other => Err(unexpected(other)),
                })
                .collect(),
            other => Err(unexpected(&other)),
        }
    }

    /// Extends the semaphore permits `group` of `locks` in one call (see
    /// `semaphore_extend.lua`): one answer per permit, in `group`'s order.
    async fn extend_permits(
        &self,
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let mut keys: Vec<&str> = Vec::with_capacity(2 * group.len());
        let mut ttls: Vec<String> = Vec::with_capacity(group.len());
        for &i in group {
            let lock = &locks[i];
            let Shape::Permit(permits) = lock.shape else {
                return Err(NodeError::UnexpectedReply(
                    "a lock among permits".to_owned(),
                ));
            };
            keys.extend(lock.keys.first().map(|k| &**k));
            keys.push(&permits.limit_key);
            ttls.push(lock.ttl_ms.to_string());
        }
        let mut args: Vec<&str> = Vec::with_capacity(3 * group.len());
        for (&i, ttl) in group.iter().zip(&ttls) {
            let lock = &locks[i];
            let count = match lock.shape {
                Shape::Permit(permits) => &*permits.count,
                _ => "",
            };
            args.extend([lock.token, ttl.as_str(), count]);
        }
        self.extend_script(
            &scripts::SEMAPHORE_EXTEND,
            &keys,
            &args,
            locks,
            group,
            deadline,
        )
        .await
    }

    /// A semaphore's acquire of permit `slot` (see
    /// `semaphore_acquire.lua`).
    pub(crate) async fn acquire_permit(
        &self,
        permits: &Permits,
        slot: u32,
        token: &str,
        ttl_ms: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<PermitReply, NodeError> {
        let deadline: Deadline = deadline.into();
        let mut keys: Vec<&str> = Vec::with_capacity(1 + permits.slots.len());
        keys.push(&permits.limit_key);
        keys.extend(permits.slots.iter().map(|k| &**k));
        let (slot_arg, ttl) = (slot.to_string(), ttl_ms.to_string());
        let args = [slot_arg.as_str(), token, ttl.as_str(), &permits.count];
        // Sent again if the connection dropped (as every script): the
        // script finds a grant that had landed and grants it again, so a
        // node never says "no" to a token it holds.
        let reply = self
            .script(
                &scripts::SEMAPHORE_ACQUIRE,
                &keys,
                &args,
                &[token],
                deadline,
            )
            .await?;
        let Value::Array(items) = &reply else {
            return Err(unexpected(&reply));
        };
        match items.as_slice() {
            [Value::Int(1)] => Ok(PermitReply::Granted),
            [Value::Int(0), free @ ..] => free
                .iter()
                .map(|slot| match slot {
                    Value::Int(i) => u32::try_from(*i).map_err(|_| unexpected(slot)),
                    other => Err(unexpected(other)),
                })
                .collect::<Result<Vec<u32>, _>>()
                .map(PermitReply::Taken),
            [Value::Int(-1), count] => match count {
                Value::BulkString(bytes) => Ok(PermitReply::OtherCount(
                    String::from_utf8_lossy(bytes).into_owned(),
                )),
                Value::SimpleString(text) => Ok(PermitReply::OtherCount(text.clone())),
                other => Err(unexpected(other)),
            },
            _ => Err(unexpected(&reply)),
        }
    }

    /// Token-checked release of a semaphore permit (see
    /// `semaphore_release.lua`).
    async fn release_permit(
        &self,
        keys: &[Arc<str>],
        permits: &Permits,
        token: &str,
        announce: Option<&str>,
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        let Some(slot) = keys.first() else {
            return Ok(false);
        };
        let mut script_keys: Vec<&str> = Vec::with_capacity(2 + permits.slots.len());
        script_keys.extend([&**slot, &*permits.limit_key]);
        script_keys.extend(permits.slots.iter().map(|k| &**k));
        let channel = channel(slot);
        let mut args = vec![token, &*permits.count];
        if let Some(release) = announce {
            args.extend([release, channel.as_str()]);
        }
        match self
            .script(
                &scripts::SEMAPHORE_RELEASE,
                &script_keys,
                &args,
                &[token],
                deadline,
            )
            .await?
        {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected(&other)),
        }
    }

    /// Extends the reader-writer holds `group` of `locks` in one call (see
    /// `rw_extend.lua`): one answer per hold, in `group`'s order.
    async fn extend_rw(
        &self,
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let mut keys: Vec<&str> = Vec::with_capacity(2 * group.len());
        let mut modes: Vec<&str> = Vec::with_capacity(group.len());
        let ttls: Vec<String> = group.iter().map(|&i| locks[i].ttl_ms.to_string()).collect();
        for &i in group {
            let (mode, rw) = match locks[i].shape {
                Shape::Read(rw) => ("r", rw),
                Shape::Write(rw) => ("w", rw),
                _ => {
                    return Err(NodeError::UnexpectedReply(
                        "a lock among reader-writer holds".to_owned(),
                    ));
                }
            };
            keys.extend([&*rw.writer, &*rw.readers]);
            modes.push(mode);
        }
        let mut args: Vec<&str> = Vec::with_capacity(3 * group.len());
        for ((&i, mode), ttl) in group.iter().zip(&modes).zip(&ttls) {
            args.extend([*mode, locks[i].token, ttl.as_str()]);
        }
        self.extend_script(&scripts::RW_EXTEND, &keys, &args, locks, group, deadline)
            .await
    }

    /// A reader-writer lock's acquire (see `rw_acquire.lua`): whether this
    /// node admitted the reader (`read`) or the writer. A refused writer's
    /// mark (its call's id, across its attempts) lives `mark_ms`.
    pub(crate) async fn acquire_rw(
        &self,
        rw: &RwKeys,
        read: bool,
        token: &str,
        ttl_ms: u64,
        mark_ms: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let keys = [&*rw.writer, &*rw.readers, &*rw.waiting];
        let (ttl, mark) = (ttl_ms.to_string(), mark_ms.to_string());
        let mode = if read { "r" } else { "w" };
        let args = [mode, token, ttl.as_str(), &*rw.waiter, mark.as_str()];
        self.flag_script(&scripts::RW_ACQUIRE, &keys, &args, &[token], deadline)
            .await
    }

    /// Token-checked release of a reader-writer hold (see `rw_release.lua`).
    async fn release_rw(
        &self,
        rw: &RwKeys,
        read: bool,
        token: &str,
        announce: Option<&str>,
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        let keys = [&*rw.writer, &*rw.readers, &*rw.waiting];
        let mode = if read { "r" } else { "w" };
        let channel = channel(if read { &rw.readers } else { &rw.writer });
        let mut args = vec![mode, token, &*rw.waiter];
        if let Some(release) = announce {
            args.extend([release, channel.as_str()]);
        }
        self.flag_script(&scripts::RW_RELEASE, &keys, &args, &[token], deadline)
            .await
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
            Backend::Standalone { client, .. } => std::slice::from_ref(client),
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

    /// Sends `cmd` within `deadline`. Whatever the server says, its error
    /// reaches the caller with `secrets` (the call's tokens) and the node's
    /// passwords scrubbed out (see [`redact`]).
    async fn command(
        &self,
        cmd: &Cmd,
        secrets: &[&str],
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let reply = within(deadline, async {
            let mut sent = 0;
            loop {
                sent += 1;
                let reply = match self.connection().await? {
                    Connection::Standalone(mut conn) => cmd.query_async(&mut conn).await,
                    Connection::Cluster(mut conn) => cmd.query_async(&mut conn).await,
                };
                match reply {
                    Err(e) if sent == 1 && self.resends(resend, &e) => continue,
                    reply => return Ok(reply?),
                }
            }
        })
        .await;
        reply.map_err(|error| self.redact(error, secrets))
    }

    /// `error` with every secret of a call scrubbed out of its text: the
    /// call's `tokens` and the node's passwords.
    fn redact(&self, error: NodeError, tokens: &[&str]) -> NodeError {
        let secrets: Vec<&str> = tokens
            .iter()
            .copied()
            .chain(self.passwords.iter().map(String::as_str))
            .collect();
        redact(error, &secrets)
    }

    /// Sends a lock write: as [`command`](Self::command), and with replica
    /// sync, `WAIT` right behind it in one pipeline (so it waits for this
    /// write, even if the connection is new).
    async fn write(
        &self,
        cmd: &Cmd,
        secrets: &[&str],
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let Some(sync) = self.replica_sync else {
            return self.command(cmd, secrets, resend, deadline).await;
        };
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone()).add_command(sync.wait());
        within(deadline, async {
            let mut sent = 0;
            loop {
                sent += 1;
                let reply = match self.connection().await? {
                    Connection::Standalone(mut conn) => {
                        pipe.query_async::<(Value, i64)>(&mut conn).await
                    }
                    // Refused by the builder: WAIT would go to any member.
                    Connection::Cluster(_) => {
                        return Err(NodeError::UnexpectedReply(
                            "replica sync on a cluster node".to_owned(),
                        ));
                    }
                };
                match reply {
                    Err(e) if sent == 1 && self.resends(resend, &e) => continue,
                    reply => {
                        let (value, acknowledged) = reply?;
                        return sync.check(value, acknowledged);
                    }
                }
            }
        })
        .await
        .map_err(|error| self.redact(error, secrets))
    }

    /// Whether a call that failed with `error` goes out once more: an
    /// idempotent call whose standalone connection dropped (the node
    /// restarted, or a proxy cut it). The connection is being made anew
    /// (redis-rs reconnects on the error), so a node that came back keeps
    /// its vote instead of losing it to a stale connection — which, after a
    /// rolling restart, could cost a renewal two nodes at once. A cluster
    /// client retries by itself.
    fn resends(&self, resend: Resend, error: &redis::RedisError) -> bool {
        let resends = resend == Resend::IfDropped
            && error.is_connection_dropped()
            && matches!(self.backend, Backend::Standalone { .. });
        if resends {
            tracing::debug!(node = %self.label, error = %error, "connection dropped, sending again");
        }
        resends
    }

    /// Runs `lua` on `keys` with `args` within `deadline`. This is the one
    /// path every script takes. In [`ScriptMode::Eval`]: EVALSHA, and the
    /// script's text on NOSCRIPT (a restarted node has an empty cache). In
    /// [`ScriptMode::Functions`]: FCALL of the script's function, which a
    /// cluster routes by its first key like EVALSHA. On a cluster every key
    /// must share a hash slot; requests are checked for that before any I/O.
    ///
    /// `secrets` (the tokens among `args`) never appear in its errors.
    async fn script(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&str],
        secrets: &[&str],
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let fill = |cmd: &mut Cmd| {
            cmd.arg(keys.len()).arg(keys).arg(args);
        };
        let bytes = keys.iter().chain(args).map(|a| a.len()).sum::<usize>() + 4;
        self.run_script(
            lua,
            fill,
            (1 + keys.len() + args.len(), bytes),
            secrets,
            deadline,
        )
        .await
    }

    /// [`script`](Self::script) with the call's arguments (`numkeys`, the
    /// keys, the args) written by `fill` straight into the command, with no
    /// list of them in between: a batch has hundreds.
    /// `size` is how many arguments `fill` writes and about how many bytes,
    /// so that the command is allocated once rather than grown.
    async fn run_script(
        &self,
        lua: &Lua,
        fill: impl Fn(&mut Cmd),
        size: (usize, usize),
        secrets: &[&str],
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let call = |verb: &str, body: &str| {
            let mut cmd = Cmd::with_capacity(2 + size.0, verb.len() + body.len() + size.1);
            cmd.arg(verb).arg(body);
            fill(&mut cmd);
            cmd
        };
        // Every script but the releases writes a lock (or its counter):
        // with replica sync, `WAIT` goes right behind it.
        let writes = self.replica_sync.is_some()
            && ![
                scripts::RELEASE.function,
                scripts::SEMAPHORE_RELEASE.function,
                scripts::RW_RELEASE.function,
            ]
            .contains(&lua.function);
        // Every script is idempotent for its own token.
        let send = |cmd: Cmd| async move {
            if writes {
                self.write(&cmd, secrets, Resend::IfDropped, deadline).await
            } else {
                self.command(&cmd, secrets, Resend::IfDropped, deadline)
                    .await
            }
        };
        if self.script_mode == ScriptMode::Functions {
            return match send(call("FCALL", lua.function)).await {
                Err(NodeError::Redis(e)) if is_function_not_found(&e) => {
                    Err(NodeError::FunctionsNotLoaded {
                        function: lua.function.to_owned(),
                        server: self.server(deadline).await.to_string(),
                    })
                }
                Err(NodeError::Redis(e)) if is_unknown_command(&e, "FCALL") => {
                    Err(NodeError::FunctionsUnsupported {
                        server: self.server(deadline).await.to_string(),
                    })
                }
                reply => reply,
            };
        }
        let cached = 1u32 << lua.index;
        let standalone = !self.is_cluster();
        if standalone && self.cached.load(Ordering::Relaxed) & cached == 0 {
            // Not known to be cached (first use, or a NOSCRIPT since): EVAL
            // carries the text and caches it in one request. EVALSHA would
            // answer NOSCRIPT and the text would follow a round trip later,
            // behind whatever the caller sent meanwhile — a release overtaken
            // by the next grant's request, which that node would refuse.
            match send(call("EVAL", lua.source)).await {
                // A user allowed EVALSHA and SCRIPT LOAD but not EVAL (or a
                // server with EVAL renamed away): by hash, as below.
                Err(NodeError::Redis(e))
                    if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
                        || is_unknown_command(&e, "EVAL") => {}
                reply => {
                    if reply.is_ok() {
                        self.cached.fetch_or(cached, Ordering::Relaxed);
                    }
                    return reply;
                }
            }
        }
        let reply = match send(call("EVALSHA", lua.script.get_hash())).await {
            Err(NodeError::Redis(e))
                if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                self.cached.fetch_and(!cached, Ordering::Relaxed);
                // A restarted (or newly promoted) node has an empty script
                // cache. A cluster sends the text to the member that owns
                // the keys (EVAL, which also caches it): `SCRIPT LOAD` would
                // go to any member, and one paused or dead master must not
                // fail calls on keys owned by healthy ones. A standalone
                // node loads it, then runs it by hash.
                if !standalone {
                    return send(call("EVAL", lua.source)).await;
                }
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(lua.source);
                self.command(&load, secrets, Resend::IfDropped, deadline)
                    .await?;
                send(call("EVALSHA", lua.script.get_hash())).await
            }
            reply => reply,
        };
        if standalone && reply.is_ok() && self.cached.load(Ordering::Relaxed) & cached == 0 {
            self.cached.fetch_or(cached, Ordering::Relaxed);
        }
        reply
    }

    /// What the server says it is and its version (`redis 6.2.16`,
    /// `valkey 8.0.1`), from `INFO server`: asked once, within `deadline`,
    /// for an error that names it. A server that does not say (the user
    /// may not run INFO) is described as such, and asked again next time.
    async fn server(&self, deadline: Deadline) -> Arc<str> {
        if let Some(server) = self.server.get() {
            return server.clone();
        }
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        let info = match self.command(&cmd, &[], Resend::IfDropped, deadline).await {
            Ok(reply) => describe_server(&reply),
            Err(e) => {
                tracing::debug!(node = %self.label, error = %e, "INFO server failed");
                None
            }
        };
        match info {
            Some(server) => self
                .server
                .get_or_init(|| async { server.into() })
                .await
                .clone(),
            None => "server version unknown".into(),
        }
    }

    /// Runs a script that answers 1 (done) or 0 (not ours).
    async fn flag_script(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&str],
        secrets: &[&str],
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        match self.script(lua, keys, args, secrets, deadline).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected(&other)),
        }
    }
}

/// What one node says about an election: who holds its lock key, and what
/// that holder proclaimed there (see `elect_leader.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The lock key is absent: no leader on this node.
    Nobody,
    /// The lock key holds `token`, but this node has no value of it.
    Holder { token: String },
    /// The lock key holds `token`, which proclaimed `value` as revision
    /// `rev` of its term `term`.
    Proclaimed {
        token: String,
        term: u64,
        rev: u64,
        value: String,
    },
}

/// Election commands: the value beside a lock key, and the atomic read of
/// both. (Acquiring and keeping the lock are the fenced lock's.)
impl Node {
    /// Writes revision `rev` of the leader's `value` for `term` into
    /// `leader_key`, if `key` holds `token`: true if it did (or holds a
    /// newer revision), false if the node does not count `token` as leader.
    /// Either way where it holds the token, `leader_key` then expires
    /// `ttl_ms` later. With `announce` (a channel), a write is announced
    /// there.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn proclaim(
        &self,
        key: &str,
        leader_key: &str,
        token: &str,
        term: u64,
        rev: u64,
        value: &str,
        ttl_ms: u64,
        announce: Option<&str>,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let (term, rev, ttl) = (term.to_string(), rev.to_string(), ttl_ms.to_string());
        let mut args = vec![token, &term, &rev, value, &ttl];
        args.extend(announce);
        self.flag_script(
            &scripts::ELECT_PROCLAIM,
            &[key, leader_key],
            &args,
            &[token],
            deadline,
        )
        .await
    }

    /// Who holds `key` on this node, with its value from `leader_key`.
    pub(crate) async fn read_leader(
        &self,
        key: &str,
        leader_key: &str,
        deadline: impl Into<Deadline>,
    ) -> Result<Seen, NodeError> {
        let deadline: Deadline = deadline.into();
        let reply = self
            .script(
                &scripts::ELECT_LEADER,
                &[key, leader_key],
                &[],
                &[],
                deadline,
            )
            .await?;
        let text = |value: &Value| match value {
            Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let number = |value: &Value| text(value).and_then(|t| t.parse::<u64>().ok());
        match &reply {
            Value::Array(items) => match &items[..] {
                [] => Ok(Seen::Nobody),
                [token] => Ok(Seen::Holder {
                    token: text(token).ok_or_else(|| unexpected(&reply))?,
                }),
                [token, term, rev, value] => {
                    match (text(token), number(term), number(rev), text(value)) {
                        (Some(token), Some(term), Some(rev), Some(value)) => Ok(Seen::Proclaimed {
                            token,
                            term,
                            rev,
                            value,
                        }),
                        _ => Err(unexpected(&reply)),
                    }
                }
                _ => Err(unexpected(&reply)),
            },
            other => Err(unexpected(other)),
        }
    }
}

/// Plain reads, for looking at what a node keeps
/// ([`Redlock::inspect`](crate::Redlock::inspect)).
impl Node {
    /// Sends the read-only command `cmd` on the shared connection within
    /// `deadline` (sent once more if the connection dropped: a read can
    /// be). On a cluster it goes to the master of its key.
    pub(crate) async fn read(&self, cmd: &Cmd, deadline: Deadline) -> Result<Value, NodeError> {
        self.command(cmd, &[], Resend::IfDropped, deadline).await
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

/// Whether FCALL failed because the function does not exist on the node.
fn is_function_not_found(e: &redis::RedisError) -> bool {
    e.detail()
        .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// Whether `e` says that `command` is unknown to the server (never
/// existed, or renamed away). Servers word it differently (`unknown
/// command 'FCALL'`, `` unknown command `FCALL` ``); all say which.
fn is_unknown_command(e: &redis::RedisError, command: &str) -> bool {
    let Some(detail) = e.detail() else {
        return false;
    };
    let detail = detail.to_ascii_lowercase();
    let command = command.to_ascii_lowercase();
    detail.starts_with("unknown command")
        && detail
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .filter(|word| !word.is_empty())
            .nth(2)
            .is_some_and(|named| named == command)
}

/// `product major.minor.patch` from an `INFO server` reply: Valkey names
/// itself (`server_name:valkey`, `valkey_version:8.0.1`, next to a
/// `redis_version` it is compatible with); Redis gives `redis_version`.
/// A cluster answers per member: the first one's is taken.
fn describe_server(reply: &Value) -> Option<String> {
    let text = match reply {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => text.clone(),
        Value::Map(members) => return members.iter().find_map(|(_, v)| describe_server(v)),
        _ => return None,
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let product = field("server_name").unwrap_or("redis");
    let version = field(&format!("{product}_version")).or_else(|| field("redis_version"))?;
    Some(format!("{product} {version}"))
}

/// Parses one URL into a client, without connecting. A `rediss://` URL
/// trusts the configured CA if there is one, else Mozilla's root CAs;
/// turning verification off (`#insecure`) is refused.
fn open(url: &str, options: &NodeOptions) -> Result<redis::Client, ConfigError> {
    let client = redis::Client::open(url).map_err(|e| ConfigError::MalformedUrl {
        url: redact_url(url),
        reason: url_problem(url, &e),
    })?;
    let info = client.get_connection_info();
    if let ConnectionAddr::TcpTls { insecure: true, .. } = info.addr() {
        return Err(ConfigError::InsecureTls {
            url: redact_url(url),
        });
    }
    #[cfg(feature = "tls")]
    if let (Some(roots), true) = (&options.tls_roots, is_tls(info)) {
        return redis::Client::build_with_tls(info.clone(), tls_certificates(roots)).map_err(|e| {
            ConfigError::TlsRootCertificate {
                reason: e.to_string(),
            }
        });
    }
    #[cfg(not(feature = "tls"))]
    let _ = options;
    Ok(client)
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

#[cfg(feature = "tls")]
fn tls_certificates(roots: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(roots.to_vec()),
    }
}

/// Makes sure rustls has a process-wide crypto provider before the first
/// TLS connection: the redis crate asks rustls for the default one, and
/// rustls cannot pick one by itself (it panics) when the dependency graph
/// enables several, e.g. ring through quorumlock and aws-lc-rs through
/// another crate. A provider the application installed first is kept.
#[cfg(feature = "tls")]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only when another thread installed one meanwhile: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(not(feature = "tls"))]
fn install_crypto_provider() {}

/// `host:port`, with `/db` when not 0: never credentials.
fn label(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    if db == 0 {
        info.addr().to_string()
    } else {
        format!("{}/{db}", info.addr())
    }
}

/// Whether a call may go out again when its connection dropped before the
/// answer came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    Never,
    /// The call is idempotent: sending it twice does what sending it once
    /// does.
    IfDropped,
}

/// When a node call must have answered, and whose timer says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    at: Instant,
    /// The caller times the call out (a fan-out, with one timer for all of
    /// its calls): the call sets no timer of its own.
    timed_by_caller: bool,
}

impl Deadline {
    /// When the call must have answered.
    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// A deadline that the caller enforces, e.g. with one timer for all the
    /// calls of a fan-out ([`Stragglers`](crate::calls::Stragglers)). A
    /// call given it runs unbounded unless its caller stops polling it.
    pub(crate) fn timed_by_caller(at: Instant) -> Self {
        Self {
            at,
            timed_by_caller: true,
        }
    }
}

/// A deadline that the call enforces with a timer of its own.
impl From<Instant> for Deadline {
    fn from(at: Instant) -> Self {
        Self {
            at,
            timed_by_caller: false,
        }
    }
}

/// Bounds a node call by `deadline` (unless its caller does), reporting how
/// long it was given. Not an `async fn`, which would hold `call` twice (as
/// its argument, and inside the timeout): a node request is moved whole
/// into its fan-out, so its size is paid on every request.
pub(crate) fn within<T, F>(
    deadline: Deadline,
    call: F,
) -> impl Future<Output = Result<T, NodeError>>
where
    F: Future<Output = Result<T, NodeError>>,
{
    if deadline.timed_by_caller {
        return Either::Left(call);
    }
    let given = deadline.at.saturating_duration_since(Instant::now());
    Either::Right(
        tokio::time::timeout_at(deadline.at, call)
            .map(move |answer| answer.unwrap_or(Err(NodeError::Timeout(given)))),
    )
}

fn unexpected(value: &Value) -> NodeError {
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

/// The passwords of a node's URLs, to scrub from its errors.
fn passwords<'a>(infos: impl IntoIterator<Item = &'a ConnectionInfo>) -> Vec<String> {
    let mut passwords: Vec<String> = Vec::new();
    for info in infos {
        if let Some(password) = info.redis_settings().password()
            && !password.is_empty()
            && !passwords.iter().any(|p| p == password)
        {
            passwords.push(password.to_owned());
        }
    }
    passwords
}

/// What a secret is replaced with.
const REDACTED: &str = "***";

/// How many leading characters of a secret, cut off at the end of a text,
/// count as the secret: a server truncates the arguments it echoes
/// ("with args beginning with: …"), which can cut a token short. Fewer
/// (or a whole secret shorter than this) is not scrubbed as a prefix.
const SECRET_PREFIX: usize = 8;

/// `error` with every secret scrubbed out of the text it carries: no
/// server error text carries a token or password out of the library,
/// whatever the server echoes (an unknown or renamed command echoes its
/// arguments). A server error keeps its code and kind; any other error with
/// a secret in its text becomes one of the same kind with the scrubbed text.
pub(crate) fn redact(error: NodeError, secrets: &[&str]) -> NodeError {
    match error {
        NodeError::Redis(e) => NodeError::Redis(redact_redis(e, secrets)),
        NodeError::UnexpectedReply(text) => NodeError::UnexpectedReply(scrub(&text, secrets)),
        other => other,
    }
}

fn redact_redis(error: redis::RedisError, secrets: &[&str]) -> redis::RedisError {
    let text = error.to_string();
    if scrub(&text, secrets) == text {
        return error;
    }
    let from_server = matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension);
    if let Some(code) = error.code().filter(|_| from_server) {
        let detail = scrub(error.detail().unwrap_or_default(), secrets).replace(['\r', '\n'], " ");
        let line = format!("-{code} {detail}\r\n");
        if let Ok(value) = redis::parse_redis_value(line.as_bytes())
            && let Err(rebuilt) = value.extract_error()
        {
            return rebuilt;
        }
    }
    redis::RedisError::from((
        error.kind(),
        "error (secrets redacted)",
        scrub(&text, secrets),
    ))
}

/// `text` with each secret replaced by [`REDACTED`], and each run of a
/// secret's first [`SECRET_PREFIX`] or more characters too (an echo cut
/// short).
fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret, REDACTED);
        if secret.len() <= SECRET_PREFIX {
            continue;
        }
        let mut scrubbed = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = find_prefix(rest, secret) {
            scrubbed.push_str(&rest[..at]);
            scrubbed.push_str(REDACTED);
            let len = common_prefix(&rest[at..], secret);
            rest = &rest[at + len..];
        }
        scrubbed.push_str(rest);
        out = scrubbed;
    }
    out
}

/// Where in `text` at least [`SECRET_PREFIX`] leading bytes of `secret`
/// start.
fn find_prefix(text: &str, secret: &str) -> Option<usize> {
    let head = secret.get(..SECRET_PREFIX)?;
    let mut from = 0;
    while let Some(found) = text[from..].find(head) {
        let at = from + found;
        if common_prefix(&text[at..], secret) >= SECRET_PREFIX {
            return Some(at);
        }
        from = at + head.len().max(1);
    }
    None
}

/// How many leading bytes `a` and `b` share, on a char boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .map(|((i, x), _)| i + x.len_utf8())
        .last()
        .unwrap_or(0)
}

/// The schemes the redis crate takes for a node URL.
const SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];

/// Names what is wrong with a node URL the redis crate refused, whose own
/// message ("Redis URL did not parse") names no cause. Never echoes user
/// information: at most the scheme and the port are quoted, and the port
/// only when the URL's user information is where [`redact_url`] masks it.
fn url_problem(url: &str, parser: &redis::RedisError) -> String {
    const SHAPE: &str = "write redis://[user:password@]host:port[/db], or rediss:// for TLS";
    let trimmed = url.trim();
    if trimmed.is_empty() {
        return format!("the url is empty; {SHAPE}");
    }
    // The parser ignores spaces around the URL.
    let url = trimmed;
    let scheme_ok = |scheme: &str| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    let Some((scheme, rest)) = url.split_once("://").filter(|(s, _)| scheme_ok(s)) else {
        return format!("no scheme; {SHAPE}");
    };
    let lower = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&lower.as_str()) {
        return format!("unsupported scheme `{scheme}://`; {SHAPE}");
    }
    if lower.ends_with("unix") {
        return parser_says(parser);
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    // An '@' past the authority means a password with a '/' in it: quote nothing.
    let may_quote = !rest[authority_end..].contains('@');
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return format!("an IPv6 host is missing its closing `]`; {SHAPE}"),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return format!("no host; {SHAPE}");
    }
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        if !port.chars().all(|c| c.is_ascii_digit()) {
            return "the port is not a number (1-65535)".to_owned();
        }
        if port.parse::<u16>().is_err() {
            return if may_quote && port.len() <= 12 {
                format!("port {port} is out of range (1-65535)")
            } else {
                "the port is out of range (1-65535)".to_owned()
            };
        }
    }
    parser_says(parser)
}

/// The redis crate's own reason, without its error kind's name.
fn parser_says(parser: &redis::RedisError) -> String {
    let text = parser.to_string();
    // "DESCRIPTION - KIND[: DETAIL]"
    let description = text.split_once(" - ").map_or(text.as_str(), |(d, _)| d);
    let reason = match parser.detail() {
        Some(detail) => format!("{description}: {detail}"),
        None => description.to_owned(),
    };
    if reason == "Redis URL did not parse" {
        "not a valid url; write redis://[user:password@]host:port[/db], or rediss:// for TLS"
            .to_owned()
    } else {
        // The parser's message names what is wrong, not the URL itself.
        reason
    }
}

/// Masks the user information of a URL so that errors can show the rest.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end + 3], &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_keeps_its_own_time_unless_its_caller_does() {
        let never = |deadline| within(deadline, std::future::pending::<Result<(), NodeError>>());
        let at = Instant::now() + Duration::from_secs(1);
        let answer = never(Deadline::from(at)).await;
        assert!(
            matches!(answer, Err(NodeError::Timeout(given)) if given == Duration::from_secs(1))
        );
        assert_eq!(Instant::now(), at);

        // Timed by its caller, it sets no timer: long past its deadline, it
        // still waits (the caller's timer would have ended it).
        let call = never(Deadline::timed_by_caller(Instant::now()));
        tokio::pin!(call);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(futures::poll!(call.as_mut()).is_pending());
    }

    #[test]
    fn redacts_user_information() {
        assert_eq!(
            redact_url("redis://alice:s3cret@10.0.0.1:6379/2"),
            "redis://***@10.0.0.1:6379/2"
        );
        assert_eq!(redact_url("redis://:pw@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("not a url"), "not a url");
        // An '@' after the authority is not user information.
        assert_eq!(redact_url("redis://h:1/0?x=a@b"), "redis://h:1/0?x=a@b");
    }

    #[test]
    fn labels_never_include_credentials() {
        let node = Node::parse(
            "redis://alice:s3cret@127.0.0.1:6379/3",
            &NodeOptions::default(),
        )
        .expect("valid url");
        assert_eq!(&**node.label(), "127.0.0.1:6379/3");
        assert_eq!(format!("{node:?}"), "127.0.0.1:6379/3");
    }

    #[test]
    fn cluster_labels_list_the_seeds_without_credentials() {
        let node = Node::cluster(
            &[
                "redis://:s3cret@127.0.0.1:7000",
                "redis://:s3cret@127.0.0.1:7001",
                "redis://:s3cret@127.0.0.1:7000",
            ],
            Duration::from_millis(250),
            &NodeOptions::default(),
        )
        .expect("valid seeds");
        assert!(node.is_cluster());
        assert_eq!(&**node.label(), "cluster(127.0.0.1:7000,127.0.0.1:7001)");
        assert_eq!(node.addresses(), ["127.0.0.1:7000", "127.0.0.1:7001"]);
        assert!(!format!("{node:?}").contains("s3cret"));
        assert!(
            !Node::parse("redis://h:1", &NodeOptions::default())
                .expect("valid")
                .is_cluster()
        );
    }

    #[test]
    fn cluster_seeds_are_validated_without_leaking_credentials() {
        let timeout = Duration::from_millis(250);
        let no_seeds: [&str; 0] = [];
        assert_eq!(
            Node::cluster(&no_seeds, timeout, &NodeOptions::default()).err(),
            Some(ConfigError::EmptyCluster)
        );
        match Node::cluster(
            &["redis://h:1", "redis://u:hunter2@h:x"],
            timeout,
            &NodeOptions::default(),
        ) {
            Err(ConfigError::MalformedUrl { url, .. }) => assert!(!url.contains("hunter2")),
            other => panic!("expected MalformedUrl, got {other:?}"),
        }
        match Node::cluster(
            &["redis://:hunter2@h:1", "redis://:other@h:2"],
            timeout,
            &NodeOptions::default(),
        ) {
            Err(e @ ConfigError::InvalidCluster { .. }) => {
                let text = e.to_string();
                assert!(
                    !text.contains("hunter2") && !text.contains("other"),
                    "{text}"
                );
            }
            other => panic!("expected InvalidCluster, got {other:?}"),
        }
    }

    #[test]
    fn malformed_urls_are_config_errors_without_the_password() {
        for url in ["", "http://a:b@h:1", "redis://user:hunter2@:notaport"] {
            match Node::parse(url, &NodeOptions::default()) {
                Err(ConfigError::MalformedUrl { url: shown, .. }) => {
                    assert!(!shown.contains("hunter2"), "{shown}");
                }
                other => panic!("{url:?}: expected MalformedUrl, got {other:?}"),
            }
        }
    }

    fn url_reason(url: &str) -> String {
        match Node::parse(url, &NodeOptions::default()) {
            Err(ConfigError::MalformedUrl { reason, .. }) => reason,
            other => panic!("{url:?}: expected MalformedUrl, got {other:?}"),
        }
    }

    #[test]
    fn malformed_urls_name_the_cause() {
        for (url, cause) in [
            ("", "the url is empty"),
            (" redis://h:99999 ", "port 99999 is out of range"),
            ("127.0.0.1:6379", "no scheme"),
            ("localhost:6379", "no scheme"),
            ("alice:hunter2@h:6379", "no scheme"),
            ("http://h:6379", "unsupported scheme `http://`"),
            (
                "https://alice:hunter2@h:6379",
                "unsupported scheme `https://`",
            ),
            ("redis://h:99999", "port 99999 is out of range (1-65535)"),
            (
                "redis://alice:hunter2@h:70000/0",
                "port 70000 is out of range",
            ),
            ("redis://[::1]:65536", "port 65536 is out of range"),
            ("redis://user:hunter2@:notaport", "no host"),
            ("redis://h:port", "the port is not a number"),
            ("redis://:6379", "no host"),
            ("redis://[::1:6379", "closing `]`"),
        ] {
            let reason = url_reason(url);
            assert!(reason.contains(cause), "{url:?}: {reason}");
            assert!(!reason.contains("hunter2"), "{url:?}: {reason}");
            assert!(!reason.contains("InvalidClientConfig"), "{url:?}: {reason}");
        }
        // Every hint names the scheme to use.
        assert!(url_reason("127.0.0.1:6379").contains("redis://"));
        // A password with a '/' in it hides the user information from the
        // masking: then the port is not quoted either.
        let reason = url_reason("redis://u:99999/x@h:1");
        assert!(!reason.contains("99999"), "{reason}");
    }

    #[test]
    fn long_unexpected_replies_are_truncated_on_a_char_boundary() {
        let value = Value::BulkString("é".repeat(100).into_bytes());
        let NodeError::UnexpectedReply(text) = unexpected(&value) else {
            panic!("wrong variant");
        };
        assert!(text.chars().count() <= 82, "{text}");
    }

    fn server_error(line: &str) -> redis::RedisError {
        match redis::parse_redis_value(line.as_bytes()).map(Value::extract_error) {
            Ok(Err(e)) => e,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn scrubs_whole_secrets_and_echoes_cut_short() {
        let echo = format!(
            "unknown command `FCALL`, with args beginning with: `quorumlock_release`, `1`, `k`, `{TOKEN}`, "
        );
        assert_eq!(
            scrub(&echo, &[TOKEN]),
            "unknown command `FCALL`, with args beginning with: `quorumlock_release`, `1`, `k`, `***`, "
        );
        // The server cut the token off after 10 characters.
        let cut = format!("with args beginning with: `{}`", &TOKEN[..10]);
        assert_eq!(scrub(&cut, &[TOKEN]), "with args beginning with: `***`");
        // What `Token`'s Debug shows (4 characters) is not a secret.
        assert_eq!(scrub("`0123`", &[TOKEN]), "`0123`");
        // Several secrets, one of them short.
        assert_eq!(scrub("a pw b 0123456789ab", &["pw", TOKEN]), "a *** b ***");
        assert_eq!(scrub("nothing here", &[TOKEN, ""]), "nothing here");
    }

    #[test]
    fn redacted_server_errors_keep_their_code_and_kind() {
        for (line, kind) in [
            (
                format!(
                    "-ERR unknown command `SET`, with args beginning with: `k`, `{TOKEN}`, \r\n"
                ),
                ErrorKind::Server(ServerErrorKind::ResponseError),
            ),
            (
                format!("-NOPERM no permissions for {TOKEN}\r\n"),
                ErrorKind::Server(ServerErrorKind::NoPerm),
            ),
            (format!("-WEIRDCODE says {TOKEN}\r\n"), ErrorKind::Extension),
        ] {
            let original = server_error(&line);
            assert_eq!(original.kind(), kind);
            let NodeError::Redis(redacted) = redact(NodeError::Redis(original.clone()), &[TOKEN])
            else {
                panic!("wrong variant");
            };
            assert_eq!(redacted.kind(), kind, "{redacted}");
            assert_eq!(redacted.code(), original.code());
            for shown in [redacted.to_string(), format!("{redacted:?}")] {
                assert!(!shown.contains(&TOKEN[..SECRET_PREFIX]), "{shown}");
                assert!(shown.contains("***"), "{shown}");
            }
        }
    }

    #[test]
    fn other_errors_are_redacted_too_and_clean_ones_kept() {
        let io = redis::RedisError::from(std::io::Error::other(format!("peer said {TOKEN}")));
        let NodeError::Redis(redacted) = redact(NodeError::Redis(io), &[TOKEN]) else {
            panic!("wrong variant");
        };
        assert_eq!(redacted.kind(), ErrorKind::Io);
        assert!(!redacted.to_string().contains(TOKEN), "{redacted}");
        let clean = server_error("-ERR wrong number of arguments for 'set' command\r\n");
        let NodeError::Redis(kept) = redact(NodeError::Redis(clean.clone()), &[TOKEN]) else {
            panic!("wrong variant");
        };
        assert_eq!(kept.to_string(), clean.to_string());
        let NodeError::UnexpectedReply(text) =
            redact(NodeError::UnexpectedReply(format!("\"{TOKEN}\"")), &[TOKEN])
        else {
            panic!("wrong variant");
        };
        assert_eq!(text, "\"***\"");
    }

    #[test]
    fn unknown_fcall_is_told_apart_whatever_the_wording() {
        for line in [
            "-ERR unknown command `FCALL`, with args beginning with: `f`, `1`, \r\n",
            "-ERR unknown command 'FCALL', with args beginning with: 'f' '1' \r\n",
            "-ERR unknown command 'fcall', with args beginning with: \r\n",
        ] {
            assert!(is_unknown_command(&server_error(line), "FCALL"), "{line}");
        }
        for line in [
            "-ERR unknown command 'FCALL_RO', with args beginning with: \r\n",
            "-ERR unknown command 'SET', with args beginning with: 'FCALL' \r\n",
            "-ERR Function not found\r\n",
            "-NOPERM this user has no permissions to run the 'fcall' command\r\n",
        ] {
            assert!(!is_unknown_command(&server_error(line), "FCALL"), "{line}");
        }
    }

    #[test]
    fn servers_are_described_by_product_and_version() {
        let info = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        assert_eq!(
            describe_server(&info(
                "# Server\r\nredis_version:6.2.16\r\nredis_mode:standalone\r\n"
            )),
            Some("redis 6.2.16".to_owned())
        );
        assert_eq!(
            describe_server(&info(
                "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n"
            )),
            Some("valkey 8.0.1".to_owned())
        );
        assert_eq!(
            describe_server(&Value::Map(vec![(
                Value::SimpleString("127.0.0.1:7000".into()),
                info("redis_version:7.0.15\r\n"),
            )])),
            Some("redis 7.0.15".to_owned())
        );
        assert_eq!(describe_server(&info("nothing")), None);
    }
}
