//! A reader-writer lock over the quorum: [`RwLock`], many readers or one
//! writer. A thin entry point: reading and writing are each a description
//! on the round engine ([`RwAttempt`]) with their own scripts; holding,
//! extending and releasing are the lock's. Each of its requests goes
//! through the node's lane (`node::Lanes::call_or`, and for releases and
//! extensions `send_or`): in a pipeline with the node's other requests
//! where the node's batches are pipelines, else alone.
//!
//! The whole primitive is in this folder: here its public API and its
//! description on the engine; in `node.rs` what it asks a node (the
//! acquire, and a hold's [`Shape`](crate::contract::Shape) for extending and
//! releasing it); its scripts beside them (`acquire.lua`, `extend.lua`,
//! `release.lua`); and in `inspect.rs` what [`Redlock::inspect`] reads of
//! it.

pub(crate) mod inspect;
mod keys;
pub(crate) mod node;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::contract::Primitive;
use crate::error::{Error, NodeError};
use futures::FutureExt;

use self::keys::{READERS_SUFFIX, WRITER_SUFFIX, WRITER_WAITING_SUFFIX};
use crate::acquire::call::{Acquisition, Attempts, Manager};
use crate::contract::ShapeRef;
use crate::holding::guard::LockGuard;
use crate::holding::lease::Lease;
use crate::redlock::Redlock;
use crate::request::{Keys, Target, Ttl};
use crate::round::{Acquire, NodeCall};
use crate::token::Token;

/// The reader-writer lock in the list of primitives.
pub(crate) static PRIMITIVE: Primitive = Primitive {
    name: "reader-writer lock",
    scripts: &[&node::ACQUIRE, &node::EXTEND, &node::RELEASE],
    keys: &[WRITER_SUFFIX, READERS_SUFFIX, WRITER_WAITING_SUFFIX],
    kind: crate::contract::stored::ResourceKind::RwLock,
    reads: &inspect::RwLockReads,
    reads_only: None,
};

use self::node::{RwKeys, RwShape, acquire_hold, hold_reply, prepare_hold};

impl Redlock {
    /// The reader-writer lock called `name`, on this manager's nodes: see
    /// [`RwLock`]. No I/O; the name is checked by the calls that use it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let catalog = locks.rwlock("catalog");
    /// let reading = catalog.read(Duration::from_secs(10)).await?;
    /// // … many readers at once, never beside a writer …
    /// reading.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rwlock(&self, name: &str) -> RwLock {
        RwLock {
            locks: self.clone(),
            name: name.into(),
        }
    }
}

/// A reader-writer lock among the clients of the same nodes: any number of
/// readers at once, or one writer alone. Each hold is a [`ReadGuard`] or a
/// [`WriteGuard`], held as a [`LockGuard`] is (ttl,
/// `extend`, `auto_extend`, `lost()`, `release` with per-node outcome,
/// released in the background when dropped).
///
/// # How it works, and why readers and writers exclude each other
///
/// Each node keeps a writer key (`<key>:writer`, the writer's token, with
/// a ttl) and the readers (`<key>:readers`, a sorted set of tokens scored
/// with their expiries by the node's own clock; expired readers are
/// removed before every decision). A node admits a reader where no writer
/// holds, and a writer where no writer holds and no reader is live. Like
/// the lock, a hold needs a majority of nodes within its validity (the ttl
/// less the time spent and the drift allowance). A reader's majority and a
/// writer's majority share a node, which admitted only one of them while
/// the other was live; two writers' majorities likewise. So, under the
/// lock's assumptions (see the crate docs), no writer ever holds beside a
/// reader or another writer, while readers share. The protocol model in
/// `tests/model` checks this, and that it breaks when a node admits a
/// writer beside a reader.
///
/// # Writers are not starved
///
/// A writer that a node refuses only because readers are live leaves a mark
/// there (`<key>:writer-waiting`), and the node admits no new reader while
/// the mark lives: the readers present finish (or their ttl passes) and the
/// writer gets in. The mark lives for the writer's ttl after each of its
/// attempts, and goes when that writer is admitted; a writer that gives up
/// (or whose process dies) blocks new readers for at most its ttl. Readers
/// already holding keep renewing; a writer waits at most until they are
/// done.
///
/// # Redis Cluster
///
/// All keys of one lock must share a hash slot: use a hash-tagged name
/// such as `{catalog}`. Others are refused before any I/O.
///
/// Holds carry no fencing token.
#[derive(Debug, Clone)]
pub struct RwLock {
    locks: Redlock,
    name: Arc<str>,
}

