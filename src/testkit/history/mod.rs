//! Record what your lock holders believed, and check it (feature `testkit`).
//!
//! A [`Recorder`] is shared by the tasks of a test (it is `Clone + Send +
//! Sync`); each records, on one monotonic clock (tokio's, as offsets from
//! the recorder's origin), the attempts it made and what came of them, the
//! critical sections it ran under a granted lock, the counter it kept there
//! if any, and the faults the test injected. [`check`] then judges the
//! [`History`] and returns a [`HistoryCheck`]: each [`Violation`] names the
//! resource, the clients and the times a person needs to find it.
//! [`History::write_jsonl`] saves a history as JSON Lines, and
//! [`History::read_jsonl`] reads it back, so a saved run can be checked
//! again offline, without servers.
//!
//! # What is checked, and why a correct Redlock passes
//!
//! - **No overlap.** A client *believes* it holds a lock from when the call
//!   returned its guard until the earlier of its deadline and when it
//!   called `release` (an auto-extended lock: until `lost()` resolved, or
//!   release). Two such windows on one resource never overlap: the grant
//!   needs a majority of nodes to hold the token, two majorities share a
//!   node, and a node holds one token at a time for at most its ttl; the
//!   deadline (`started + ttl - drift`) ends before any node's key can
//!   expire ([`Violation::Overlap`]). Semaphores and reader-writer locks
//!   share by their own rule instead: at most `n` permits, readers only
//!   among readers, a writer alone ([`Violation::TooManyHolders`]).
//! - **No lost update.** A counter read and written back inside the
//!   windows ends at the number of writes: two overlapping sections would
//!   lose one ([`Violation::LostUpdate`]).
//! - **Fences increase.** Fenced grants of one resource, in grant order,
//!   carry strictly increasing fences: a grant's fence is the largest
//!   counter of its granting majority, written back to a majority before
//!   the grant counts, and the next grant's majority shares a node with
//!   that one ([`Violation::FenceBackwards`]).
//! - **No grant while a majority is down.** Within a recorded majority
//!   outage no attempt may succeed: a grant needs a majority's answers
//!   ([`Violation::GrantDuringMajorityOutage`]).
//! - **Honest deadlines.** A grant's deadline lies within `started + ttl`,
//!   and `started` within the call before any request was sent: a node
//!   sets the key for a ttl when the request arrives, so a deadline
//!   measured from `started` ends before any node's key can expire
//!   ([`Violation::DeadlinePastTtl`], [`Violation::StartOutsideCall`]).
//! - **Documented errors only**, and single attempts that fail do so
//!   within a bound if one is set ([`Violation::UndocumentedError`],
//!   [`Violation::SlowFailure`]).
//! - **Nothing left behind.** Once the run has settled (workers stopped,
//!   managers settled, every node answering again), no node holds the key
//!   of a lock that was released ([`Leftover`], [`Violation::LeftBehind`]):
//!   a release a node did not answer (a timeout, a broken connection, a
//!   node not asked) is owed to it and delivered before it is asked again,
//!   so whatever ran on it late (a frozen node's backlog, a partition's
//!   delayed bytes, a restart's persisted keys) is deleted. Keys are told
//!   apart by resource and the token's first four characters.
//! - **No loss while a majority was up.** An auto-extended lock lost
//!   ([`Loss`]) with no majority outage in the ttl before it: renewals need
//!   only a quorum ([`Violation::LossWithMajorityUp`]).
//!
//! Some things break a lock whatever the library does, and are counted,
//! not judged:
//! - a loss after the client process stalled ([`Span`] in
//!   [`History::stalls`]) or after a majority of the nodes starved
//!   ([`History::starved`]) — the "bounded pauses" assumption
//!   ([`HistoryCheck::losses_after_stalls`]); likewise a single attempt that
//!   failed slowly across a stall ([`HistoryCheck::failures_after_stalls`]);
//! - a loss after a majority of the nodes no longer held the holder's key:
//!   some restarted without it ([`KeyLoss`]: later than its remaining ttl,
//!   and a contender took the empty key before the holder set it again),
//!   and the others that made up the majority were down at one moment of
//!   the ttl before the loss ([`Down`]). This needs [`History::nodes`]; a
//!   node counts as without the key from its key loss to the end of the
//!   holding, since the history cannot show whether a renewal set it again
//!   ([`HistoryCheck::losses_without_keys`]);
//! - a grant whose deadline lies past `invoked + ttl` because the client
//!   thread was preempted between reading its clock and calling the
//!   library ([`HistoryCheck::preempted`]).
//!
//! Lock keys removed from under their holders ([`Wipe`]: an operator's
//! `DEL` or `FLUSHALL`, an eviction under `maxmemory`) break Redlock's
//! assumption when they leave a majority of the nodes without a holder's
//! key: another owner may then be granted while the first still believes
//! it holds. That is a wipe of the resource's key on a majority, or on
//! fewer nodes when the others it did not hit (read just before it) did
//! not hold the holder's token either, or held it only until an expiry
//! before the later grant (the holder could not renew it there;
//! [`Wipe::without`]; a grant made after the spared nodes were read cannot
//! be placed on them, and a read that predates it counts against it): a
//! wipe of a
//! minority while the holder's token is on the rest excuses nothing. Only
//! then, and only within the wipe's time window, is what follows excused
//! (counted and measured, not judged):
//! - an overlap of two windows of that resource, when the later grant came
//!   after the wipe began and within the earlier grant's ttl after it
//!   ended, and the earlier call had begun before it ended
//!   ([`HistoryCheck::excused_overlaps`], each with its length: from the
//!   later grant until the earlier holder stopped believing);
//! - as many updates of that resource's counter lost as such overlaps in
//!   which both sections wrote ([`HistoryCheck::updates_lost_to_wipes`]);
//! - a holder's loss of that resource within its ttl after such a wipe
//!   ([`HistoryCheck::losses_after_wipes`]), counted apart from the losses
//!   above.
//!
//! A wipe that removed every key of its nodes (`FLUSHALL`, an eviction)
//! removed fence counters too: a fence not above the one before it, with
//! such a wipe on any node between the two (after the earlier call began,
//! before the later grant), is counted
//! ([`HistoryCheck::fences_reset_by_wipes`]). Every other overlap, lost
//! update, fence and loss is judged as before.
//!
//! # Examples
//!
//! Record a critical section around a real lock:
//!
//! ```no_run
//! use quorumlock::testkit::history::{Recorder, check};
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
//! let recorder = Recorder::new(); // clone it into every task
//! let ttl = Duration::from_secs(2);
//! let attempt = recorder.try_lock(7, "jobs:a"); // client 7
//! match locks.try_lock("jobs:a", ttl).await {
//!     Ok(guard) => {
//!         let mut section = attempt.granted(&guard.lease(), ttl);
//!         // ... the critical section; if it updates a counter:
//!         section.wrote();
//!         section.release(guard).await?; // the window ends here
//!     }
//!     Err(error) => attempt.failed(&error),
//! }
//! let verdict = check(&recorder.take());
//! assert!(verdict.is_ok(), "{verdict}");
//! # Ok(())
//! # }
//! ```
//!
//! The checker needs no servers: two sections one after the other pass,
//! an overlapping pair does not.
//!
//! ```
//! use quorumlock::testkit::history::{Grant, History, Violation, check};
//! use std::time::Duration;
//!
//! let ms = Duration::from_millis;
//! let mut history = History::default();
//! // Client 0 holds "jobs:a" over 0..100 ms, client 1 over 100..200 ms.
//! history.grants.push(Grant::new(0, "jobs:a", ms(0), ms(100)));
//! history.grants.push(Grant::new(1, "jobs:a", ms(100), ms(200)));
//! assert!(check(&history).is_ok());
//!
//! // Client 2 believes it holds "jobs:b" over 0..150 ms, client 3 over 100..200 ms.
//! history.grants.push(Grant::new(2, "jobs:b", ms(0), ms(150)));
//! history.grants.push(Grant::new(3, "jobs:b", ms(100), ms(200)));
//! let verdict = check(&history);
//! assert!(matches!(
//!     &verdict.violations[..],
//!     [Violation::Overlap { resource, .. }] if resource == "jobs:b"
//! ));
//! // 1 violation:
//! //   overlapping windows on jobs:b:
//! //     client 2, token …: invoked 0.0ms, granted 0.0ms, deadline 150.0ms, …
//! //     client 3, token …: invoked 100.0ms, granted 100.0ms, deadline 200.0ms, …
//! println!("{verdict}");
//! ```
//!
//! Check a saved history again (the chaos tests save theirs when
//! `QUORUMLOCK_CHAOS_HISTORY` names a directory):
//!
//! ```no_run
//! use quorumlock::testkit::history::{History, check};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = std::io::BufReader::new(std::fs::File::open("chaos-42.jsonl")?);
//! let verdict = check(&History::read_jsonl(file)?);
//! println!("{verdict}");
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Error, LossReason, ReleaseSummary};

