//! Sending one request to a node: a command, or a script as EVAL until
//! the node is known to cache it, then EVALSHA (NOSCRIPT resets it), or as
//! FCALL of the Functions library; `WAIT` for replicas behind writes;
//! resending after a dropped connection where that is safe; and errors
//! with secrets redacted.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::{Cmd, ErrorKind, FromRedisValue, ServerErrorKind, Value};

use super::buffers::Buffer;
use super::ordered::Ordered;
use crate::error::NodeError;
use crate::node::options::ReplicaSync;
use crate::node::{Backend, Deadline, Node, redact, unexpected, within};
use crate::scripts::{Lua, Replicas, ScriptMode};

tokio::task_local! {
    /// Set while a node's debts are being paid: the payment's own requests
    /// pass the gates that hold a node's other requests (see `Node::gate`
    /// in `owed/mod.rs`, and the turn `caps/mod.rs` waits for).
    pub(super) static PAYING: ();
}

/// Whether the current task is paying a node's debts.
pub(super) fn paying() -> bool {
    PAYING.try_with(|_| ()).is_ok()
}

/// Whether a call may go out again when its connection dropped before the
/// answer came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    Never,
    /// The call is idempotent: sending it twice does what sending it once
    /// does. Its reply may not be: a release sent again finds the token
    /// its first sending deleted (see [`Node::resent`]).
    IfDropped,
}

