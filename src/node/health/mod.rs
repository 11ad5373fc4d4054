//! Whether a node answers, and what is done while it does not: a node whose
//! last requests all timed out ([`UNRESPONSIVE`] in a row, none answered
//! since) is **not asked**: calls fail for it at once
//! ([`NodeError::NotAsked`]) instead of queuing bytes, a timer and a
//! follower each on a connection that does not move. One task per such
//! node probes it with `PING` on a backoff with jitter (from about the node
//! timeout, doubling up to [`PROBE_CAP`]), and at once when a call finds it
//! not asked (at most one turn per quarter of a node timeout, so a node
//! that comes back is not held out by the backoff); the first answer — a
//! probe's, or a request's still in flight — makes it asked again (once
//! what it is owed is paid).
//!
//! The prober also delivers what the node is owed (see `owed`): the
//! releases it did not answer, paid before a node not asked is asked
//! again, and for a node that stayed asked (a restart refuses connections,
//! it does not time out), as soon as it answers.
//!
//! At most `N − Q` nodes of a manager are left unasked at once, the most a
//! quorum can do without: more silent at once looks like a loaded machine
//! rather than frozen nodes, and the others are still asked, as a call can
//! only succeed through them.
//!
//! What this changes is whom a call asks, never how many must agree: the
//! quorum stays a majority of all the nodes, and a node not asked is a
//! failure of the call, never a confirmation. A release is not sent to a
//! node not asked either: the node is owed it (see `owed`), and gets it
//! before it is asked anything again.
//! A held, auto-extended lock is put back on the node by its first renewal
//! after the node answers again (an extension restores a missing key).
//!
//! Split in two, so that `Node` can hold its health without a circle of
//! imports: the state (`state.rs`, which imports nothing of the node), and
//! here, what is done with it (`impl Node`, and the prober).

mod state;

pub(super) use state::Health;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use self::state::{Fleet, StartProber, Watch};
use crate::error::NodeError;
use crate::metrics;
use crate::node::Node;

/// How many requests in a row must time out, with no answer between them,
/// before a node is not asked (see [`Node::unresponsive`]).
pub(super) const UNRESPONSIVE: u32 = 2;

/// The longest wait between two probes of a node not asked.
pub(crate) const PROBE_CAP: Duration = Duration::from_secs(2);

/// The shortest: a tiny node timeout does not make probes a busy loop.
const PROBE_FLOOR: Duration = Duration::from_millis(10);

/// What a request's end says of its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// The node answered: a reply, or an error it sent back.
    Answer,
    /// No answer within the deadline.
    Timeout,
    /// Nothing either way: the request was not sent (not waited for, not
    /// asked), or its connection failed (dropped, refused, broken, or not
    /// made) — which says nothing of whether the server would answer: a
    /// connection to a frozen server may break while it stays frozen.
    Nothing,
}

impl Heard {
    /// What `answer`, the end of a request to a node, says of it.
    pub(crate) fn of<T>(answer: &Result<T, NodeError>) -> Self {
        match answer {
            Ok(_) => Self::Answer,
            Err(NodeError::Timeout(_)) => Self::Timeout,
            Err(
                NodeError::Unresponsive | NodeError::NotAsked { .. } | NodeError::Outpaced { .. },
            ) => Self::Nothing,
            // The client's own timers (connecting, say): no answer either.
            Err(NodeError::Redis(e)) if e.is_timeout() => Self::Timeout,
            // Only an error with a code came from the server; the others
            // are the connection's (dropped, refused, broken, not made).
            Err(NodeError::Redis(e)) if e.code().is_none() => Self::Nothing,
            Err(_) => Self::Answer,
        }
    }
}

impl Node {
    /// Records what the end of a request to this node says of it. The
    /// timeout that makes it [unresponsive](Self::unresponsive) stops it
    /// being asked (where its fleet allows) and starts its prober; the
    /// first answer after that makes it asked again.
    pub(crate) fn note(&self, heard: Heard) {
        let health = &self.health;
        match heard {
            Heard::Timeout => {
                if health.timeouts.fetch_add(1, Ordering::AcqRel) + 1 == UNRESPONSIVE {
                    self.not_asked();
                }
            }
            Heard::Answer => {
                if health.timeouts.load(Ordering::Acquire) == 0 {
                    return;
                }
                if health.not_asked.load(Ordering::Acquire) && self.owed.any() {
                    // A late answer: not asked again before what it is
                    // owed is paid (see `owed`); its prober pays now.
                    self.kicked().notify_one();
                    return;
                }
                self.answered_again();
            }
            Heard::Nothing => {}
        }
    }