mod check;
mod jsonl;
mod recorder;
#[cfg(test)]
mod tests;

pub use check::{ExcusedOverlap, HistoryCheck, Violation, check};
pub use jsonl::{FORMAT_VERSION, HistoryError};
pub use recorder::{Attempt, Recorder, Section};

/// One grant the library made, as its client saw it: times are offsets
/// from the recorder's origin.
///
/// The fields are the history file's format (a new field is a new
/// [`FORMAT_VERSION`]); build one by hand with [`Grant::new`] and struct
/// update syntax, or let [`Attempt::granted`] build it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The client (your numbering).
    pub client: usize,
    /// The resource name.
    pub resource: String,
    /// The token's first four characters: enough to tell grants apart in a
    /// report, never the whole token.
    pub token: String,
    /// The fencing token, for fenced locks.
    pub fence: Option<u64>,
    /// The ttl requested.
    #[serde(rename = "ttl_ns", with = "nanos")]
    pub ttl: Duration,
    /// How the grant may share its resource (a plain lock: [`Share::Alone`]).
    #[serde(default)]
    pub share: Share,
    /// When the call was made.
    #[serde(rename = "invoked_ns", with = "nanos")]
    pub invoked: Duration,
    /// When the call returned the guard.
    #[serde(rename = "granted_ns", with = "nanos")]
    pub granted: Duration,
    /// When the library says the attempt began ([`Lease::started`]): the
    /// deadline is measured from here.
    ///
    /// [`Lease::started`]: crate::Lease::started
    #[serde(rename = "started_ns", with = "nanos")]
    pub started: Duration,
    /// The library's deadline for the grant ([`Lease::deadline`]).
    ///
    /// [`Lease::deadline`]: crate::Lease::deadline
    #[serde(rename = "deadline_ns", with = "nanos")]
    pub deadline: Duration,
    /// Until when the client trusted the lock: its deadline, or for an
    /// auto-extended lock when `lost()` resolved (or its release).
    #[serde(rename = "believed_until_ns", with = "nanos")]
    pub believed_until: Duration,
    /// When the client called `release` (its window ends at the earlier of
    /// this and `believed_until`).
    #[serde(rename = "release_called_ns", with = "nanos")]
    pub release_called: Duration,
    /// Whether the critical section wrote the counter.
    pub wrote: bool,
}

