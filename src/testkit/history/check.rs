//! The checker: a pure function of a [`History`], judged by the rules the
//! module docs state.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use super::{
    Fault, Grant, History, Leftover, Loss, Op, OpKind, Outage, Outcome, Share, Span, Wipe,
};

/// What the checker found in a history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryCheck {
    /// Every broken rule, in the order the checker found them.
    pub violations: Vec<Violation>,
    /// Counted, not judged: grants whose deadline lies past `invoked +
    /// ttl` on the client's own clock (the client thread was preempted
    /// between reading its clock and calling the library for longer than
    /// the drift allowance; the deadline is still within `started + ttl`).
    pub preempted: usize,
    /// Counted, not judged: losses with a majority up that followed a
    /// stall of the client process or a starved majority of nodes.
    pub losses_after_stalls: usize,
    /// Counted, not judged: losses after a majority of the nodes had lost
    /// the holder's key to a restart or was down (see the
    /// [module docs](super)).
    pub losses_without_keys: usize,
    /// Counted, not judged: failed single attempts slower than the bound
    /// that a stall of the client process overlapped.
    pub failures_after_stalls: usize,
    /// Measured, not judged: overlaps of two windows of a resource whose
    /// key a wipe had just removed on a majority of the nodes (see the
    /// [module docs](super)), each with its length.
    pub excused_overlaps: Vec<ExcusedOverlap>,
    /// Counted, not judged: updates of a counter lost in excused overlaps
    /// (at most one per overlap in which both sections wrote).
    pub updates_lost_to_wipes: usize,
    /// Counted, not judged: holders' losses within their ttl after a wipe
    /// that removed their resource's key on a majority of the nodes.
    pub losses_after_wipes: usize,
    /// Counted, not judged: fences not above the one before them, with a
    /// wipe of every key (fence counters too) between the two grants, or
    /// one that removed the earlier grant's own key from a node.
    pub fences_reset_by_wipes: usize,
}

/// Two windows of one resource that overlapped after a wipe removed its
/// key on a majority of the nodes: Redlock's assumption broken, not the
/// library's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExcusedOverlap {
    /// The resource.
    pub resource: String,
    /// The grant made first: its holder believed it held until its
    /// window's end.
    pub first: Grant,
    /// The grant made while `first`'s window was open.
    pub second: Grant,
    /// The wipe that excuses it.
    pub wipe: Wipe,
}

impl ExcusedOverlap {
    /// How long both believed they held: from the later grant until the
    /// earlier holder stopped believing (its `lost()` resolved, or its
    /// window ended otherwise).
    pub fn length(&self) -> Duration {
        let (_, first_to) = self.first.window();
        let (second_from, second_to) = self.second.window();
        first_to.min(second_to).saturating_sub(second_from)
    }
}

impl HistoryCheck {
    /// Whether no rule was broken.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for HistoryCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.violations.len() {
            0 => f.write_str("no violation")?,
            1 => f.write_str("1 violation:")?,
            n => write!(f, "{n} violations:")?,
        }
        for violation in &self.violations {
            write!(f, "\n  {violation}")?;
        }
        Ok(())
    }
}

/// One broken rule, with what a person needs to find it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// Two believed-held windows of one resource overlap.
    Overlap {
        /// The resource.
        resource: String,
        /// The grant made first.
        first: Grant,
        /// The grant whose window opened inside `first`'s.
        second: Grant,
    },
    /// More holders at once than a semaphore's permits or a reader-writer
    /// lock's rule allow (at the moment `opening`'s window opened).
    TooManyHolders {
        /// The resource.
        resource: String,
        /// The grant whose window opened.
        opening: Grant,
        /// The grants whose windows were open then.
        open: Vec<Grant>,
    },
    /// A counter kept under the lock ended below (or above) the number of
    /// writes made under it.
    LostUpdate {
        /// The resource.
        resource: String,
        /// The counter's final value.
        counter: u64,
        /// How many grants wrote.
        writes: u64,
    },
    /// A fence not greater than the one granted before it.
    FenceBackwards {
        /// The resource.
        resource: String,
        /// The grant made first.
        earlier: Grant,
        /// The next fenced grant, with a fence not above `earlier`'s.
        later: Grant,
    },
    /// An attempt asked for and granted inside a majority outage.
    GrantDuringMajorityOutage {
        /// The grant.
        grant: Grant,
        /// The outage.
        outage: Outage,
    },
    /// A deadline later than the attempt's start plus the ttl.
    DeadlinePastTtl {
        /// The grant.
        grant: Grant,
    },
    /// The library's start of the attempt lies outside the call.
    StartOutsideCall {
        /// The grant.
        grant: Grant,
    },
    /// An auto-extended lock lost with no majority outage, stall or
    /// starved majority in the ttl before.
    LossWithMajorityUp {
        /// The loss.
        loss: Loss,
        /// The faults in the ttl before it.
        faults: Vec<Fault>,
    },
    /// An error the library does not document for the call.
    UndocumentedError {
        /// The call.
        op: Op,
    },
    /// A node held the key of a released lock once the run had settled.
    LeftBehind {
        /// The key.
        leftover: Leftover,
        /// The grant it belongs to, released before it was read.
        grant: Grant,
    },
    /// A failed single attempt that took longer than the failure bound.
    SlowFailure {
        /// The call.
        op: Op,
        /// The bound.
        bound: Duration,
    },
}

