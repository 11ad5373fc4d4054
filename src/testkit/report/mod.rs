//! A [`History`] and its [`HistoryCheck`] drawn as one self-contained HTML page
//! (feature `testkit`): a report to look at.
//!
//! The page needs no network and no file beside it: its styles, its
//! script and its pictures (SVG) are inline. It shows
//!
//! - a summary table: the title, the seed and the command that replays
//!   the run, grants, calls by outcome, faults by kind, and the
//!   violations, by kind, with their count in `#violation-count`;
//! - every violation as the checker words it, each with a button that
//!   zooms the timelines to it;
//! - per resource, a timeline: one lane per client with its
//!   believed-held windows as bars (`rect.window`; a bar of a window
//!   that breaks a rule is red, `rect.window.violating`), its failed
//!   attempts as ticks, its lost locks as crosses; one lane per node with
//!   the faults that hit it shaded by kind, majority outages shaded
//!   across the whole timeline, and the client's stalls and the starved
//!   nodes in lanes of their own. Under the time axis, each fault is
//!   named where it began and where it was healed (`span.phase`), in up
//!   to three rows so that no two names overlap (a name that fits in
//!   none shows when zoomed in). Each violation with a time has a mark
//!   (`g.violation-mark`, with `data-violation` its index in the verdict)
//!   across the timeline: red, and at least a few pixels wide however
//!   far the page is zoomed out. The timelines share one zoom (buttons,
//!   or a click on a violation) and one scroll position;
//! - acquire and release latency over time (median and 99th percentile
//!   per time slice), and grants and failed attempts per second, drawn by
//!   [`plotters`] as SVG.
//!
//! The timelines are SVG this module writes itself: every bar and mark is
//! an element with a stable class a test (or a person with the browser's
//! inspector) can count, which plotters' elements cannot be given. The
//! charts are plotters': axes, ticks and legends are what it does well.
//!
//! The page's first script records any script error, unhandled promise
//! rejection or `console.error` in the attributes `data-errors` (their
//! count) and `data-error-text` of `<html>`; its last sets `data-ready`
//! and counts what the browser rendered into `<body>`'s `data-windows`,
//! `data-violation-marks` and `data-violation-items`. A headless browser's
//! DOM dump shows both (the crate's own tests do so with Chromium).
//!
//! # Examples
//!
//! ```
//! use quorumlock::testkit::history::{Grant, History, check};
//! use quorumlock::testkit::report::Page;
//! use std::time::Duration;
//!
//! let ms = Duration::from_millis;
//! let mut history = History::default();
//! history.grants.push(Grant::new(0, "jobs:a", ms(0), ms(150)));
//! history.grants.push(Grant::new(1, "jobs:a", ms(100), ms(200))); // overlaps
//! let verdict = check(&history);
//! let page = Page::new(&history, &verdict)
//!     .title("two clients, one overlap")
//!     .html();
//! assert_eq!(page.matches("<rect class=\"window").count(), 2);
//! assert!(page.contains("id=\"violation-count\" data-count=\"1\""));
//! ```
//!
//! Write a saved history's report (the chaos tests do so for a failed run):
//!
//! ```no_run
//! use quorumlock::testkit::history::{History, check};
//! use quorumlock::testkit::report::Page;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = std::io::BufReader::new(std::fs::File::open("chaos-42.jsonl")?);
//! let history = History::read_jsonl(file)?;
//! let verdict = check(&history);
//! Page::new(&history, &verdict).write("chaos-42.html")?;
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::history::{History, HistoryCheck, OpKind, Outcome};

mod charts;
#[cfg(test)]
mod tests;
mod timeline;

/// A report of one history: what to call it, and how to replay it.
/// [`html`](Page::html) draws it, [`write`](Page::write) saves it.
#[derive(Debug, Clone)]
pub struct Page<'a> {
    history: &'a History,
    verdict: &'a HistoryCheck,
    title: String,
    replay: Option<String>,
}

impl<'a> Page<'a> {
    /// A report of `history`, judged as `verdict` (what
    /// [`check`](super::history::check) returned for it).
    pub fn new(history: &'a History, verdict: &'a HistoryCheck) -> Self {
        let title = match history.seed {
            Some(seed) => format!("quorumlock history, seed {seed}"),
            None => "quorumlock history".to_owned(),
        };
        Page {
            history,
            verdict,
            title,
            replay: None,
        }
    }

