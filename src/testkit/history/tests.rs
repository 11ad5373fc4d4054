//! The checker's negative controls (each kind of violation is flagged,
//! and what must not be flagged is not), and the history file's round trip.

use std::time::Duration;

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A plain grant of resource "r" over `from..to` ms, with a 1 s ttl.
fn g(client: usize, from: u64, to: u64, fence: Option<u64>, wrote: bool) -> Grant {
    Grant {
        token: "abcd".into(),
        fence,
        ttl: Duration::from_secs(1),
        wrote,
        ..Grant::new(client, "r", ms(from), ms(to))
    }
}

fn history(grants: Vec<Grant>) -> History {
    History {
        grants,
        ..History::default()
    }
}

fn with_counter(mut history: History, value: u64) -> History {
    history.counters.insert("r".into(), value);
    history
}

fn kinds(history: &History) -> Vec<&'static str> {
    check(history)
        .violations
        .iter()
        .map(Violation::kind)
        .collect()
}

const HOLD_TTL: Duration = Duration::from_secs(2);

fn loss(at: Duration) -> Loss {
    Loss {
        client: 0,
        resource: "held".into(),
        at,
        reason: LossReason::Unreachable,
        ttl: HOLD_TTL,
    }
}

#[test]
fn sections_one_after_another_pass() {
    let clean = with_counter(
        history(vec![
            g(0, 0, 100, Some(1), true),
            g(1, 100, 200, Some(2), true),
        ]),
        2,
    );
    let verdict = check(&clean);
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.to_string(), "no violation");
}

#[test]
fn an_overlap_is_flagged_with_both_clients_and_times() {
    let overlap = history(vec![g(0, 0, 150, None, true), g(1, 100, 200, None, true)]);
    let verdict = check(&overlap);
    let [
        Violation::Overlap {
            resource,
            first,
            second,
        },
    ] = &verdict.violations[..]
    else {
        panic!("{verdict:?}");
    };
    assert_eq!(
        (resource.as_str(), first.client, second.client),
        ("r", 0, 1)
    );
    let text = verdict.to_string();
    assert!(text.contains("overlapping windows on r"), "{text}");
    assert!(
        text.contains("client 0") && text.contains("client 1"),
        "{text}"
    );
    assert!(text.contains("granted 100.0ms"), "{text}");
}

#[test]
fn a_lost_update_is_flagged() {
    let lost = with_counter(
        history(vec![g(0, 0, 100, None, true), g(1, 100, 200, None, true)]),
        1,
    );
    assert_eq!(
        check(&lost).violations,
        [Violation::LostUpdate {
            resource: "r".into(),
            counter: 1,
            writes: 2
        }]
    );
    // Without a counter recorded, there is nothing to compare.
    assert!(check(&history(vec![g(0, 0, 100, None, true)])).is_ok());
}

#[test]
fn a_fence_going_backwards_or_repeating_is_flagged() {
    for (a, b) in [(5, 5), (5, 4)] {
        let fences = history(vec![
            g(0, 0, 100, Some(a), false),
            g(1, 100, 200, Some(b), false),
        ]);
        let verdict = check(&fences);
        let [Violation::FenceBackwards { earlier, later, .. }] = &verdict.violations[..] else {
            panic!("{verdict:?}");
        };
        assert_eq!((earlier.fence, later.fence), (Some(a), Some(b)));
    }
    // In grant order, not in recording order.
    let reordered = history(vec![
        g(1, 100, 200, Some(2), false),
        g(0, 0, 100, Some(1), false),
    ]);
    assert!(check(&reordered).is_ok());
}

#[test]
fn a_start_outside_the_call_and_an_overstated_deadline_are_flagged() {
    let outside = Grant {
        started: ms(50),
        ..g(0, 0, 100, None, false)
    };
    assert_eq!(kinds(&history(vec![outside])), ["start_outside_call"]);
    let overstated = Grant {
        deadline: ms(5000),
        ..g(0, 0, 100, None, false)
    };
    assert_eq!(kinds(&history(vec![overstated])), ["deadline_past_ttl"]);
    // Past `invoked + ttl` but within `started + ttl`: counted, not judged.
    let preempted = Grant {
        invoked: ms(0),
        granted: ms(300),
        started: ms(200),
        deadline: ms(1100),
        ..g(0, 0, 1100, None, false)
    };
    let verdict = check(&history(vec![preempted]));
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.preempted, 1);
}

#[test]
fn a_grant_during_a_majority_outage_is_flagged() {
    let mut during = history(vec![g(0, 200, 300, None, false)]);
    during.outages.push(Outage {
        from: ms(100),
        to: ms(400),
        back: ms(400),
    });
    assert_eq!(kinds(&during), ["grant_during_majority_outage"]);
    // Asked for before the outage began: not judged.
    let before = History {
        outages: during.outages.clone(),
        ..history(vec![g(0, 50, 300, None, false)])
    };
    assert!(check(&before).is_ok());
}

