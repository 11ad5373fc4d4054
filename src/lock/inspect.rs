//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of a lock on
//! one node ([`LockReads`]), as the contract's [`Reads`] describes it.

use redis::Cmd;

use crate::contract::replies::{command, held, integer, ours, text};
use crate::contract::{Decoded, Kept, Reads, Replies};
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

    fn decode(&self, layout: &Layout, mut replies: Replies) -> Result<Decoded, NodeError> {
        let (lock, ttl) = (ours(replies.next())?, integer(replies.next()?, "PTTL")?);
        let fence = ours(replies.next())?
            .as_ref()
            .and_then(text)
            .and_then(|t| t.parse().ok());
        let mut decoded = Decoded::default();
        match lock {
            // Another type under the lock key: not a lock; which type, next.
            None => decoded.more.push(command("TYPE", &[&layout.key])),
            Some(value) => decoded.kept.extend(held(&value, ttl)?.map(Kept::Lock)),
        }
        decoded.kept.extend(fence.map(Kept::Fence));
        Ok(decoded)
    }

    fn decode_more(&self, mut replies: Replies) -> Result<Vec<Kept>, NodeError> {
        let kind = replies.next()?;
        let kind = text(&kind).unwrap_or_else(|| "value of another type".to_owned());
        Ok(vec![Kept::OtherType(kind)])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use redis::Value;

    use super::*;
    use crate::contract::Held;
    use crate::contract::replies::tests::bulk;

    #[test]
    fn a_lock_key_of_another_type_is_read_for_its_type() {
        let layout = Layout::new("k".to_owned());
        let wrong = || Err(redis::make_extension_error("WRONGTYPE".to_owned(), None).into());
        let replies = Replies::new(vec![wrong(), Ok(Value::Int(-1)), wrong()]);
        let decoded = LockReads.decode(&layout, replies).expect("decoded");
        assert_eq!(decoded.kept, []);
        assert_eq!(decoded.more.len(), 1);
        let replies = Replies::new(vec![Ok(bulk("tok")), Ok(Value::Int(-1)), Ok(bulk("7"))]);
        let decoded = LockReads.decode(&layout, replies).expect("decoded");
        assert!(decoded.more.is_empty());
        assert_eq!(
            decoded.kept,
            [
                Kept::Lock(Held {
                    token: "tok".into(),
                    ttl: None
                }),
                Kept::Fence(7)
            ]
        );
        let kind = LockReads
            .decode_more(Replies::new(vec![Ok(Value::SimpleString("hash".into()))]))
            .expect("type");
        assert_eq!(kind, [Kept::OtherType("hash".to_owned())]);
        assert!(LockReads.decode(&layout, Replies::new(vec![])).is_err());
    }
}
