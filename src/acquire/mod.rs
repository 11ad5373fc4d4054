//! Getting a hold: what an acquiring call does around its attempts — the
//! retry loop's delays ([`Retry`](retry::Retry)), waiting for a release by
//! pub/sub instead of polling (`wakeup`; a fair lock's waiter told its
//! turn, `turns`), and the node check a manager
//! runs on its first use ([`FirstUse`]).

pub(crate) mod retry;
pub(crate) mod turns;
pub(crate) mod wakeup;

use crate::check::StartupCheck;

/// A manager's startup check, and whether it has started.
#[derive(Debug, Default)]
pub(crate) struct FirstUse {
    pub(crate) check: StartupCheck,
    pub(crate) started: std::sync::atomic::AtomicBool,
}

impl FirstUse {
    /// Whether the startup check is to start now: true once, on the first
    /// call, unless the check is skipped.
    pub(crate) fn begin(&self) -> bool {
        self.check != StartupCheck::Skip
            && !self
                .started
                .swap(true, std::sync::atomic::Ordering::Relaxed)
    }
}
