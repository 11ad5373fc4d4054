//! One attempt to acquire, for every primitive: a primitive describes its
//! acquisition ([`Acquire`]), and [`attempt`] fans it out, decides it,
//! completes it and either grants it or cleans up after it.

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Core, Holding, Round, fan_out_with, release_in_background};
use crate::contract::ShapeRef;
use crate::error::{Error, NodeError};
use crate::node::{Deadline, Node};
use crate::quorum::{Answer, Decision, Rule, Window};
use crate::request::Target;
use crate::round::calls::Requests;
use crate::token::Token;

/// One primitive's acquisition, as [`attempt`] runs it: what each node is
/// asked, how its answer votes, and what a grant still needs once a quorum
/// said yes.
pub(crate) trait Acquire: Sync {
    /// A node's answer to the request.
    type Answer: Answer + Send + 'static;

    /// What it is for: its resource (for errors and logs), the keys a
    /// grant holds (and a failed attempt releases), the requested ttl.
    fn target(&self) -> &Target;

    /// What a grant is on the nodes beyond its keys: how a node extends
    /// and releases it (see [`Shape`](crate::contract::Shape)). The engine has
    /// no default: every primitive says, the lock too.
    fn shape(&self) -> ShapeRef;

    /// What the cleanup after a failed attempt releases: the grant's
    /// [`shape`](Self::shape) unless said otherwise. A waiting writer's
    /// says otherwise: its call still waits, so the mark it keeps on the
    /// nodes stays (a cancelled attempt's cleanup takes the mark too).
    fn failed_shape(&self) -> ShapeRef {
        self.shape()
    }

    /// When the round is decided: at a quorum's yes or once one is
    /// impossible, unless said otherwise.
    fn rule(&self) -> Rule {
        Rule::Quorum
    }

    /// One node's request in the attempt (see [`NodeCall`]).
    fn call(
        &self,
        call: NodeCall,
    ) -> impl Future<Output = Result<Self::Answer, NodeError>> + Send + 'static + use<Self>;

    /// After a quorum said yes (with validity left): whatever the grant
    /// still needs, within `window` — the fence write-back of a fenced
    /// lock. Returns the shape the grant holds if it is not
    /// [`shape`](Self::shape)'s (a fenced lock's carries its counter and
    /// fence): nothing to do and the same shape unless said otherwise.
    fn complete(
        &self,
        core: &Arc<Core>,
        round: &Round<Self::Answer>,
        window: &Window,
    ) -> impl Future<Output = Result<Option<ShapeRef>, Error>> + Send {
        let _ = (core, round, window);
        async { Ok(None) }
    }
}

/// Node `node`'s request in the attempt with `token`, owned: a request
/// still in flight at the decision is followed, past the attempt.
pub(crate) struct NodeCall {
    pub(crate) core: Arc<Core>,
    /// The node's index.
    pub(crate) node: usize,
    pub(crate) token: Token,
    pub(crate) deadline: Deadline,
}

impl NodeCall {
    /// The node asked.
    pub(crate) fn server(&self) -> Result<&Node, NodeError> {
        self.core.node(self.node)
    }
}

/// A successful attempt: what is now held, its window, and the round that
/// granted it with the requests still in flight.
pub(crate) struct Grant<T, F> {
    pub(crate) holding: Holding,
    pub(crate) window: Window,
    pub(crate) round: Round<T>,
    pub(crate) stragglers: Requests<F>,
}

/// One attempt: fan out, decide, complete, and either grant or clean up.
///
/// A failed (or cancelled) attempt removes its token from every node that
/// may hold it, in the background: its requests are on their way to the
/// nodes when this returns, ahead of whatever the caller sends next.
pub(crate) async fn attempt<A: Acquire>(
    core: &Arc<Core>,
    acquire: &A,
) -> Result<
    Grant<A::Answer, impl Future<Output = Result<A::Answer, NodeError>> + Send + 'static>,
    Error,
> {
    let start = Instant::now();
    let token = Token::generate()?;
    let window = core.window(start, acquire.target().ttl);
    // Armed until the attempt ends: if this future is dropped mid-flight,
    // the token is removed from every node in the background.
    let cleanup = Cleanup {
        core: Some(core.clone()),
        lock: holding(acquire, token.clone(), None),
        failed: acquire.failed_shape(),
    };
    let (round, stragglers) = ask(core, acquire, &token, start, &window).await;
    // Only a failed round needs it (see `Cleanup::run`).
    let refused = round.refused_unless_reached();
    match confirm(core, acquire, round, &window, start).await {
        Ok((round, shape)) => {
            cleanup.disarm();
            Ok(Grant {
                holding: holding(acquire, token, shape),
                window,
                round,
                stragglers,
            })
        }
        Err(error) => {
            tracing::debug!(error = %error, "attempt failed, cleaning up");
            cleanup.run(refused, stragglers);
            Err(error)
        }
    }
}

