//! The checkers the runs rely on, fed known histories: overlaps, lost
//! updates, fences, starvation; and replaying a saved history.

use super::*;

/// The checker the runs above rely on (`quorumlock::testkit::history`)
/// flags what they must never see: an overlap, a lost update, a fence
/// going backwards — recorded through the public API, on a paused clock.
/// (Each kind of violation has its own tests in the testkit.)
#[tokio::test(start_paused = true)]
async fn the_checker_flags_an_overlap_a_lost_update_and_a_fence_going_backwards() {
    let recorder = Recorder::new();
    let ms = Duration::from_millis;
    let section = |client, from, to, fence| {
        let grant = Grant {
            fence,
            wrote: true,
            ..Grant::new(client, "r", recorder.at(from), recorder.at(to))
        };
        recorder.grant(grant);
    };
    let t0 = Instant::now();
    tokio::time::advance(ms(100)).await;
    // Clients 0 and 1 one after the other; client 2 inside client 1's
    // window, with client 0's fence; the counter saw two of three writes.
    section(0, t0, t0 + ms(100), Some(1));
    section(1, t0 + ms(100), t0 + ms(200), Some(2));
    section(2, t0 + ms(150), t0 + ms(250), Some(1));
    recorder.counter("r", 2);
    let verdict = check(&recorder.take());
    let kinds: Vec<&str> = verdict.violations.iter().map(Violation::kind).collect();
    assert_eq!(
        kinds,
        ["overlap", "lost_update", "fence_backwards"],
        "{verdict}"
    );
    let text = verdict.to_string();
    assert!(text.starts_with("3 violations:"), "{text}");
    assert!(text.contains("overlapping windows on r"), "{text}");
}

/// A synthetic history of calls on `resource`: (client, kind, start ms,
/// end ms, granted).
pub(super) fn calls(resource: &str, calls: &[(usize, OpKind, u64, u64, bool)]) -> History {
    let ms = Duration::from_millis;
    let ops = calls.iter().map(|&(client, kind, start, end, granted)| Op {
        client,
        kind,
        resource: resource.to_owned(),
        start: ms(start),
        end: ms(end),
        outcome: if granted {
            Outcome::Ok
        } else {
            Outcome::Failed("wait timeout".to_owned())
        },
    });
    History {
        ops: ops.collect(),
        ..History::default()
    }
}

/// The starvation check (no servers): a fair call passed over `k + 1`
/// times is flagged, `k` times is not; only grants to calls that began
/// after it began and were granted before it ended count — not an earlier
/// caller's, not one granted after it, not a failed call, not a release,
/// not another resource's.
#[test]
fn the_starvation_check_flags_a_fair_call_passed_over_more_than_k_times() {
    use OpKind::{Lock, Release, TryLock};
    let k = 3;
    // Client 0 waits from 10 ms to its grant at 100 ms; clients 1..=4 each
    // begin later and are granted before it: k + 1 passes.
    let mut ops = vec![(0, Lock, 10, 100, true)];
    ops.extend((1..=k + 1).map(|c| (c, Lock, 10 + 10 * c as u64, 15 + 10 * c as u64, true)));
    // None of these count.
    ops.extend([
        (5, Lock, 5, 30, true),       // began before client 0
        (6, Lock, 60, 120, true),     // granted after client 0
        (7, Lock, 20, 40, false),     // gave up: no grant
        (8, Release, 30, 35, true),   // a release
        (9, TryLock, 10, 12, true),   // began at the same time
        (10, TryLock, 99, 100, true), // granted as client 0 was
    ]);
    let history = calls("fair", &ops);
    let fairness = starvation(&history, "fair", k);
    let [starved] = &fairness.starved[..] else {
        panic!("{fairness}{}", fairness.starved_text());
    };
    assert_eq!(starved.call.client, 0, "{fairness}");
    let by: Vec<usize> = starved.by.iter().map(|b| b.client).collect();
    assert_eq!(by, [1, 2, 3, 4], "{fairness}");
    assert_eq!(fairness.most(), k + 1);
    assert_eq!((fairness.calls, fairness.granted), (8, 7));
    assert!(fairness.starved_text().contains("STARVED"), "{fairness}");
    // Passed over k times (client 4's grant gone): within the bound.
    ops.retain(|&(client, ..)| client != 4);
    let fairness = starvation(&calls("fair", &ops), "fair", k);
    assert!(fairness.starved.is_empty(), "{fairness}");
    assert_eq!(fairness.most(), k);
    // Another resource's calls are not this one's.
    let fairness = starvation(&history, "other", k);
    assert_eq!((fairness.calls, fairness.most()), (0, 0));
}

