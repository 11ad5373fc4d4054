//! The keys an election keeps beside a resource's key (`keys.rs` at the
//! crate's root has the table of every primitive's).

use crate::keys::Layout;

/// Appended to an election's lock key to form the key of the leader's
/// value (a hash: token, term, revision, value).
pub(crate) const LEADER_SUFFIX: &str = ":leader";

/// Appended to an election's lock key to form the channel on which nodes
/// announce a stored value (a new leader's, or a new revision), when the
/// manager announces releases
/// ([`WakeOnRelease::Subscribe`](crate::WakeOnRelease::Subscribe)).
pub(crate) const ELECTED_SUFFIX: &str = ":elected";

impl Layout {
    pub(crate) fn leader(&self) -> String {
        self.beside(LEADER_SUFFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_key_and_a_suffix() {
        let layout = Layout::new("{jobs}:7".to_owned());
        assert_eq!(layout.leader(), "{jobs}:7:leader");
    }
}
