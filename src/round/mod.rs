//! The round layer: the one fan-out ([`fan_out_with`]) that every call to
//! every node runs on — one request per node, decided by a rule
//! ([`Decide`](crate::quorum::decide::Decide): one lock's votes, a [`Round`]; a renewal's batch; a leader
//! read), with the nodes' health, failure metrics and logs, and the
//! requests still in flight after it [followed](follow) — and the release
//! of every node that may hold a token, with the [`Core`] that guards,
//! renewals and wake-ups hold instead of the manager. A primitive plugs its
//! acquisition into [`attempt`] by describing it ([`Acquire`]); nothing
//! here knows guards, renewals or the manager.

mod attempt;
pub(crate) mod calls;
mod core;
mod engine;
mod follower;
mod release;
pub(crate) mod tasks;

pub(crate) use self::core::{Core, Holding};
pub(crate) use attempt::{Acquire, Grant, NodeCall, attempt};
pub(crate) use engine::{Round, Traced, fan_out, fan_out_with, follow, shallow};
pub(crate) use release::{InFlight, OnNodes, release, release_again, release_in_background};

#[cfg(test)]
pub(crate) mod tests {
    //! The engine's tests use the node's test helpers.
    pub(crate) use crate::node::testing::{freeze, nodes};
}
