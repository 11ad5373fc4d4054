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
use quorumlock::testkit::report::Report;

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
async fn shown(browser: &Path, report: &Report<'_>, name: &str) -> Shown {
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
    let report = Report::new(&history, &verdict).replay("(synthetic: no replay)");
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
        Report::new(&history, &verdict).title("negative control: an immediate empty restart");
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
    let page = Report::new(&history, &verdict).html().replacen(
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