#[test]
fn undocumented_errors_and_slow_failures_are_flagged() {
    let op = |kind, outcome, end| Op {
        client: 3,
        kind,
        resource: "r".into(),
        start: ms(0),
        end: ms(end),
        outcome,
    };
    let mut ops = History {
        ops: vec![
            op(OpKind::TryLock, Outcome::Failed("contended".into()), 10),
            op(OpKind::Release, Outcome::Undocumented("boom".into()), 10),
            op(OpKind::TryLock, Outcome::Failed("unavailable".into()), 900),
            // An acquisition that retries may take as long as it likes.
            op(OpKind::Lock, Outcome::Failed("wait timeout".into()), 900),
        ],
        ..History::default()
    };
    assert_eq!(kinds(&ops), ["undocumented_error"]);
    assert!(check(&ops).to_string().contains("client 3 release r"));
    ops.failure_bound = Some(ms(500));
    assert_eq!(kinds(&ops), ["undocumented_error", "slow_failure"]);
}

#[test]
fn semaphore_and_rwlock_windows_share_by_their_rule() {
    let shared = |client, from, to, share| Grant {
        share,
        ..g(client, from, to, None, false)
    };
    let permits = history(vec![
        shared(0, 0, 100, Share::Permit(2)),
        shared(1, 10, 100, Share::Permit(2)),
        shared(2, 20, 100, Share::Permit(2)),
    ]);
    let verdict = check(&permits);
    let [Violation::TooManyHolders { opening, open, .. }] = &verdict.violations[..] else {
        panic!("{verdict:?}");
    };
    assert_eq!((opening.client, open.len()), (2, 2));
    assert!(verdict.to_string().contains("3 holders at once on r"));
    let two = history(vec![
        shared(0, 0, 100, Share::Permit(2)),
        shared(1, 10, 100, Share::Permit(2)),
        shared(2, 100, 200, Share::Permit(2)),
    ]);
    assert!(check(&two).is_ok());
    let readers = history(vec![
        shared(0, 0, 100, Share::Reader),
        shared(1, 10, 100, Share::Reader),
    ]);
    assert!(check(&readers).is_ok());
    let writer_among_readers = history(vec![
        shared(0, 0, 100, Share::Reader),
        shared(1, 10, 100, Share::Alone),
    ]);
    assert_eq!(kinds(&writer_among_readers), ["too_many_holders"]);
}

#[test]
fn a_loss_is_excused_only_by_an_outage_a_stall_or_starved_nodes_before_it() {
    let mut lost = History {
        outages: vec![Outage {
            from: ms(100),
            to: ms(300),
            back: ms(400),
        }],
        losses: vec![
            loss(ms(300)),
            loss(ms(400) + HOLD_TTL),
            // Excused until a ttl after the quorum was back, not after it
            // began to come back.
            loss(ms(350) + HOLD_TTL),
        ],
        ..History::default()
    };
    assert!(check(&lost).is_ok());
    lost.losses.push(loss(ms(50)));
    lost.faults.push(Fault {
        nodes: vec![1],
        kind: "Pause".into(),
        from: ms(10),
        to: ms(20),
    });
    let verdict = check(&lost);
    let [Violation::LossWithMajorityUp { loss: l, faults }] = &verdict.violations[..] else {
        panic!("{verdict:?}");
    };
    assert_eq!((l.at, faults.len()), (ms(50), 1));
    assert!(
        verdict
            .to_string()
            .contains("while a majority of nodes was up; faults in the ttl before: Pause on [1]"),
        "{verdict}"
    );
    // After the client process stalled, or a majority of nodes was
    // starved, a loss is counted, not judged.
    let mut starved = lost.clone();
    lost.stalls.push(Span {
        from: ms(10),
        to: ms(40),
    });
    let verdict = check(&lost);
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.losses_after_stalls, 1);
    starved.starved.push(Span {
        from: ms(20),
        to: ms(30),
    });
    let verdict = check(&starved);
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.losses_after_stalls, 1);
}