/// What goes to a node in one round trip: a command, or a pipeline of them.
#[derive(Clone, Copy)]
enum Payload<'a> {
    Command(&'a Cmd),
    Pipeline(&'a redis::Pipeline),
}

impl Payload<'_> {
    async fn query<T: FromRedisValue>(
        self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        match self {
            Self::Command(cmd) => cmd.query_async(conn).await,
            Self::Pipeline(pipe) => pipe.query_async(conn).await,
        }
    }

    /// [`query`](Self::query) on a standalone node's connection: a command
    /// through the connection's own `send_packed_command`, whose future is
    /// held in the caller's rather than boxed by `ConnectionLike` on its
    /// own (1,152 bytes, a second allocation per command, and a large one
    /// for glibc).
    async fn query_on<T: FromRedisValue>(
        self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> redis::RedisResult<T> {
        match self {
            Self::Command(cmd) => {
                let value = conn.send_packed_command(cmd).await?;
                Ok(redis::from_redis_value(value.extract_error()?)?)
            }
            pipeline => pipeline.query(conn).await,
        }
    }
}

impl Node {
    /// Sends `cmd` within `deadline`. Whatever the server says, its error
    /// reaches the caller with `secrets` (the call's tokens) and the node's
    /// passwords scrubbed out (see [`redact`]).
    pub(super) async fn command(
        &self,
        cmd: &Cmd,
        secrets: &[&str],
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        self.learning(deadline, self.send(cmd, secrets, resend, deadline))
            .await
    }

    /// [`command`](Self::command), without asking what the server offers.
    pub(super) async fn send(
        &self,
        cmd: &Cmd,
        secrets: &[&str],
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let reply = within(deadline, self.deliver(Payload::Command(cmd), resend)).await;
        reply.map_err(|error| self.redact(error, secrets))
    }

    /// Sends `pipe` within `deadline`, as it is (no replica sync, no
    /// question of what the server offers), and reads one reply per
    /// command.
    pub(super) async fn send_pipeline(
        &self,
        pipe: &redis::Pipeline,
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Vec<Value>, NodeError> {
        let reply = within(deadline, self.deliver(Payload::Pipeline(pipe), resend)).await;
        reply.map_err(|error| self.redact(error, &[]))
    }

    /// Sends the read-only command `cmd` within `deadline` (sent once more
    /// if the connection dropped: a read can be), for looking at what the
    /// node keeps ([`Redlock::inspect`](crate::Redlock::inspect)). On a
    /// cluster it goes to the master of its key.
    pub(crate) async fn read(&self, cmd: &Cmd, deadline: Deadline) -> Result<Value, NodeError> {
        self.command(cmd, &[], Resend::IfDropped, deadline).await
    }

    /// `error` with every secret of a call scrubbed out of its text: the
    /// call's `tokens` and the node's passwords.
    pub(crate) fn redact(&self, error: NodeError, tokens: &[&str]) -> NodeError {
        let secrets: Vec<&str> = tokens
            .iter()
            .copied()
            .chain(self.passwords.iter().map(String::as_str))
            .collect();
        redact(error, &secrets)
    }

    /// Sends a lock write: as [`command`](Self::command), and with replica
    /// sync, `WAIT` right behind it in one pipeline (so it waits for this
    /// write, even if the connection is new).
    pub(crate) async fn write(
        &self,
        cmd: &Cmd,
        secrets: &[&str],
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let Some(sync) = self.replica_sync else {
            return self.command(cmd, secrets, resend, deadline).await;
        };
        // Boxed: most nodes have no replica sync, and every lone acquire's
        // future would otherwise carry this path's size.
        Box::pin(self.write_synced(sync, cmd, secrets, resend, deadline)).await
    }

    /// [`write`](Self::write) with replica sync `sync`: `WAIT` behind `cmd`.
    async fn write_synced(
        &self,
        sync: ReplicaSync,
        cmd: &Cmd,
        secrets: &[&str],
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        // Refused by the builder: WAIT would go to any member.
        if self.is_cluster() {
            return Err(NodeError::UnexpectedReply(
                "replica sync on a cluster node".to_owned(),
            ));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone()).add_command(sync.wait());
        let sent = within(deadline, async {
            let (value, acknowledged) = self.deliver(Payload::Pipeline(&pipe), resend).await?;
            sync.check(value, acknowledged)
        });
        self.learning(deadline, sent)
            .await
            .map_err(|error| self.redact(error, secrets))
    }

    /// Sends the pipeline `pipe` within `deadline`, one reply per command,
    /// in order; a command the server refused gets its error in its place
    /// (`Value::ServerError`). With replica sync and `writes`, `WAIT` goes
    /// right behind them (the caller leaves room for it: the commands are
    /// built into the pipeline, not copied into it) and every reply counts
    /// only if enough replicas acknowledged.
    pub(crate) async fn pipeline(
        &self,
        mut pipe: redis::Pipeline,
        writes: bool,
        secrets: &[&str],
        resend: Resend,
        deadline: Deadline,
    ) -> Result<Vec<Value>, NodeError> {
        let count = pipe.len();
        let sync = self.replica_sync.filter(|_| writes);
        if let Some(sync) = sync {
            if self.is_cluster() {
                return Err(NodeError::UnexpectedReply(
                    "replica sync on a cluster node".to_owned(),
                ));
            }
            pipe.add_command(sync.wait());
        }
        pipe.ignore_errors();
        let sent = within(deadline, self.deliver(Payload::Pipeline(&pipe), resend));
        let mut replies: Vec<Value> = self
            .learning(deadline, sent)
            .await
            .map_err(|error| self.redact(error, secrets))?;
        if let Some(sync) = sync {
            let acknowledged = match replies.pop() {
                Some(Value::Int(n)) => n,
                other => return Err(unexpected(&other.unwrap_or(Value::Nil))),
            };
            sync.check(Value::Nil, acknowledged)?;
        }
        if replies.len() != count {
            return Err(unexpected(&Value::Array(replies)));
        }
        Ok(replies)
    }

    /// Sends `payload` and reads its reply as a `T`: the one loop every
    /// request takes to a node's connection — sent once more where
    /// `resend` allows and the connection dropped (see
    /// [`resends`](Self::resends)), with the connection's loss noted. The
    /// callers bound it by their deadline and redact its errors.
    async fn deliver<T: FromRedisValue>(
        &self,
        payload: Payload<'_>,
        resend: Resend,
    ) -> Result<T, NodeError> {
        // A node that reaches another node's server never votes (see
        // `identity`); one that does not answer is not asked: nothing to
        // queue on its connection, to time or to follow (see `health`);
        // one owed releases has them paid now (see `owed`).
        self.gate()?;
        self.deliver_to_any(payload, resend).await
    }

    /// `cmd`, sent once, even to a node [not asked](Self::unresponsive):
    /// the probe that finds whether it answers again.
    pub(super) async fn deliver_unasked<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
    ) -> Result<T, NodeError> {
        self.deliver_to_any(Payload::Command(cmd), Resend::Never)
            .await
    }

    /// [`deliver`](Self::deliver), whether the node is asked or not.
    async fn deliver_to_any<T: FromRedisValue>(
        &self,
        payload: Payload<'_>,
        resend: Resend,
    ) -> Result<T, NodeError> {
        let mut sent = 0;
        loop {
            sent += 1;
            let reply = match &self.backend {
                Backend::Standalone(ordered) => {
                    ordered
                        .send(|mut conn| async move { payload.query_on(&mut conn).await })
                        .await
                }
                Backend::Cluster(cluster) => {
                    let mut conn = self.cluster_connection(cluster).await?;
                    payload.query(&mut conn).await
                }
            };
            if let Err(e) = &reply {
                self.dropped(e);
            }
            match reply {
                Err(e) if sent == 1 && self.resends(resend, &e) => continue,
                Err(e) if is_auth_refusal(&e) => {
                    return Err(NodeError::AuthRefused { user: self.user() });
                }
                reply => return Ok(reply?),
            }
        }
    }

    /// The user this node's URL names (`default` when none).
    pub(crate) fn user(&self) -> String {
        self.servers()
            .first()
            .and_then(|client| client.get_connection_info().redis_settings().username())
            .unwrap_or("default")
            .to_owned()
    }

    /// Whether a call that failed with `error` goes out once more: an
    /// idempotent call whose standalone connection dropped (the node
    /// restarted, or a proxy cut it). The connection is being made anew
    /// (redis-rs reconnects on the error), so a node that came back keeps
    /// its vote instead of losing it to a stale connection — which, after a
    /// rolling restart, could cost a renewal two nodes at once. A cluster
    /// client retries by itself.
    pub(super) fn resends(&self, resend: Resend, error: &redis::RedisError) -> bool {
        let resends = resend == Resend::IfDropped
            && error.is_connection_dropped()
            && matches!(self.backend, Backend::Standalone(_));
        if resends {
            self.resends.fetch_add(1, Ordering::AcqRel);
            tracing::debug!(node = %self.label, error = %error, "connection dropped, sending again");
        }
        resends
    }

    /// Runs `lua` on `keys` with `args` within `deadline`. This is the one
    /// path every script takes. In [`ScriptMode::Eval`]: EVALSHA, and the
    /// script's text on NOSCRIPT (a restarted node has an empty cache). In
    /// [`ScriptMode::Functions`]: FCALL of the script's function, which a
    /// cluster routes by its first key like EVALSHA. On a cluster every key
    /// must share a hash slot; requests are checked for that before any I/O.
    ///
    /// `secrets` (the tokens among `args`) never appear in its errors.
    pub(crate) async fn script(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&str],
        secrets: &[&str],
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let fill = |cmd: &mut Cmd| {
            cmd.arg(keys.len()).arg(keys).arg(args);
        };
        let bytes = keys.iter().chain(args).map(|a| a.len()).sum::<usize>() + 4;
        self.run_script(
            lua,
            fill,
            (1 + keys.len() + args.len(), bytes),
            secrets,
            deadline,
        )
        .await
    }

    /// [`script`](Self::script) with the call's arguments (`numkeys`, the
    /// keys, the args) written by `fill` straight into the command, with no
    /// list of them in between: a batch has hundreds.
    /// `size` is how many arguments `fill` writes and about how many bytes,
    /// so that the command is allocated once rather than grown.
    pub(crate) async fn run_script(
        &self,
        lua: &Lua,
        fill: impl Fn(&mut Cmd) + Sync,
        size: (usize, usize),
        secrets: &[&str],
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let call = ScriptCall {
            node: self,
            lua,
            fill: &fill,
            size,
            secrets,
            deadline,
            // Every script but the releases writes a lock (or its
            // counter): with replica sync, `WAIT` goes right behind it.
            writes: self.replica_sync.is_some() && lua.replicas == Replicas::Wait,
        };
        if self.script_mode == ScriptMode::Functions {
            return call.by_function().await;
        }
        match call.by_text_or_hash().await {
            Err(NodeError::Redis(e)) if is_script_refusal(&e) => {
                Err(self.scripts_refused(lua, deadline).await)
            }
            Err(NodeError::Redis(e)) if is_without_scripting(&e) => Err(NodeError::NoScripting {
                script: lua.function.to_owned(),
                server: self.server(deadline).await.to_string(),
            }),
            reply => reply,
        }
    }

    /// The error for a script the user may not run here: which script,
    /// what the server lacks to go without it, and the server.
    async fn scripts_refused(&self, lua: &Lua, deadline: Deadline) -> NodeError {
        let native = match self.capabilities() {
            Some(caps) if caps.delete().is_some() && caps.extend() => {
                "it has no native form (fenced and multi-resource locks, semaphores, reader-writer locks and elections need scripts on every server)".to_owned()
            }
            Some(caps) => format!(
                "this server's native commands do not cover it ({}; a native release needs DELIFEQ, Valkey 9.0, or DELEX IFEQ, Redis 8.4; a native extension SET IFEQ, Valkey 8.1 or Redis 8.4)",
                caps.describe()
            ),
            None => "this server's native commands are not known (it did not answer COMMAND DOCS)"
                .to_owned(),
        };
        NodeError::ScriptsRefused {
            script: lua.function.to_owned(),
            native,
            server: self.server(deadline).await.to_string(),
        }
    }

    /// What the server says it is and its version (`redis 6.2.16`,
    /// `valkey 8.0.1`), from `INFO server`: asked once, within `deadline`,
    /// for an error that names it. A server that does not say (the user
    /// may not run INFO) is described as such, and asked again next time.
    pub(super) async fn server(&self, deadline: Deadline) -> Arc<str> {
        if let Some(server) = self.server.get() {
            return server.clone();
        }
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        let info = match self.command(&cmd, &[], Resend::IfDropped, deadline).await {
            Ok(reply) => describe_server(&reply),
            Err(e) => {
                tracing::debug!(node = %self.label, error = %e, "INFO server failed");
                None
            }
        };
        match info {
            Some(server) => self
                .server
                .get_or_init(|| async { server.into() })
                .await
                .clone(),
            None => "server version unknown".into(),
        }
    }

    /// Runs a script that answers 1 (done) or 0 (not ours).
    pub(crate) async fn flag_script(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&str],
        secrets: &[&str],
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        match self.script(lua, keys, args, secrets, deadline).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected(&other)),
        }
    }
}

