//! A counting semaphore over the quorum: [`Semaphore`], at most `L`
//! holders at once across the fleet. A thin entry point: permit `i` is a
//! Redlock mutex on its own key (a description on the round engine,
//! [`SlotAttempt`]), so holding, extending and releasing a permit are the
//! lock's, with the permit's own scripts. Each of its requests goes
//! through the node's lane (`node::Lanes::call_or`, and for releases and
//! extensions `send_or`): in a pipeline with the node's other requests
//! where the node's batches are pipelines, else alone.
//!
//! The whole primitive is in this folder: here its public API and its
//! description on the engine; in `node.rs` what it asks a node (the
//! acquire, and the permit's [`Shape`](crate::contract::Shape) for extending
//! and releasing it) and how the replies read; its scripts beside them
//! (`acquire.lua`, `extend.lua`, `release.lua`); and in `inspect.rs` what
//! [`Redlock::inspect`] reads of it.

pub(crate) mod inspect;
mod keys;
pub(crate) mod node;

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::RngExt;

use crate::contract::Primitive;
use crate::error::{ArgumentError, Error, NodeError};
use futures::FutureExt;

use self::keys::{PERMIT_INFIX, PERMITS_SUFFIX};
use crate::acquire::call::{Acquisition, Attempts, Manager};
use crate::contract::ShapeRef;
use crate::holding::guard::LockGuard;
use crate::holding::lease::Lease;
use crate::quorum::{Answer, Vote};
use crate::redlock::Redlock;
use crate::request::{Keys, Target, Ttl};
use crate::round::{Acquire, NodeCall};

/// The semaphore in the list of primitives.
pub(crate) static PRIMITIVE: Primitive = Primitive {
    name: "semaphore",
    scripts: &[&node::ACQUIRE, &node::EXTEND, &node::RELEASE],
    keys: &[PERMITS_SUFFIX, PERMIT_INFIX],
    kind: crate::contract::stored::ResourceKind::Semaphore,
    reads: &inspect::PermitReads {
        most: Semaphore::MAX_PERMITS,
    },
    reads_only: None,
};

use self::node::{PermitReply, Permits, acquire_permit, permit_reply, prepare_permit};

/// How many permits one attempt tries in a row, each one a majority of
/// nodes reported free, before it counts as contended.
const PERMIT_TRIES: usize = 3;

impl Redlock {
    /// The semaphore called `name` with `permits` permits, on this
    /// manager's nodes: see [`Semaphore`]. No I/O; the arguments are
    /// checked by the calls that use them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn call_partner_api() {}
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// // At most 10 calls to the partner's API at once, fleet-wide.
    /// let partner = locks.semaphore("partner-api", 10);
    /// let permit = partner.acquire(Duration::from_secs(30)).await?;
    /// call_partner_api().await;
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        let start = if permits > 0 {
            rand::rng().random_range(0..permits)
        } else {
            0
        };
        Semaphore {
            locks: self.clone(),
            name: name.into(),
            permits,
            next: Arc::new(AtomicU32::new(start)),
        }
    }
}

