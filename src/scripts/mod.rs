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

/// `if GET key == token then DEL key`.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("release.lua")));

/// `if GET key == token then PEXPIRE key ttl`.
pub(crate) static EXTEND: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("extend.lua")));
