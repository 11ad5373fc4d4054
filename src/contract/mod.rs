//! The contract of a primitive: what a lock, a semaphore, a reader-writer
//! lock, a fair lock or an election describes so that the engine, the
//! guards and `inspect` serve it without knowing which it is.
//!
//! A primitive is a folder (the fair lock, `src/fair/`, is the worked
//! example in docs/contributing.md), one line in the list of primitives
//! (`primitives.rs`) naming its [`Primitive`], and its `pub use` in
//! lib.rs. Here, in this file, is what it describes with no engine in it:
//!
//! - [`Primitive`]: its entry in the list — its scripts (each also a
//!   function of the Functions library), the keys it keeps beside a
//!   resource's key, and what `inspect` reads of it;
//! - [`Shape`]: what a held one is on a node — how a node extends,
//!   restores and releases it (its scripts, keys and arguments, what the
//!   reply means), whether its keys hold just its token (then native
//!   commands and the group commit serve it), and data it carries (a
//!   fenced lock's counter and fence). Renewals, releases, owed releases
//!   and the group commit carry a [`ShapeRef`] and never ask which
//!   primitive it is;
//! - [`Reads`]: what `inspect` reads of it on a node, and how the replies
//!   decode into the node's `Stored`.
//!
//! Two traits that run on the engine are defined beside their runners,
//! because the layers put the engine below every primitive: a primitive
//! implements them in its folder too.
//!
//! - `round::Acquire`: one attempt — what each node is asked (a future on
//!   the node), how its answer votes (`quorum::Rule`), what a grant still
//!   needs once a quorum said yes (`complete`), and the [`Shape`] the
//!   grant holds;
//! - `acquire::call::Acquisition`: one call's attempt as the one retry
//!   loop runs it, and the guard it gives — a typed guard over `LockGuard`
//!   is one `typed_guard!` line.

pub(crate) mod replies;
pub(crate) mod stored;

pub(crate) use replies::{clock, command, held, integer, ours, scored, text, unexpected};

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::keys::Layout;
use crate::request::Ttl;
use crate::scripts::Lua;
use stored::Stored;

/// One primitive, as the list of primitives names it: what the crate
/// keeps of it in one place.
pub(crate) struct Primitive {
    /// Its name, as the docs say it.
    pub(crate) name: &'static str,
    /// Its scripts, each also a function of the Functions library
    /// (`scripts`' tests regenerate the library from every primitive's).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "read by the tests that regenerate the library")
    )]
    pub(crate) scripts: &'static [&'static LazyLock<Lua>],
    /// The keys (and channels) it keeps of its own beside a resource's
    /// key `<key>`, by suffix (`""`: the key itself). No two primitives
    /// keep the same, and `keys.rs`'s table lists each.
    pub(crate) keys: &'static [&'static str],
    /// What a resource it keeps is reported as
    /// ([`Inspection::kind`](crate::Inspection::kind)); a fair lock is a
    /// lock.
    pub(crate) kind: stored::ResourceKind,
    /// What `inspect` reads of it on a node.
    pub(crate) reads: &'static dyn Reads,
    /// A script of its that only reads, if it has one: `Redlock::serves`
    /// runs the first in the list to learn, without writing, whether a
    /// node runs scripts.
    pub(crate) reads_only: Option<ReadOnlyScript>,
}

/// A primitive's script that writes nothing, and the keys it reads for a
/// resource.
#[derive(Clone, Copy)]
pub(crate) struct ReadOnlyScript {
    pub(crate) lua: &'static LazyLock<Lua>,
    pub(crate) keys: fn(&Layout) -> Vec<String>,
}

impl fmt::Debug for ReadOnlyScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyScript")
            .field("function", &self.lua.function)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Primitive")
            .field("name", &self.name)
            .field("keys", &self.keys)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Where a holding's keys keep its token on a node, so that reading them
/// tells whether it is still held there ([`Shape::token_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenAt {
    /// Each key's value is the token, as a string: a lock's, a fair lock's,
    /// a permit's slot, a writer's.
    Value,
    /// The token is a member of the sorted set at each key: a reader's
    /// hold, in the readers' set it shares with every other reader.
    Member,
}

