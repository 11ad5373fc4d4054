//! The chaos report in a real browser: a report of a synthetic history (no
//! servers) and of the negative control's real history (two clients hold
//! one lock at once after an empty restart) are opened in headless
//! Chromium, and the DOM it rendered must show what the history holds —
//! as many window bars as grants, the verdict's violation count, a mark
//! per violation — with no script error.
//!
//! The browser is `$QUORUMLOCK_CHROMIUM`, else `chromium`,
//! `chromium-browser` or `google-chrome` on `PATH` (Debian's `chromium`
//! package; `.ci/run` installs it). Without one the tests print
//! `SKIP report::…: no-chromium` and pass — except under CI (`CI` set),
//! where they fail.

use crate::chaos::{Restart, restart_history};
use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use quorumlock::testkit::history::{Fault, Grant, History, Op, OpKind, Outage, Outcome, check};
use quorumlock::testkit::report::Page;

/// The browser to use, if any; without one, a skip (a failure under CI).
fn chromium(test: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("QUORUMLOCK_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|dir| {
                ["chromium", "chromium-browser", "google-chrome"].map(|name| dir.join(name))
            })
            .find(|path| path.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none_or(|ci| ci.is_empty()),
            "{test}: no chromium on PATH under CI (.ci/run installs Debian's `chromium`)"
        );
        support::skip(
            test,
            support::Skip::NoChromium,
            "(no chromium, chromium-browser or google-chrome on PATH)",
        );
    }
    found
}

/// The DOM Chromium rendered from `page` (scripts run), and what it said
/// on stderr.
async fn render(browser: &Path, page: &Path) -> (String, String) {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut command = tokio::process::Command::new(browser);
    command
        .arg("--headless")
        .arg("--no-sandbox")
        .arg("--disable-gpu")
        .arg("--no-first-run")
        .arg("--disable-extensions")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .kill_on_drop(true);
    let output = support::no_hang("chromium --dump-dom", command.output())
        .await
        .expect("chromium runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "chromium failed ({}): {stderr}",
        output.status
    );
    (String::from_utf8_lossy(&output.stdout).into_owned(), stderr)
}

/// The attributes of the first `<tag …>` in `dom`, as written by the
/// browser's serializer (values in double quotes, which may hold `>`).
fn attributes(dom: &str, tag: &str) -> Vec<(String, String)> {
    let start = dom
        .find(&format!("<{tag}"))
        .unwrap_or_else(|| panic!("no <{tag}> in the DOM:\n{dom}"));
    let mut rest = &dom[start + tag.len() + 1..];
    let mut found = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.starts_with('>') || rest.starts_with("/>") || rest.is_empty() {
            return found;
        }
        let end = rest
            .find(|c: char| c == '=' || c == '>' || c.is_whitespace())
            .unwrap_or(rest.len());
        let name = rest[..end].to_owned();
        rest = &rest[end..];
        let value = if let Some(quoted) = rest.strip_prefix("=\"") {
            let close = quoted.find('"').expect("a closing quote");
            rest = &quoted[close + 1..];
            quoted[..close].to_owned()
        } else {
            String::new()
        };
        found.push((name, value));
    }
}

