//! The key layout, in one place: the names of the Redis keys and channels
//! that quorumlock keeps beside a resource's key (`<prefix><name>`), for
//! every primitive. The primitives form their keys from these, and
//! [`Redlock::inspect`](crate::Redlock::inspect) reads them back.
//!
//! | name | what |
//! | --- | --- |
//! | `<key>` | a lock (or an election's lock): its holder's token |
//! | `<key>:fence` | a fenced lock's (or an election's term) counter; never expires |
//! | `<key>:fence:mark` | which call last raised that counter, to which value; the lock's ttl |
//! | `<key>:released` | the channel a release announces on |
//! | `<key>:leader` | an election's leader value: a hash of token, term, rev, value |
//! | `<key>:elected` | the channel an election's new values are announced on |
//! | `<key>:permits` | a semaphore's permit count, while a permit is held |
//! | `<key>:permit:<i>` | a semaphore's permit `i`: its holder's token |
//! | `<key>:writer` | a reader-writer lock's writer: its token |
//! | `<key>:readers` | a reader-writer lock's readers: tokens scored with expiries |
//! | `<key>:writer-waiting` | the mark of a writer waiting for the readers to leave |
//! | `<key>:queue` | a fair lock's line: waiter ids scored with their tickets |
//! | `<key>:queue:leases` | a fair lock's waiters' ids scored with their leases' ends |
//! | `<key>:queue:ticket` | a fair lock's ticket counter |
//! | `<key>:turn` | the channel a fair lock's release tells the next waiter on |

/// Appended to a lock's key to form its fence counter's key.
pub(crate) const FENCE_SUFFIX: &str = ":fence";

/// Appended to a lock's key to form its fence counter's mark: which call
/// last raised the counter, and to which value (a hash of the call's id and
/// the value, with the lock's ttl), so that the call's retries reuse that value.
pub(crate) const FENCE_MARK_SUFFIX: &str = ":fence:mark";

/// Appended to a lock's key to form the channel its releases announce on.
pub(crate) const RELEASED_SUFFIX: &str = ":released";

/// Appended to an election's lock key to form the key of the leader's
/// value (a hash: token, term, revision, value).
pub(crate) const LEADER_SUFFIX: &str = ":leader";

/// Appended to an election's lock key to form the channel on which nodes
/// announce a stored value (a new leader's, or a new revision), when the
/// manager announces releases
/// ([`WakeOnRelease::Subscribe`](crate::WakeOnRelease::Subscribe)).
pub(crate) const ELECTED_SUFFIX: &str = ":elected";

/// Between a semaphore's key and a permit's number: permit `i` of the
/// semaphore `<key>` is the lock `<key>:permit:<i>`.
pub(crate) const PERMIT_INFIX: &str = ":permit:";

/// Appended to a semaphore's key to form its limit key, which holds the
/// permit count on a node while any permit is held there.
pub(crate) const PERMITS_SUFFIX: &str = ":permits";

/// Appended to a reader-writer lock's key to form its writer key.
pub(crate) const WRITER_SUFFIX: &str = ":writer";

/// Appended to a reader-writer lock's key to form its readers key (a
/// sorted set of the readers' tokens, scored with their expiries).
pub(crate) const READERS_SUFFIX: &str = ":readers";

/// Appended to a reader-writer lock's key to form the mark of a writer
/// waiting for the readers to leave.
pub(crate) const WRITER_WAITING_SUFFIX: &str = ":writer-waiting";

/// Appended to a fair lock's key to form its line: a sorted set of the
/// waiters' ids, scored with their tickets.
pub(crate) const QUEUE_SUFFIX: &str = ":queue";

/// Appended to a fair lock's key to form its waiters' leases: a sorted set
/// of their ids, scored with when each lease ends (ms, by the node's clock).
pub(crate) const QUEUE_LEASES_SUFFIX: &str = ":queue:leases";

/// Appended to a fair lock's key to form its ticket counter.
pub(crate) const QUEUE_TICKET_SUFFIX: &str = ":queue:ticket";

/// Appended to a fair lock's key to form the channel on which a release
/// tells the waiter first in line that its turn came.
pub(crate) const TURN_SUFFIX: &str = ":turn";

/// Every key a resource's key may have beside it, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The resource's key: the prefix and the name.
    pub(crate) key: String,
}

impl Layout {
    pub(crate) fn new(key: String) -> Self {
        Self { key }
    }

    fn beside(&self, suffix: &str) -> String {
        let mut name = String::with_capacity(self.key.len() + suffix.len());
        name.push_str(&self.key);
        name.push_str(suffix);
        name
    }

    pub(crate) fn fence(&self) -> String {
        self.beside(FENCE_SUFFIX)
    }

    pub(crate) fn leader(&self) -> String {
        self.beside(LEADER_SUFFIX)
    }

    pub(crate) fn permits(&self) -> String {
        self.beside(PERMITS_SUFFIX)
    }

    pub(crate) fn permit(&self, slot: u32) -> String {
        format!("{}{PERMIT_INFIX}{slot}", self.key)
    }

    pub(crate) fn writer(&self) -> String {
        self.beside(WRITER_SUFFIX)
    }

    pub(crate) fn readers(&self) -> String {
        self.beside(READERS_SUFFIX)
    }

    pub(crate) fn writer_waiting(&self) -> String {
        self.beside(WRITER_WAITING_SUFFIX)
    }

    pub(crate) fn queue(&self) -> String {
        self.beside(QUEUE_SUFFIX)
    }

    pub(crate) fn queue_leases(&self) -> String {
        self.beside(QUEUE_LEASES_SUFFIX)
    }

    pub(crate) fn queue_ticket(&self) -> String {
        self.beside(QUEUE_TICKET_SUFFIX)
    }

    pub(crate) fn turn(&self) -> String {
        self.beside(TURN_SUFFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_key_and_a_suffix() {
        let layout = Layout::new("{jobs}:7".to_owned());
        assert_eq!(layout.fence(), "{jobs}:7:fence");
        assert_eq!(layout.leader(), "{jobs}:7:leader");
        assert_eq!(layout.permits(), "{jobs}:7:permits");
        assert_eq!(layout.permit(12), "{jobs}:7:permit:12");
        assert_eq!(layout.writer(), "{jobs}:7:writer");
        assert_eq!(layout.readers(), "{jobs}:7:readers");
        assert_eq!(layout.writer_waiting(), "{jobs}:7:writer-waiting");
        assert_eq!(layout.queue(), "{jobs}:7:queue");
        assert_eq!(layout.queue_leases(), "{jobs}:7:queue:leases");
        assert_eq!(layout.queue_ticket(), "{jobs}:7:queue:ticket");
        assert_eq!(layout.turn(), "{jobs}:7:turn");
    }
}
