//! The release of a lock on every node that may hold its token, and the
//! race of that release against the lock's requests still in flight
//! ([`InFlight`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::time::Instant;

use super::{Core, Holding, Round, fan_out, follow};
use crate::error::NodeError;
use crate::metrics;
use crate::node::{Deadline, Debt, Heard, Node, Op};
use crate::quorum::Rule;
use crate::round::calls::Requests;

/// A held lock's acquire requests that were still in flight when their
/// round decided, raced per node against the lock's release.
///
/// A release does not wait for them: it goes out at once, behind them on
/// the node's connection, and Redis runs one connection's calls in order,
/// so it runs after them and removes what they set. Where that order is
/// not certain (a cluster node's connection being set up — a standalone
/// node's keeps the order from its first request, see `node::ordered` —
/// a request sent again after its connection dropped, the group-commit
/// queue's ACL fallback), the two answers tell: a late grant that may have
/// landed after the release, which deleted nothing there, calls for the
/// release to go out once more on that node. A grant the release found
/// and deleted ran before it (`SET NX` never sets a deleted key again, so
/// the common case — a slow node's grant, then its release — costs no
/// second release). Neither answer waits for the other; whichever of a
/// node's two answers comes second decides, from both.
///
/// Requests that restore missing keys (extensions, renewals) may follow
/// any release, so they go by a plainer rule: see
/// `LockState::restored_late`.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// Per node: the bits below.
    nodes: Box<[AtomicU8]>,
}

/// The node's request (of an [`InFlight`]) has answered…
const ANSWERED: u8 = 1;
/// …that it holds the token;
const YES: u8 = 2;
/// the lock's release has answered on the node…
const RELEASED: u8 = 4;
/// …that it deleted the token.
const DELETED: u8 = 8;

impl InFlight {
    /// The acquire's requests still in flight to the nodes `in_flight`, out
    /// of `nodes`.
    pub(crate) fn new(nodes: usize, in_flight: &[usize]) -> Self {
        let nodes: Box<[AtomicU8]> = (0..nodes)
            .map(|node| {
                AtomicU8::new(if in_flight.contains(&node) {
                    0
                } else {
                    ANSWERED
                })
            })
            .collect();
        Self { nodes }
    }

    /// Whether `node`'s request has not answered yet.
    pub(crate) fn pending(&self, node: usize) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|slot| slot.load(Ordering::Acquire) & ANSWERED == 0)
    }

    /// `node`'s request answered (`yes`: the node holds the token). Returns
    /// whether the lock's release must go out on that node again.
    pub(crate) fn answered(&self, node: usize, yes: bool) -> bool {
        let Some(slot) = self.nodes.get(node) else {
            return false;
        };
        let before = slot.fetch_or(ANSWERED | if yes { YES } else { 0 }, Ordering::AcqRel);
        before & RELEASED != 0 && again(yes, before & DELETED != 0)
    }

    /// The lock's release answered on `node` (`deleted`: it deleted the
    /// token there), having been sent while the node's request was
    /// [`pending`](Self::pending). Returns whether the release must go out
    /// on that node again.
    pub(crate) fn released(&self, node: usize, deleted: bool) -> bool {
        let Some(slot) = self.nodes.get(node) else {
            return false;
        };
        let before = slot.fetch_or(
            RELEASED | if deleted { DELETED } else { 0 },
            Ordering::AcqRel,
        );
        before & ANSWERED != 0 && again(before & YES != 0, deleted)
    }
}

/// With both answers: whether the grant may have set the key after the
/// release ran. One the release found deleted ran before it; one it did
/// not find may have come after.
fn again(yes: bool, deleted: bool) -> bool {
    yes && !deleted
}

/// What a lock's release asks of the nodes: a held lock's [`LockState`] or
/// a failed attempt's [`Holding`], shared by every node's request.
///
/// [`LockState`]: crate::holding::lease::LockState
pub(crate) trait OnNodes: Send + Sync + 'static {
    fn holding(&self) -> &Holding;

    /// Called just before the release is handed to node `node` (a held
    /// lock's late restores heard since call for it again there).
    fn sending_release(&self, _node: usize) {}
}

impl OnNodes for Holding {
    fn holding(&self) -> &Holding {
        self
    }
}

