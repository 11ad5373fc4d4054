//! Clocks and round trips: the node's clock rate (and wall clock) against
//! the client's, and its round trips against the node timeout.

use super::facts::ClockSample;
use crate::check::{Aspect, Finding, Latency, Severity};
use std::time::Duration;

/// Round trips against the node timeout.
pub(super) fn latency(latency: Latency, timeout: Duration) -> Option<Finding> {
    let seen = format!(
        "round trip p50 {}, p99 {}, node timeout {}",
        ms(latency.p50),
        ms(latency.p99),
        ms(timeout)
    );
    let (severity, advice) = if latency.p50 >= timeout {
        (
            Severity::Degraded,
            "most requests time out: raise node_timeout or move the node closer",
        )
    } else if latency.p99 >= timeout {
        (
            Severity::Degraded,
            "some requests time out and the node misses votes: raise node_timeout",
        )
    } else if latency.p99 * 2 >= timeout {
        (
            Severity::Note,
            "slow round trips eat into every lock's validity; consider a larger node_timeout",
        )
    } else {
        return None;
    };
    Some(Finding::new(severity, Aspect::Latency, seen, advice))
}

/// A duration in milliseconds, to two decimals: `0.27ms`.
fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1000.0)
}

/// Largest offset between the node's wall clock and the client's that
/// passes without a note.
const OFFSET_NOTE: Duration = Duration::from_secs(1);

/// The node's clock rate against the client's, bounded by the round trips:
/// unsafe when even the slowest rate the readings allow is faster than
/// `1 + drift_factor` (keys expire early), a note when the readings are too
/// coarse to tell, when the node runs slow, or when its wall clock is far
/// off.
pub(super) fn judge_clock(clock: ClockSample, drift_factor: f64) -> Vec<Finding> {
    let mut out: Vec<Finding> = clock_rate(clock, drift_factor).into_iter().collect();
    let offset = Duration::from_millis(clock.offset_ms.unsigned_abs());
    if offset > OFFSET_NOTE {
        out.push(Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!(
                "wall clock {} by {offset:?}",
                if clock.offset_ms > 0 {
                    "ahead"
                } else {
                    "behind"
                }
            ),
            "Redlock needs no agreement on the time, only on its rate; a step in the node's clock would expire keys early: synchronise with NTP (slewing)",
        ));
    }
    out
}

/// The node's clock rate against the client's, if it is worth a finding.
fn clock_rate(clock: ClockSample, drift_factor: f64) -> Option<Finding> {
    let node = clock.node_elapsed.as_secs_f64();
    let (min, max) = (
        clock.client_min.as_secs_f64(),
        clock.client_max.as_secs_f64(),
    );
    if max <= 0.0 {
        return None;
    }
    // The rate lies in [node/max, node/min].
    let low = node / max;
    let high = if min > 0.0 { node / min } else { f64::INFINITY };
    let percent = |r: f64| (r - 1.0) * 100.0;
    if low > 1.0 + drift_factor {
        Some(Finding::new(
            Severity::Unsafe,
            Aspect::Clock,
            format!(
                "the node's clock runs {:.1}% to {:.1}% fast against the client's, beyond the drift allowance of {:.1}%",
                percent(low),
                percent(high),
                drift_factor * 100.0
            ),
            "fix the node's time keeping (NTP slews at most 0.05%), or raise drift_factor above the measured rate",
        ))
    } else if high - low > drift_factor.max(0.001) {
        Some(Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!(
                "clock rate between {:+.1}% and {:+.1}%: round trips too slow to judge against the {:.1}% allowance",
                percent(low),
                percent(high),
                drift_factor * 100.0
            ),
            "check again with a longer clock interval",
        ))
    } else if high < 1.0 - drift_factor {
        Some(Finding::new(
            Severity::Note,
            Aspect::Clock,
            format!(
                "the node's clock runs {:.1}% slow against the client's",
                -percent(high)
            ),
            "locks outlive their ttl on this node (safe, but a crashed holder's lock stays longer)",
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::judge::testing::{findings, healthy, options};

    fn clock(node_ms: u64, min_ms: u64, max_ms: u64) -> ClockSample {
        ClockSample {
            node_elapsed: Duration::from_millis(node_ms),
            client_min: Duration::from_millis(min_ms),
            client_max: Duration::from_millis(max_ms),
            offset_ms: 0,
        }
    }

    #[test]
    fn the_clock_rate_is_judged_by_its_bounds() {
        let severities = |c| {
            judge_clock(c, 0.01)
                .iter()
                .map(|f| f.severity)
                .collect::<Vec<_>>()
        };
        // 5 % fast, measured tightly: unsafe.
        assert_eq!(severities(clock(1050, 999, 1001)), [Severity::Unsafe]);
        // 0.5 % fast: within the allowance.
        assert_eq!(severities(clock(1005, 999, 1001)), []);
        // 5 % fast in the best case, but the round trips allow 1 %: unsure.
        assert_eq!(severities(clock(1050, 900, 1040)), [Severity::Note]);
        // 5 % slow: a note.
        assert_eq!(severities(clock(950, 999, 1001)), [Severity::Note]);
        // A wall clock far off is a note, whatever the rate.
        let mut off = clock(1000, 999, 1001);
        off.offset_ms = -5000;
        let found = judge_clock(off, 0.01);
        assert_eq!(found.len(), 1);
        assert!(found[0].seen.contains("behind"), "{:?}", found[0]);
    }

    #[test]
    fn latency_against_the_node_timeout() {
        let ms = Duration::from_millis;
        let mut s = healthy("1");
        // A tenth of the round trips exceed the timeout: p99 does, p50 not.
        s.rtts = vec![ms(1); 90];
        s.rtts.extend([ms(300); 10]);
        assert_eq!(
            findings(s.clone(), &options()),
            [(Severity::Degraded, Aspect::Latency)]
        );
        s.rtts = vec![ms(130); 10];
        assert_eq!(findings(s, &options()), [(Severity::Note, Aspect::Latency)]);
        let l = Latency::of(&[ms(3), ms(1), ms(2)]).expect("samples");
        assert_eq!((l.p50, l.p99), (ms(2), ms(3)));
        assert_eq!(Latency::of(&[]), None);
    }
}
