//! What a node's server offers natively, as its `COMMAND DOCS` reply
//! shows it ([`Capabilities`], and the [`NativeDelete`] to release with),
//! and what a node knows of it on its current connection ([`Known`],
//! `Node`'s `caps` field). Nothing here needs the node, so `node/mod.rs`
//! holds a `Known` without importing the file that asks the server (this
//! folder's `mod.rs`), which uses `Node`.

use std::sync::atomic::{AtomicU8, Ordering};

use redis::{Cmd, Value};
use tokio::sync::Notify;

/// The native commands a server offers for a lock's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Capabilities {
    /// `SET key value IFEQ old`: set only while the key holds `old`.
    pub(crate) set_ifeq: bool,
    /// `DELIFEQ key value`: delete only while the key holds `value`.
    pub(crate) delifeq: bool,
    /// `DELEX key IFEQ value`: the same, as Redis 8.4 spells it.
    pub(crate) delex_ifeq: bool,
}

/// The native compare-and-delete a node offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NativeDelete {
    /// `DELIFEQ key value` (Valkey 9.0).
    Delifeq,
    /// `DELEX key IFEQ value` (Redis 8.4).
    DelexIfeq,
}

impl NativeDelete {
    /// The token-checked delete of `key` as this server spells it: 1 when
    /// deleted, 0 when the key held anything else or nothing.
    pub(crate) fn command(self, key: &str, token: &str) -> Cmd {
        let mut cmd = Cmd::with_capacity(4, Self::bytes(key, token));
        self.write(&mut cmd, key, token);
        cmd
    }

    /// [`command`](Self::command) written into `cmd` (empty).
    pub(crate) fn write(self, cmd: &mut Cmd, key: &str, token: &str) {
        match self {
            Self::Delifeq => cmd.arg("DELIFEQ").arg(key).arg(token),
            Self::DelexIfeq => cmd.arg("DELEX").arg(key).arg("IFEQ").arg(token),
        };
    }

    /// About the bytes of the command's arguments.
    pub(crate) fn bytes(key: &str, token: &str) -> usize {
        key.len() + token.len() + 16
    }
}

impl Capabilities {
    /// The question: the docs of the commands that matter, in one call.
    /// A server omits the commands it does not know; one without
    /// `COMMAND DOCS` (before Redis 7.0) answers an error, and has none.
    pub(crate) fn question() -> Cmd {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("DOCS").arg("SET").arg("DELIFEQ").arg("DELEX");
        cmd
    }

    /// What a `COMMAND DOCS SET DELIFEQ DELEX` reply says (RESP2: a flat
    /// list of names and docs; RESP3: a map).
    pub(crate) fn from_docs(reply: &Value) -> Self {
        let mut caps = Self::default();
        for (name, docs) in entries(reply) {
            if name.eq_ignore_ascii_case("set") {
                caps.set_ifeq = has_token(docs, "IFEQ");
            } else if name.eq_ignore_ascii_case("delifeq") {
                caps.delifeq = true;
            } else if name.eq_ignore_ascii_case("delex") {
                caps.delex_ifeq = has_token(docs, "IFEQ");
            }
        }
        caps
    }

    /// The compare-and-delete to release a lock's key with, if any.
    pub(crate) fn delete(&self) -> Option<NativeDelete> {
        if self.delifeq {
            Some(NativeDelete::Delifeq)
        } else if self.delex_ifeq {
            Some(NativeDelete::DelexIfeq)
        } else {
            None
        }
    }

    /// Whether an extension (and its restore) can go without a script.
    pub(crate) fn extend(&self) -> bool {
        self.set_ifeq
    }

    /// How this node releases and extends a plain lock, for `status` and
    /// the node check: the commands it sends.
    pub(crate) fn describe(&self) -> String {
        let release = match self.delete() {
            Some(NativeDelete::Delifeq) => "DELIFEQ",
            Some(NativeDelete::DelexIfeq) => "DELEX IFEQ",
            None => "script",
        };
        let extend = if self.extend() { "SET IFEQ" } else { "script" };
        format!("release {release}, extend {extend}")
    }

    fn bits(self) -> u8 {
        let bit = |on: bool, bit: u8| if on { bit } else { 0 };
        KNOWN
            | bit(self.set_ifeq, SET_IFEQ)
            | bit(self.delifeq, DELIFEQ)
            | bit(self.delex_ifeq, DELEX_IFEQ)
    }

    fn from_bits(bits: u8) -> Option<Self> {
        (bits & KNOWN != 0).then_some(Self {
            set_ifeq: bits & SET_IFEQ != 0,
            delifeq: bits & DELIFEQ != 0,
            delex_ifeq: bits & DELEX_IFEQ != 0,
        })
    }
}

const KNOWN: u8 = 1;
const SET_IFEQ: u8 = 2;
const DELIFEQ: u8 = 4;
const DELEX_IFEQ: u8 = 8;
/// Not known, and someone is asking.
const ASKING: u8 = 16;

/// A node's capabilities as last found, shared by every request: read
/// with one atomic load on the hot path.
#[derive(Debug, Default)]
pub(crate) struct Known {
    bits: AtomicU8,
    /// Wakes those waiting for the question in flight.
    pub(super) answered: Notify,
}

impl Known {
    /// The capabilities found on the current connection, if found yet.
    pub(crate) fn get(&self) -> Option<Capabilities> {
        Capabilities::from_bits(self.bits.load(Ordering::Acquire))
    }

