//! What [`Redlock::inspect`](crate::Redlock::inspect) reads of a primitive
//! on one node, as the primitive describes it: [`Reads`], the plain read
//! commands a primitive sends and how their replies decode into its part
//! of what the node keeps ([`Kept`]); the reply readers the primitives
//! share; and the lock's own reads ([`LockReads`]).
//!
//! It stands here, with the lowest primitive, so that every primitive
//! above can describe its reads without knowing `inspect`, which runs the
//! descriptions it lists and shows what they decode as its public types.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::keys::Layout;

/// One primitive's reads for an inspection: plain read commands (nothing
/// is ever written), and their replies decoded into what the node keeps
/// of the primitive. `inspect` sends every primitive's [`reads`] at once,
/// then every [`Decoded::more`] at once, and each primitive decodes only
/// its own replies.
///
/// [`reads`]: Self::reads
pub(crate) trait Reads: Sync {
    /// The first reads, sent with every other primitive's at once.
    fn reads(&self, layout: &Layout) -> Vec<Cmd>;

    /// The replies to [`reads`](Self::reads), in their order: what the
    /// node keeps, and the reads that depend on it.
    fn decode(&self, layout: &Layout, replies: Replies) -> Result<Decoded, NodeError>;

    /// The replies to [`Decoded::more`], in their order. Only called when
    /// [`decode`](Self::decode) asked for more; none by default.
    fn decode_more(&self, replies: Replies) -> Result<Vec<Kept>, NodeError> {
        let _ = replies;
        Ok(Vec::new())
    }
}

/// A primitive's first replies decoded: what the node keeps of it, and
/// the reads a second step sends once these are known (none, mostly).
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    /// What the node keeps of the primitive, so far.
    pub(crate) kept: Vec<Kept>,
    /// The second step's reads, decoded by [`Reads::decode_more`].
    pub(crate) more: Vec<Cmd>,
}

/// One thing a node keeps under a resource's keys, as plain data: what
/// `inspect` shows in its `Stored`, field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kept {
    /// The lock's key (an election's too): its holder.
    Lock(Held),
    /// The Redis type of the lock's key, when it is not a string.
    OtherType(String),
    /// A fenced lock's (or an election's term) counter.
    Fence(u64),
    /// An election's leader value, all four fields of it.
    Leader {
        /// The token of the leader that proclaimed it.
        token: Arc<str>,
        /// The leader's term.
        term: u64,
        /// Which of the term's values it is.
        revision: u64,
        /// The value.
        value: String,
    },
    /// A semaphore's permit count (never 0).
    PermitCount(u32),
    /// A semaphore's permit held, by slot.
    Permit {
        /// The permit's slot.
        slot: u32,
        /// Its holder.
        held: Held,
    },
    /// A reader-writer lock's writer.
    Writer(Held),
    /// One of a reader-writer lock's readers, not expired.
    Reader(Held),
    /// A writer waits for a reader-writer lock's readers to leave.
    WriterWaiting,
    /// How many waiters stand in a fair lock's line, their lease not ended.
    InLine(usize),
}

/// A token a key keeps, and for how long (`None`: no expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// The token, in full: `inspect` never shows it so.
    pub(crate) token: Arc<str>,
    /// How long the node keeps it.
    pub(crate) ttl: Option<Duration>,
}

/// One primitive's replies, taken in the order of its commands.
#[derive(Debug)]
pub(crate) struct Replies(std::vec::IntoIter<Result<Value, NodeError>>);

impl Replies {
    /// The replies to a primitive's commands, in their order.
    pub(crate) fn new(replies: Vec<Result<Value, NodeError>>) -> Self {
        Self(replies.into_iter())
    }

    /// The next reply; an error if there is none.
    pub(crate) fn next(&mut self) -> Result<Value, NodeError> {
        self.0
            .next()
            .unwrap_or_else(|| Err(NodeError::UnexpectedReply("a reply is missing".to_owned())))
    }

    /// How many replies are left to take.
    pub(crate) fn left(&self) -> usize {
        self.0.len()
    }
}

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

