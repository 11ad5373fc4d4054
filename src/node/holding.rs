//! What every held primitive needs of a node, chosen by what the holding
//! is (its [`Shape`]): the token-checked release and the extension (which
//! restores the keys a node lost).

use std::collections::HashMap;
use std::sync::Arc;

use redis::cluster_routing::Slot;

use super::*;
use crate::error::NodeError;
use crate::quorum::{Answer, Vote};
use crate::request::Shape;
use crate::scripts;

/// One lock to extend on a node: its keys, token and new ttl, for a
/// fenced lock its counter's key and fence, and what it is (a lock, a
/// permit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extension<'a> {
    pub(crate) keys: &'a [Arc<str>],
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) fence: Option<(&'a str, u64)>,
    pub(crate) shape: &'a Shape,
}

/// Which extension script serves a holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ScriptKind {
    Lock,
    Permit,
    Rw,
}

impl ScriptKind {
    fn of(shape: &Shape) -> Self {
        match shape {
            Shape::Lock => Self::Lock,
            Shape::Permit(_) => Self::Permit,
            Shape::Read(_) | Shape::Write(_) => Self::Rw,
        }
    }
}

/// What a node did with one lock's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtendReply {
    /// Every key held the token and got the new ttl.
    Extended,
    /// Some keys were absent and were set again with the token (the rest
    /// held it and got the new ttl): the node holds the lock again.
    Restored,
    /// Some key holds another value (another owner's token, or not a
    /// string); nothing was touched.
    Refused,
}

/// Extended or restored (yes), or another value holds a key (no).
impl Answer for ExtendReply {
    fn vote(&self) -> Vote {
        match self {
            Self::Extended | Self::Restored => Vote::Yes,
            Self::Refused => Vote::No,
        }
    }
}

impl Node {
    /// Token-checked delete of a lock's keys: true if this node held the
    /// token on every key and deleted them. With `announce` (an id of this
    /// release), each deleted key's release is announced on its channel
    /// ([`channel`](crate::request::channel)).
    pub(crate) async fn release(
        &self,
        keys: &[Arc<str>],
        shape: &Shape,
        token: &str,
        announce: Option<&str>,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        match shape {
            Shape::Lock => {}
            Shape::Permit(permits) => {
                return self
                    .release_permit(keys, permits, token, announce, deadline)
                    .await;
            }
            Shape::Read(rw) | Shape::Write(rw) => {
                let read = matches!(shape, Shape::Read(_));
                return self.release_rw(rw, read, token, announce, deadline).await;
            }
        }
        // One key (most locks): no allocation for the list.
        let (one, many): ([&str; 1], Vec<&str>);
        let keys: &[&str] = match keys {
            [key] => {
                one = [&**key];
                &one
            }
            keys => {
                many = keys.iter().map(|k| &**k).collect();
                &many
            }
        };
        self.release_lock(keys, token, announce, deadline).await
    }

    /// Extends many locks, each with its own token and ttl: per lock, where
    /// every key holds its token they get the new ttl, where keys are
    /// absent they are set again (and a fenced lock's counter raised to its
    /// fence), and where any key holds another value nothing is touched.
    /// One answer per lock, in order. One script call on a standalone node;
    /// on a cluster, one call per hash slot among the locks (a script may
    /// only touch one slot; a lock's own keys share one), all in parallel.
    pub(crate) async fn extend_many(
        &self,
        locks: &[Extension<'_>],
        deadline: impl Into<Deadline>,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let deadline: Deadline = deadline.into();
        // One call per kind of holding (its own script), and on a cluster
        // per hash slot as well.
        let kind = |lock: &Extension<'_>| ScriptKind::of(lock.shape);
        let mixed = locks.iter().any(|lock| kind(lock) != ScriptKind::Lock);
        let groups: Vec<(ScriptKind, Vec<usize>)> = if self.is_cluster() || mixed {
            let mut groups: HashMap<(ScriptKind, Option<Slot>), Vec<usize>> = HashMap::new();
            for (i, lock) in locks.iter().enumerate() {
                let key = lock.keys.first().map_or("", |k| &**k);
                let slot = self.is_cluster().then(|| Slot::for_key(key));
                groups.entry((kind(lock), slot)).or_default().push(i);
            }
            groups
                .into_iter()
                .map(|((kind, _), group)| (kind, group))
                .collect()
        } else {
            vec![(ScriptKind::Lock, (0..locks.len()).collect())]
        };
        let calls = groups.iter().map(|(kind, group)| async move {
            match kind {
                ScriptKind::Lock => {}
                ScriptKind::Permit => return self.extend_permits(locks, group, deadline).await,
                ScriptKind::Rw => return self.extend_rw(locks, group, deadline).await,
            }
            let mut keys: Vec<&str> = Vec::new();
            let mut numbers: Vec<[String; 3]> = Vec::with_capacity(group.len());
            for &i in group {
                let lock = &locks[i];
                keys.extend(lock.keys.iter().map(|k| &**k));
                keys.extend(lock.fence.map(|(key, _)| key));
                numbers.push([
                    lock.ttl_ms.to_string(),
                    lock.keys.len().to_string(),
                    lock.fence.map_or(0, |(_, fence)| fence).to_string(),
                ]);
            }
            let args: Vec<&str> = group
                .iter()
                .zip(&numbers)
                .flat_map(|(&i, [ttl, n, fence])| {
                    [locks[i].token, ttl.as_str(), n.as_str(), fence.as_str()]
                })
                .collect();
            self.extend_script(&scripts::EXTEND, &keys, &args, locks, group, deadline)
                .await
        });
        let mut answers = vec![ExtendReply::Refused; locks.len()];
        for ((_, group), answer) in groups.iter().zip(futures::future::join_all(calls).await) {
            for (&i, extended) in group.iter().zip(answer?) {
                answers[i] = extended;
            }
        }
        Ok(answers)
    }
}
