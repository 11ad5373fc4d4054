//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of a lock on
//! one node ([`LockReads`]), as the contract's [`Reads`] describes it.

use redis::Cmd;

use crate::contract::replies::{command, held, integer, ours, text};
use crate::contract::stored::{ResourceKind, Stored};
use crate::contract::{Reads, Replies};
use crate::error::NodeError;
use crate::keys::Layout;

/// The lock's reads: its key's value and ttl (and the key's type when it
/// is not a string), and the fence counter beside it.
#[derive(Debug)]
pub(crate) struct LockReads;

impl Reads for LockReads {
    fn reads(&self, layout: &Layout) -> Vec<Cmd> {
        let key = layout.key.as_str();
        vec![
            command("GET", &[key]),
            command("PTTL", &[key]),
            command("GET", &[&layout.fence()]),
        ]
    }

    fn decode(
        &self,
        layout: &Layout,
        mut replies: Replies,
        stored: &mut Stored,
    ) -> Result<Vec<Cmd>, NodeError> {
        let (lock, ttl) = (ours(replies.next())?, integer(replies.next()?, "PTTL")?);
        stored.fence = ours(replies.next())?
            .as_ref()
            .and_then(text)
            .and_then(|t| t.parse().ok());
        match lock {
            // Another type under the lock key: not a lock; which type, next.
            None => Ok(vec![command("TYPE", &[&layout.key])]),
            Some(value) => {
                stored.lock = held(&value, ttl)?;
                Ok(Vec::new())
            }
        }
    }

    fn decode_more(&self, mut replies: Replies, stored: &mut Stored) -> Result<(), NodeError> {
        let kind = replies.next()?;
        stored.other_type = Some(text(&kind).unwrap_or_else(|| "value of another type".to_owned()));
        Ok(())
    }

    fn found(&self, stored: &Stored) -> bool {
        stored.lock.is_some() || stored.fence.is_some() || stored.other_type.is_some()
    }

    fn keys(&self, layout: &Layout, _count: Option<u32>) -> Vec<String> {
        vec![layout.key.clone(), layout.fence()]
    }
}

#[expect(non_upper_case_globals, reason = "named as the enum's variants were")]
impl ResourceKind {
    /// A lock ([`Redlock::lock`](crate::Redlock::lock)), fenced or not, or
    /// a fair lock ([`Redlock::fair_lock`](crate::Redlock::fair_lock)).
    pub const Lock: Self = Self::named("Lock");
}

#[cfg(test)]
pub(crate) mod tests {
    use redis::Value;

    use super::*;
    use crate::contract::replies::tests::bulk;

    #[test]
    fn a_lock_key_of_another_type_is_read_for_its_type() {
        let layout = Layout::new("k".to_owned());
        let wrong = || Err(redis::make_extension_error("WRONGTYPE".to_owned(), None).into());
        let replies = Replies::new(vec![wrong(), Ok(Value::Int(-1)), wrong()]);
        let mut stored = Stored::default();
        let more = LockReads
            .decode(&layout, replies, &mut stored)
            .expect("decoded");
        assert!(stored.is_empty());
        assert_eq!(more.len(), 1);
        LockReads
            .decode_more(
                Replies::new(vec![Ok(Value::SimpleString("hash".into()))]),
                &mut stored,
            )
            .expect("type");
        assert_eq!(stored.other_type(), Some("hash"));
        let replies = Replies::new(vec![Ok(bulk("tok")), Ok(Value::Int(-1)), Ok(bulk("7"))]);
        let mut stored = Stored::default();
        let more = LockReads
            .decode(&layout, replies, &mut stored)
            .expect("decoded");
        assert!(more.is_empty());
        let holder = stored.lock().expect("a holder");
        assert_eq!(
            (&*holder.token.0, holder.ttl, stored.fence()),
            ("tok", None, Some(7))
        );
        let mut stored = Stored::default();
        assert!(
            LockReads
                .decode(&layout, Replies::new(vec![]), &mut stored)
                .is_err()
        );
    }
}
