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

/// The holder of "held" (client 0, token "abcd", granted at 0) lost it at
/// 7 s, its ttl 2 s: nodes 0 and 1 of 5 lost its key to restarts at 1 s
/// and 2.2 s, node 2 was frozen over 5 s..7.5 s.
fn without_keys() -> History {
    let key_loss = |node, at| KeyLoss {
        node,
        resource: "held".into(),
        token: "abcd".into(),
        at,
    };
    History {
        grants: vec![Grant {
            token: "abcd".into(),
            ..Grant::new(0, "held", ms(0), ms(7000))
        }],
        losses: vec![loss(ms(7000))],
        key_losses: vec![key_loss(0, ms(1000)), key_loss(1, ms(2200))],
        down: vec![Down {
            node: 2,
            from: ms(5000),
            to: ms(7500),
        }],
        nodes: Some(5),
        ..History::default()
    }
}

#[test]
fn a_loss_after_a_majority_lost_the_key_or_was_down_is_counted_not_judged() {
    let verdict = check(&without_keys());
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.losses_without_keys, 1);
    // The same moment from its other side: node 2 down first, a key lost
    // inside the ttl.
    let mut later = without_keys();
    later.key_losses[1].at = ms(5500);
    later.down[0] = Down {
        node: 2,
        from: ms(4000),
        to: ms(6000),
    };
    assert_eq!(check(&later).losses_without_keys, 1, "{}", check(&later));

    // Each of these leaves the holder's key on a majority at every moment
    // of the ttl before the loss: the loss is the library's.
    let mut cases: Vec<(&str, History)> = Vec::new();
    let mut h = without_keys();
    h.nodes = None;
    cases.push(("the node count unknown", h));
    let mut h = without_keys();
    h.key_losses.pop();
    cases.push(("one key lost, one node down", h));
    let mut h = without_keys();
    h.key_losses[1].token = "wxyz".into();
    cases.push(("a key of another holding lost", h));
    let mut h = without_keys();
    h.key_losses[1].resource = "other".into();
    cases.push(("a key of another resource lost", h));
    let mut h = without_keys();
    h.grants[0].granted = ms(1500);
    cases.push(("a key lost before the holding began", h));
    let mut h = without_keys();
    h.down[0] = Down {
        node: 2,
        from: ms(3000),
        to: ms(4900),
    };
    cases.push(("the node back before the ttl before the loss", h));
    let mut h = without_keys();
    h.down[0].node = 1;
    cases.push(("the down node one that lost the key", h));
    let mut h = without_keys();
    h.key_losses[1].at = ms(6500);
    h.down[0] = Down {
        node: 2,
        from: ms(5000),
        to: ms(6000),
    };
    cases.push(("the key lost after the node was back", h));
    for (what, history) in cases {
        let verdict = check(&history);
        assert_eq!(
            kinds(&history),
            ["loss_with_majority_up"],
            "{what}: {verdict}"
        );
        assert_eq!(verdict.losses_without_keys, 0, "{what}");
    }
}

#[test]
fn a_slow_failure_across_a_stall_of_the_client_is_counted_not_judged() {
    let mut h = History {
        ops: vec![Op {
            client: 0,
            kind: OpKind::TryLock,
            resource: "r".into(),
            start: ms(100),
            end: ms(3000),
            outcome: Outcome::Failed("unreachable".into()),
        }],
        failure_bound: Some(ms(500)),
        ..History::default()
    };
    assert_eq!(kinds(&h), ["slow_failure"]);
    h.stalls.push(Span {
        from: ms(3500),
        to: ms(4000),
    });
    assert_eq!(kinds(&h), ["slow_failure"], "a stall after the call");
    h.stalls.push(Span {
        from: ms(200),
        to: ms(2800),
    });
    let verdict = check(&h);
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.failures_after_stalls, 1);
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
    h.down.push(Down {
        node: 3,
        from: ms(10),
        to: ms(30),
    });
    h.key_losses.push(KeyLoss {
        node: 4,
        resource: "r".into(),
        token: "abcd".into(),
        at: ms(12),
    });
    h.wipes.push(Wipe {
        kind: "flushall".into(),
        all_keys: true,
        from: ms(40),
        to: ms(45),
        removed: vec![Wiped {
            node: 1,
            resource: "r".into(),
            token: String::new(),
            expires: None,
        }],
        kept: vec![Wiped {
            node: 2,
            resource: "r".into(),
            token: "abcd".into(),
            expires: Some(ms(900)),
        }],
    });
    h.nodes = Some(5);
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
    // Version 1 (before the down and key-loss records) is still read.
    let v1 = History::read_jsonl(
        &b"{\"type\":\"meta\",\"version\":1,\"seed\":3}\n{\"type\":\"verdict\",\"ok\":true,\"violations\":[],\"preempted\":0,\"losses_after_stalls\":0}\n"[..],
    )
    .expect("version 1");
    assert_eq!((v1.seed, v1.nodes), (Some(3), None));
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
    recorder.down(3, origin + ms(6), origin + ms(8));
    recorder.key_lost(3, "r", "abcdef-0123", origin + ms(6));
    recorder.nodes(5);
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
    assert_eq!(
        (h.down[0], h.nodes),
        (
            Down {
                node: 3,
                from: ms(6),
                to: ms(8)
            },
            Some(5)
        )
    );
    assert_eq!(
        (h.key_losses[0].token.as_str(), h.key_losses[0].at),
        ("abcd", ms(6))
    );
    assert!(check(&h).is_ok());
    assert_eq!(recorder.take(), History::default());
}

