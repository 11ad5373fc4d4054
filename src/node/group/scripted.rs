//! A batch on a node without native compare-and-delete (Redis 6.2–8.0,
//! Valkey 7.2–8.1: the "script path") as a pipeline of the commands each
//! request would send alone: an acquire `SET key token NX PX ttl GET`, a
//! release `EVALSHA` of the holding's own release script (the one
//! [`Node::release`] runs), an extension `EVALSHA` of `batch.lua` with
//! that one entry (what [`Node::extend`] runs for a plain lock alone),
//! instead of one `batch.lua` call for them all. A prepared script call of
//! another primitive (a permit's or a reader-writer hold's acquire,
//! release or extension; see `request.rs`) goes in the same pipeline as
//! the `EVALSHA` it was prepared as, and is answered with its raw reply,
//! which its caller reads as it would read the call alone; on a node
//! with native commands it is the only script in a pipeline whose locks'
//! requests are native commands (`send.rs`).
//!
//! Why (issue #55): a `batch.lua` call runs its entries one after another
//! in one script, and a script call costs the node a Lua entry and exit
//! and the client a second encoding; below 24 requests in flight the lane
//! sent every request alone rather than pay that, each costing the node a
//! read, a reply and an event-loop turn of its own. A pipeline of plain
//! commands costs the node about what the same commands cost alone, minus
//! the per-call reads and writes, at every depth — so the lane batches
//! from a light load, as on a native node (see `Pacing`).
//!
//! Scripts a batch runs that the connection does not know its server
//! caches are loaded (`SCRIPT LOAD`) at the head of the same pipeline: the
//! server runs a connection's commands in order, so each `EVALSHA` finds
//! its script, and nothing is reordered. An `EVALSHA` answered `NOSCRIPT`
//! anyway (the cache flushed under an established connection, between two
//! batches or in the middle of one), or refused as a script (the user may
//! not run it, or the server has no Lua), did not run: that entry goes out
//! again on its own through the one script path ([`Node::run_script`]),
//! which loads the script or names the error as a lone request would
//! (after the entries behind it: a cache flushed in the middle of a
//! pipeline may refuse a later acquire of a key whose release goes again,
//! a spurious "no"; an extension whose release ran behind it is not sent
//! again, so that it cannot restore a released key: it answers "not
//! extended"). An entry is never answered as done for a command that did
//! not run.

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::request::{Item, Prepared, Single, Step};
use crate::contract::Release;
use crate::error::NodeError;
use crate::node::batch::{BATCH, SingleOp};
use crate::node::ordered::Ordered;
use crate::node::replies::Answered;
use crate::node::run::{is_script_refusal, is_unknown_command};
use crate::node::{Backend, Deadline, NativeDelete, Node, Resend, unexpected};
use crate::request::Ttl;
use crate::scripts::{Lua, Replicas, ScriptMode};

/// What one entry of a pipelined batch got.
enum Got {
    /// Its answer (or its own error), in its place.
    Answer(Result<Answered, NodeError>),
    /// Its script did not run (`NOSCRIPT`, or refused as a script): it
    /// goes out again alone.
    Again,
}

impl Node {
    /// The node's connection, if its batches go as pipelines of the
    /// holdings' own commands (see the module's docs): a standalone node
    /// (a cluster pipeline is routed by its keys, and a `SCRIPT LOAD` at
    /// its head would go to any member) whose scripts run by `EVALSHA`
    /// (not as Functions), and whose commands are known (until they are,
    /// a batch does not know which path its node takes).
    pub(super) fn pipelines_scripts(
        &self,
        caps: Option<crate::node::caps::Capabilities>,
    ) -> Option<&Ordered> {
        match &self.backend {
            Backend::Standalone(ordered)
                if caps.is_some() && self.script_mode == ScriptMode::Eval =>
            {
                Some(ordered)
            }
            _ => None,
        }
    }

