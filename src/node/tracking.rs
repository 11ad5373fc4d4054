//! Server-side tracking of held keys (`CLIENT TRACKING`): per node, one
//! connection of its own that reads the keys of auto-extended holdings and
//! hears at once when anybody else changes one of them, so that its holder
//! renews at once instead of at its next scheduled renewal.
//!
//! Why this shape:
//!
//! - **A connection of its own, in RESP3, not the shared data connection.**
//!   In the default tracking mode a server tracks every key a connection
//!   *reads*, scripts included: on the data connection every release script
//!   (`GET` then `DEL`) would pass through the server's tracking table, so
//!   short lock/release cycles would pay for it. This connection reads
//!   nothing but the keys it is asked to watch, so only held keys are
//!   tracked, and nothing is added to the path of a plain lock and
//!   release. RESP3 lets the invalidations arrive on the same connection as
//!   push messages, with no second connection to redirect to and no
//!   `CLIENT ID` to keep in step across reconnections. Redis ≥ 6 and every
//!   Valkey speak it; a server that refuses `HELLO 3`, `CLIENT TRACKING`
//!   or `MGET` (an older server, an ACL without `+client|tracking` or
//!   `+mget`) is left alone: its holders learn of changes at their
//!   renewals, as before.
//! - **The default mode, not `BCAST … PREFIX`.** Broadcasting would push
//!   every change under the prefix — every other client's lock and release —
//!   to every manager; the default mode pushes only changes to keys read
//!   here, that is, to held keys.
//! - **Read, then compare.** An invalidation is one-shot: once sent, the
//!   key is no longer tracked until it is read again (a reader's hold:
//!   `ZSCORE` of its token in the readers' set, which tracks the set). And our own renewals,
//!   sent on the data connection (another client, so `NOLOOP` cannot hide
//!   them), invalidate the key too. So every invalidated key is read again
//!   at once (`MGET`), which both registers it anew and tells what it holds
//!   now: still the holder's token means nothing to do (our own renewal,
//!   say); anything else — absent, another token — makes that holder renew
//!   now, and the restoring renewal decides as it always does: restored if
//!   nobody took the key, lost if another owner did. A change between an
//!   invalidation and the read is seen by the read itself; a change after
//!   it is pushed again.
//!
//! Only standalone nodes are tracked for now: a Redis Cluster node's keys
//! live on whichever member owns their slot, each would need its own
//! connection.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc};

use crate::contract::TokenAt;
use crate::error::NodeError;
use crate::node::pubsub::Nodes;
use crate::node::{Node, install_crypto_provider};

/// How long a node's tracking connection waits before connecting again
/// after losing its connection or failing to make one; doubled after each
/// failure in a row, up to [`MAX_RECONNECT_DELAY`]: a paused node accepts
/// connections into its backlog without answering, and should not find
/// hundreds of them when it thaws.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);
/// See [`RECONNECT_DELAY`].
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(8);

/// The most keys read by one `MGET`.
const MAX_READ: usize = 1000;

/// Whether a manager watches the keys of its auto-extended holdings through
/// the servers' own change notifications (`CLIENT TRACKING`), so that a
/// holder whose keys are deleted or taken on its nodes learns of it within
/// a round trip instead of at its next renewal. See
/// [`RedlockBuilder::held_key_tracking`](crate::RedlockBuilder::held_key_tracking).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeldKeyTracking {
    /// On every standalone node whose server offers it (Redis ≥ 6, every
    /// Valkey): one more connection per node, opened when the first lock
    /// is auto-extended. Nodes that refuse it are renewed on schedule only.
    #[default]
    WhereAvailable,
    /// Never: a holder learns that its keys changed at its next renewal.
    Off,
}

/// Called with a watcher's id when one of its keys changed under it.
pub(crate) type OnChange = Arc<dyn Fn(u64) + Send + Sync>;

