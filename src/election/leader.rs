//! The election primitive on the round engine. A campaign is a fenced
//! lock's acquire round (see [`lock`](crate::lock)): its fence is
//! the term. What an election adds is the leader's value, kept per node
//! beside the lock key in a hash that names the token it belongs to
//! (`elect_proclaim.lua`), and the read of both, decided by a quorum
//! (`elect_leader.lua`): a leader is confirmed only when a quorum of nodes
//! hold the same token.

use std::sync::Arc;

use tokio::time::Instant;

use super::keys::{ELECTED_SUFFIX, LEADER_SUFFIX};
use crate::error::{Error, NodeError, NodeFailure};
use crate::quorum::Rule;
use crate::quorum::decide::{Decide, Standing, standing};
use crate::quorum::quorum;
use crate::request::Ttl;
use crate::round::{Core, Round, Traced, fan_out, fan_out_with, follow};
use crate::token::Token;

use super::node::Seen;

/// The key of the leader's value beside lock key `key`.
pub(crate) fn leader_key(key: &str) -> Arc<str> {
    let mut name = String::with_capacity(key.len() + LEADER_SUFFIX.len());
    name.push_str(key);
    name.push_str(LEADER_SUFFIX);
    name.into()
}

/// The channel of an election's values beside lock key `key`.
pub(crate) fn elected_channel(key: &str) -> String {
    let mut name = String::with_capacity(key.len() + ELECTED_SUFFIX.len());
    name.push_str(key);
    name.push_str(ELECTED_SUFFIX);
    name
}

/// How long a leader's value outlives each write of it: two ttls and a
/// node timeout. The leader writes it again every third of the ttl,
/// each round taking a node timeout at most, so while it leads the value
/// never expires (a node that misses two rounds in a row still keeps it);
/// after it resigns or dies, the value is gone that long after its last
/// write.
pub(crate) fn value_ttl(ttl: Ttl, node_timeout: std::time::Duration) -> Ttl {
    let node_timeout = u64::try_from(node_timeout.as_millis()).unwrap_or(u64::MAX);
    Ttl::from_millis(ttl.ms().saturating_mul(2).saturating_add(node_timeout))
}

/// One revision of a leader's value, as every node is asked to store it.
#[derive(Debug, Clone)]
pub(crate) struct Proclamation {
    pub(crate) key: Arc<str>,
    pub(crate) leader_key: Arc<str>,
    pub(crate) token: Token,
    pub(crate) term: u64,
    pub(crate) rev: u64,
    pub(crate) value: Arc<str>,
    /// How long the value outlives this write (see [`value_ttl`]).
    pub(crate) ttl: Ttl,
}

/// Asks every node to store `proclamation`, where the lock key still holds
/// its token; decided at a quorum, by `until` at the latest (the lock's
/// deadline). Nodes still answering at the decision are followed in the
/// background, so that every node that can store it does.
pub(crate) async fn proclaim(
    core: &Arc<Core>,
    proclamation: &Proclamation,
    until: Instant,
) -> Round {
    let deadline = core.timeout_within(Instant::now(), until);
    let announce: Option<Arc<str>> = core
        .announces()
        .then(|| elected_channel(&proclamation.key).into());
    let (round, stragglers) = fan_out(
        core.nodes(),
        Rule::Quorum,
        "proclaim",
        deadline,
        |i, _, deadline| {
            let (core, p, announce) = (core.clone(), proclamation.clone(), announce.clone());
            async move {
                let Ok(node) = core.node(i) else {
                    return Ok(false);
                };
                node.proclaim(
                    &p.key,
                    &p.leader_key,
                    p.token.as_str(),
                    p.term,
                    p.rev,
                    &p.value,
                    p.ttl,
                    announce.as_deref(),
                    deadline,
                )
                .await
            }
        },
    )
    .await;
    follow(core, "proclaim", stragglers, |_, _| {});
    round
}

