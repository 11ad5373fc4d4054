//! The timelines: SVG written from the history, one per resource, in
//! milliseconds across (the `viewBox`; the page stretches it to its zoom)
//! and pixels down.
//!
//! Stable markers, for tests and for people: `rect.window` per grant
//! (`.violating` when a violation names it), `g.violation-mark` with
//! `data-violation` per violation with a time, `path.fails` with
//! `data-count` per client lane and kind of failure, `rect.fault` per
//! fault and node it hit, `rect.outage` per majority outage, and above the
//! lanes, under the time axis, `span.phase` with `data-at` (ms) per fault
//! begun or healed (`.end`), which the page's script lays out in rows.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use super::{esc, failed_acquisition, ms, resources};
use crate::testkit::history::{Grant, History, HistoryCheck, Loss, Op, Outcome, Violation};

/// A client lane's height, and its bar's.
const LANE: u32 = 14;
const BAR: u32 = 10;
/// A node lane's height (faults, stalls, starved nodes).
const NODE_LANE: u32 = 10;
/// Colours of the fault kinds, in the order of their names.
const PALETTE: [&str; 14] = [
    "#8e24aa", "#f4511e", "#00897b", "#fdd835", "#6d4c41", "#3949ab", "#c0ca33", "#d81b60",
    "#00acc1", "#757575", "#5e35b1", "#7cb342", "#ffb74d", "#f06292",
];

/// Where a violation shows on its resource's timeline.
#[derive(Debug)]
pub(super) struct Mark<'a> {
    pub(super) resource: &'a str,
    pub(super) from: Duration,
    pub(super) to: Duration,
}

/// The place of a violation with a time; a lost update has none (it is
/// about a whole run).
pub(super) fn mark_of(v: &Violation) -> Option<Mark<'_>> {
    fn point(resource: &str, t: Duration) -> Option<Mark<'_>> {
        Some(Mark {
            resource,
            from: t,
            to: t,
        })
    }
    match v {
        Violation::Overlap {
            resource,
            first,
            second,
        } => Some(Mark {
            resource,
            from: second.granted,
            to: first.window().1.min(second.window().1),
        }),
        Violation::TooManyHolders {
            resource,
            opening,
            open,
        } => {
            let end = open
                .iter()
                .map(|g| g.window().1)
                .chain([opening.window().1])
                .min()
                .unwrap_or(opening.granted);
            Some(Mark {
                resource,
                from: opening.granted,
                to: end.max(opening.granted),
            })
        }
        Violation::LostUpdate { .. } => None,
        Violation::FenceBackwards {
            resource, later, ..
        } => point(resource.as_str(), later.granted),
        Violation::GrantDuringMajorityOutage { grant, .. }
        | Violation::DeadlinePastTtl { grant }
        | Violation::StartOutsideCall { grant } => point(grant.resource.as_str(), grant.granted),
        Violation::LossWithMajorityUp { loss, .. } => point(loss.resource.as_str(), loss.at),
        Violation::LeftBehind { leftover, .. } => point(leftover.resource.as_str(), leftover.at),
        Violation::UndocumentedError { op } | Violation::SlowFailure { op, .. } => {
            point(op.resource.as_str(), op.end)
        }
    }
}

/// The grants a violation names: their bars are drawn red.
fn named_grants(v: &Violation) -> Vec<&Grant> {
    match v {
        Violation::Overlap { first, second, .. } => vec![first, second],
        Violation::TooManyHolders { opening, open, .. } => {
            let mut grants = vec![opening];
            grants.extend(open);
            grants
        }
        Violation::FenceBackwards { earlier, later, .. } => vec![earlier, later],
        Violation::GrantDuringMajorityOutage { grant, .. }
        | Violation::DeadlinePastTtl { grant }
        | Violation::StartOutsideCall { grant }
        | Violation::LeftBehind { grant, .. } => vec![grant],
        Violation::LostUpdate { .. }
        | Violation::LossWithMajorityUp { .. }
        | Violation::UndocumentedError { .. }
        | Violation::SlowFailure { .. } => Vec::new(),
    }
}

/// What tells one grant from another in a report.
type GrantKey<'a> = (usize, &'a str, Duration, &'a str);

fn key(g: &Grant) -> GrantKey<'_> {
    (g.client, g.resource.as_str(), g.granted, g.token.as_str())
}

/// A time as an x coordinate.
struct X(Duration);

impl std::fmt::Display for X {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3}", ms(self.0))
    }
}

