//! A fan-out's decision rules, as the round engine runs them: each node's
//! answer (or failure) in, "decided" out. One lock's votes are a
//! [`Round`](crate::round::Round) over a [`Tally`]; a renewal round's,
//! where one call per node carries every lock due, a [`Batch`] of tallies;
//! a leader read's and an inspection's tokens, where a claim stands
//! ([`standing`]). No I/O.

use std::time::Duration;

use crate::error::{NodeError, NodeFailure};
use crate::quorum::{Decision, Tally, Vote, quorum};

/// What a fan-out decides by: how each node's answer, or failure, counts,
/// and when the answers heard so far settle what the caller learns. The
/// engine hands every node's outcome to [`record`](Self::record) once, until
/// [`decided`](Self::decided) says so; the nodes still answering then are
/// followed in the background, outside the rule.
pub(crate) trait Decide {
    /// A node's answer.
    type Answer;

    /// Counts node `node`'s answer, or its failure.
    fn record(&mut self, node: usize, answer: Result<Self::Answer, NodeFailure>);

    /// Whether the nodes still answering can no longer change what the
    /// caller learns.
    fn decided(&self) -> bool;

    /// Whether a decision left to [unresponsive](crate::node::Node::unresponsive)
    /// nodes still waits for them (each until the deadline). A call its
    /// caller awaits does not: it would only wait out their timeout (see
    /// [`waits_only_on`]). Background work that no caller awaits does: a
    /// renewal waits for a loaded node that may still answer in time, since
    /// giving up early could lose a lock that waiting keeps.
    fn waits_for_unresponsive(&self) -> bool {
        false
    }

    /// Whether the round is contested and left to a few nodes far behind:
    /// some node refused, none of the answers so far decides (only yeses
    /// from nodes still answering could), and a quorum has answered (the
    /// nodes still answering are at most `N - Q`). An acquisition
    /// says so (see [`Round::contested`](crate::round::Round)): the engine
    /// then waits for those nodes only a while longer than the others took
    /// (see [`contest_patience`]). No other rule does: a refused extension
    /// or release waits for every answer it may need.
    fn contested(&self) -> bool {
        false
    }
}

/// How long after its start a fan-out still waits for the nodes that alone
/// could decide a [contested](Decide::contested) round, given that the
/// answers so far came within `answered` of it: [`CONTEST_PATIENCE`] times
/// that, and never less than [`CONTEST_PATIENCE_FLOOR`].
///
/// A contested attempt that waits for a node far behind the others holds
/// the keys it got on the fast nodes meanwhile. If the one refusing it
/// already holds a quorum (the slow node among its keys), the wait is for
/// a "no" and only keeps the next owner from a quorum of fast nodes: then
/// each handoff needs the slow node, and a lock with one slow node of five
/// hands off at the pace of that node's round trips. Giving the attempt up
/// releases its keys at once, and the wake-up its cleanup announces lets
/// the next attempt go. A contest between two attempts costs a retry.
pub(crate) fn contest_patience(answered: Duration) -> Duration {
    answered
        .saturating_mul(CONTEST_PATIENCE)
        .max(CONTEST_PATIENCE_FLOOR)
}

/// See [`contest_patience`]: how many times as long as the answers so far
/// took a contested round waits for the nodes that could still decide it.
pub(crate) const CONTEST_PATIENCE: u32 = 4;

/// See [`contest_patience`]: the least a contested round waits for the
/// nodes that could still decide it, from its start, so that a healthy
/// node's answer a scheduler's hiccup late still counts.
pub(crate) const CONTEST_PATIENCE_FLOOR: Duration = Duration::from_millis(2);