/// A leader as a quorum of nodes confirmed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confirmed {
    pub(crate) token: String,
    pub(crate) term: u64,
    pub(crate) rev: u64,
    pub(crate) value: String,
}

/// Where the answers of a leader read stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaderRead {
    /// More answers are needed.
    Pending,
    /// A quorum holds one token, and its value is known.
    Leader(Confirmed),
    /// No token can be on a quorum, even counting every node that failed
    /// or has not answered, or the one that is has no value on any node
    /// and every node answered: no leader.
    NoLeader,
    /// The nodes that failed could decide it: with some answers from them
    /// a leader would be confirmed, with others there would be none.
    Unavailable,
}

/// Decides a leader read from the answers so far (`answers[i]` is node
/// `i`'s, `None` while it has not answered or when it failed), with
/// `pending` nodes still to answer. A token held on a quorum of nodes is
/// the leader, with the newest revision of its value among them; two
/// tokens can never both be on a quorum (any two quorums share a node, and
/// a node holds one value).
///
/// A node that failed is not a node that said "nobody": it may hold a
/// leader's token, and its value. "No leader" is the answer only when no
/// token can be on a quorum even if every failed and pending node holds
/// it; a leader only when a quorum that answered holds its token and one
/// of them its value. When the answers still missing (pending) cannot
/// change the outcome, it is decided without them; when only the failed
/// nodes could, it is [`LeaderRead::Unavailable`].
pub(crate) fn decide(answers: &[Option<Seen>], pending: usize) -> LeaderRead {
    let nodes = answers.len();
    let q = quorum(nodes);
    let failed = nodes - pending - answers.iter().flatten().count();
    let holder = |seen: &Seen| match seen {
        Seen::Nobody => None,
        Seen::Holder { token } | Seen::Proclaimed { token, .. } => Some(token.clone()),
    };
    let mut best: Option<(String, usize)> = None;
    for token in answers.iter().flatten().filter_map(holder) {
        let count = answers
            .iter()
            .flatten()
            .filter(|seen| holder(seen).as_deref() == Some(token.as_str()))
            .count();
        if best.as_ref().is_none_or(|(_, most)| count > *most) {
            best = Some((token, count));
        }
    }
    let most = best.as_ref().map_or(0, |(_, count)| *count);
    match standing(most, pending, failed, q) {
        Standing::Confirmed => {
            let token = best.map(|(token, _)| token).unwrap_or_default();
            // The token leads. If no node that answered has its value, a
            // node yet to answer, or one that failed, may have it (a node
            // that restarted empty gets the lock back from a renewal
            // before the value comes back, so the value can be on the
            // failed nodes only).
            match newest_value(answers, &token) {
                Some(confirmed) => LeaderRead::Leader(confirmed),
                None if pending > 0 => LeaderRead::Pending,
                None if failed > 0 => LeaderRead::Unavailable,
                None => LeaderRead::NoLeader,
            }
        }
        // No token can be on a quorum, whatever the others say.
        Standing::RuledOut => LeaderRead::NoLeader,
        // A leader can no longer be confirmed, nor ruled out, whatever the
        // pending nodes say.
        Standing::Unknowable => LeaderRead::Unavailable,
        Standing::Open => LeaderRead::Pending,
    }
}

/// The newest value `token` proclaimed among the answers.
fn newest_value(answers: &[Option<Seen>], token: &str) -> Option<Confirmed> {
    answers
        .iter()
        .flatten()
        .filter_map(|seen| match seen {
            Seen::Proclaimed {
                token: t,
                term,
                rev,
                value,
            } if t == token => Some(Confirmed {
                token: t.clone(),
                term: *term,
                rev: *rev,
                value: value.clone(),
            }),
            _ => None,
        })
        .max_by_key(|c| c.rev)
}

/// A leader read's answers so far, decided by [`decide`].
#[derive(Debug)]
struct Reading {
    answers: Vec<Option<Seen>>,
    pending: usize,
    failures: Vec<NodeFailure>,
    verdict: LeaderRead,
}

