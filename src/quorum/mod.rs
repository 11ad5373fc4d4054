//! Pure decisions, no I/O: votes in, decision out, and the validity math;
//! the decision rules a fan-out runs (one lock's tally, a renewal's batch)
//! are in [`decide`].

pub(crate) mod decide;

use std::time::Duration;

use tokio::time::Instant;

/// The fixed part of the clock-drift allowance, covering timer granularity.
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// `N / 2 + 1`: the smallest number of nodes any two of which intersect.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// One node's answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    /// The node did what was asked (granted, extended, released).
    Yes,
    /// The node answered and refused: the key is someone else's, or gone.
    No,
    /// The node did not answer usefully (timeout, connection or server error).
    Failed,
}

/// A node's successful answer, which counts as a vote.
pub(crate) trait Answer: Copy {
    fn vote(&self) -> Vote;
}

/// Done (yes) or refused (no).
impl Answer for bool {
    fn vote(&self) -> Vote {
        if *self { Vote::Yes } else { Vote::No }
    }
}

/// Where a tally stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// More answers are needed to decide.
    Pending,
    /// A quorum said yes.
    Reached,
    /// So many nodes said no or failed that a quorum of yes is impossible.
    Impossible,
}

/// When a fan-out has heard enough to stop: what its caller learns no
/// longer depends on the nodes still answering (they are followed in the
/// background).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// A quorum said yes, or can no longer: grants, extensions,
    /// proclamations.
    Quorum,
    /// What a release reports is known: a quorum deleted the token
    /// (released), or so many nodes refused that no quorum holds it (lost),
    /// or every node has answered. Failures alone do not decide it: a node
    /// still answering may yet say the token was gone.
    Release,
    /// As [`Quorum`](Self::Quorum), but a refusal is decided only once a
    /// quorum has answered (or failures alone rule a quorum out, or no
    /// node is left): a fair lock's rounds, whose answers must come from a
    /// quorum whatever they say — its ticket is the largest drawn on a
    /// quorum, and a waiter stands in line on a quorum before it counts on
    /// its place.
    QuorumHeard,
}

/// Why a quorum was impossible, from the caller's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shortfall {
    /// Too many nodes failed for a quorum even if every answer were yes:
    /// the cluster is unavailable.
    Unreachable,
    /// Enough nodes answered, but too many refused.
    Refused,
}

/// Counts votes and decides as early as the outcome is known.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    nodes: usize,
    quorum: usize,
    yes: usize,
    no: usize,
    failed: usize,
}

impl Tally {
    pub(crate) fn new(nodes: usize) -> Self {
        Self {
            nodes,
            quorum: quorum(nodes),
            yes: 0,
            no: 0,
            failed: 0,
        }
    }

    /// Records one vote and returns the decision it leads to.
    pub(crate) fn record(&mut self, vote: Vote) -> Decision {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
            Vote::Failed => self.failed += 1,
        }
        self.decision()
    }

    pub(crate) fn decision(&self) -> Decision {
        if self.yes >= self.quorum {
            Decision::Reached
        } else if self.yes + self.pending() < self.quorum {
            Decision::Impossible
        } else {
            Decision::Pending
        }
    }

    /// Whether the votes so far decide what `rule` asks.
    pub(crate) fn decides(&self, rule: Rule) -> bool {
        match rule {
            Rule::Quorum => self.decision() != Decision::Pending,
            Rule::QuorumHeard => match self.decision() {
                Decision::Reached => true,
                Decision::Impossible => {
                    self.yes + self.no >= self.quorum
                        || self.failed > self.nodes - self.quorum
                        || self.pending() == 0
                }
                Decision::Pending => false,
            },
            Rule::Release => {
                self.yes >= self.quorum
                    || self.refused_by_quorum_complement()
                    || self.pending() == 0
            }
        }
    }

    /// Classifies a failed tally. Failures beyond `N - Q` alone make a
    /// quorum impossible, whatever the answering nodes said; `excused` of
    /// them (nodes a contested attempt gave up on, not unreachable) do not
    /// count.
    pub(crate) fn shortfall(&self, excused: usize) -> Shortfall {
        if self.failed.saturating_sub(excused) > self.nodes - self.quorum {
            Shortfall::Unreachable
        } else {
            Shortfall::Refused
        }
    }

    /// Whether the refusals alone rule out a quorum: for extend and release
    /// this means the token is gone on too many nodes — the lock is lost.
    pub(crate) fn refused_by_quorum_complement(&self) -> bool {
        self.no > self.nodes - self.quorum
    }

    pub(crate) fn pending(&self) -> usize {
        self.nodes - self.yes - self.no - self.failed
    }

    pub(crate) fn yes(&self) -> usize {
        self.yes
    }

    pub(crate) fn no(&self) -> usize {
        self.no
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    pub(crate) fn nodes(&self) -> usize {
        self.nodes
    }
}