    /// Whether the server takes `SET … NX … GET` (Redis 7.0 on; every
    /// Valkey): as its `INFO server` said when its commands were learnt.
    /// A server that did not say (an ACL without `INFO`), or Redis 6.2,
    /// gets `SET NX PX` then `GET` instead: one command more per acquire,
    /// and still idempotent for a resend.
    fn sets_nx_get(&self) -> bool {
        let Some(server) = self.server.get() else {
            return false;
        };
        match server.split_once(' ') {
            Some(("valkey", _)) => true,
            Some(("redis", version)) => version
                .split('.')
                .next()
                .and_then(|major| major.parse::<u32>().ok())
                .is_some_and(|major| major >= 7),
            _ => false,
        }
    }

    /// `group` of `requests` in one pipeline of the holdings' own commands
    /// (see the module's docs), on the standalone connection `ordered`:
    /// one answer per request, in order, as [`batch_call`](Self::batch_call)
    /// answers them; a request's own error in its place. With `native`
    /// (the node has native compare-and-set commands) a lock's requests
    /// go as the native commands `batch_native` sends, and only prepared
    /// script calls run scripts. Every command in it is idempotent for
    /// its token, so a pipeline whose connection dropped goes out once
    /// more.
    pub(super) async fn batch_pipelined(
        &self,
        ordered: &Ordered,
        native: Option<NativeDelete>,
        requests: &[Item<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<Answered, NodeError>>, NodeError> {
        let nx_get = self.sets_nx_get();
        let request = |i: usize| requests.get(i).copied();
        // The scripts this batch runs (a lock's release and extension, a
        // fenced lock's release, the primitives' own: a few at most).
        let mut scripts: Vec<&'static Lua> = Vec::new();
        for &i in group {
            if let Some(lua) = request(i).and_then(|r| script_of(r, native))
                && !scripts.iter().any(|s| s.index == lua.index)
            {
                scripts.push(lua);
            }
        }
        // Taken before the pipeline goes out: what it finds cached counts
        // for this connection only (see `Ordered::note_cached`).
        let known = ordered.cached();
        // All of them if any is not known cached: a script known cached
        // but flushed since would answer NOSCRIPT behind one loaded here,
        // and going again alone it would run after entries it came before.
        let load = scripts
            .iter()
            .any(|lua| !Ordered::is_cached(known, lua.cache_bit()));
        let loads = if load { scripts.len() } else { 0 };
        // Room for replica sync's `WAIT` too.
        let mut commands = redis::Pipeline::with_capacity(loads + 2 * group.len() + 1);
        if load {
            for lua in &scripts {
                commands.cmd("SCRIPT").arg("LOAD").arg(lua.source);
            }
        }
        let mut writes = false;
        for r in group.iter().filter_map(|&i| request(i)) {
            writes |= match (r, native) {
                (Item::Single(r), Some(delete)) => self.push_native(&mut commands, delete, r),
                (Item::Single(r), None) => push_scripted(&mut commands, r, nx_get),
                (Item::Script(call), _) => {
                    commands.add_command(call.cmd.clone());
                    call.lua.replicas == Replicas::Wait
                }
            };
        }
        let tokens: Vec<&str> = group
            .iter()
            .filter_map(|&i| request(i))
            .map(Item::token)
            .collect();
        let replies = self
            .pipeline(commands, writes, &tokens, Resend::IfDropped, deadline)
            .await?;
        let mut replies = replies.iter();
        for lua in scripts.iter().take(loads) {
            // A load refused (an ACL without `SCRIPT`) leaves the script
            // unknown: its entries answer NOSCRIPT, and go again alone.
            if let Some(Value::BulkString(_) | Value::SimpleString(_)) = replies.next() {
                ordered.note_cached(known, lua.cache_bit());
            }
        }
        let mut answers = Vec::with_capacity(group.len());
        let mut again = Vec::new();
        for &i in group {
            let Some(r) = request(i) else {
                answers.push(Err(unexpected(&Value::Nil)));
                continue;
            };
            let got = match (r, native) {
                // (On a standalone node a release's announcement is in
                // its own pipeline: nothing to announce after it.)
                (Item::Single(r), Some(_)) => {
                    Got::Answer(self.native_answer(r, &mut replies).map(Answered::Status))
                }
                (Item::Single(r), None) => self.scripted_answer(r, &mut replies, nx_get),
                (Item::Script(call), _) => self.prepared_answer(call, replies.next()),
            };
            match got {
                Got::Answer(answer) => answers.push(answer),
                Got::Again => {
                    if let Some(lua) = script_of(r, native) {
                        ordered.forget_cached(lua.cache_bit());
                    }
                    again.push(answers.len());
                    answers.push(Err(unexpected(&Value::Nil)));
                }
            }
        }
        // In order, each alone, through the one script path (which sends
        // the script's text now that it is not known cached). An
        // extension whose holding a later entry of this pipeline released
        // is not sent again: run after that release, a restoring extension
        // would put the released key back (a token is one holding's).
        for n in again {
            let Some(r) = group.get(n).and_then(|&i| request(i)) else {
                continue;
            };
            let released_later = r.step() == Step::Extend
                && group.iter().enumerate().skip(n + 1).any(|(m, &j)| {
                    request(j).is_some_and(|later| {
                        later.step() == Step::Release && later.token() == r.token()
                    }) && matches!(answers.get(m), Some(Ok(_)))
                });
            let answer = if released_later {
                Ok(not_extended(r))
            } else {
                self.alone(r, deadline).await
            };
            if let Some(slot) = answers.get_mut(n) {
                *slot = answer;
            }
        }
        Ok(answers)
    }

    /// A prepared script call's answer from its reply: the reply as it
    /// came, the script's own error (e.g. `NOPERM` on a key) in its place,
    /// or [`Got::Again`] if its script did not run.
    fn prepared_answer(&self, call: &Prepared, reply: Option<&Value>) -> Got {
        let Some(reply) = reply else {
            return Got::Answer(Err(unexpected(&Value::Nil)));
        };
        if let Some(again) = not_run(reply) {
            return again;
        }
        Got::Answer(match reply {
            Value::ServerError(error) => Err(self.own_error(error, call.token.as_str())),
            reply => Ok(Answered::Value(reply.clone())),
        })
    }

    /// `request`'s answer from its replies, taken from `replies` (as many
    /// as [`push_scripted`] sent for it).
    fn scripted_answer(
        &self,
        request: Single<'_>,
        replies: &mut std::slice::Iter<'_, Value>,
        nx_get: bool,
    ) -> Got {
        let Single {
            op,
            key,
            token,
            shape,
        } = request;
        let Some(reply) = replies.next() else {
            return Got::Answer(Err(unexpected(&Value::Nil)));
        };
        match op {
            SingleOp::Acquire { .. } if nx_get => {
                Got::Answer(self.acquired(reply, token).map(Answered::Status))
            }
            SingleOp::Acquire { .. } => {
                // `SET NX PX`, then `GET`: refused by the first, the key
                // holding our token means this request set it before its
                // connection dropped (no one else writes our token).
                let get = replies.next();
                Got::Answer(
                    match (self.native_status(reply, token), get) {
                        (Ok(1), _) => Ok(1),
                        (Ok(_), Some(Value::BulkString(value))) => {
                            Ok(u8::from(value == token.as_bytes()))
                        }
                        (Ok(_), _) => Ok(0),
                        (Err(error), _) => Err(error),
                    }
                    .map(Answered::Status),
                )
            }
            SingleOp::Release { announce } => {
                if let Some(again) = not_run(reply) {
                    return again;
                }
                let keys = std::slice::from_ref(key);
                let release = Release {
                    keys,
                    token,
                    announce,
                };
                Got::Answer(match reply {
                    Value::ServerError(error) => Err(self.own_error(error, token)),
                    reply => shape
                        .released(&release, reply)
                        .map(|released| Answered::Status(released.into())),
                })
            }
            SingleOp::Extend { .. } => {
                if let Some(again) = not_run(reply) {
                    return again;
                }
                Got::Answer(match reply {
                    Value::Array(items) => match items.as_slice() {
                        [Value::Int(status @ 0..=2)] => Ok(Answered::Status(*status as u8)),
                        // The entry's own error, as `batch.lua` answers it.
                        [Value::ServerError(error)] => Err(self.own_error(error, token)),
                        _ => Err(unexpected(reply)),
                    },
                    Value::ServerError(error) => Err(self.own_error(error, token)),
                    reply => Err(unexpected(reply)),
                })
            }
        }
    }

    /// An entry's own error (e.g. `NOPERM` on its key), its token and the
    /// node's passwords scrubbed out, as it would fail alone.
    fn own_error(&self, error: &redis::ServerError, token: &str) -> NodeError {
        self.redact(NodeError::Redis(error.clone().into()), &[token])
    }
}

/// The script `request` runs, if any: a prepared call's own; a lock's
/// request's none with `native` commands, else a release's as its
/// holding's shape says, an extension's `batch.lua` (see
/// [`push_scripted`]).
fn script_of(request: Item<'_>, native: Option<NativeDelete>) -> Option<&'static Lua> {
    let request = match request {
        Item::Script(call) => return Some(call.lua),
        Item::Single(_) if native.is_some() => return None,
        Item::Single(request) => request,
    };
    match request.op {
        SingleOp::Acquire { .. } => None,
        SingleOp::Release { .. } => Some(request.shape.release_script()),
        SingleOp::Extend { .. } => Some(&BATCH),
    }
}

/// What an extension not sent again answers (see `batch_pipelined`):
/// refused — a lock's status 0, or an extension script's one status per
/// holding, 0 (as `Shape::extend_script` answers).
fn not_extended(request: Item<'_>) -> Answered {
    match request {
        Item::Single(_) => Answered::Status(0),
        Item::Script(_) => Answered::Value(Value::Array(vec![Value::Int(0)])),
    }
}

/// [`Got::Again`] if `reply` says a script did not run: `NOSCRIPT`, or
/// refused as a script (a user that may not run `EVALSHA`, a server
/// without Lua, or with `EVALSHA` renamed away). Alone, the one script
/// path loads it, or names the error as it does for any request.
fn not_run(reply: &Value) -> Option<Got> {
    let Value::ServerError(error) = reply else {
        return None;
    };
    let error = redis::RedisError::from(error.clone());
    let again = error.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        || is_script_refusal(&error)
        || is_unknown_command(&error, "EVALSHA")
        || error
            .detail()
            .is_some_and(|detail| detail.contains("Could not find scripting engine"));
    again.then_some(Got::Again)
}

/// Appends `request`'s commands (see the module's docs); whether they
/// write a lock (for replica sync's `WAIT`).
fn push_scripted(commands: &mut redis::Pipeline, request: Single<'_>, nx_get: bool) -> bool {
    let Single {
        op,
        key,
        token,
        shape,
    } = request;
    match op {
        SingleOp::Acquire { ttl } => {
            push_acquire(commands, key, token, ttl, nx_get);
            true
        }
        SingleOp::Release { announce } => {
            let lua = shape.release_script();
            let release = Release {
                keys: std::slice::from_ref(key),
                token,
                announce,
            };
            let size = 2 * key.len() + token.len() + 96;
            let mut cmd = Cmd::with_capacity(8, size);
            cmd.arg("EVALSHA").arg(lua.script.get_hash());
            shape.release_call(&release, &mut cmd);
            commands.add_command(cmd);
            false
        }
        SingleOp::Extend { ttl } => {
            // As `Node::extend` sends a plain lock's extension alone: one
            // entry of `batch.lua` (an extension batched goes only where
            // the shape's extension touches its key alone, see
            // `Op::batched`).
            let mut cmd = Cmd::with_capacity(8, key.len() + token.len() + 64);
            cmd.arg("EVALSHA")
                .arg(BATCH.script.get_hash())
                .arg(1)
                .arg(&**key)
                .arg("e")
                .arg(token)
                .arg(ttl.ms())
                .arg("");
            commands.add_command(cmd);
            true
        }
    }
}

impl Node {
    /// What `SET key token NX PX ttl GET` answered, as a status: Nil, set
    /// now; our token, set by this request before its connection dropped
    /// and it went out again (no one else writes our token); any other
    /// value, refused.
    pub(super) fn acquired(&self, reply: &Value, token: &str) -> Result<u8, NodeError> {
        match reply {
            Value::Nil => Ok(1),
            Value::BulkString(value) => Ok(u8::from(value == token.as_bytes())),
            reply => self.native_status(reply, token).map(|_| 0),
        }
    }
}

/// An acquire: `SET key token NX PX ttl GET` where the server takes it,
/// else `SET key token NX PX ttl` then `GET key`.
pub(super) fn push_acquire(
    commands: &mut redis::Pipeline,
    key: &str,
    token: &str,
    ttl: Ttl,
    nx_get: bool,
) {
    let mut cmd = Cmd::with_capacity(7, key.len() + token.len() + 32);
    cmd.arg("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl.ms());
    if nx_get {
        cmd.arg("GET");
        commands.add_command(cmd);
    } else {
        let mut get = Cmd::with_capacity(2, key.len() + 4);
        get.arg("GET").arg(key);
        commands.add_command(cmd).add_command(get);
    }
}

#[cfg(test)]
mod tests {
    /// Against a real server: needs the test kit.
    #[cfg(feature = "testkit")]
    mod against_a_server {
        use std::sync::Arc;
        use std::time::Duration;

        use redis::Value;
        use tokio::time::Instant;

        use crate::contract::ShapeRef;
        use crate::node::batch::{BATCH, SingleOp};
        use crate::node::group::request::{Item, Prepared, Single, Step};
        use crate::node::replies::Answered;
        use crate::node::{Deadline, Node, NodeOptions, Resend};
        use crate::request::Ttl;
        use crate::testkit::RedisServer;
        use crate::token::Token;

        fn deadline() -> Deadline {
            Deadline::from(Instant::now() + Duration::from_secs(10))
        }

        async fn admin(node: &Node, cmd: &redis::Cmd) -> Value {
            node.command(cmd, &[], Resend::Never, deadline())
                .await
                .expect("an admin command")
        }

        /// Calls of `command` since the last `CONFIG RESETSTAT`.
        async fn calls_of(node: &Node, command: &str) -> u64 {
            let mut info = redis::cmd("INFO");
            info.arg("commandstats");
            let stats: String = redis::from_redis_value(admin(node, &info).await).expect("text");
            let prefix = format!("cmdstat_{command}:calls=");
            stats
                .lines()
                .find_map(|line| line.strip_prefix(prefix.as_str()))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0)
        }

        /// A script call as a primitive prepares one: here `batch.lua`'s
        /// acquire of `key` (a script of the node layer's own).
        fn acquire(key: &str, token: &Token) -> Prepared {
            Prepared::new(&BATCH, Step::Acquire, token, (6, 64), |cmd| {
                cmd.arg(1)
                    .arg(key)
                    .arg("a")
                    .arg(token.as_str())
                    .arg(30_000)
                    .arg("");
            })
        }

        fn granted(answer: &Result<Answered, crate::error::NodeError>) -> Option<i64> {
            match answer {
                Ok(Answered::Value(Value::Array(items))) => match items.as_slice() {
                    [Value::Int(status)] => Some(*status),
                    _ => None,
                },
                _ => None,
            }
        }

        /// Prepared script calls in one batch with a lock's request go as
        /// one pipeline (the script loaded at its head, never sent with its
        /// text as a lone call would), each answered in its place with its
        /// raw reply — a refusal, and an entry's own error, its own; after
        /// the cache is flushed under the connection, each `NOSCRIPT` entry
        /// goes again alone and is answered right.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn prepared_calls_go_in_the_pipeline_each_answered_in_its_place() {
            let server = RedisServer::start().expect("redis-server");
            let node = Node::parse(&server.url(), &NodeOptions::default()).expect("node");
            let mut eval = redis::cmd("EVAL");
            eval.arg("return 1").arg(0);
            if node
                .command(&eval, &[], Resend::Never, deadline())
                .await
                .is_err()
            {
                eprintln!("skipped: the server runs no scripts");
                return;
            }
            // Its commands learnt; nothing of `batch.lua` known cached.
            let token = Token::generate().expect("random source");
            let ttl = Ttl::from_millis(30_000);
            assert!(
                node.acquire("taken", token.as_str(), ttl, deadline())
                    .await
                    .expect("SET")
            );
            let Some(ordered) = node.pipelines_scripts(node.capabilities()) else {
                eprintln!("skipped: this node's batches are not pipelines");
                return;
            };
            assert!(!crate::node::ordered::Ordered::is_cached(
                ordered.cached(),
                BATCH.cache_bit()
            ));
            let mut reset = redis::cmd("CONFIG");
            reset.arg("RESETSTAT");
            admin(&node, &reset).await;

            let tokens: Vec<Token> = (0..8)
                .map(|_| Token::generate().expect("random source"))
                .collect();
            let mut calls: Vec<Prepared> = tokens
                .iter()
                .enumerate()
                .map(|(i, token)| acquire(&format!("p:{i}"), token))
                .collect();
            // Held by another token: refused in its place.
            calls.push(acquire("taken", &tokens[0]));
            // An entry the server refuses on its own (more keys than
            // arguments): its error in its place.
            calls.push(Prepared::new(
                &BATCH,
                Step::Acquire,
                &tokens[1],
                (2, 8),
                |cmd| {
                    cmd.arg(5).arg("k");
                },
            ));
            let lock_key: Arc<str> = "plain".into();
            let lock_token = Token::generate().expect("random source");
            let single = Single {
                op: SingleOp::Acquire { ttl },
                key: &lock_key,
                token: lock_token.as_str(),
                shape: &ShapeRef::LOCK,
            };
            let mut items: Vec<Item<'_>> = calls.iter().map(Item::Script).collect();
            items.insert(3, Item::Single(single));
            let answers = node.batch(&items, deadline()).await.expect("a batch");
            assert_eq!(answers.len(), items.len());
            for (n, answer) in answers.iter().enumerate() {
                match n {
                    3 => assert_eq!(answer.as_ref().ok(), Some(&Answered::Status(1)), "{n}"),
                    9 => assert_eq!(granted(answer), Some(0), "{n}: {answer:?}"),
                    10 => assert!(answer.is_err(), "{n}: {answer:?}"),
                    _ => assert_eq!(granted(answer), Some(1), "{n}: {answer:?}"),
                }
            }
            // One pipeline: the script loaded at its head once, run by
            // hash; a lone call not known cached would have sent its text.
            assert_eq!(calls_of(&node, "script|load").await, 1);
            assert_eq!(calls_of(&node, "eval").await, 0);
            assert!(calls_of(&node, "evalsha").await >= 10);

            // Flushed under the connection, which knows it cached.
            let mut flush = redis::cmd("SCRIPT");
            flush.arg("FLUSH");
            admin(&node, &flush).await;
            let again: Vec<Prepared> = tokens
                .iter()
                .enumerate()
                .map(|(i, token)| acquire(&format!("q:{i}"), token))
                .collect();
            let items: Vec<Item<'_>> = again.iter().map(Item::Script).collect();
            let answers = node.batch(&items, deadline()).await.expect("a batch");
            for (n, answer) in answers.iter().enumerate() {
                assert_eq!(granted(answer), Some(1), "{n}: {answer:?}");
            }
            for (i, token) in tokens.iter().enumerate() {
                let mut get = redis::cmd("GET");
                get.arg(format!("q:{i}"));
                let held = admin(&node, &get).await;
                assert_eq!(held, Value::BulkString(token.as_str().as_bytes().to_vec()));
            }
        }
    }
}
