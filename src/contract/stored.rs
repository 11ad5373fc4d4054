//! The public data of an inspection: what a node keeps under a name
//! ([`Stored`] and the holders in it), each node's state, the claims, and
//! the verdict. Plain data, and part of the contract: each primitive's
//! reads ([`Reads`](super::Reads)) decode into a [`Stored`]; `inspect`
//! judges it and shows it in an [`Inspection`](crate::Inspection).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::NodeError;
use crate::token::Token;

/// Whether a quorum holds a resource: the [`verdict`](crate::Inspection::verdict)
/// of an [`Inspection`](crate::Inspection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// A quorum of nodes holds a token of it: a lock's holder, a permit's,
    /// a writer or a reader ([`Inspection::confirmed`](crate::Inspection::confirmed)).
    Held,
    /// No token can be on a quorum, even if every node that failed held
    /// it.
    Free,
    /// The nodes that failed could make it held or free: too few answered
    /// to tell.
    Unknown,
}

/// What a resource name is used as ([`Inspection::kind`](crate::Inspection::kind)):
/// [`ResourceKind::Lock`], [`Semaphore`](ResourceKind::Semaphore),
/// [`RwLock`](ResourceKind::RwLock) or [`Election`](ResourceKind::Election).
/// Each primitive declares its own kind beside its reads (a fair lock's is
/// a lock's), so the kinds are constants rather than an enum's variants;
/// compare and match them as before:
///
/// ```
/// use quorumlock::ResourceKind;
///
/// fn what(kind: ResourceKind) -> &'static str {
///     match kind {
///         ResourceKind::Semaphore => "permits",
///         ResourceKind::RwLock => "readers and a writer",
///         _ => "one holder",
///     }
/// }
/// assert_eq!(what(ResourceKind::Semaphore), "permits");
/// assert_eq!(format!("{:?}", ResourceKind::Lock), "Lock");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceKind(&'static str);

impl ResourceKind {
    /// A kind named as its constant is.
    pub(crate) const fn named(name: &'static str) -> Self {
        Self(name)
    }

    /// Its name, as its constant's: `Lock`, `Semaphore`, `RwLock`, `Election`.
    pub fn name(&self) -> &'static str {
        self.0
    }
}

impl fmt::Debug for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// One node of an [`Inspection`](crate::Inspection): its label and its answer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InspectedNode {
    pub(crate) node: Arc<str>,
    pub(crate) state: NodeState,
    pub(crate) path: Option<String>,
}

impl InspectedNode {
    /// The node, as [`Redlock::nodes`](crate::Redlock::nodes) names it (never with credentials).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// How this manager releases and extends plain locks on the node:
    /// `release DELIFEQ, extend SET IFEQ` where its server has native
    /// commands (see [`NativeCommands`](crate::NativeCommands)), `release
    /// script, extend script` where it has not; `None` if the node had not
    /// said when the inspection was decided.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// What it answered.
    pub fn state(&self) -> &NodeState {
        &self.state
    }
}

/// What one node answered an [`Inspection`](crate::Inspection).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeState {
    /// What it keeps under the name.
    Answered(Stored),
    /// It failed, timed out, or was not waited for.
    Failed(NodeError),
    /// Its answer could not change the verdict and had not come when the
    /// inspection was made: [`Inspection::settled`](crate::Inspection::settled) waits for it.
    Pending,
}

/// What one node keeps under a resource name. Plain reads, not atomic
/// together: each as the node kept it at about the same moment.
///
/// Its fields are roles, not primitives: each primitive's reads keep what
/// they find in the roles it plays (a semaphore's permits are slots and
/// its permit count the count; a reader-writer lock's writer is the
/// exclusive holder, its readers the shared ones), and each primitive
/// names them in its own accessors ([`permits`](Self::permits),
/// [`writer`](Self::writer), [`leader`](Self::leader), …), defined beside
/// its reads. A new primitive that fits these roles changes nothing here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stored {
    /// The holder of the resource's own key (a lock's, an election's).
    pub(crate) lock: Option<Holder>,
    pub(crate) other_type: Option<String>,
    pub(crate) fence: Option<u64>,
    /// A value kept beside the lock (an election's leader value).
    pub(crate) value: Option<Proclaimed>,
    /// A count the nodes keep while a slot is held (a semaphore's permits).
    pub(crate) count: Option<u32>,
    /// Numbered slots' holders (a semaphore's permits).
    pub(crate) slots: Vec<HeldPermit>,
    /// An exclusive holder beside shared ones (a reader-writer lock's writer).
    pub(crate) exclusive: Option<Holder>,
    /// Shared holders (a reader-writer lock's readers).
    pub(crate) shared: Vec<Holder>,
    /// A waiting exclusive holder's mark (a writer waiting for the readers).
    pub(crate) waiting: bool,
    /// How many waiters stand in a line (a fair lock's).
    pub(crate) in_line: usize,
}

