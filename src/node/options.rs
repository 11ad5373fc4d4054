//! What every node of a manager shares, as the builder validated it: how
//! scripts run, native commands, replica sync, and whom to trust over TLS.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::scripts::{NativeCommands, ScriptMode};

/// What every node of a manager shares: how scripts run, and whom to trust
/// over TLS.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeOptions {
    pub(crate) script_mode: ScriptMode,
    /// Native compare-and-set commands where the server has them.
    pub(crate) native_commands: NativeCommands,
    /// `WAIT` for replicas after each lock write.
    pub(crate) replica_sync: Option<ReplicaSync>,
    /// PEM CA certificates that `rediss://` nodes must chain to, instead of
    /// Mozilla's root CAs.
    #[cfg(feature = "tls")]
    pub(crate) tls_roots: Option<Vec<u8>>,
}

/// Replica sync: `WAIT replicas timeout` sent right behind each lock write
/// (acquire, extend, fenced acquire and write-back, multi-resource acquire;
/// not release) on the same connection, in one pipeline; the node's answer
/// counts only when at least `replicas` replicas acknowledged the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaSync {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl ReplicaSync {
    pub(super) fn wait(&self) -> Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas)
            .arg(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX));
        cmd
    }

    /// The reply to a write, if `acknowledged` replicas are enough.
    pub(super) fn check(&self, reply: Value, acknowledged: i64) -> Result<Value, NodeError> {
        if acknowledged >= i64::from(self.replicas) {
            Ok(reply)
        } else {
            Err(NodeError::ReplicasBehind {
                acknowledged: u32::try_from(acknowledged).unwrap_or(0),
                wanted: self.replicas,
            })
        }
    }
}
