//! What quorumlock reports through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`): the calls every layer makes, and nothing
//! else. Without the feature they compile to nothing. Labels never carry a
//! token, a password or a resource name (unbounded, and possibly
//! sensitive): only outcomes, reasons, operations and node labels
//! (`host:port`).

use std::time::Duration;

use crate::error::{Error, LossReason};

/// An acquisition ended: a `lock`/`try_lock` call (any form), a permit, a
/// read or write hold, or a campaign.
pub(crate) fn acquisition(result: Result<(), &Error>, attempts: u32, elapsed: Duration) {
    let outcome = match result {
        Ok(()) => "granted",
        Err(Error::Contended { .. }) => "contended",
        Err(Error::Unavailable { .. }) => "unavailable",
        Err(Error::ValidityExpired { .. }) => "validity_expired",
        Err(Error::FenceUnconfirmed { .. }) => "fence_unconfirmed",
        Err(Error::WaitTimeout { .. }) => "wait_timeout",
        Err(Error::InvalidArgument(_)) => "invalid_argument",
        Err(_) => "error",
    };
    imp::acquisition(outcome, attempts, elapsed);
}

/// A held lock was released (explicitly, or its guard dropped).
pub(crate) fn release(outcome: &'static str) {
    imp::counter_static("quorumlock_releases_total", "outcome", outcome);
}

/// An explicit `extend` ended.
pub(crate) fn extension(outcome: &'static str) {
    imp::counter_static("quorumlock_extensions_total", "outcome", outcome);
}

/// A renewal of one auto-extended lock was decided.
pub(crate) fn renewal(outcome: &'static str) {
    imp::counter_static("quorumlock_renewals_total", "outcome", outcome);
}

/// A renewal round sent one call to a node (however many locks it carried).
pub(crate) fn renewal_call(node: &str) {
    imp::counter("quorumlock_renewal_calls_total", "node", node);
}

/// A lock was granted: one more held.
pub(crate) fn granted() {
    imp::held(1.0);
}

/// A held lock stopped being held: released, or lost for `reason`. A lock
/// given up at or after its `deadline` had passed was lost to expiry first.
/// Without the feature this reads no clock.
pub(crate) fn ended(reason: LossReason, deadline: tokio::time::Instant) {
    if !cfg!(feature = "metrics") {
        return;
    }
    imp::held(-1.0);
    let expired = reason == LossReason::Released && tokio::time::Instant::now() >= deadline;
    let reason = match reason {
        LossReason::Released if expired => "expired",
        LossReason::Released => return,
        LossReason::Expired => "expired",
        LossReason::TokenGone => "token_gone",
        LossReason::Unreachable => "unreachable",
        LossReason::Incompatible => "incompatible",
    };
    imp::counter_static("quorumlock_locks_lost_total", "reason", reason);
}

/// A node failed a request of `op`: timed out, or any other error.
pub(crate) fn node_error(node: &str, op: &'static str, timeout: bool) {
    imp::node_error(node, op, if timeout { "timeout" } else { "error" });
}

/// A request answered (`ok`) or failed after its call had returned: a
/// straggler of a decided round, or a release nobody waits for, followed in
/// the background.
pub(crate) fn followed(op: &'static str, ok: bool) {
    imp::followed(op, if ok { "answered" } else { "failed" });
}

/// A release went out once more on a node: a late grant there may have
/// landed after the first one.
pub(crate) fn released_again() {
    imp::counter0("quorumlock_releases_resent_total");
}

/// Background work bound for a node that is far behind was dropped
/// unsent: a release (of a lock nobody holds any more) whose node timeout
/// passed while it queued. Its key expires by ttl.
pub(crate) fn shed(node: &str, op: &'static str) {
    imp::shed(node, op);
}

/// A node stopped being asked (`asked`: false) or was asked again after a
/// probe or a late request answered (true): a counter of transitions and a
/// gauge of the node's state (1 asked, 0 not).
pub(crate) fn node_asked(node: &str, asked: bool) {
    imp::node_asked(node, asked);
}

/// A probe of a node not asked ended: answered or not.
pub(crate) fn probe(node: &str, answered: bool) {
    let outcome = if answered { "answered" } else { "silent" };
    imp::probe(node, outcome);
}

/// A node was owed more releases than it keeps (see `node::owed`): the
/// oldest was dropped, its key left to expire by ttl.
pub(crate) fn owed_dropped(node: &str) {
    imp::counter("quorumlock_owed_dropped_total", "node", node);
}

/// Owed releases were delivered to a node that came back (`paid` of them).
pub(crate) fn owed_paid(node: &str, paid: usize) {
    imp::owed_paid(node, paid);
}

/// A waiter was woken by an announced release.
pub(crate) fn wakeup() {
    imp::counter0("quorumlock_wakeups_total");
}

/// A held key changed on a node under its holder (seen through key
/// tracking): the holder renews at once.
pub(crate) fn renewal_woken() {
    imp::counter0("quorumlock_renewals_woken_total");
}