    /// The page's title and heading (by default: "quorumlock history",
    /// with the seed if the history has one).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    /// The command that replays the run (shown in the summary), e.g.
    /// `QUORUMLOCK_CHAOS_SEED=42 cargo test …`.
    pub fn replay(mut self, command: impl Into<String>) -> Self {
        self.replay = Some(command.into());
        self
    }

    /// The page, as one self-contained HTML document.
    pub fn html(&self) -> String {
        let history = self.history;
        let span = span_of(history);
        let mut page = String::with_capacity(64 * 1024 + 160 * history.grants.len());
        let title = esc(&self.title);
        let _ = write!(
            page,
            "<!DOCTYPE html>\n<html lang=\"en\" data-errors=\"0\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{title}</title>\n<script>{ERRORS_JS}</script>\n<style>{CSS}</style>\n</head>\n\
             <body data-span-ms=\"{:.3}\">\n",
            ms(span)
        );
        let verdict = self.verdict;
        let n = verdict.violations.len();
        let (class, said) = match n {
            0 => ("ok", "no violation".to_owned()),
            1 => ("bad", "1 violation".to_owned()),
            n => ("bad", format!("{n} violations")),
        };
        let _ = write!(
            page,
            "<header class=\"{class}\"><h1>{title}</h1><p class=\"verdict\">{said}</p></header>\n<main>\n"
        );
        self.summary(&mut page, span);
        violations(&mut page, verdict);
        timeline::write(&mut page, history, verdict, span);
        page.push_str("<section id=\"charts\"><h2>Latency and rate</h2>\n");
        charts::write(&mut page, history, span);
        page.push_str("</section>\n</main>\n");
        let _ = write!(page, "<script>{MAIN_JS}</script>\n</body>\n</html>\n");
        page
    }

    /// Writes [`html`](Page::html) to `path`.
    ///
    /// # Errors
    ///
    /// The file could not be written.
    pub fn write(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.html())
    }

    fn summary(&self, page: &mut String, span: Duration) {
        let history = self.history;
        let verdict = self.verdict;
        page.push_str("<section id=\"summary\"><h2>Summary</h2>\n<table class=\"summary\">\n");
        let mut row = |name: &str, value: String| {
            let _ = writeln!(page, "<tr><th>{}</th><td>{value}</td></tr>", esc(name));
        };
        row(
            "seed",
            history.seed.map_or_else(
                || {
                    "none: a fixed fault schedule, the same on every run (only its timing differs)"
                        .to_owned()
                },
                |s| format!("<code>{s}</code>"),
            ),
        );
        if let Some(replay) = &self.replay {
            row(
                "replay",
                format!("<code class=\"replay\">{}</code>", esc(replay)),
            );
        }
        row("recorded", format!("{:.3} s", span.as_secs_f64()));
        let mut by_resource: BTreeMap<&str, usize> = BTreeMap::new();
        for g in &history.grants {
            *by_resource.entry(g.resource.as_str()).or_default() += 1;
        }
        let per: Vec<String> = by_resource
            .iter()
            .map(|(r, n)| format!("{} {n}", esc(r)))
            .collect();
        row(
            "grants",
            format!(
                "<span id=\"grant-count\" data-count=\"{}\">{}</span> ({})",
                history.grants.len(),
                history.grants.len(),
                per.join(", ")
            ),
        );
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for op in &history.ops {
            let outcome = match &op.outcome {
                Outcome::Ok => "ok".to_owned(),
                Outcome::Failed(kind) => kind.clone(),
                Outcome::Ambiguous(kind) => format!("ambiguous ({kind})"),
                Outcome::Undocumented(_) => "undocumented error".to_owned(),
            };
            *outcomes
                .entry(format!("{} {outcome}", op.kind))
                .or_default() += 1;
        }
        row(
            "calls",
            if outcomes.is_empty() {
                "none recorded".to_owned()
            } else {
                format!(
                    "{}<br><small>ambiguous (partial release): the release returned once a quorum deleted the token, before every node had answered; the others were followed in the background. Not a failure.</small>",
                    counts(&outcomes)
                )
            },
        );
        let mut faults: BTreeMap<String, usize> = BTreeMap::new();
        for fault in &history.faults {
            *faults.entry(fault.kind.clone()).or_default() += 1;
        }
        row(
            "faults",
            format!(
                "<span id=\"fault-count\" data-count=\"{}\">{}</span>{}",
                history.faults.len(),
                history.faults.len(),
                if faults.is_empty() {
                    String::new()
                } else {
                    format!(": {}", counts(&faults))
                }
            ),
        );
        row("majority outages", history.outages.len().to_string());
        row(
            "locks lost",
            format!(
                "{} ({} after a client stall or starved nodes, {} after a majority lost the holder's key or was down: counted, not judged)",
                history.losses.len(),
                verdict.losses_after_stalls,
                verdict.losses_without_keys
            ),
        );
        row(
            "client stalls, starved nodes",
            format!("{}, {}", history.stalls.len(), history.starved.len()),
        );
        row(
            "grants counted as preempted",
            format!(
                "{} (the guard's deadline lies past the time the test read before calling + ttl: the client thread was descheduled between that clock read and the call for longer than the drift allowance; the deadline is still within the library's own start + ttl, so this is counted, not judged as a violation)",
                verdict.preempted
            ),
        );
        for (resource, value) in &history.counters {
            let writes = history
                .grants
                .iter()
                .filter(|g| &g.resource == resource && g.wrote)
                .count();
            row(
                &format!("counter of {resource}"),
                format!("{value} ({writes} writes)"),
            );
        }
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for v in &verdict.violations {
            *kinds.entry(v.kind().to_owned()).or_default() += 1;
        }
        let n = verdict.violations.len();
        row(
            "violations",
            format!(
                "<span id=\"violation-count\" data-count=\"{n}\" class=\"{}\">{n}</span>{}",
                if n == 0 { "ok" } else { "bad" },
                if kinds.is_empty() {
                    String::new()
                } else {
                    format!(": {}", counts(&kinds))
                }
            ),
        );
        page.push_str("</table>\n</section>\n");
    }
}

