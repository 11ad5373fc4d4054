//! What a node's server can do natively, found from its command table
//! (`COMMAND DOCS`), never from `redis_version` (Valkey 9 reports
//! `redis_version:7.2.4`): compare-and-set (`SET … IFEQ`, Valkey 8.1,
//! Redis 8.4) and compare-and-delete (`DELIFEQ`, Valkey 9.0; `DELEX …
//! IFEQ`, Redis 8.4). A node on a server that has them releases and
//! extends a lock without a script; the value under the key (the token) is
//! the same on every path, so other Redlock clients and older managers
//! still exclude each other.
//!
//! Found once per connection: asked beside the node's first request (on
//! the same connection, so it costs no round trip of its own), and again
//! after the connection dropped, since a node may come back upgraded or
//! downgraded. Until the answer is in, requests take the script path.
//!
//! Split in two, so that `Node` can hold what it knows without a circle
//! of imports: what a server offers and what a node knows of it
//! (`state.rs`, which imports nothing of the node), and here, asking it
//! (`impl Node`).

mod state;

pub(crate) use state::{Capabilities, Known, NativeDelete};

use futures::future::Either;
use std::future::Future;

use redis::Value;

use super::{Backend, Deadline, Node, Resend, within};
use crate::error::NodeError;
use crate::scripts::NativeCommands;

impl Node {
    /// The native commands this node's server offers, once found on its
    /// current connection: `None` while not known yet (the caller takes
    /// the script path), none at all with [`NativeCommands::Never`].
    pub(crate) fn capabilities(&self) -> Option<Capabilities> {
        match self.native_commands {
            NativeCommands::Never => Some(Capabilities::default()),
            _ => self.caps.get(),
        }
    }

    /// The native commands this node's server offers: while they are not
    /// known, asked (or the question in flight awaited, within
    /// `deadline`). `None` if the node did not say in time. For the doctor,
    /// and the steps that depend on them (see
    /// [`with_capabilities`](Self::with_capabilities)).
    ///
    /// The question goes out beside the node's first request (see
    /// [`learning`](Self::learning)), usually an acquire, and is answered
    /// before it, so a release or an extension rarely waits: only one
    /// that comes within a round trip of a (re)connection.
    pub(crate) async fn capabilities_within(&self, deadline: Deadline) -> Option<Capabilities> {
        // Twice at most: a question whose asker gave up is asked again.
        for _ in 0..2 {
            if let Some(caps) = self.capabilities() {
                return Some(caps);
            }
            let answered = self.caps.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if self.caps.claim() {
                self.ask(deadline).await;
            } else if self.caps.asking() {
                let _ = within(deadline, async {
                    answered.await;
                    Ok(())
                })
                .await;
            }
        }
        self.capabilities()
    }

    /// Runs `step` — a release or an extension, whose form depends on the
    /// server's native commands — with what this node offers. Known, at
    /// once. Not known yet (a node's first requests, or the first since its
    /// connection dropped), a standalone node's step waits for the answer
    /// (within `deadline`) holding its place in the node's queue: its
    /// requests reach the server in the order they were issued (see
    /// `node::ordered`), and a step that waited outside would go out behind
    /// requests issued after it — a release behind the next grant's
    /// request, which the node would refuse. A cluster node, whose order is
    /// not kept anyway, just waits. `None` if the node did not say in time:
    /// the step takes its script.
    pub(crate) async fn with_capabilities<T>(
        &self,
        deadline: Deadline,
        step: impl AsyncFnOnce(Option<Capabilities>) -> T,
    ) -> T {
        if let Some(caps) = self.capabilities() {
            return step(Some(caps)).await;
        }
        // Rare (a connection's first requests): boxed, so that the common
        // path's future does not carry this one's size.
        Box::pin(self.learning_for(deadline, step)).await
    }

    /// [`with_capabilities`](Self::with_capabilities) while they are not
    /// known.
    async fn learning_for<T>(
        &self,
        deadline: Deadline,
        step: impl AsyncFnOnce(Option<Capabilities>) -> T,
    ) -> T {
        // A node not asked: no turn to wait for on its connection (it may
        // be reconnecting to a server that does not answer); the step's
        // own requests fail at once. A payment of the node's debts (see
        // `owed`) is the only sender to a node not asked, and to one that
        // is, it goes as soon as it can: no turn either.
        if super::run::paying() {
            return step(self.capabilities_within(deadline).await).await;
        }
        if self.not_asked().is_some() {
            return step(None).await;
        }
        match &self.backend {
            Backend::Standalone(ordered) => {
                match within(deadline, async { Ok(ordered.turn().await) }).await {
                    Ok(turn) => {
                        ordered
                            .in_turn(turn, async {
                                step(self.capabilities_within(deadline).await).await
                            })
                            .await
                    }
                    // Out of time: the step's own requests say so.
                    Err(_) => step(None).await,
                }
            }
            Backend::Cluster(_) => step(self.capabilities_within(deadline).await).await,
        }
    }