impl Violation {
    /// The rule broken, as a short stable name (`overlap`, `lost_update`,
    /// …), e.g. for a summary line per run.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Overlap { .. } => "overlap",
            Violation::TooManyHolders { .. } => "too_many_holders",
            Violation::LostUpdate { .. } => "lost_update",
            Violation::FenceBackwards { .. } => "fence_backwards",
            Violation::GrantDuringMajorityOutage { .. } => "grant_during_majority_outage",
            Violation::DeadlinePastTtl { .. } => "deadline_past_ttl",
            Violation::StartOutsideCall { .. } => "start_outside_call",
            Violation::LossWithMajorityUp { .. } => "loss_with_majority_up",
            Violation::UndocumentedError { .. } => "undocumented_error",
            Violation::SlowFailure { .. } => "slow_failure",
            Violation::LeftBehind { .. } => "left_behind",
        }
    }
}

/// A time as milliseconds from the origin.
struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}ms", self.0.as_secs_f64() * 1000.0)
    }
}

/// A grant as one line.
struct Show<'a>(&'a Grant);

impl fmt::Display for Show<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        write!(f, "client {}, token {}…", g.client, g.token)?;
        if let Some(fence) = g.fence {
            write!(f, ", fence {fence}")?;
        }
        write!(
            f,
            ": invoked {}, granted {}, deadline {}, release called {}{}",
            Ms(g.invoked),
            Ms(g.granted),
            Ms(g.deadline),
            Ms(g.release_called),
            if g.wrote { ", wrote" } else { "" }
        )
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap { .. }
            | Violation::TooManyHolders { .. }
            | Violation::LostUpdate { .. }
            | Violation::FenceBackwards { .. } => self.fmt_resource(f),
            _ => self.fmt_event(f),
        }
    }
}

impl Violation {
    /// A violation of a resource's rules: windows, counter, fences.
    fn fmt_resource(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                resource,
                first,
                second,
            } => write!(
                f,
                "overlapping windows on {resource}:\n    {}\n    {}",
                Show(first),
                Show(second)
            ),
            Violation::TooManyHolders {
                resource,
                opening,
                open,
            } => {
                write!(
                    f,
                    "{} holders at once on {resource} ({:?} opening):\n    {}",
                    open.len() + 1,
                    opening.share,
                    Show(opening)
                )?;
                for g in open {
                    write!(f, "\n    {:?} {}", g.share, Show(g))?;
                }
                Ok(())
            }
            Violation::LostUpdate {
                resource,
                counter,
                writes,
            } => write!(
                f,
                "counter of {resource} is {counter} but {writes} grants wrote: an update was lost"
            ),
            Violation::FenceBackwards {
                resource,
                earlier,
                later,
            } => write!(
                f,
                "fences on {resource} not increasing in grant order: {:?} then {:?}\n    {}\n    {}",
                earlier.fence,
                later.fence,
                Show(earlier),
                Show(later)
            ),
            _ => Ok(()),
        }
    }

    /// A violation by one grant, loss or call.
    fn fmt_event(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::GrantDuringMajorityOutage { grant, outage } => write!(
                f,
                "granted on {} during a majority outage ({}..{}): {}",
                grant.resource,
                Ms(outage.from),
                Ms(outage.to),
                Show(grant)
            ),
            Violation::DeadlinePastTtl { grant } => write!(
                f,
                "deadline overstated on {} (started {}, ttl {:?}): {}",
                grant.resource,
                Ms(grant.started),
                grant.ttl,
                Show(grant)
            ),
            Violation::StartOutsideCall { grant } => write!(
                f,
                "start outside the call on {} (started {}): {}",
                grant.resource,
                Ms(grant.started),
                Show(grant)
            ),
            Violation::LossWithMajorityUp { loss, faults } => fmt_loss(f, loss, faults),
            Violation::LeftBehind { leftover, grant } => write!(
                f,
                "node {} still held {} of a released lock at {}: {}",
                leftover.node,
                leftover.resource,
                Ms(leftover.at),
                Show(grant)
            ),
            Violation::UndocumentedError { op } => {
                let error = match &op.outcome {
                    Outcome::Undocumented(e) => e.as_str(),
                    _ => "",
                };
                write!(
                    f,
                    "client {} {} {} at {}: undocumented error: {error}",
                    op.client,
                    op.kind,
                    op.resource,
                    Ms(op.start)
                )
            }
            Violation::SlowFailure { op, bound } => write!(
                f,
                "client {} {} {} failed only after {:?} (bound {bound:?}), called at {}",
                op.client,
                op.kind,
                op.resource,
                op.end.saturating_sub(op.start),
                Ms(op.start)
            ),
            _ => Ok(()),
        }
    }
}