/// Reading or writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

impl RwLock {
    /// The lock's name (its key, before the manager's prefix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the lock for reading, retrying with the manager's [retry
    /// policy](crate::Retry) while a writer holds it or waits for it.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: [`Error::InvalidArgument`] (an empty name, a
    /// bad ttl, a name without hash tag on a Redis Cluster),
    /// [`Error::Contended`], [`Error::Unavailable`],
    /// [`Error::ValidityExpired`], [`Error::WaitTimeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Redlock::lock`] is.
    pub fn read(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<ReadGuard, Error>> + Send + use<> {
        self.acquiring(Mode::Read, ttl, Attempts::PerPolicy, "wait")
            .map(|held| held.map(ReadGuard::new))
    }

    /// Takes the lock for writing, retrying with the manager's retry policy
    /// while readers or another writer hold it; see *Writers are not
    /// starved*.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Redlock::lock`] is. The writer's mark expires by
    /// itself.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let writing = locks.rwlock("catalog").write(Duration::from_secs(10)).await?;
    /// // … alone: no reader, no other writer …
    /// writing.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<WriteGuard, Error>> + Send + use<> {
        self.acquiring(Mode::Write, ttl, Attempts::PerPolicy, "wait")
            .map(|held| held.map(WriteGuard::new))
    }

    /// One attempt to read: [`Error::Contended`] at once while a writer
    /// holds or waits.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), without the wait.
    pub fn try_read(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<ReadGuard, Error>> + Send + use<> {
        self.acquiring(Mode::Read, ttl, Attempts::Once, "try")
            .map(|held| held.map(ReadGuard::new))
    }

    /// One attempt to write: [`Error::Contended`] at once while readers or
    /// a writer hold (a refusal because of readers still leaves the
    /// writer's mark, for the writer's ttl).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), without the wait.
    pub fn try_write(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<WriteGuard, Error>> + Send + use<> {
        self.acquiring(Mode::Write, ttl, Attempts::Once, "try")
            .map(|held| held.map(WriteGuard::new))
    }

    /// Runs `work` while reading: acquires, auto-extends, releases when it
    /// completes — as [`Redlock::with_lock`] does for a lock.
    ///
    /// # Errors
    ///
    /// Those of [`read`](Self::read), and [`Error::Lost`] when the hold was
    /// lost before `work` completed (`work` is then dropped).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn render() -> String { String::new() }
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let page = locks
    ///     .rwlock("catalog")
    ///     .with_read(Duration::from_secs(10), |_lease| render())
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_read<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.read(ttl).await?;
        self.locks.hold_while(guard.into(), work).await
    }

    /// Runs `work` while writing: acquires, auto-extends, releases when it
    /// completes.
    ///
    /// # Errors
    ///
    /// As [`with_read`](Self::with_read).
    pub async fn with_write<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.write(ttl).await?;
        self.locks.hold_while(guard.into(), work).await
    }

    /// Reading or writing, with the attempts `attempts` allows, named `op`
    /// in the tracing span.
    fn acquiring(
        &self,
        mode: Mode,
        ttl: Duration,
        attempts: Attempts,
        op: &'static str,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.locks.acquire(self.request(mode, ttl), attempts, op)
    }

