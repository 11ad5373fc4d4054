use std::time::Duration;

use super::*;
use crate::testkit::history::{Fault, Grant, History, KeyLoss, Op, OpKind, Outage, Outcome, check};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn op(client: usize, resource: &str, from: u64, to: u64, outcome: Outcome) -> Op {
    Op {
        client,
        kind: OpKind::TryLock,
        resource: resource.to_owned(),
        start: ms(from),
        end: ms(to),
        outcome,
    }
}

/// Two resources, faults on two nodes, failed attempts, one outage; no
/// violation.
fn calm() -> History {
    let mut h = History::default();
    for i in 0..10u64 {
        let client = usize::try_from(i % 3).unwrap_or(0);
        h.grants
            .push(Grant::new(client, "jobs:a", ms(i * 20), ms(i * 20 + 15)));
        h.ops
            .push(op(client, "jobs:a", i * 20, i * 20, Outcome::Ok));
        h.ops.push(op(
            3,
            "jobs:a",
            i * 20 + 1,
            i * 20 + 3,
            Outcome::Failed("contended".to_owned()),
        ));
    }
    h.grants.push(Grant::new(4, "jobs:b", ms(50), ms(80)));
    h.ops.push(op(
        5,
        "jobs:b",
        60,
        61,
        Outcome::Failed("unavailable".to_owned()),
    ));
    h.faults.push(Fault {
        nodes: vec![1, 2],
        kind: "KillRestart".to_owned(),
        from: ms(30),
        to: ms(90),
    });
    h.faults.push(Fault {
        nodes: vec![],
        kind: "Latency".to_owned(),
        from: ms(100),
        to: ms(120),
    });
    h.outages.push(Outage {
        from: ms(200),
        to: ms(210),
        back: ms(220),
    });
    h.key_losses.push(KeyLoss {
        node: 4,
        resource: "jobs:b".to_owned(),
        token: "abcd".to_owned(),
        at: ms(70),
    });
    h.seed = Some(42);
    h
}

fn count(page: &str, needle: &str) -> usize {
    page.matches(needle).count()
}

#[test]
fn every_grant_is_one_bar_and_a_calm_history_has_no_violation() {
    let history = calm();
    let verdict = check(&history);
    assert!(verdict.is_ok(), "{verdict}");
    let page = Page::new(&history, &verdict).replay("replay me").html();
    assert_eq!(count(&page, "<rect class=\"window\""), history.grants.len());
    assert_eq!(count(&page, "window violating"), 0);
    assert!(page.contains("id=\"violation-count\" data-count=\"0\""));
    assert!(page.contains("id=\"grant-count\" data-count=\"11\""));
    assert_eq!(count(&page, "class=\"violation-mark\""), 0);
    assert_eq!(count(&page, "class=\"violation-item\""), 0);
    assert!(page.contains("<code>42</code>"), "the seed is shown");
    assert!(page.contains("replay me"));
    // Each node a fault hit has its rect, the node-less one its own lane,
    // on each of the two timelines.
    assert_eq!(count(&page, "<rect class=\"fault\""), 2 * 3);
    assert!(page.contains(">other faults<"));
    // The failed attempts: 10 contended ticks in one path, 1 unavailable.
    assert!(page.contains("class=\"fails contended\" data-client=\"3\" data-count=\"10\""));
    assert!(page.contains("class=\"fails unavailable\" data-client=\"5\" data-count=\"1\""));
    // A node's lost key is ticked on its lane, on its resource's timeline
    // only.
    assert_eq!(count(&page, "<path class=\"key-loss\" data-node=\"4\""), 1);
    // An outage is shaded on each resource's timeline, until its quorum
    // was certainly back (as the node lanes show the nodes down).
    assert_eq!(count(&page, "<rect class=\"outage\""), 2);
    assert_eq!(count(&page, "<rect class=\"outage-back\""), 2);
    // Both charts are drawn by plotters, none failed.
    assert_eq!(count(&page, "<div class=\"chart\""), 2);
    assert!(!page.contains("chart-error"), "a chart failed");
}

#[test]
fn an_overlap_is_listed_marked_and_its_bars_are_red() {
    let mut history = calm();
    // Client 9 on jobs:b while client 4 holds it (50..80).
    history
        .grants
        .push(Grant::new(9, "jobs:b", ms(70), ms(100)));
    let verdict = check(&history);
    assert_eq!(verdict.violations.len(), 1, "{verdict}");
    let page = html(&history, &verdict);
    assert!(page.contains("id=\"violation-count\" data-count=\"1\""));
    assert_eq!(count(&page, "class=\"violation-item\""), 1);
    assert_eq!(
        count(
            &page,
            "<g class=\"violation-mark\" data-violation=\"0\" data-kind=\"overlap\""
        ),
        1
    );
    assert_eq!(count(&page, "<rect class=\"window violating\""), 2);
    assert_eq!(
        count(&page, "<rect class=\"window"),
        history.grants.len(),
        "every grant is still one bar"
    );
    assert!(page.contains("<header class=\"bad\">"));
    // The mark spans the overlap: 70..80 ms.
    assert!(page.contains("<rect x=\"70.000\" y=\"0\" width=\"10.000\""));
    // The violation reads as prose, not as Rust's Debug output.
    for debug in ["fence None", "wrote false", "wrote true", "Some("] {
        assert!(!page.contains(debug), "{debug} on the page");
    }
}