/// A manager's key tracking: what is watched on every node, and one task
/// per node (started with its first watched key) that keeps the node's
/// tracking connection and reads what was invalidated.
pub(crate) struct Tracking {
    /// Held weakly: the tasks stop once the manager is gone.
    core: Weak<dyn Nodes>,
    nodes: Box<[Arc<NodeWatch>]>,
    on_change: OnChange,
}

impl fmt::Debug for Tracking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracking")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

/// One node's watched keys and its task's state.
#[derive(Debug, Default)]
struct NodeWatch {
    watched: Mutex<Watched>,
    wake: Notify,
    started: AtomicBool,
    closed: AtomicBool,
    /// Wakes a task waiting to reconnect when the manager is gone.
    closing: Notify,
}

/// One watcher of a key: its id, its token, and where the key keeps it.
#[derive(Debug)]
struct Watcher {
    id: u64,
    token: Arc<str>,
    at: TokenAt,
}

/// The keys watched on one node: each with its watchers, and those to read
/// (again).
#[derive(Debug, Default)]
pub(crate) struct Watched {
    keys: HashMap<Arc<str>, Vec<Watcher>>,
    pending: HashSet<Arc<str>>,
}

/// What one read of watched keys asks a node: the values of the keys that
/// should hold a token (`MGET`), and per reader watching a sorted set
/// whether its token is still a member (`ZSCORE`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    values: Vec<Arc<str>>,
    members: Vec<(Arc<str>, u64, Arc<str>)>,
}

impl Watched {
    /// Watches `keys` for `id`, whose token is `token`, kept `at` each key;
    /// each is read (again).
    pub(crate) fn add(&mut self, id: u64, keys: &[Arc<str>], token: &Arc<str>, at: TokenAt) {
        for key in keys {
            self.keys.entry(key.clone()).or_default().push(Watcher {
                id,
                token: token.clone(),
                at,
            });
            self.pending.insert(key.clone());
        }
    }

    /// Stops watching `keys` for `id`.
    pub(crate) fn remove(&mut self, id: u64, keys: &[Arc<str>]) {
        for key in keys {
            if let Some(watchers) = self.keys.get_mut(key) {
                watchers.retain(|watcher| watcher.id != id);
                if watchers.is_empty() {
                    self.keys.remove(key);
                    self.pending.remove(key);
                }
            }
        }
    }

    /// An invalidation: `keys` changed (`None`: every key, as after a
    /// `FLUSHALL`). Those watched are to be read again.
    pub(crate) fn invalidated(&mut self, keys: Option<&[Value]>) {
        match keys {
            None => self.pending.extend(self.keys.keys().cloned()),
            Some(keys) => {
                for key in keys {
                    let Value::BulkString(name) = key else {
                        continue;
                    };
                    let Ok(name) = std::str::from_utf8(name) else {
                        continue;
                    };
                    if let Some((key, _)) = self.keys.get_key_value(name) {
                        self.pending.insert(key.clone());
                    }
                }
            }
        }
    }

    /// Up to `most` keys to read, taken out of the pending set.
    pub(crate) fn take_pending(&mut self, most: usize) -> Vec<Arc<str>> {
        let keys: Vec<Arc<str>> = self.pending.iter().take(most).cloned().collect();
        for key in &keys {
            self.pending.remove(key);
        }
        keys
    }

    /// What reading `keys` asks: each key with a watcher of its value
    /// once, and each member watcher's token in its set.
    pub(crate) fn reads(&self, keys: &[Arc<str>]) -> Reads {
        let mut reads = Reads::default();
        for key in keys {
            let Some(watchers) = self.keys.get(key) else {
                continue;
            };
            if watchers.iter().any(|w| w.at == TokenAt::Value) {
                reads.values.push(key.clone());
            }
            for watcher in watchers.iter().filter(|w| w.at == TokenAt::Member) {
                reads
                    .members
                    .push((key.clone(), watcher.id, watcher.token.clone()));
            }
        }
        reads
    }