/// A counting semaphore among the clients of the same nodes: at most
/// `permits` holders at once, each holding a **permit** as long as it holds
/// a lock (with a ttl, extended, auto-extended, released; a [`Permit`]).
///
/// # How it works, and why at most `permits` hold one
///
/// Permit `i` (`0 ≤ i < permits`) is a Redlock mutex on its own key,
/// `<key>:permit:<i>` (`<key>` is the name with the manager's prefix).
/// Acquiring a permit is acquiring one of those locks: an attempt asks
/// every node for one slot; a node that has it taken answers with the slots
/// it sees free, and the attempt moves on to a slot that a majority of
/// nodes reported free. A holder of a permit is the holder of one of
/// `permits` mutexes, so under the lock's assumptions (clocks that drift
/// apart by less than the drift allowance, a process not paused between
/// checking and acting, nodes that keep their keys or stay down for a ttl)
/// at most `permits` hold a permit at any moment: exactly the lock's
/// guarantee, once per slot.
///
/// Counting holders per node and granting on a majority would **not** do:
/// with 3 nodes and 2 permits, A admitted on nodes {1, 2}, B on {2, 3} and
/// C on {1, 3} each hold a majority, while no node ever admits more than
/// 2. The protocol model in `tests/model` finds that counterexample, and
/// checks the slot design.
///
/// # Callers must agree on the count
///
/// Beside the slots, each node keeps the semaphore's count in its limit
/// key (`<key>:permits`) for as long as a permit is held there. A node
/// refuses a caller whose count differs, and a caller that finds another
/// count and cannot get a permit gets [`Error::PermitsMismatch`]. Any two
/// majorities share a node, so while a holder of one count lives, no
/// caller of another count can assemble a majority: all holders at any
/// moment use one count, and at most that many hold. To change a
/// semaphore's count, let every holder of the old count finish (or use a
/// new name).
///
/// # Redis Cluster
///
/// All keys of one semaphore must share a hash slot: use a hash-tagged
/// name such as `{partner-api}`. Others are refused before any I/O.
///
/// # Cost
///
/// Each acquire and release passes every slot key to each node, so they
/// cost O(permits) on the nodes (bounded by [`Semaphore::MAX_PERMITS`]); extending a
/// permit costs what extending a lock does.
#[derive(Debug, Clone)]
pub struct Semaphore {
    locks: Redlock,
    name: Arc<str>,
    permits: u32,
    /// The slot this handle tries first: one past the last granted, or the
    /// last a majority reported free.
    next: Arc<AtomicU32>,
}

impl Semaphore {
    /// The largest permit count of a semaphore: every acquire passes each
    /// permit's key to each node.
    pub const MAX_PERMITS: u32 = 1024;

    /// The semaphore's name (its key, before the manager's prefix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits the semaphore has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes a permit, retrying with the manager's [retry
    /// policy](crate::Retry) while every permit is held (and, with
    /// [`WakeOnRelease`](crate::WakeOnRelease) on, waking early when one is
    /// released). The guard's [`resource`](Lease::resource) is the
    /// semaphore's name.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidArgument`]: an empty name, no permits, more than
    ///   [`Semaphore::MAX_PERMITS`], a ttl the lock would refuse, or on a Redis
    ///   Cluster a name without a hash tag.
    /// - [`Error::PermitsMismatch`]: the semaphore is held with another
    ///   count (not retried).
    /// - As [`Redlock::lock`]: [`Error::Contended`] (every permit held),
    ///   [`Error::Unavailable`], [`Error::ValidityExpired`],
    ///   [`Error::WaitTimeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Redlock::lock`] is: a dropped attempt's permit is
    /// removed from every node in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let reindex = locks.semaphore("reindex-jobs", 3);
    /// let permit = reindex.acquire(Duration::from_secs(60)).await?;
    /// permit.auto_extend();
    /// // … reindex, while at most two other jobs do …
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<Permit, Error>> + Send + use<> {
        self.acquiring(ttl, Attempts::PerPolicy, "acquire")
    }

