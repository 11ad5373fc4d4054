//! The key layout: the table of the Redis keys and channels that
//! quorumlock keeps beside a resource's key (`<prefix><name>`), for every
//! primitive, and the ones every lock may keep. Each primitive's own
//! suffixes and names are in its folder (`keys.rs` there), listed in its
//! `Primitive`; a test (`primitives.rs`) checks this table against them.
//! The primitives form their keys from these, and
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

/// Every key a resource's key may have beside it, by name: the ones every
/// lock may keep here, each primitive's own in its folder (`keys.rs`
/// there, an `impl Layout` block beside the suffixes it lists in its
/// `Primitive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The resource's key: the prefix and the name.
    pub(crate) key: String,
}

impl Layout {
    pub(crate) fn new(key: String) -> Self {
        Self { key }
    }

    /// The key followed by `suffix`.
    pub(crate) fn beside(&self, suffix: &str) -> String {
        let mut name = String::with_capacity(self.key.len() + suffix.len());
        name.push_str(&self.key);
        name.push_str(suffix);
        name
    }

    pub(crate) fn fence(&self) -> String {
        self.beside(FENCE_SUFFIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_key_and_a_suffix() {
        let layout = Layout::new("{jobs}:7".to_owned());
        assert_eq!(layout.fence(), "{jobs}:7:fence");
    }
}