    /// The watchers of `key`'s value that it no longer serves: `value` is
    /// what a read found there, which is not their token.
    pub(crate) fn changed(&self, key: &str, value: Option<&[u8]>) -> Vec<u64> {
        let Some(watchers) = self.keys.get(key) else {
            return Vec::new();
        };
        watchers
            .iter()
            .filter(|w| w.at == TokenAt::Value && value != Some(w.token.as_bytes()))
            .map(|w| w.id)
            .collect()
    }

    /// Whether `id` still watches `key` (it may have been forgotten while
    /// the read was out).
    fn watches(&self, key: &str, id: u64) -> bool {
        self.keys
            .get(key)
            .is_some_and(|watchers| watchers.iter().any(|w| w.id == id))
    }
}

impl NodeWatch {
    fn watched(&self) -> MutexGuard<'_, Watched> {
        // The map stays consistent even if a holder of the lock panicked.
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Tracking {
    /// Tracking over the `nodes` nodes of `core`, telling `on_change` which
    /// watcher's keys changed. No I/O until something is watched.
    pub(crate) fn new(core: Weak<dyn Nodes>, nodes: usize, on_change: OnChange) -> Self {
        Self {
            core,
            nodes: (0..nodes).map(|_| Arc::default()).collect(),
            on_change,
        }
    }

    /// Watches `keys` on every node for watcher `id`, whose keys hold
    /// `token`: a change that leaves another value (or none) there calls
    /// `on_change(id)`. Starts a node's task on its first watched key.
    /// Without a tokio runtime nothing is watched.
    pub(crate) fn watch(&self, id: u64, keys: &[Arc<str>], token: &str, at: TokenAt) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let token: Arc<str> = token.into();
        for (i, node) in self.nodes.iter().enumerate() {
            node.watched().add(id, keys, &token, at);
            if !node.started.swap(true, Ordering::AcqRel) {
                runtime.spawn(run(
                    node.clone(),
                    self.core.clone(),
                    i,
                    self.on_change.clone(),
                ));
            }
            node.wake.notify_one();
        }
    }

    /// Stops watching `keys` for watcher `id`. (The server forgets them at
    /// their next change; what it pushes then is ignored.)
    pub(crate) fn forget(&self, id: u64, keys: &[Arc<str>]) {
        for node in self.nodes.iter() {
            node.watched().remove(id, keys);
        }
    }
}

impl Drop for Tracking {
    fn drop(&mut self) {
        for node in self.nodes.iter() {
            node.closed.store(true, Ordering::Release);
            node.wake.notify_one();
            node.closing.notify_one();
        }
    }
}

/// How one tracking connection ended.
enum Ended {
    /// The manager is gone.
    Closed,
    /// The node cannot or will not track: give up on it.
    Refused(String),
    /// The connection failed or dropped: connect again (at once if it had
    /// been tracking, then after a delay growing with each failure).
    Dropped { error: NodeError, tracked: bool },
}

/// Node `i`'s task: keeps a tracking connection to it, reconnecting (see
/// [`RECONNECT_DELAY`]), until the manager is gone or the node refuses.
async fn run(watch: Arc<NodeWatch>, core: Weak<dyn Nodes>, i: usize, on_change: OnChange) {
    let mut delay = RECONNECT_DELAY;
    loop {
        if watch.closed.load(Ordering::Acquire) {
            return;
        }
        let (client, timeout, label) = {
            let Some(core) = core.upgrade() else {
                return;
            };
            let Ok(node) = core.node(i) else {
                return;
            };
            match node.tracking_client() {
                Ok(client) => (client, core.node_timeout(), node.label().clone()),
                Err(reason) => {
                    tracing::info!(
                        node = %node.label(),
                        reason,
                        "held keys not tracked: their holders learn of changes at renewal"
                    );
                    return;
                }
            }
        };
        let ended = session(&watch, &client, timeout, &on_change).await;
        let redacted = |error: NodeError| match core.upgrade() {
            Some(core) => match core.node(i) {
                Ok(node) => node.redact(error, &[]).to_string(),
                Err(_) => String::new(),
            },
            None => String::new(),
        };
        match ended {
            Ended::Closed => return,
            Ended::Refused(reason) => {
                tracing::info!(
                    node = %label,
                    reason = %redacted(NodeError::UnexpectedReply(reason)),
                    "held keys not tracked: their holders learn of changes at renewal"
                );
                return;
            }
            Ended::Dropped { error, tracked } => {
                if tracked {
                    // Changes go unheard until it is back: try at once.
                    delay = Duration::ZERO;
                }
                tracing::debug!(node = %label, error = %redacted(error), "tracking connection lost");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = watch.closing.notified() => {}
                }
                delay = (delay * 2).clamp(RECONNECT_DELAY, MAX_RECONNECT_DELAY);
            }
        }
    }
}