/// The class of a failed attempt's tick.
fn failure_class(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Failed(kind) if kind == "contended" => "contended",
        Outcome::Failed(kind) if kind == "unavailable" => "unavailable",
        _ => "other",
    }
}

/// What every resource's timeline shares: the history and its verdict,
/// the fault kinds' colours, the grants a violation names, how many node
/// lanes, and the span across.
struct Timelines<'a> {
    history: &'a History,
    verdict: &'a HistoryCheck,
    colour: BTreeMap<&'a str, &'static str>,
    violating: BTreeSet<GrantKey<'a>>,
    nodes: usize,
    span: Duration,
}

/// One resource's timeline: what it shows, and where its lanes are.
struct Timeline<'a> {
    resource: &'a str,
    grants: Vec<&'a Grant>,
    failed: Vec<&'a Op>,
    losses: Vec<&'a Loss>,
    /// Each client's lane, top to bottom.
    lane: BTreeMap<usize, u32>,
    /// Below the clients: a lane per node, one for faults of no node, one
    /// for the client's stalls, one for starved nodes.
    extra: Vec<String>,
    client_height: u32,
    height: u32,
}

impl Timeline<'_> {
    /// The top of a client's lane.
    fn top(&self, client: usize) -> u32 {
        self.lane.get(&client).copied().unwrap_or(0) * LANE
    }

    /// The top of the `n`th lane below the clients.
    fn below(&self, n: usize) -> u32 {
        self.client_height + u32::try_from(n).unwrap_or(0) * NODE_LANE
    }
}

/// Writes the timelines section.
pub(super) fn write(page: &mut String, history: &History, verdict: &HistoryCheck, span: Duration) {
    let kinds: BTreeSet<&str> = history.faults.iter().map(|f| f.kind.as_str()).collect();
    let all = Timelines {
        history,
        verdict,
        colour: kinds
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, PALETTE[i % PALETTE.len()]))
            .collect(),
        violating: verdict
            .violations
            .iter()
            .flat_map(named_grants)
            .map(key)
            .collect(),
        nodes: history
            .faults
            .iter()
            .flat_map(|f| f.nodes.iter().map(|n| n + 1))
            .chain(history.key_losses.iter().map(|k| k.node + 1))
            .chain(history.nodes)
            .max()
            .unwrap_or(0),
        span,
    };
    page.push_str("<section id=\"timelines\"><h2>Timelines</h2>\n");
    page.push_str(
        "<p class=\"note\">A bar is a window in which a client believed it held the lock: \
         from the grant until the earlier of its deadline and its release (or, auto-extended, \
         until it was lost). Two bars of one resource must never overlap in time. \
         Ticks are failed attempts; black ticks, locks lost. \
         Node lanes are shaded while a fault hit the node; a black tick on a node's lane: \
         it came back from a restart without a holder's key. A light red band is a majority outage, lighter while a quorum was coming back (nodes restarting). \
         Under the time axis, each fault is named where it began and where it was healed (dashed); \
         names that do not fit at this zoom show when zoomed in.</p>\n",
    );
    controls(page, &all.colour);
    let axis = axis(span) + &phases(history, span);
    let resources = resources(history);
    if resources.is_empty() {
        page.push_str("<p>Nothing was recorded.</p>\n");
    }
    for (index, resource) in resources.into_iter().enumerate() {
        let timeline = all.timeline(resource);
        all.write_resource(page, &timeline, index, &axis);
    }
    page.push_str("</section>\n");
}

/// The zoom buttons and the legend.
fn controls(page: &mut String, colour: &BTreeMap<&str, &str>) {
    page.push_str(
        "<div class=\"controls\"><button type=\"button\" data-zoom=\"out\" title=\"zoom out\">\u{2212}</button> \
         <span id=\"zoom-level\">1\u{d7}</span> \
         <button type=\"button\" data-zoom=\"in\" title=\"zoom in\">+</button> \
         <button type=\"button\" data-zoom=\"fit\">fit</button><span class=\"legend\">\
         <span><i style=\"background:#4f7cac\"></i>held window</span>\
         <span><i style=\"background:#e53935\"></i>window in a violation</span>\
         <span><i style=\"background:#c4c4c4\"></i>contended</span>\
         <span><i style=\"background:#ef6c00\"></i>unavailable</span>\
         <span><i style=\"background:#6a1b9a\"></i>other failure</span>\
         <span><i style=\"background:#000\"></i>lock lost</span>\
         <span><i style=\"background:rgba(198,40,40,.25)\"></i>majority outage</span>\
         <span><i style=\"background:rgba(198,40,40,.10)\"></i>quorum coming back</span>",
    );
    for (kind, c) in colour {
        let _ = write!(
            page,
            "<span><i style=\"background:{c}\"></i>fault {}</span>",
            esc(kind)
        );
    }
    page.push_str("</span></div>\n");
}

