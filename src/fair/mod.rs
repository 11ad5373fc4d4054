//! A fair lock over the quorum: [`Redlock::fair_lock`], first come, first
//! served across every manager. A thin entry point: the waiters stand in
//! a line kept on every node (a ticket per call, drawn as the maximum over
//! a quorum), the one first in line attempts, and the lock key — token,
//! `SET NX`, quorum, validity — still decides who holds, exactly as for
//! [`lock`](Redlock::lock). The order decides who may *attempt*: a bug in
//! it could cost time, never exclusion.
//!
//! The whole primitive is in this folder: here its public API, its
//! descriptions on the engine and the waiter's loop; in `node.rs` what it
//! asks a node, how the replies read, and the fair lock's
//! [`Shape`](crate::contract::Shape); its scripts beside them; in
//! `turns.rs` its waiters told their turn (kept per manager); and in
//! `inspect.rs` what [`Redlock::inspect`] reads of its line.

pub(crate) mod inspect;
mod keys;
pub(crate) mod node;
pub(crate) mod turns;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use self::keys::{QUEUE_LEASES_SUFFIX, QUEUE_SUFFIX, QUEUE_TICKET_SUFFIX, TURN_SUFFIX};
use crate::acquire::call::{Acquisition, Attempts, Manager};
use crate::acquire::retry::{Next, Schedule, jitter_unit};
use crate::contract::Primitive;
use crate::contract::ShapeRef;
use crate::error::{Error, NodeError};
use crate::holding::guard::LockGuard;
use crate::holding::lease::Lease;
use crate::node::Deadline;
use crate::quorum::Rule;
use crate::redlock::Redlock;
use crate::request::{Fencing, Keys, Target, Ttl};
use crate::round::calls::Requests;
use crate::round::{Acquire, Core, NodeCall, attempt, follow};
use crate::token::Token;

/// The fair lock in the list of primitives: a lock's key (the lock's), and
/// its line beside it.
pub(crate) static PRIMITIVE: Primitive = Primitive {
    name: "fair lock",
    scripts: &[&node::ENTER, &node::TRY, &node::RELEASE, &node::LEAVE],
    keys: &[
        QUEUE_SUFFIX,
        QUEUE_LEASES_SUFFIX,
        QUEUE_TICKET_SUFFIX,
        TURN_SUFFIX,
    ],
    kind: crate::contract::stored::ResourceKind::Lock,
    reads: &inspect::LineReads,
    reads_only: None,
};

use self::node::{Attempt, Entered, Line, Tried, enter, leave, try_turn};
use self::turns::Turns;

/// How long a waiter's place in line lasts on a node unless the waiter
/// renews it: a waiter that dies while queued holds up the next one by at
/// most this long, and the next one's attempt (which starts when the lease
/// it saw ends).
pub const FAIR_QUEUE_LEASE: Duration = Duration::from_secs(1);

/// How often a waiter renews its place: a third of its lease, so that a
/// renewal that takes up to a node timeout still comes in time.
const RENEW_EVERY: Duration = Duration::from_millis(333);