/// Whether `error` means the server will not track for us, now or later:
/// an older server without `HELLO 3` or `CLIENT TRACKING`, an ACL refusing
/// them (or `MGET`). Anything else — the connection failed, the server is
/// loading its data or busy — is worth another try.
fn is_refusal(error: &redis::RedisError) -> bool {
    if matches!(error.kind(), redis::ErrorKind::AuthenticationFailed) {
        return true;
    }
    if matches!(
        error.code(),
        Some("NOPERM" | "NOPROTO" | "NOAUTH" | "WRONGPASS")
    ) {
        return true;
    }
    let text = error.to_string().to_ascii_lowercase();
    text.contains("unknown command") || text.contains("unknown subcommand")
}

/// One tracking connection: connects, turns tracking on, reads every
/// watched key (the server forgot what a previous connection tracked),
/// then reads again whatever is invalidated, until it fails.
async fn session(
    watch: &NodeWatch,
    client: &redis::Client,
    timeout: Duration,
    on_change: &OnChange,
) -> Ended {
    let (tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_push_sender(tx);
    let mut conn = match client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(conn) => conn,
        Err(e) if is_refusal(&e) => return Ended::Refused(e.to_string()),
        Err(e) => {
            return Ended::Dropped {
                error: e.into(),
                tracked: false,
            };
        }
    };
    // No NOLOOP: this connection never writes, so nothing it does would
    // invalidate a key anyway.
    let on = redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .query_async::<()>(&mut conn)
        .await;
    match on {
        Ok(()) => {}
        Err(e) if is_refusal(&e) => return Ended::Refused(e.to_string()),
        Err(e) => {
            return Ended::Dropped {
                error: e.into(),
                tracked: false,
            };
        }
    }
    tracing::debug!("tracking held keys");
    {
        let mut watched = watch.watched();
        let all: Vec<Arc<str>> = watched.keys.keys().cloned().collect();
        watched.pending.extend(all);
    }
    loop {
        if watch.closed.load(Ordering::Acquire) {
            return Ended::Closed;
        }
        // Registered before reading, so a watch added meanwhile wakes us.
        let woken = watch.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let keys = watch.watched().take_pending(MAX_READ);
        if !keys.is_empty() {
            if let Err(e) = read(watch, &mut conn, &keys, on_change).await {
                watch.watched().pending.extend(keys);
                // An ACL that allows tracking but not `MGET`.
                return match e {
                    NodeError::Redis(e) if is_refusal(&e) => Ended::Refused(e.to_string()),
                    error => Ended::Dropped {
                        error,
                        tracked: true,
                    },
                };
            }
            continue;
        }
        let push = tokio::select! {
            push = pushes.recv() => push,
            _ = &mut woken => continue,
        };
        let Some(push) = push else {
            return closed();
        };
        // A renewal of many locks invalidates all of their keys at once:
        // take every push already here, so that one read serves them all.
        let mut next = Some(push);
        while let Some(push) = next.take() {
            match push {
                PushInfo {
                    kind: PushKind::Disconnection,
                    ..
                } => return closed(),
                PushInfo {
                    kind: PushKind::Invalidate,
                    data,
                } => {
                    let keys = match data.first() {
                        Some(Value::Array(keys)) => Some(&keys[..]),
                        Some(Value::Set(keys)) => Some(&keys[..]),
                        // Null: every key (a flush).
                        _ => None,
                    };
                    watch.watched().invalidated(keys);
                }
                _ => {}
            }
            next = pushes.try_recv().ok();
        }
    }
}