fn leftover(node: usize, token: &str, at: u64) -> Leftover {
    Leftover {
        node,
        resource: "r".into(),
        token: token.into(),
        at: ms(at),
    }
}

#[test]
fn a_released_locks_key_left_on_a_node_is_flagged() {
    let mut left = history(vec![g(0, 0, 100, None, false)]);
    left.leftovers.push(leftover(3, "abcd", 500));
    let verdict = check(&left);
    let [Violation::LeftBehind { leftover, grant }] = &verdict.violations[..] else {
        panic!("{verdict:?}");
    };
    assert_eq!((leftover.node, grant.client), (3, 0));
    let text = verdict.to_string();
    assert!(
        text.contains("node 3 still held r of a released lock at 500.0ms"),
        "{text}"
    );
    assert_eq!(kinds(&left), ["left_behind"]);
}

#[test]
fn a_key_of_another_token_or_of_a_lock_not_yet_released_is_not_flagged() {
    // Another token (a holder's, a failed attempt's): not a released lock.
    let mut other = history(vec![g(0, 0, 100, None, false)]);
    other.leftovers.push(leftover(3, "ffff", 500));
    assert!(check(&other).is_ok());
    // Read before its release was called.
    let mut early = history(vec![g(0, 0, 100, None, false)]);
    early.leftovers.push(leftover(3, "abcd", 50));
    assert!(check(&early).is_ok());
    // A leftover survives the history file.
    let mut file = Vec::new();
    other.write_jsonl(&mut file).expect("write");
    assert_eq!(History::read_jsonl(&file[..]).expect("read"), other);
}

/// Holder 0 holds "held" (token "abcd", ttl 2 s) from 0 until it learns at
/// 1000 ms that it lost it; client 1 is granted it at 600 ms, after an
/// operator's `DEL` over 500..520 ms removed its key on nodes 0, 1 and 2
/// of 5. Both wrote the counter, which lost one update.
fn wiped() -> History {
    let wiped = |node| Wiped {
        node,
        resource: "held".into(),
        token: "abcd".into(),
        expires: None,
    };
    History {
        grants: vec![
            Grant {
                token: "abcd".into(),
                ttl: HOLD_TTL,
                wrote: true,
                deadline: ms(2000),
                release_called: ms(1100),
                ..Grant::new(0, "held", ms(0), ms(1000))
            },
            Grant {
                token: "wxyz".into(),
                ttl: HOLD_TTL,
                wrote: true,
                ..Grant::new(1, "held", ms(600), ms(2600))
            },
        ],
        losses: vec![Loss {
            reason: LossReason::TokenGone,
            ..loss(ms(1000))
        }],
        wipes: vec![Wipe {
            kind: "del".into(),
            all_keys: false,
            from: ms(500),
            to: ms(520),
            removed: vec![wiped(0), wiped(1), wiped(2)],
            kept: vec![wiped(3), wiped(4)],
        }],
        counters: [("held".to_owned(), 1)].into(),
        nodes: Some(5),
        ..History::default()
    }
}

