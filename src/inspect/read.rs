//! One node's read: plain read commands, and their replies decoded.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use super::{HeldPermit, Holder, Proclaimed, SeenToken, Stored};
use crate::error::NodeError;
use crate::keys::Layout;
use crate::node::Deadline;
use crate::round::Core;
use crate::semaphore::Semaphore;

pub(super) fn command(name: &str, args: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(name);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// Reads what node `node` keeps under `layout`'s keys: every key at once,
/// then a semaphore's permits (their count is in the limit key) and the
/// type of a lock key that is not a string.
pub(super) async fn read(
    core: Arc<Core>,
    layout: Arc<Layout>,
    node: usize,
    deadline: Deadline,
) -> Result<Stored, NodeError> {
    let target = core.node(node)?;
    let commands = commands(&layout);
    let replies =
        futures::future::join_all(commands.iter().map(|c| target.read(c, deadline))).await;
    let Read {
        mut stored,
        lock,
        writer,
    } = decode(replies)?;
    match lock {
        // Another type under the lock key: not a lock.
        None => {
            let kind = target
                .read(&command("TYPE", &[&layout.key]), deadline)
                .await?;
            stored.other_type =
                Some(text(&kind).unwrap_or_else(|| "value of another type".to_owned()));
        }
        Some((value, ttl)) => stored.lock = holder(&value, ttl)?,
    }
    if let Some((value, ttl)) = writer {
        stored.writer = holder(&value, ttl)?;
    }
    if let Some(count) = stored.permit_count {
        stored.permits =
            read_permits(target, &layout, count.min(Semaphore::MAX_PERMITS), deadline).await?;
    }
    Ok(stored)
}

/// Every read of [`read`]'s first round, in the order [`decode`] takes
/// their replies.
fn commands(layout: &Layout) -> [Cmd; 10] {
    let key = layout.key.as_str();
    let (fence, leader, permits) = (layout.fence(), layout.leader(), layout.permits());
    let (writer, readers, waiting) = (layout.writer(), layout.readers(), layout.writer_waiting());
    [
        command("GET", &[key]),
        command("PTTL", &[key]),
        command("GET", &[&fence]),
        command("HMGET", &[&leader, "token", "term", "rev", "value"]),
        command("GET", &[&permits]),
        command("GET", &[&writer]),
        command("PTTL", &[&writer]),
        command("ZRANGE", &[&readers, "0", "-1", "WITHSCORES"]),
        command("EXISTS", &[&waiting]),
        command("TIME", &[]),
    ]
}

/// [`read`]'s first round decoded: what it stores, and the lock's and the
/// writer's values with their ttls (a lock key of another type is `None`),
/// still to be read as holders.
struct Read {
    stored: Stored,
    lock: Option<(Value, i64)>,
    writer: Option<(Value, i64)>,
}

fn decode(replies: Vec<Result<Value, NodeError>>) -> Result<Read, NodeError> {
    let mut replies = replies.into_iter();
    let mut next = || {
        replies
            .next()
            .unwrap_or_else(|| Err(NodeError::UnexpectedReply("a reply is missing".to_owned())))
    };
    let (lock, lock_ttl) = (ours(next())?, integer(next()?, "PTTL")?);
    let fence = ours(next())?
        .as_ref()
        .and_then(text)
        .and_then(|t| t.parse().ok());
    let leader = ours(next())?.map(proclaimed).transpose()?.flatten();
    let permit_count = ours(next())?
        .as_ref()
        .and_then(text)
        .and_then(|t| t.parse::<u32>().ok())
        .filter(|&count| count > 0);
    let (writer, writer_ttl) = (ours(next())?, integer(next()?, "PTTL")?);
    let readers = ours(next())?.map(scored).transpose()?.unwrap_or_default();
    let writer_waiting = integer(next()?, "EXISTS")? > 0;
    let now_ms = clock(next()?)?;
    let readers = readers
        .into_iter()
        .filter_map(|(token, expiry)| {
            let left = expiry - now_ms as f64;
            (left > 0.0).then(|| Holder {
                token: SeenToken(token.into()),
                ttl: Some(Duration::from_millis(left as u64)),
            })
        })
        .collect();
    Ok(Read {
        stored: Stored {
            fence,
            leader,
            permit_count,
            writer_waiting,
            readers,
            ..Stored::default()
        },
        lock: lock.map(|value| (value, lock_ttl)),
        writer: writer.map(|value| (value, writer_ttl)),
    })
}

/// The permits held on `target` of a semaphore of `count` permits.
pub(super) async fn read_permits(
    target: &crate::node::Node,
    layout: &Layout,
    count: u32,
    deadline: Deadline,
) -> Result<Vec<HeldPermit>, NodeError> {
    let commands: Vec<(u32, Cmd, Cmd)> = (0..count)
        .map(|slot| {
            let key = layout.permit(slot);
            (slot, command("GET", &[&key]), command("PTTL", &[&key]))
        })
        .collect();
    let replies = futures::future::join_all(commands.iter().map(|(slot, get, pttl)| async move {
        let (value, ttl) =
            futures::future::join(target.read(get, deadline), target.read(pttl, deadline)).await;
        (*slot, value, ttl)
    }))
    .await;
    let mut held = Vec::new();
    for (slot, value, ttl) in replies {
        if let Some(value) = ours(value)?
            && let Some(holder) = holder(&value, integer(ttl?, "PTTL")?)?
        {
            held.push(HeldPermit { slot, holder });
        }
    }
    Ok(held)
}

/// A reply, with `None` for a key of another type (WRONGTYPE): not ours.
pub(super) fn ours(reply: Result<Value, NodeError>) -> Result<Option<Value>, NodeError> {
    match reply {
        Err(NodeError::Redis(e)) if e.code() == Some("WRONGTYPE") => Ok(None),
        Err(e) => Err(e),
        Ok(value) => Ok(Some(value)),
    }
}

/// An error for a reply of the wrong shape: names the command, never the
/// reply (it may hold a token).
pub(super) fn unexpected(command: &str) -> NodeError {
    NodeError::UnexpectedReply(format!("a reply of an unexpected type to {command}"))
}

pub(super) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

pub(super) fn integer(value: Value, command: &str) -> Result<i64, NodeError> {
    match &value {
        Value::Int(n) => Ok(*n),
        other => text(other)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| unexpected(command)),
    }
}