    /// Makes one attempt to take a permit: [`Error::Contended`] at once
    /// when every permit is held.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), without the wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// match locks.semaphore("partner-api", 10).try_acquire(Duration::from_secs(30)).await {
    ///     Ok(permit) => { /* call the API */ permit.release().await?; }
    ///     Err(quorumlock::Error::Contended { .. }) => { /* all 10 in use: shed load */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<Permit, Error>> + Send + use<> {
        self.acquiring(ttl, Attempts::Once, "try_acquire")
    }

    /// Runs `work` while holding a permit: acquires (with the retry
    /// policy), keeps the permit alive with [`Permit::auto_extend`],
    /// runs the future `work` builds, and releases when it completes — as
    /// [`Redlock::with_lock`] does for a lock.
    ///
    /// # Errors
    ///
    /// Those of [`acquire`](Self::acquire), and [`Error::Lost`] when the
    /// permit was lost before `work` completed (`work` is then dropped).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if its future is dropped, `work` is dropped and the
    /// permit is released in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn fetch(url: &str) -> usize { url.len() }
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let partner = locks.semaphore("partner-api", 10);
    /// let bytes = partner
    ///     .with_permit(Duration::from_secs(30), |_lease| fetch("https://partner.example/feed"))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_permit<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let permit = self.acquire(ttl).await?;
        self.locks.hold_while(permit.into(), work).await
    }

    /// [`acquire`](Self::acquire) and [`try_acquire`](Self::try_acquire):
    /// the attempts `attempts` allows, named `op` in the tracing span.
    fn acquiring(
        &self,
        ttl: Duration,
        attempts: Attempts,
        op: &'static str,
    ) -> impl Future<Output = Result<Permit, Error>> + Send + use<> {
        let request = self.request(ttl).map(|request| Acquiring {
            semaphore: self.clone(),
            request,
        });
        self.locks
            .acquire(request, attempts, op)
            .map(|held| held.map(Permit::new))
    }

    /// Validates the semaphore and `ttl` into a request. No I/O.
    fn request(&self, ttl: Duration) -> Result<Arc<PermitRequest>, Error> {
        if self.permits == 0 {
            return Err(ArgumentError::NoPermits.into());
        }
        if self.permits > Self::MAX_PERMITS {
            return Err(ArgumentError::TooManyPermits {
                permits: self.permits,
                max: Self::MAX_PERMITS,
            }
            .into());
        }
        let limits = self.locks.limits();
        let key = limits.key(&self.name)?;
        let ttl = Ttl::new(ttl, limits.drift_factor)?;
        let slots: Keys = (0..self.permits)
            .map(|i| Arc::from(format!("{key}{PERMIT_INFIX}{i}")))
            .collect();
        let limit_key: Arc<str> = Arc::from(format!("{key}{PERMITS_SUFFIX}"));
        let mut keys: Vec<&str> = slots.iter().map(|k| &**k).collect();
        keys.push(&limit_key);
        limits.one_slot(&keys)?;
        Ok(Arc::new(PermitRequest {
            name: self.name.clone(),
            permits: Arc::new(Permits {
                limit_key,
                slots,
                count: self.permits.to_string().into(),
            }),
            count: self.permits,
            ttl,
        }))
    }

    /// One attempt: up to [`PERMIT_TRIES`] slots, each the next one a
    /// majority of nodes reported free.
    async fn attempt(&self, request: &Arc<PermitRequest>) -> Result<LockGuard, Error> {
        let nodes = self.locks.nodes().len();
        let quorum = self.locks.quorum();
        let mut slot = self.next.load(Ordering::Relaxed) % request.count;
        let mut tries = 0;
        loop {
            tries += 1;
            let attempt = SlotAttempt::new(request, slot, nodes);
            let error = match self.locks.manager().attempt(&attempt).await {
                Ok(guard) => {
                    tracing::debug!(slot, "permit granted");
                    self.next
                        .store((slot + 1) % request.count, Ordering::Relaxed);
                    return Ok(guard);
                }
                Err(error) => error,
            };
            let reports = attempt.reports();
            if let Some(mismatch) = mismatch(request, &reports) {
                return Err(mismatch);
            }
            if !matches!(error, Error::Contended { .. }) {
                return Err(error);
            }
            let Some(free) = most_reported_free(&reports, request.count, quorum) else {
                return Err(error);
            };
            self.next.store(free, Ordering::Relaxed);
            if tries >= PERMIT_TRIES {
                return Err(error);
            }
            tracing::debug!(slot, next = free, "permit taken, trying one reported free");
            slot = free;
        }
    }
}