#[test]
fn an_overlap_after_a_majority_lost_its_keys_is_excused_and_measured() {
    let verdict = check(&wiped());
    assert!(verdict.is_ok(), "{verdict}");
    let [excused] = &verdict.excused_overlaps[..] else {
        panic!("{verdict:?}");
    };
    assert_eq!((excused.first.client, excused.second.client), (0, 1));
    assert_eq!(excused.resource, "held");
    assert_eq!(excused.wipe.kind, "del");
    // From the later grant (600 ms) until the holder learned (1000 ms).
    assert_eq!(excused.length(), ms(400));
    assert_eq!(verdict.updates_lost_to_wipes, 1);
    assert_eq!(verdict.losses_after_wipes, 1);
    // Not the losses the soak judges, nor the restarts' count.
    assert_eq!(
        (verdict.losses_after_stalls, verdict.losses_without_keys),
        (0, 0)
    );
    // The history file keeps the wipe.
    let mut file = Vec::new();
    wiped().write_jsonl(&mut file).expect("write");
    assert_eq!(History::read_jsonl(&file[..]).expect("read"), wiped());
}

#[test]
fn an_overlap_without_a_majority_wipe_of_its_resource_before_it_is_still_a_violation() {
    let mut cases: Vec<(&str, History)> = Vec::new();
    let mut h = wiped();
    h.wipes.clear();
    cases.push(("no wipe", h));
    let mut h = wiped();
    for k in &mut h.wipes[0].removed {
        k.resource = "other".into();
    }
    cases.push(("another resource wiped", h));
    let mut h = wiped();
    let node_2 = h.wipes[0].removed.pop().expect("node 2");
    h.wipes[0].kept.push(node_2);
    cases.push(("a minority wiped, the holder's key on the rest", h));
    let mut h = wiped();
    h.wipes[0].removed[2].node = 1;
    cases.push(("two nodes wiped, one of them twice", h));
    let mut h = wiped();
    h.nodes = None;
    cases.push(("the node count unknown", h));
    let mut h = wiped();
    h.wipes[0].from = ms(700);
    h.wipes[0].to = ms(720);
    cases.push(("the wipe after the later grant", h));
    let mut h = wiped();
    h.grants[0].invoked = ms(550);
    h.grants[0].granted = ms(550);
    h.grants[0].started = ms(550);
    cases.push(("the earlier call begun after the wipe", h));
    let mut h = wiped();
    h.grants[0].believed_until = ms(5000);
    h.grants[0].release_called = ms(5000);
    h.grants[0].deadline = ms(5000);
    h.grants[1].granted = ms(2600);
    h.grants[1].started = ms(2600);
    h.grants[1].invoked = ms(2600);
    h.grants[1].deadline = ms(3000);
    h.grants[1].believed_until = ms(3000);
    h.grants[1].release_called = ms(3000);
    h.losses.clear();
    cases.push(("the later grant past the earlier's ttl after the wipe", h));
    for (what, history) in cases {
        let verdict = check(&history);
        assert!(
            kinds(&history).contains(&"overlap"),
            "{what}: not flagged: {verdict}"
        );
        assert!(
            kinds(&history).contains(&"lost_update"),
            "{what}: {verdict}"
        );
        assert!(verdict.excused_overlaps.is_empty(), "{what}: {verdict:?}");
        assert_eq!(verdict.updates_lost_to_wipes, 0, "{what}");
    }
    // A minority wiped while the holder's key was on only some of the
    // others: a majority without it, excused.
    let mut h = wiped();
    h.wipes[0].removed.pop();
    h.wipes[0].kept.push(Wiped {
        node: 2,
        resource: "held".into(),
        token: String::new(),
        expires: None,
    });
    assert!(check(&h).is_ok(), "{}", check(&h));
    assert_eq!(check(&h).excused_overlaps.len(), 1);
    // Or held it there only until an expiry before the later grant (its
    // holder could not renew it there); not after it.
    let mut h = wiped();
    let mut node_2 = h.wipes[0].removed.pop().expect("node 2");
    node_2.expires = Some(ms(590));
    h.wipes[0].kept.push(node_2);
    assert!(check(&h).is_ok(), "{}", check(&h));
    h.wipes[0].kept[2].expires = Some(ms(610));
    assert!(kinds(&h).contains(&"overlap"), "{}", check(&h));
    // A second overlap the same wipe does not cover (another resource's
    // windows) is flagged beside the excused one.
    let mut h = wiped();
    h.grants.push(Grant::new(2, "r", ms(600), ms(800)));
    h.grants.push(Grant::new(3, "r", ms(700), ms(900)));
    let verdict = check(&h);
    assert_eq!(kinds(&h), ["overlap"], "{verdict}");
    assert_eq!(verdict.excused_overlaps.len(), 1);
    // More updates lost than excused overlaps in which both wrote.
    let mut h = wiped();
    h.counters.insert("held".into(), 0);
    assert_eq!(kinds(&h), ["lost_update"]);
}

