//! The keys a reader-writer lock keeps beside a resource's key (`keys.rs` at the
//! crate's root has the table of every primitive's).

use crate::keys::Layout;

/// Appended to a reader-writer lock's key to form its writer key.
pub(crate) const WRITER_SUFFIX: &str = ":writer";

/// Appended to a reader-writer lock's key to form its readers key (a
/// sorted set of the readers' tokens, scored with their expiries).
pub(crate) const READERS_SUFFIX: &str = ":readers";

/// Appended to a reader-writer lock's key to form the mark of a writer
/// waiting for the readers to leave.
pub(crate) const WRITER_WAITING_SUFFIX: &str = ":writer-waiting";

impl Layout {
    pub(crate) fn writer(&self) -> String {
        self.beside(WRITER_SUFFIX)
    }

    pub(crate) fn readers(&self) -> String {
        self.beside(READERS_SUFFIX)
    }

    pub(crate) fn writer_waiting(&self) -> String {
        self.beside(WRITER_WAITING_SUFFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_key_and_a_suffix() {
        let layout = Layout::new("{jobs}:7".to_owned());
        assert_eq!(layout.writer(), "{jobs}:7:writer");
        assert_eq!(layout.readers(), "{jobs}:7:readers");
        assert_eq!(layout.writer_waiting(), "{jobs}:7:writer-waiting");
    }
}
