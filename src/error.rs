//! The one error type of the crate, with per-node detail where nodes
//! failed, and why a held lock was lost.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Everything that can go wrong when locking, extending or releasing.
///
/// Each variant carries what a caller needs to act on it: which resource,
/// how many nodes answered, and what each failing node said. Tokens and
/// passwords never appear in the `Display` or `Debug` output.
///
/// [`Error::is_retryable`] tells whether another attempt could succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the resource: enough nodes answered, but too few
    /// of them granted the lock.
    #[error(
        "resource `{resource}` is held by another owner: {granted} of {quorum} required nodes granted it{}",
        FailureList(failures)
    )]
    #[non_exhaustive]
    Contended {
        /// The resource that was requested.
        resource: String,
        /// How many nodes granted the lock in the last attempt.
        granted: usize,
        /// How many grants were needed.
        quorum: usize,
        /// Nodes that failed (timed out, refused the connection, …) in the
        /// last attempt, if any.
        failures: Vec<NodeFailure>,
    },

    /// Too few nodes answered to possibly reach a quorum. Each unreachable
    /// node is listed with its error.
    #[error(
        "too few nodes reachable for `{resource}`: {} of {nodes} failed, a quorum of {quorum} tolerates {}{}",
        failures.len(),
        nodes - quorum,
        FailureList(failures)
    )]
    #[non_exhaustive]
    Unavailable {
        /// The resource that was requested.
        resource: String,
        /// How many nodes the manager has.
        nodes: usize,
        /// How many nodes must agree.
        quorum: usize,
        /// Every node that failed, with what it said.
        failures: Vec<NodeFailure>,
    },

    /// A fenced lock was granted by a quorum, but too few of the granting
    /// nodes confirmed raising their fence counter (the second phase of
    /// [`Redlock::lock_fenced`](crate::Redlock::lock_fenced)): the fence
    /// would not be guaranteed to grow, so the lock was not taken and its
    /// keys were removed. Only nodes that granted the lock count, so a
    /// failure on one of them can be enough. Each failing node is listed.
    #[error(
        "fence for `{resource}` not confirmed: {confirmed} of the {quorum} required granting nodes raised their counter{}",
        FailureList(failures)
    )]
    #[non_exhaustive]
    FenceUnconfirmed {
        /// The resource that was requested.
        resource: String,
        /// How many granting nodes confirmed the fence.
        confirmed: usize,
        /// How many confirmations were needed.
        quorum: usize,
        /// Every granting node that failed, with what it said.
        failures: Vec<NodeFailure>,
    },

    /// A quorum granted the lock, but acquiring took so long that no
    /// validity was left once clock drift was accounted for. The keys were
    /// released again.
    #[error(
        "quorum for `{resource}` reached but its validity was used up: {elapsed:?} of a {ttl:?} ttl spent acquiring"
    )]
    #[non_exhaustive]
    ValidityExpired {
        /// The resource that was requested.
        resource: String,
        /// Time spent from the start of the attempt to the quorum decision.
        elapsed: Duration,
        /// The requested time-to-live.
        ttl: Duration,
    },

    /// The retry policy's overall wait deadline passed before the lock could
    /// be taken. `last` is the error of the final attempt.
    #[error("gave up on `{resource}` after waiting {waited:?} ({attempts} attempts)")]
    #[non_exhaustive]
    WaitTimeout {
        /// The resource that was requested.
        resource: String,
        /// How long `lock` waited in total.
        waited: Duration,
        /// How many attempts were made.
        attempts: u32,
        /// Why the last attempt failed.
        #[source]
        last: Box<Error>,
    },

    /// The lock can no longer be trusted: its deadline passed, an extend
    /// or release found the token gone on too many nodes (it expired, or a
    /// node restarted without persistence), or renewal could not reach a
    /// quorum in time.
    #[error(
        "lock on `{resource}` was lost ({reason}): {held} node(s) still held its token, {quorum} required{}",
        FailureList(failures)
    )]
    #[non_exhaustive]
    Lost {
        /// The resource of the lost lock.
        resource: String,
        /// Why it is considered lost.
        reason: LossReason,
        /// How many nodes still held the token when the loss was detected
        /// (0 when the deadline had already passed and no node was asked).
        held: usize,
        /// How many nodes must hold it.
        quorum: usize,
        /// Nodes that failed during the operation, if any.
        failures: Vec<NodeFailure>,
    },

    /// So many nodes cannot run what the call needs that no quorum can
    /// answer, and waiting will not change that: in
    /// [`ScriptMode::Functions`](crate::ScriptMode::Functions), servers
    /// without Redis Functions (before Redis 7.0, or `FCALL` renamed) or
    /// without quorumlock's library loaded; users who may not run scripts
    /// where the step has no native form; or servers that refuse the
    /// nodes' credentials ([`NodeError::AuthRefused`]). Each such node is
    /// listed with what it said ([`NodeError::is_incompatible`]). Not
    /// retryable: the nodes need the library loaded, the manager
    /// [`ScriptMode::Eval`](crate::ScriptMode::Eval), or the right
    /// credentials.
    #[error(
        "nodes cannot run what `{resource}` needs: {} of {nodes} cannot, a quorum of {quorum} tolerates {}{}",
        failures.iter().filter(|f| f.error.is_incompatible()).count(),
        nodes - quorum,
        FailureList(failures)
    )]
    #[non_exhaustive]
    Incompatible {
        /// The resource of the call.
        resource: String,
        /// How many nodes the manager has.
        nodes: usize,
        /// How many nodes must agree.
        quorum: usize,
        /// Every node that failed, with what it said.
        failures: Vec<NodeFailure>,
    },

    /// A semaphore is held on some nodes with another permit count than
    /// this call's (callers of one semaphore must agree on its count), and
    /// too few nodes granted a permit. Nothing was taken. Not retryable:
    /// change a semaphore's count only once no permit of the old count is
    /// held (or use a new name). See [`Semaphore`](crate::Semaphore).
    #[error(
        "semaphore `{semaphore}` is held with {theirs} permits on {nodes} node(s), but this call counts {ours}: callers of one semaphore must agree on its permit count"
    )]
    #[non_exhaustive]
    PermitsMismatch {
        /// The semaphore's name.
        semaphore: String,
        /// This call's permit count.
        ours: u32,
        /// The count the nodes hold (as text: it is what a node stored).
        theirs: String,
        /// How many nodes answered with another count.
        nodes: usize,
    },

    /// An argument to a call was rejected before any I/O.
    #[error("invalid argument: {0}")]
    InvalidArgument(#[from] ArgumentError),

    /// The manager's configuration was rejected by `build()`.
    #[error("invalid configuration: {0}")]
    InvalidConfig(#[from] ConfigError),

    /// The operating system's secure random source failed, so no token
    /// could be generated.
    #[error("the operating system's random source failed: {0}")]
    Random(String),
}

impl Error {
    /// Whether another attempt could succeed: contention, unreachable nodes
    /// and used-up validity are transient; bad input and lost locks are not.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contended { .. }
                | Error::Unavailable { .. }
                | Error::FenceUnconfirmed { .. }
                | Error::ValidityExpired { .. }
        )
    }

    /// The per-node failures this error carries (empty when none failed).
    pub fn node_failures(&self) -> &[NodeFailure] {
        match self {
            Error::Contended { failures, .. }
            | Error::Unavailable { failures, .. }
            | Error::FenceUnconfirmed { failures, .. }
            | Error::Incompatible { failures, .. }
            | Error::Lost { failures, .. } => failures,
            Error::WaitTimeout { last, .. } => last.node_failures(),
            _ => &[],
        }
    }
}

