//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of a
//! semaphore: its permit count, then (a second step, once the count is
//! known) each of its permits.

use redis::Cmd;

use crate::contract::stored::{HeldPermit, ResourceKind, Stored};
use crate::contract::{Reads, Replies, command, held, integer, ours, text};
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

    fn decode(
        &self,
        layout: &Layout,
        mut replies: Replies,
        stored: &mut Stored,
    ) -> Result<Vec<Cmd>, NodeError> {
        let count = ours(replies.next())?
            .as_ref()
            .and_then(text)
            .and_then(|t| t.parse::<u32>().ok())
            .filter(|&count| count > 0);
        stored.count = count;
        Ok((0..count.map_or(0, |count| count.min(self.most)))
            .flat_map(|slot| {
                let key = layout.permit(slot);
                [command("GET", &[&key]), command("PTTL", &[&key])]
            })
            .collect())
    }

    /// The permits' `GET` and `PTTL` replies, by slot from 0.
    fn decode_more(&self, mut replies: Replies, stored: &mut Stored) -> Result<(), NodeError> {
        let slots = u32::try_from(replies.left() / 2).unwrap_or(u32::MAX);
        for slot in 0..slots {
            let (value, ttl) = (replies.next(), replies.next());
            if let Some(value) = ours(value)?
                && let Some(holder) = held(&value, integer(ttl?, "PTTL")?)?
            {
                stored.slots.push(HeldPermit { slot, holder });
            }
        }
        Ok(())
    }

    fn found(&self, stored: &Stored) -> bool {
        stored.count.is_some() || !stored.slots.is_empty()
    }

    /// The limit key and the permits' keys, as many as the permit count
    /// most nodes keep (at most `most`).
    fn keys(&self, layout: &Layout, count: Option<u32>) -> Vec<String> {
        let count = count.unwrap_or(0).min(self.most);
        std::iter::once(layout.permits())
            .chain((0..count).map(|slot| layout.permit(slot)))
            .collect()
    }
}

#[expect(non_upper_case_globals, reason = "named as the enum's variant was")]
impl ResourceKind {
    /// A [`Semaphore`](crate::Semaphore).
    pub const Semaphore: Self = Self::named("Semaphore");
}

impl Stored {
    /// A semaphore's permit count, as this node keeps it while one of its
    /// permits is held here.
    pub fn permit_count(&self) -> Option<u32> {
        self.count
    }

    /// A semaphore's permits held on this node, by slot.
    pub fn permits(&self) -> &[HeldPermit] {
        &self.slots
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;
    use crate::contract::replies::tests::bulk;

    #[test]
    fn permits_are_read_once_their_count_is_known() {
        let layout = Layout::new("s".to_owned());
        let reads = PermitReads { most: 64 };
        let mut stored = Stored::default();
        let more = reads
            .decode(&layout, Replies::new(vec![Ok(bulk("3"))]), &mut stored)
            .expect("count");
        assert_eq!((stored.permit_count(), more.len()), (Some(3), 6));
        let mut none = Stored::default();
        let more = reads
            .decode(&layout, Replies::new(vec![Ok(bulk("0"))]), &mut none)
            .expect("count");
        assert!(none.is_empty() && more.is_empty());
        // A count past the semaphore's most permits reads only those.
        let more = PermitReads { most: 2 }
            .decode(
                &layout,
                Replies::new(vec![Ok(bulk("100"))]),
                &mut Stored::default(),
            )
            .expect("count");
        assert_eq!(more.len(), 4);
        let replies = vec![
            Ok(Value::Nil),
            Ok(Value::Int(-2)),
            Ok(bulk("tok")),
            Ok(Value::Int(900)),
            Ok(Value::Nil),
            Ok(Value::Int(-2)),
        ];
        reads
            .decode_more(Replies::new(replies), &mut stored)
            .expect("permits");
        let permits: Vec<_> = stored
            .permits()
            .iter()
            .map(|p| (p.slot, &*p.holder.token.0, p.holder.ttl))
            .collect();
        assert_eq!(
            permits,
            [(1, "tok", Some(std::time::Duration::from_millis(900)))]
        );
    }
}