/// `ttl * drift_factor + 2ms`: how much earlier than the client's clock a
/// node's clock may expire a key.
pub(crate) fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    ttl.mul_f64(drift_factor) + DRIFT_FLOOR
}

/// The time window a holder may trust, measured on the client's monotonic
/// clock from the moment the request started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    start: Instant,
    ttl: Duration,
    drift: Duration,
}

impl Window {
    pub(crate) fn new(start: Instant, ttl: Duration, drift_factor: f64) -> Self {
        Self {
            start,
            ttl,
            drift: drift(ttl, drift_factor),
        }
    }

    /// `start + ttl - drift`: after this instant the holder must assume the
    /// lock is gone. Saturates at `start` if the drift exceeds the ttl.
    pub(crate) fn deadline(&self) -> Instant {
        self.start + self.ttl.saturating_sub(self.drift)
    }

    /// When the request began: validity is measured from here.
    pub(crate) fn start(&self) -> Instant {
        self.start
    }

    /// `ttl - (now - start) - drift`, or `None` when nothing is left.
    pub(crate) fn validity_at(&self, now: Instant) -> Option<Duration> {
        let left = self.deadline().saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sequence of votes for N = 1..=7 against a brute-force oracle:
    /// the decision is Reached iff yes >= Q, Impossible iff yes + pending < Q.
    #[test]
    fn tally_matches_oracle_for_every_vote_sequence() {
        for n in 1..=7usize {
            let q = n / 2 + 1;
            // Enumerate all 3^n vote sequences.
            for code in 0..3usize.pow(n as u32) {
                let mut tally = Tally::new(n);
                let mut c = code;
                let (mut yes, mut answered) = (0, 0);
                let mut decided = None;
                for _ in 0..n {
                    let vote = [Vote::Yes, Vote::No, Vote::Failed][c % 3];
                    c /= 3;
                    answered += 1;
                    if vote == Vote::Yes {
                        yes += 1;
                    }
                    let d = tally.record(vote);
                    let expected = if yes >= q {
                        Decision::Reached
                    } else if yes + (n - answered) < q {
                        Decision::Impossible
                    } else {
                        Decision::Pending
                    };
                    assert_eq!(d, expected, "n={n} code={code}");
                    // Once decided, a decision never changes.
                    if let Some(prev) = decided {
                        assert_eq!(d, prev, "decision flipped, n={n} code={code}");
                    } else if d != Decision::Pending {
                        decided = Some(d);
                    }
                }
                assert_ne!(tally.decision(), Decision::Pending, "all votes in");
            }
        }
    }

    #[test]
    fn quorum_sizes() {
        assert_eq!(
            (1..=7).map(quorum).collect::<Vec<_>>(),
            [1, 2, 2, 3, 3, 4, 4]
        );
    }

    #[test]
    fn decides_early_without_stragglers() {
        let mut t = Tally::new(5);
        assert_eq!(t.record(Vote::Yes), Decision::Pending);
        assert_eq!(t.record(Vote::Yes), Decision::Pending);
        assert_eq!(t.record(Vote::Yes), Decision::Reached);
        assert_eq!(t.pending(), 2);

        let mut t = Tally::new(5);
        t.record(Vote::No);
        t.record(Vote::Failed);
        assert_eq!(t.record(Vote::No), Decision::Impossible);
        assert_eq!(t.pending(), 2);
    }

    #[test]
    fn shortfall_separates_unreachable_from_refused() {
        let mut t = Tally::new(5);
        t.record(Vote::Failed);
        t.record(Vote::No);
        t.record(Vote::No);
        assert_eq!(t.shortfall(0), Shortfall::Refused);

        let mut t = Tally::new(5);
        t.record(Vote::Failed);
        t.record(Vote::Failed);
        t.record(Vote::Failed);
        assert_eq!(t.shortfall(0), Shortfall::Unreachable);
        // Two of the three failures are nodes a contested attempt gave up
        // on: one failure alone does not rule a quorum out.
        assert_eq!(t.shortfall(2), Shortfall::Refused);

        let mut t = Tally::new(1);
        t.record(Vote::Failed);
        assert_eq!(t.shortfall(0), Shortfall::Unreachable);
    }

    #[test]
    fn token_gone_on_a_majority_is_a_loss() {
        let mut t = Tally::new(3);
        t.record(Vote::No);
        assert!(!t.refused_by_quorum_complement());
        t.record(Vote::No);
        assert!(t.refused_by_quorum_complement());
    }

    #[test]
    fn a_release_decides_on_deletes_or_refusals_never_on_failures_alone() {
        let tally = |votes: &[Vote]| {
            let mut t = Tally::new(3);
            for &v in votes {
                t.record(v);
            }
            t
        };
        use Vote::{Failed, No, Yes};
        // Released on a quorum: known at once.
        assert!(tally(&[Yes, Yes]).decides(Rule::Release));
        // Gone on a quorum: lost, known at once.
        assert!(tally(&[No, No]).decides(Rule::Release));
        // One refusal and one failure rule out a quorum of deletes, but the
        // third node may yet say the token was gone (lost) or delete it
        // (released on two, with a failure): wait for it.
        assert!(tally(&[No, Failed]).decides(Rule::Quorum));
        assert!(!tally(&[No, Failed]).decides(Rule::Release));
        assert!(!tally(&[Failed, Failed]).decides(Rule::Release));
        assert!(tally(&[No, Failed, Yes]).decides(Rule::Release));
        assert!(tally(&[Failed, Failed, Failed]).decides(Rule::Release));
        assert!(!tally(&[Yes, No]).decides(Rule::Release));
    }

    #[test]
    fn a_fair_round_decides_a_refusal_only_once_a_quorum_answered() {
        let tally = |n: usize, votes: &[Vote]| {
            let mut t = Tally::new(n);
            for &v in votes {
                t.record(v);
            }
            t
        };
        use Vote::{Failed, No, Yes};
        // Five nodes, one not asked: two refusals rule out a quorum of
        // grants, but only two nodes have answered.
        assert!(tally(5, &[Failed, No, No]).decides(Rule::Quorum));
        assert!(!tally(5, &[Failed, No, No]).decides(Rule::QuorumHeard));
        assert!(tally(5, &[Failed, No, No, No]).decides(Rule::QuorumHeard));
        assert!(tally(5, &[Failed, No, No, Yes]).decides(Rule::QuorumHeard));
        // A grant on a quorum, or failures that rule one out: at once.
        assert!(tally(5, &[Yes, Yes, Yes]).decides(Rule::QuorumHeard));
        assert!(tally(5, &[Failed, Failed, Failed]).decides(Rule::QuorumHeard));
        // Every node heard from.
        assert!(tally(3, &[Failed, No, Failed]).decides(Rule::QuorumHeard));
        assert!(!tally(3, &[No]).decides(Rule::QuorumHeard));
    }

    #[test]
    fn drift_is_proportional_plus_floor() {
        assert_eq!(
            drift(Duration::from_secs(10), 0.01),
            Duration::from_millis(102)
        );
        assert_eq!(drift(Duration::from_millis(100), 0.0), DRIFT_FLOOR);
    }

    #[tokio::test(start_paused = true)]
    async fn validity_shrinks_with_elapsed_time_and_drift() {
        let start = Instant::now();
        let w = Window::new(start, Duration::from_millis(1000), 0.01);
        // drift = 10ms + 2ms
        assert_eq!(w.deadline(), start + Duration::from_millis(988));
        assert_eq!(
            w.validity_at(Instant::now()),
            Some(Duration::from_millis(988))
        );

        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(
            w.validity_at(Instant::now()),
            Some(Duration::from_millis(688))
        );

        tokio::time::advance(Duration::from_millis(688)).await;
        assert_eq!(w.validity_at(Instant::now()), None, "exactly at deadline");

        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(w.validity_at(Instant::now()), None, "long after");
    }

    #[tokio::test(start_paused = true)]
    async fn drift_larger_than_ttl_saturates_instead_of_underflowing() {
        let start = Instant::now();
        let w = Window::new(start, Duration::from_millis(1), 0.01);
        assert_eq!(w.deadline(), start);
        assert_eq!(w.validity_at(start), None);
    }
}