/// A loss while a majority was up, with the faults in the ttl before it.
fn fmt_loss(f: &mut fmt::Formatter<'_>, loss: &Loss, faults: &[Fault]) -> fmt::Result {
    write!(
        f,
        "holder {} lost its lock on {} ({}) at {} while a majority of nodes was up; faults in the ttl before:",
        loss.client,
        loss.resource,
        loss.reason,
        Ms(loss.at)
    )?;
    for (i, fault) in faults.iter().enumerate() {
        let sep = if i == 0 { " " } else { ", " };
        write!(
            f,
            "{sep}{} on {:?} {}..{}",
            fault.kind,
            fault.nodes,
            Ms(fault.from),
            Ms(fault.to)
        )?;
    }
    Ok(())
}

/// Judges a history by the rules of the [module docs](super): per grant,
/// the start lies within the call and the deadline within `started +
/// ttl`; per resource, believed-held windows never overlap (or share by
/// their rule), the counter equals the writes, fences increase in grant
/// order; no grant inside a majority outage; no loss while a majority was
/// up; every failure a documented one, in time; nothing left behind. What
/// a wipe of a majority's keys excuses is measured and counted instead.
pub fn check(history: &History) -> HistoryCheck {
    let mut verdict = HistoryCheck::default();
    check_grants(history, &mut verdict.violations);
    check_resources(history, &mut verdict);
    check_outages(history, &mut verdict.violations);
    check_losses(history, &mut verdict);
    check_ops(history, &mut verdict);
    check_leftovers(history, &mut verdict.violations);
    verdict.preempted = history
        .grants
        .iter()
        .filter(|g| g.deadline > g.invoked.saturating_add(g.ttl))
        .count();
    verdict
}

/// Per grant: its start within the call, its deadline within `started +
/// ttl`.
fn check_grants(history: &History, flag: &mut Vec<Violation>) {
    for g in &history.grants {
        // The stricter `deadline <= invoked + ttl` on the client's own
        // clock also needs the client thread not to be preempted between
        // its clock read and the library's: counted, not judged.
        if g.started < g.invoked || g.started > g.granted {
            flag.push(Violation::StartOutsideCall { grant: g.clone() });
        }
        if g.deadline > g.started.saturating_add(g.ttl) {
            flag.push(Violation::DeadlinePastTtl { grant: g.clone() });
        }
    }
}