fn attribute(dom: &str, tag: &str, name: &str) -> Option<String> {
    attributes(dom, tag)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// What the browser shows of one report.
#[derive(Debug)]
struct Shown {
    errors: usize,
    error_text: String,
    windows: usize,
    violating_windows: usize,
    violation_count: usize,
    violation_items: usize,
    violation_marks: usize,
    charts: usize,
    /// `<rect class="window…` in the serialized DOM: the bars the browser
    /// built, counted apart from the page's own script.
    window_rects: usize,
}

/// Writes `report` and opens it in `browser`.
async fn shown(browser: &Path, report: &Page<'_>, name: &str) -> Shown {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    report.write(&path).expect("report written");
    let (dom, stderr) = render(browser, &path).await;
    let number = |tag: &str, name: &str| -> usize {
        attribute(&dom, tag, name)
            .unwrap_or_else(|| panic!("<{tag}> has no {name}: the page's script did not run"))
            .parse()
            .unwrap_or_else(|e| panic!("<{tag} {name}>: {e}"))
    };
    assert_eq!(
        attribute(&dom, "body", "data-ready").as_deref(),
        Some("1"),
        "the page's script did not finish; chromium said: {stderr}"
    );
    Shown {
        errors: number("html", "data-errors"),
        error_text: attribute(&dom, "html", "data-error-text").unwrap_or_default(),
        windows: number("body", "data-windows"),
        violating_windows: number("body", "data-violating-windows"),
        violation_count: number("body", "data-violation-count"),
        violation_items: number("body", "data-violation-items"),
        violation_marks: number("body", "data-violation-marks"),
        charts: number("body", "data-charts"),
        window_rects: dom.matches("<rect class=\"window").count(),
    }
}

/// A small history with every kind of thing a report draws, and one
/// overlap: two resources, six clients, faults on nodes, an outage,
/// failed attempts, a lost lock.
fn synthetic() -> History {
    let ms = Duration::from_millis;
    let mut h = History::default();
    for i in 0..40u64 {
        let client = usize::try_from(i % 4).expect("small");
        let (from, to) = (ms(i * 25), ms(i * 25 + 20));
        h.grants.push(Grant::new(client, "jobs:a", from, to));
        for (start, end, outcome) in [
            (from, from, Outcome::Ok),
            (
                from + ms(2),
                from + ms(4),
                Outcome::Failed("contended".into()),
            ),
        ] {
            h.ops.push(Op {
                client: if outcome == Outcome::Ok { client } else { 4 },
                kind: OpKind::TryLock,
                resource: "jobs:a".into(),
                start,
                end,
                outcome,
            });
        }
    }
    h.grants.push(Grant::new(5, "jobs:b", ms(100), ms(300)));
    // The overlap: client 6 while client 5 holds jobs:b.
    h.grants.push(Grant::new(6, "jobs:b", ms(250), ms(400)));
    h.faults.push(Fault {
        nodes: vec![0, 1],
        kind: "KillRestart".into(),
        from: ms(200),
        to: ms(500),
    });
    h.faults.push(Fault {
        nodes: vec![2],
        kind: "Pause".into(),
        from: ms(600),
        to: ms(700),
    });
    h.outages.push(Outage {
        from: ms(1001),
        to: ms(1010),
        back: ms(1020),
    });
    h.seed = Some(7);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synthetic_history_renders_every_window_and_its_violation() {
    let Some(browser) =
        chromium("report::a_synthetic_history_renders_every_window_and_its_violation")
    else {
        return;
    };
    let history = synthetic();
    let verdict = check(&history);
    assert_eq!(
        verdict.violations.len(),
        1,
        "the synthetic overlap: {verdict}"
    );
    let report = Page::new(&history, &verdict).replay("(synthetic: no replay)");
    let shown = shown(&browser, &report, "synthetic.html").await;
    assert_eq!(shown.errors, 0, "script errors: {}", shown.error_text);
    assert_eq!(shown.windows, history.grants.len(), "{shown:?}");
    assert_eq!(shown.window_rects, history.grants.len(), "{shown:?}");
    assert_eq!(shown.violation_count, 1, "{shown:?}");
    assert_eq!(shown.violation_items, 1, "{shown:?}");
    assert_eq!(shown.violation_marks, 1, "{shown:?}");
    assert_eq!(shown.violating_windows, 2, "{shown:?}");
    assert_eq!(shown.charts, 2, "the latency and rate charts: {shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_negative_controls_report_shows_its_overlap() {
    let Some(browser) = chromium("report::the_negative_controls_report_shows_its_overlap") else {
        return;
    };
    // The real thing: two of three nodes restarted empty at once let a
    // second client in while the first still holds the lock.
    let history = restart_history(Restart::Immediate).await;
    let verdict = check(&history);
    let overlaps = verdict
        .violations
        .iter()
        .filter(|v| v.kind() == "overlap")
        .count();
    assert!(overlaps >= 1, "the negative control's overlap: {verdict}");
    let report =
        Page::new(&history, &verdict).title("negative control: an immediate empty restart");
    let shown = shown(&browser, &report, "negative-control.html").await;
    assert_eq!(shown.errors, 0, "script errors: {}", shown.error_text);
    assert_eq!(shown.windows, history.grants.len(), "{shown:?}");
    assert_eq!(shown.window_rects, history.grants.len(), "{shown:?}");
    assert_eq!(shown.violation_count, verdict.violations.len(), "{shown:?}");
    assert_eq!(shown.violation_items, verdict.violations.len(), "{shown:?}");
    assert!(shown.violation_marks >= overlaps, "{shown:?}");
    assert!(
        shown.violating_windows >= 2,
        "both holders' bars are red: {shown:?}"
    );
}

/// The error recorder works: a page whose script throws, rejects a
/// promise and calls `console.error` shows three errors in the DOM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_error_would_be_seen() {
    let Some(browser) = chromium("report::a_script_error_would_be_seen") else {
        return;
    };
    let history = synthetic();
    let verdict = check(&history);
    let page = Page::new(&history, &verdict).html().replacen(
        "</body>",
        "<script>console.error('seen'); Promise.reject('refused'); undefined_function();</script></body>",
        1,
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("broken.html");
    std::fs::write(&path, page).expect("page written");
    let (dom, _) = render(&browser, &path).await;
    let text = attribute(&dom, "html", "data-error-text").unwrap_or_default();
    // The rejection is reported after the scripts ran: wait for none.
    assert!(
        attribute(&dom, "html", "data-errors").is_some_and(|n| n != "0"),
        "no error recorded: {text}"
    );
    assert!(text.contains("console.error: seen"), "{text}");
    assert!(text.contains("undefined_function"), "{text}");
}

/// Opens `report` in `browser` with `script` run after the page's own (it
/// sees the page as a person would, laid out at the browser's default
/// window size), and returns the DOM it left, with no script error.
async fn measured(browser: &Path, report: &Page<'_>, name: &str, script: &str) -> String {
    let page = report
        .html()
        .replacen("</body>", &format!("<script>{script}</script></body>"), 1);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, page).expect("page written");
    let (dom, stderr) = render(browser, &path).await;
    assert_eq!(
        attribute(&dom, "html", "data-errors").as_deref(),
        Some("0"),
        "{name}: script errors: {}; chromium said: {stderr}",
        attribute(&dom, "html", "data-error-text").unwrap_or_default()
    );
    dom
}

/// Finds every axis label drawn outside the box that shows it — a
/// timeline's time axis (whose overflow is hidden) or a chart's SVG — and
/// every chart text drawn over another, and writes them to
/// `<body data-clipped>`.
const CLIPPED_JS: &str = r#"
(function () {
  var found = [];
  function check(label, box, where) {
    var r = label.getBoundingClientRect();
    if (r.width === 0) { return; }
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5 ||
        r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
      found.push(where + ' \'' + label.textContent.trim() + '\' at ' + Math.round(r.left) + '..' +
        Math.round(r.right) + ' x ' + Math.round(r.top) + '..' + Math.round(r.bottom) +
        ', its box ' + Math.round(box.left) + '..' + Math.round(box.right) + ' x ' +
        Math.round(box.top) + '..' + Math.round(box.bottom));
    }
  }
  var labels = 0;
  document.querySelectorAll('.axis').forEach(function (axis) {
    var box = axis.getBoundingClientRect();
    axis.querySelectorAll('span').forEach(function (s) { labels++; check(s, box, 'timeline axis'); });
  });
  function name(t) { return '\'' + t.textContent.trim() + '\''; }
  document.querySelectorAll('#charts svg').forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    var texts = Array.prototype.slice.call(svg.querySelectorAll('text'));
    texts.forEach(function (t) { labels++; check(t, box, svg.parentNode.id); });
    // Nor over another text of its chart (a value over the axis' name).
    texts.forEach(function (a, i) {
      var p = a.getBoundingClientRect();
      texts.slice(i + 1).forEach(function (b) {
        var q = b.getBoundingClientRect();
        if (Math.min(p.right, q.right) - Math.max(p.left, q.left) > 0.5 &&
            Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top) > 0.5) {
          found.push(svg.parentNode.id + ' ' + name(a) + ' over ' + name(b));
        }
      });
    });
  });
  document.body.setAttribute('data-labels', String(labels));
  document.body.setAttribute('data-clipped', found.join(' | '));
})();
"#;