    /// Whether the node's last requests all timed out ([`UNRESPONSIVE`] in
    /// a row, none answered since): a frozen node, or one far behind. It is
    /// then not asked (see the module), where its fleet allows; a fan-out
    /// does not wait for requests still in flight to it once the other
    /// nodes have answered (see
    /// [`waits_only_on`](crate::quorum::decide::waits_only_on)). A loaded
    /// but healthy node answers between its timeouts, and keeps its place.
    pub(crate) fn unresponsive(&self) -> bool {
        self.health.timeouts.load(Ordering::Acquire) >= UNRESPONSIVE
    }

    /// Why a request is not to be sent to this node now: it is not asked
    /// (see the module). `None` while it is asked: it answers, or more of
    /// its fleet are silent than a quorum can do without, or no prober can
    /// run (then the request itself finds out whether it answers).
    pub(super) fn not_asked(&self) -> Option<NodeError> {
        if !self.unresponsive() {
            return None;
        }
        let health = &self.health;
        let watch = health.watch.get()?;
        if !health.not_asked.load(Ordering::Acquire) {
            // Take one of the fleet's places, if one is free.
            let fleet = &watch.fleet;
            let free = |n: usize| (n < fleet.most).then_some(n + 1);
            if fleet
                .not_asked
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, free)
                .is_err()
            {
                return None;
            }
            if health.not_asked.swap(true, Ordering::AcqRel) {
                // Taken meanwhile by another caller: give this one back.
                fleet.not_asked.fetch_sub(1, Ordering::AcqRel);
            } else {
                self.stopped_asking();
            }
        }
        if !self.probed(watch) {
            return None;
        }
        // A call needs it: its prober asks now rather than after its
        // backoff, in case it answers again (at most one turn per
        // `kick_spacing`, see `probe`).
        self.kicked().notify_one();
        Some(NodeError::NotAsked {
            silent_for: self.not_asked_for().unwrap_or_default(),
        })
    }

    /// How long the node has not been asked, if it is not.
    pub(crate) fn not_asked_for(&self) -> Option<Duration> {
        if !self.health.not_asked.load(Ordering::Acquire) {
            return None;
        }
        let since = *self.health.since.lock().unwrap_or_else(|e| e.into_inner());
        Some(since.map_or(Duration::ZERO, |since| since.elapsed()))
    }

    /// The transition to not asked: noted, logged and counted.
    fn stopped_asking(&self) {
        *self.health.since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        metrics::node_asked(&self.label, false);
        tracing::warn!(
            node = %self.label,
            "node not answering: not asked until a probe answers"
        );
    }

    /// The node answers: its timeouts forgotten, and asked again if it
    /// was not.
    fn answered_again(&self) {
        self.health.timeouts.store(0, Ordering::Release);
        self.ask_again();
    }

    /// The transition back, if the node was not asked: its fleet's place
    /// given back, logged and counted.
    fn ask_again(&self) {
        let health = &self.health;
        if !health.not_asked.swap(false, Ordering::AcqRel) {
            return;
        }
        if let Some(watch) = health.watch.get() {
            watch.fleet.not_asked.fetch_sub(1, Ordering::AcqRel);
        }
        let since = health
            .since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        metrics::node_asked(&self.label, true);
        let silent_ms = since.map_or(0, |since| since.elapsed().as_millis());
        tracing::info!(node = %self.label, silent_ms, "node answers again: asked again");
    }

    /// Has the node's prober run, if it does not, for debts to pay (see
    /// `owed`).
    pub(super) fn start_prober(&self) {
        if let Some(watch) = self.health.watch.get() {
            self.probed(watch);
        }
    }

    /// Whether a prober runs for this node, starting one if none does.
    fn probed(&self, watch: &Watch) -> bool {
        let health = &self.health;
        if health.probing.swap(true, Ordering::AcqRel) {
            return true;
        }
        let started = (watch.start)();
        if !started {
            health.probing.store(false, Ordering::Release);
        }
        started
    }

    /// `PING` within `timeout`, past the gate that keeps requests from a
    /// node not asked: what it says of the node.
    async fn ping(&self, timeout: Duration) -> Heard {
        let answer = crate::node::within(
            (Instant::now() + timeout).into(),
            self.deliver_unasked::<redis::Value>(&redis::cmd("PING")),
        )
        .await;
        Heard::of(&answer)
    }
}