/// The page of `history` judged as `verdict`, with the default title:
/// `Page::new(history, verdict).html()`.
pub fn html(history: &History, verdict: &HistoryCheck) -> String {
    Page::new(history, verdict).html()
}

/// The violations, as the checker words them, each with a button that
/// zooms the timelines to its mark.
fn violations(page: &mut String, verdict: &HistoryCheck) {
    page.push_str("<section id=\"violations\"><h2>Violations</h2>\n");
    if verdict.violations.is_empty() {
        page.push_str("<p class=\"ok\">None: every rule held.</p>\n");
    } else {
        page.push_str("<ol>\n");
        for (i, v) in verdict.violations.iter().enumerate() {
            let at = timeline::mark_of(v).map_or_else(String::new, |mark| {
                format!(
                    " <button type=\"button\" class=\"goto\" data-goto=\"{i}\" data-at=\"{:.3}\">show at {:.1} ms</button>",
                    ms(mark.from),
                    ms(mark.from)
                )
            });
            let _ = writeln!(
                page,
                "<li class=\"violation-item\" data-violation=\"{i}\" data-kind=\"{}\">{at}<pre>{}</pre></li>",
                v.kind(),
                esc(&v.to_string())
            );
        }
        page.push_str("</ol>\n");
    }
    if verdict.preempted > 0
        || verdict.losses_after_stalls > 0
        || verdict.losses_without_keys > 0
        || verdict.failures_after_stalls > 0
    {
        let _ = writeln!(
            page,
            "<p>Counted, not judged: {} grants counted as preempted, {} losses after a stall, {} losses after a majority lost the holder's key or was down, {} slow failures across a stall.</p>",
            verdict.preempted,
            verdict.losses_after_stalls,
            verdict.losses_without_keys,
            verdict.failures_after_stalls
        );
    }
    page.push_str("</section>\n");
}

/// `a 3, b 4`.
fn counts(counts: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = counts
        .iter()
        .map(|(k, n)| format!("{} {n}", esc(k)))
        .collect();
    parts.join(", ")
}