impl Grant {
    /// A plain lock on `resource` believed held over `from..to`: invoked,
    /// granted and started at `from`; deadline, trust and release at `to`;
    /// the window's length as its ttl; no fence, no write. Change what a
    /// case needs with struct update syntax.
    pub fn new(client: usize, resource: impl Into<String>, from: Duration, to: Duration) -> Self {
        Grant {
            client,
            resource: resource.into(),
            token: String::new(),
            fence: None,
            ttl: to.saturating_sub(from),
            share: Share::Alone,
            invoked: from,
            granted: from,
            started: from,
            deadline: to,
            believed_until: to,
            release_called: to,
            wrote: false,
        }
    }

    /// The window the client believed it held the lock in:
    /// `[granted, min(believed_until, release_called))`.
    pub fn window(&self) -> (Duration, Duration) {
        (self.granted, self.believed_until.min(self.release_called))
    }
}

/// How a grant may share its resource with others held at the same time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Share {
    /// A lock, or a reader-writer lock's writer: with nobody.
    #[default]
    Alone,
    /// A reader-writer lock's reader: with readers only.
    Reader,
    /// A permit of a semaphore of this many permits: with fewer others.
    Permit(usize),
}

/// What kind of call an operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpKind {
    /// One attempt (`try_lock` and its kin): a failure must come within
    /// [`History::failure_bound`].
    TryLock,
    /// An acquisition that retries (`lock`): it may wait as long as its
    /// retry policy says.
    Lock,
    /// A release.
    Release,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::TryLock => "try_lock",
            OpKind::Lock => "lock",
            OpKind::Release => "release",
        })
    }
}

