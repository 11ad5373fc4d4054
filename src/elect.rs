//! The election primitive on the round engine. A campaign is a fenced
//! lock's acquire round (see [`primitive`](crate::primitive)): its fence is
//! the term. What an election adds is the leader's value, kept per node
//! beside the lock key in a hash that names the token it belongs to
//! (`elect_proclaim.lua`), and the read of both, decided by a quorum
//! (`elect_leader.lua`): a leader is confirmed only when a quorum of nodes
//! hold the same token.

use std::sync::Arc;

use tokio::time::Instant;

use crate::calls::Stragglers;
use crate::error::{Error, NodeFailure};
use crate::node::{Deadline, Seen};
use crate::quorum::Rule;
use crate::quorum::quorum;
use crate::round::{Core, Round, fan_out, follow};
use crate::token::Token;

/// Appended to an election's lock key to form the key of the leader's
/// value (a hash: token, term, revision, value).
pub(crate) const LEADER_SUFFIX: &str = ":leader";

/// The key of the leader's value beside lock key `key`.
pub(crate) fn leader_key(key: &str) -> Arc<str> {
    let mut name = String::with_capacity(key.len() + LEADER_SUFFIX.len());
    name.push_str(key);
    name.push_str(LEADER_SUFFIX);
    name.into()
}

/// Appended to an election's lock key to form the channel on which nodes
/// announce a stored value (a new leader's, or a new revision), when the
/// manager announces releases
/// ([`WakeOnRelease::Subscribe`](crate::WakeOnRelease::Subscribe)).
pub(crate) const ELECTED_SUFFIX: &str = ":elected";