/// How long the history lasts: up to its last recorded time (at least
/// a millisecond, so that an empty history still has a scale).
fn span_of(history: &History) -> Duration {
    let grants = history
        .grants
        .iter()
        .flat_map(|g| [g.granted, g.window().1, g.release_called.min(g.deadline)]);
    let ops = history.ops.iter().map(|o| o.end);
    let faults = history.faults.iter().map(|f| f.to);
    let outages = history.outages.iter().map(|o| o.back.max(o.to));
    let losses = history.losses.iter().map(|l| l.at);
    let spans = history.stalls.iter().chain(&history.starved).map(|s| s.to);
    grants
        .chain(ops)
        .chain(faults)
        .chain(outages)
        .chain(losses)
        .chain(spans)
        .max()
        .unwrap_or_default()
        .max(Duration::from_millis(1))
}

/// A duration in milliseconds.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Whether an operation is a failed acquisition (a tick on the timeline).
fn failed_acquisition(kind: OpKind, outcome: &Outcome) -> bool {
    kind != OpKind::Release && *outcome != Outcome::Ok
}

/// Text made safe for HTML and SVG (text and attribute values).
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The resources a history names, sorted.
fn resources(history: &History) -> BTreeSet<&str> {
    history
        .grants
        .iter()
        .map(|g| g.resource.as_str())
        .chain(history.ops.iter().map(|o| o.resource.as_str()))
        .chain(history.losses.iter().map(|l| l.resource.as_str()))
        .collect()
}