/// A history with a record of every type and a violation of every kind.
fn everything() -> History {
    let mut h = with_counter(
        history(vec![
            g(0, 0, 150, Some(7), true),
            Grant {
                share: Share::Permit(3),
                resource: "sem".into(),
                ..g(1, 100, 200, Some(7), true)
            },
            Grant {
                started: ms(400),
                ..g(2, 300, 500, None, false)
            },
        ]),
        5,
    );
    h.ops.push(Op {
        client: 0,
        kind: OpKind::TryLock,
        resource: "r".into(),
        start: ms(0),
        end: ms(900),
        outcome: Outcome::Failed("contended".into()),
    });
    h.ops.push(Op {
        client: 1,
        kind: OpKind::Release,
        resource: "r".into(),
        start: ms(0),
        end: ms(1),
        outcome: Outcome::Undocumented("boom \"quoted\"\nline".into()),
    });
    h.outages.push(Outage {
        from: ms(250),
        to: ms(600),
        back: ms(700),
    });
    h.losses.push(loss(ms(5000)));
    h.losses.push(Loss {
        reason: LossReason::TokenGone,
        ..loss(ms(20))
    });
    h.faults.push(Fault {
        nodes: vec![0, 2],
        kind: "MajorityLoss".into(),
        from: ms(250),
        to: ms(600),
    });
    h.stalls.push(Span {
        from: ms(4000),
        to: ms(4300),
    });
    h.starved.push(Span {
        from: ms(1),
        to: Duration::from_nanos(1_000_001),
    });
    h.seed = Some(u64::MAX);
    h.failure_bound = Some(ms(500));
    h
}

#[test]
fn a_history_written_and_read_back_is_the_same_and_judged_the_same() {
    let history = everything();
    let verdict = check(&history);
    assert!(verdict.violations.len() >= 4, "{verdict}");
    let mut file = Vec::new();
    history.write_jsonl(&mut file).expect("write");
    let text = String::from_utf8(file.clone()).expect("utf-8");
    assert!(
        text.lines().all(|l| l.starts_with("{\"type\":\"")),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.contains("\"verdict\""))
    );
    let read = History::read_jsonl(&file[..]).expect("read");
    assert_eq!(read, history);
    assert_eq!(check(&read), verdict);
    // And an empty history.
    let mut file = Vec::new();
    History::default().write_jsonl(&mut file).expect("write");
    assert_eq!(
        History::read_jsonl(&file[..]).expect("read"),
        History::default()
    );
}

#[test]
fn a_malformed_line_is_a_typed_error_naming_it() {
    let mut file = Vec::new();
    everything().write_jsonl(&mut file).expect("write");
    let good = String::from_utf8(file).expect("utf-8");
    let lines: Vec<&str> = good.lines().collect();
    for (bad, what) in [
        ("{\"type\":\"grant\",\"client\":0}", "a missing field"),
        ("{\"type\":\"teleport\"}", "an unknown type"),
        ("not json", "not JSON"),
        (
            "{\"type\":\"loss\",\"client\":0,\"resource\":\"r\",\"at_ns\":1,\"reason\":\"bored\",\"ttl_ns\":1}",
            "an unknown loss reason",
        ),
        (
            "{\"type\":\"stall\",\"from_ns\":-1,\"to_ns\":1}",
            "a negative time",
        ),
    ] {
        let mut text = lines[..3].join("\n");
        text.push('\n');
        text.push_str(bad);
        text.push('\n');
        text.push_str(&lines[3..].join("\n"));
        let error = History::read_jsonl(text.as_bytes()).expect_err(what);
        assert!(
            matches!(error, HistoryError::Malformed { line: 4, .. }),
            "{what}: {error:?}"
        );
        assert!(error.to_string().starts_with("history line 4: "), "{error}");
    }
    let other = History::read_jsonl(&b"\n{\"type\":\"meta\",\"version\":99}\n"[..]);
    assert!(matches!(
        other,
        Err(HistoryError::Version {
            line: 2,
            version: 99
        })
    ));
    let invalid_utf8 = History::read_jsonl(&b"{\"type\":\"meta\",\"version\":1}\n\xff\n"[..]);
    assert!(matches!(invalid_utf8, Err(HistoryError::Io(_))));
}

#[tokio::test(start_paused = true)]
async fn the_recorder_records_attempts_sections_and_faults_on_its_clock() {
    let recorder = Recorder::new();
    let origin = recorder.origin();
    tokio::time::advance(ms(10)).await;
    recorder
        .try_lock(4, "r")
        .outcome(Outcome::Failed("contended".into()));
    recorder.fault(vec![1], "Pause", origin + ms(5), origin + ms(20));
    recorder.stall(origin + ms(1), origin + ms(2));
    recorder.counter("r", 0);
    let shared = recorder.clone();
    std::thread::spawn(move || shared.seed(9))
        .join()
        .expect("thread");
    let h = recorder.take();
    assert_eq!(h.ops.len(), 1);
    assert_eq!((h.ops[0].start, h.ops[0].end), (ms(10), ms(10)));
    assert_eq!(h.faults[0].from, ms(5));
    assert_eq!(
        h.stalls[0],
        Span {
            from: ms(1),
            to: ms(2)
        }
    );
    assert_eq!(h.seed, Some(9));
    assert!(check(&h).is_ok());
    assert_eq!(recorder.take(), History::default());
}
