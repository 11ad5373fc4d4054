//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of a
//! reader-writer lock: its writer, its readers (those not expired by the
//! node's clock, read beside them), and whether a writer waits.

use std::time::Duration;

use redis::Cmd;

use crate::contract::stored::{Holder, ResourceKind, SeenToken, Stored};
use crate::contract::{Reads, Replies, clock, command, held, integer, ours, scored};
use crate::error::NodeError;
use crate::keys::Layout;

/// A reader-writer lock's reads: the writer's `GET` and `PTTL`, the
/// readers' `ZRANGE … WITHSCORES`, the waiting writer's `EXISTS`, and the
/// node's `TIME` to tell which readers expired.
#[derive(Debug)]
pub(crate) struct RwLockReads;

impl Reads for RwLockReads {
    fn reads(&self, layout: &Layout) -> Vec<Cmd> {
        let writer = layout.writer();
        vec![
            command("GET", &[&writer]),
            command("PTTL", &[&writer]),
            command("ZRANGE", &[&layout.readers(), "0", "-1", "WITHSCORES"]),
            command("EXISTS", &[&layout.writer_waiting()]),
            command("TIME", &[]),
        ]
    }

    fn decode(
        &self,
        _layout: &Layout,
        mut replies: Replies,
        stored: &mut Stored,
    ) -> Result<Vec<Cmd>, NodeError> {
        let (writer, ttl) = (ours(replies.next())?, integer(replies.next()?, "PTTL")?);
        let readers = ours(replies.next())?.map(scored).transpose()?;
        stored.waiting = integer(replies.next()?, "EXISTS")? > 0;
        let now_ms = clock(replies.next()?)? as f64;
        if let Some(writer) = writer {
            stored.exclusive = held(&writer, ttl)?;
        }
        stored.shared = readers
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(token, expiry)| {
                let left = expiry - now_ms;
                (left > 0.0).then(|| Holder {
                    token: SeenToken(token.into()),
                    ttl: Some(Duration::from_millis(left as u64)),
                })
            })
            .collect();
        Ok(Vec::new())
    }

    fn found(&self, stored: &Stored) -> bool {
        stored.exclusive.is_some() || !stored.shared.is_empty() || stored.waiting
    }

    fn keys(&self, layout: &Layout, _count: Option<u32>) -> Vec<String> {
        vec![layout.writer(), layout.readers(), layout.writer_waiting()]
    }
}

#[expect(non_upper_case_globals, reason = "named as the enum's variant was")]
impl ResourceKind {
    /// A reader-writer lock ([`RwLock`](crate::RwLock)).
    pub const RwLock: Self = Self::named("RwLock");
}

impl Stored {
    /// A reader-writer lock's writer.
    pub fn writer(&self) -> Option<&Holder> {
        self.exclusive.as_ref()
    }

    /// A reader-writer lock's readers whose expiry has not passed (by the
    /// node's clock).
    pub fn readers(&self) -> &[Holder] {
        &self.shared
    }

    /// Whether a writer waits for a reader-writer lock's readers to leave
    /// (and holds new readers back).
    pub fn writer_waiting(&self) -> bool {
        self.waiting
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;
    use crate::contract::replies::tests::bulk;

    #[test]
    fn replies_are_parsed_in_both_protocols() {
        let flat = Value::Array(vec![bulk("r1"), bulk("1500"), bulk("r2"), bulk("2500.5")]);
        assert_eq!(
            scored(flat).expect("resp2"),
            [("r1".to_owned(), 1500.0), ("r2".to_owned(), 2500.5)]
        );
        let pairs = Value::Array(vec![Value::Array(vec![bulk("r1"), Value::Double(1500.0)])]);
        assert_eq!(scored(pairs).expect("resp3"), [("r1".to_owned(), 1500.0)]);
        assert!(scored(Value::Array(vec![bulk("r1")])).is_err());
        assert_eq!(
            clock(Value::Array(vec![bulk("12"), bulk("345678")])).expect("time"),
            12_345
        );
    }

    #[test]
    fn only_readers_not_expired_by_the_node_clock_are_kept() {
        let layout = Layout::new("rw".to_owned());
        let replies = Replies::new(vec![
            Ok(Value::Nil),
            Ok(Value::Int(-2)),
            Ok(Value::Array(vec![
                bulk("old"),
                bulk("11000"),
                bulk("new"),
                bulk("13000"),
            ])),
            Ok(Value::Int(1)),
            Ok(Value::Array(vec![bulk("12"), bulk("0")])),
        ]);
        let mut stored = Stored::default();
        let more = RwLockReads
            .decode(&layout, replies, &mut stored)
            .expect("decoded");
        assert!(more.is_empty() && stored.writer().is_none());
        let readers: Vec<_> = stored
            .readers()
            .iter()
            .map(|r| (&*r.token.0, r.ttl))
            .collect();
        assert_eq!(readers, [("new", Some(Duration::from_millis(1000)))]);
        assert!(stored.writer_waiting());
    }
}
