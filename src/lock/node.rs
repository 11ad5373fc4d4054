//! A lock's commands on one node: plain (`SET NX PX`), fenced, several
//! keys at once, and the group-commit batch (`batch.lua`) that carries
//! many plain locks' requests in one script call; its scripts (the `.lua`
//! files beside this one), and the lock's [`Shape`].

use std::sync::{Arc, LazyLock};

use redis::cluster_routing::Slot;
use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::node::{
    Deadline, Extension, NativeDelete, Node, Release, Resend, Shape, ShapeRef, push_extend,
    push_release, unexpected,
};
use crate::request::{Ttl, channel};
use crate::scripts::{Lua, Replicas};

/// `if GET key == token then DEL key`, for each of a lock's keys.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_release",
        include_str!("release.lua"),
        Replicas::DontWait,
    )
});

/// `if GET key == token then PEXPIRE key ttl`, for one key or a batch.
pub(crate) static EXTEND: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_extend",
        include_str!("extend.lua"),
        Replicas::Wait,
    )
});

/// All keys or none: multi-resource acquire.
pub(crate) static ACQUIRE_MANY: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_acquire_many",
        include_str!("acquire_many.lua"),
        Replicas::Wait,
    )
});

/// `if SET lock NX PX then return INCR counter`: fenced acquire, phase 1.
pub(crate) static ACQUIRE_FENCED: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_acquire_fenced",
        include_str!("acquire_fenced.lua"),
        Replicas::Wait,
    )
});

/// `counter = max(counter, fence)`: fenced acquire, phase 2.
pub(crate) static FENCE_WRITEBACK: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_fence_writeback",
        include_str!("fence_writeback.lua"),
        Replicas::Wait,
    )
});

/// Plain locks: many acquires, releases and extensions of one node in one
/// call (group commit, see `batch.rs`).
pub(crate) static BATCH: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_batch",
        include_str!("../node/batch.lua"),
        Replicas::Wait,
    )
});

/// One plain (one-key, unfenced) lock's request to a node, alone or in a
/// batch with others (see `batch.lua` and `batch.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Single<'a> {
    pub(crate) op: SingleOp<'a>,
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
}

/// What a [`Single`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SingleOp<'a> {
    /// `SET key token NX PX ttl`: 1 granted, 0 refused.
    Acquire { ttl: Ttl },
    /// Token-checked delete, announced with this release id on the key's
    /// channel when given: 1 deleted, 0 not ours.
    Release { announce: Option<&'a str> },
    /// Token-checked extension (or restore): 1 extended, 2 restored, 0
    /// refused.
    Extend { ttl: Ttl },
}

impl SingleOp<'_> {
    /// Its op in `batch.lua`.
    fn code(&self) -> &'static str {
        match self {
            Self::Acquire { .. } => "a",
            Self::Release { .. } => "r",
            Self::Extend { .. } => "e",
        }
    }
}

impl Node {
    /// `SET key token NX PX ttl`: true if granted, false if the key exists
    /// (whatever its type: NX never touches an existing key).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        token: &str,
        ttl: Ttl,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let mut cmd = Cmd::with_capacity(6, key.len() + token.len() + 32);
        cmd.arg("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.ms());
        // Never sent twice: a SET that landed before the connection dropped
        // would answer "no" the second time, and a node that said "no" is
        // skipped by the cleanup of a failed attempt.
        match self.write(&cmd, &[token], Resend::Never, deadline).await? {
            Value::Okay => Ok(true),
            Value::SimpleString(s) if s == "OK" => Ok(true),
            Value::Nil => Ok(false),
            other => Err(unexpected(&other)),
        }
    }

