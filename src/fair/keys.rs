//! The keys a fair lock keeps beside a resource's key (`keys.rs` at the
//! crate's root has the table of every primitive's).

use crate::keys::Layout;

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

impl Layout {
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
        assert_eq!(layout.queue(), "{jobs}:7:queue");
        assert_eq!(layout.queue_leases(), "{jobs}:7:queue:leases");
        assert_eq!(layout.queue_ticket(), "{jobs}:7:queue:ticket");
        assert_eq!(layout.turn(), "{jobs}:7:turn");
    }
}
