//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of an
//! election: its leader's value. Its lock and term counter are the lock's
//! ([`LockReads`](crate::lock::inspect::LockReads)).

use redis::{Cmd, Value};

use crate::contract::stored::{Proclaimed, ResourceKind, SeenToken, Stored};
use crate::contract::{Reads, Replies, command, ours, text, unexpected};
use crate::error::NodeError;
use crate::keys::Layout;

/// An election's reads: `HMGET <key>:leader token term rev value`.
#[derive(Debug)]
pub(crate) struct LeaderReads;

impl Reads for LeaderReads {
    fn reads(&self, layout: &Layout) -> Vec<Cmd> {
        vec![command(
            "HMGET",
            &[&layout.leader(), "token", "term", "rev", "value"],
        )]
    }

    fn decode(
        &self,
        _layout: &Layout,
        mut replies: Replies,
        stored: &mut Stored,
    ) -> Result<Vec<Cmd>, NodeError> {
        stored.value = ours(replies.next())?.map(proclaimed).transpose()?.flatten();
        Ok(Vec::new())
    }

    fn found(&self, stored: &Stored) -> bool {
        stored.value.is_some()
    }

    fn keys(&self, layout: &Layout, _count: Option<u32>) -> Vec<String> {
        vec![layout.key.clone(), layout.fence(), layout.leader()]
    }
}

#[expect(non_upper_case_globals, reason = "named as the enum's variant was")]
impl ResourceKind {
    /// An [`Election`](crate::Election).
    pub const Election: Self = Self::named("Election");
}

impl Stored {
    /// An election's leader value, as this node keeps it: the leader's (if
    /// its token is the [lock](Self::lock)'s), or a former leader's until
    /// it expires.
    pub fn leader(&self) -> Option<&Proclaimed> {
        self.value.as_ref()
    }
}

/// `HMGET <key>:leader token term rev value`: a leader's value, when all
/// four are there.
fn proclaimed(value: Value) -> Result<Option<Proclaimed>, NodeError> {
    let Value::Array(fields) = value else {
        return Err(unexpected("HMGET"));
    };
    let number = |v: &Value| text(v).and_then(|t| t.parse::<u64>().ok());
    Ok(match &fields[..] {
        [token, term, rev, value] => match (text(token), number(term), number(rev), text(value)) {
            (Some(token), Some(term), Some(revision), Some(value)) => Some(Proclaimed {
                token: SeenToken(token.into()),
                term,
                revision,
                value,
            }),
            _ => None,
        },
        _ => return Err(unexpected("HMGET")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_value_is_read_when_complete() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let fields = Value::Array(vec![bulk("tok"), bulk("7"), bulk("2"), bulk("web")]);
        assert_eq!(
            proclaimed(fields).expect("hmget"),
            Some(Proclaimed {
                token: SeenToken("tok".into()),
                term: 7,
                revision: 2,
                value: "web".to_owned()
            })
        );
        let partial = Value::Array(vec![bulk("tok"), Value::Nil, bulk("2"), bulk("web")]);
        assert_eq!(proclaimed(partial).expect("hmget"), None);
        assert!(proclaimed(Value::Array(vec![bulk("tok")])).is_err());
    }
}