/// Per resource: windows never overlap (or share by their rule), the
/// counter equals the writes, fences increase in grant order — unless a
/// wipe excuses it (see the [module docs](super)).
fn check_resources(history: &History, verdict: &mut HistoryCheck) {
    let resources: BTreeSet<&str> = history
        .grants
        .iter()
        .map(|g| g.resource.as_str())
        .chain(history.counters.keys().map(String::as_str))
        .collect();
    for resource in resources {
        let mut grants: Vec<&Grant> = history
            .grants
            .iter()
            .filter(|g| g.resource == resource)
            .collect();
        grants.sort_by_key(|g| g.granted);
        let excused_before = verdict.excused_overlaps.len();
        if grants.iter().all(|g| g.share == Share::Alone) {
            overlaps(history, resource, &grants, verdict);
        } else {
            sharing(resource, &grants, &mut verdict.violations);
        }
        if let Some(&counter) = history.counters.get(resource) {
            let writes = grants.iter().filter(|g| g.wrote).count() as u64;
            // Each excused overlap in which both wrote may have lost one.
            let excusable = verdict.excused_overlaps[excused_before..]
                .iter()
                .filter(|o| o.first.wrote && o.second.wrote)
                .count() as u64;
            if counter < writes && writes - counter <= excusable {
                verdict.updates_lost_to_wipes += (writes - counter) as usize;
            } else if counter != writes {
                verdict.violations.push(Violation::LostUpdate {
                    resource: resource.to_owned(),
                    counter,
                    writes,
                });
            }
        }
        let fenced: Vec<&&Grant> = grants.iter().filter(|g| g.fence.is_some()).collect();
        for w in fenced.windows(2).filter(|w| w[0].fence >= w[1].fence) {
            // The counters gone; or the later-granted call's keys wiped on
            // a majority while it was under way, and the earlier granted
            // in that gap with a counter above the one the later call had
            // drawn (its call returns after the other's grant, its fence
            // drawn before it).
            if counters_wiped_between(history, w[0], w[1])
                || wiped_under(history, w[1], w[0]).is_some()
                || own_key_wiped_between(history, w[0], w[1])
            {
                verdict.fences_reset_by_wipes += 1;
                continue;
            }
            verdict.violations.push(Violation::FenceBackwards {
                resource: resource.to_owned(),
                earlier: (*w[0]).clone(),
                later: (*w[1]).clone(),
            });
            break; // the first one only, as before
        }
    }
}

/// The wipe that excuses `second`'s window opening inside `first`'s: it
/// left a majority of the nodes without `first`'s key ([`Wipe::without`]), `first`'s call
/// had begun before it ended, and `second` was granted after it began and
/// within `first`'s ttl after it ended (by then `first`'s renewals, had
/// they put its key back, would have kept `second` out). Needs the node
/// count.
fn wiped_under<'h>(history: &'h History, first: &Grant, second: &Grant) -> Option<&'h Wipe> {
    let nodes = history.nodes?;
    history.wipes.iter().find(|w| {
        first.invoked <= w.to
            && w.from <= second.granted
            && second.granted <= w.to.saturating_add(first.ttl)
            && w.without(&first.resource, &first.token, second.granted)
                .len()
                > nodes / 2
    })
}

/// Whether a wipe of every key (fence counters too) of any node holding
/// the resource came between two fenced grants of it that are next to
/// each other: after `earlier`'s call began, before `later` was granted.
/// One node suffices: two quorums may meet on that node alone, so the
/// later one may read no counter the earlier fence raised. However long
/// the gap, no fenced grant came between them to raise the counters
/// again (a soak under load granted the next fence 650 ms after a
/// `FLUSHALL`, past the 600 ms ttl the rule once bounded it by).
fn counters_wiped_between(history: &History, earlier: &Grant, later: &Grant) -> bool {
    history.wipes.iter().any(|w| {
        w.all_keys
            && earlier.invoked <= w.to
            && w.from <= later.granted
            && !w.nodes_of(&later.resource).is_empty()
    })
}

/// Whether a wipe removed `earlier`'s own key from a node after its call
/// began and before `later` was granted. That node could then grant
/// `later`'s call while `earlier` held, raising its counter before
/// `earlier`'s write-back reached it: the two quorums may meet on that
/// node alone, where `later` draws a counter `earlier`'s fence did not
/// raise (seed 7387122680166939934 of a soak: a `DEL` on one node during
/// the earlier call, and two fences of 935).
fn own_key_wiped_between(history: &History, earlier: &Grant, later: &Grant) -> bool {
    let token: String = earlier.token.chars().take(4).collect();
    !token.is_empty()
        && history.wipes.iter().any(|w| {
            earlier.invoked <= w.to
                && w.from <= later.granted
                && w.removed
                    .iter()
                    .any(|k| k.resource == earlier.resource && k.token == token)
        })
}