/// How a session ends when its connection closed.
fn closed() -> Ended {
    let error = NodeError::UnexpectedReply("tracking connection closed".into());
    Ended::Dropped {
        error,
        tracked: true,
    }
}

/// Reads `keys` (which tracks them again) and tells the watchers of those
/// that no longer hold their token.
async fn read(
    watch: &NodeWatch,
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &[Arc<str>],
    on_change: &OnChange,
) -> Result<(), NodeError> {
    let reads = watch.watched().reads(keys);
    // One round trip: the values (`MGET`), then each reader's membership
    // (`ZSCORE`). Each answers for itself: a set that is no longer one
    // (`WRONGTYPE`) tells its reader it changed, not the others.
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    if !reads.values.is_empty() {
        let mget = pipe.cmd("MGET");
        for key in &reads.values {
            mget.arg(&**key);
        }
    }
    for (key, _, token) in &reads.members {
        pipe.cmd("ZSCORE").arg(&**key).arg(&**token);
    }
    if pipe.is_empty() {
        return Ok(());
    }
    let mut replies = pipe
        .query_async::<Vec<redis::RedisResult<Value>>>(conn)
        .await?
        .into_iter();
    let values: Vec<Option<Vec<u8>>> = if reads.values.is_empty() {
        Vec::new()
    } else {
        match replies.next() {
            Some(reply) => redis::from_redis_value(reply?).map_err(redis::RedisError::from)?,
            None => return Err(NodeError::UnexpectedReply("no reply to MGET".into())),
        }
    };
    let changed: Vec<u64> = {
        let watched = watch.watched();
        let mut changed: Vec<u64> = reads
            .values
            .iter()
            .zip(&values)
            .flat_map(|(key, value)| watched.changed(key, value.as_deref()))
            .collect();
        for ((key, id, _), reply) in reads.members.iter().zip(replies) {
            let member = matches!(reply, Ok(ref score) if *score != Value::Nil);
            if !member && watched.watches(key, *id) {
                changed.push(*id);
            }
        }
        changed
    };
    for id in changed {
        tracing::debug!(op = "track", "a held key changed: renewing at once");
        on_change(id);
    }
    Ok(())
}