/// Records errors before anything else runs: script errors, unhandled
/// rejections and `console.error`, into `<html data-errors>` and
/// `data-error-text`.
const ERRORS_JS: &str = r#"
(function () {
  var root = document.documentElement, seen = [];
  function note(text) {
    seen.push(String(text));
    root.setAttribute('data-errors', String(seen.length));
    root.setAttribute('data-error-text', seen.join(' | '));
  }
  window.addEventListener('error', function (e) {
    note('error: ' + (e.message || e.type) + (e.lineno ? ' (line ' + e.lineno + ')' : ''));
  });
  window.addEventListener('unhandledrejection', function (e) {
    note('unhandled rejection: ' + e.reason);
  });
  var original = console.error;
  console.error = function () {
    note('console.error: ' + Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
})();
"#;

/// Zoom and scroll shared by the timelines, the violations' buttons, and
/// the counts of what was rendered.
const MAIN_JS: &str = r#"
(function () {
  var scrollers = Array.prototype.slice.call(document.querySelectorAll('.scroller'));
  var zoom = 1, syncing = false;
  var span = Number(document.body.getAttribute('data-span-ms')) || 1;
  // The time axis' labels are centred on their time, but kept inside the
  // axis (whose overflow is hidden): the last is not cut off.
  function fitAxes() {
    document.querySelectorAll('.axis').forEach(function (axis) {
      var width = axis.clientWidth;
      axis.querySelectorAll('span').forEach(function (label) {
        var x = label.offsetLeft, w = label.offsetWidth;
        var left = Math.max(0, Math.min(width - w, x - w / 2));
        label.style.transform = 'translateX(' + (left - x) + 'px)';
      });
    });
  }
  // The phases under the axis, in time order: each starts at its time (or
  // ends there, flipped, where it would pass the end), in the first of
  // three rows where it clears the one before; one that fits in none is
  // hidden until a zoom makes room. The lane labels follow the rows.
  var ROWS = 3, ROW = 14, GAP = 6;
  function layoutPhases() {
    document.querySelectorAll('.phases').forEach(function (box) {
      var width = box.clientWidth, ends = [], hidden = 0;
      var phases = Array.prototype.slice.call(box.querySelectorAll('.phase'));
      phases.forEach(function (p) { p.classList.remove('flip', 'hidden'); });
      var widths = phases.map(function (p) { return p.offsetWidth; });
      phases.forEach(function (p, i) {
        var w = widths[i], x = Number(p.getAttribute('data-at')) / span * width;
        var flip = x + w > width, left = flip ? x - w : x, row = 0;
        while (row < ends.length && ends[row] + GAP > left) { row++; }
        if (row >= ROWS || left < 0) {
          p.classList.add('hidden');
          hidden++;
          return;
        }
        ends[row] = left + w;
        if (flip) { p.classList.add('flip'); }
        p.style.top = (row * ROW) + 'px';
      });
      box.style.height = (Math.max(1, ends.length) * ROW) + 'px';
      box.setAttribute('data-hidden', String(hidden));
    });
    document.querySelectorAll('.lanes').forEach(function (lanes) {
      var labels = lanes.querySelector('.labels'), svg = lanes.querySelector('svg.timeline');
      if (labels && svg) {
        labels.style.paddingTop = (svg.getBoundingClientRect().top - lanes.getBoundingClientRect().top) + 'px';
      }
    });
  }
  function apply() {
    scrollers.forEach(function (s) {
      s.querySelector('.track').style.width = (zoom * 100) + '%';
    });
    var label = document.getElementById('zoom-level');
    if (label) { label.textContent = zoom + '\u00d7'; }
    fitAxes();
    layoutPhases();
  }
  function scrollTo(fraction) {
    scrollers.forEach(function (s) {
      s.scrollLeft = fraction * s.scrollWidth - s.clientWidth / 2;
    });
  }
  scrollers.forEach(function (s) {
    s.addEventListener('scroll', function () {
      if (syncing) { return; }
      syncing = true;
      var fraction = s.scrollLeft / Math.max(1, s.scrollWidth);
      scrollers.forEach(function (o) {
        if (o !== s) { o.scrollLeft = fraction * o.scrollWidth; }
      });
      syncing = false;
    });
  });
  function center() {
    var s = scrollers[0];
    return s ? (s.scrollLeft + s.clientWidth / 2) / Math.max(1, s.scrollWidth) : 0.5;
  }
  function setZoom(z, fraction) {
    zoom = Math.min(4096, Math.max(1, z));
    apply();
    scrollTo(fraction);
  }
  document.querySelectorAll('[data-zoom]').forEach(function (b) {
    b.addEventListener('click', function () {
      var how = b.getAttribute('data-zoom');
      var c = center();
      setZoom(how === 'in' ? zoom * 2 : how === 'out' ? zoom / 2 : 1, how === 'fit' ? 0 : c);
    });
  });
  document.querySelectorAll('[data-goto]').forEach(function (b) {
    b.addEventListener('click', function () {
      var at = Number(b.getAttribute('data-at'));
      setZoom(Math.max(zoom, 64), at / span);
      var mark = document.querySelector('.violation-mark[data-violation="' + b.getAttribute('data-goto') + '"]');
      if (mark) {
        mark.closest('section').scrollIntoView();
        document.querySelectorAll('.violation-mark.current').forEach(function (m) { m.classList.remove('current'); });
        mark.classList.add('current');
      }
    });
  });
  apply();
  var body = document.body;
  body.setAttribute('data-windows', String(document.querySelectorAll('svg rect.window').length));
  body.setAttribute('data-violating-windows', String(document.querySelectorAll('svg rect.window.violating').length));
  var marked = {};
  document.querySelectorAll('svg .violation-mark').forEach(function (m) { marked[m.getAttribute('data-violation')] = true; });
  body.setAttribute('data-violation-marks', String(Object.keys(marked).length));
  body.setAttribute('data-violation-items', String(document.querySelectorAll('li.violation-item').length));
  var count = document.getElementById('violation-count');
  body.setAttribute('data-violation-count', count ? count.getAttribute('data-count') : 'missing');
  body.setAttribute('data-charts', String(document.querySelectorAll('#charts svg').length));
  body.setAttribute('data-ready', '1');
})();
"#;

const CSS: &str = r#"
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2327; background: #fff; }
header h1 { margin: 0; font-size: 20px; }
header .verdict { margin: 4px 0 0; font-size: 16px; font-weight: 600; }
main { padding: 0 20px 40px; }
h2 { font-size: 17px; margin: 22px 0 8px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
table.summary { border-collapse: collapse; }
table.summary th { text-align: left; font-weight: 600; padding: 2px 16px 2px 0; vertical-align: top; white-space: nowrap; }
table.summary td { padding: 2px 0; }
code.replay { word-break: break-all; }
.ok { color: #2e7d32; }
.bad { color: #c62828; font-weight: 700; }
header { padding: 12px 20px; }
header.ok, header.bad { color: #fff; font-weight: normal; }
header.ok { background: #2e7d32; }
header.bad { background: #c62828; }
#violations li { margin: 6px 0; }
#violations pre { margin: 2px 0; white-space: pre-wrap; background: #fdecea; padding: 6px 8px; border-left: 3px solid #c62828; }
button { font: inherit; cursor: pointer; }
.controls { position: sticky; top: 0; background: #fff; padding: 6px 0; z-index: 2; border-bottom: 1px solid #ddd; }
.legend { display: inline-flex; flex-wrap: wrap; gap: 4px 14px; margin-left: 16px; vertical-align: middle; font-size: 12px; }
.legend i { display: inline-block; width: 14px; height: 10px; margin-right: 4px; vertical-align: middle; border: 1px solid rgba(0,0,0,.25); }
.resource { margin-top: 10px; }
.lanes { display: flex; align-items: flex-start; }
.labels { flex: none; width: 110px; font-size: 11px; padding-top: 18px; }
.labels div { height: 14px; line-height: 14px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.labels div.node { height: 10px; line-height: 10px; font-size: 9px; color: #555; }
.scroller { flex: 1; overflow-x: auto; overflow-y: hidden; border: 1px solid #ccc; }
.track { width: 100%; position: relative; }
.axis { position: relative; overflow: hidden; height: 18px; font-size: 10px; color: #555; border-bottom: 1px solid #ddd; }
.axis span { position: absolute; top: 2px; transform: translateX(-50%); white-space: nowrap; }
.axis span.first { transform: none; }
.phases { position: relative; overflow: hidden; height: 14px; font-size: 10px; color: #263238; border-bottom: 1px solid #ddd; }
.phases .phase { position: absolute; top: 0; height: 14px; line-height: 14px; padding: 0 3px; white-space: nowrap; border: 0 solid #37474f; border-left-width: 1px; box-sizing: border-box; }
.phases .phase.end { color: #607d8b; border-style: dashed; }
.phases .phase.flip { transform: translateX(-100%); border-left-width: 0; border-right-width: 1px; }
.phases .phase.hidden { display: none; }
svg.timeline { display: block; width: 100%; }
svg.timeline .lane-bg { fill: #f7f7f7; }
svg.timeline rect.window { fill: #4f7cac; stroke: #2f5a88; stroke-width: 1px; vector-effect: non-scaling-stroke; }
svg.timeline rect.window.alt { fill: #7aa6d2; }
svg.timeline rect.window.violating { fill: #e53935; stroke: #b71c1c; }
svg.timeline rect.window:hover { fill: #ffb300; }
svg.timeline path.fails { stroke-width: 1px; vector-effect: non-scaling-stroke; fill: none; }
svg.timeline path.contended { stroke: #c4c4c4; }
svg.timeline path.unavailable { stroke: #ef6c00; }
svg.timeline path.other { stroke: #6a1b9a; }
svg.timeline path.loss { stroke: #000; stroke-width: 2px; vector-effect: non-scaling-stroke; fill: none; }
svg.timeline path.key-loss { stroke: #000; stroke-width: 2px; vector-effect: non-scaling-stroke; fill: none; }
svg.timeline rect.outage { fill: rgba(198, 40, 40, .10); }
svg.timeline rect.outage-back { fill: rgba(198, 40, 40, .04); }
svg.timeline rect.stall { fill: #795548; }
svg.timeline rect.starved { fill: #8d6e63; }
svg.timeline rect.fault { stroke: rgba(0,0,0,.35); stroke-width: 1px; vector-effect: non-scaling-stroke; }
svg.timeline .violation-mark rect { fill: rgba(229, 57, 53, .35); }
svg.timeline .violation-mark line { stroke: #d50000; stroke-width: 3px; vector-effect: non-scaling-stroke; }
svg.timeline .violation-mark.current line { stroke: #ff6d00; stroke-width: 5px; }
#charts svg { display: block; max-width: 100%; height: auto; margin-bottom: 12px; }
.note { color: #555; font-size: 12px; }
"#;
