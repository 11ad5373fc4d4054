//! The contract of a primitive: what a lock, a semaphore, a reader-writer
//! lock, a fair lock or an election describes so that the engine, the
//! guards and `inspect` serve it without knowing which it is.
//!
//! A primitive is a folder (`src/fair/` is the worked example, in
//! docs/contributing.md) and one line in the list of primitives
//! (`primitives.rs`), which names its [`Primitive`]: its scripts and what
//! [`Redlock::inspect`](crate::Redlock::inspect) reads of it ([`Reads`]).
//! Beside those, in its folder, it implements the engine's side of the
//! contract, defined where the engine runs it (the layers put each trait
//! beside its runner, below the primitives):
//!
//! - `round::Acquire`: one attempt — what each node is asked, how its
//!   answer votes (`quorum::Rule`), what a grant still needs, and the
//!   shape the grant holds;
//! - `node::Shape`: how a node extends, restores and releases what it
//!   holds (so renewals, releases, owed releases and the group commit
//!   carry it unknown);
//! - `redlock::Acquisition`: one call's attempt and its guard, run by the
//!   one retry loop;
//! - its typed guard, one `typed_guard!` line over `LockGuard`.

pub(crate) mod replies;

pub(crate) use replies::{clock, command, held, integer, ours, scored, text, unexpected};

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::keys::Layout;
use crate::scripts::Lua;

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
    /// What `inspect` reads of it on a node.
    pub(crate) reads: &'static dyn Reads,
}

impl fmt::Debug for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Primitive")
            .field("name", &self.name)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// One primitive's reads for an inspection: plain read commands (nothing
/// is ever written), and their replies decoded into what the node keeps
/// of the primitive. `inspect` sends every primitive's [`reads`] at once,
/// then every [`Decoded::more`] at once, and each primitive decodes only
/// its own replies.
///
/// [`reads`]: Self::reads
pub(crate) trait Reads: Sync {
    /// The first reads, sent with every other primitive's at once.
    fn reads(&self, layout: &Layout) -> Vec<Cmd>;

    /// The replies to [`reads`](Self::reads), in their order: what the
    /// node keeps, and the reads that depend on it.
    fn decode(&self, layout: &Layout, replies: Replies) -> Result<Decoded, NodeError>;

    /// The replies to [`Decoded::more`], in their order. Only called when
    /// [`decode`](Self::decode) asked for more; none by default.
    fn decode_more(&self, replies: Replies) -> Result<Vec<Kept>, NodeError> {
        let _ = replies;
        Ok(Vec::new())
    }
}

/// A primitive's first replies decoded: what the node keeps of it, and
/// the reads a second step sends once these are known (none, mostly).
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    /// What the node keeps of the primitive, so far.
    pub(crate) kept: Vec<Kept>,
    /// The second step's reads, decoded by [`Reads::decode_more`].
    pub(crate) more: Vec<Cmd>,
}

/// One thing a node keeps under a resource's keys, as plain data: what
/// `inspect` shows in its `Stored`, field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kept {
    /// The lock's key (an election's too): its holder.
    Lock(Held),
    /// The Redis type of the lock's key, when it is not a string.
    OtherType(String),
    /// A fenced lock's (or an election's term) counter.
    Fence(u64),
    /// An election's leader value, all four fields of it.
    Leader {
        /// The token of the leader that proclaimed it.
        token: Arc<str>,
        /// The leader's term.
        term: u64,
        /// Which of the term's values it is.
        revision: u64,
        /// The value.
        value: String,
    },
    /// A semaphore's permit count (never 0).
    PermitCount(u32),
    /// A semaphore's permit held, by slot.
    Permit {
        /// The permit's slot.
        slot: u32,
        /// Its holder.
        held: Held,
    },
    /// A reader-writer lock's writer.
    Writer(Held),
    /// One of a reader-writer lock's readers, not expired.
    Reader(Held),
    /// A writer waits for a reader-writer lock's readers to leave.
    WriterWaiting,
    /// How many waiters stand in a fair lock's line, their lease not ended.
    InLine(usize),
}

/// A token a key keeps, and for how long (`None`: no expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// The token, in full: `inspect` never shows it so.
    pub(crate) token: Arc<str>,
    /// How long the node keeps it.
    pub(crate) ttl: Option<Duration>,
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
