//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of a fair
//! lock beside its lock key: how many waiters stand in its line, those
//! whose lease has not ended by the node's clock (read beside them).

use redis::Cmd;

use crate::contract::stored::Stored;
use crate::contract::{Reads, Replies, clock, command, ours, scored};
use crate::error::NodeError;
use crate::keys::Layout;

/// A fair lock's reads: its waiters' leases (`ZRANGE … WITHSCORES`) and
/// the node's `TIME`, to leave out the waiters whose lease ended.
#[derive(Debug)]
pub(crate) struct LineReads;

impl Reads for LineReads {
    fn reads(&self, layout: &Layout) -> Vec<Cmd> {
        vec![
            command("ZRANGE", &[&layout.queue_leases(), "0", "-1", "WITHSCORES"]),
            command("TIME", &[]),
        ]
    }

    fn decode(
        &self,
        _layout: &Layout,
        mut replies: Replies,
        stored: &mut Stored,
    ) -> Result<Vec<Cmd>, NodeError> {
        let leases = ours(replies.next())?.map(scored).transpose()?;
        let now_ms = clock(replies.next()?)? as f64;
        stored.in_line = leases
            .unwrap_or_default()
            .iter()
            .filter(|(_, ends)| *ends > now_ms)
            .count();
        Ok(Vec::new())
    }

    fn found(&self, stored: &Stored) -> bool {
        stored.in_line > 0
    }

    /// A fair lock's line beside its lock's keys (a fair lock is a lock).
    fn keys(&self, layout: &Layout, _count: Option<u32>) -> Vec<String> {
        vec![layout.queue(), layout.queue_leases(), layout.queue_ticket()]
    }
}

impl Stored {
    /// How many waiters stand in a fair lock's line on this node
    /// ([`Redlock::fair_lock`](crate::Redlock::fair_lock)), those whose
    /// lease has not ended by the node's clock.
    pub fn in_line(&self) -> usize {
        self.in_line
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;
    use crate::contract::replies::tests::bulk;

    #[test]
    fn only_waiters_whose_lease_has_not_ended_are_in_line() {
        let layout = Layout::new("k".to_owned());
        let leases = Value::Array(vec![
            bulk("gone"),
            bulk("999"),
            bulk("a"),
            bulk("2000"),
            bulk("b"),
            bulk("3000"),
        ]);
        let time = Value::Array(vec![bulk("1"), bulk("500000")]);
        let mut stored = Stored::default();
        LineReads
            .decode(
                &layout,
                Replies::new(vec![Ok(leases), Ok(time.clone())]),
                &mut stored,
            )
            .expect("line");
        assert_eq!(stored.in_line(), 2);
        let mut empty = Stored::default();
        LineReads
            .decode(
                &layout,
                Replies::new(vec![Ok(Value::Array(vec![])), Ok(time)]),
                &mut empty,
            )
            .expect("no line");
        assert!(empty.is_empty());
    }
}