/// A history made by hand, with grants and no calls recorded: the calls
/// row says so rather than staying blank.
#[test]
fn a_history_without_calls_says_so() {
    let mut history = History::default();
    history.grants.push(Grant::new(1, "jobs:a", ms(0), ms(50)));
    let verdict = check(&history);
    let page = html(&history, &verdict);
    assert!(page.contains("none recorded"), "the calls row is blank");
}

#[test]
fn a_lost_update_is_listed_without_a_mark() {
    let mut history = calm();
    history.grants[0].wrote = true;
    history.counters.insert("jobs:a".to_owned(), 0);
    let verdict = check(&history);
    assert_eq!(verdict.violations.len(), 1, "{verdict}");
    let page = html(&history, &verdict);
    assert_eq!(count(&page, "data-kind=\"lost_update\""), 1, "listed once");
    assert_eq!(count(&page, "class=\"violation-mark\""), 0);
    assert!(page.contains("counter of jobs:a"));
}

#[test]
fn names_are_escaped() {
    let mut history = History::default();
    history
        .grants
        .push(Grant::new(0, "<script>alert(1)</script>\"", ms(0), ms(5)));
    history.faults.push(Fault {
        nodes: vec![0],
        kind: "<b>".to_owned(),
        from: ms(0),
        to: ms(1),
    });
    let verdict = check(&history);
    let page = Page::new(&history, &verdict).title("a <title>").html();
    assert!(!page.contains("<script>alert"));
    assert!(!page.contains("<b>"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;"));
    assert!(page.contains("<title>a &lt;title&gt;</title>"));
}

#[test]
fn the_page_needs_nothing_from_outside() {
    let history = calm();
    let page = html(&history, &check(&history));
    for outside in [
        " src=",
        "href=\"http",
        "url(",
        "@import",
        "<link",
        "<iframe",
    ] {
        assert!(
            !page.contains(outside),
            "the page refers outside: {outside}"
        );
    }
    // The scripts are the page's own: the error recorder first.
    let first = page.find("<script>").unwrap_or(usize::MAX);
    assert!(page[first..].starts_with("<script>\n(function () {\n  var root"));
}

#[test]
fn an_empty_history_still_makes_a_page() {
    let history = History::default();
    let page = html(&history, &check(&history));
    assert!(page.contains("Nothing was recorded."));
    assert!(page.contains("id=\"violation-count\" data-count=\"0\""));
    assert!(!page.contains("chart-error"), "a chart failed");
    assert!(page.ends_with("</html>\n"));
}

#[test]
fn written_to_a_file() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("report.html");
    let history = calm();
    let verdict = check(&history);
    Page::new(&history, &verdict).write(&path)?;
    assert_eq!(
        std::fs::read_to_string(&path)?,
        Page::new(&history, &verdict).html()
    );
    Ok(())
}

/// Each fault is named on the timelines where it began and where it was
/// healed, placed at its time like the axis' labels.
#[test]
fn each_fault_is_a_phase_where_it_began_and_where_it_was_healed() {
    let history = calm();
    let page = html(&history, &check(&history));
    // 220 ms long (the outage's quorum back); two timelines.
    for phase in [
        "<span class=\"phase\" data-at=\"30.000\" style=\"left:13.636%\" title=\"KillRestart on nodes 1, 2: 30.0\u{2013}90.0 ms\">KillRestart nodes 1, 2</span>",
        "<span class=\"phase end\" data-at=\"90.000\" style=\"left:40.909%\" title=\"KillRestart on nodes 1, 2: 30.0\u{2013}90.0 ms\">nodes 1, 2 healed</span>",
        "<span class=\"phase\" data-at=\"100.000\" style=\"left:45.455%\" title=\"Latency on no node in particular: 100.0\u{2013}120.0 ms\">Latency</span>",
        "<span class=\"phase end\" data-at=\"120.000\" style=\"left:54.545%\" title=\"Latency on no node in particular: 100.0\u{2013}120.0 ms\">Latency healed</span>",
    ] {
        assert_eq!(count(&page, phase), 2, "{phase}");
    }
    assert_eq!(count(&page, "<span class=\"phase"), 2 * 4);
    // In time order.
    let at: Vec<&str> = page
        .split("<span class=\"phase")
        .skip(1)
        .take(4)
        .filter_map(|s| s.split("data-at=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(at, ["30.000", "90.000", "100.000", "120.000"]);
    // A history without faults has no phases' row.
    let mut quiet = calm();
    quiet.faults.clear();
    assert!(!html(&quiet, &check(&quiet)).contains("class=\"phases\""));
}
