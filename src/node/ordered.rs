//! A standalone node's one multiplexed connection, made on first use and
//! made anew after it drops, with its requests reaching the server in the
//! order they were issued — from the very first one.
//!
//! Redis runs one connection's requests in the order they arrive, and a
//! multiplexed connection writes them in the order they are handed to it.
//! What was not certain is the handing over while the connection is being
//! made: every request waiting for it woke when it was ready, in no
//! certain order, so a release issued before a grant's request could reach
//! the server after it (and the node refused the grant), or a writer's
//! mark set before its release could land after it. Here a request that
//! finds no connection, or finds others already waiting, queues at a
//! first-come first-served gate; the one at its head makes the connection
//! if there is none, and each hands its request to the connection before
//! letting the next one through. On an established connection with no one
//! queued, a request goes straight out: nothing is added to the hot path.
//!
//! Each connection also keeps which scripts the server it reached is known
//! to have cached (see [`Ordered::cached`]): a new connection may have
//! reached a restarted server with an empty cache, so it starts knowing
//! none, and scripts go out as EVAL (which carries the text) until their
//! EVAL or EVALSHA succeeded on it — never as an EVALSHA whose NOSCRIPT
//! fallback would follow, a round trip later, behind whatever was sent
//! meanwhile.

use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, RedisResult};
use tokio::task::unconstrained;

use super::url::install_crypto_provider;

/// How many requests a connection's queue holds before callers wait for
/// room. Waiting for room would lose the order: requests that waited are
/// woken together and hand their request over in no certain order (with
/// the crate's default of 50, a loaded node saw request 74 before 50). The
/// queue allocates as it fills, so a large bound costs nothing idle; every
/// request is bounded by its call's deadline anyway.
const PIPELINE_BUFFER: usize = 1 << 20;

/// A connection and its generation (how many were made before it, plus 1).
type Current = Option<(MultiplexedConnection, u32)>;

/// A standalone node's connection, with requests in order (see the module).
pub(super) struct Ordered {
    client: redis::Client,
    tls: bool,
    connect_timeout: Duration,
    /// The connection, once made; `None` before, and after it dropped.
    current: Mutex<Current>,
    /// Where requests wait, in the order they came, while there is no
    /// connection or others wait before them.
    gate: tokio::sync::Mutex<()>,
    /// How many requests are at the gate (waiting, or handing their request
    /// over): while there are any, newcomers queue behind them.
    queued: AtomicUsize,
    /// Connections made so far.
    made: AtomicU64,
    /// Failed attempts to connect so far, and the last one's error: the
    /// requests that waited for an attempt fail with it rather than each
    /// trying again in turn.
    failures: AtomicU64,
    failed: Mutex<Option<RedisError>>,
    /// The current connection's generation (high 32 bits) and its scripts
    /// known to be cached on the server (low 32 bits, by
    /// [`cache_bit`](crate::scripts::Lua::cache_bit)).
    scripts: AtomicU64,
}

tokio::task_local! {
    /// The node (its [`Ordered`]'s address) whose [`Turn`] the task holds:
    /// its requests to that node go straight to the connection.
    static TURN: usize;
}

/// One caller's turn at a node's gate (see [`Ordered::turn`]): requests
/// issued after it was taken wait until it is dropped.
pub(super) struct Turn<'a> {
    _gate: tokio::sync::MutexGuard<'a, ()>,
    _leave: Leave<'a>,
}

