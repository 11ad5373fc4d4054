//! A lock's commands on one node: fenced and several keys at once (a
//! plain lock's `SET NX PX` goes through the node's group commit, see
//! `node/group/`); its scripts (the `.lua` files beside this one), and
//! the lock's [`Shape`].

use std::sync::{Arc, LazyLock};

use redis::{Cmd, Value};

use crate::contract::{Extension, Release, Shape, ShapeRef};
use crate::error::NodeError;
use crate::node::{Deadline, Node, unexpected};
use crate::request::{FenceKeys, Ttl, channel};
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

impl Node {
    /// Fenced acquire, phase 1: the node's fence counter value for this
    /// grant if it granted the lock (raised, unless this call's own earlier
    /// attempt raised it and nothing wrote it since), `None` if the key
    /// exists.
    pub(crate) async fn acquire_fenced(
        &self,
        key: &str,
        fence: &FenceKeys,
        token: &str,
        ttl: Ttl,
        deadline: impl Into<Deadline>,
    ) -> Result<Option<u64>, NodeError> {
        let deadline: Deadline = deadline.into();
        let ttl_ms = ttl.ms().to_string();
        let keys = [key, &fence.counter, &fence.mark];
        match self
            .script(
                &ACQUIRE_FENCED,
                &keys,
                &[token, &ttl_ms, &fence.call],
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

    /// Fenced acquire, phase 2: `counter = max(counter, fence)`, and the
    /// counter's mark deleted.
    pub(crate) async fn fence_writeback(
        &self,
        keys: &FenceKeys,
        fence: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let fence = fence.to_string();
        let keys = [&*keys.counter, &*keys.mark];
        self.flag_script(&FENCE_WRITEBACK, &keys, &[&fence], &[], deadline)
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
}

/// A lock (plain or multi-resource, and a fenced one until it is granted)
/// on the nodes: its keys hold its token (`extend.lua`, `release.lua`); a
/// plain one's requests may go through the group-commit lane.
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

    fn extend_keys<'a>(&'a self, lock: &Extension<'a>, keys: &mut Vec<&'a str>) {
        keys.extend(lock.keys.iter().map(|k| &**k));
    }

    /// Token, ttl, how many keys, and no fence (0).
    fn extend_args(&self, lock: &Extension<'_>, cmd: &mut Cmd) {
        extend_args(lock, 0, cmd);
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

/// A granted fenced lock on the nodes: a lock's key, and beside it the
/// fence counter that a restore raises to the lock's fence (`extend.lua`
/// takes both). Released as any lock is.
#[derive(Debug, Clone)]
pub(crate) struct FencedShape {
    /// `<key>:fence`.
    pub(crate) counter: Arc<str>,
    /// The fence it was granted.
    pub(crate) fence: u64,
}

impl Shape for FencedShape {
    fn group_commits(&self) -> bool {
        true
    }

    fn token_keys(&self) -> bool {
        true
    }

    /// A restore raises the counter too.
    fn keys_only(&self) -> bool {
        false
    }

    fn fence(&self) -> Option<u64> {
        Some(self.fence)
    }

    fn extend_script(&self) -> &'static Lua {
        &EXTEND
    }

    /// Its key, and its counter's.
    fn extend_keys<'a>(&'a self, lock: &Extension<'a>, keys: &mut Vec<&'a str>) {
        keys.extend(lock.keys.iter().map(|k| &**k));
        keys.push(&self.counter);
    }

    /// Token, ttl, how many keys, and the fence.
    fn extend_args(&self, lock: &Extension<'_>, cmd: &mut Cmd) {
        extend_args(lock, self.fence, cmd);
    }

    /// Released as any lock is.
    fn release_script(&self) -> &'static Lua {
        LockShape.release_script()
    }

    fn release_call(&self, release: &Release<'_>, cmd: &mut Cmd) {
        LockShape.release_call(release, cmd);
    }

    fn released(&self, release: &Release<'_>, reply: &Value) -> Result<bool, NodeError> {
        LockShape.released(release, reply)
    }
}

/// `extend.lua`'s arguments for one lock: token, ttl, how many keys, and
/// the fence (0 for none).
fn extend_args(lock: &Extension<'_>, fence: u64, cmd: &mut Cmd) {
    cmd.arg(lock.token)
        .arg(lock.ttl.ms())
        .arg(lock.keys.len())
        .arg(fence);
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
            shape: &LockShape,
        };
        let fenced_shape = FencedShape {
            counter: "a:fence".into(),
            fence: 7,
        };
        let fenced = Extension {
            keys: &keys[..1],
            token: "t2",
            ttl: Ttl::from_millis(2000),
            shape: &fenced_shape,
        };
        let many = Extension {
            keys: &keys,
            token: "t3",
            ttl: Ttl::from_millis(3000),
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
        assert_eq!(
            layout::release(&fenced_shape, &announced),
            ["2", "a", "b", "t", "id", "a:released", "b:released"]
        );
        assert!(LockShape.group_commits() && fenced_shape.group_commits());
        assert!(LockShape.keys_only() && !fenced_shape.keys_only());
        assert_eq!((LockShape.fence(), fenced_shape.fence()), (None, Some(7)));
    }
}