impl<'a> Timelines<'a> {
    /// What `resource`'s timeline shows, and its lanes.
    fn timeline(&self, resource: &'a str) -> Timeline<'a> {
        let history = self.history;
        let grants: Vec<&Grant> = history
            .grants
            .iter()
            .filter(|g| g.resource == resource)
            .collect();
        let failed: Vec<&Op> = history
            .ops
            .iter()
            .filter(|o| o.resource == resource && failed_acquisition(o.kind, &o.outcome))
            .collect();
        let losses: Vec<&Loss> = history
            .losses
            .iter()
            .filter(|l| l.resource == resource)
            .collect();
        let clients: BTreeSet<usize> = grants
            .iter()
            .map(|g| g.client)
            .chain(failed.iter().map(|o| o.client))
            .chain(losses.iter().map(|l| l.client))
            .collect();
        let lane: BTreeMap<usize, u32> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| (*c, u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        let mut extra: Vec<String> = (0..self.nodes).map(|n| format!("node {n}")).collect();
        if history.faults.iter().any(|f| f.nodes.is_empty()) {
            extra.push("other faults".to_owned());
        }
        if !history.stalls.is_empty() {
            extra.push("client stalls".to_owned());
        }
        if !history.starved.is_empty() {
            extra.push("nodes starved".to_owned());
        }
        let client_height = u32::try_from(clients.len()).unwrap_or(u32::MAX) * LANE;
        let height = client_height + u32::try_from(extra.len()).unwrap_or(0) * NODE_LANE;
        Timeline {
            resource,
            grants,
            failed,
            losses,
            lane,
            extra,
            client_height,
            height,
        }
    }

    /// One resource's section: its lane labels, then its SVG, bottom layer
    /// first (lanes, outages, faults, stalls, failed attempts, windows,
    /// losses, and the violations on top).
    fn write_resource(&self, page: &mut String, t: &Timeline<'_>, index: usize, axis: &str) {
        let resource = esc(t.resource);
        let _ = write!(
            page,
            "<section class=\"resource\" id=\"resource-{index}\" data-resource=\"{resource}\">\
             <h3>{resource} <small class=\"note\">{} grants, {} failed attempts, {} locks lost</small></h3>\n\
             <div class=\"lanes\"><div class=\"labels\">",
            t.grants.len(),
            t.failed.len(),
            t.losses.len()
        );
        for client in t.lane.keys() {
            let _ = write!(page, "<div>client {client}</div>");
        }
        for name in &t.extra {
            let _ = write!(page, "<div class=\"node\">{}</div>", esc(name));
        }
        let (width, height) = (X(self.span), t.height);
        let _ = writeln!(
            page,
            "</div><div class=\"scroller\"><div class=\"track\">{axis}\
             <svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" \
             preserveAspectRatio=\"none\" height=\"{height}\" data-resource=\"{resource}\">"
        );
        for i in (1..t.lane.len()).step_by(2) {
            let y = u32::try_from(i).unwrap_or(0) * LANE;
            let _ = write!(
                page,
                "<rect class=\"lane-bg\" x=\"0\" y=\"{y}\" width=\"{width}\" height=\"{LANE}\"/>"
            );
        }
        self.outages(page, t);
        self.faults(page, t);
        self.key_losses(page, t);
        self.spans(page, t);
        fail_ticks(page, t);
        self.windows(page, t);
        losses(page, t);
        self.violations(page, t);
        page.push_str("</svg></div></div></div></section>\n");
    }

    fn outages(&self, page: &mut String, t: &Timeline<'_>) {
        for outage in &self.history.outages {
            let _ = writeln!(
                page,
                "<rect class=\"outage\" x=\"{}\" y=\"0\" width=\"{}\" height=\"{}\">\
                 <title>majority outage {:.1}\u{2013}{:.1} ms (a quorum back at {:.1} ms)</title></rect>",
                X(outage.from),
                X(outage.to.saturating_sub(outage.from)),
                t.height,
                ms(outage.from),
                ms(outage.to),
                ms(outage.back)
            );
            // The nodes' lanes show them down until they are back: so does
            // the band, lighter where a quorum was coming back.
            if outage.back > outage.to {
                let _ = writeln!(
                    page,
                    "<rect class=\"outage-back\" x=\"{}\" y=\"0\" width=\"{}\" height=\"{}\">\
                     <title>a quorum coming back {:.1}\u{2013}{:.1} ms (nodes restarting)</title></rect>",
                    X(outage.to),
                    X(outage.back.saturating_sub(outage.to)),
                    t.height,
                    ms(outage.to),
                    ms(outage.back)
                );
            }
        }
    }

    /// Faults, per node lane (a fault of no node in its own lane).
    fn faults(&self, page: &mut String, t: &Timeline<'_>) {
        for fault in &self.history.faults {
            let fill = self
                .colour
                .get(fault.kind.as_str())
                .copied()
                .unwrap_or("#757575");
            let on =
                nodes_named(&fault.nodes).unwrap_or_else(|| "no node in particular".to_owned());
            let title = format!(
                "{} on {on}: {:.1}\u{2013}{:.1} ms",
                esc(&fault.kind),
                ms(fault.from),
                ms(fault.to)
            );
            let lanes: Vec<usize> = if fault.nodes.is_empty() {
                vec![self.nodes]
            } else {
                fault.nodes.clone()
            };
            for n in lanes {
                let _ = writeln!(
                    page,
                    "<rect class=\"fault\" data-kind=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\"><title>{title}</title></rect>",
                    esc(&fault.kind),
                    X(fault.from),
                    t.below(n) + 1,
                    X(fault.to.saturating_sub(fault.from)),
                    NODE_LANE - 2
                );
            }
        }
    }

    /// This resource's keys that nodes lost to a restart: a tick on the
    /// node's lane.
    fn key_losses(&self, page: &mut String, t: &Timeline<'_>) {
        for k in &self.history.key_losses {
            if k.resource != t.resource {
                continue;
            }
            let _ = writeln!(
                page,
                "<path class=\"key-loss\" data-node=\"{}\" d=\"M{} {}v{NODE_LANE}\"><title>node {} came back from a restart without the key of token {} (lost at {:.1} ms)</title></path>",
                k.node,
                X(k.at),
                t.below(k.node),
                k.node,
                esc(&k.token),
                ms(k.at)
            );
        }
    }

    /// The client's stalls and the nodes' starvation, each in its lane.
    fn spans(&self, page: &mut String, t: &Timeline<'_>) {
        let history = self.history;
        let unplaced = history.faults.iter().any(|f| f.nodes.is_empty());
        let mut next = self.nodes + usize::from(unplaced);
        for (spans, class, what) in [
            (&history.stalls, "stall", "client stalled"),
            (&history.starved, "starved", "a majority of nodes starved"),
        ] {
            if spans.is_empty() {
                continue;
            }
            let y = t.below(next);
            for s in spans {
                let _ = writeln!(
                    page,
                    "<rect class=\"{class}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{what} {:.1}\u{2013}{:.1} ms</title></rect>",
                    X(s.from),
                    y + 1,
                    X(s.to.saturating_sub(s.from)),
                    NODE_LANE - 2,
                    ms(s.from),
                    ms(s.to)
                );
            }
            next += 1;
        }
    }

    /// The believed-held windows, red when a violation names them.
    fn windows(&self, page: &mut String, t: &Timeline<'_>) {
        for g in &t.grants {
            let (from, to) = g.window();
            let class = if self.violating.contains(&key(g)) {
                "window violating"
            } else {
                "window"
            };
            let fence = g.fence.map_or_else(String::new, |f| format!(", fence {f}"));
            let _ = writeln!(
                page,
                "<rect class=\"{class}\" data-window=\"\" data-client=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{BAR}\">\
                 <title>client {}, token {}\u{2026}{fence}: held {:.3}\u{2013}{:.3} ms (deadline {:.3})</title></rect>",
                g.client,
                X(from),
                t.top(g.client) + (LANE - BAR) / 2,
                X(to.saturating_sub(from)),
                g.client,
                esc(&g.token),
                ms(from),
                ms(to),
                ms(g.deadline)
            );
        }
    }

    /// The violations with a time on this resource, across every lane.
    fn violations(&self, page: &mut String, t: &Timeline<'_>) {
        let height = t.height;
        for (i, v) in self.verdict.violations.iter().enumerate() {
            let Some(mark) = mark_of(v).filter(|m| m.resource == t.resource) else {
                continue;
            };
            let first_line = v.to_string();
            let first_line = first_line.lines().next().unwrap_or_default();
            let _ = writeln!(
                page,
                "<g class=\"violation-mark\" data-violation=\"{i}\" data-kind=\"{}\"><title>{}</title>\
                 <rect x=\"{}\" y=\"0\" width=\"{}\" height=\"{height}\"/>\
                 <line x1=\"{}\" y1=\"0\" x2=\"{}\" y2=\"{height}\"/></g>",
                v.kind(),
                esc(first_line),
                X(mark.from),
                X(mark.to.saturating_sub(mark.from)),
                X(mark.from),
                X(mark.from)
            );
        }
    }
}

/// Failed attempts: one path per client and kind of failure, under the
/// windows.
fn fail_ticks(page: &mut String, t: &Timeline<'_>) {
    let mut ticks: BTreeMap<(usize, &'static str), (String, usize)> = BTreeMap::new();
    for op in &t.failed {
        let entry = ticks
            .entry((op.client, failure_class(&op.outcome)))
            .or_default();
        let _ = write!(
            entry.0,
            "M{} {}v{BAR}",
            X(op.end),
            t.top(op.client) + (LANE - BAR) / 2
        );
        entry.1 += 1;
    }
    for ((client, class), (d, count)) in &ticks {
        let _ = writeln!(
            page,
            "<path class=\"fails {class}\" data-client=\"{client}\" data-count=\"{count}\" d=\"{d}\"><title>client {client}: {count} attempts failed ({class})</title></path>"
        );
    }
}

/// Lost locks, as black ticks across their client's lane.
fn losses(page: &mut String, t: &Timeline<'_>) {
    for loss in &t.losses {
        let _ = writeln!(
            page,
            "<path class=\"loss\" data-client=\"{}\" d=\"M{} {}v{LANE}\"><title>client {} lost its lock ({}) at {:.1} ms</title></path>",
            loss.client,
            X(loss.at),
            t.top(loss.client),
            loss.client,
            loss.reason,
            ms(loss.at)
        );
    }
}

/// The time axis above a timeline: about ten labels at round times, placed
/// by percentage so that they follow the zoom (the page's script keeps
/// each inside the axis: the last would be cut off centred on its time).
fn axis(span: Duration) -> String {
    let total = ms(span).max(1.0);
    let raw = total / 10.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let mut out = String::from("<div class=\"axis\">");
    let mut t = 0.0;
    let mut first = true;
    while t <= total {
        let label = if step >= 1000.0 {
            format!("{:.0} s", t / 1000.0)
        } else if step >= 100.0 {
            format!("{:.1} s", t / 1000.0)
        } else if step >= 1.0 {
            format!("{t:.0} ms")
        } else {
            format!("{t:.2} ms")
        };
        let class = if first { " class=\"first\"" } else { "" };
        first = false;
        let _ = write!(
            out,
            "<span{class} style=\"left:{:.3}%\">{label}</span>",
            t / total * 100.0
        );
        t += step;
    }
    out.push_str("</div>");
    out
}

/// `node 2`, `nodes 3, 4`; `None` for no node.
fn nodes_named(nodes: &[usize]) -> Option<String> {
    match nodes {
        [] => None,
        [node] => Some(format!("node {node}")),
        nodes => Some(format!(
            "nodes {}",
            nodes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The run's phases under the time axis: each fault named where it began
/// (`KillRestart node 2`) and where it was healed (`node 2 healed`), in
/// time order, placed by percentage like the axis' labels. The page's
/// script puts them in rows so that none overlaps another, and hides
/// those that do not fit at the zoom shown (`data-hidden` says how many).
fn phases(history: &History, span: Duration) -> String {
    let mut phases: Vec<(Duration, bool, String, String)> = Vec::new();
    for fault in &history.faults {
        let kind = esc(&fault.kind);
        let on = nodes_named(&fault.nodes);
        let title = format!(
            "{kind} on {}: {:.1}\u{2013}{:.1} ms",
            on.as_deref().unwrap_or("no node in particular"),
            ms(fault.from),
            ms(fault.to)
        );
        let began = match &on {
            Some(on) => format!("{kind} {on}"),
            None => kind.clone(),
        };
        let healed = format!("{} healed", on.unwrap_or(kind));
        phases.push((fault.from, false, began, title.clone()));
        phases.push((fault.to, true, healed, title));
    }
    if phases.is_empty() {
        return String::new();
    }
    phases.sort_by_key(|p| (p.0, p.1));
    let total = ms(span).max(1.0);
    let mut out = String::from("<div class=\"phases\">");
    for (at, end, text, title) in phases {
        let _ = write!(
            out,
            "<span class=\"phase{}\" data-at=\"{}\" style=\"left:{:.3}%\" title=\"{title}\">{text}</span>",
            if end { " end" } else { "" },
            X(at),
            ms(at) / total * 100.0
        );
    }
    out.push_str("</div>");
    out
}