/// A history whose report's axes must show `250` (ms, on the timeline),
/// `12.5` thousand (ms of latency) or `1.2` million (grants a second).
fn magnitudes() -> Vec<(&'static str, History)> {
    let ms = Duration::from_millis;
    let us = Duration::from_micros;
    // docs/testing.md's hand-made history: three grants, one overlap,
    // 250 ms long.
    let mut docs = History::default();
    docs.grants.push(Grant::new(0, "jobs:a", ms(0), ms(100)));
    docs.grants.push(Grant::new(1, "jobs:a", ms(100), ms(200)));
    docs.grants.push(Grant::new(2, "jobs:a", ms(150), ms(250)));
    // One acquire that took 12.5 s, among quick ones.
    let mut slow = History::default();
    for (client, start, end) in [(0, 0, 3), (1, 10, 12_510), (2, 12_600, 12_601)] {
        slow.ops.push(Op {
            client,
            kind: OpKind::Lock,
            resource: "jobs:a".into(),
            start: ms(start),
            end: ms(end),
            outcome: Outcome::Ok,
        });
        slow.grants
            .push(Grant::new(client, "jobs:a", ms(end), ms(end) + us(500)));
    }
    // Twelve grants in the first 12 µs of a 1.2 ms run: over a million a
    // second in the first 10 µs slice.
    let mut dense = History::default();
    for i in 0..12u64 {
        let client = usize::try_from(i).expect("small");
        dense.grants.push(Grant::new(
            client,
            "jobs:a",
            us(i),
            us(i) + Duration::from_nanos(500),
        ));
    }
    dense
        .grants
        .push(Grant::new(0, "jobs:a", us(1_150), us(1_200)));
    vec![("250 ms", docs), ("12.5 s", slow), ("1.2M/s", dense)]
}