/// The token-checked release of `lock` on node `node`, owned, so that it
/// can be followed after its caller returned. It goes with whatever else
/// is bound for the node meanwhile where it can: a one-key lock's always,
/// another shape's as its release script's call where the node's batches
/// carry it (see [`Lanes::send_or`](crate::node::Lanes::send_or)).
///
/// A release sent again after its connection dropped (a node restarting,
/// a network cut) may find the token gone because its first sending
/// deleted it: "not held there" is then unknown, and the answer is
/// [`NodeError::ReleaseResent`] — neither a deletion nor a sign of loss.
/// Whether this request went out twice is read from the node's count of
/// requests sent again, before and after: another request's resend
/// meanwhile makes the answer unknown too, which only ever costs a "no".
async fn release_request<L: OnNodes>(
    core: Arc<Core>,
    lock: Arc<L>,
    node: usize,
    announce: Option<Arc<str>>,
    deadline: Deadline,
) -> Result<bool, NodeError> {
    let holding = lock.holding();
    let op = Op::Release {
        announce: announce.clone(),
    };
    let alone = async || {
        let (keys, shape, token) = (&holding.keys, &*holding.shape, holding.token.as_str());
        let target = core.node(node)?;
        target
            .release(keys, shape, token, announce.as_deref(), deadline)
            .await
    };
    let resends = || core.node(node).map(Node::resent).ok();
    let before = resends();
    lock.sending_release(node);
    let mut owing = Owing {
        core: &core,
        node,
        holding,
        answered: false,
    };
    let deleted = core
        .lanes()
        .send_or(node, op, holding.on_node(), deadline, alone)
        .await;
    owing.answered = Heard::of(&deleted) == Heard::Answer;
    // A request sent twice (its connection dropped) that found the token
    // gone tells nothing: its first sending may have deleted it.
    match deleted {
        Ok(false) if resends() != before => Err(NodeError::ReleaseResent),
        deleted => deleted,
    }
}

/// A release on its way to a node, which the node is owed (see
/// `node::owed`) unless it answers: dropped before an answer (timed out and
/// dropped by its follower, or lost with its runtime) or ended without one
/// (not asked, the connection failed), the release is kept for the node,
/// to be delivered before it is asked anything again.
struct Owing<'a> {
    core: &'a Core,
    node: usize,
    holding: &'a Holding,
    answered: bool,
}

impl Drop for Owing<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if let Ok(node) = self.core.node(self.node) {
            node.owe(Debt {
                keys: self.holding.keys.clone(),
                token: self.holding.token.clone(),
                shape: self.holding.shape.clone(),
            });
        }
    }
}

/// Token-checked release of `lock` on every node, decided at a quorum:
/// returns as soon as a quorum deleted the token, or as soon as that has
/// become impossible, with the requests still in flight for the caller to
/// [`follow`]. Each request is bounded by the node timeout.
pub(crate) async fn release<L: OnNodes>(
    core: &Arc<Core>,
    lock: &Arc<L>,
) -> (
    Round,
    Requests<impl Future<Output = Result<bool, NodeError>> + Send + 'static + use<L>>,
) {
    let deadline = core.timeout_from(Instant::now());
    let announce: Option<Arc<str>> = core.announces().then(|| release_id().into());
    fan_out(
        core.nodes(),
        Rule::Release,
        "release",
        deadline,
        |i, _, deadline| release_request(core.clone(), lock.clone(), i, announce.clone(), deadline),
    )
    .await
}

/// Token-checked release of `lock` on every node but those `skip` marks,
/// followed entirely in the background: the caller waits for no node. The
/// requests are handed to the nodes' connections before this returns, so
/// whatever the caller sends those nodes next goes out behind them.
pub(crate) fn release_in_background<L: OnNodes>(
    core: &Arc<Core>,
    lock: Arc<L>,
    skip: Option<&[bool]>,
) {
    if tokio::runtime::Handle::try_current().is_err() {
        // Nothing can send them: the keys expire by ttl.
        return;
    }
    let deadline = core.timeout_from(Instant::now());
    let shared = Deadline::timed_by_caller(deadline);
    let announce: Option<Arc<str>> = core.announces().then(|| release_id().into());
    let skipped = |i: usize| skip.and_then(|s| s.get(i).copied()).unwrap_or(false);
    let requests = (0..core.len()).filter(|&i| !skipped(i)).map(|i| {
        let request = release_request(core.clone(), lock.clone(), i, announce.clone(), shared);
        (i, Box::pin(request))
    });
    let stragglers = Requests::new(requests, Some(shared));
    follow(core, "release", stragglers, |_, _| {});
}