/// Why a lock can no longer be trusted; what [`Lease::lost`](crate::Lease::lost) resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The deadline passed without a successful extension.
    Expired,
    /// An extension found the token gone on so many nodes that no quorum
    /// holds it (it expired there, or nodes restarted empty).
    TokenGone,
    /// Automatic renewal kept failing because too few nodes answered, and
    /// too little validity was left to try again. Declared ahead of the
    /// deadline.
    Unreachable,
    /// The holder released the lock or dropped its guard.
    Released,
    /// Automatic renewal failed on so many nodes that cannot run it
    /// ([`NodeError::is_incompatible`]: Functions mode without Functions
    /// or without quorumlock's library) that no quorum ever will: declared
    /// at once rather than retried until the deadline.
    Incompatible,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "its deadline passed without an extension",
            LossReason::TokenGone => "its token was gone on too many nodes",
            LossReason::Unreachable => "renewal could not reach a quorum in time",
            LossReason::Released => "it was released",
            LossReason::Incompatible => {
                "renewal cannot run on enough nodes (Functions mode without Functions or without the library)"
            }
        })
    }
}

/// One node's failure during an operation.
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeFailure {
    /// The node, as `host:port` (with `/db` when not 0), or a cluster as
    /// `cluster(host:port,…)` listing its seeds. Never includes
    /// credentials.
    pub node: Arc<str>,
    /// What went wrong there.
    pub error: NodeError,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.error)
    }
}