    /// Fenced acquire, phase 1: the node's new fence counter value if it
    /// granted the lock, `None` if the key exists.
    pub(crate) async fn acquire_fenced(
        &self,
        key: &str,
        fence_key: &str,
        token: &str,
        ttl: Ttl,
        deadline: impl Into<Deadline>,
    ) -> Result<Option<u64>, NodeError> {
        let deadline: Deadline = deadline.into();
        let ttl_ms = ttl.ms().to_string();
        let keys = [key, fence_key];
        match self
            .script(
                &ACQUIRE_FENCED,
                &keys,
                &[token, &ttl_ms],
                &[token],
                deadline,
            )
            .await?
        {
            Value::Int(0) => Ok(None),
            Value::Int(fence) => u64::try_from(fence)
                .map(Some)
                .map_err(|_| unexpected(&Value::Int(fence))),
            other => Err(unexpected(&other)),
        }
    }

    /// Fenced acquire, phase 2: `counter = max(counter, fence)`.
    pub(crate) async fn fence_writeback(
        &self,
        fence_key: &str,
        fence: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let fence = fence.to_string();
        self.flag_script(&FENCE_WRITEBACK, &[fence_key], &[&fence], &[], deadline)
            .await
    }

    /// All of `keys` or none, atomically: true if every key was set.
    pub(crate) async fn acquire_many(
        &self,
        keys: &[Arc<str>],
        token: &str,
        ttl: Ttl,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let ttl_ms = ttl.ms().to_string();
        let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
        self.flag_script(&ACQUIRE_MANY, &keys, &[token, &ttl_ms], &[token], deadline)
            .await
    }

    /// Token-checked delete of one plain lock's key (`release.lua`), as
    /// [`LockShape`] lays it out: the group-commit lane's lone release.
    async fn release_lock(
        &self,
        key: &str,
        token: &str,
        announce: Option<&str>,
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        let keys = [key];
        let fill = |cmd: &mut Cmd| release_call(cmd, &keys, token, announce);
        let size = (5, 2 * key.len() + token.len() + 48);
        let reply = self
            .run_script(&RELEASE, fill, size, &[token], deadline)
            .await?;
        released(&reply, keys.len())
    }

    /// One plain lock's request on its own, as it was sent before batching
    /// (so that a deployment with only those scripts loaded keeps working
    /// while nothing is concurrent): `SET NX PX` for an acquire (never sent
    /// twice: a SET that landed before the connection dropped would answer
    /// "no" the second time, and a node that said "no" is skipped by the
    /// cleanup of a failed attempt), `release.lua` and `extend.lua` for the
    /// others. Its status as `batch.lua` answers it.
    pub(crate) async fn single(
        &self,
        request: Single<'_>,
        deadline: Deadline,
    ) -> Result<u8, NodeError> {
        let Single { key, token, .. } = request;
        match request.op {
            SingleOp::Acquire { ttl } => {
                let granted = self.acquire(key, token, ttl, deadline).await?;
                Ok(u8::from(granted))
            }
            SingleOp::Release { announce } => {
                self.with_capabilities(deadline, async |caps| {
                    if let Some(delete) = caps.and_then(|c| c.delete()) {
                        let deleted = self
                            .release_native(delete, &[key], token, announce, deadline)
                            .await?;
                        return Ok(u8::from(deleted == 1));
                    }
                    let released = self.release_lock(key, token, announce, deadline).await;
                    match released {
                        Err(e) if e.is_incompatible() => {
                            self.native_after(e, request, deadline).await
                        }
                        released => Ok(u8::from(released?)),
                    }
                })
                .await
            }
            SingleOp::Extend { ttl } => {
                self.with_capabilities(deadline, async |caps| {
                    if caps.is_some_and(|c| c.extend()) {
                        return self.extend_native(key, token, ttl, deadline).await;
                    }
                    let ttl = ttl.ms().to_string();
                    let args = [token, ttl.as_str(), "1", "0"];
                    match self
                        .script(&EXTEND, &[key], &args, &[token], deadline)
                        .await
                    {
                        Ok(Value::Array(items)) => match items.as_slice() {
                            [Value::Int(status @ 0..=2)] => Ok(*status as u8),
                            _ => Err(unexpected(&Value::Array(items))),
                        },
                        Ok(other) => Err(unexpected(&other)),
                        Err(e) if e.is_incompatible() => {
                            self.native_after(e, request, deadline).await
                        }
                        Err(e) => Err(e),
                    }
                })
                .await
            }
        }
    }