/// Whether the server refused the connection's credentials: redis-rs's
/// `AuthenticationFailed`, or the server's `WRONGPASS` (a wrong password,
/// or a user that does not exist or is disabled).
fn is_auth_refusal(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed
        || e.code() == Some("WRONGPASS")
        || e.to_string().contains("WRONGPASS")
}

/// Whether a script call was refused because the user may not run scripts
/// (`NOPERM … run the 'evalsha' command`), not because of a key outside
/// the user's patterns (`NOPERM No permissions to access a key`).
pub(super) fn is_script_refusal(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        && e.detail().is_some_and(|detail| {
            let detail = detail.to_ascii_lowercase();
            detail.contains("run the") && (detail.contains("eval") || detail.contains("script"))
        })
}

/// Whether `FCALL` was refused because the user may not run it (`NOPERM
/// … run the 'fcall' command`), not because of a key outside the user's
/// patterns.
fn is_fcall_refusal(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        && e.detail().is_some_and(|detail| {
            let detail = detail.to_ascii_lowercase();
            detail.contains("run the") && detail.contains("fcall")
        })
}

/// Whether a script failed because the server has no scripting engine
/// (Valkey built with `BUILD_LUA=no`, or with its Lua engine unloaded:
/// `ERR Could not find scripting engine 'lua'`).
fn is_without_scripting(e: &redis::RedisError) -> bool {
    e.detail()
        .is_some_and(|detail| detail.contains("Could not find scripting engine"))
}