/// What went wrong on one node.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The node did not answer within the per-node timeout (or the
    /// remaining validity budget, if that was shorter).
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// Not waited for: the node's last requests all timed out, with no
    /// answer since (a frozen node, or one far behind), and the other
    /// nodes had answered. Its request still went out; later calls do not
    /// ask it ([`NotAsked`](Self::NotAsked)) until it answers again.
    #[error("not waited for: its last requests timed out, none answered since")]
    Unresponsive,
    /// Not waited for: an acquisition another owner refused on other nodes,
    /// which a quorum had answered, could still be granted only by this
    /// node (and the others still answering, at most `N - Q`), which had
    /// not answered `behind` after the attempt began, several times as long
    /// as the others took. Not counted as unreachable: the attempt fails
    /// as [`Error::Contended`](crate::Error::Contended). The attempt gave up
    /// rather than keep the keys it got while waiting, and released them;
    /// `lock` tries again. Its request still went out, and is released
    /// behind it. Says nothing of the node's health.
    #[error(
        "not waited for: refused by other nodes, the attempt was left to this one, which had not answered {} after it began",
        show_ms(*behind)
    )]
    #[non_exhaustive]
    Outpaced {
        /// How long after the attempt began it gave up on the node.
        behind: Duration,
    },
    /// Not asked: the node's last requests all timed out, with no answer
    /// since, so calls are not sent to it while it is probed (on a backoff,
    /// up to a couple of seconds apart) until it answers again. Counts as a
    /// failure of the call, never as a confirmation; the quorum stays a
    /// majority of all the nodes.
    #[error(
        "not asked since {} ago: its last requests timed out; asked again once a probe answers",
        show_ms(*silent_for)
    )]
    #[non_exhaustive]
    NotAsked {
        /// How long the node has not been asked.
        silent_for: Duration,
    },
    /// The connection dropped while a release was on its way and the
    /// release went out again, to find the token gone: the first sending
    /// may have deleted it, or it was gone before. Counted neither as
    /// released there nor as lost; the token is not on the node now.
    #[error(
        "the connection dropped during the release and it was sent again: the token is gone, deleted by the first sending or gone before it"
    )]
    ReleaseResent,
    /// The connection or the server reported an error.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The node answered something the protocol does not allow.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// A node configured as a Redis Cluster reached a server with cluster
    /// support disabled. It never votes: give standalone masters with
    /// [`RedlockBuilder::nodes`](crate::RedlockBuilder::nodes), one node each.
    #[error(
        "configured as a cluster, but a seed is a standalone server (cluster support disabled); add standalone masters as nodes, one each"
    )]
    NotACluster,
    /// In [`ScriptMode::Functions`](crate::ScriptMode::Functions), the node
    /// lacks a function of quorumlock's library: it was never loaded there,
    /// the node restarted empty, or it holds an older version.
    #[error(
        "function `{function}` is not loaded on this node ({server}); load quorumlock::FUNCTIONS_LIBRARY (src/scripts/functions.lua) on every node with `FUNCTION LOAD REPLACE`, or use ScriptMode::Eval"
    )]
    #[non_exhaustive]
    FunctionsNotLoaded {
        /// The function that was called.
        function: String,
        /// The server and its version as it reports them (`redis 7.2.6`,
        /// `valkey 8.0.1`), or that it would not say.
        server: String,
    },
    /// With replica sync
    /// ([`RedlockBuilder::replica_sync`](crate::RedlockBuilder::replica_sync)),
    /// fewer replicas than asked acknowledged the node's write in time: a
    /// failover could lose it, so the node's answer does not count.
    #[error("only {acknowledged} of {wanted} replicas acknowledged the write in time")]
    #[non_exhaustive]
    ReplicasBehind {
        /// How many replicas acknowledged.
        acknowledged: u32,
        /// How many were asked for.
        wanted: u32,
    },
    /// In [`ScriptMode::Functions`](crate::ScriptMode::Functions), the node
    /// does not know `FCALL`: Redis Functions need Redis 7.0 or later (or
    /// Valkey), or the command was renamed or disabled there.
    #[error(
        "this node ({server}) does not know FCALL: Redis Functions need Redis 7.0 or later, and FCALL must not be renamed; use ScriptMode::Eval for this server"
    )]
    #[non_exhaustive]
    FunctionsUnsupported {
        /// The server and its version as it reports them (`redis 6.2.16`),
        /// or that it would not say.
        server: String,
    },
    /// The lock user may not run scripts on this node (`NOPERM` for
    /// `EVAL`/`EVALSHA`), and the step has no native form there: the
    /// server lacks the command (`DELIFEQ` needs Valkey 9.0, `DELEX … IFEQ`
    /// Redis 8.4, `SET … IFEQ` Valkey 8.1 or Redis 8.4), or the step needs
    /// a script on every server (fenced and multi-resource locks,
    /// semaphores, reader-writer locks, elections).
    #[error(
        "this node ({server}) refused the script `{script}` (the user may not run EVAL/EVALSHA) and {native}; grant the lock user +eval +evalsha, or load quorumlock's Functions library and use ScriptMode::Functions"
    )]
    #[non_exhaustive]
    ScriptsRefused {
        /// The script that was refused.
        script: String,
        /// Why no native command could stand in for it.
        native: String,
        /// The server and its version as it reports them, or that it
        /// would not say.
        server: String,
    },
    /// In [`ScriptMode::Functions`](crate::ScriptMode::Functions), the
    /// lock user may not run `FCALL` on this node (`NOPERM`): a
    /// configuration error, not an outage, so nothing is retried.
    #[error(
        "this node ({server}) refused FCALL of `{function}` (the user may not run FCALL): grant the lock user +fcall, or use ScriptMode::Eval and grant +eval +evalsha"
    )]
    #[non_exhaustive]
    FunctionsRefused {
        /// The library function that was refused.
        function: String,
        /// The server and its version as it reports them, or that it
        /// would not say.
        server: String,
    },
    /// The server refused the node's credentials (`WRONGPASS`, or a user
    /// that is disabled or does not exist): a configuration error, not an
    /// outage, so nothing is retried. Names the user; never the password.
    #[error(
        "the server refused the credentials of user `{user}`: check the user and password in this node's URL (and that the user is enabled)"
    )]
    #[non_exhaustive]
    AuthRefused {
        /// The user the node's URL names (`default` when it names none).
        user: String,
    },
    /// The node's server has no scripting engine (Valkey built without Lua,
    /// or with its engine unloaded: `EVAL` answers `Could not find
    /// scripting engine`), and the step needs a script there: fenced and
    /// multi-resource locks, semaphores, reader-writer locks, fair locks
    /// and elections on every server; a plain lock's release and
    /// extension only where the server lacks the native commands. Not a
    /// permission ([`ScriptsRefused`](Self::ScriptsRefused)) and not an
    /// outage: nothing is retried.
    #[error(
        "this node ({server}) has no scripting engine, and `{script}` needs a script: plain locks work there (natively), the other primitives need a server with Lua"
    )]
    #[non_exhaustive]
    NoScripting {
        /// The script that could not run.
        script: String,
        /// The server and its version as it reports them, or that it
        /// would not say.
        server: String,
    },
    /// This node reaches the same server (the same `run_id`) as another
    /// node of the manager, which answered first: its answers never count,
    /// so that one server never votes twice. The manager's acquisitions
    /// fail with [`ConfigError::SameServer`].
    #[error(
        "this node reaches the same server as node {other} (same run_id): its answers do not count, one server must not vote twice"
    )]
    #[non_exhaustive]
    SameServer {
        /// The other node, as `host:port[/db]`.
        other: String,
    },
}

