//! The keys a semaphore keeps beside a resource's key (`keys.rs` at the
//! crate's root has the table of every primitive's).

use crate::keys::Layout;

/// Between a semaphore's key and a permit's number: permit `i` of the
/// semaphore `<key>` is the lock `<key>:permit:<i>`.
pub(crate) const PERMIT_INFIX: &str = ":permit:";

/// Appended to a semaphore's key to form its limit key, which holds the
/// permit count on a node while any permit is held there.
pub(crate) const PERMITS_SUFFIX: &str = ":permits";

impl Layout {
    pub(crate) fn permits(&self) -> String {
        self.beside(PERMITS_SUFFIX)
    }

    pub(crate) fn permit(&self, slot: u32) -> String {
        format!("{}{PERMIT_INFIX}{slot}", self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_key_and_a_suffix() {
        let layout = Layout::new("{jobs}:7".to_owned());
        assert_eq!(layout.permits(), "{jobs}:7:permits");
        assert_eq!(layout.permit(12), "{jobs}:7:permit:12");
    }
}