/// A call of [`Semaphore::acquire`] or [`Semaphore::try_acquire`]: the
/// validated request, and the handle whose next slot the attempts try.
struct Acquiring {
    semaphore: Semaphore,
    request: Arc<PermitRequest>,
}

impl Acquisition for Acquiring {
    type Guard = LockGuard;

    fn resource(&self) -> &str {
        &self.request.name
    }

    fn wake_keys(&self) -> Keys {
        self.request.permits.slots.clone()
    }

    fn span(&self, op: &'static str) -> tracing::Span {
        span(&self.request, op)
    }

    fn attempt(
        &self,
        _manager: &Arc<Manager>,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send {
        self.semaphore.attempt(&self.request)
    }
}

fn span(request: &PermitRequest, op: &'static str) -> tracing::Span {
    tracing::debug_span!(
        "quorumlock",
        op,
        semaphore = %request.name,
        permits = request.count,
        ttl_ms = request.ttl.ms()
    )
}

/// [`Error::PermitsMismatch`], if nodes answered with another count.
fn mismatch(request: &PermitRequest, reports: &[Option<PermitReply>]) -> Option<Error> {
    let mut theirs = reports.iter().filter_map(|report| match report {
        Some(PermitReply::OtherCount(count)) => Some(count),
        _ => None,
    });
    let first = theirs.next()?;
    Some(Error::PermitsMismatch {
        semaphore: request.name.to_string(),
        ours: request.count,
        theirs: first.clone(),
        nodes: 1 + theirs.count(),
    })
}

/// The slot most nodes reported free, if at least `quorum` did; ties go to
/// a random one of them.
fn most_reported_free(reports: &[Option<PermitReply>], permits: u32, quorum: usize) -> Option<u32> {
    let mut votes = vec![0usize; usize::try_from(permits).unwrap_or(0)];
    for report in reports {
        if let Some(PermitReply::Taken(free)) = report {
            for &slot in free {
                if let Some(count) = usize::try_from(slot).ok().and_then(|s| votes.get_mut(s)) {
                    *count += 1;
                }
            }
        }
    }
    let best = votes.iter().copied().max().filter(|&n| n >= quorum)?;
    let ties: Vec<u32> = (0..permits)
        .zip(&votes)
        .filter(|&(_, &n)| n == best)
        .map(|(slot, _)| slot)
        .collect();
    let pick = rand::rng().random_range(0..ties.len());
    ties.get(pick).copied()
}

/// A validated permit request.
#[derive(Debug)]
struct PermitRequest {
    name: Arc<str>,
    permits: Arc<Permits>,
    count: u32,
    ttl: Ttl,
}

/// A node's vote on one slot (the detail goes to the attempt's reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotVote {
    Granted,
    Refused,
}

impl Answer for SlotVote {
    fn vote(&self) -> Vote {
        match self {
            SlotVote::Granted => Vote::Yes,
            SlotVote::Refused => Vote::No,
        }
    }
}

/// One attempt at one permit slot: a lock on the slot's key, with the
/// semaphore's limit key beside it (the [`Permits`] shape).
struct SlotAttempt {
    request: Arc<PermitRequest>,
    slot: u32,
    /// The semaphore's name, the slot's key, the ttl.
    target: Target,
    /// What each node answered, for choosing the next slot.
    reports: Arc<Mutex<Vec<Option<PermitReply>>>>,
}

impl SlotAttempt {
    fn new(request: &Arc<PermitRequest>, slot: u32, nodes: usize) -> Self {
        let key = usize::try_from(slot)
            .ok()
            .and_then(|s| request.permits.slots.get(s))
            .cloned()
            .unwrap_or_else(|| request.permits.limit_key.clone());
        Self {
            request: request.clone(),
            slot,
            target: Target {
                resource: request.name.clone(),
                keys: Arc::from([key]),
                ttl: request.ttl,
            },
            reports: Arc::new(Mutex::new(vec![None; nodes])),
        }
    }