    /// Validates the name and `ttl` into a request. No I/O.
    fn request(&self, mode: Mode, ttl: Duration) -> Result<RwAttempt, Error> {
        let limits = self.locks.limits();
        let key = limits.key(&self.name)?;
        let ttl = Ttl::new(ttl, limits.drift_factor)?;
        let rw = RwKeys {
            writer: Arc::from(format!("{key}{WRITER_SUFFIX}")),
            readers: Arc::from(format!("{key}{READERS_SUFFIX}")),
            waiting: Arc::from(format!("{key}{WRITER_WAITING_SUFFIX}")),
            waiter: Arc::from(Token::generate()?.as_str()),
        };
        limits.one_slot(&[&rw.writer, &rw.readers, &rw.waiting])?;
        let held = match mode {
            Mode::Read => rw.readers.clone(),
            Mode::Write => rw.writer.clone(),
        };
        let read = mode == Mode::Read;
        // A failed attempt's cleanup leaves the call's mark alone: the
        // call still waits (an id that is no mark's).
        let failed = Arc::new(RwShape {
            rw: RwKeys {
                waiter: Arc::from(""),
                ..rw.clone()
            },
            read,
        });
        Ok(RwAttempt {
            target: Target {
                resource: self.name.clone(),
                keys: Arc::from([held]),
                ttl,
            },
            shape: Arc::new(RwShape { rw, read }),
            failed,
            mode,
        })
    }
}

fn span(request: &RwAttempt, op: &'static str) -> tracing::Span {
    tracing::debug_span!(
        "quorumlock",
        op,
        rwlock = %request.target.resource,
        mode = ?request.mode,
        ttl_ms = request.target.ttl.ms()
    )
}

impl Acquisition for RwAttempt {
    type Guard = LockGuard;

    fn resource(&self) -> &str {
        &self.target.resource
    }

    /// Woken by a writer's release (a reader or writer may then get in)
    /// and by a reader's (a writer may).
    fn wake_keys(&self) -> Keys {
        let rw = &self.shape.rw;
        Arc::from([rw.writer.clone(), rw.readers.clone()])
    }

    fn span(&self, op: &'static str) -> tracing::Span {
        span(self, op)
    }

    fn attempt(
        &self,
        manager: &Arc<Manager>,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send {
        manager.attempt(self)
    }
}

/// A validated read or write request: one attempt at a time on the round
/// engine, the same request for every attempt of one call (so a waiting
/// writer's mark keeps its id).
#[derive(Debug)]
struct RwAttempt {
    /// The lock's name, the ttl, and what a hold is found under: the
    /// readers key or the writer key.
    target: Target,
    /// Its keys and mode.
    shape: Arc<RwShape>,
    /// The same, without the writer's id: what a failed attempt's cleanup
    /// releases, keeping the mark of a writer whose call still waits.
    failed: Arc<RwShape>,
    mode: Mode,
}

impl Acquire for RwAttempt {
    type Answer = bool;

    fn target(&self) -> &Target {
        &self.target
    }

    fn shape(&self) -> ShapeRef {
        self.shape.clone().into()
    }

    /// The writer's attempt was refused (readers still hold, most
    /// likely) and its call waits on: the mark stays, or new readers
    /// would get in on the nodes its cleanup reached.
    fn failed_shape(&self) -> ShapeRef {
        self.failed.clone().into()
    }

    fn call(
        &self,
        call: NodeCall,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static + use<> {
        let (shape, ttl) = (self.shape.clone(), self.target.ttl);
        async move {
            let (server, token) = (call.server()?, &call.token);
            let deadline = call.deadline;
            // The writer's mark outlives its attempt by a ttl: long enough
            // for its next attempt to refresh it. With whatever else is
            // bound for the node meanwhile, where the node's batches carry
            // it (see `Lanes::call_or`).
            let prepare = || prepare_hold(&shape, token, ttl, ttl);
            let alone =
                async || acquire_hold(server, &shape, token.as_str(), ttl, ttl, deadline).await;
            let lanes = call.core.lanes();
            lanes
                .call_or(call.node, deadline, prepare, hold_reply, alone)
                .await
        }
    }
}

crate::holding::guard::typed_guard!(
    /// A reader's share of an [`RwLock`](crate::RwLock), from
    /// [`read`](crate::RwLock::read) or [`try_read`](crate::RwLock::try_read).
    /// Other readers may hold it too; no writer does.
    ReadGuard,
    "read guard"
);

crate::holding::guard::typed_guard!(
    /// The writer's hold on an [`RwLock`](crate::RwLock), from
    /// [`write`](crate::RwLock::write) or
    /// [`try_write`](crate::RwLock::try_write): no reader or other writer
    /// holds it.
    WriteGuard,
    "write guard"
);