    /// Claims the question if nobody knows nor asks yet: true for the one
    /// caller that should ask.
    pub(crate) fn claim(&self) -> bool {
        self.bits
            .compare_exchange(0, ASKING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether someone is asking.
    pub(super) fn asking(&self) -> bool {
        self.bits.load(Ordering::Acquire) == ASKING
    }

    /// Records the answer (or, with `None`, that the question failed, so
    /// that a later request asks again), and wakes who waits for it.
    pub(crate) fn set(&self, caps: Option<Capabilities>) {
        self.bits
            .store(caps.map_or(0, Capabilities::bits), Ordering::Release);
        self.answered.notify_waiters();
    }

    /// Forgets: the connection dropped, and the server that answers next
    /// may be another build. Whether it forgot anything (a question out
    /// keeps its place, below).
    pub(crate) fn forget(&self) -> bool {
        // Not while a question is out: its answer comes on the new
        // connection, and records what that server offers.
        self.bits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |bits| {
                (bits & KNOWN != 0).then_some(0)
            })
            .is_ok()
    }
}

/// `(command name, docs)` pairs of a `COMMAND DOCS` reply.
fn entries(reply: &Value) -> Vec<(String, &Value)> {
    match reply {
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v)))
            .collect(),
        Value::Array(items) => items
            .chunks_exact(2)
            .filter_map(|pair| Some((text(&pair[0])?, &pair[1])))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether `docs` (a command's, nested arguments included) names `token`
/// as an argument's token: a `token` field whose value is it. (A history
/// line that mentions it, such as "Added the `IFEQ` option.", does not
/// count.)
fn has_token(docs: &Value, token: &str) -> bool {
    let pairs: Vec<(&Value, &Value)> = match docs {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(items) => items.windows(2).map(|w| (&w[0], &w[1])).collect(),
        _ => return false,
    };
    let named = pairs.iter().any(|(k, v)| {
        text(k).is_some_and(|k| k.eq_ignore_ascii_case("token"))
            && text(v).is_some_and(|v| v.eq_ignore_ascii_case(token))
    });
    named
        || match docs {
            Value::Map(pairs) => pairs.iter().any(|(_, v)| has_token(v, token)),
            Value::Array(items) => items.iter().any(|v| has_token(v, token)),
            _ => false,
        }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn arg(name: &str, token: Option<&str>) -> Value {
        let mut fields = vec![s("name"), s(name), s("type"), s("pure-token")];
        if let Some(token) = token {
            fields.extend([s("token"), s(token)]);
        }
        Value::Array(fields)
    }

    /// A `SET` entry as Valkey 8.1 answers it: the IFEQ token nested in
    /// the condition's `oneof`, and a history line that names it too.
    fn set_docs(ifeq: bool) -> Value {
        let mut condition = vec![arg("nx", Some("NX")), arg("xx", Some("XX"))];
        if ifeq {
            condition.push(arg("comparison-value", Some("IFEQ")));
        }
        Value::Array(vec![
            s("summary"),
            s("Sets the string value of a key"),
            s("history"),
            Value::Array(vec![Value::Array(vec![
                s("8.1.0"),
                s("Added the `IFEQ` option."),
            ])]),
            s("arguments"),
            Value::Array(vec![
                arg("key", None),
                Value::Array(vec![
                    s("name"),
                    s("condition"),
                    s("type"),
                    s("oneof"),
                    s("arguments"),
                    Value::Array(condition),
                ]),
            ]),
        ])
    }

    #[test]
    fn valkey_9_has_both_and_releases_with_delifeq() {
        let reply = Value::Array(vec![
            s("set"),
            set_docs(true),
            s("delifeq"),
            Value::Array(vec![s("summary"), s("Delete key if value matches string.")]),
        ]);
        let caps = Capabilities::from_docs(&reply);
        assert!(caps.extend());
        assert_eq!(caps.delete(), Some(NativeDelete::Delifeq));
        assert_eq!(caps.describe(), "release DELIFEQ, extend SET IFEQ");
    }

    #[test]
    fn a_history_line_is_not_an_argument() {
        // Redis 8.0 and Valkey 8.0: SET without IFEQ, no DELIFEQ, no DELEX.
        let reply = Value::Array(vec![s("set"), set_docs(false)]);
        let caps = Capabilities::from_docs(&reply);
        assert_eq!(caps, Capabilities::default());
        assert_eq!(caps.describe(), "release script, extend script");
    }

    #[test]
    fn redis_8_4_spells_it_delex_and_answers_in_resp3() {
        let delex = Value::Map(vec![(
            s("arguments"),
            Value::Array(vec![arg("key", None), arg("ifeq-value", Some("IFEQ"))]),
        )]);
        let reply = Value::Map(vec![(s("set"), set_docs(true)), (s("delex"), delex)]);
        let caps = Capabilities::from_docs(&reply);
        assert!(caps.extend());
        assert_eq!(caps.delete(), Some(NativeDelete::DelexIfeq));
        let texts: Vec<String> = NativeDelete::DelexIfeq
            .command("k", "t")
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(texts, ["DELEX", "k", "IFEQ", "t"]);
    }

    #[test]
    fn anything_else_means_no_native_command() {
        for reply in [Value::Nil, Value::Int(1), Value::Array(vec![s("set")])] {
            assert_eq!(Capabilities::from_docs(&reply), Capabilities::default());
        }
    }

    #[test]
    fn one_caller_asks_and_a_drop_forgets() {
        let known = Known::default();
        assert_eq!(known.get(), None);
        assert!(known.claim());
        assert!(!known.claim(), "asked once at a time");
        assert_eq!(known.get(), None, "not known while asking");
        let caps = Capabilities {
            set_ifeq: true,
            delifeq: false,
            delex_ifeq: true,
        };
        known.set(Some(caps));
        assert_eq!(known.get(), Some(caps));
        assert!(!known.claim(), "known: nobody asks");
        known.forget();
        assert_eq!(known.get(), None);
        assert!(known.claim());
        known.set(None);
        assert!(known.claim(), "a failed question is asked again");
    }
}