/// A fair call that waited through a majority outage (or the time its
/// manager may take to ask the nodes back) is not judged; one that began
/// after that is.
#[test]
fn the_starvation_check_excuses_a_call_that_waited_through_a_majority_outage() {
    let k = 1;
    let mut ops = vec![(0, OpKind::Lock, 1_000, 4_000, true)];
    ops.extend((1..=k + 1).map(|c| {
        (
            c,
            OpKind::Lock,
            2_000 + 10 * c as u64,
            2_005 + 10 * c as u64,
            true,
        )
    }));
    let mut history = calls("fair", &ops);
    let starved = starvation(&history, "fair", k);
    assert_eq!(starved.starved.len(), 1, "{starved}");
    history.outages.push(Outage {
        from: Duration::from_millis(900),
        to: Duration::from_millis(1_500),
        back: Duration::from_millis(1_800),
    });
    let excused = starvation(&history, "fair", k);
    assert!(excused.starved.is_empty(), "{excused}");
    // (The calls that passed it began within the rejoin time too.)
    assert_eq!(excused.excused, 3, "{excused}");
    // Long after the outage (past REJOIN): judged again.
    let later: Vec<_> = ops
        .iter()
        .map(|&(c, kind, a, b, g)| (c, kind, a + 10_000, b + 10_000, g))
        .collect();
    let mut history = calls("fair", &later);
    history.outages.push(Outage {
        from: Duration::from_millis(900),
        to: Duration::from_millis(1_500),
        back: Duration::from_millis(1_800),
    });
    assert_eq!(starvation(&history, "fair", k).starved.len(), 1);
}

/// A fair call that gave up is judged up to when it gave up: passed over
/// `k + 1` times while it waited, it starved.
#[test]
fn the_starvation_check_flags_a_fair_call_that_gave_up_after_being_passed_over() {
    let k = 2;
    let mut ops = vec![(0, OpKind::Lock, 0, 4000, false)];
    ops.extend((1..=k + 1).map(|c| (c, OpKind::Lock, 100 * c as u64, 100 * c as u64 + 5, true)));
    let fairness = starvation(&calls("fair", &ops), "fair", k);
    let [starved] = &fairness.starved[..] else {
        panic!("{fairness}{}", fairness.starved_text());
    };
    assert!(!starved.call.granted, "{fairness}");
    assert_eq!(starved.by.len(), k + 1, "{fairness}");
}

/// An auto-extended lock that lapses while its holder is busy elsewhere
/// (not watching `lost()`) is trusted until its deadline, not until the
/// release call, and the loss is recorded: the holders of the chaos runs
/// end each hold with a section in which they no longer watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapse_the_holder_did_not_watch_ends_its_window_at_the_deadline() {
    let nodes = RedisNodes::start(1).expect("node");
    let locks = support::builder(&nodes).build().expect("config");
    let recorder = Recorder::new();
    let ttl = Duration::from_millis(600);
    let attempt = recorder.lock(0, "lapse");
    let guard = locks.lock("lapse", ttl).await.expect("lock");
    let mut section = attempt.granted(&guard.lease(), ttl);
    section.auto_extended();
    guard.auto_extend();
    // Renewals fail from here on; the holder is busy until the lock lapsed.
    nodes[0].kill();
    support::no_hang("the deadline", async {
        while !guard.validity().is_zero() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let deadline = recorder.at(guard.deadline());
    let _ = section.release(guard).await;
    let history = recorder.take();
    let grant = &history.grants[0];
    assert_eq!(grant.believed_until, deadline, "{grant:?}");
    assert!(grant.release_called > deadline, "{grant:?}");
    assert_eq!(history.losses.len(), 1, "{history:?}");
    assert_eq!(history.losses[0].at, deadline);
}

/// Checks a saved history again, without servers:
/// `QUORUMLOCK_CHAOS_REPLAY=<file> cargo test --all-features --test it
/// chaos_replay -- --ignored --nocapture`. A failed chaos run prints this
/// command with its file.
#[test]
#[ignore = "replay: set QUORUMLOCK_CHAOS_REPLAY to a history file and run with --ignored"]
fn chaos_replay() {
    let Some(path) = std::env::var_os(REPLAY_ENV) else {
        panic!("set {REPLAY_ENV} to a history file (a chaos run writes one; see the module docs)");
    };
    let path = PathBuf::from(path);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let history = History::read_jsonl(std::io::BufReader::new(file))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let verdict = check(&history);
    println!(
        "{}: seed {:?}, {} grants, {} operations, {} faults, {} outages, {} losses; {} preempted, {} losses after stalls (counted, not judged)\n{verdict}",
        path.display(),
        history.seed,
        history.grants.len(),
        history.ops.len(),
        history.faults.len(),
        history.outages.len(),
        history.losses.len(),
        preempted(&history),
        verdict.losses_after_stalls,
    );
    let mut report = path.clone().into_os_string();
    report.push(".html");
    let report = PathBuf::from(report);
    let title = format!("{} checked again", path.display());
    match Page::new(&history, &verdict).title(title).write(&report) {
        Ok(()) => println!("report written to {}", report.display()),
        Err(e) => println!("report not written: {}: {e}", report.display()),
    }
    assert!(verdict.is_ok(), "{}: {verdict}", path.display());
}