impl Redlock {
    /// Acquires `resource` for `ttl` **in the order the callers asked**,
    /// across every manager and process on these nodes: first come, first
    /// served. Returns the same [`LockGuard`] as [`lock`](Self::lock).
    ///
    /// A call with nobody waiting takes the lock at once, in one round as
    /// `lock` does. Otherwise it takes a place in a line kept on every
    /// node — a ticket drawn from a quorum, so that the line has one order
    /// whichever quorum a waiter reads — and only the waiter first in line
    /// attempts. A release tells that one waiter its turn came (with
    /// [`WakeOnRelease::Subscribe`](crate::WakeOnRelease)), wherever it is,
    /// and nobody else competes for it. Who holds is decided exactly as for
    /// `lock` (token, `SET NX`, a quorum, validity): the order decides only
    /// who may attempt.
    ///
    /// A waiter renews its place while it waits; one that dies or is
    /// cancelled leaves the line, by itself within [`FAIR_QUEUE_LEASE`] at
    /// the latest. A node that restarts empty gets each waiter's place
    /// back, at its ticket, with that waiter's next renewal.
    ///
    /// Waiting follows the manager's [`Retry`](crate::Retry) policy: its
    /// `wait` bounds the whole wait, and its attempt limit counts the
    /// attempts made first in line (renewing one's place while others are
    /// ahead is not an attempt). Use `Retry::forever()` (or a `wait`) to
    /// queue behind long holds.
    ///
    /// Plain `lock` callers on the same resource do not queue: they take a
    /// free lock whenever they find it. Use one or the other per resource.
    /// On a Redis Cluster node the line's keys sit beside the lock key:
    /// use a hash-tagged resource (`{orders}:42`).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: a dropped future leaves the line (and
    /// removes an attempt's token) in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// let locks = quorumlock::Redlock::builder()
    ///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    ///     .wake_on_release(quorumlock::WakeOnRelease::Subscribe)
    ///     .retry(quorumlock::Retry::forever().wait(Duration::from_secs(30)))
    ///     .build()?;
    /// let guard = locks.fair_lock("printer", Duration::from_secs(10)).await?;
    /// // … every caller gets its turn in the order it asked …
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_lock(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        self.acquire(
            self.fair_request(resource, ttl, true),
            Attempts::Once,
            "fair_lock",
        )
    }

    /// One attempt at a fair lock: the lock if it is free **and nobody is
    /// waiting for it** in [`fair_lock`](Self::fair_lock)'s line, without
    /// queuing. One round, as [`try_lock`](Self::try_lock).
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock): [`Error::Contended`] when it is
    /// held or others wait for it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// if let Ok(guard) = locks.try_fair_lock("printer", Duration::from_secs(10)).await {
    ///     guard.release().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_fair_lock(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send + use<> {
        let request = self.fair_request(resource, ttl, false);
        self.acquire(request, Attempts::Once, "try_fair_lock")
    }

    /// [`with_lock`](Self::with_lock) for a fair lock: waits its turn as
    /// [`fair_lock`](Self::fair_lock), keeps the lock auto-extended while
    /// `work` runs, and releases it when `work` completes.
    ///
    /// # Errors
    ///
    /// As [`with_lock`](Self::with_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let printed = locks
    ///     .with_fair_lock("printer", Duration::from_secs(10), |_lease| async { 42 })
    ///     .await?;
    /// assert_eq!(printed, 42);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_fair_lock<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.fair_lock(resource, ttl).await?;
        self.hold_while(guard, work).await
    }

    /// A fair lock's request, validated (no I/O): `queue` to wait in line.
    fn fair_request(&self, resource: &str, ttl: Duration, queue: bool) -> Result<Fair, Error> {
        let request = self.request(&[resource], ttl, Fencing::Off)?;
        let target = request.target;
        let Some(key) = target.keys.first() else {
            return Err(crate::error::ArgumentError::NoResources.into());
        };
        let line = Arc::new(Line::of(key));
        self.limits().one_slot(&line.keys())?;
        let lease = Ttl::new(FAIR_QUEUE_LEASE, 0.0)?;
        Ok(Fair {
            target,
            line,
            queue,
            lease,
        })
    }
}

/// A fair lock call, validated: its lock, its line, and whether it queues.
#[derive(Clone)]
struct Fair {
    target: Target,
    line: Arc<Line>,
    queue: bool,
    lease: Ttl,
}

impl Fair {
    fn shape(&self) -> ShapeRef {
        ShapeRef::from(self.line.clone())
    }
}

impl Acquisition for Fair {
    type Guard = LockGuard;

    fn resource(&self) -> &str {
        &self.target.resource
    }