    fn reports(&self) -> MutexGuard<'_, Vec<Option<PermitReply>>> {
        self.reports.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Acquire for SlotAttempt {
    type Answer = SlotVote;

    fn target(&self) -> &Target {
        &self.target
    }

    fn shape(&self) -> ShapeRef {
        self.request.permits.clone().into()
    }

    fn call(
        &self,
        call: NodeCall,
    ) -> impl Future<Output = Result<SlotVote, NodeError>> + Send + 'static + use<> {
        let (permits, slot, ttl) = (self.request.permits.clone(), self.slot, self.target.ttl);
        let reports = self.reports.clone();
        async move {
            let (server, token) = (call.server()?, &call.token);
            let deadline = call.deadline;
            // With whatever else is bound for the node meanwhile, where
            // the node's batches carry it (see `Lanes::call_or`).
            let prepare = || prepare_permit(&permits, slot, token, ttl);
            let alone = async || {
                acquire_permit(server, &permits, slot, token.as_str(), ttl, deadline).await
            };
            let lanes = call.core.lanes();
            let reply = lanes
                .call_or(call.node, deadline, prepare, permit_reply, alone)
                .await?;
            let vote = match reply {
                PermitReply::Granted => SlotVote::Granted,
                _ => SlotVote::Refused,
            };
            let mut reports = reports.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(report) = reports.get_mut(call.node) {
                *report = Some(reply);
            }
            Ok(vote)
        }
    }
}

crate::holding::guard::typed_guard!(
    /// A permit of a [`Semaphore`](crate::Semaphore), from
    /// [`acquire`](crate::Semaphore::acquire) or
    /// [`try_acquire`](crate::Semaphore::try_acquire). Its
    /// [`resource`](Self::resource) is the semaphore's name.
    Permit,
    "permit"
);

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(free: &[u32]) -> Option<PermitReply> {
        Some(PermitReply::Taken(free.to_vec()))
    }

    #[test]
    fn the_next_slot_is_one_a_majority_reported_free() {
        // Slot 3 is free on nodes 0, 1 and 3; slot 1 only on node 2.
        let reports = [taken(&[3]), taken(&[3, 4]), taken(&[1]), taken(&[3]), None];
        assert_eq!(most_reported_free(&reports, 5, 3), Some(3));
        // Without a majority for any slot, none is worth trying.
        assert_eq!(most_reported_free(&reports, 5, 4), None);
        // Nothing reported free, or nothing reported.
        assert_eq!(most_reported_free(&[taken(&[]), None], 5, 1), None);
        // Slots out of range (a node of another count) are ignored.
        assert_eq!(most_reported_free(&[taken(&[9])], 5, 1), None);
    }

    #[test]
    fn ties_go_to_any_of_the_best_slots() {
        let reports = [taken(&[0, 2]), taken(&[0, 2]), taken(&[1])];
        for _ in 0..50 {
            let slot = most_reported_free(&reports, 3, 2);
            assert!(matches!(slot, Some(0 | 2)), "{slot:?}");
        }
    }

    #[test]
    fn another_count_on_any_node_is_a_mismatch() {
        let request = PermitRequest {
            name: "s".into(),
            permits: Arc::new(Permits {
                limit_key: "s:permits".into(),
                slots: Arc::from([Arc::from("s:permit:0")]),
                count: "1".into(),
            }),
            count: 1,
            ttl: Ttl::from_millis(1000),
        };
        let none = [taken(&[]), Some(PermitReply::Granted), None];
        assert!(mismatch(&request, &none).is_none());
        let other = [
            Some(PermitReply::OtherCount("2".into())),
            taken(&[]),
            Some(PermitReply::OtherCount("2".into())),
        ];
        match mismatch(&request, &other) {
            Some(Error::PermitsMismatch {
                ours,
                theirs,
                nodes,
                ..
            }) => assert_eq!((ours, theirs.as_str(), nodes), (1, "2", 2)),
            other => panic!("{other:?}"),
        }
    }
}