    /// `request` once more natively, after its script was refused
    /// (`error`): the node's capabilities were not known when it went out
    /// (its first request, or the first since its connection dropped), and
    /// are now, since they are asked beside every request until then. If
    /// the server has no native form either, `error` stands.
    async fn native_after(
        &self,
        error: NodeError,
        request: Single<'_>,
        deadline: Deadline,
    ) -> Result<u8, NodeError> {
        let Some(caps) = self.capabilities() else {
            return Err(error);
        };
        let Single { key, token, op } = request;
        match op {
            SingleOp::Release { announce } => match caps.delete() {
                Some(delete) => {
                    let deleted = self
                        .release_native(delete, &[key], token, announce, deadline)
                        .await?;
                    Ok(u8::from(deleted == 1))
                }
                None => Err(error),
            },
            SingleOp::Extend { ttl } if caps.extend() => {
                self.extend_native(key, token, ttl, deadline).await
            }
            _ => Err(error),
        }
    }

    /// Many plain locks' requests in one script call (`batch.lua`), one
    /// answer per request, in order; on a cluster one call per hash slot
    /// among them, all in parallel. An error of the whole call is the
    /// `Err`; a request whose own command failed gets its error in its
    /// place. Every request of a batch is idempotent for its own token, so
    /// a call whose connection dropped goes out once more.
    pub(crate) async fn batch(
        &self,
        requests: &[Single<'_>],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        let groups: Vec<Vec<usize>> = if self.is_cluster() {
            let mut slots: Vec<(Slot, Vec<usize>)> = Vec::new();
            for (i, request) in requests.iter().enumerate() {
                let slot = Slot::for_key(request.key);
                match slots.iter_mut().find(|(s, _)| *s == slot) {
                    Some((_, group)) => group.push(i),
                    None => slots.push((slot, vec![i])),
                }
            }
            slots.into_iter().map(|(_, group)| group).collect()
        } else {
            vec![(0..requests.len()).collect()]
        };
        // Natively where the node can do every step of a batch; else
        // `batch.lua`.
        let replies = self
            .with_capabilities(deadline, async |caps| {
                let native = caps.filter(|c| c.extend()).and_then(|c| c.delete());
                let calls = groups.iter().map(|group| async move {
                    if let Some(delete) = native {
                        return self.batch_native(delete, requests, group, deadline).await;
                    }
                    match self.batch_call(requests, group, deadline).await {
                        // Refused as a script before the node's commands were known.
                        Err(error) if error.is_incompatible() => {
                            match self
                                .capabilities()
                                .filter(|c| c.extend())
                                .and_then(|c| c.delete())
                            {
                                Some(delete) => {
                                    self.batch_native(delete, requests, group, deadline).await
                                }
                                None => Err(error),
                            }
                        }
                        answers => answers,
                    }
                });
                futures::future::join_all(calls).await
            })
            .await;
        let mut answers: Vec<Option<Result<u8, NodeError>>> =
            (0..requests.len()).map(|_| None).collect();
        for (group, answer) in groups.iter().zip(replies) {
            for (&i, status) in group.iter().zip(answer?) {
                answers[i] = Some(status);
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(unexpected(&Value::Nil))))
            .collect())
    }

    /// One `batch.lua` call for `group` of `requests` (on a cluster, all
    /// in one hash slot).
    pub(super) async fn batch_call(
        &self,
        requests: &[Single<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        // Written straight into the command: keys, then four args each.
        let fill = |cmd: &mut Cmd| {
            cmd.arg(group.len());
            for &i in group {
                cmd.arg(requests[i].key);
            }
            for &i in group {
                let request = &requests[i];
                cmd.arg(request.op.code()).arg(request.token);
                match request.op {
                    SingleOp::Acquire { ttl } | SingleOp::Extend { ttl } => {
                        cmd.arg(ttl.ms()).arg("");
                    }
                    SingleOp::Release { announce: None } => {
                        cmd.arg("").arg("");
                    }
                    SingleOp::Release { announce: Some(id) } => {
                        cmd.arg(id).arg(channel(request.key));
                    }
                }
            }
        };
        let tokens: Vec<&str> = group.iter().map(|&i| requests[i].token).collect();
        // A key, a token, a ttl or release id, and a channel per entry.
        let bytes: usize = group
            .iter()
            .map(|&i| 2 * requests[i].key.len() + requests[i].token.len() + 32)
            .sum();
        let size = (1 + 5 * group.len(), bytes + 4);
        match self
            .run_script(&BATCH, fill, size, &tokens, deadline)
            .await?
        {
            Value::Array(items) if items.len() == group.len() => Ok(items
                .into_iter()
                .zip(group)
                .map(|(item, &i)| match item {
                    Value::Int(status @ 0..=2) => Ok(status as u8),
                    Value::ServerError(error) => {
                        Err(self.redact(NodeError::Redis(error.into()), &[requests[i].token]))
                    }
                    other => Err(unexpected(&other)),
                })
                .collect()),
            other => Err(unexpected(&other)),
        }
    }
}