/// What came of one operation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// It did what was asked.
    Ok,
    /// A documented failure, by kind.
    Failed(String),
    /// The effect is unknown (e.g. a release that could not reach every
    /// node): its keys must be gone within their ttl.
    Ambiguous(String),
    /// An error the library does not document for this call.
    Undocumented(String),
}

impl Outcome {
    /// A failed acquisition sorted into a documented kind
    /// (contended, unavailable, fence unconfirmed, validity expired, wait
    /// timeout), or [`Outcome::Undocumented`] with its message.
    pub fn of_lock_error(error: &Error) -> Outcome {
        let kind = match error {
            Error::Contended { .. } => "contended",
            Error::Unavailable { .. } => "unavailable",
            Error::FenceUnconfirmed { .. } => "fence unconfirmed",
            Error::ValidityExpired { .. } => "validity expired",
            Error::WaitTimeout { .. } => "wait timeout",
            other => return Outcome::Undocumented(other.to_string()),
        };
        Outcome::Failed(kind.to_owned())
    }

    /// A release's result: ok when every node answered, ambiguous when some
    /// failed, failed when the lock was already lost, else undocumented.
    pub fn of_release(result: &Result<ReleaseSummary, Error>) -> Outcome {
        match result {
            Ok(summary) if summary.failures().is_empty() => Outcome::Ok,
            Ok(_) => Outcome::Ambiguous("partial release".to_owned()),
            // Known not to be held any more: nothing left behind.
            Err(Error::Lost { .. }) => Outcome::Failed("lost before release".to_owned()),
            Err(other) => Outcome::Undocumented(other.to_string()),
        }
    }
}

/// One call and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// The client.
    pub client: usize,
    /// The call.
    pub kind: OpKind,
    /// The resource name.
    pub resource: String,
    /// When it was called.
    #[serde(rename = "start_ns", with = "nanos")]
    pub start: Duration,
    /// When it returned.
    #[serde(rename = "end_ns", with = "nanos")]
    pub end: Duration,
    /// What came of it.
    pub outcome: Outcome,
}

/// A window during which a majority of the nodes was down (or answered
/// only after the ttl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    /// When the majority went down.
    #[serde(rename = "from_ns", with = "nanos")]
    pub from: Duration,
    /// Until when a quorum was certainly missing: no grant may be asked
    /// for and granted within `from..to`.
    #[serde(rename = "to_ns", with = "nanos")]
    pub to: Duration,
    /// When a quorum was certainly back (`to` or later): a holder's loss
    /// until its ttl after this is excused, since its renewals may have
    /// needed the nodes until then.
    #[serde(rename = "back_ns", with = "nanos")]
    pub back: Duration,
}

/// An auto-extended lock that `lost()` declared lost before its release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    /// The holder.
    pub client: usize,
    /// The resource name.
    pub resource: String,
    /// When `lost()` resolved.
    #[serde(rename = "at_ns", with = "nanos")]
    pub at: Duration,
    /// What it resolved to.
    #[serde(with = "loss_reason")]
    pub reason: LossReason,
    /// The lock's ttl: how far back an outage or a stall excuses the loss.
    #[serde(rename = "ttl_ns", with = "nanos")]
    pub ttl: Duration,
}