/// Sends `lock`'s release to node `node` once more, in the background: a
/// late answer says the lock's key may have been set there after the
/// release ran (see [`InFlight`]).
pub(crate) fn release_again<L: OnNodes>(core: &Arc<Core>, lock: &Arc<L>, node: usize) {
    metrics::released_again();
    tracing::debug!(
        node = %core.label(node),
        "a late grant or restore may have landed after the release: releasing there again"
    );
    // Followed by the node's follower, as any request nobody waits for:
    // a node flapping between answers and silence can call for many.
    let deadline = core.timeout_from(Instant::now());
    let shared = Deadline::timed_by_caller(deadline);
    let request = release_request(core.clone(), lock.clone(), node, None, shared);
    let requests = Requests::new([(node, Box::pin(request))], Some(shared));
    follow(core, "release", requests, |_, _| {});
}

/// What a release announces: a random id, so that the waiters can tell one
/// release announced by several nodes from several releases.
fn release_id() -> String {
    // Never 0, which stands for "no id".
    format!("{:016x}", rand::random::<u64>().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one node's request costs before it is sent: its future is
    /// boxed (moved whole) for every node of every call, so a rare path
    /// held inline — learning a node's commands, a request that goes
    /// alone — made each lock cycle copy 37 KB (15 KB per acquire, 22 KB
    /// per release), which was half of the client's instructions. The
    /// lone path held inline made it 2.6 KB, and 256 tasks on five nodes
    /// ran about 15 % slower for it. Under 1000 bytes, the box is also
    /// one of glibc's small blocks (its per-thread cache takes up to 1,032
    /// bytes, but a block of 1,009 or more beyond what that cache holds is
    /// a large one, served after merging freed small blocks).
    #[tokio::test]
    async fn a_node_requests_future_stays_small() {
        const AT_MOST: usize = 1000;
        let core = Arc::new(Core::new(
            crate::round::tests::nodes(3),
            std::time::Duration::from_secs(1),
            0.01,
            true,
        ));
        let holding = Arc::new(Holding {
            keys: Arc::new(["r".into()]),
            token: crate::token::Token::generate().expect("random source"),
            shape: crate::contract::ShapeRef::LOCK,
        });
        let deadline = Deadline::from(Instant::now());
        let release = release_request(core.clone(), holding, 0, Some("id".into()), deadline);
        let size = std::mem::size_of_val(&release);
        assert!(size <= AT_MOST, "a release request's future: {size} bytes");
    }

    /// Node 1's request is in flight (of three nodes).
    fn racing() -> InFlight {
        let requests = InFlight::new(3, &[1]);
        assert!(requests.pending(1));
        assert!(!requests.pending(0) && !requests.pending(2));
        requests
    }

    #[test]
    fn a_grant_the_release_deleted_ran_before_it() {
        // In order on the connection: the grant, then the release that
        // deletes it — whichever answer is handled first.
        let requests = racing();
        assert!(!requests.answered(1, true));
        assert!(!requests.released(1, true));
        let requests = racing();
        assert!(!requests.released(1, true));
        assert!(!requests.answered(1, true));
    }

    #[test]
    fn a_grant_the_release_did_not_find_is_released_again() {
        // The release overtook the grant (found nothing), or failed: the
        // grant may have landed after it. Whichever answer comes second
        // says so, once.
        let requests = racing();
        assert!(!requests.released(1, false));
        assert!(requests.answered(1, true));
        let requests = racing();
        assert!(!requests.answered(1, true));
        assert!(requests.released(1, false));
    }

    #[test]
    fn a_refused_or_failed_request_needs_nothing_more() {
        for deleted in [true, false] {
            let requests = racing();
            assert!(!requests.released(1, deleted));
            assert!(!requests.answered(1, false));
            let requests = racing();
            assert!(!requests.answered(1, false));
            assert!(!requests.released(1, deleted));
        }
    }

    #[test]
    fn nodes_not_in_flight_never_race() {
        let requests = racing();
        for node in [0, 2, 7] {
            assert!(!requests.released(node, false));
            assert!(!requests.released(node, true));
        }
    }
}