impl Node {
    /// Many plain locks' requests in one pipeline of native commands, one
    /// answer per request, in order, as [`batch_call`](Self::batch_call)
    /// answers them.
    pub(super) async fn batch_native(
        &self,
        delete: NativeDelete,
        requests: &[Single<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<u8, NodeError>>, NodeError> {
        let mut commands = Vec::with_capacity(2 * group.len());
        let mut writes = false;
        for &i in group {
            let Single { op, key, token } = requests[i];
            match op {
                SingleOp::Acquire { ttl } => {
                    writes = true;
                    let mut cmd = Cmd::with_capacity(7, key.len() + token.len() + 32);
                    cmd.arg("SET")
                        .arg(key)
                        .arg(token)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl.ms())
                        .arg("GET");
                    commands.push(cmd);
                }
                SingleOp::Release { announce } => {
                    let inline = self.inline_announce(announce);
                    push_release(&mut commands, delete, key, token, inline);
                }
                SingleOp::Extend { ttl } => {
                    writes = true;
                    push_extend(&mut commands, key, token, ttl);
                }
            }
        }
        let tokens: Vec<&str> = group.iter().map(|&i| requests[i].token).collect();
        let replies = self
            .pipeline(commands, writes, &tokens, Resend::IfDropped, deadline)
            .await?;
        let mut replies = replies.iter();
        let mut answers = Vec::with_capacity(group.len());
        // Releases to announce after the pipeline (on a cluster).
        let mut late: Vec<(&str, &str)> = Vec::new();
        for &i in group {
            let Single { op, token, .. } = requests[i];
            let answer = match op {
                SingleOp::Acquire { .. } => match replies.next() {
                    // Nil: set now; our token: set by this request before
                    // its connection dropped and it went out again.
                    Some(Value::Nil) => Ok(1),
                    Some(Value::BulkString(value)) => Ok(u8::from(value == token.as_bytes())),
                    Some(reply) => self.native_status(reply, token).map(|_| 0),
                    None => Err(unexpected(&Value::Nil)),
                },
                SingleOp::Release { announce } => {
                    let status = replies.next().map(|r| self.native_status(r, token));
                    match (announce, self.inline_announce(announce)) {
                        (_, Some(_)) => {
                            replies.next();
                        }
                        (Some(id), None) if matches!(status, Some(Ok(1))) => {
                            late.push((requests[i].key, id));
                        }
                        _ => {}
                    }
                    status.unwrap_or_else(|| Err(unexpected(&Value::Nil)))
                }
                SingleOp::Extend { .. } => {
                    let pair: Vec<Value> = replies.by_ref().take(2).cloned().collect();
                    self.extended(&pair, token)
                }
            };
            answers.push(answer);
        }
        for (key, id) in late {
            self.announce(key, id, deadline).await;
        }
        Ok(answers)
    }
}

/// A lock (plain, fenced or multi-resource) on the nodes: its keys hold
/// its token (`extend.lua`, `release.lua`); a plain one's requests may go
/// through the group-commit lane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockShape;

impl ShapeRef {
    /// A lock's shape: nothing beyond its keys and token.
    pub(crate) const LOCK: ShapeRef = ShapeRef::Static(&LockShape);
}

impl Shape for LockShape {
    fn group_commits(&self) -> bool {
        true
    }