#[test]
fn a_loss_or_a_fence_reset_after_a_wipe_is_counted_only_where_the_wipe_reaches() {
    // A loss after a minority wipe is the library's.
    let mut h = wiped();
    h.grants.truncate(1);
    h.counters.clear();
    let node_2 = h.wipes[0].removed.pop().expect("node 2");
    h.wipes[0].kept.push(node_2);
    assert_eq!(kinds(&h), ["loss_with_majority_up"]);
    // A loss long after a majority wipe too.
    let mut h = wiped();
    h.grants.truncate(1);
    h.counters.clear();
    h.losses[0].at = ms(2600);
    assert_eq!(kinds(&h), ["loss_with_majority_up"]);
    // A fence going backwards after a FLUSHALL of one node between the
    // two grants, at once or long after: counted; after a DEL of lock keys
    // only, or with the FLUSHALL before the earlier call: judged.
    let fenced = |wipe: Wipe, earlier: u64, later: u64| History {
        grants: vec![
            g(0, earlier, earlier + 100, Some(9), false),
            g(1, later, later + 100, Some(1), false),
        ],
        wipes: vec![wipe],
        nodes: Some(5),
        ..History::default()
    };
    let flush = Wipe {
        kind: "flushall".into(),
        all_keys: true,
        from: ms(150),
        to: ms(160),
        removed: vec![Wiped {
            node: 3,
            resource: "r".into(),
            token: String::new(),
            expires: None,
        }],
        kept: Vec::new(),
    };
    for later in [200, 5000] {
        let verdict = check(&fenced(flush.clone(), 0, later));
        assert!(verdict.is_ok(), "{verdict}");
        assert_eq!(verdict.fences_reset_by_wipes, 1);
    }
    let del = Wipe {
        kind: "del".into(),
        all_keys: false,
        ..flush.clone()
    };
    assert_eq!(kinds(&fenced(del.clone(), 0, 200)), ["fence_backwards"]);
    assert_eq!(kinds(&fenced(flush, 170, 400)), ["fence_backwards"]);
    // A DEL that removed the earlier grant's own key on one node, after its
    // call began and before the later grant: that node could grant both
    // (seed 7387122680166939934 of a soak, two fences of 935). Counted;
    // judged where the key it removed was another call's.
    let own = |token: &str| {
        let mut h = fenced(del.clone(), 0, 200);
        h.grants[0].token = "a8cf".into();
        h.wipes[0].removed[0].token = token.into();
        h
    };
    let verdict = check(&own("a8cf"));
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.fences_reset_by_wipes, 1);
    assert_eq!(kinds(&own("c80a")), ["fence_backwards"]);
}

/// Seed 15310746350384510228 of a soak: client 1's fenced call drew fence
/// 58 on nodes 0, 1 and 2; an operator's `DEL` then removed its key on
/// nodes 0 and 2 (and the resource's keys on 3 and 4); client 5 was
/// granted in the gap with fence 59 and released; client 1's call
/// returned after, with 58. Counted where the wipe left a majority
/// without the later call's key while it was under way; judged where the
/// wipe reached a minority, or came before the later call began.
#[test]
fn a_fence_drawn_before_a_majority_wipe_and_granted_after_another_is_counted() {
    let key = |node, token: &str| Wiped {
        node,
        resource: "r".into(),
        token: token.into(),
        expires: None,
    };
    let case = |removed: Vec<Wiped>, kept: Vec<Wiped>, invoked: u64| History {
        grants: vec![
            Grant {
                token: "fcb7".into(),
                ..g(5, 922, 925, Some(59), true)
            },
            Grant {
                token: "7da2".into(),
                invoked: ms(invoked),
                ..g(1, 938, 940, Some(58), true)
            },
        ],
        wipes: vec![Wipe {
            kind: "del".into(),
            all_keys: false,
            from: ms(897),
            to: ms(913),
            removed,
            kept,
        }],
        nodes: Some(5),
        ..History::default()
    };
    let majority = || vec![key(0, "7da2"), key(3, "fc89"), key(4, ""), key(2, "7da2")];
    let verdict = check(&case(majority(), vec![key(1, "7da2")], 888));
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.fences_reset_by_wipes, 1);
    // A minority wiped, the later call's key kept on the rest.
    let minority = case(
        vec![key(0, "7da2")],
        vec![key(1, "7da2"), key(2, "7da2"), key(3, "7da2")],
        888,
    );
    assert_eq!(kinds(&minority), ["fence_backwards"]);
    // The later call began after the wipe ended.
    assert_eq!(
        kinds(&case(majority(), vec![key(1, "7da2")], 930)),
        ["fence_backwards"]
    );
}