pub(super) fn float(value: &Value) -> Option<f64> {
    match value {
        Value::Double(f) => Some(*f),
        Value::Int(n) => Some(*n as f64),
        other => text(other).and_then(|t| t.parse().ok()),
    }
}

/// A string key's value (`Nil`: absent) and its `PTTL` (-1: no expiry,
/// -2: gone since).
pub(super) fn holder(value: &Value, pttl: i64) -> Result<Option<Holder>, NodeError> {
    if matches!(value, Value::Nil) || pttl == -2 {
        return Ok(None);
    }
    let token = text(value).ok_or_else(|| unexpected("GET"))?;
    Ok(Some(Holder {
        token: SeenToken(token.into()),
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
    }))
}

/// `HMGET <key>:leader token term rev value`: a leader's value, when all
/// four are there.
pub(super) fn proclaimed(value: Value) -> Result<Option<Proclaimed>, NodeError> {
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

/// `ZRANGE … WITHSCORES`: members and scores, flat (RESP2) or in pairs
/// (RESP3).
pub(super) fn scored(value: Value) -> Result<Vec<(String, f64)>, NodeError> {
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
pub(super) fn clock(value: Value) -> Result<u64, NodeError> {
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
mod tests {
    use super::*;

    #[test]
    fn replies_are_parsed_in_both_protocols() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
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
        let fields = Value::Array(vec![bulk("tok"), bulk("7"), bulk("2"), bulk("web")]);
        let leader = super::proclaimed(fields).expect("hmget").expect("complete");
        assert_eq!(
            (leader.term, leader.revision, leader.value.as_str()),
            (7, 2, "web")
        );
        let partial = Value::Array(vec![bulk("tok"), Value::Nil, bulk("2"), bulk("web")]);
        assert_eq!(super::proclaimed(partial).expect("hmget"), None);
        assert_eq!(holder(&Value::Nil, -2).expect("absent"), None);
        let no_expiry = holder(&bulk("tok"), -1).expect("held").expect("a holder");
        assert_eq!(no_expiry.ttl, None);
        assert_eq!(holder(&bulk("tok"), -2).expect("gone"), None);
    }

    #[test]
    fn errors_about_replies_never_show_them() {
        let error = integer(Value::BulkString(b"0123456789abcdef".to_vec()), "PTTL")
            .expect_err("not a number");
        assert!(!error.to_string().contains("0123"), "{error}");
    }
}
