//! Sending group-commit requests to a node: one alone (`SET NX PX`, or
//! the holding's own release and extension), or a batch in one call, as a
//! pipeline of native commands where the node has them, else as a
//! pipeline of the holdings' own commands and scripts (`scripted.rs`), or
//! `batch.lua` (a cluster, Functions, or the node's commands not known).
//! A batch with prepared script calls goes as one pipeline on a node whose
//! batches can carry them (native commands for its locks' requests where
//! the node has them), else each request alone, in order.

use std::future::Future;
use std::pin::Pin;

use futures::FutureExt;
use redis::Value;
use redis::cluster_routing::Slot;

use super::request::{Item, Prepared, Single};
use super::scripted::push_acquire;
use crate::contract::Extension;
use crate::error::NodeError;
use crate::node::batch::{Entry, SingleOp};
use crate::node::holding::native_delete;
use crate::node::replies::Answered;
use crate::node::{Deadline, NativeDelete, Node, Resend, push_extend, push_release, unexpected};
use crate::request::Ttl;

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
        let mut cmd = self.buffers.take(6, key.len() + token.len() + 32);
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

    /// One request on its own: `SET NX PX` for an acquire (never sent
    /// twice: a SET that landed before the connection dropped would answer
    /// "no" the second time, and a node that said "no" is skipped by the
    /// cleanup of a failed attempt), the holding's own release and
    /// extension (see [`release`](Node::release), [`extend`](Node::extend),
    /// natively where the node can) for the others. Its status as
    /// `batch.lua` answers it.
    ///
    /// Boxed, each op's future on its own (one allocation per lone
    /// request, with the connection's send in it): the ops' futures differ
    /// by half in size, a release that may run a script the largest, and
    /// the most frequent lone requests, an acquire and a native release,
    /// do not carry its path (see the test below).
    pub(crate) fn single<'a>(
        &'a self,
        request: Single<'a>,
        deadline: Deadline,
    ) -> Pin<Box<dyn Future<Output = Result<u8, NodeError>> + Send + 'a>> {
        let Single {
            key, token, shape, ..
        } = request;
        let keys = std::slice::from_ref(key);
        // Each op's own future, mapped to its status: no async block around
        // it to hold its arguments a second time.
        match request.op {
            SingleOp::Acquire { ttl } => Box::pin(
                self.acquire(key, token, ttl, deadline)
                    .map(|granted| granted.map(u8::from)),
            ),
            // Known to have a native delete, and nothing to announce: one
            // command (what `release` would send).
            SingleOp::Release { announce: None }
                if let Some(delete) = native_delete(self.capabilities(), &**shape) =>
            {
                Box::pin(
                    self.delete_one(delete, key, token, deadline)
                        .map(|deleted| deleted.map(u8::from)),
                )
            }
            SingleOp::Release { announce } => Box::pin(
                self.release(keys, &**shape, token, announce, deadline)
                    .map(|released| released.map(u8::from)),
            ),
            SingleOp::Extend { ttl } => {
                let lock = Extension {
                    keys,
                    token,
                    ttl,
                    shape: &**shape,
                };
                Box::pin(
                    self.extend(lock, deadline)
                        .map(|extended| extended.map(|reply| reply.status())),
                )
            }
        }
    }

    /// One entry of a batch on its own: a lock's request as
    /// [`single`](Self::single) sends it, a prepared script call through
    /// the one script path ([`run_script`](Self::run_script)).
    pub(super) async fn alone(
        &self,
        request: Item<'_>,
        deadline: Deadline,
    ) -> Result<Answered, NodeError> {
        match request {
            Item::Single(request) => self.single(request, deadline).await.map(Answered::Status),
            Item::Script(call) => self.run_prepared(call, deadline).await.map(Answered::Value),
        }
    }

    /// Each of `requests` alone, in order: an answer each.
    pub(super) async fn each_alone(
        &self,
        requests: &[Item<'_>],
        deadline: Deadline,
    ) -> Vec<Result<Answered, NodeError>> {
        let mut answers = Vec::with_capacity(requests.len());
        for request in requests {
            answers.push(self.alone(*request, deadline).await);
        }
        answers
    }

    /// A prepared script call on its own, through the one script path
    /// (which loads the script, or names the error, as any call's).
    pub(super) async fn run_prepared(
        &self,
        call: &Prepared,
        deadline: Deadline,
    ) -> Result<Value, NodeError> {
        let fill = |cmd: &mut redis::Cmd| call.fill(cmd);
        let secrets = [call.token.as_str()];
        self.run_script(call.lua, fill, call.size, &secrets, deadline)
            .await
    }

    /// Many plain locks' requests in one script call (`batch.lua`), one
    /// answer per request, in order; on a cluster one call per hash slot
    /// among them, all in parallel. An error of the whole call is the
    /// `Err`; a request whose own command failed gets its error in its
    /// place. Every request of a batch is idempotent for its own token, so
    /// a call whose connection dropped goes out once more. A batch with
    /// prepared script calls among its requests goes as one pipeline
    /// where the node's batches are pipelines that carry them (see
    /// `scripted.rs`), else each request alone, in order.
    pub(crate) async fn batch(
        &self,
        requests: &[Item<'_>],
        deadline: Deadline,
    ) -> Result<Vec<Result<Answered, NodeError>>, NodeError> {
        if requests.iter().any(|r| matches!(r, Item::Script(_))) {
            return self.batch_with_scripts(requests, deadline).await;
        }
        let groups: Vec<Vec<usize>> = if self.is_cluster() {
            let mut slots: Vec<(Slot, Vec<usize>)> = Vec::new();
            for (i, request) in requests.iter().enumerate() {
                let key = request.single().map_or("", |r| &**r.key);
                let slot = Slot::for_key(key.as_bytes());
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
                // Else the holdings' own commands in a pipeline, where the
                // node can (see `scripted.rs`), at every batch size: at 256
                // tasks (batches of up to a few hundred) one `batch.lua`
                // call measured no cheaper (Redis 7.0, five nodes, 2.12x
                // rslock's cycles/s with it, 2.14x without; one node 1.34x,
                // 1.36x).
                let pipelined = match native {
                    None => self.pipelines_scripts(caps),
                    Some(_) => None,
                };
                // (No prepared script calls here: every request is one.)
                let entries: Vec<Entry<'_>> = match (native, pipelined) {
                    (None, None) => requests
                        .iter()
                        .filter_map(|r| r.single())
                        .map(Entry::from)
                        .collect(),
                    _ => Vec::new(),
                };
                let entries = &entries;
                let calls = groups.iter().map(|group| async move {
                    if let Some(delete) = native {
                        return self.batch_native(delete, requests, group, deadline).await;
                    }
                    if let Some(ordered) = pipelined {
                        return self
                            .batch_pipelined(ordered, None, requests, group, deadline)
                            .await;
                    }
                    let codes = match self.batch_call(entries, group, deadline).await {
                        // Refused as a script before the node's commands were known.
                        Err(error) if error.is_incompatible() => {
                            match self
                                .capabilities()
                                .filter(|c| c.extend())
                                .and_then(|c| c.delete())
                            {
                                Some(delete) => {
                                    return self
                                        .batch_native(delete, requests, group, deadline)
                                        .await;
                                }
                                None => Err(error),
                            }
                        }
                        answers => answers,
                    };
                    codes.map(|codes| {
                        codes
                            .into_iter()
                            .map(|code| code.map(Answered::Status))
                            .collect()
                    })
                });
                futures::future::join_all(calls).await
            })
            .await;
        let mut answers: Vec<Option<Result<Answered, NodeError>>> =
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

    /// [`batch`](Self::batch) of `requests` with prepared script calls
    /// among them: one pipeline on a node whose batches carry them (its
    /// locks' requests as native commands where it has them, else as
    /// their own commands and scripts), else each alone, in order (a
    /// cluster, Functions, or commands no longer known: the lane queued
    /// them only where it could, so this is rare).
    async fn batch_with_scripts(
        &self,
        requests: &[Item<'_>],
        deadline: Deadline,
    ) -> Result<Vec<Result<Answered, NodeError>>, NodeError> {
        let caps = self.capabilities();
        let Some(ordered) = self.pipelines_scripts(caps) else {
            return Ok(self.each_alone(requests, deadline).await);
        };
        let native = caps.filter(|c| c.extend()).and_then(|c| c.delete());
        let group: Vec<usize> = (0..requests.len()).collect();
        self.batch_pipelined(ordered, native, requests, &group, deadline)
            .await
    }
}

impl Node {
    /// Many plain locks' requests in one pipeline of native commands, one
    /// answer per request, in order, as [`batch_call`](Self::batch_call)
    /// answers them.
    async fn batch_native(
        &self,
        delete: NativeDelete,
        requests: &[Item<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<Result<Answered, NodeError>>, NodeError> {
        // Every request is a lock's here (see `batch`).
        let requests = |i: usize| requests.get(i).and_then(|r| r.single());
        // Room for replica sync's `WAIT` too.
        let mut commands = redis::Pipeline::with_capacity(2 * group.len() + 1);
        let mut writes = false;
        for request in group.iter().filter_map(|&i| requests(i)) {
            writes |= self.push_native(&mut commands, delete, request);
        }
        let tokens: Vec<&str> = group
            .iter()
            .filter_map(|&i| requests(i))
            .map(|r| r.token)
            .collect();
        let replies = self
            .pipeline(commands, writes, &tokens, Resend::IfDropped, deadline)
            .await?;
        let mut replies = replies.iter();
        let mut answers = Vec::with_capacity(group.len());
        // Releases to announce after the pipeline (on a cluster).
        let mut late: Vec<(&str, &str)> = Vec::new();
        for &i in group {
            let Some(request) = requests(i) else {
                answers.push(Err(unexpected(&Value::Nil)));
                continue;
            };
            let answer = self.native_answer(request, &mut replies);
            if let SingleOp::Release { announce: Some(id) } = request.op
                && self.inline_announce(Some(id)).is_none()
                && matches!(answer, Ok(1))
            {
                late.push((&**request.key, id));
            }
            answers.push(answer.map(Answered::Status));
        }
        for (key, id) in late {
            self.announce(key, id, deadline).await;
        }
        Ok(answers)
    }

    /// Appends `request`'s native commands; whether they write a lock
    /// (for replica sync's `WAIT`).
    pub(super) fn push_native(
        &self,
        commands: &mut redis::Pipeline,
        delete: NativeDelete,
        request: Single<'_>,
    ) -> bool {
        let Single { op, key, token, .. } = request;
        let key = &**key;
        match op {
            SingleOp::Acquire { ttl } => {
                // A native server takes `SET … NX … GET` (Redis 7.0).
                push_acquire(commands, key, token, ttl, true);
                true
            }
            SingleOp::Release { announce } => {
                let inline = self.inline_announce(announce);
                push_release(commands, delete, key, token, inline);
                false
            }
            SingleOp::Extend { ttl } => {
                push_extend(commands, key, token, ttl);
                true
            }
        }
    }

    /// `request`'s status from its replies, taken from `replies` (as many
    /// as [`push_native`](Self::push_native) sent for it).
    pub(super) fn native_answer(
        &self,
        request: Single<'_>,
        replies: &mut std::slice::Iter<'_, Value>,
    ) -> Result<u8, NodeError> {
        let Single { op, token, .. } = request;
        match op {
            SingleOp::Acquire { .. } => match replies.next() {
                Some(reply) => self.acquired(reply, token),
                None => Err(unexpected(&Value::Nil)),
            },
            SingleOp::Release { announce } => {
                let status = replies.next().map(|r| self.native_status(r, token));
                if self.inline_announce(announce).is_some() {
                    // The announcement's own reply.
                    replies.next();
                }
                status.unwrap_or_else(|| Err(unexpected(&Value::Nil)))
            }
            SingleOp::Extend { .. } => {
                let pair: Vec<Value> = replies.by_ref().take(2).cloned().collect();
                self.extended(&pair, token)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::contract::ShapeRef;
    use crate::node::caps::Capabilities;

    /// A lone request is one allocation, the size of its own op: the
    /// connection's send is held in it (see `run.rs`'s `query_on`), and
    /// the most frequent lone requests (an acquire; a release, natively on
    /// a node known to have a delete) do not carry a script call's path.
    /// Every op took one box the size of a release that may run a script,
    /// and each command a second box of `redis`' own, 1,152 bytes.
    #[test]
    fn a_lone_request_carries_only_its_own_path() {
        let node = crate::node::testing::nodes(1).remove(0);
        let key: Arc<str> = "k".into();
        let ttl = Ttl::new(Duration::from_secs(1), 0.01).expect("a ttl");
        let deadline = Deadline::from(Instant::now());
        let alone = |op| {
            let request = Single {
                op,
                key: &key,
                token: "t",
                shape: &ShapeRef::LOCK,
            };
            std::mem::size_of_val(&*node.single(request, deadline))
        };
        // The commands not known yet: a release takes the path that may run
        // a script.
        let scripted = alone(SingleOp::Release { announce: None });
        node.caps.set(Some(Capabilities {
            set_ifeq: true,
            delifeq: true,
            delex_ifeq: false,
        }));
        let native = alone(SingleOp::Release { announce: None });
        let acquire = alone(SingleOp::Acquire { ttl });
        // Were the ops' paths in one future, each would be as large.
        for (op, size) in [("an acquire", acquire), ("a native release", native)] {
            assert!(
                size < scripted,
                "{op} alone: {size} bytes, a release that may run a script {scripted}"
            );
        }
    }
}