/// No grant inside a majority outage.
fn check_outages(history: &History, flag: &mut Vec<Violation>) {
    for outage in &history.outages {
        for g in &history.grants {
            if g.invoked >= outage.from && g.granted <= outage.to {
                flag.push(Violation::GrantDuringMajorityOutage {
                    grant: g.clone(),
                    outage: *outage,
                });
            }
        }
    }
}

/// No loss while a majority was up, unless the process stalled before it
/// or a majority had lost the key (counted instead).
fn check_losses(history: &History, verdict: &mut HistoryCheck) {
    for loss in unexcused_by_outages(history) {
        if wiped_before(history, loss) {
            verdict.losses_after_wipes += 1;
            continue;
        }
        if stalled_before(history, loss) {
            verdict.losses_after_stalls += 1;
            continue;
        }
        if majority_without_key(history, loss) {
            verdict.losses_without_keys += 1;
            continue;
        }
        let faults = history
            .faults
            .iter()
            .filter(|f| f.to.saturating_add(loss.ttl) >= loss.at && f.from <= loss.at)
            .cloned()
            .collect();
        verdict.violations.push(Violation::LossWithMajorityUp {
            loss: loss.clone(),
            faults,
        });
    }
}

/// Every failure a documented one, and a failed `try_lock` within the
/// failure bound unless the process stalled meanwhile (counted instead).
fn check_ops(history: &History, verdict: &mut HistoryCheck) {
    for op in &history.ops {
        if let Outcome::Undocumented(_) = &op.outcome {
            verdict
                .violations
                .push(Violation::UndocumentedError { op: op.clone() });
        }
        if let Some(bound) = history.failure_bound
            && op.kind == OpKind::TryLock
            && matches!(op.outcome, Outcome::Failed(_))
            && op.end.saturating_sub(op.start) > bound
        {
            if stalled_during(history, op.start, op.end) {
                verdict.failures_after_stalls += 1;
                continue;
            }
            verdict.violations.push(Violation::SlowFailure {
                op: op.clone(),
                bound,
            });
        }
    }
}

/// Nothing left behind: no key read once the run had settled is a
/// released lock's.
fn check_leftovers(history: &History, flag: &mut Vec<Violation>) {
    for leftover in &history.leftovers {
        let released = history.grants.iter().find(|g| {
            g.resource == leftover.resource
                && !g.token.is_empty()
                && g.token == leftover.token
                && g.release_called <= leftover.at
        });
        if let Some(grant) = released {
            flag.push(Violation::LeftBehind {
                leftover: leftover.clone(),
                grant: grant.clone(),
            });
        }
    }
}

/// Plain locks: no two windows of `grants` (sorted by grant) overlap,
/// unless a wipe excuses it (measured instead).
fn overlaps(history: &History, resource: &str, grants: &[&Grant], verdict: &mut HistoryCheck) {
    for (i, a) in grants.iter().enumerate() {
        let (a_from, a_to) = a.window();
        for b in grants.iter().skip(i + 1) {
            let (b_from, b_to) = b.window();
            if b_from >= a_to {
                break; // sorted by start: no later window can overlap `a`
            }
            if a_from < b_to && b_from < a_to {
                if let Some(wipe) = wiped_under(history, a, b) {
                    verdict.excused_overlaps.push(ExcusedOverlap {
                        resource: resource.to_owned(),
                        first: (*a).clone(),
                        second: (*b).clone(),
                        wipe: wipe.clone(),
                    });
                    continue;
                }
                verdict.violations.push(Violation::Overlap {
                    resource: resource.to_owned(),
                    first: (*a).clone(),
                    second: (*b).clone(),
                });
            }
        }
    }
}

/// Semaphores and reader-writer locks: at the moment each window opens,
/// the windows open then (including it) must be allowed side by side — at
/// most `n` permits; a writer alone; readers among readers. (The most
/// crowded moment of any set of windows is the opening of one.)
fn sharing(resource: &str, grants: &[&Grant], flag: &mut Vec<Violation>) {
    for (i, a) in grants.iter().enumerate() {
        let (a_from, a_to) = a.window();
        if a_from >= a_to {
            continue;
        }
        let open: Vec<&Grant> = grants
            .iter()
            .enumerate()
            .filter(|&(j, b)| {
                let (b_from, b_to) = b.window();
                j != i && b_from <= a_from && a_from < b_to
            })
            .map(|(_, b)| *b)
            .collect();
        let broken = match a.share {
            Share::Permit(limit) => open.len() + 1 > limit,
            Share::Alone => !open.is_empty(),
            Share::Reader => open.iter().any(|b| b.share == Share::Alone),
        };
        if broken {
            flag.push(Violation::TooManyHolders {
                resource: resource.to_owned(),
                opening: (*a).clone(),
                open: open.into_iter().cloned().collect(),
            });
        }
    }
}