/// No axis label is cut off — the timeline's last time, a chart's widest
/// value — or drawn over the axis' name, whatever the magnitude of what
/// the axis shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_axis_label_is_cut_off_at_any_magnitude() {
    let Some(browser) = chromium("report::no_axis_label_is_cut_off_at_any_magnitude") else {
        return;
    };
    let mut clipped = Vec::new();
    for (name, history) in magnitudes() {
        let verdict = check(&history);
        let report = Page::new(&history, &verdict);
        let dom = measured(&browser, &report, "magnitude.html", CLIPPED_JS).await;
        let labels: usize = attribute(&dom, "body", "data-labels")
            .expect("the measuring script ran")
            .parse()
            .expect("a count");
        assert!(labels > 10, "{name}: only {labels} labels measured");
        let found = attribute(&dom, "body", "data-clipped").unwrap_or_default();
        if !found.is_empty() {
            clipped.push(format!("{name}: {found}"));
        }
    }
    assert!(
        clipped.is_empty(),
        "labels cut off:\n{}",
        clipped.join("\n")
    );
}

/// Measures the phase labels under each timeline's axis, at the zoom
/// shown and after zooming in twice: each shown label must sit at its
/// time (its left edge, or its right edge where it is flipped at the end),
/// inside its row's box, and over no other label. Writes what it found to
/// `<body>`: `data-phases` (labels), `data-phases-hidden` (at the first
/// zoom), `data-phases-staggered` (labels below the first row) and
/// `data-phases-wrong`.
const PHASES_JS: &str = r#"
(function () {
  var wrong = [], count = 0, hidden = 0, staggered = 0;
  var span = Number(document.body.getAttribute('data-span-ms'));
  function measure(zoom, first) {
    document.querySelectorAll('.phases').forEach(function (box) {
      var b = box.getBoundingClientRect(), shown = [];
      box.querySelectorAll('.phase').forEach(function (p) {
        if (first) { count++; }
        if (getComputedStyle(p).display === 'none') {
          if (first) { hidden++; }
          return;
        }
        var r = p.getBoundingClientRect(), text = zoom + ' \'' + p.textContent + '\'';
        var flip = p.classList.contains('flip');
        var x = b.left + Number(p.getAttribute('data-at')) / span * b.width;
        var anchor = flip ? r.right : r.left;
        if (Math.abs(anchor - x) > 1.5) {
          wrong.push(text + ' at ' + anchor.toFixed(1) + ', its time at ' + x.toFixed(1));
        }
        if (r.left < b.left - 0.5 || r.right > b.right + 0.5 || r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5) {
          wrong.push(text + ' outside its box');
        }
        if (first && r.top > b.top + 0.5) { staggered++; }
        shown.forEach(function (o) {
          if (Math.min(r.right, o.r.right) - Math.max(r.left, o.r.left) > 0 &&
              Math.min(r.bottom, o.r.bottom) - Math.max(r.top, o.r.top) > 0) {
            wrong.push(text + ' over \'' + o.text + '\'');
          }
        });
        shown.push({ r: r, text: p.textContent });
      });
    });
  }
  measure('1x', true);
  var zoomIn = document.querySelector('[data-zoom="in"]');
  zoomIn.click();
  zoomIn.click();
  measure('4x', false);
  document.body.setAttribute('data-phases', String(count));
  document.body.setAttribute('data-phases-hidden', String(hidden));
  document.body.setAttribute('data-phases-staggered', String(staggered));
  document.body.setAttribute('data-phases-wrong', wrong.join(' | '));
})();
"#;