#[cfg(feature = "metrics")]
mod imp {
    use std::sync::{Mutex, PoisonError};
    use std::time::Duration;

    use metrics::{Key, Label, Level, Metadata};

    /// What the `metrics` macros would say of where a metric comes from.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// The labels `pairs`, all of them `'static` strings (an outcome, an
    /// operation), built once and kept for the process's life, so that a
    /// metric's key borrows them and recording one allocates nothing: the
    /// per-call metrics (an acquisition's outcome, a straggler followed, a
    /// release) are on every lock cycle's path. The set is closed (the
    /// outcomes and operations this crate names, a few dozen), so what is
    /// kept is bounded. Labels that carry a node's name are built per call.
    fn interned(pairs: &[(&'static str, &'static str)]) -> &'static [Label] {
        type Seen = Vec<(Vec<(&'static str, &'static str)>, &'static [Label])>;
        static SEEN: Mutex<Seen> = Mutex::new(Vec::new());
        let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, labels)) = seen.iter().find(|(known, _)| known.as_slice() == pairs) {
            return labels;
        }
        let labels: &'static [Label] = Box::leak(
            pairs
                .iter()
                .map(|&(label, value)| Label::from_static_parts(label, value))
                .collect(),
        );
        seen.push((pairs.to_vec(), labels));
        labels
    }

    fn key(name: &'static str, pairs: &[(&'static str, &'static str)]) -> Key {
        Key::from_static_labels(name, interned(pairs))
    }

    fn count(name: &'static str, pairs: &[(&'static str, &'static str)]) {
        let key = key(name, pairs);
        metrics::with_recorder(|recorder| recorder.register_counter(&key, &METADATA)).increment(1);
    }

    fn record(name: &'static str, pairs: &[(&'static str, &'static str)], value: f64) {
        let key = key(name, pairs);
        metrics::with_recorder(|recorder| recorder.register_histogram(&key, &METADATA))
            .record(value);
    }

    pub(super) fn acquisition(outcome: &'static str, attempts: u32, elapsed: Duration) {
        let labels = [("outcome", outcome)];
        count("quorumlock_acquisitions_total", &labels);
        record("quorumlock_acquire_attempts", &labels, f64::from(attempts));
        record("quorumlock_acquire_seconds", &labels, elapsed.as_secs_f64());
    }

    pub(super) fn counter(name: &'static str, label: &'static str, value: &str) {
        metrics::counter!(name, label => value.to_owned()).increment(1);
    }

    pub(super) fn counter_static(name: &'static str, label: &'static str, value: &'static str) {
        count(name, &[(label, value)]);
    }

    pub(super) fn counter0(name: &'static str) {
        metrics::counter!(name).increment(1);
    }

    pub(super) fn owed_paid(node: &str, paid: usize) {
        metrics::counter!("quorumlock_owed_paid_total", "node" => node.to_owned())
            .increment(u64::try_from(paid).unwrap_or(u64::MAX));
    }

    pub(super) fn held(delta: f64) {
        metrics::gauge!("quorumlock_locks_held").increment(delta);
    }

    pub(super) fn followed(op: &'static str, outcome: &'static str) {
        count(
            "quorumlock_followed_total",
            &[("op", op), ("outcome", outcome)],
        );
    }

    pub(super) fn shed(node: &str, op: &'static str) {
        metrics::counter!("quorumlock_shed_total", "node" => node.to_owned(), "op" => op)
            .increment(1);
    }

    pub(super) fn node_asked(node: &str, asked: bool) {
        let to = if asked { "asked" } else { "not_asked" };
        metrics::counter!("quorumlock_node_transitions_total", "node" => node.to_owned(), "to" => to)
            .increment(1);
        metrics::gauge!("quorumlock_node_asked", "node" => node.to_owned()).set(if asked {
            1.0
        } else {
            0.0
        });
    }

    pub(super) fn probe(node: &str, outcome: &'static str) {
        metrics::counter!("quorumlock_node_probes_total", "node" => node.to_owned(), "outcome" => outcome)
            .increment(1);
    }

    pub(super) fn node_error(node: &str, op: &'static str, kind: &'static str) {
        metrics::counter!(
            "quorumlock_node_errors_total",
            "node" => node.to_owned(),
            "op" => op,
            "kind" => kind
        )
        .increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use std::time::Duration;

    pub(super) fn acquisition(_: &'static str, _: u32, _: Duration) {}
    pub(super) fn counter(_: &'static str, _: &'static str, _: &str) {}
    pub(super) fn counter_static(_: &'static str, _: &'static str, _: &'static str) {}
    pub(super) fn counter0(_: &'static str) {}
    pub(super) fn owed_paid(_: &str, _: usize) {}
    pub(super) fn held(_: f64) {}
    pub(super) fn node_error(_: &str, _: &'static str, _: &'static str) {}
    pub(super) fn followed(_: &'static str, _: &'static str) {}
    pub(super) fn shed(_: &str, _: &'static str) {}
    pub(super) fn node_asked(_: &str, _: bool) {}
    pub(super) fn probe(_: &str, _: &'static str) {}
}