    /// Runs `request`, and while this node's capabilities and server are
    /// not known, asks for them beside it on the same connection: the
    /// question goes out first and is answered first, so it costs the
    /// request nothing. The reply counts only once the server is known not
    /// to be one another node reaches (see `identity`).
    pub(super) fn learning<'a, V: 'a>(
        &'a self,
        deadline: Deadline,
        request: impl Future<Output = Result<V, NodeError>> + 'a,
    ) -> impl Future<Output = Result<V, NodeError>> + 'a {
        // Not an `async fn`, which would hold `request` twice (as its
        // argument, and awaited), and the rare case boxed: the common
        // path's future is the request's own. (Asked even where native
        // commands are off: the question also learns the server.)
        if self.caps.get().is_some() && self.identity.settled() {
            return Either::Left(request);
        }
        let both = futures::future::join(self.learn(deadline), request);
        Either::Right(Box::pin(async move {
            let (_, reply) = both.await;
            let reply = reply?;
            // Asked by another request: its answer came before this reply
            // on the connection, but may not have been read into the node
            // yet.
            if !self.identity.settled() {
                self.capabilities_within(deadline).await;
            }
            match self.identity.refusal() {
                Some(refused) => Err(refused),
                None => Ok(reply),
            }
        }))
    }

    /// Asks the server what it offers, unless someone else is asking. A
    /// server that refuses the question (no `COMMAND DOCS` before Redis
    /// 7.0, or a user denied `COMMAND`) offers nothing; one that does not
    /// answer is asked again by a later request.
    async fn learn(&self, deadline: Deadline) {
        if self.caps.claim() {
            self.ask(deadline).await;
        }
    }

    /// Asks, having claimed the question. Whoever waits for the answer is
    /// woken however this ends: answered, failed, or given up (its caller
    /// dropped), when the question is free to be asked again.
    async fn ask(&self, deadline: Deadline) {
        struct Asking<'a>(&'a Known, bool);
        impl Drop for Asking<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.set(None);
                }
            }
        }
        let mut asking = Asking(&self.caps, false);
        let found = match self.question(deadline).await {
            Ok(reply) => Some(Capabilities::from_docs(&reply)),
            Err(NodeError::Redis(e)) if e.kind() != redis::ErrorKind::Io && !e.is_timeout() => {
                if e.is_connection_dropped() || e.is_connection_refusal() {
                    None
                } else {
                    Some(Capabilities::default())
                }
            }
            Err(_) => None,
        };
        if let Some(caps) = found {
            tracing::debug!(node = %self.label, path = %caps.describe(), "native commands found");
        }
        asking.1 = true;
        self.caps.set(found);
    }

    /// Sends the question. On a standalone node `INFO server` goes with
    /// it, in one pipeline, and what it says of the server is recorded
    /// (see `identity`): the answer to the question alone is returned.
    async fn question(&self, deadline: Deadline) -> Result<Value, NodeError> {
        if self.is_cluster() {
            return self
                .send(&Capabilities::question(), &[], Resend::IfDropped, deadline)
                .await;
        }
        let mut pipe = redis::pipe();
        pipe.add_command(Capabilities::question())
            .cmd("INFO")
            .arg("server")
            .ignore_errors();
        let mut replies = self
            .send_pipeline(&pipe, Resend::IfDropped, deadline)
            .await?;
        let (Some(info), Some(docs), true) = (replies.pop(), replies.pop(), replies.is_empty())
        else {
            return Err(NodeError::UnexpectedReply(
                "not two replies to COMMAND DOCS and INFO".to_owned(),
            ));
        };
        if let Some(server) = super::run::describe_server(&info) {
            let _ = self.server.set(server.into());
        }
        self.identified(&info);
        match docs {
            Value::ServerError(error) => Err(NodeError::Redis(error.into())),
            docs => Ok(docs),
        }
    }

    /// Forgets what the server offers, and which server it is, when its
    /// connection dropped: the server that answers next may be another
    /// build, or another server.
    pub(super) fn dropped(&self, error: &redis::RedisError) {
        // Together: the next question learns both (one in flight, whose
        // answer comes on the new connection, records both).
        if (error.is_connection_dropped() || error.is_io_error()) && self.caps.forget() {
            self.identity.forget();
        }
    }
}
