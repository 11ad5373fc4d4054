//! The quorum verdict on the nodes' answers so far: pure, tested without
//! Redis.

use std::collections::HashMap;
use std::time::Duration;

use crate::contract::Primitive;
use crate::contract::stored::{
    Claim, Claimed, NodeState, Proclaimed, ResourceKind, SeenToken, Stored, Verdict,
};
use crate::primitives::PRIMITIVES;
use crate::quorum::decide::{Standing, standing};

/// What the answers so far say.
#[derive(Debug)]
pub(super) struct Judgement {
    /// No answer still to come can change the verdict.
    pub(super) decided: bool,
    pub(super) verdict: Verdict,
    pub(super) kind: Option<ResourceKind>,
    pub(super) claims: Vec<Claim>,
    /// The newest value the confirmed lock holder keeps beside the lock
    /// (an election's leader).
    pub(super) value: Option<Proclaimed>,
    /// The value of the highest term any node keeps.
    pub(super) last_value: Option<Proclaimed>,
    /// The count most nodes keep (a semaphore's permit count).
    pub(super) count: Option<u32>,
}

/// Judges the nodes' answers so far. Every token is judged on its own
/// ([`standing`]), and so is a token no node that answered holds (the
/// others may). The verdict is decided once no token is open; a confirmed
/// holder's value (an election's) is waited for too while nodes are
/// pending. Once
/// decided it stands, whatever the pending nodes say: a token's node
/// count and pending nodes together only shrink, and its node count and
/// failed nodes together only grow.
pub(super) fn judge(states: &[NodeState], quorum: usize) -> Judgement {
    let count = |state: fn(&NodeState) -> bool| states.iter().filter(|s| state(s)).count();
    let pending = count(|s| matches!(s, NodeState::Pending));
    let failed = count(|s| matches!(s, NodeState::Failed(_)));
    let answered: Vec<&Stored> = states
        .iter()
        .filter_map(|s| match s {
            NodeState::Answered(stored) => Some(stored),
            _ => None,
        })
        .collect();
    let Tokens {
        claims,
        mut decided,
        unknowable,
    } = tokens(&answered, pending, failed, quorum);
    let kind = kind_of(&answered);
    let holder = claims
        .iter()
        .find(|c| c.confirmed && c.what == Claimed::Lock);
    let value = holder.and_then(|holder| value_of(&answered, &holder.token));
    // Where nodes keep values beside the lock (an election's leader), the
    // holder's may be on a node yet to answer.
    let values = answered.iter().any(|s| s.value.is_some());
    if values && holder.is_some() && value.is_none() && pending > 0 {
        decided = false;
    }
    let last_value = answered
        .iter()
        .filter_map(|s| s.value.as_ref())
        .max_by_key(|l| (l.term, l.revision))
        .cloned();
    let verdict = if claims.iter().any(|c| c.confirmed) {
        Verdict::Held
    } else if unknowable {
        Verdict::Unknown
    } else {
        Verdict::Free
    };
    Judgement {
        decided,
        verdict,
        kind,
        claims,
        value,
        last_value,
        count: count_of(&answered),
    }
}

/// Every token the nodes that answered hold, each judged on its own
/// ([`standing`]), with whether all are decided and whether some cannot be.
struct Tokens {
    claims: Vec<Claim>,
    decided: bool,
    unknowable: bool,
}

fn tokens(answered: &[&Stored], pending: usize, failed: usize, quorum: usize) -> Tokens {
    let mut seen: HashMap<(Claimed, &SeenToken), Vec<Option<Duration>>> = HashMap::new();
    for stored in answered {
        for (what, holder) in stored.claims() {
            seen.entry((what, &holder.token))
                .or_default()
                .push(holder.ttl);
        }
    }
    let mut judged = Tokens {
        claims: Vec::with_capacity(seen.len()),
        decided: true,
        unknowable: false,
    };
    // A token no node that answered holds, first.
    for (key, ttls) in
        std::iter::once((None, Vec::new())).chain(seen.into_iter().map(|(k, t)| (Some(k), t)))
    {
        let standing = standing(ttls.len(), pending, failed, quorum);
        match standing {
            Standing::Open => judged.decided = false,
            Standing::Unknowable => judged.unknowable = true,
            Standing::Confirmed | Standing::RuledOut => {}
        }
        if let Some((what, token)) = key {
            let confirmed = standing == Standing::Confirmed;
            judged.claims.push(Claim {
                what,
                token: token.clone(),
                nodes: ttls.len(),
                ttl: confirmed.then(|| quorum_ttl(&ttls, quorum)).flatten(),
                confirmed,
            });
        }
    }
    judged.claims.sort_by(|a, b| {
        (a.what, std::cmp::Reverse(a.nodes), a.token.prefix()).cmp(&(
            b.what,
            std::cmp::Reverse(b.nodes),
            b.token.prefix(),
        ))
    });
    judged
}

