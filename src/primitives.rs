//! The primitives, listed once: a new primitive is its folder, one line
//! here, and its `pub use` in lib.rs. What each one implements is the
//! contract (`contract`, with the fair lock as the worked example in
//! docs/contributing.md); this list is how the crate finds every one:
//! `inspect` sends each one's reads, the Functions library holds each
//! one's scripts (`scripts`' tests regenerate it from this list), and the
//! key layout's table (`keys.rs`) lists each one's keys.

use crate::contract::Primitive;

/// Every primitive, in the order `inspect` sends their reads and the
/// Functions library holds their scripts.
pub(crate) static PRIMITIVES: [&Primitive; 5] = [
    &crate::lock::PRIMITIVE,
    &crate::election::PRIMITIVE,
    &crate::semaphore::PRIMITIVE,
    &crate::rwlock::PRIMITIVE,
    &crate::fair::PRIMITIVE,
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The suffixes `keys.rs`'s table names after `<key>` (`:permit:<i>`
    /// as its infix, `:permit:`).
    fn documented() -> BTreeSet<String> {
        include_str!("keys.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("//! | `<key>"))
            .filter_map(|rest| rest.split_once('`'))
            .map(|(suffix, _)| suffix.trim_end_matches("<i>").to_owned())
            .collect()
    }

    #[test]
    fn no_two_primitives_keep_the_same_key_and_the_table_lists_each() {
        let mut kept = BTreeSet::new();
        for primitive in PRIMITIVES {
            for suffix in primitive.keys {
                assert!(
                    kept.insert(suffix.to_string()),
                    "{}'s key `<key>{suffix}` is another primitive's too",
                    primitive.name
                );
            }
        }
        assert_eq!(
            kept,
            documented(),
            "keys.rs's table against the primitives' keys"
        );
    }

    #[test]
    fn no_two_primitives_share_a_script() {
        let mut functions = BTreeSet::new();
        for primitive in PRIMITIVES {
            for lua in primitive.scripts {
                assert!(functions.insert(lua.function), "{} twice", lua.function);
            }
        }
    }
}