/// Each fault is named under the time axis where it began and where it
/// was healed: at its time, inside the page, none over another — two
/// faults a millisecond apart are staggered into rows, three near the end
/// are flipped to end at their time — at the zoom shown and zoomed in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phase_labels_sit_at_their_time_and_never_overlap() {
    let Some(browser) = chromium("report::phase_labels_sit_at_their_time_and_never_overlap") else {
        return;
    };
    let ms = Duration::from_millis;
    let mut history = synthetic();
    // A millisecond after the KillRestart of nodes 0 and 1 (at 200 ms),
    // healed near the end, beside a fault of no node.
    history.faults.push(Fault {
        nodes: vec![3],
        kind: "Pause".into(),
        from: ms(201),
        to: ms(1015),
    });
    history.faults.push(Fault {
        nodes: vec![],
        kind: "Latency".into(),
        from: ms(1012),
        to: ms(1019),
    });
    let verdict = check(&history);
    let report = Page::new(&history, &verdict);
    let dom = measured(&browser, &report, "phases.html", PHASES_JS).await;
    let number = |name: &str| -> usize {
        attribute(&dom, "body", name)
            .unwrap_or_else(|| panic!("no {name}: the measuring script did not run"))
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let timelines = 2;
    assert_eq!(
        number("data-phases"),
        timelines * 2 * history.faults.len(),
        "a label where each fault began and where it was healed, per timeline"
    );
    assert_eq!(number("data-phases-hidden"), 0, "there is room for all");
    assert!(
        number("data-phases-staggered") >= timelines * 2,
        "labels a millisecond apart share no row"
    );
    let wrong = attribute(&dom, "body", "data-phases-wrong").unwrap_or_default();
    assert!(wrong.is_empty(), "misplaced labels: {wrong}");
}