impl NodeError {
    /// Whether the node cannot run what the call needs until an
    /// administrator changes it (loads quorumlock's library, or upgrades
    /// the server), so that trying again will not help:
    /// [`FunctionsNotLoaded`](Self::FunctionsNotLoaded),
    /// [`FunctionsUnsupported`](Self::FunctionsUnsupported),
    /// [`ScriptsRefused`](Self::ScriptsRefused),
    /// [`FunctionsRefused`](Self::FunctionsRefused),
    /// [`NoScripting`](Self::NoScripting),
    /// [`AuthRefused`](Self::AuthRefused) (the node's credentials are
    /// wrong) and [`SameServer`](Self::SameServer) (the node is another
    /// name of a server the manager already has).
    pub fn is_incompatible(&self) -> bool {
        matches!(
            self,
            NodeError::FunctionsNotLoaded { .. }
                | NodeError::FunctionsUnsupported { .. }
                | NodeError::ScriptsRefused { .. }
                | NodeError::FunctionsRefused { .. }
                | NodeError::NoScripting { .. }
                | NodeError::AuthRefused { .. }
                | NodeError::SameServer { .. }
        )
    }
}

/// A call argument that was rejected before any I/O.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentError {
    /// The resource name is empty.
    #[error("the resource name is empty")]
    EmptyResource,
    /// A multi-resource request named no resource.
    #[error("no resources were given")]
    NoResources,
    /// A multi-resource request named the same resource twice.
    #[error("resource `{resource}` was requested twice")]
    DuplicateResource {
        /// The repeated resource name.
        resource: String,
    },
    /// A request touches several keys (a multi-resource lock, or a fenced
    /// lock and its counter) that cannot share a hash slot, and a node is a
    /// Redis Cluster, where one script may only touch one slot.
    #[error(
        "the keys {keys:?} cannot share a Redis Cluster hash slot; give the resources one hash tag, e.g. `{{orders}}:1` and `{{orders}}:2` (only the part in braces is hashed)"
    )]
    CrossSlot {
        /// The keys of the request; of more than four (a semaphore's), the
        /// first and one outside its slot.
        keys: Vec<String>,
    },
    /// A semaphore with no permits: nobody could ever hold one.
    #[error("a semaphore needs at least one permit")]
    NoPermits,
    /// A semaphore with more permits than
    /// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS) (every acquire touches every
    /// permit's key on each node).
    #[error("{permits} permits exceed the maximum of {max}")]
    TooManyPermits {
        /// The requested permit count.
        permits: u32,
        /// The largest accepted permit count.
        max: u32,
    },
    /// The time-to-live is shorter than one millisecond (Redis' resolution).
    #[error("the ttl must be at least 1ms")]
    ZeroTtl,
    /// The time-to-live exceeds [`Redlock::MAX_TTL`](crate::Redlock::MAX_TTL).
    #[error("the ttl {ttl:?} exceeds the maximum of {max:?}")]
    TtlTooLong {
        /// The requested time-to-live.
        ttl: Duration,
        /// The largest accepted time-to-live.
        max: Duration,
    },
    /// The time-to-live leaves no validity once clock drift is subtracted.
    #[error("the ttl {ttl:?} is not larger than the clock drift allowance {drift:?}")]
    TtlNotAboveDrift {
        /// The requested time-to-live.
        ttl: Duration,
        /// `ttl * drift_factor + 2ms`.
        drift: Duration,
    },
}