/// What a holding is on the nodes beyond its keys and token: how a node
/// extends (or restores) and releases it. Each primitive implements it
/// beside its commands (a lock's is `ShapeRef::LOCK`); the node runs
/// what it describes, and guards, renewals and releases carry it without
/// knowing which primitive it is.
pub(crate) trait Shape: fmt::Debug + Send + Sync + 'static {
    /// Whether a one-key holding of this shape may go through its node's
    /// group-commit lane as a lock's request (see `node::Lanes::send_or`):
    /// `batch.lua` sets, deletes and extends keys that hold just the
    /// token, as a lock's do (so [`token_keys`](Self::token_keys) too).
    /// Any other shape's release and extension go through the lane too,
    /// as calls of its own scripts ([`release_call`](Self::release_call),
    /// [`extend_keys`](Self::extend_keys) and
    /// [`extend_args`](Self::extend_args), one holding), where the node's
    /// batches are pipelines that carry them.
    fn group_commits(&self) -> bool {
        false
    }

    /// Whether a holding's keys hold just its token, as a lock's do: then
    /// a node with native compare-and-set commands releases it with them
    /// (a token-checked delete per key) and, for one key without a fence,
    /// extends and restores it with them too (see `native.rs`).
    fn token_keys(&self) -> bool {
        false
    }

    /// Where a holding's keys keep its token, if reading them tells
    /// whether it is still held there — whatever its release and extension
    /// touch besides. Then the nodes may watch an auto-extended holding's
    /// keys (`node::Tracking`), and a change to one renews it at once.
    /// Every holding of [`token_keys`](Self::token_keys) as
    /// [`TokenAt::Value`]; others say so themselves.
    fn token_at(&self) -> Option<TokenAt> {
        self.token_keys().then_some(TokenAt::Value)
    }

    /// Whether extending (or restoring) a holding touches its keys alone:
    /// then one of [`token_keys`](Self::token_keys) may be extended in the
    /// group commit's `batch.lua` or natively. A fenced lock's is not: its
    /// restore raises its counter to its fence too.
    fn keys_only(&self) -> bool {
        true
    }

    /// The fence a holding of this shape was granted, which its guard
    /// shows: a fenced lock's. Data of the primitive, carried in its shape;
    /// the engine never reads it.
    fn fence(&self) -> Option<u64> {
        None
    }

    /// The script that extends (or restores) holdings of this shape, many
    /// in one call: holdings whose script is the same (and on a cluster,
    /// whose first key's slot is too) share a call. It answers one status
    /// per holding, in order: 0 refused, 1 extended, 2 restored.
    fn extend_script(&self) -> &'static Lua;

    /// Appends `lock`'s keys in its extension call to `keys` (every
    /// holding's keys come before every holding's arguments).
    fn extend_keys<'a>(&'a self, lock: &Extension<'a>, keys: &mut Vec<&'a str>);

    /// Writes `lock`'s arguments in its extension call.
    fn extend_args(&self, lock: &Extension<'_>, cmd: &mut Cmd);

    /// The script of the token-checked release.
    fn release_script(&self) -> &'static Lua;

    /// Writes the release call's arguments: `numkeys`, the keys, the
    /// arguments.
    fn release_call(&self, release: &Release<'_>, cmd: &mut Cmd);

    /// Whether the node released: `reply` is the release script's.
    fn released(&self, release: &Release<'_>, reply: &Value) -> Result<bool, NodeError>;
}

/// A holding's [`Shape`], cheap to clone: a lock's is a static (nothing
/// allocated per lock), a primitive with keys of its own shares them.
#[derive(Clone)]
pub(crate) enum ShapeRef {
    Static(&'static dyn Shape),
    Shared(Arc<dyn Shape>),
}

impl Deref for ShapeRef {
    type Target = dyn Shape;

    fn deref(&self) -> &(dyn Shape + 'static) {
        match self {
            Self::Static(shape) => *shape,
            Self::Shared(shape) => &**shape,
        }
    }
}

impl fmt::Debug for ShapeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<S: Shape> From<Arc<S>> for ShapeRef {
    fn from(shape: Arc<S>) -> Self {
        Self::Shared(shape)
    }
}

/// One holding to extend on a node: its keys, token and new ttl, and what
/// it is (a fenced lock's counter and fence are its shape's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extension<'a> {
    pub(crate) keys: &'a [Arc<str>],
    pub(crate) token: &'a str,
    pub(crate) ttl: Ttl,
    pub(crate) shape: &'a dyn Shape,
}

/// One token-checked release on a node: the holding's keys and token, and
/// the id its release is announced with, if any (each key's release on its
/// [`channel`](crate::request::channel)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Release<'a> {
    pub(crate) keys: &'a [Arc<str>],
    pub(crate) token: &'a str,
    pub(crate) announce: Option<&'a str>,
}

/// One primitive's reads for an inspection: plain read commands (nothing
/// is ever written), and their replies decoded into what the node keeps of
/// the primitive, in the node's [`Stored`] (the public type `inspect`
/// shows, in the roles the primitive plays there; one that keeps
/// something no primitive kept before adds a role). `inspect` sends every primitive's [`reads`] at once,
/// then every second step's at once, and each primitive decodes only its
/// own replies.
///
/// [`reads`]: Self::reads
pub(crate) trait Reads: Sync + fmt::Debug {
    /// The first reads, sent with every other primitive's at once.
    fn reads(&self, layout: &Layout) -> Vec<Cmd>;

    /// The replies to [`reads`](Self::reads), in their order, kept in
    /// `stored`. Returns the second step's reads, which depend on them
    /// (none, mostly).
    fn decode(
        &self,
        layout: &Layout,
        replies: Replies,
        stored: &mut Stored,
    ) -> Result<Vec<Cmd>, NodeError>;

    /// The replies to the second step's reads, in their order, kept in
    /// `stored`. Only called when [`decode`](Self::decode) asked for more.
    fn decode_more(&self, replies: Replies, stored: &mut Stored) -> Result<(), NodeError> {
        let _ = (replies, stored);
        Ok(())
    }

    /// Whether a node's `stored` keeps something of this primitive (so
    /// the resource is used as its kind).
    fn found(&self, stored: &Stored) -> bool;

    /// The keys a resource of this primitive keeps on a node
    /// ([`Inspection::keys_for`](crate::Inspection::keys_for)), given the
    /// count most nodes keep ([`Stored`]'s count role), if any.
    fn keys(&self, layout: &Layout, count: Option<u32>) -> Vec<String>;
}

/// One primitive's replies, taken in the order of its commands.
#[derive(Debug)]
pub(crate) struct Replies(std::vec::IntoIter<Result<Value, NodeError>>);

impl Replies {
    /// The replies to a primitive's commands, in their order.
    pub(crate) fn new(replies: Vec<Result<Value, NodeError>>) -> Self {
        Self(replies.into_iter())
    }

    /// The next reply; an error if there is none.
    pub(crate) fn next(&mut self) -> Result<Value, NodeError> {
        self.0
            .next()
            .unwrap_or_else(|| Err(NodeError::UnexpectedReply("a reply is missing".to_owned())))
    }

    /// How many replies are left to take.
    pub(crate) fn left(&self) -> usize {
        self.0.len()
    }
}