/// The command `name` with `args`.
pub(crate) fn command(name: &str, args: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(name);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// A reply, with `None` for a key of another type (WRONGTYPE): not ours.
pub(crate) fn ours(reply: Result<Value, NodeError>) -> Result<Option<Value>, NodeError> {
    match reply {
        Err(NodeError::Redis(e)) if e.code() == Some("WRONGTYPE") => Ok(None),
        Err(e) => Err(e),
        Ok(value) => Ok(Some(value)),
    }
}

/// An error for a reply of the wrong shape: names the command, never the
/// reply (it may hold a token).
pub(crate) fn unexpected(command: &str) -> NodeError {
    NodeError::UnexpectedReply(format!("a reply of an unexpected type to {command}"))
}

/// A reply's text, if it is a string.
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// A reply to `command` that must be an integer.
pub(crate) fn integer(value: Value, command: &str) -> Result<i64, NodeError> {
    match &value {
        Value::Int(n) => Ok(*n),
        other => text(other)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| unexpected(command)),
    }
}

/// A string key's value (`Nil`: absent) and its `PTTL` (-1: no expiry,
/// -2: gone since).
pub(crate) fn held(value: &Value, pttl: i64) -> Result<Option<Held>, NodeError> {
    if matches!(value, Value::Nil) || pttl == -2 {
        return Ok(None);
    }
    let token = text(value).ok_or_else(|| unexpected("GET"))?;
    Ok(Some(Held {
        token: token.into(),
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
    }))
}

/// A reply's number, if it is one.
pub(crate) fn float(value: &Value) -> Option<f64> {
    match value {
        Value::Double(f) => Some(*f),
        Value::Int(n) => Some(*n as f64),
        other => text(other).and_then(|t| t.parse().ok()),
    }
}

/// `ZRANGE … WITHSCORES`: members and scores, flat (RESP2) or in pairs
/// (RESP3).
pub(crate) fn scored(value: Value) -> Result<Vec<(String, f64)>, NodeError> {
    let bad = || unexpected("ZRANGE");
    let Value::Array(items) = value else {
        return Err(bad());
    };
    let pair = |member: &Value, score: &Value| Some((text(member)?, float(score)?));
    if items.iter().all(|i| matches!(i, Value::Array(_))) {
        items
            .iter()
            .map(|item| match item {
                Value::Array(p) => match &p[..] {
                    [member, score] => pair(member, score).ok_or_else(bad),
                    _ => Err(bad()),
                },
                _ => Err(bad()),
            })
            .collect()
    } else if items.len() % 2 == 0 {
        items
            .chunks(2)
            .map(|p| match p {
                [member, score] => pair(member, score).ok_or_else(bad),
                _ => Err(bad()),
            })
            .collect()
    } else {
        Err(bad())
    }
}

/// `TIME`: the node's clock, in ms.
pub(crate) fn clock(value: Value) -> Result<u64, NodeError> {
    let bad = || unexpected("TIME");
    let Value::Array(parts) = value else {
        return Err(bad());
    };
    let number = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other).and_then(|t| t.parse::<u64>().ok()),
    };
    match &parts[..] {
        [seconds, micros] => {
            let (seconds, micros) = (
                number(seconds).ok_or_else(bad)?,
                number(micros).ok_or_else(bad)?,
            );
            Ok(seconds.saturating_mul(1000).saturating_add(micros / 1000))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bulk string reply, for the primitives' decoding tests.
    pub(crate) fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_string_key_is_held_until_it_is_gone() {
        assert_eq!(held(&Value::Nil, -2).expect("absent"), None);
        let no_expiry = held(&bulk("tok"), -1).expect("held").expect("a holder");
        assert_eq!(no_expiry.ttl, None);
        assert_eq!(held(&bulk("tok"), -2).expect("gone"), None);
        let held = held(&bulk("tok"), 1500).expect("held").expect("a holder");
        assert_eq!(
            (&*held.token, held.ttl),
            ("tok", Some(Duration::from_millis(1500)))
        );
    }

    #[test]
    fn errors_about_replies_never_show_them() {
        let error = integer(Value::BulkString(b"0123456789abcdef".to_vec()), "PTTL")
            .expect_err("not a number");
        assert!(!error.to_string().contains("0123"), "{error}");
    }

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
