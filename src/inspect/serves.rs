//! What each node serves, found without writing: [`Redlock::serves`].

use futures::future::join_all;
use tokio::time::Instant;

use crate::check::Serves;
use crate::contract::ReadOnlyScript;
use crate::error::NodeError;
use crate::keys::Layout;
use crate::node::{Deadline, Node};
use crate::primitives::PRIMITIVES;
use crate::redlock::Redlock;
use crate::round::shallow;

impl Redlock {
    /// Which primitives each node can serve with this manager's settings
    /// (its user, its [`ScriptMode`](crate::ScriptMode)), in the order of
    /// [`nodes`](Self::nodes), found **without writing**: one script that
    /// only reads (an election's leader read, on a key of the manager's
    /// prefix that nobody holds) is run on every node. An empty list if
    /// no primitive has such a script.
    ///
    /// - [`Serves::Every`]: the script ran.
    /// - [`Serves::PlainLocks`]: it cannot run there — no scripting engine
    ///   (a Valkey built without Lua), scripts refused to the user, no
    ///   Functions library in Functions mode — and the server's native
    ///   commands take, extend and release a plain lock.
    /// - [`Serves::Nothing`]: it cannot run, and the server has no native
    ///   forms either.
    /// - `None`: the node did not answer within the node timeout, or failed
    ///   otherwise.
    ///
    /// Scripts are what it tells: a user refused `SET` on the lock keys is
    /// found by [`check`](Self::check)'s access probe (`quorumlock
    /// doctor`), which writes. `quorumlock status` shows this beside each
    /// node.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// use quorumlock::check::Serves;
    ///
    /// let locks = quorumlock::Redlock::new(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])?;
    /// for (node, serves) in locks.nodes().zip(locks.serves().await) {
    ///     if serves != Some(Serves::Every) {
    ///         println!("{node}: {serves:?}");
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn serves(&self) -> Vec<Option<Serves>> {
        let Some(script) = PRIMITIVES.iter().find_map(|p| p.reads_only) else {
            return Vec::new();
        };
        let manager = self.manager();
        let core = &manager.core;
        let layout = Layout::new(format!("{}quorumlock:serves", manager.key_prefix));
        let keys = (script.keys)(&layout);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let deadline = Deadline::from(core.timeout_from(Instant::now()));
        let asked = core
            .nodes()
            .iter()
            .map(|node| serves(node, script, &keys, deadline));
        shallow(join_all(asked)).await
    }
}

/// What `node` serves, from a read-only `script` on `keys`.
async fn serves(
    node: &Node,
    script: ReadOnlyScript,
    keys: &[&str],
    deadline: Deadline,
) -> Option<Serves> {
    match node.script(script.lua, keys, &[], &[], deadline).await {
        Ok(_) => Some(Serves::Every),
        // Refused, or no engine, no library: only what needs no script.
        Err(
            NodeError::NoScripting { .. }
            | NodeError::ScriptsRefused { .. }
            | NodeError::FunctionsRefused { .. }
            | NodeError::FunctionsNotLoaded { .. }
            | NodeError::FunctionsUnsupported { .. },
        ) => {
            let native = node
                .capabilities()
                .is_some_and(|caps| caps.delete().is_some() && caps.extend());
            Some(if native {
                Serves::PlainLocks
            } else {
                Serves::Nothing
            })
        }
        Err(_) => None,
    }
}