/// Gives every node of `nodes` its prober: a task, started when the node
/// stops being asked, that pings it on a backoff from `timeout` until it
/// answers (each ping bounded by `timeout`). Each holds the nodes weakly:
/// it ends once they are gone.
pub(crate) fn watch(nodes: &Arc<[Node]>, timeout: Duration) {
    let fleet = Arc::new(Fleet {
        not_asked: AtomicUsize::new(0),
        most: nodes
            .len()
            .saturating_sub(crate::quorum::quorum(nodes.len())),
    });
    for (i, node) in nodes.iter().enumerate() {
        let weak = Arc::downgrade(nodes);
        let start: StartProber = Box::new(move || {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return false;
            };
            runtime.spawn(probe(weak.clone(), i, timeout));
            true
        });
        // Set once, when the manager is built.
        let _ = node.health.watch.set(Watch {
            fleet: fleet.clone(),
            start,
        });
    }
}

/// Node `i`'s prober (see [`watch`]): while the node is not asked, pings
/// it until it answers; while it owes releases (see `owed`), pays them;
/// both on a backoff. A node not asked is asked again only once a probe
/// answered and its debts are paid.
async fn probe(nodes: Weak<[Node]>, i: usize, timeout: Duration) {
    /// Clears the node's `probing` however the task ends (its runtime may
    /// drop it), so that the next request starts another.
    struct Probing(Weak<[Node]>, usize);
    impl Drop for Probing {
        fn drop(&mut self) {
            if let Some(node) = self.0.upgrade().as_deref().and_then(|n| n.get(self.1)) {
                node.health.probing.store(false, Ordering::Release);
            }
        }
    }
    let _probing = Probing(nodes.clone(), i);
    let Some(kicked) = nodes.upgrade().and_then(|n| n.get(i).map(Node::kicked)) else {
        return;
    };
    let mut wait = timeout.max(PROBE_FLOOR);
    loop {
        // A request to a node that owes, or a late answer from one not
        // asked, wakes it early: the node answers, or may.
        tokio::select! {
            () = tokio::time::sleep(jittered(wait)) => {}
            () = kicked.notified() => {}
        }
        let Some(nodes) = nodes.upgrade() else {
            return;
        };
        let Some(node) = nodes.get(i) else {
            return;
        };
        if node.probe_once(timeout).await {
            // Nothing left to do: stop, unless something came meanwhile
            // (a debt kept just before `probing` was cleared would have
            // started no prober).
            node.health.probing.store(false, Ordering::Release);
            let more = node.unresponsive() || node.owed.any();
            if !more || node.health.probing.swap(true, Ordering::AcqRel) {
                return;
            }
            wait = timeout.max(PROBE_FLOOR);
        } else {
            wait = next_wait(wait);
            // However often calls wake it, a turn that found the node
            // silent is not tried again sooner than this.
            tokio::time::sleep(kick_spacing(timeout)).await;
        }
    }
}

/// The least time between two turns of a prober that calls keep waking:
/// a quarter of the node timeout (at least [`PROBE_FLOOR`]), so that a
/// node that comes back is asked again within about that, and one that
/// stays silent costs a probe per node timeout at most.
fn kick_spacing(timeout: Duration) -> Duration {
    (timeout / 4).max(PROBE_FLOOR)
}

impl Node {
    /// One turn of the prober: a ping if the node is silent, then its debts
    /// if it answers. Whether nothing is left to do.
    async fn probe_once(&self, timeout: Duration) -> bool {
        let silent = self.unresponsive();
        if !silent && !self.owed.any() {
            return true;
        }
        if silent {
            let heard = self.ping(timeout).await;
            metrics::probe(&self.label, heard == Heard::Answer);
            if heard != Heard::Answer {
                return false;
            }
        }
        // It answers: what it is owed goes before anything else is asked.
        let paid = self.pay(timeout).await;
        if silent {
            // Asked again whatever the payment's answers: the payment went
            // first on its connection (nothing else was sent to it), and
            // what it did not answer, or was owed meanwhile (for requests
            // never sent to it), is paid in the next turns. Waiting for all
            // of it would keep a node that answers out of every quorum
            // while calls go on, each owing it one more release.
            self.answered_again();
        }
        paid.is_ok() && !self.owed.any()
    }
}