impl Decide for Reading {
    type Answer = Seen;

    fn record(&mut self, node: usize, answer: Result<Seen, NodeFailure>) {
        self.pending = self.pending.saturating_sub(1);
        match answer {
            Ok(seen) => {
                if let Some(slot) = self.answers.get_mut(node) {
                    *slot = Some(seen);
                }
            }
            Err(failure) => self.failures.push(failure),
        }
        self.verdict = decide(&self.answers, self.pending);
    }

    fn decided(&self) -> bool {
        self.verdict != LeaderRead::Pending
    }
}

/// A node's answer to a leader read: what it holds, without the token or
/// the value.
impl Traced for Seen {
    fn trace(op: &'static str, node: &str, late: bool, answer: &Result<Self, NodeError>) {
        // Only late answers say so.
        let late = late.then_some(true);
        let seen = match answer {
            Ok(Seen::Nobody) => "nobody",
            Ok(Seen::Holder { .. }) => "a holder without a value",
            Ok(Seen::Proclaimed { .. }) => "a holder with a value",
            Err(error) => {
                tracing::debug!(op, node = %node, late, error = %error, "node failed");
                return;
            }
        };
        tracing::debug!(op, node = %node, late, seen);
    }
}

/// Reads the election at `key` from every node and decides who leads, as
/// soon as the answers allow; the nodes still answering then are followed
/// in the background. `Ok(None)`: no leader is confirmed.
///
/// # Errors
///
/// [`Error::Unavailable`] when the nodes that failed could tell (see
/// [`decide`]).
pub(crate) async fn read_leader(
    core: &Arc<Core>,
    resource: &str,
    key: &str,
    leader_key: &str,
) -> Result<Option<Confirmed>, Error> {
    let nodes = core.len();
    let reading = Reading {
        answers: vec![None; nodes],
        pending: nodes,
        failures: Vec::new(),
        verdict: LeaderRead::Pending,
    };
    let deadline = core.timeout_from(Instant::now());
    let (key, leader_key): (Arc<str>, Arc<str>) = (key.into(), leader_key.into());
    let (reading, stragglers) = fan_out_with(
        core.nodes(),
        "leader",
        deadline,
        reading,
        |i, _, deadline| {
            let (core, key, leader_key) = (core.clone(), key.clone(), leader_key.clone());
            // Owned, so that it can be followed after the decision.
            async move { core.node(i)?.read_leader(&key, &leader_key, deadline).await }
        },
    )
    .await;
    follow(core, "leader", stragglers, |_, _| {});
    match reading.verdict {
        LeaderRead::Leader(confirmed) => Ok(Some(confirmed)),
        LeaderRead::NoLeader => Ok(None),
        // So many nodes cannot serve the read (refused credentials or
        // script, no scripting engine) that no quorum ever will: said as
        // such, not as an outage.
        LeaderRead::Pending | LeaderRead::Unavailable
            if reading
                .failures
                .iter()
                .filter(|f| f.error.is_incompatible())
                .count()
                > nodes - core.quorum() =>
        {
            Err(Error::Incompatible {
                resource: resource.to_owned(),
                nodes,
                quorum: core.quorum(),
                failures: reading.failures,
            })
        }
        LeaderRead::Pending | LeaderRead::Unavailable => Err(Error::Unavailable {
            resource: resource.to_owned(),
            nodes,
            quorum: core.quorum(),
            failures: reading.failures,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::decide::testing::patterns;

    fn holder(token: &str) -> Option<Seen> {
        Some(Seen::Holder {
            token: token.to_owned(),
        })
    }

    fn proclaimed(token: &str, term: u64, rev: u64, value: &str) -> Option<Seen> {
        Some(Seen::Proclaimed {
            token: token.to_owned(),
            term,
            rev,
            value: value.to_owned(),
        })
    }

    fn leader(token: &str, term: u64, rev: u64, value: &str) -> LeaderRead {
        LeaderRead::Leader(Confirmed {
            token: token.to_owned(),
            term,
            rev,
            value: value.to_owned(),
        })
    }

    fn reading(nodes: usize) -> Reading {
        Reading {
            answers: vec![None; nodes],
            pending: nodes,
            failures: Vec::new(),
            verdict: LeaderRead::Pending,
        }
    }

    /// Reads three nodes on the round engine: nodes 0 and 1 answer `said`
    /// within 20 ms, node 2 (frozen here) after a minute.
    async fn read_with_node_2_frozen(said: [Option<Seen>; 2]) -> (Reading, Vec<usize>) {
        use crate::round::tests::{freeze, nodes};
        let nodes = nodes(3);
        freeze(&nodes[2]);
        let start = Instant::now();
        let far = start + std::time::Duration::from_secs(600);
        let (reading, stragglers) = fan_out_with(&nodes, "leader", far, reading(3), |i, _, _| {
            let seen = said.get(i).cloned().flatten().unwrap_or(Seen::Nobody);
            let ms = if i == 2 { 60_000 } else { 10 * (i as u64 + 1) };
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                Ok(seen)
            }
        })
        .await;
        assert_eq!(
            Instant::now(),
            start + std::time::Duration::from_millis(20),
            "decided without the frozen node"
        );
        (reading, stragglers.nodes().collect())
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_does_not_wait_for_an_unresponsive_node() {
        // It could hold the token and make a quorum, or not: unknown.
        let (read, left) =
            read_with_node_2_frozen([proclaimed("a", 1, 0, "v"), Some(Seen::Nobody)]).await;
        assert_eq!(read.verdict, LeaderRead::Unavailable);
        assert!(matches!(
            &read.failures[..],
            [f] if matches!(f.error, NodeError::Unresponsive)
        ));
        assert_eq!(left, [2], "still in flight, for the engine to follow");
        // Two nodes agree: decided by them, nothing failed.
        let (read, _) = read_with_node_2_frozen([proclaimed("a", 1, 0, "v"), holder("a")]).await;
        assert_eq!(read.verdict, leader("a", 1, 0, "v"));
        assert!(read.failures.is_empty());
        let (read, _) = read_with_node_2_frozen([Some(Seen::Nobody), Some(Seen::Nobody)]).await;
        assert_eq!(read.verdict, LeaderRead::NoLeader);
    }

    #[test]
    fn a_leaders_value_outlives_each_write_by_two_ttls_and_a_node_timeout() {
        let node_timeout = std::time::Duration::from_millis(250);
        let value_ttl = |ms| value_ttl(Ttl::from_millis(ms), node_timeout).ms();
        assert_eq!(value_ttl(10_000), 20_250);
        assert_eq!(value_ttl(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_token_on_a_quorum_leads_with_its_newest_value() {
        let answers = [
            proclaimed("a", 7, 0, "x"),
            proclaimed("a", 7, 2, "z"),
            None,
            holder("a"),
            None,
        ];
        assert_eq!(decide(&answers, 2), leader("a", 7, 2, "z"));
    }

    #[test]
    fn a_token_short_of_a_quorum_waits_then_is_no_leader() {
        let answers = [proclaimed("a", 7, 0, "x"), None, None];
        assert_eq!(decide(&answers, 2), LeaderRead::Pending);
        let five = [
            proclaimed("a", 7, 0, "x"),
            proclaimed("a", 7, 0, "x"),
            Some(Seen::Nobody),
            None,
            None,
        ];
        assert_eq!(decide(&five, 2), LeaderRead::Pending);
        // The two that are left answered "nobody": no quorum.
        let mut done = five.clone();
        done[3] = Some(Seen::Nobody);
        done[4] = Some(Seen::Nobody);
        assert_eq!(decide(&done, 0), LeaderRead::NoLeader);
        // They failed instead: they may hold "a", which would be on three.
        assert_eq!(decide(&five, 0), LeaderRead::Unavailable, "two failed");
        // One failed, and one said "nobody": "a" can still be on three.
        done[4] = None;
        assert_eq!(decide(&done, 0), LeaderRead::Unavailable, "one failed");
    }

    #[test]
    fn a_failed_node_and_a_pending_one_wait_for_the_pending_one() {
        // Three nodes: one said nobody, one failed, one is still to answer.
        // Together the failed and the pending one could hold a quorum's
        // token: this is not "no leader" yet.
        let answers = [Some(Seen::Nobody), None, None];
        assert_eq!(decide(&answers, 1), LeaderRead::Pending);
        // The pending one fails too: they could be a leader's quorum, or
        // not. No one can tell.
        assert_eq!(decide(&answers, 0), LeaderRead::Unavailable);
        // It says nobody: with two nodes of three saying nobody, no token
        // can be on two.
        let answers = [Some(Seen::Nobody), None, Some(Seen::Nobody)];
        assert_eq!(decide(&answers, 0), LeaderRead::NoLeader);
        // It holds a token: that token could be on two with the failed one.
        let answers = [Some(Seen::Nobody), None, holder("a")];
        assert_eq!(decide(&answers, 0), LeaderRead::Unavailable);

        // Five nodes: "nobody" from the pending one rules a leader out only
        // when no token can still be on three.
        let answers = [holder("a"), holder("a"), Some(Seen::Nobody), None, None];
        assert_eq!(decide(&answers, 1), LeaderRead::Pending);
        let mut answered = answers.clone();
        answered[4] = Some(Seen::Nobody);
        assert_eq!(
            decide(&answered, 0),
            LeaderRead::Unavailable,
            "a, a, failed"
        );
        let answers = [
            holder("a"),
            Some(Seen::Nobody),
            Some(Seen::Nobody),
            None,
            None,
        ];
        assert_eq!(decide(&answers, 1), LeaderRead::Pending);
        let mut answered = answers.clone();
        answered[4] = Some(Seen::Nobody);
        assert_eq!(decide(&answered, 0), LeaderRead::NoLeader);
    }

    #[test]
    fn nobody_on_one_node_and_two_stopped_is_unavailable() {
        // The reported case: node 3 restarted empty (nobody), nodes 1 and 2
        // stopped, so their reads time out. Nodes 1 and 2 are a quorum and
        // may both hold the leader's token.
        let answers = [None, None, Some(Seen::Nobody)];
        assert_eq!(decide(&answers, 2), LeaderRead::Pending);
        assert_eq!(decide(&answers, 1), LeaderRead::Pending, "one timed out");
        assert_eq!(
            decide(&answers, 0),
            LeaderRead::Unavailable,
            "both timed out"
        );
        // The timeouts come first: once two failed, node 3's answer
        // cannot change the outcome.
        let none: [Option<Seen>; 3] = [None, None, None];
        assert_eq!(decide(&none, 2), LeaderRead::Pending);
        assert_eq!(decide(&none, 1), LeaderRead::Unavailable);
    }

    #[test]
    fn split_holders_are_no_leader() {
        // An old leader's keys expiring while a new one is granted.
        let answers = [
            proclaimed("old", 3, 0, "x"),
            proclaimed("old", 3, 0, "x"),
            holder("new"),
            holder("new"),
            Some(Seen::Nobody),
        ];
        assert_eq!(decide(&answers, 0), LeaderRead::NoLeader);
    }

    #[test]
    fn a_holder_without_a_value_anywhere_is_not_confirmed() {
        let answers = [holder("a"), holder("a"), None];
        assert_eq!(decide(&answers, 1), LeaderRead::Pending);
        let answered = [holder("a"), holder("a"), Some(Seen::Nobody)];
        assert_eq!(decide(&answered, 0), LeaderRead::NoLeader);
        // "a" leads, and the node that failed may have its value (two
        // nodes restarted empty, and renewals put the lock back on them
        // before the value): unknown, not "no leader".
        assert_eq!(decide(&answers, 0), LeaderRead::Unavailable);
        // A stale value of another token does not count for this one.
        let answers = [holder("a"), holder("a"), proclaimed("b", 1, 0, "v")];
        assert_eq!(decide(&answers, 0), LeaderRead::NoLeader);
    }

    #[test]
    fn too_many_failures_are_unavailable() {
        let answers = [proclaimed("a", 1, 0, "v"), None, None];
        assert_eq!(decide(&answers, 0), LeaderRead::Unavailable);
        assert_eq!(decide(&[None], 0), LeaderRead::Unavailable);
        assert_eq!(decide(&[Some(Seen::Nobody)], 0), LeaderRead::NoLeader);
        assert_eq!(
            decide(&[proclaimed("a", 1, 0, "v")], 0),
            leader("a", 1, 0, "v")
        );
    }

    /// What a node that answered can say: nobody, or one of two tokens,
    /// with or without its value.
    fn sayings() -> Vec<Seen> {
        let mut out = vec![Seen::Nobody];
        for token in ["a", "b"] {
            out.extend(holder(token));
            out.extend(proclaimed(token, 1, 0, "v"));
        }
        out
    }

    #[test]
    fn a_verdict_is_what_every_answer_the_failed_nodes_could_have_given_agrees_on() {
        // Each node answered (anything) or failed. A failed node holds
        // something all the same: the verdict must be the one every such
        // hidden answer leads to, and "unavailable" when they differ.
        let said = sayings();
        let outcomes: Vec<Option<Seen>> = said.iter().cloned().map(Some).chain([None]).collect();
        for nodes in 1..=5 {
            for answers in patterns(nodes, &outcomes) {
                let failed: Vec<usize> = (0..nodes).filter(|&i| answers[i].is_none()).collect();
                let mut truths = Vec::new();
                for hidden in patterns(failed.len(), &said) {
                    let mut whole = answers.clone();
                    for (&i, seen) in failed.iter().zip(hidden) {
                        whole[i] = Some(seen);
                    }
                    let truth = decide(&whole, 0);
                    if !truths.contains(&truth) {
                        truths.push(truth);
                    }
                }
                let expected = match truths.as_slice() {
                    [one] => one.clone(),
                    _ => LeaderRead::Unavailable,
                };
                assert_eq!(decide(&answers, 0), expected, "{answers:?}");
            }
        }
    }

    #[test]
    fn once_decided_a_verdict_stands_whatever_the_pending_nodes_say() {
        // Each node answered, failed, or is still pending (`None` here).
        // Once decided, a verdict never changes as the pending nodes
        // answer or fail; with none pending, it is decided.
        let outcomes: Vec<Option<Seen>> = sayings().into_iter().map(Some).chain([None]).collect();
        let picks: Vec<Option<Option<Seen>>> =
            outcomes.iter().cloned().map(Some).chain([None]).collect();
        for nodes in 1..=5 {
            for pattern in patterns(nodes, &picks) {
                let answers: Vec<Option<Seen>> =
                    pattern.iter().cloned().map(Option::flatten).collect();
                let waiting: Vec<usize> = (0..nodes).filter(|&i| pattern[i].is_none()).collect();
                let verdict = decide(&answers, waiting.len());
                if verdict == LeaderRead::Pending {
                    assert!(
                        !waiting.is_empty(),
                        "{pattern:?}: pending with every answer in"
                    );
                    continue;
                }
                for fill in patterns(waiting.len(), &outcomes) {
                    let mut filled = answers.clone();
                    for (&i, outcome) in waiting.iter().zip(fill) {
                        filled[i] = outcome;
                    }
                    assert_eq!(decide(&filled, 0), verdict, "{pattern:?} then {filled:?}");
                }
            }
        }
    }
}
