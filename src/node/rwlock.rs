//! A reader-writer lock's commands on one node (`rw_*.lua`).

use super::*;
use crate::error::NodeError;
use crate::request::{RwKeys, Shape, channel};
use crate::scripts;

impl Node {
    /// Extends the reader-writer holds `group` of `locks` in one call (see
    /// `rw_extend.lua`): one answer per hold, in `group`'s order.
    pub(super) async fn extend_rw(
        &self,
        locks: &[Extension<'_>],
        group: &[usize],
        deadline: Deadline,
    ) -> Result<Vec<ExtendReply>, NodeError> {
        let mut keys: Vec<&str> = Vec::with_capacity(2 * group.len());
        let mut modes: Vec<&str> = Vec::with_capacity(group.len());
        let ttls: Vec<String> = group.iter().map(|&i| locks[i].ttl_ms.to_string()).collect();
        for &i in group {
            let (mode, rw) = match locks[i].shape {
                Shape::Read(rw) => ("r", rw),
                Shape::Write(rw) => ("w", rw),
                _ => {
                    return Err(NodeError::UnexpectedReply(
                        "a lock among reader-writer holds".to_owned(),
                    ));
                }
            };
            keys.extend([&*rw.writer, &*rw.readers]);
            modes.push(mode);
        }
        let mut args: Vec<&str> = Vec::with_capacity(3 * group.len());
        for ((&i, mode), ttl) in group.iter().zip(&modes).zip(&ttls) {
            args.extend([*mode, locks[i].token, ttl.as_str()]);
        }
        self.extend_script(&scripts::RW_EXTEND, &keys, &args, locks, group, deadline)
            .await
    }

    /// A reader-writer lock's acquire (see `rw_acquire.lua`): whether this
    /// node admitted the reader (`read`) or the writer. A refused writer's
    /// mark (its call's id, across its attempts) lives `mark_ms`.
    pub(crate) async fn acquire_rw(
        &self,
        rw: &RwKeys,
        read: bool,
        token: &str,
        ttl_ms: u64,
        mark_ms: u64,
        deadline: impl Into<Deadline>,
    ) -> Result<bool, NodeError> {
        let deadline: Deadline = deadline.into();
        let keys = [&*rw.writer, &*rw.readers, &*rw.waiting];
        let (ttl, mark) = (ttl_ms.to_string(), mark_ms.to_string());
        let mode = if read { "r" } else { "w" };
        let args = [mode, token, ttl.as_str(), &*rw.waiter, mark.as_str()];
        self.flag_script(&scripts::RW_ACQUIRE, &keys, &args, &[token], deadline)
            .await
    }

    /// Token-checked release of a reader-writer hold (see `rw_release.lua`).
    pub(super) async fn release_rw(
        &self,
        rw: &RwKeys,
        read: bool,
        token: &str,
        announce: Option<&str>,
        deadline: Deadline,
    ) -> Result<bool, NodeError> {
        let keys = [&*rw.writer, &*rw.readers, &*rw.waiting];
        let mode = if read { "r" } else { "w" };
        let channel = channel(if read { &rw.readers } else { &rw.writer });
        let mut args = vec![mode, token, &*rw.waiter];
        if let Some(release) = announce {
            args.extend([release, channel.as_str()]);
        }
        self.flag_script(&scripts::RW_RELEASE, &keys, &args, &[token], deadline)
            .await
    }
}
