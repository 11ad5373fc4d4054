//! Human durations on the command line: `500ms`, `10s`, `1.5s`, `2m`,
//! `1h`, `1m30s`; and `--wait`'s extra word, `forever`.

use std::time::Duration;

/// How long `exec` waits for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Retry until this much time has passed.
    For(Duration),
    /// Retry until the lock is free, however long that takes.
    Forever,
}

const UNITS: &str = "ms, s, m or h";

/// Parses `<number><unit>` pieces (`1m30s`); the number may have a
/// fraction (`1.5s`). Every piece needs a unit, so that `30` is not
/// silently read as seconds or milliseconds.
pub(crate) fn parse_duration(input: &str) -> Result<Duration, String> {
    let text = input.trim();
    if text.is_empty() {
        return Err(format!(
            "empty duration; use a number and a unit ({UNITS}), e.g. 10s"
        ));
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if number.is_empty() {
            return Err(format!(
                "`{text}` is not a duration; expected a number before `{unit}`"
            ));
        }
        let unit_nanos: u128 = match unit {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => {
                return Err(format!(
                    "`{text}` has no unit; add one of {UNITS}, e.g. {number}s"
                ));
            }
            other => {
                return Err(format!("unknown unit `{other}` in `{text}`; use {UNITS}"));
            }
        };
        total = total
            .checked_add(nanos(number, unit_nanos, text)?)
            .ok_or_else(|| too_long(text))?;
        rest = next;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| too_long(text))?;
    // The remainder is below one second, so it fits in u32.
    let sub = u32::try_from(total % 1_000_000_000).map_err(|_| too_long(text))?;
    Ok(Duration::new(secs, sub))
}

/// `forever` (or `inf`), or a duration.
pub(crate) fn parse_wait(input: &str) -> Result<Wait, String> {
    match input.trim() {
        "forever" | "inf" | "infinite" => Ok(Wait::Forever),
        other => parse_duration(other).map(Wait::For),
    }
}

/// `number` (digits, at most one `.`) times `unit_nanos`, exactly.
fn nanos(number: &str, unit_nanos: u128, text: &str) -> Result<u128, String> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') || (whole.is_empty() && fraction.is_empty()) {
        return Err(format!(
            "`{text}` is not a duration; malformed number `{number}`"
        ));
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_long(text))?
    };
    let mut value = whole
        .checked_mul(unit_nanos)
        .ok_or_else(|| too_long(text))?;
    // Digits beyond nanosecond precision cannot change the result.
    let mut scale = unit_nanos;
    for digit in fraction.bytes().take(20) {
        scale /= 10;
        value += u128::from(digit - b'0') * scale;
    }
    Ok(value)
}

fn too_long(text: &str) -> String {
    format!("`{text}` is too long a duration")
}

/// `1.5s`, `250ms`, `2m0s`: compact, for messages.
pub(crate) fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.2}s", d.as_secs_f64())
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Duration {
        match parse_duration(s) {
            Ok(d) => d,
            Err(e) => panic!("`{s}` should parse: {e}"),
        }
    }

    fn err(s: &str) -> String {
        match parse_duration(s) {
            Ok(d) => panic!("`{s}` should be rejected, got {d:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn single_units() {
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok(" 3s "), Duration::from_secs(3));
    }

    #[test]
    fn fractions_are_exact() {
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("0.1s"), Duration::from_millis(100));
        assert_eq!(ok(".25s"), Duration::from_millis(250));
        assert_eq!(ok("2.s"), Duration::from_secs(2));
        assert_eq!(ok("1.5ms"), Duration::from_micros(1500));
        assert_eq!(ok("0.000000001s"), Duration::from_nanos(1));
        assert_eq!(ok("0.0000000001s"), Duration::ZERO, "below a nanosecond");
    }

    #[test]
    fn compound_durations_add_up() {
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1h2m3s4ms"), Duration::new(3723, 4_000_000));
    }

    #[test]
    fn a_unit_is_required() {
        assert!(err("30").contains("no unit"));
        assert!(err("1m30").contains("no unit"));
    }

    #[test]
    fn bad_input_is_rejected_with_a_reason() {
        assert!(err("").contains("empty"));
        assert!(err("   ").contains("empty"));
        assert!(err("10x").contains("unknown unit `x`"));
        assert!(err("10 s").contains("unknown unit"));
        assert!(err("10sec").contains("unknown unit `sec`"));
        assert!(err("s").contains("expected a number"));
        assert!(err("-5s").contains("expected a number"));
        assert!(err("1.2.3s").contains("malformed"));
        assert!(err(".s").contains("malformed"));
        assert!(err("10S").contains("unknown unit"));
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        assert!(err("99999999999999999999999999999999999999999h").contains("too long"));
        assert!(err("18446744073709551615h").contains("too long"));
        assert!(err(&"9".repeat(400)).contains("no unit"));
        assert!(err(&format!("{}s", "9".repeat(400))).contains("too long"));
    }

    #[test]
    fn wait_accepts_forever() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("inf"), Ok(Wait::Forever));
        assert_eq!(parse_wait("10s"), Ok(Wait::For(Duration::from_secs(10))));
        assert!(parse_wait("never").is_err());
    }

    #[test]
    fn show_is_compact() {
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_millis(1500)), "1.50s");
        assert_eq!(show(Duration::from_secs(150)), "2m30s");
    }
}