/// Takes a request off the gate's count when it leaves (also when it is
/// cancelled).
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Ordered {
    /// No I/O: the connection is made on the first request.
    pub(super) fn new(client: redis::Client, tls: bool, connect_timeout: Duration) -> Self {
        Self {
            client,
            tls,
            connect_timeout,
            current: Mutex::new(None),
            gate: tokio::sync::Mutex::new(()),
            queued: AtomicUsize::new(0),
            made: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failed: Mutex::new(None),
            scripts: AtomicU64::new(0),
        }
    }

    pub(super) fn client(&self) -> &redis::Client {
        &self.client
    }

    fn ready(&self) -> Option<(MultiplexedConnection, u32)> {
        self.current.lock().ok()?.clone()
    }

    /// Takes the gate's turn, in the order requests come (from its first
    /// poll), for a caller that must wait for something before it knows
    /// what to send — what the server offers — without losing its place:
    /// whatever is issued after this waits until the turn is dropped. What
    /// the holder sends runs in [`in_turn`](Self::in_turn).
    pub(super) async fn turn(&self) -> Turn<'_> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let leave = Leave(&self.queued);
        let gate = self.gate.lock().await;
        Turn {
            _gate: gate,
            _leave: leave,
        }
    }

    /// Runs `work` holding `turn`: its requests to this node skip the gate
    /// (which would otherwise wait for `work` itself); the turn is given up
    /// when `work` ends.
    pub(super) async fn in_turn<F: Future>(&self, turn: Turn<'_>, work: F) -> F::Output {
        let output = TURN.scope(self.id(), work).await;
        drop(turn);
        output
    }

    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Whether this task holds this node's turn.
    fn holds_turn(&self) -> bool {
        TURN.try_with(|&id| id == self.id()).unwrap_or(false)
    }

    /// Sends a request: `request` is given the connection and hands the
    /// request to it on its first poll. Requests reach the server in the
    /// order their `send` was first polled, whether the connection exists,
    /// is being made, or is being made anew. A request that fails because
    /// the connection dropped has the next one make a new connection.
    pub(super) async fn send<T, F, Fut>(&self, request: F) -> RedisResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        if self.holds_turn() {
            // The gate is this task's: straight to the connection (made
            // here, if it dropped meanwhile).
            let (conn, generation) = match self.ready() {
                Some(ready) => ready,
                None => Box::pin(self.connect()).await?,
            };
            let reply = unconstrained(request(conn)).await;
            self.check(&reply, generation);
            return reply;
        }
        if self.queued.load(Ordering::SeqCst) == 0
            && let Some((conn, generation)) = self.ready()
        {
            // Unconstrained: a task out of its cooperative budget would
            // otherwise not hand the request over on this first poll, and a
            // later request could go out before it.
            let reply = unconstrained(request(conn)).await;
            self.check(&reply, generation);
            return reply;
        }
        // Boxed: the hot path's future has no room for the gate and the
        // making of a connection.
        Box::pin(self.send_queued(request)).await
    }

    /// [`send`](Self::send) through the gate.
    async fn send_queued<T, F, Fut>(&self, request: F) -> RedisResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let leave = Leave(&self.queued);
        let failures = self.failures.load(Ordering::SeqCst);
        let turn = self.gate.lock().await;
        let (conn, generation) = match self.ready() {
            Some(ready) => ready,
            None if self.failures.load(Ordering::SeqCst) != failures => {
                // An attempt made while this request waited failed.
                return Err(self.last_failure());
            }
            None => Box::pin(self.connect()).await?,
        };
        let mut sending = pin!(unconstrained(request(conn)));
        // The first poll hands the request to the connection's queue (see
        // `PIPELINE_BUFFER`); then the next one may go.
        let first = futures::poll!(sending.as_mut());
        drop(turn);
        drop(leave);
        let reply = match first {
            Poll::Ready(reply) => reply,
            Poll::Pending => sending.await,
        };
        self.check(&reply, generation);
        reply
    }

    /// Makes the connection (at the head of the gate).
    async fn connect(&self) -> RedisResult<(MultiplexedConnection, u32)> {
        if self.tls {
            install_crypto_provider();
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_pipeline_buffer_size(PIPELINE_BUFFER)
            // Every call is bounded by its own deadline instead.
            .set_response_timeout(None);
        match self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(conn) => {
                let made = self.made.fetch_add(1, Ordering::SeqCst) + 1;
                // Wraps after 4 billion reconnects: a generation only has to
                // differ from the one before.
                let generation = made as u32;
                // A new connection may have reached a restarted server: no
                // script is known to be cached there.
                self.scripts
                    .store(u64::from(generation) << 32, Ordering::SeqCst);
                if let Ok(mut current) = self.current.lock() {
                    *current = Some((conn.clone(), generation));
                }
                Ok((conn, generation))
            }
            Err(e) => {
                if let Ok(mut failed) = self.failed.lock() {
                    *failed = Some(e.clone());
                }
                self.failures.fetch_add(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    fn last_failure(&self) -> RedisError {
        self.failed
            .lock()
            .ok()
            .and_then(|failed| failed.clone())
            .unwrap_or_else(|| {
                RedisError::from((redis::ErrorKind::Io, "could not connect to the node"))
            })
    }

    /// Forgets the connection of `generation` if `reply` says it dropped:
    /// the next request makes a new one.
    fn check<T>(&self, reply: &RedisResult<T>, generation: u32) {
        let Err(e) = reply else { return };
        if !(e.is_unrecoverable_error() || e.is_connection_dropped()) {
            return;
        }
        if let Ok(mut current) = self.current.lock()
            && current.as_ref().is_some_and(|(_, g)| *g == generation)
        {
            *current = None;
        }
    }

    /// What is known of the scripts cached where the current connection
    /// leads: pass it to [`is_cached`](Self::is_cached) and, once a script
    /// ran, to [`note_cached`](Self::note_cached).
    pub(super) fn cached(&self) -> u64 {
        self.scripts.load(Ordering::SeqCst)
    }

    /// Whether `bit`'s script is known to be cached, as of `known`.
    pub(super) fn is_cached(known: u64, bit: u32) -> bool {
        known & u64::from(bit) != 0
    }

    /// `bit`'s script ran on the server: it is cached there, if the
    /// connection is still the one of `known` (taken before the request
    /// went out, so the request went out on that connection).
    pub(super) fn note_cached(&self, known: u64, bit: u32) {
        let mut now = self.scripts.load(Ordering::SeqCst);
        while now >> 32 == known >> 32 && now & u64::from(bit) == 0 {
            match self.scripts.compare_exchange_weak(
                now,
                now | u64::from(bit),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(seen) => now = seen,
            }
        }
    }

    /// `bit`'s script is not cached where the current connection leads (a
    /// NOSCRIPT: the server's cache was flushed).
    pub(super) fn forget_cached(&self, bit: u32) {
        self.scripts.fetch_and(!u64::from(bit), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    /// Against a real server: needs the test kit.
    #[cfg(feature = "testkit")]
    mod against_a_server {
        use std::future::Future;
        use std::ops::Range;
        use std::pin::Pin;
        use std::sync::Arc;
        use std::task::Poll;
        use std::time::Duration;

        use redis::Value;
        use tokio::time::Instant;

        use crate::error::NodeError;
        use crate::node::{Deadline, Node, NodeOptions, Resend};
        use crate::testkit::RedisServer;

        type Request = Pin<Box<dyn Future<Output = Result<Value, NodeError>> + Send>>;

        fn deadline() -> Deadline {
            Deadline::from(Instant::now() + Duration::from_secs(10))
        }

        /// Issues `numbers` in order, each a request appending its number to
        /// `key`: each is polled once, in turn, in this task (that is when a
        /// request is issued), then left to a task of its own, as a fan-out's
        /// followers are. Waits for them all.
        async fn append_in_order(node: &Arc<Node>, key: &str, numbers: Range<u32>) {
            let mut requests: Vec<Option<Request>> = numbers
                .map(|i| {
                    let node = node.clone();
                    let mut cmd = redis::cmd("RPUSH");
                    cmd.arg(key).arg(i);
                    let request: Request = Box::pin(async move {
                        node.command(&cmd, &[], Resend::Never, deadline()).await
                    });
                    Some(request)
                })
                .collect();
            std::future::poll_fn(|cx| {
                for slot in &mut requests {
                    if let Some(request) = slot
                        && let Poll::Ready(reply) = request.as_mut().poll(cx)
                    {
                        reply.expect("append");
                        *slot = None;
                    }
                }
                Poll::Ready(())
            })
            .await;
            let tasks: Vec<_> = requests.into_iter().flatten().map(tokio::spawn).collect();
            for task in tasks {
                task.await.expect("task").expect("append");
            }
        }

        async fn appended(node: &Node, key: &str) -> Vec<u32> {
            let mut cmd = redis::cmd("LRANGE");
            cmd.arg(key).arg(0).arg(-1);
            let reply = node
                .command(&cmd, &[], Resend::Never, deadline())
                .await
                .expect("LRANGE");
            redis::from_redis_value(reply).expect("numbers")
        }

        /// A release issued before the node said which native commands it
        /// has (its first request) waits for the answer, but keeps its
        /// place: a grant's request issued after it goes out after it, and
        /// finds the key free.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_step_waiting_for_the_servers_commands_keeps_its_place() {
            let server = RedisServer::start().expect("redis-server");
            let url = server.url();
            let setter = Node::parse(&url, &NodeOptions::default()).expect("node");
            let mut set = redis::cmd("SET");
            set.arg("k").arg("old");
            setter
                .command(&set, &[], Resend::Never, deadline())
                .await
                .expect("SET");
            let node = Arc::new(Node::parse(&url, &NodeOptions::default()).expect("node"));
            assert!(node.capabilities().is_none(), "a fresh node knows nothing");
            let keys: Vec<Arc<str>> = vec!["k".into()];
            let release: Request = {
                let node = node.clone();
                Box::pin(async move {
                    let shape = crate::contract::ShapeRef::LOCK;
                    node.release(&keys, &*shape, "old", None, deadline())
                        .await
                        .map(Value::Boolean)
                })
            };
            let grant: Request = {
                let node = node.clone();
                let mut cmd = redis::cmd("SET");
                cmd.arg("k").arg("new").arg("NX");
                Box::pin(async move { node.command(&cmd, &[], Resend::Never, deadline()).await })
            };
            // Issued in this order: each polled once, release first.
            let mut requests = [Some(release), Some(grant)];
            std::future::poll_fn(|cx| {
                for slot in &mut requests {
                    if let Some(request) = slot
                        && request.as_mut().poll(cx).is_ready()
                    {
                        *slot = None;
                    }
                }
                Poll::Ready(())
            })
            .await;
            let [release, grant] = requests;
            if let Some(release) = release {
                assert_eq!(release.await.expect("release"), Value::Boolean(true));
            }
            if let Some(grant) = grant {
                assert_eq!(
                    grant.await.expect("grant"),
                    Value::Okay,
                    "the release came second"
                );
            }
            let mut get = redis::cmd("GET");
            get.arg("k");
            let now = setter
                .command(&get, &[], Resend::Never, deadline())
                .await
                .expect("GET");
            assert_eq!(now, Value::BulkString(b"new".to_vec()));
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn requests_reach_the_server_in_the_order_they_were_issued() {
            let server = RedisServer::start().expect("redis-server");
            let node = Arc::new(Node::parse(&server.url(), &NodeOptions::default()).expect("node"));
            // The first requests of a fresh node all wait for its connection.
            append_in_order(&node, "order", 0..200).await;
            assert_eq!(appended(&node, "order").await, (0..200).collect::<Vec<_>>());
            // And on the connection made: in order too.
            append_in_order(&node, "again", 0..200).await;
            assert_eq!(appended(&node, "again").await, (0..200).collect::<Vec<_>>());
            // After a restart the connection is made anew: the requests that
            // come once its loss is known queue behind its making, in order.
            server.restart().expect("restart");
            let ping = node
                .command(&redis::cmd("PING"), &[], Resend::Never, deadline())
                .await;
            assert!(ping.is_err(), "the old connection answered: {ping:?}");
            append_in_order(&node, "after", 0..200).await;
            assert_eq!(appended(&node, "after").await, (0..200).collect::<Vec<_>>());
        }
    }
}