/// Asks every node for the acquisition with `token` until the round is
/// decided, never waiting for a node past the point where no validity
/// would be left. Returns the round, with the requests still in flight.
async fn ask<A: Acquire>(
    core: &Arc<Core>,
    acquire: &A,
    token: &Token,
    start: Instant,
    window: &Window,
) -> (
    Round<A::Answer>,
    Requests<impl Future<Output = Result<A::Answer, NodeError>> + Send + 'static + use<A>>,
) {
    let deadline = core.timeout_within(start, window.deadline());
    let nodes = core.nodes();
    fan_out_with(
        nodes,
        "acquire",
        deadline,
        Round::acquiring(nodes.len(), acquire.rule()),
        |node, _, deadline| {
            acquire.call(NodeCall {
                core: core.clone(),
                node,
                token: token.clone(),
                deadline,
            })
        },
    )
    .await
}

/// Whether the round grants: a quorum said yes with validity left, the
/// acquisition [completed](Acquire::complete) what the grant still needs,
/// and validity is still left after that. Returns the round and the
/// grant's shape, if completing it gave one.
async fn confirm<A: Acquire>(
    core: &Arc<Core>,
    acquire: &A,
    round: Round<A::Answer>,
    window: &Window,
    start: Instant,
) -> Result<(Round<A::Answer>, Option<ShapeRef>), Error> {
    let target = acquire.target();
    let round = granted(target, round, window, start)?;
    let shape = acquire.complete(core, &round, window).await?;
    // Checked again: completing took time out of the validity.
    match window.validity_at(Instant::now()) {
        Some(_) => Ok((round, shape)),
        None => Err(validity_expired(target, start)),
    }
}

/// Whether a round grants the lock: a quorum said yes and validity is
/// left, measured from the attempt's start.
fn granted<T: Answer>(
    target: &Target,
    round: Round<T>,
    window: &Window,
    start: Instant,
) -> Result<Round<T>, Error> {
    if round.decision != Decision::Reached {
        return Err(round.failure(&target.resource));
    }
    match window.validity_at(Instant::now()) {
        Some(validity) => {
            tracing::debug!(granted = round.tally.yes(), ?validity, "quorum reached");
            Ok(round)
        }
        None => Err(validity_expired(target, start)),
    }
}

fn validity_expired(target: &Target, start: Instant) -> Error {
    Error::ValidityExpired {
        resource: target.resource.to_string(),
        elapsed: start.elapsed(),
        ttl: target.ttl.duration(),
    }
}

/// What the attempt with `token` holds once granted (and may hold on a
/// node until it is cleaned up): of `shape` if completing it gave one.
fn holding<A: Acquire>(acquire: &A, token: Token, shape: Option<ShapeRef>) -> Holding {
    Holding {
        keys: acquire.target().keys.clone(),
        token,
        shape: shape.unwrap_or_else(|| acquire.shape()),
    }
}

/// Removes an attempt's token from the nodes, even if the attempt's future
/// is dropped halfway.
struct Cleanup {
    /// `None` once disarmed.
    core: Option<Arc<Core>>,
    /// What a cancelled attempt releases.
    lock: Holding,
    /// What a failed one releases (see [`Acquire::failed_shape`]).
    failed: ShapeRef,
}

impl Cleanup {
    /// The attempt succeeded: the guard now owns the token.
    fn disarm(mut self) {
        self.core = None;
    }

    /// The attempt failed: releases on every node except the ones `skip`
    /// marks, in the background: neither the caller's error nor its next
    /// attempt waits for a node (the next attempt's requests go out behind
    /// these). A node that answered "no" certainly did not store our token,
    /// and nothing else will: `skip` marks those. Every other node —
    /// granted, failed, timed out or never heard from — may hold it.
    fn run<F>(mut self, skip: Option<Vec<bool>>, stragglers: Requests<F>) {
        // Not followed: the cleanup releases those nodes anyway. Dropped
        // first, since a node's lone request holds its queue (see
        // `node/group/`) until it is polled to its answer or dropped, and
        // the cleanup's release may be queued behind it.
        drop(stragglers);
        let Some(core) = self.core.take() else {
            return;
        };
        if skip
            .as_ref()
            .is_some_and(|s| s.iter().all(|&refused| refused))
        {
            return;
        }
        let lock = Arc::new(Holding {
            shape: self.failed.clone(),
            ..self.lock.clone()
        });
        release_in_background(&core, lock, skip.as_deref());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(core) = self.core.take() else {
            return;
        };
        // Cancelled mid-attempt: we do not know which nodes refused, so
        // release everywhere. Without a runtime the keys expire by ttl.
        release_in_background(&core, Arc::new(self.lock.clone()), None);
    }
}
