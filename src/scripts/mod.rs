//! The Lua scripts, each in its own `.lua` file, sent with EVALSHA and
//! reloaded on NOSCRIPT (a restarted node has an empty script cache).
//! Scripts are constant text: keys only in KEYS, token and ttl only in ARGV.

use std::sync::LazyLock;

use redis::Script;

/// A Lua script: the `redis::Script` (hash, EVALSHA, reload on NOSCRIPT)
/// and its text, which a cluster node sends with `EVAL` on NOSCRIPT.
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) source: &'static str,
}

impl Lua {
    fn new(source: &'static str) -> Self {
        Self {
            script: Script::new(source),
            source,
        }
    }
}

/// `if GET key == token then DEL key`, for each of a lock's keys.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("release.lua")));

/// `if GET key == token then PEXPIRE key ttl`, for one key or a batch.
pub(crate) static EXTEND: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("extend.lua")));

/// All keys or none: multi-resource acquire.
pub(crate) static ACQUIRE_MANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("acquire_many.lua")));

/// `if SET lock NX PX then return INCR counter`: fenced acquire, phase 1.
pub(crate) static ACQUIRE_FENCED: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("acquire_fenced.lua")));

/// `counter = max(counter, fence)`: fenced acquire, phase 2.
pub(crate) static FENCE_WRITEBACK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("fence_writeback.lua")));