    /// None: a fair waiter is told its turn on the line's own channel.
    fn wake_keys(&self) -> Keys {
        Arc::from([])
    }

    fn span(&self, op: &'static str) -> tracing::Span {
        self.target.span(op)
    }

    fn attempt(
        &self,
        manager: &Arc<Manager>,
    ) -> impl Future<Output = Result<LockGuard, Error>> + Send {
        wait_in_line(manager, self)
    }
}

/// The tickets a call's first attempt drew, as the nodes answered.
#[derive(Debug, Default)]
struct Tickets {
    highest: AtomicU64,
    heard: AtomicUsize,
    /// Nodes that granted the lock (where the call was not placed in line).
    granted: AtomicUsize,
}

/// A call's first attempt: the lock if nobody queues, and tickets.
struct Enter {
    fair: Fair,
    tickets: Arc<Tickets>,
    /// The waiter's id, for a call that waits: placed in line where
    /// refused.
    waiter: Option<Arc<str>>,
}

impl Acquire for Enter {
    type Answer = Entered;

    fn target(&self) -> &Target {
        &self.fair.target
    }

    fn shape(&self) -> ShapeRef {
        self.fair.shape()
    }

    /// Tickets from a quorum, whatever the nodes answered.
    fn rule(&self) -> Rule {
        Rule::QuorumHeard
    }

    fn call(
        &self,
        call: NodeCall,
    ) -> impl Future<Output = Result<Entered, NodeError>> + Send + 'static + use<> {
        let (line, tickets) = (self.fair.line.clone(), self.tickets.clone());
        let (ttl, lease) = (self.fair.target.ttl, self.fair.lease);
        let waiter = self.waiter.clone();
        async move {
            let node = call.server()?;
            let token = call.token.as_str();
            let entered = enter(
                node,
                &line,
                token,
                (ttl, lease),
                waiter.as_deref(),
                call.deadline,
            )
            .await?;
            tickets.highest.fetch_max(entered.ticket, Ordering::AcqRel);
            tickets.heard.fetch_add(1, Ordering::AcqRel);
            if entered.granted {
                tickets.granted.fetch_add(1, Ordering::AcqRel);
            }
            Ok(entered)
        }
    }
}

/// What the nodes answered a waiter's attempt, for how long it waits.
#[derive(Debug)]
struct Seen {
    /// Nodes where it is first in line (the lock held there).
    first: AtomicUsize,
    /// The soonest the lock expires where it is first, in ms.
    held_ms: AtomicU64,
    /// The soonest the lease of a waiter ahead of it ends, in ms.
    ahead_ms: AtomicU64,
}

impl Default for Seen {
    fn default() -> Self {
        Self {
            first: AtomicUsize::new(0),
            held_ms: AtomicU64::new(u64::MAX),
            ahead_ms: AtomicU64::new(u64::MAX),
        }
    }
}

impl Seen {
    fn record(&self, tried: Tried) {
        match tried {
            Tried::Granted => {}
            Tried::First { held_ms } => {
                self.first.fetch_add(1, Ordering::AcqRel);
                if let Some(ms) = held_ms {
                    self.held_ms.fetch_min(ms, Ordering::AcqRel);
                }
            }
            Tried::Behind { first_lease_ms } => {
                self.ahead_ms.fetch_min(first_lease_ms, Ordering::AcqRel);
            }
        }
    }

    fn ms(slot: &AtomicU64) -> Option<Duration> {
        match slot.load(Ordering::Acquire) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
}

/// A queued waiter's attempt: its place, and the lock if first in line.
struct TryTurn {
    fair: Fair,
    id: Arc<str>,
    ticket: u64,
    seen: Arc<Seen>,
}

impl Acquire for TryTurn {
    type Answer = Tried;

    fn target(&self) -> &Target {
        &self.fair.target
    }

    fn shape(&self) -> ShapeRef {
        self.fair.shape()
    }