/// A fault a test injected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// The nodes it hit, by index (none for a fault of no node).
    pub nodes: Vec<usize>,
    /// What it was, e.g. `KillRestart`.
    pub kind: String,
    /// When it began.
    #[serde(rename = "from_ns", with = "nanos")]
    pub from: Duration,
    /// When it was healed.
    #[serde(rename = "to_ns", with = "nanos")]
    pub to: Duration,
}

/// A stretch of time: a stall of the client process, or nodes starved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// Its beginning.
    #[serde(rename = "from_ns", with = "nanos")]
    pub from: Duration,
    /// Its end.
    #[serde(rename = "to_ns", with = "nanos")]
    pub to: Duration,
}

/// A node that could not answer in time over a stretch of time: killed
/// until restarted, paused, frozen, blackholed, asleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Down {
    /// The node, by index.
    pub node: usize,
    /// When it stopped answering.
    #[serde(rename = "from_ns", with = "nanos")]
    pub from: Duration,
    /// When it answered again.
    #[serde(rename = "to_ns", with = "nanos")]
    pub to: Duration,
}

/// A node that lost a holder's key: it restarted later than the key's
/// remaining ttl (or without persistence) and came back without the
/// holder's token. Until the holder sets the key there again (which a
/// contender racing for the key may keep it from), the holding rests on
/// the other nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyLoss {
    /// The node, by index.
    pub node: usize,
    /// The resource whose key it lost.
    pub resource: String,
    /// The lost token's first four characters (as in [`Grant::token`]):
    /// whose holding it was.
    pub token: String,
    /// When the key was lost (the node went down).
    #[serde(rename = "at_ns", with = "nanos")]
    pub at: Duration,
}

/// Lock keys removed from under whoever held them, on some nodes, by
/// something other than the library: an operator's `DEL` of the lock keys
/// or `FLUSHALL`, an eviction under `maxmemory`. See the
/// [module docs](self) for what it excuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wipe {
    /// What removed them, e.g. `del`, `flushall`, `eviction`.
    pub kind: String,
    /// Whether every key of the wiped nodes went, fence counters and the
    /// fair lines' keys too (`FLUSHALL`, an eviction), not only lock keys.
    pub all_keys: bool,
    /// When the first node was hit.
    #[serde(rename = "from_ns", with = "nanos")]
    pub from: Duration,
    /// When the last node's keys were gone (and its settings, if changed,
    /// restored).
    #[serde(rename = "to_ns", with = "nanos")]
    pub to: Duration,
    /// Each lock key the wipe left absent: per node and resource, with
    /// the token it held before (empty if it held none).
    pub removed: Vec<Wiped>,
    /// The lock keys of the nodes it did not hit, read (past any proxy)
    /// just before it: a holder whose token was on only some of them may
    /// be left on a minority by a wipe of fewer nodes than a majority.
    #[serde(default)]
    pub kept: Vec<Wiped>,
}

/// One lock key a [`Wipe`] left absent on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wiped {
    /// The node, by index.
    pub node: usize,
    /// The resource whose key it is.
    pub resource: String,
    /// The token's first four characters (as in [`Grant::token`]) before
    /// the wipe; empty if the node held no key of the resource.
    pub token: String,
    /// For a key the wipe did not hit ([`Wipe::kept`]): when it was to
    /// expire, as read just before the wipe (a holder that could not renew
    /// it there meanwhile no longer held it then).
    #[serde(rename = "expires_ns", default, with = "opt_nanos")]
    pub expires: Option<Duration>,
}

impl Wipe {
    /// The nodes on which the wipe left `resource`'s key absent.
    pub fn nodes_of(&self, resource: &str) -> std::collections::BTreeSet<usize> {
        self.removed
            .iter()
            .filter(|k| k.resource == resource)
            .map(|k| k.node)
            .collect()
    }

