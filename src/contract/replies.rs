//! The reply readers every primitive's [`Reads`](super::Reads) share: a
//! command from its name and arguments, and a reply read as text, a
//! number, a held key, a scored set or the node's clock. Errors name the
//! command, never the reply (it may hold a token).

use std::time::Duration;

use redis::{Cmd, Value};

use crate::contract::stored::{Holder, SeenToken};
use crate::error::NodeError;

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
pub(crate) fn held(value: &Value, pttl: i64) -> Result<Option<Holder>, NodeError> {
    if matches!(value, Value::Nil) || pttl == -2 {
        return Ok(None);
    }
    let token = text(value).ok_or_else(|| unexpected("GET"))?;
    Ok(Some(Holder {
        token: SeenToken(token.into()),
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
            (&*held.token.0, held.ttl),
            ("tok", Some(Duration::from_millis(1500)))
        );
    }

    #[test]
    fn errors_about_replies_never_show_them() {
        let error = integer(Value::BulkString(b"0123456789abcdef".to_vec()), "PTTL")
            .expect_err("not a number");
        assert!(!error.to_string().contains("0123"), "{error}");
    }
}
