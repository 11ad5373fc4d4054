//! The starvation check of the fair clients' calls.

use super::*;

/// One call for a lock as the history recorded it: its client, when it
/// began (to wait, for a fair call), when it ended, and whether it was
/// granted (then it ended at the grant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Asked {
    pub(super) client: usize,
    pub(super) start: Duration,
    pub(super) end: Duration,
    pub(super) granted: bool,
}

impl Asked {
    pub(super) fn of(op: &Op) -> Self {
        Self {
            client: op.client,
            start: op.start,
            end: op.end,
            granted: op.outcome == Outcome::Ok,
        }
    }
}

impl std::fmt::Display for Asked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let ended = if self.granted { "granted" } else { "gave up" };
        write!(
            f,
            "client {} from {:.1}ms, {ended} at {:.1}ms",
            self.client,
            ms(self.start),
            ms(self.end)
        )
    }
}

/// A fair call and the grants that passed it over while it waited: to
/// calls that began after it did and were granted before it ended.
#[derive(Debug, Clone)]
pub(super) struct PassedOver {
    pub(super) call: Asked,
    pub(super) by: Vec<Asked>,
}

impl std::fmt::Display for PassedOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: passed over {} times", self.call, self.by.len())?;
        for by in &self.by {
            write!(f, "\n      by {by}")?;
        }
        Ok(())
    }
}

/// The starvation check's verdict on one resource.
#[derive(Debug)]
pub(super) struct Fairness {
    pub(super) resource: String,
    /// How many times a fair call may be passed over.
    pub(super) k: usize,
    /// Fair calls that ended, and how many of them were granted.
    pub(super) calls: usize,
    pub(super) granted: usize,
    /// Fair calls not judged: they waited through a majority outage (see
    /// [`REJOIN`]).
    pub(super) excused: usize,
    /// The call passed over most times (the earliest of those).
    pub(super) worst: Option<PassedOver>,
    /// Every fair call passed over more than `k` times.
    pub(super) starved: Vec<PassedOver>,
}

/// How long after a majority outage's quorum is back a fair call is still
/// excused from the starvation check: its manager asks the nodes that came
/// back only once one of its probes answers, and a node's probe backs off
/// up to 2 s (`src/node/health/`); until then the call cannot stand in
/// line on a quorum, and calls of managers whose probes answered sooner
/// pass it — not a defect of the line (seen: a call that began as three
/// of five nodes went down, passed 14 times in the 0.45 s after one came
/// back, while its manager did not ask that node yet).
pub(super) const REJOIN: Duration = Duration::from_millis(2_500);

/// Whether `call` waited through a majority outage of `history`, or the
/// [`REJOIN`] time after it; or through a wipe of lock keys (which may
/// remove the line itself, `FLUSHALL` or an eviction: a line started
/// again), or the [`REJOIN`] time after it.
fn through_an_outage(history: &History, call: &Asked) -> bool {
    history
        .outages
        .iter()
        .any(|outage| call.start < outage.back + REJOIN && call.end > outage.from)
        || history
            .wipes
            .iter()
            .any(|wipe| call.start < wipe.to + REJOIN && call.end > wipe.from)
}

/// The starvation check of `resource`: every fair call on it (an
/// acquisition that waits, [`OpKind::Lock`]) that ended, granted or given
/// up, is passed over by each grant (of any kind) to a call that began
/// after it began and was granted before it ended; more than `k` such
/// grants, and it starved. A call that waited through a majority outage
/// is excused (counted, not judged: see [`REJOIN`]). Pure: it reads the
/// recorded history only.
pub(super) fn starvation(history: &History, resource: &str, k: usize) -> Fairness {
    let ops = || history.ops.iter().filter(|op| op.resource == resource);
    let mut grants: Vec<Asked> = ops()
        .filter(|op| op.kind != OpKind::Release && op.outcome == Outcome::Ok)
        .map(Asked::of)
        .collect();
    grants.sort_by_key(|g| g.start);
    let waits: Vec<Asked> = ops()
        .filter(|op| op.kind == OpKind::Lock)
        .map(Asked::of)
        .collect();
    let mut fairness = Fairness {
        resource: resource.to_owned(),
        k,
        calls: waits.len(),
        granted: waits.iter().filter(|w| w.granted).count(),
        excused: 0,
        worst: None,
        starved: Vec::new(),
    };
    for call in waits {
        if through_an_outage(history, &call) {
            fairness.excused += 1;
            continue;
        }
        let later = grants.partition_point(|g| g.start <= call.start);
        let by: Vec<Asked> = grants[later..]
            .iter()
            .take_while(|g| g.start < call.end)
            .filter(|g| g.end < call.end)
            .copied()
            .collect();
        let passed = PassedOver { call, by };
        if passed.by.len() > k {
            fairness.starved.push(passed.clone());
        }
        let most = fairness.worst.as_ref().map_or(0, |w| w.by.len());
        if fairness.worst.is_none() || passed.by.len() > most {
            fairness.worst = Some(passed);
        }
    }
    fairness
}

impl Fairness {
    /// The most times a call was passed over.
    pub(super) fn most(&self) -> usize {
        self.worst.as_ref().map_or(0, |w| w.by.len())
    }
}

/// The verdict's summary and its worst case (the calls passed over more
/// than `k` times are listed by [`Fairness::starved_text`]).
impl std::fmt::Display for Fairness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} fair calls, {} granted, {} through an outage or a wipe (not judged); passed over at most {} times (k = {})",
            self.resource,
            self.calls,
            self.granted,
            self.excused,
            self.most(),
            self.k
        )?;
        if let Some(worst) = &self.worst
            && !worst.by.is_empty()
        {
            write!(f, "\n    worst: {worst}")?;
        }
        Ok(())
    }
}

impl Fairness {
    /// Every call passed over more than `k` times, one paragraph each.
    pub(super) fn starved_text(&self) -> String {
        self.starved
            .iter()
            .map(|starved| format!("\n    STARVED on {}: {starved}", self.resource))
            .collect()
    }
}

/// The starvation check of every fair resource of a run, with its bound
/// `k`: the number of fair clients on the resource.
///
/// Why that many: a fair call's place is fixed once its ticket stands in
/// line on a quorum (its first round draws the ticket, its second places
/// it and raises the counters, and a call asking later draws a larger
/// one). Before that, other calls may still be ahead: at most one
/// outstanding call of each other fair client (`k - 1`), plus at most one
/// grant that fits entirely inside those two rounds (a grant needs a
/// round, the section and a release). Under faults the line may slip
/// briefly in the ways `docs/fair.md` lists (a node back empty, a waiter
/// stalled past its lease): rare and short, they stay within the bound. A
/// call passed over more often was overtaken by calls that asked after
/// its place was fixed: a fairness defect to look into (the history is
/// saved; the worst case is printed on every run).
pub(super) fn fair_verdicts(history: &History) -> Vec<Fairness> {
    FAIR.iter()
        .map(|&r| starvation(history, RESOURCES[r], fair_clients(r)))
        .collect()
}