impl Node {
    /// Whether this node would track held keys for a manager, for the node
    /// check: a tracking connection made, tracking turned on and `key` read
    /// within `timeout`, as the manager's own tracking does; or why not.
    pub(crate) async fn tracking_probe(&self, key: &str, timeout: Duration) -> Result<(), String> {
        let client = self.tracking_client().map_err(str::to_owned)?;
        let probe = async {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout));
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("ON")
                .query_async::<()>(&mut conn)
                .await?;
            redis::cmd("MGET")
                .arg(key)
                .query_async::<Value>(&mut conn)
                .await?;
            Ok::<(), redis::RedisError>(())
        };
        match tokio::time::timeout(timeout, probe).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.redact(e.into(), &[]).to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }

    /// A client for this node's tracking connection: its own client, in
    /// RESP3 (push messages). A cluster node has none (see the module's
    /// doc).
    fn tracking_client(&self) -> Result<redis::Client, &'static str> {
        if self.is_cluster() {
            return Err("a Redis Cluster node (not tracked yet)");
        }
        if self.tls {
            install_crypto_provider();
        }
        let server = self
            .servers()
            .first()
            .ok_or("no server")?
            .get_connection_info()
            .clone();
        let settings = server
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        redis::Client::open(server.set_redis_settings(settings)).map_err(|_| "no client")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|&n| n.into()).collect()
    }

    fn bulk(name: &str) -> Value {
        Value::BulkString(name.as_bytes().to_vec())
    }

    #[test]
    fn a_watched_key_is_read_once_when_added_and_again_when_invalidated() {
        let mut w = Watched::default();
        w.add(1, &keys(&["a", "b"]), &"t1".into(), TokenAt::Value);
        let mut first = w.take_pending(10);
        first.sort();
        assert_eq!(first, keys(&["a", "b"]));
        assert!(w.take_pending(10).is_empty(), "read once");
        // Only watched keys are read again.
        w.invalidated(Some(&[bulk("b"), bulk("stranger")]));
        assert_eq!(w.take_pending(10), keys(&["b"]));
        // A flush: every watched key.
        w.invalidated(None);
        assert_eq!(w.take_pending(10).len(), 2);
    }

    #[test]
    fn refusals_are_told_from_passing_trouble() {
        use crate::node::server_error;
        for refusal in [
            "-NOPERM this user has no permissions to run the 'client|tracking' command\r\n",
            "-ERR unknown command 'HELLO', with args beginning with: '3' \r\n",
            "-ERR unknown subcommand 'TRACKING'. Try CLIENT HELP.\r\n",
            "-NOPROTO unsupported protocol version\r\n",
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        ] {
            assert!(is_refusal(&server_error(refusal)), "{refusal}");
        }
        for passing in [
            "-LOADING Redis is loading the dataset in memory\r\n",
            "-BUSY Redis is busy running a script\r\n",
        ] {
            assert!(!is_refusal(&server_error(passing)), "{passing}");
        }
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!is_refusal(&io));
    }

    #[test]
    fn reads_are_bounded() {
        let mut w = Watched::default();
        w.add(1, &keys(&["a", "b", "c"]), &"t".into(), TokenAt::Value);
        assert_eq!(w.take_pending(2).len(), 2);
        assert_eq!(w.take_pending(2).len(), 1);
    }

    #[test]
    fn a_key_still_holding_its_token_calls_for_nothing() {
        let mut w = Watched::default();
        w.add(1, &keys(&["a"]), &"t1".into(), TokenAt::Value);
        w.add(2, &keys(&["a"]), &"t2".into(), TokenAt::Value);
        assert_eq!(
            w.changed("a", Some(b"t1")),
            [2],
            "only the other token's holder"
        );
        let mut gone = w.changed("a", None);
        gone.sort_unstable();
        assert_eq!(gone, [1, 2], "absent: both renew");
        assert!(w.changed("unwatched", None).is_empty());
    }

    #[test]
    fn forgotten_keys_are_neither_read_nor_reported() {
        let mut w = Watched::default();
        w.add(1, &keys(&["a"]), &"t1".into(), TokenAt::Value);
        w.add(2, &keys(&["a", "b"]), &"t2".into(), TokenAt::Value);
        w.remove(2, &keys(&["a", "b"]));
        assert_eq!(w.take_pending(10), keys(&["a"]));
        assert_eq!(w.changed("a", None), [1]);
        w.remove(1, &keys(&["a"]));
        w.invalidated(None);
        assert!(w.take_pending(10).is_empty());
        assert!(w.changed("a", None).is_empty());
    }

    #[test]
    fn a_readers_set_is_read_per_reader_and_its_values_once() {
        let mut w = Watched::default();
        w.add(1, &keys(&["lock"]), &"t1".into(), TokenAt::Value);
        w.add(2, &keys(&["rw:readers"]), &"r2".into(), TokenAt::Member);
        w.add(3, &keys(&["rw:readers"]), &"r3".into(), TokenAt::Member);
        let reads = w.reads(&keys(&["lock", "rw:readers", "unwatched"]));
        assert_eq!(reads.values, keys(&["lock"]), "a set's value is not read");
        assert_eq!(
            reads.members,
            [
                ("rw:readers".into(), 2, "r2".into()),
                ("rw:readers".into(), 3, "r3".into())
            ]
        );
        // A read value says nothing to readers: their own reads do.
        assert!(w.changed("rw:readers", None).is_empty());
        assert!(w.watches("rw:readers", 2));
        w.remove(2, &keys(&["rw:readers"]));
        assert!(
            !w.watches("rw:readers", 2),
            "forgotten while the read was out"
        );
        assert!(w.watches("rw:readers", 3));
    }
}