/// The newest value the lock's holder proclaimed, on a node that holds
/// its token.
fn value_of(answered: &[&Stored], holder: &SeenToken) -> Option<Proclaimed> {
    answered
        .iter()
        .filter(|s| s.lock.as_ref().is_some_and(|l| l.token == *holder))
        .filter_map(|s| s.value.as_ref())
        .filter(|l| l.token == *holder)
        .max_by_key(|l| l.revision)
        .cloned()
}

/// The count most nodes keep (the larger on a tie).
fn count_of(answered: &[&Stored]) -> Option<u32> {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for count in answered.iter().filter_map(|s| s.count) {
        match counts.iter_mut().find(|(c, _)| *c == count) {
            Some((_, n)) => *n += 1,
            None => counts.push((count, 1)),
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(c, n)| (n, c))
        .map(|(c, _)| c)
}

/// What the nodes that answered keep, the most telling first: the first
/// primitive in the list whose keys some node keeps, a lock's kind (a
/// lock's key or fence, a fair lock's line) last, since an election keeps
/// a lock too.
pub(super) fn kind_of(answered: &[&Stored]) -> Option<ResourceKind> {
    let (locks, others): (Vec<&Primitive>, Vec<&Primitive>) = PRIMITIVES
        .iter()
        .copied()
        .partition(|p| p.kind == ResourceKind::Lock);
    others
        .into_iter()
        .chain(locks)
        .find(|primitive| answered.iter().any(|s| primitive.reads.found(s)))
        .map(|primitive| primitive.kind)
}

/// How long a quorum keeps holding a token: the quorum-th longest ttl
/// among the nodes that hold it. `None` if some hold it without a ttl.
pub(super) fn quorum_ttl(ttls: &[Option<Duration>], quorum: usize) -> Option<Duration> {
    let mut known: Vec<Duration> = ttls.iter().copied().collect::<Option<_>>()?;
    known.sort_unstable_by(|a, b| b.cmp(a));
    known.get(quorum.checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeError;
    use crate::inspect::{HeldPermit, Holder};
    use crate::quorum::decide::testing::patterns;

    const Q3: usize = 2;

    fn token(t: &str) -> SeenToken {
        SeenToken(t.into())
    }

    fn held(t: &str) -> Holder {
        Holder {
            token: token(t),
            ttl: Some(Duration::from_secs(10)),
        }
    }

    fn lock(t: &str) -> NodeState {
        NodeState::Answered(Stored {
            lock: Some(held(t)),
            ..Stored::default()
        })
    }

    fn proclaimed(t: &str, term: u64, revision: u64, value: &str) -> NodeState {
        NodeState::Answered(Stored {
            lock: Some(held(t)),
            value: Some(Proclaimed {
                token: token(t),
                term,
                revision,
                value: value.to_owned(),
            }),
            ..Stored::default()
        })
    }

    fn empty() -> NodeState {
        NodeState::Answered(Stored::default())
    }

    fn failed() -> NodeState {
        NodeState::Failed(NodeError::Unresponsive)
    }

    /// The verdict, with the confirmed lock holder's token, or `None`
    /// while undecided.
    fn outcome(states: &[NodeState]) -> Option<(Verdict, Option<String>)> {
        let judgement = judge(states, crate::quorum::quorum(states.len()));
        judgement.decided.then(|| {
            let holder = judgement
                .claims
                .iter()
                .find(|c| c.confirmed && c.what == Claimed::Lock)
                .map(|c| c.token.0.to_string());
            (judgement.verdict, holder)
        })
    }

    #[test]
    fn a_token_on_a_quorum_is_held_without_the_others() {
        let states = [lock("a"), lock("a"), NodeState::Pending];
        assert_eq!(
            outcome(&states),
            Some((Verdict::Held, Some("a".to_owned())))
        );
        let judgement = judge(&states, Q3);
        assert_eq!(judgement.kind, Some(ResourceKind::Lock));
        assert_eq!(judgement.claims.len(), 1);
        assert_eq!(judgement.claims[0].nodes, 2);
        assert_eq!(judgement.claims[0].ttl, Some(Duration::from_secs(10)));
    }

    #[test]
    fn free_once_no_token_can_reach_a_quorum() {
        assert_eq!(
            outcome(&[empty(), NodeState::Pending, NodeState::Pending]),
            None
        );
        assert_eq!(
            outcome(&[empty(), empty(), NodeState::Pending]),
            Some((Verdict::Free, None))
        );
        // One holds a token, one holds nothing: the third decides.
        assert_eq!(outcome(&[lock("a"), empty(), NodeState::Pending]), None);
        assert_eq!(
            outcome(&[lock("a"), empty(), empty()]),
            Some((Verdict::Free, None))
        );
    }

    #[test]
    fn failed_nodes_that_could_hold_a_quorums_token_make_it_unknown() {
        assert_eq!(
            outcome(&[lock("a"), failed(), failed()]),
            Some((Verdict::Unknown, None))
        );
        assert_eq!(
            outcome(&[empty(), failed(), failed()]),
            Some((Verdict::Unknown, None))
        );
        // With one node failed a token on one other can still be on two.
        assert_eq!(
            outcome(&[lock("a"), empty(), failed()]),
            Some((Verdict::Unknown, None))
        );
        assert_eq!(
            outcome(&[empty(), empty(), failed()]),
            Some((Verdict::Free, None))
        );
        // Five nodes, one failed, one pending: the pending one decides.
        let states = [lock("a"), lock("a"), empty(), failed(), NodeState::Pending];
        assert_eq!(outcome(&states), None);
    }

    #[test]
    fn an_elections_leader_waits_for_its_value_while_nodes_are_pending() {
        let value_elsewhere = [
            lock("a"),
            lock("a"),
            NodeState::Pending,
            proclaimed("old", 1, 0, "x"),
            NodeState::Pending,
        ];
        assert_eq!(outcome(&value_elsewhere), None);
        let led = [
            proclaimed("a", 2, 0, "x"),
            proclaimed("a", 2, 1, "y"),
            lock("a"),
            NodeState::Pending,
            NodeState::Pending,
        ];
        assert_eq!(outcome(&led), Some((Verdict::Held, Some("a".to_owned()))));
        let judgement = judge(&led, 3);
        assert_eq!(judgement.kind, Some(ResourceKind::Election));
        let leader = judgement.value.expect("a leader");
        assert_eq!(
            (leader.term, leader.revision, leader.value.as_str()),
            (2, 1, "y")
        );
        // A plain lock does not wait for a value.
        let plain = [
            lock("a"),
            lock("a"),
            lock("a"),
            NodeState::Pending,
            NodeState::Pending,
        ];
        assert_eq!(outcome(&plain), Some((Verdict::Held, Some("a".to_owned()))));
    }

    #[test]
    fn the_last_leader_is_the_highest_term_kept() {
        let states = [
            NodeState::Answered(Stored {
                value: Some(Proclaimed {
                    token: token("old"),
                    term: 3,
                    revision: 4,
                    value: "x".to_owned(),
                }),
                ..Stored::default()
            }),
            proclaimed("new", 4, 0, "y"),
            empty(),
        ];
        let judgement = judge(&states, Q3);
        assert!(judgement.decided);
        assert_eq!(judgement.verdict, Verdict::Free);
        assert_eq!(judgement.last_value.map(|l| l.term), Some(4));
    }

    #[test]
    fn permits_and_readers_are_each_judged_on_their_own() {
        let node = |permits: &[(u32, &str)], readers: &[&str]| {
            NodeState::Answered(Stored {
                count: Some(3),
                slots: permits
                    .iter()
                    .map(|&(slot, t)| HeldPermit {
                        slot,
                        holder: held(t),
                    })
                    .collect(),
                shared: readers.iter().map(|t| held(t)).collect(),
                ..Stored::default()
            })
        };
        let states = [
            node(&[(0, "a"), (1, "b")], &["r", "s"]),
            node(&[(0, "a"), (1, "c")], &["r"]),
            node(&[(0, "a")], &["s"]),
        ];
        let judgement = judge(&states, Q3);
        assert!(judgement.decided);
        assert_eq!(judgement.verdict, Verdict::Held);
        assert_eq!(judgement.kind, Some(ResourceKind::Semaphore));
        assert_eq!(judgement.count, Some(3));
        let confirmed: Vec<(Claimed, &str)> = judgement
            .claims
            .iter()
            .filter(|c| c.confirmed)
            .map(|c| (c.what, &*c.token.0))
            .collect();
        assert_eq!(
            confirmed,
            [
                (Claimed::Permit(0), "a"),
                (Claimed::Reader, "r"),
                (Claimed::Reader, "s")
            ]
        );
        // A second permit on one node of two, the third to answer: open.
        let open = [
            node(&[(0, "a"), (1, "b")], &[]),
            node(&[(0, "a")], &[]),
            NodeState::Pending,
        ];
        assert_eq!(outcome(&open), None);
    }

    #[test]
    fn quorum_ttl_is_the_quorum_th_longest() {
        let ms = |v: u64| Some(Duration::from_millis(v));
        assert_eq!(
            quorum_ttl(&[ms(900), ms(500), ms(700)], 2),
            Some(Duration::from_millis(700))
        );
        assert_eq!(quorum_ttl(&[ms(900), None], 1), None);
        assert_eq!(quorum_ttl(&[ms(900)], 2), None);
        assert_eq!(quorum_ttl(&[ms(900)], 0), None);
    }

    /// What a node that answered can say: nothing, or one of two tokens,
    /// with or without a value.
    fn sayings() -> Vec<NodeState> {
        let mut out = vec![empty()];
        for t in ["a", "b"] {
            out.push(lock(t));
            out.push(proclaimed(t, 1, 0, "v"));
        }
        out
    }

    #[test]
    fn a_verdict_is_what_every_answer_the_failed_nodes_could_have_given_agrees_on() {
        let said = sayings();
        let outcomes: Vec<NodeState> = said.iter().cloned().chain([failed()]).collect();
        for nodes in 1..=5 {
            for states in patterns(nodes, &outcomes) {
                let failed: Vec<usize> = (0..nodes)
                    .filter(|&i| matches!(states[i], NodeState::Failed(_)))
                    .collect();
                let mut truths = Vec::new();
                for hidden in patterns(failed.len(), &said) {
                    let mut whole = states.clone();
                    for (&i, state) in failed.iter().zip(hidden) {
                        whole[i] = state;
                    }
                    let truth = outcome(&whole).expect("every node answered");
                    if !truths.contains(&truth) {
                        truths.push(truth);
                    }
                }
                let expected = match truths.as_slice() {
                    [one] => one.clone(),
                    _ => (Verdict::Unknown, None),
                };
                // A holder is held whatever the failed nodes hold.
                let got = outcome(&states).expect("none pending");
                if got.0 == Verdict::Held {
                    assert!(truths.iter().all(|t| *t == got), "{states:?}");
                } else {
                    assert_eq!(got, expected, "{states:?}");
                }
            }
        }
    }

    #[test]
    fn once_decided_a_verdict_stands_whatever_the_pending_nodes_say() {
        let outcomes: Vec<NodeState> = sayings().into_iter().chain([failed()]).collect();
        let picks: Vec<NodeState> = outcomes
            .iter()
            .cloned()
            .chain([NodeState::Pending])
            .collect();
        for nodes in 1..=5 {
            for states in patterns(nodes, &picks) {
                let waiting: Vec<usize> = (0..nodes)
                    .filter(|&i| matches!(states[i], NodeState::Pending))
                    .collect();
                let Some(decided) = outcome(&states) else {
                    assert!(
                        !waiting.is_empty(),
                        "{states:?}: undecided with every answer in"
                    );
                    continue;
                };
                for fill in patterns(waiting.len(), &outcomes) {
                    let mut filled = states.clone();
                    for (&i, state) in waiting.iter().zip(fill) {
                        filled[i] = state;
                    }
                    assert_eq!(
                        outcome(&filled),
                        Some(decided.clone()),
                        "{states:?} then {filled:?}"
                    );
                }
            }
        }
    }
}
