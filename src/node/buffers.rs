//! Command buffers a node reuses: each request sent alone (an acquire's
//! `SET NX PX`, a release's `EVALSHA` or `DELIFEQ`, an extension) is
//! written into a [`Cmd`] taken from the node's spares and given back,
//! cleared, when the request ends, so that a lock cycle builds no command
//! storage of its own once the node has served as many requests at once
//! as it will (issue #55: the ten commands of a cycle on five nodes were
//! twenty of its allocations).
//!
//! The node keeps at most [`KEPT`] spares, each under [`KEPT_BYTES`] of
//! data: a burst of a thousand requests, or one lock over a thousand keys,
//! leaves no lasting memory behind.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};

use redis::Cmd;

/// The most spare commands a node keeps.
const KEPT: usize = 64;

/// The most bytes of data a spare command may have room for.
const KEPT_BYTES: usize = 4096;

/// A node's spare commands.
#[derive(Default)]
pub(crate) struct Buffers {
    spare: Mutex<Vec<Cmd>>,
}

impl Buffers {
    /// An empty command with room for about `args` arguments of `bytes`
    /// bytes in all: a spare if there is one, else a new one that size.
    pub(crate) fn take(&self, args: usize, bytes: usize) -> Buffer<'_> {
        let spare = self.lock().pop();
        Buffer {
            cmd: spare.unwrap_or_else(|| Cmd::with_capacity(args, bytes)),
            home: self,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Cmd>> {
        self.spare.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lock().len()
    }
}

/// A command taken from a node's spares, given back when dropped (sent,
/// failed or abandoned alike).
pub(crate) struct Buffer<'a> {
    cmd: Cmd,
    home: &'a Buffers,
}

impl Deref for Buffer<'_> {
    type Target = Cmd;

    fn deref(&self) -> &Cmd {
        &self.cmd
    }
}

impl DerefMut for Buffer<'_> {
    fn deref_mut(&mut self) -> &mut Cmd {
        &mut self.cmd
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        let mut cmd = std::mem::replace(&mut self.cmd, Cmd::new());
        if written(&cmd) > KEPT_BYTES {
            return;
        }
        cmd.clear();
        let mut spare = self.home.lock();
        if spare.len() < KEPT {
            spare.push(cmd);
        }
    }
}

/// How many bytes of arguments `cmd` holds: what its data grew to hold at
/// least once ([`Cmd`] does not say its capacity), and about half of it at
/// most, as a `Vec` grows by doubling from the size taken.
fn written(cmd: &Cmd) -> usize {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => bytes.len(),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::holding::layout::texts;

    #[test]
    fn a_command_given_back_comes_out_again_empty() {
        let buffers = Buffers::default();
        {
            let mut cmd = buffers.take(3, 16);
            cmd.arg("SET").arg("k").arg("v");
            assert_eq!(texts(&cmd), ["SET", "k", "v"]);
        }
        assert_eq!(buffers.kept(), 1);
        let cmd = buffers.take(3, 16);
        assert_eq!(buffers.kept(), 0);
        assert!(texts(&cmd).is_empty(), "{:?}", texts(&cmd));
    }

    #[test]
    fn a_burst_leaves_no_more_than_the_kept_spares() {
        let buffers = Buffers::default();
        let taken: Vec<Buffer<'_>> = (0..KEPT + 10).map(|_| buffers.take(1, 8)).collect();
        drop(taken);
        assert_eq!(buffers.kept(), KEPT);
    }

    #[test]
    fn a_large_command_is_not_kept() {
        let buffers = Buffers::default();
        {
            let mut cmd = buffers.take(1, 8);
            cmd.arg(vec![b'x'; KEPT_BYTES + 1]);
        }
        assert_eq!(buffers.kept(), 0);
    }
}
