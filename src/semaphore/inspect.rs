//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of a
//! semaphore: its permit count, then (a second step, once the count is
//! known) each of its permits.

use redis::Cmd;

use crate::contract::{Decoded, Kept, Reads, Replies, command, held, integer, ours, text};
use crate::error::NodeError;
use crate::keys::Layout;

/// A semaphore's reads: `GET <key>:permits`, then `GET` and `PTTL` of
/// each permit's key, up to `most` of them (a semaphore's most permits,
/// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS), whatever
/// count a node keeps).
#[derive(Debug)]
pub(crate) struct PermitReads {
    pub(crate) most: u32,
}

impl Reads for PermitReads {
    fn reads(&self, layout: &Layout) -> Vec<Cmd> {
        vec![command("GET", &[&layout.permits()])]
    }

    fn decode(&self, layout: &Layout, mut replies: Replies) -> Result<Decoded, NodeError> {
        let count = ours(replies.next())?
            .as_ref()
            .and_then(text)
            .and_then(|t| t.parse::<u32>().ok())
            .filter(|&count| count > 0);
        let more = (0..count.map_or(0, |count| count.min(self.most)))
            .flat_map(|slot| {
                let key = layout.permit(slot);
                [command("GET", &[&key]), command("PTTL", &[&key])]
            })
            .collect();
        Ok(Decoded {
            kept: count.map(Kept::PermitCount).into_iter().collect(),
            more,
        })
    }

    /// The permits' `GET` and `PTTL` replies, by slot from 0.
    fn decode_more(&self, mut replies: Replies) -> Result<Vec<Kept>, NodeError> {
        let mut kept = Vec::new();
        let slots = u32::try_from(replies.left() / 2).unwrap_or(u32::MAX);
        for slot in 0..slots {
            let (value, ttl) = (replies.next(), replies.next());
            if let Some(value) = ours(value)?
                && let Some(held) = held(&value, integer(ttl?, "PTTL")?)?
            {
                kept.push(Kept::Permit { slot, held });
            }
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;
    use crate::contract::Held;
    use crate::contract::replies::tests::bulk;

    #[test]
    fn permits_are_read_once_their_count_is_known() {
        let layout = Layout::new("s".to_owned());
        let decoded = PermitReads { most: 64 }
            .decode(&layout, Replies::new(vec![Ok(bulk("3"))]))
            .expect("count");
        assert_eq!(decoded.kept, [Kept::PermitCount(3)]);
        assert_eq!(decoded.more.len(), 6);
        let none = PermitReads { most: 64 }
            .decode(&layout, Replies::new(vec![Ok(bulk("0"))]))
            .expect("count");
        assert!(none.kept.is_empty() && none.more.is_empty());
        // A count past the semaphore's most permits reads only those.
        let capped = PermitReads { most: 2 }
            .decode(&layout, Replies::new(vec![Ok(bulk("100"))]))
            .expect("count");
        assert_eq!(capped.more.len(), 4);
        let replies = vec![
            Ok(Value::Nil),
            Ok(Value::Int(-2)),
            Ok(bulk("tok")),
            Ok(Value::Int(900)),
            Ok(Value::Nil),
            Ok(Value::Int(-2)),
        ];
        let permits = PermitReads { most: 64 }
            .decode_more(Replies::new(replies))
            .expect("permits");
        assert_eq!(
            permits,
            [Kept::Permit {
                slot: 1,
                held: Held {
                    token: "tok".into(),
                    ttl: Some(std::time::Duration::from_millis(900)),
                },
            }]
        );
    }
}