    fn token_keys(&self) -> bool {
        true
    }

    fn extend_script(&self) -> &'static Lua {
        &EXTEND
    }

    /// Its keys, and a fenced lock's counter key.
    fn extend_keys<'a>(&'a self, lock: &Extension<'a>, keys: &mut Vec<&'a str>) {
        keys.extend(lock.keys.iter().map(|k| &**k));
        keys.extend(lock.fence.map(|(key, _)| key));
    }

    /// Token, ttl, how many keys, and the fence (0 for none).
    fn extend_args(&self, lock: &Extension<'_>, cmd: &mut Cmd) {
        cmd.arg(lock.token)
            .arg(lock.ttl.ms())
            .arg(lock.keys.len())
            .arg(lock.fence.map_or(0, |(_, fence)| fence));
    }

    fn release_script(&self) -> &'static Lua {
        &RELEASE
    }

    fn release_call(&self, release: &Release<'_>, cmd: &mut Cmd) {
        release_call(cmd, release.keys, release.token, release.announce);
    }

    fn released(&self, release: &Release<'_>, reply: &Value) -> Result<bool, NodeError> {
        released(reply, release.keys.len())
    }
}

/// `release.lua`'s arguments: the keys, the token, and with an announced
/// release its id and each key's channel.
fn release_call<K: AsRef<str>>(cmd: &mut Cmd, keys: &[K], token: &str, announce: Option<&str>) {
    cmd.arg(keys.len());
    for key in keys {
        cmd.arg(key.as_ref());
    }
    cmd.arg(token);
    if let Some(release) = announce {
        cmd.arg(release);
        for key in keys {
            cmd.arg(channel(key.as_ref()));
        }
    }
}

/// Whether `release.lua` deleted all of a lock's `keys`.
fn released(reply: &Value, keys: usize) -> Result<bool, NodeError> {
    match reply {
        Value::Int(n) => Ok(usize::try_from(*n).is_ok_and(|n| n == keys)),
        other => Err(unexpected(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::layout;

    /// As `extend.lua` and `release.lua` read them.
    #[test]
    fn a_locks_extension_and_release_are_laid_out_as_its_scripts_read_them() {
        let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        let plain = Extension {
            keys: &keys[..1],
            token: "t1",
            ttl: Ttl::from_millis(1500),
            fence: None,
            shape: &LockShape,
        };
        let fenced = Extension {
            keys: &keys[..1],
            token: "t2",
            ttl: Ttl::from_millis(2000),
            fence: Some(("a:fence", 7)),
            shape: &LockShape,
        };
        let many = Extension {
            keys: &keys,
            token: "t3",
            ttl: Ttl::from_millis(3000),
            fence: None,
            shape: &LockShape,
        };
        assert_eq!(
            layout::extension(&[plain, fenced, many]),
            [
                "5", "a", "a", "a:fence", "a", "b", "t1", "1500", "1", "0", "t2", "2000", "1", "7",
                "t3", "3000", "2", "0"
            ]
        );
        let release = Release {
            keys: &keys,
            token: "t",
            announce: None,
        };
        assert_eq!(layout::release(&LockShape, &release), ["2", "a", "b", "t"]);
        let announced = Release {
            announce: Some("id"),
            ..release
        };
        assert_eq!(
            layout::release(&LockShape, &announced),
            ["2", "a", "b", "t", "id", "a:released", "b:released"]
        );
        assert!(LockShape.group_commits());
    }
}