impl Stored {
    /// Whether the node keeps nothing of quorumlock's under the name.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The lock's holder: the token its key keeps.
    pub fn lock(&self) -> Option<&Holder> {
        self.lock.as_ref()
    }

    /// The Redis type of the lock's key when it is not a string (`hash`,
    /// `list`, …): then it is not a lock, and no lock of the name can be
    /// granted on this node.
    pub fn other_type(&self) -> Option<&str> {
        self.other_type.as_deref()
    }

    /// A fenced lock's (or an election's term) counter: the largest fence
    /// this node granted. It never expires.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Every token this node holds, by what it holds.
    pub(crate) fn claims(&self) -> impl Iterator<Item = (Claimed, &Holder)> {
        self.lock
            .iter()
            .map(|h| (Claimed::Lock, h))
            .chain(
                self.slots
                    .iter()
                    .map(|p| (Claimed::Permit(p.slot), &p.holder)),
            )
            .chain(self.exclusive.iter().map(|h| (Claimed::Writer, h)))
            .chain(self.shared.iter().map(|h| (Claimed::Reader, h)))
    }
}

/// A token a node keeps, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    pub(crate) token: SeenToken,
    pub(crate) ttl: Option<Duration>,
}

impl Holder {
    /// The holder's token (shown by its first characters only).
    pub fn token(&self) -> &SeenToken {
        &self.token
    }

    /// How long the node keeps it; `None` when it never expires there.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

/// A numbered slot held on a node: a semaphore's permit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermit {
    pub(crate) slot: u32,
    pub(crate) holder: Holder,
}

impl HeldPermit {
    /// The permit's slot: `0 ≤ slot <` the permit count.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Its holder.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

/// An election's leader value, as a node keeps it beside the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Proclaimed {
    pub(crate) token: SeenToken,
    pub(crate) term: u64,
    pub(crate) revision: u64,
    pub(crate) value: String,
}

impl Proclaimed {
    /// The token of the leader that proclaimed it.
    pub fn token(&self) -> &SeenToken {
        &self.token
    }

    /// The leader's term: its fencing token.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Which of the leader's values it is: each new value proclaimed in a
    /// term has the next revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The value.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// A token as a node keeps it, never shown in full: `Display` and `Debug`
/// show its first four characters — enough to tell grants apart, too
/// little to release or extend someone else's lock. Two are equal when
/// the tokens are; [`is`](Self::is) tells whether it is a token of yours.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SeenToken(pub(crate) Arc<str>);

impl SeenToken {
    /// Its first four characters (all of it, if shorter).
    pub fn prefix(&self) -> &str {
        match self.0.char_indices().nth(4) {
            Some((end, _)) => &self.0[..end],
            None => &self.0,
        }
    }

    /// Whether this is `token`.
    pub fn is(&self, token: &Token) -> bool {
        *self.0 == *token.as_str()
    }
}

impl fmt::Display for SeenToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.prefix())
    }
}

impl fmt::Debug for SeenToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeenToken({}…)", self.prefix())
    }
}

/// What a token holds ([`Claim::what`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Claimed {
    /// The lock (or an election's lock).
    Lock,
    /// A semaphore's permit, by slot.
    Permit(u32),
    /// A reader-writer lock's writer.
    Writer,
    /// One of a reader-writer lock's readers.
    Reader,
}

/// One token, what it holds, and on how many nodes ([`Inspection::claims`](crate::Inspection::claims)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claim {
    pub(crate) what: Claimed,
    pub(crate) token: SeenToken,
    pub(crate) nodes: usize,
    pub(crate) ttl: Option<Duration>,
    pub(crate) confirmed: bool,
}

impl Claim {
    /// What the token holds.
    pub fn what(&self) -> Claimed {
        self.what
    }

    /// The token.
    pub fn token(&self) -> &SeenToken {
        &self.token
    }

    /// How many nodes that answered hold it.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Whether a quorum of nodes holds it.
    pub fn is_confirmed(&self) -> bool {
        self.confirmed
    }

    /// For a confirmed claim, how long a quorum keeps holding it at most:
    /// the quorum-th longest of the ttls of the nodes that hold it. `None`
    /// when it is not confirmed, or some node keeps it without expiry.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_show_four_characters() {
        let seen = SeenToken("0123456789abcdef".into());
        assert_eq!(seen.to_string(), "0123…");
        assert_eq!(format!("{seen:?}"), "SeenToken(0123…)");
        assert_eq!(SeenToken("ab".into()).to_string(), "ab…");
        assert_eq!(SeenToken("äöüßx".into()).prefix(), "äöüß");
        let real = Token::generate().expect("random source");
        assert!(SeenToken(real.as_str().into()).is(&real));
        assert!(!seen.is(&real));
    }
}