/// Whether FCALL failed because the function does not exist on the node.
pub(super) fn is_function_not_found(e: &redis::RedisError) -> bool {
    e.detail()
        .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// Whether `e` says that `command` is unknown to the server (never
/// existed, or renamed away). Servers word it differently (`unknown
/// command 'FCALL'`, `` unknown command `FCALL` ``); all say which.
pub(super) fn is_unknown_command(e: &redis::RedisError, command: &str) -> bool {
    let Some(detail) = e.detail() else {
        return false;
    };
    let detail = detail.to_ascii_lowercase();
    let command = command.to_ascii_lowercase();
    detail.starts_with("unknown command")
        && detail
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .filter(|word| !word.is_empty())
            .nth(2)
            .is_some_and(|named| named == command)
}

/// `product major.minor.patch` from an `INFO server` reply: Valkey names
/// itself (`server_name:valkey`, `valkey_version:8.0.1`, next to a
/// `redis_version` it is compatible with); Redis gives `redis_version`.
/// A cluster answers per member: the first one's is taken.
pub(super) fn describe_server(reply: &Value) -> Option<String> {
    let text = match reply {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => text.clone(),
        Value::Map(members) => return members.iter().find_map(|(_, v)| describe_server(v)),
        _ => return None,
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let product = field("server_name").unwrap_or("redis");
    let version = field(&format!("{product}_version")).or_else(|| field("redis_version"))?;
    Some(format!("{product} {version}"))
}

/// Sends command `$cmd` of script call `$call`, awaited where it stands:
/// every script is idempotent for its own token, so it goes again if its
/// connection dropped. A macro rather than a method, so that a script call
/// adds no level of futures: each level deepens every caller's future,
/// and the compiler computes the layout of the deepest chain.
macro_rules! send {
    ($call:expr, $cmd:expr) => {{
        let (call, cmd) = ($call, $cmd);
        let (node, secrets, deadline) = (call.node, call.secrets, call.deadline);
        if call.writes {
            node.write(&cmd, secrets, Resend::IfDropped, deadline).await
        } else {
            node.command(&cmd, secrets, Resend::IfDropped, deadline)
                .await
        }
    }};
}

/// One script call of [`Node::run_script`], in each of its forms.
struct ScriptCall<'a> {
    node: &'a Node,
    lua: &'a Lua,
    /// Writes the call's arguments (`numkeys`, the keys, the args).
    fill: &'a (dyn Fn(&mut Cmd) + Sync),
    /// How many arguments `fill` writes, and about how many bytes.
    size: (usize, usize),
    secrets: &'a [&'a str],
    deadline: Deadline,
    /// `WAIT` goes right behind it (replica sync).
    writes: bool,
}