/// Losses with no majority outage in the lock's ttl before them: renewals
/// need a quorum within the validity, so a loss is excused when an outage
/// overlapped the last ttl before it (until a ttl after the quorum was
/// certainly back).
fn unexcused_by_outages(history: &History) -> impl Iterator<Item = &Loss> {
    history.losses.iter().filter(|loss| {
        !history
            .outages
            .iter()
            .any(|o| o.from <= loss.at && loss.at <= o.back.saturating_add(loss.ttl))
    })
}

/// Whether, at one moment of the ttl before `loss`, a majority of the
/// nodes did not hold the holder's key: they had lost it to a restart
/// during the holding (and count as without it from then on), or were
/// down then. Needs at least one key loss: a majority down at once is an
/// outage, judged by its own rule.
fn majority_without_key(history: &History, loss: &Loss) -> bool {
    let Some(nodes) = history.nodes else {
        return false;
    };
    // The holding that was lost: the holder's last grant of the resource.
    let Some(holding) = history
        .grants
        .iter()
        .filter(|g| g.client == loss.client && g.resource == loss.resource && g.granted <= loss.at)
        .max_by_key(|g| g.granted)
    else {
        return false;
    };
    let emptied: Vec<(usize, Duration)> = history
        .key_losses
        .iter()
        .filter(|k| {
            k.resource == loss.resource
                && k.token == holding.token
                && holding.granted <= k.at
                && k.at <= loss.at
        })
        .map(|k| (k.node, k.at))
        .collect();
    if emptied.is_empty() {
        return false;
    }
    let since = loss.at.saturating_sub(loss.ttl);
    // The set only grows at a key loss or when a node goes down: one of
    // those moments (or the ttl's start) is the most crowded.
    let moments = std::iter::once(since)
        .chain(emptied.iter().map(|&(_, at)| at.max(since)))
        .chain(history.down.iter().map(|d| d.from.max(since)))
        .filter(|&t| t <= loss.at);
    moments.into_iter().any(|t| {
        let without: BTreeSet<usize> = emptied
            .iter()
            .filter(|&&(_, at)| at <= t)
            .map(|&(node, _)| node)
            .chain(
                history
                    .down
                    .iter()
                    .filter(|d| d.from <= t && t <= d.to)
                    .map(|d| d.node),
            )
            .collect();
        without.len() > nodes / 2
    })
}

/// Whether a wipe left a majority of the nodes without the lost holding's
/// key within its ttl before `loss` (needs the node count).
fn wiped_before(history: &History, loss: &Loss) -> bool {
    let Some(nodes) = history.nodes else {
        return false;
    };
    // The holding that was lost: the holder's last grant of the resource.
    let token = history
        .grants
        .iter()
        .filter(|g| g.client == loss.client && g.resource == loss.resource && g.granted <= loss.at)
        .max_by_key(|g| g.granted)
        .map_or("", |g| g.token.as_str());
    history.wipes.iter().any(|w| {
        w.from <= loss.at
            && loss.at <= w.to.saturating_add(loss.ttl)
            && w.without(&loss.resource, token, loss.at).len() > nodes / 2
    })
}

/// Whether the client process stalled within `from..=to`.
fn stalled_during(history: &History, from: Duration, to: Duration) -> bool {
    history.stalls.iter().any(|s| s.from <= to && from <= s.to)
}

/// Whether the client process stalled, or a majority of the nodes was
/// starved, within the lock's ttl before `loss`: a renewal then needs
/// answers no node gives within the node timeout, whatever the library
/// does (the "bounded pauses" assumption, for clients and servers alike).
fn stalled_before(history: &History, loss: &Loss) -> bool {
    history
        .stalls
        .iter()
        .chain(&history.starved)
        .any(|&Span { from, to }| to.saturating_add(loss.ttl) >= loss.at && from <= loss.at)
}
