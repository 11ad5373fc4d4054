//! The signals quorumlock catches, so that it can give its lock back (and
//! stop what it started) instead of dying with it held.

use std::io;

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit;

/// SIGINT, SIGTERM and SIGHUP, caught so that quorumlock can give the lock
/// back (and pass them on to the command) instead of dying with it held.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// [`install`](Self::install), or `None` after saying on stderr why
    /// it failed (the subcommand then exits with [`exit::INTERNAL`]).
    pub(crate) fn install_or_report() -> Option<Self> {
        Self::install()
            .inspect_err(|e| eprintln!("quorumlock: cannot install signal handlers: {e}"))
            .ok()
    }

    /// The next signal received. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// The status of a process that a signal ended: 128 + its number.
pub(crate) fn signal_status(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(exit::INTERNAL)
}