impl ScriptCall<'_> {
    /// The command `verb body <fill's arguments>`, in one of the node's
    /// spare buffers.
    fn cmd(&self, verb: &str, body: &str) -> Buffer<'_> {
        let (args, bytes) = self.size;
        let mut cmd = self
            .node
            .buffers
            .take(2 + args, verb.len() + body.len() + bytes);
        cmd.arg(verb).arg(body);
        (self.fill)(&mut cmd);
        cmd
    }

    /// `FCALL` of the library's function, its errors named.
    async fn by_function(&self) -> Result<Value, NodeError> {
        let (node, deadline) = (self.node, self.deadline);
        match send!(self, self.cmd("FCALL", self.lua.function)) {
            Err(NodeError::Redis(e)) if is_function_not_found(&e) => {
                Err(NodeError::FunctionsNotLoaded {
                    function: self.lua.function.to_owned(),
                    server: node.server(deadline).await.to_string(),
                })
            }
            Err(NodeError::Redis(e)) if is_unknown_command(&e, "FCALL") => {
                Err(NodeError::FunctionsUnsupported {
                    server: node.server(deadline).await.to_string(),
                })
            }
            Err(NodeError::Redis(e)) if is_fcall_refusal(&e) => Err(NodeError::FunctionsRefused {
                function: self.lua.function.to_owned(),
                server: node.server(deadline).await.to_string(),
            }),
            reply => reply,
        }
    }

    /// `EVAL` where the script is not known to be cached on this
    /// connection's server, else (or when `EVAL` is not allowed)
    /// `EVALSHA`, loading the script again on `NOSCRIPT`.
    async fn by_text_or_hash(&self) -> Result<Value, NodeError> {
        let cached = self.lua.cache_bit();
        // What the standalone connection knows its server caches (a cluster
        // sends EVALSHA, and EVAL on NOSCRIPT, to the member owning the keys).
        let ordered = match &self.node.backend {
            Backend::Standalone(ordered) => Some(ordered),
            Backend::Cluster(_) => None,
        };
        let known = ordered.map(Ordered::cached);
        if let (Some(ordered), Some(known)) = (ordered, known)
            && !Ordered::is_cached(known, cached)
        {
            // Not known to be cached where this connection leads (first use,
            // a new connection — the server may have restarted empty — or a
            // NOSCRIPT since): EVAL carries the text and caches it in one
            // request. EVALSHA would answer NOSCRIPT and the text would
            // follow a round trip later, behind whatever the caller sent
            // meanwhile — a release overtaken by the next grant's request,
            // which that node would refuse.
            match send!(self, self.cmd("EVAL", self.lua.source)) {
                // A user allowed EVALSHA and SCRIPT LOAD but not EVAL (or a
                // server with EVAL renamed away): by hash, as below.
                Err(NodeError::Redis(e))
                    if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
                        || is_unknown_command(&e, "EVAL") => {}
                reply => {
                    if reply.is_ok() {
                        ordered.note_cached(known, cached);
                    }
                    return reply;
                }
            }
        }
        let reply = match send!(self, self.cmd("EVALSHA", self.lua.script.get_hash())) {
            Err(NodeError::Redis(e))
                if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                // Boxed: a rare path, kept out of every caller's future.
                Box::pin(self.after_noscript(ordered)).await
            }
            reply => reply,
        };
        if let (Some(ordered), Some(known), true) = (ordered, known, reply.is_ok()) {
            ordered.note_cached(known, cached);
        }
        reply
    }

    /// After `NOSCRIPT`: the server's cache was flushed under an
    /// established connection (SCRIPT FLUSH), or a cluster member is new.
    /// A cluster sends the text to the member that owns the keys (EVAL,
    /// which also caches it): `SCRIPT LOAD` would go to any member, and one
    /// paused or dead master must not fail calls on keys owned by healthy
    /// ones. A standalone node (`ordered`) loads it, then runs it by hash
    /// (this user may not EVAL).
    async fn after_noscript(&self, ordered: Option<&Ordered>) -> Result<Value, NodeError> {
        let Some(ordered) = ordered else {
            return send!(self, self.cmd("EVAL", self.lua.source));
        };
        ordered.forget_cached(self.lua.cache_bit());
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(self.lua.source);
        self.node
            .command(&load, self.secrets, Resend::IfDropped, self.deadline)
            .await?;
        send!(self, self.cmd("EVALSHA", self.lua.script.get_hash()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::server_error;

    #[test]
    fn unknown_fcall_is_told_apart_whatever_the_wording() {
        for line in [
            "-ERR unknown command `FCALL`, with args beginning with: `f`, `1`, \r\n",
            "-ERR unknown command 'FCALL', with args beginning with: 'f' '1' \r\n",
            "-ERR unknown command 'fcall', with args beginning with: \r\n",
        ] {
            assert!(is_unknown_command(&server_error(line), "FCALL"), "{line}");
        }
        for line in [
            "-ERR unknown command 'FCALL_RO', with args beginning with: \r\n",
            "-ERR unknown command 'SET', with args beginning with: 'FCALL' \r\n",
            "-ERR Function not found\r\n",
            "-NOPERM this user has no permissions to run the 'fcall' command\r\n",
        ] {
            assert!(!is_unknown_command(&server_error(line), "FCALL"), "{line}");
        }
    }

    #[test]
    fn a_refused_fcall_is_told_apart_from_a_refused_key() {
        assert!(is_fcall_refusal(&server_error(
            "-NOPERM this user has no permissions to run the 'fcall' command\r\n"
        )));
        assert!(is_fcall_refusal(&server_error(
            "-NOPERM User locker has no permissions to run the 'fcall' command\r\n"
        )));
        for line in [
            "-NOPERM No permissions to access a key\r\n",
            "-NOPERM this user has no permissions to run the 'evalsha' command\r\n",
            "-ERR Function not found\r\n",
        ] {
            assert!(!is_fcall_refusal(&server_error(line)), "{line}");
        }
    }

    #[test]
    fn servers_are_described_by_product_and_version() {
        let info = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        assert_eq!(
            describe_server(&info(
                "# Server\r\nredis_version:6.2.16\r\nredis_mode:standalone\r\n"
            )),
            Some("redis 6.2.16".to_owned())
        );
        assert_eq!(
            describe_server(&info(
                "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n"
            )),
            Some("valkey 8.0.1".to_owned())
        );
        assert_eq!(
            describe_server(&Value::Map(vec![(
                Value::SimpleString("127.0.0.1:7000".into()),
                info("redis_version:7.0.15\r\n"),
            )])),
            Some("redis 7.0.15".to_owned())
        );
        assert_eq!(describe_server(&info("nothing")), None);
    }
}