    /// In line on a quorum, whatever the nodes answered.
    fn rule(&self) -> Rule {
        Rule::QuorumHeard
    }

    fn call(
        &self,
        call: NodeCall,
    ) -> impl Future<Output = Result<Tried, NodeError>> + Send + 'static + use<> {
        let (line, id, seen) = (self.fair.line.clone(), self.id.clone(), self.seen.clone());
        let (ticket, ttl, lease) = (self.ticket, self.fair.target.ttl, self.fair.lease);
        async move {
            let node = call.server()?;
            let token = call.token.as_str();
            let attempt = Attempt {
                id: &id,
                ticket,
                token,
                ttl,
                lease,
            };
            let tried = try_turn(node, &line, attempt, call.deadline).await?;
            seen.record(tried);
            Ok(tried)
        }
    }
}

/// What a call's first attempt came to.
enum Entry {
    /// The lock; and whether every node granted it, so that the call was
    /// placed in line nowhere.
    Granted(LockGuard, bool),
    /// Its ticket: the highest drawn on a quorum.
    Ticket(u64),
}

/// A fair lock call: its first attempt, then (when it queues) its wait in
/// line until it is granted, gives up or is cancelled.
async fn wait_in_line(manager: &Arc<Manager>, fair: &Fair) -> Result<LockGuard, Error> {
    let mut schedule = manager.retry.schedule(Instant::now());
    let id: Arc<str> = Arc::from(Token::generate()?.as_str());
    // A call that waits is placed in line by its first attempt where a
    // node refuses it: from then on it leaves the line however it ends.
    let core = manager.core.clone();
    let mut in_line = InLine::new(core, fair.line.clone(), id.clone(), fair.queue);
    let waiter = fair.queue.then(|| id.clone());
    // Whether an earlier first attempt may have placed it somewhere.
    let mut placed = false;
    let ticket = loop {
        let error = match first_attempt(manager, fair, waiter.clone()).await {
            Ok(Entry::Granted(guard, everywhere)) => {
                in_line.granted_first(waiter.is_some() && (placed || !everywhere));
                return Ok(guard);
            }
            Ok(Entry::Ticket(ticket)) => break ticket,
            Err(error) => error,
        };
        placed = waiter.is_some();
        if !fair.queue || !error.is_retryable() {
            return Err(error);
        }
        let unavailable = matches!(error, Error::Unavailable { .. });
        let delay = counted(&mut schedule, fair, error, unavailable)?;
        tokio::time::sleep(delay).await;
    };
    // Told its turn where releases are announced (the manager's wake-ups
    // are on), else polling.
    let turn = manager
        .wakeups
        .as_ref()
        .and_then(|_| {
            manager
                .singletons
                .get_or(|| Turns::new(manager.pubsub.clone()))
        })
        .map(|turns| turns.waiter(&fair.line.turn, &id));
    loop {
        let seen = Arc::new(Seen::default());
        let error = match take_turn(manager, fair, &id, ticket, &seen).await {
            Ok(guard) => {
                in_line.granted();
                return Ok(guard);
            }
            Err(error) if !error.is_retryable() => return Err(error),
            Err(error) => error,
        };
        let wait = next_wait(&mut schedule, fair, &seen, error, turn.is_some())?;
        match &turn {
            Some(turn) => {
                tokio::select! {
                    () = turn.told() => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
            None => tokio::time::sleep(wait).await,
        }
    }
}

/// A call's first attempt: the lock if nobody queued on a quorum, or the
/// call's ticket; an error if too few nodes drew one (or it does not
/// queue).
async fn first_attempt(
    manager: &Arc<Manager>,
    fair: &Fair,
    waiter: Option<Arc<str>>,
) -> Result<Entry, Error> {
    let core = &manager.core;
    let tickets = Arc::new(Tickets::default());
    let enter = Enter {
        fair: fair.clone(),
        tickets: tickets.clone(),
        waiter,
    };
    match attempt(core, &enter).await {
        Ok(grant) => {
            let everywhere = tickets.granted.load(Ordering::Acquire) == core.len();
            Ok(Entry::Granted(guard(manager, fair, grant), everywhere))
        }
        Err(error) if fair.queue && tickets.heard.load(Ordering::Acquire) >= core.quorum() => {
            // Refused by a quorum (held, or others in line): queue.
            tracing::debug!(error = %error, "fair lock busy: queuing");
            Ok(Entry::Ticket(tickets.highest.load(Ordering::Acquire)))
        }
        Err(error) => Err(error),
    }
}

/// A queued waiter's attempt: the guard if granted.
async fn take_turn(
    manager: &Arc<Manager>,
    fair: &Fair,
    id: &Arc<str>,
    ticket: u64,
    seen: &Arc<Seen>,
) -> Result<LockGuard, Error> {
    let try_turn = TryTurn {
        fair: fair.clone(),
        id: id.clone(),
        ticket,
        seen: seen.clone(),
    };
    let grant = attempt(&manager.core, &try_turn).await?;
    Ok(guard(manager, fair, grant))
}

/// A granted attempt as the caller's guard.
fn guard<T, F>(manager: &Manager, fair: &Fair, grant: crate::round::Grant<T, F>) -> LockGuard
where
    T: crate::quorum::Answer + Send + 'static,
    F: Future<Output = Result<T, NodeError>> + Unpin + Send + 'static,
{
    LockGuard::new(
        manager.core.clone(),
        manager.renewer.clone(),
        fair.target.resource.clone(),
        fair.target.ttl,
        grant,
    )
}

/// How long a waiter waits after a failed attempt, as the nodes' answers
/// and the retry policy say; an error once the policy gives up.
///
/// First in line somewhere (the lock held there), or refused for another
/// reason (too few nodes answered), the attempt counts against the policy,
/// and the waiter waits its delay — less if the lock expires sooner —
/// unless told its turn first. Behind others everywhere, it only renews
/// its place: it waits a renewal period, or until the lease of the waiter
/// ahead ends (a waiter that died leaves the line then). Unless `told`
/// (wake-ups on), nobody will tell it when it comes first: it polls, at
/// its retry delay if that is sooner, as a plain lock's waiter does.
fn next_wait(
    schedule: &mut Schedule,
    fair: &Fair,
    seen: &Seen,
    error: Error,
    told: bool,
) -> Result<Duration, Error> {
    let first = seen.first.load(Ordering::Acquire) > 0;
    let contended = matches!(error, Error::Contended { .. });
    if first || !contended {
        let unavailable = matches!(error, Error::Unavailable { .. });
        let delay = counted(schedule, fair, error, unavailable)?;
        let expires = Seen::ms(&seen.held_ms).map(|ms| ms + Duration::from_millis(1));
        return Ok(delay.min(expires.unwrap_or(delay)).min(RENEW_EVERY));
    }
    if let Some(deadline) = schedule.deadline()
        && Instant::now() >= deadline
    {
        return Err(wait_timeout(schedule, fair, error));
    }
    let ahead = Seen::ms(&seen.ahead_ms).map(|ms| ms + Duration::from_millis(1));
    let renew = match told {
        true => RENEW_EVERY,
        false => RENEW_EVERY.min(schedule.delay(jitter_unit())),
    };
    Ok(renew.min(ahead.unwrap_or(renew)))
}

/// A failed attempt that counts against the retry policy: the delay
/// before the next, or the error the call ends with.
fn counted(
    schedule: &mut Schedule,
    fair: &Fair,
    error: Error,
    unavailable: bool,
) -> Result<Duration, Error> {
    match schedule.after_failure(Instant::now(), jitter_unit(), unavailable) {
        Next::RetryAfter(delay) => Ok(delay),
        Next::AttemptsExhausted => Err(error),
        Next::DeadlinePassed => Err(wait_timeout(schedule, fair, error)),
    }
}

fn wait_timeout(schedule: &Schedule, fair: &Fair, last: Error) -> Error {
    Error::WaitTimeout {
        resource: fair.target.resource.to_string(),
        waited: schedule.waited(),
        attempts: schedule.attempts_made(),
        last: Box::new(last),
    }
}

/// A waiter's place in line: unless it was granted, it leaves the line
/// on every node when dropped (it gave up, failed or was cancelled), in
/// the background, telling the next waiter its turn came where it was
/// first.
struct InLine {
    core: Arc<Core>,
    line: Arc<Line>,
    id: Arc<str>,
    /// Per node: still to leave.
    leave: Option<Vec<bool>>,
}

impl InLine {
    /// Waiter `id` in `line`: one that `waits` leaves on every node when
    /// dropped; one that does not was never placed.
    fn new(core: Arc<Core>, line: Arc<Line>, id: Arc<str>, waits: bool) -> Self {
        let leave = waits.then(|| vec![true; core.len()]);
        Self {
            core,
            line,
            id,
            leave,
        }
    }

    /// Granted by a first attempt: leaves the line if it may have been
    /// `placed` there (a node refused it, now or in an earlier first
    /// attempt); else there is nothing to leave.
    fn granted_first(&mut self, placed: bool) {
        if placed {
            self.granted();
        } else {
            self.leave = None;
        }
    }

    /// Granted: the waiter leaves the line on every node (behind its
    /// request there), without handing on a turn: it holds the lock. (A
    /// node keeps it in line until then, so that an attempt that fails
    /// after some nodes granted it keeps its place.)
    fn granted(&mut self) {
        let every = vec![true; self.core.len()];
        leave_in_background(&self.core, &self.line, &self.id, &every, false);
        self.leave = None;
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        if let Some(leave) = self.leave.take() {
            leave_in_background(&self.core, &self.line, &self.id, &leave, true);
        }
    }
}

/// Waiter `id` leaves `line` on the nodes `on` marks, followed in the
/// background; with `turn`, handing the turn on where it was first.
/// Without a runtime its places expire with their leases.
fn leave_in_background(core: &Arc<Core>, line: &Arc<Line>, id: &Arc<str>, on: &[bool], turn: bool) {
    if !on.contains(&true) || tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let deadline = core.timeout_from(Instant::now());
    let shared = Deadline::timed_by_caller(deadline);
    let turn = turn && core.announces();
    let requests = (0..core.len())
        .filter(|&i| on.get(i).copied().unwrap_or(false))
        .map(|i| {
            let (core, line, id) = (core.clone(), line.clone(), id.clone());
            let request = async move {
                let node = core.node(i)?;
                leave(node, &line, &id, turn, shared).await
            };
            (i, Box::pin(request))
        });
    let stragglers = Requests::new(requests, Some(shared));
    follow(core, "leave", stragglers, |_, _| {});
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_keeps_the_soonest_of_each_wait() {
        let seen = Seen::default();
        assert_eq!(Seen::ms(&seen.held_ms), None);
        seen.record(Tried::First { held_ms: Some(40) });
        seen.record(Tried::First { held_ms: Some(7) });
        seen.record(Tried::First { held_ms: None });
        seen.record(Tried::Behind {
            first_lease_ms: 900,
        });
        seen.record(Tried::Behind {
            first_lease_ms: 600,
        });
        seen.record(Tried::Granted);
        assert_eq!(seen.first.load(Ordering::Acquire), 3);
        assert_eq!(Seen::ms(&seen.held_ms), Some(Duration::from_millis(7)));
        assert_eq!(Seen::ms(&seen.ahead_ms), Some(Duration::from_millis(600)));
    }

    #[test]
    fn a_waiter_renews_its_place_well_within_its_lease() {
        assert!(RENEW_EVERY * 3 <= FAIR_QUEUE_LEASE);
    }
}