    /// The nodes on which `resource`'s key did not hold `token` (its first
    /// four characters) at `at`, as far as the wipe saw: those it left the
    /// key absent on, and those it did not hit that held another token or
    /// none just before it, or held it with an expiry before `at`.
    pub fn without(
        &self,
        resource: &str,
        token: &str,
        at: Duration,
    ) -> std::collections::BTreeSet<usize> {
        let token: String = token.chars().take(4).collect();
        let mut nodes = self.nodes_of(resource);
        nodes.extend(
            self.kept
                .iter()
                .filter(|k| {
                    k.resource == resource
                        && (k.token != token || k.expires.is_some_and(|e| e <= at))
                })
                .map(|k| k.node),
        );
        nodes
    }
}

/// A lock key a node still held once the run had settled: its workers
/// stopped, every manager settled, and every node answered again (and so
/// was given the releases it was owed). Read past any proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leftover {
    /// The node, by index.
    pub node: usize,
    /// The resource whose key it is.
    pub resource: String,
    /// The token's first four characters (as in [`Grant::token`]).
    pub token: String,
    /// When it was read.
    #[serde(rename = "at_ns", with = "nanos")]
    pub at: Duration,
}

/// Everything recorded in one run; times are offsets from the recorder's
/// origin. [`check`] judges it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Every grant, with its believed-held window.
    pub grants: Vec<Grant>,
    /// Every call and its outcome.
    pub ops: Vec<Op>,
    /// Majority outages.
    pub outages: Vec<Outage>,
    /// Auto-extended locks lost before their release.
    pub losses: Vec<Loss>,
    /// When the client process's runtime stalled (a tick due at `from` ran
    /// at `to`): a holder may lose its lock then, whatever the library does.
    pub stalls: Vec<Span>,
    /// When a majority of the nodes answered a direct ping only after the
    /// node timeout: the machine starved the servers.
    pub starved: Vec<Span>,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// When single nodes could not answer (the faults' effect per node).
    pub down: Vec<Down>,
    /// Holders' keys that nodes lost to a restart.
    pub key_losses: Vec<KeyLoss>,
    /// Lock keys removed from under their holders (deleted, flushed,
    /// evicted).
    pub wipes: Vec<Wipe>,
    /// Lock keys the nodes still held once the run had settled: none may
    /// be a released lock's ([`Violation::LeftBehind`]).
    pub leftovers: Vec<Leftover>,
    /// How many nodes the locks ran on, if known: with it, a loss after a
    /// majority of them lost the holder's key or was down is counted, not
    /// judged.
    pub nodes: Option<usize>,
    /// Each counter's final value, by resource: it must equal the number
    /// of grants of that resource that wrote. A resource without one has
    /// no such check.
    pub counters: BTreeMap<String, u64>,
    /// The seed of the run's fault schedule, if any.
    pub seed: Option<u64>,
    /// How long a failed [`OpKind::TryLock`] may take; `None`: no bound.
    pub failure_bound: Option<Duration>,
}

/// Durations as whole nanoseconds (`u64`, saturating past 584 years).
mod nanos {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }
}

/// Optional durations as whole nanoseconds, or null.
mod opt_nanos {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|n| n.map(Duration::from_nanos))
    }
}

/// [`LossReason`] by a stable name.
mod loss_reason {
    use crate::LossReason;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    fn name(reason: LossReason) -> &'static str {
        match reason {
            LossReason::Expired => "expired",
            LossReason::TokenGone => "token_gone",
            LossReason::Unreachable => "unreachable",
            LossReason::Released => "released",
            LossReason::Incompatible => "incompatible",
        }
    }

    pub(super) fn serialize<S: Serializer>(r: &LossReason, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(name(*r))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LossReason, D::Error> {
        let text = String::deserialize(d)?;
        [
            LossReason::Expired,
            LossReason::TokenGone,
            LossReason::Unreachable,
            LossReason::Released,
            LossReason::Incompatible,
        ]
        .into_iter()
        .find(|r| name(*r) == text)
        .ok_or_else(|| D::Error::custom(format!("unknown loss reason `{text}`")))
    }
}