/// Whether a fan-out to `nodes` nodes, `pending` of them still to answer,
/// waits only on `unresponsive` nodes (see
/// [`Node::unresponsive`](crate::node::Node::unresponsive)) that a quorum
/// can do without: every node still to answer is one, and they are at most
/// `N - Q`. Waiting for them would only wait out their timeout, so the
/// fan-out decides as if they had failed. (More of them than `N - Q` may be
/// a loaded machine rather than frozen nodes: those are waited for.)
pub(crate) fn waits_only_on(nodes: usize, pending: usize, unresponsive: usize) -> bool {
    pending > 0 && unresponsive == pending && unresponsive <= nodes - quorum(nodes)
}

/// Where one claim stands — a token on the nodes, a leader — when `nodes`
/// of the answers so far show it, `pending` nodes are still to answer and
/// `failed` did not: the rule of a read decided at a quorum (an
/// inspection's tokens, a leader read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// On a quorum.
    Confirmed,
    /// On no quorum, even if every pending and failed node holds it.
    RuledOut,
    /// The pending nodes cannot put it on a quorum, and even if they all
    /// answer without it the failed nodes could: nobody can tell.
    Unknowable,
    /// The pending nodes decide it.
    Open,
}

pub(crate) fn standing(nodes: usize, pending: usize, failed: usize, quorum: usize) -> Standing {
    if nodes >= quorum {
        Standing::Confirmed
    } else if nodes + pending + failed < quorum {
        Standing::RuledOut
    } else if nodes + pending < quorum && nodes + failed >= quorum {
        Standing::Unknowable
    } else {
        Standing::Open
    }
}

/// The tallies of a batch of locks asked of every node in one call each (a
/// renewal round): a node's answer carries one vote per lock, and each lock
/// is decided by its own tally as soon as that is known. The batch is
/// decided once every lock is.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    tallies: Vec<Tally>,
    undecided: usize,
    /// Nodes that answered (each a vote per lock).
    answered: usize,
    /// Nodes that failed as unable to run the call at all (see
    /// [`NodeError::is_incompatible`]).
    incompatible: usize,
}

impl Batch {
    /// `locks` locks, asked of `nodes` nodes.
    pub(crate) fn new(nodes: usize, locks: usize) -> Self {
        Self {
            tallies: vec![Tally::new(nodes); locks],
            undecided: locks,
            answered: 0,
            incompatible: 0,
        }
    }

    /// Counts one node's answer: each lock's vote (a lock missing from
    /// `votes` failed), or for a node that failed, a failure for every
    /// lock. A lock already decided counts no more votes. Returns the locks
    /// this answer decided.
    pub(crate) fn record(&mut self, answer: Result<&[Vote], &NodeError>) -> Vec<usize> {
        match answer {
            Ok(_) => self.answered += 1,
            Err(error) => self.incompatible += usize::from(error.is_incompatible()),
        }
        let mut decided = Vec::new();
        for (lock, tally) in self.tallies.iter_mut().enumerate() {
            if tally.decision() != Decision::Pending {
                continue;
            }
            let vote = match answer {
                Ok(votes) => votes.get(lock).copied().unwrap_or(Vote::Failed),
                Err(_) => Vote::Failed,
            };
            if tally.record(vote) != Decision::Pending {
                decided.push(lock);
            }
        }
        self.undecided -= decided.len();
        decided
    }

    /// Lock `lock`'s tally.
    pub(crate) fn tally(&self, lock: usize) -> Option<&Tally> {
        self.tallies.get(lock)
    }

    /// Whether every lock is decided.
    pub(crate) fn decided(&self) -> bool {
        self.undecided == 0
    }

    /// Whether a quorum of nodes answered (whatever their votes).
    pub(crate) fn reachable(&self) -> bool {
        self.tallies
            .first()
            .is_none_or(|tally| self.answered >= tally.quorum())
    }

    /// Whether more nodes than a quorum tolerates cannot run the call at
    /// all: no quorum ever will.
    pub(crate) fn hopeless(&self) -> bool {
        self.tallies
            .first()
            .is_some_and(|tally| self.incompatible > tally.nodes() - tally.quorum())
    }
}