/// The channel of an election's values beside lock key `key`.
pub(crate) fn elected_channel(key: &str) -> String {
    let mut name = String::with_capacity(key.len() + ELECTED_SUFFIX.len());
    name.push_str(key);
    name.push_str(ELECTED_SUFFIX);
    name
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
    let deadline = (Instant::now() + core.node_timeout).min(until);
    let announce: Option<Arc<str>> = core
        .announce
        .then(|| elected_channel(&proclamation.key).into());
    let (round, stragglers) = fan_out(
        &core.nodes,
        Rule::Quorum,
        "proclaim",
        deadline,
        |i, _, deadline| {
            let (core, p, announce) = (core.clone(), proclamation.clone(), announce.clone());
            async move {
                let Some(node) = core.nodes.get(i) else {
                    return Ok(false);
                };
                node.proclaim(
                    &p.key,
                    &p.leader_key,
                    p.token.as_str(),
                    p.term,
                    p.rev,
                    &p.value,
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
pub(crate) enum Verdict {
    /// More answers are needed.
    Pending,
    /// A quorum holds one token, and its value is known.
    Leader(Confirmed),
    /// No token can be held by a quorum any more, or the one that is has
    /// no value on any node that answered: no leader is confirmed.
    NoLeader,
    /// Too many nodes failed for any quorum to be seen.
    Unavailable,
}

/// Decides a leader read from the answers so far (`answers[i]` is node
/// `i`'s, `None` while it has not answered or when it failed), with
/// `pending` nodes still to answer. A token held on a quorum of nodes is
/// the leader, with the newest revision of its value among them; two
/// tokens can never both be on a quorum (any two quorums share a node, and
/// a node holds one value).
pub(crate) fn decide(answers: &[Option<Seen>], pending: usize) -> Verdict {
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
    if let Some((token, count)) = &best
        && *count >= q
    {
        let newest = answers
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
            .max_by_key(|c| c.rev);
        return match newest {
            Some(confirmed) => Verdict::Leader(confirmed),
            None if pending > 0 => Verdict::Pending,
            None => Verdict::NoLeader,
        };
    }
    let most = best.map_or(0, |(_, count)| count);
    if most + pending >= q {
        return Verdict::Pending;
    }
    if failed > nodes - q {
        Verdict::Unavailable
    } else {
        Verdict::NoLeader
    }
}

/// Reads the election at `key` from every node and decides who leads, as
/// soon as the answers allow. `Ok(None)`: no leader is confirmed.
///
/// # Errors
///
/// [`Error::Unavailable`] when too many nodes failed to tell.
pub(crate) async fn read_leader(
    core: &Core,
    resource: &str,
    key: &str,
    leader_key: &str,
) -> Result<Option<Confirmed>, Error> {
    let deadline = Instant::now() + core.node_timeout;
    let shared = Deadline::timed_by_caller(deadline);
    let mut calls = Stragglers::new(
        core.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| (i, node.read_leader(key, leader_key, shared))),
        Some(deadline),
    );
    let mut answers: Vec<Option<Seen>> = vec![None; core.nodes.len()];
    let mut pending = core.nodes.len();
    let mut failures = Vec::new();
    while let Some((i, answer)) = calls.next().await {
        pending -= 1;
        match answer {
            Ok(seen) => {
                if let Some(slot) = answers.get_mut(i) {
                    *slot = Some(seen);
                }
            }
            Err(error) => {
                tracing::debug!(op = "leader", node = %core.label(i), error = %error, "node failed");
                failures.push(NodeFailure {
                    node: core
                        .nodes
                        .get(i)
                        .map_or_else(|| Arc::from("?"), |n| n.label().clone()),
                    error,
                });
            }
        }
        match decide(&answers, pending) {
            Verdict::Pending => continue,
            Verdict::Leader(confirmed) => return Ok(Some(confirmed)),
            Verdict::NoLeader => return Ok(None),
            Verdict::Unavailable => break,
        }
    }
    Err(Error::Unavailable {
        resource: resource.to_owned(),
        nodes: core.nodes.len(),
        quorum: core.quorum(),
        failures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn leader(token: &str, term: u64, rev: u64, value: &str) -> Verdict {
        Verdict::Leader(Confirmed {
            token: token.to_owned(),
            term,
            rev,
            value: value.to_owned(),
        })
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
        assert_eq!(decide(&answers, 2), Verdict::Pending);
        let five = [
            proclaimed("a", 7, 0, "x"),
            proclaimed("a", 7, 0, "x"),
            Some(Seen::Nobody),
            None,
            None,
        ];
        assert_eq!(decide(&five, 2), Verdict::Pending);
        // The two that are left answered "nobody" (or failed): no quorum.
        let mut done = five.clone();
        done[3] = Some(Seen::Nobody);
        assert_eq!(decide(&done, 0), Verdict::NoLeader);
        assert_eq!(decide(&five, 0), Verdict::NoLeader, "two failed");
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
        assert_eq!(decide(&answers, 0), Verdict::NoLeader);
    }

    #[test]
    fn a_holder_without_a_value_anywhere_is_not_confirmed() {
        let answers = [holder("a"), holder("a"), None];
        assert_eq!(decide(&answers, 1), Verdict::Pending);
        assert_eq!(decide(&answers, 0), Verdict::NoLeader);
        // A stale value of another token does not count for this one.
        let answers = [holder("a"), holder("a"), proclaimed("b", 1, 0, "v")];
        assert_eq!(decide(&answers, 0), Verdict::NoLeader);
    }

    #[test]
    fn too_many_failures_are_unavailable() {
        let answers = [proclaimed("a", 1, 0, "v"), None, None];
        assert_eq!(decide(&answers, 0), Verdict::Unavailable);
        assert_eq!(decide(&[None], 0), Verdict::Unavailable);
        assert_eq!(decide(&[Some(Seen::Nobody)], 0), Verdict::NoLeader);
        assert_eq!(
            decide(&[proclaimed("a", 1, 0, "v")], 0),
            leader("a", 1, 0, "v")
        );
    }

    #[test]
    fn every_answer_pattern_decides_consistently() {
        // Three nodes, each: nobody, holder a, proclaimed a, holder b,
        // failed, or still pending. Once decided, a verdict never changes
        // as the pending nodes answer.
        let choices: [Option<Option<Seen>>; 6] = [
            Some(Some(Seen::Nobody)),
            Some(holder("a")),
            Some(proclaimed("a", 1, 0, "v")),
            Some(holder("b")),
            Some(None),
            None,
        ];
        for code in 0..6usize.pow(3) {
            let picks: Vec<&Option<Option<Seen>>> =
                (0..3).map(|k| &choices[code / 6usize.pow(k) % 6]).collect();
            let answers: Vec<Option<Seen>> = picks.iter().map(|p| (*p).clone().flatten()).collect();
            let pending = picks.iter().filter(|p| p.is_none()).count();
            let verdict = decide(&answers, pending);
            if verdict == Verdict::Pending {
                continue;
            }
            // Fill the pending nodes every way: the verdict stands.
            for fill in 0..5usize.pow(pending as u32) {
                let mut filled = answers.clone();
                let mut f = fill;
                for (slot, pick) in filled.iter_mut().zip(&picks) {
                    if pick.is_none() {
                        *slot = choices[f % 5].clone().flatten();
                        f /= 5;
                    }
                }
                let later = decide(&filled, 0);
                match verdict {
                    Verdict::Leader(_) => assert_eq!(later, verdict, "code {code} fill {fill}"),
                    _ => assert!(
                        !matches!(later, Verdict::Leader(_)),
                        "code {code} fill {fill}: {verdict:?} then {later:?}"
                    ),
                }
            }
        }
    }
}