/// A configuration rejected by [`RedlockBuilder::build`](crate::RedlockBuilder::build).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No node was given.
    #[error("no nodes were given")]
    NoNodes,
    /// A node URL could not be parsed. The URL is shown with its
    /// credentials masked.
    #[error("malformed node url `{url}`: {reason}")]
    MalformedUrl {
        /// The URL with any user information replaced by `***`.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// The same node (address and database, or a cluster with the same
    /// seeds) was given twice.
    #[error("node {node} was given more than once")]
    DuplicateNode {
        /// The node, as `host:port[/db]` or `cluster(host:port,…)`.
        node: String,
    },
    /// One server address belongs to two voting nodes: it is a standalone
    /// node and a cluster seed, or a seed of two clusters. Its votes would
    /// count twice.
    #[error(
        "address {address} belongs to both {first} and {second}; each Redis deployment must be given as exactly one node"
    )]
    SharedAddress {
        /// The `host:port` given twice.
        address: String,
        /// The node it was first given for.
        first: String,
        /// The node it was given for again.
        second: String,
    },
    /// Two nodes reach one server: the URLs name the same host and port
    /// (another database of it), or two connections found the same
    /// `run_id` (`INFO server`) behind two names (an alias, another
    /// database). Redlock's safety rests on independent nodes: one server
    /// must not vote twice. Found in the URLs when the manager is built;
    /// found by `run_id` at the first connection that shows it (and again
    /// after any reconnection), after which every acquisition of the
    /// manager fails with this error.
    #[error(
        "nodes {first} and {second} are the same server ({why}): one server must not vote twice; give independent masters, one node each"
    )]
    SameServer {
        /// The node named first, as `host:port[/db]`.
        first: String,
        /// The node that reaches the same server, as `host:port[/db]`.
        second: String,
        /// How it was found: `same address` or `same run_id`.
        why: &'static str,
    },
    /// A cluster node was given no seed URL.
    #[error("a cluster node needs at least one seed url")]
    EmptyCluster,
    /// A cluster's seed URLs cannot describe one cluster: they disagree on
    /// the password, user name, TLS or database, or name a Unix socket.
    #[error("invalid cluster node {node}: {reason}")]
    InvalidCluster {
        /// The node, as `cluster(host:port,…)`.
        node: String,
        /// What the cluster client rejected (never a credential).
        reason: String,
    },
    /// A `rediss://` URL asks to skip certificate verification
    /// (`#insecure`). quorumlock always verifies: trust a private CA with
    /// [`RedlockBuilder::tls_root_certificate`](crate::RedlockBuilder) instead.
    #[error(
        "node url `{url}` turns off TLS certificate verification (#insecure), which quorumlock does not allow; trust the server's CA with tls_root_certificate instead"
    )]
    InsecureTls {
        /// The URL with any user information replaced by `***`.
        url: String,
    },
    /// A CA certificate given to `tls_root_certificate` is not usable PEM.
    #[error("invalid TLS root certificate: {reason}")]
    TlsRootCertificate {
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS root certificate was given, but no node uses `rediss://`: the
    /// traffic to the nodes would not be encrypted.
    #[error(
        "a TLS root certificate was given but no node url uses rediss://, so no connection would use TLS"
    )]
    TlsWithoutTlsNode,
    /// The per-node timeout is zero.
    #[error("the node timeout must be greater than zero")]
    ZeroNodeTimeout,
    /// Replica sync asks for no replica, or waits for 0 ms (which `WAIT`
    /// takes as "forever"), or a node is a Redis Cluster (where `WAIT`
    /// cannot follow a key to its master).
    #[error("replica sync: {0}")]
    ReplicaSync(&'static str),
    /// The drift factor is negative, NaN, infinite, or not below 1.
    #[error("the drift factor must be a finite number in [0, 1), got {0}")]
    DriftFactor(f64),
    /// The retry policy allows no attempt at all.
    #[error("the retry policy must allow at least one attempt")]
    ZeroAttempts,
}

/// Displays a list of node failures as `; a: …; b: …` (nothing when empty).
struct FailureList<'a>(&'a [NodeFailure]);

impl fmt::Display for FailureList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for failure in self.0 {
            write!(f, "; {failure}")?;
        }
        Ok(())
    }
}

/// A duration as an error says it: `250ms`, `3.2s`.
fn show_ms(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