/// Helpers for the tests of decision rules.
#[cfg(test)]
pub(crate) mod testing {
    /// Every way `nodes` nodes can each pick one of `options`: the
    /// exhaustive inputs of a decision rule's tests.
    pub(crate) fn patterns<T: Clone>(nodes: usize, options: &[T]) -> Vec<Vec<T>> {
        let mut out = vec![Vec::new()];
        for _ in 0..nodes {
            out = out
                .into_iter()
                .flat_map(|pattern| {
                    options.iter().map(move |option| {
                        let mut next = pattern.clone();
                        next.push(option.clone());
                        next
                    })
                })
                .collect();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::Shortfall;
    use Vote::{No, Yes};

    #[test]
    fn only_a_minority_of_unresponsive_nodes_is_not_waited_for() {
        // Five nodes, one still to answer, and it is unresponsive.
        assert!(waits_only_on(5, 1, 1));
        assert!(!waits_only_on(5, 1, 0), "a responsive node is waited for");
        assert!(waits_only_on(5, 2, 2));
        assert!(!waits_only_on(5, 2, 1), "one of the two is responsive");
        assert!(
            !waits_only_on(5, 3, 3),
            "more than N - Q: a loaded machine?"
        );
        assert!(!waits_only_on(3, 0, 0), "nothing pending");
        assert!(
            !waits_only_on(1, 1, 1),
            "a single node is never done without"
        );
    }

    #[test]
    fn each_lock_of_a_batch_is_decided_by_its_own_tally() {
        let mut batch = Batch::new(3, 3);
        assert!(batch.record(Ok(&[Yes, No, Yes])).is_empty());
        assert!(!batch.reachable());
        // Lock 0 reached, lock 1 can no longer; lock 2 still open.
        assert_eq!(batch.record(Ok(&[Yes, No, No])), [0, 1]);
        assert!(batch.reachable());
        assert!(!batch.decided());
        assert_eq!(batch.tally(0).map(Tally::decision), Some(Decision::Reached));
        assert!(
            batch
                .tally(1)
                .is_some_and(Tally::refused_by_quorum_complement)
        );
        // A lock missing from an answer failed there.
        assert_eq!(batch.record(Ok(&[Yes])), [2]);
        assert!(batch.decided());
        assert_eq!(
            batch.tally(2).map(Tally::decision),
            Some(Decision::Impossible)
        );
        assert!(batch.tally(2).is_some_and(|t| t.yes() == 1));
    }

    #[test]
    fn a_decided_lock_counts_no_more_votes() {
        let mut batch = Batch::new(3, 1);
        batch.record(Ok(&[Yes]));
        assert_eq!(batch.record(Ok(&[Yes])), [0]);
        assert!(batch.record(Ok(&[No])).is_empty());
        assert!(
            batch
                .tally(0)
                .is_some_and(|t| t.yes() == 2 && t.pending() == 1)
        );
    }

    #[test]
    fn a_failed_node_fails_every_lock_and_incompatible_ones_make_it_hopeless() {
        let mut batch = Batch::new(3, 2);
        let error = NodeError::Timeout(std::time::Duration::from_millis(1));
        assert!(batch.record(Err(&error)).is_empty());
        assert!(!batch.hopeless());
        assert_eq!(batch.record(Err(&error)), [0, 1]);
        assert!(!batch.reachable(), "no node answered");
        assert!(!batch.hopeless(), "timeouts are not incompatibility");
        assert_eq!(
            batch.tally(1).map(|t| t.shortfall(0)),
            Some(Shortfall::Unreachable)
        );
        let mut batch = Batch::new(3, 1);
        let unsupported = NodeError::FunctionsUnsupported {
            server: "redis 6.2".to_owned(),
        };
        batch.record(Err(&unsupported));
        assert!(!batch.hopeless(), "one of three: a quorum can still answer");
        batch.record(Err(&unsupported));
        assert!(batch.hopeless());
    }
}