/// The wait after a probe that found the node silent: doubled, up to
/// [`PROBE_CAP`].
fn next_wait(wait: Duration) -> Duration {
    wait.saturating_mul(2).min(PROBE_CAP.max(wait))
}

/// `wait`, with jitter: between half of it and all of it, so that the
/// probes of many managers do not meet.
fn jittered(wait: Duration) -> Duration {
    wait.mul_f64(0.5 + rand::random::<f64>() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_back_off_by_doubling_up_to_the_cap() {
        let mut wait = Duration::from_millis(100);
        let mut waits = Vec::new();
        for _ in 0..8 {
            waits.push(wait.as_millis());
            wait = next_wait(wait);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        // A node timeout above the cap keeps its own.
        assert_eq!(next_wait(Duration::from_secs(5)), Duration::from_secs(5));
        for _ in 0..100 {
            let jittered = jittered(Duration::from_millis(100));
            assert!(
                jittered >= Duration::from_millis(50) && jittered <= Duration::from_millis(100)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_stops_answering_is_not_asked_until_an_answer() {
        let node = crate::node::testing::nodes(1).pop().expect("a node");
        // No manager, no prober: never left unasked.
        crate::node::testing::freeze(&node);
        assert!(node.unresponsive());
        assert!(
            node.not_asked().is_none(),
            "nothing would ever ask it again"
        );

        let nodes: Arc<[Node]> = crate::node::testing::nodes(3).into();
        watch(&nodes, Duration::from_secs(60));
        crate::node::testing::freeze(&nodes[0]);
        assert!(matches!(
            nodes[0].not_asked(),
            Some(NodeError::NotAsked { .. })
        ));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(nodes[0].not_asked_for() >= Some(Duration::from_millis(1500)));
        // A broken connection says nothing; an answer (a late one, say)
        // brings it back.
        let broken: Result<(), NodeError> = Err(NodeError::Redis(redis::RedisError::from(
            std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        )));
        nodes[0].note(Heard::of(&broken));
        assert!(nodes[0].not_asked().is_some());
        // Nor does an error the server did not send, whatever its words.
        let client: Result<(), NodeError> = Err(NodeError::Redis(redis::RedisError::from((
            redis::ErrorKind::Client,
            "request dropped",
        ))));
        nodes[0].note(Heard::of(&client));
        assert!(nodes[0].not_asked().is_some());
        // A server's error is an answer.
        let server: Result<(), NodeError> = Err(NodeError::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "LOADING",
        ))));
        assert_eq!(Heard::of(&server), Heard::Answer);
        nodes[0].note(Heard::Answer);
        assert!(!nodes[0].unresponsive());
        assert!(nodes[0].not_asked().is_none());
        assert_eq!(nodes[0].not_asked_for(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_nodes_are_left_unasked_than_a_quorum_can_do_without() {
        let nodes: Arc<[Node]> = crate::node::testing::nodes(5).into();
        watch(&nodes, Duration::from_secs(60));
        for node in nodes.iter() {
            crate::node::testing::freeze(node);
        }
        let unasked = |nodes: &[Node]| nodes.iter().filter(|n| n.not_asked().is_some()).count();
        // Five silent at once looks like a loaded machine: two are left
        // unasked, three still asked (a call can only succeed through them).
        assert_eq!(unasked(&nodes), 2);
        assert!(nodes[0].not_asked().is_some() && nodes[1].not_asked().is_some());
        // One answers again: its place goes to the next silent one.
        nodes[0].note(Heard::Answer);
        assert_eq!(unasked(&nodes), 2);
        assert!(nodes[0].not_asked().is_none() && nodes[2].not_asked().is_some());
        // A single node is always asked: there is nobody to do without it.
        let one: Arc<[Node]> = crate::node::testing::nodes(1).into();
        watch(&one, Duration::from_secs(60));
        crate::node::testing::freeze(&one[0]);
        assert!(one[0].not_asked().is_none());
    }
}
