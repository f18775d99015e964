//! Go duration strings, as OpenAI sends in `x-ratelimit-reset-*`.

use super::number::{saturating_nanos, Decimal, NANOS_PER_SEC};
use std::time::Duration;

/// Parses a Go duration string (`time.Duration.String()` output and what
/// `time.ParseDuration` accepts) such as `"1s"`, `"6m0s"`, `"12ms"`,
/// `"1h2m3.5s"`, `"250us"`, `"250µs"`, `"100ns"` or `"0.5s"`.
///
/// Units are `ns`, `us`/`µs`/`μs`, `ms`, `s`, `m` and `h` (case-sensitive, as
/// in Go). A bare number without a unit (`"2"`, `"0.5"`) is read as seconds.
/// A leading `+` is accepted as in Go; negative durations, exponents,
/// empty strings and unknown units give `None`. Surrounding spaces and tabs
/// are ignored. Huge values saturate at [`MAX_HINT`](super::MAX_HINT).
pub(super) fn parse_go_duration(s: &str) -> Option<Duration> {
    let trimmed = s.trim_matches(|c| c == ' ' || c == '\t');
    let bytes = trimmed.as_bytes();
    let mut rest = bytes.strip_prefix(b"+").unwrap_or(bytes);
    if rest.is_empty() {
        return None;
    }
    if let Some(bare) = Decimal::parse(rest) {
        return Some(bare.duration(NANOS_PER_SEC));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (value, after) = Decimal::parse_prefix(rest)?;
        let unit_len = after
            .iter()
            .position(|b| b.is_ascii_digit() || *b == b'.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        total = total.saturating_add(value.nanos(unit_nanos(unit)?));
        rest = after;
    }
    Some(saturating_nanos(total))
}

/// Nanoseconds in one Go duration unit.
fn unit_nanos(unit: &[u8]) -> Option<u64> {
    Some(match unit {
        b"ns" => 1,
        b"us" => 1_000,
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU, as Go accepts.
        b"\xC2\xB5s" | b"\xCE\xBCs" => 1_000,
        b"ms" => 1_000_000,
        b"s" => NANOS_PER_SEC,
        b"m" => 60 * NANOS_PER_SEC,
        b"h" => 3_600 * NANOS_PER_SEC,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::MAX_HINT;
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn go_duration_table() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("1s", ms(1000)),
            ("6m0s", ms(360_000)),
            ("12ms", ms(12)),
            ("1h2m3.5s", ms(3_723_500)),
            ("250us", Some(Duration::from_micros(250))),
            ("250µs", Some(Duration::from_micros(250))),
            ("250μs", Some(Duration::from_micros(250))),
            ("100ns", Some(Duration::from_nanos(100))),
            ("0.5s", ms(500)),
            (".5s", ms(500)),
            ("1.s", ms(1000)),
            ("1.5h", ms(5_400_000)),
            ("0", Some(Duration::ZERO)),
            ("0s", Some(Duration::ZERO)),
            ("2", ms(2000)),
            ("0.25", ms(250)),
            ("+5s", ms(5000)),
            (" 7s\t", ms(7000)),
            ("1m1m", ms(120_000)),
            ("99999999999999999999999999999999999h", Some(MAX_HINT)),
            ("9999999999h9999999999h", Some(MAX_HINT)),
            ("", None),
            ("   ", None),
            ("+", None),
            ("-1s", None),
            ("1", ms(1000)),
            ("1x", None),
            ("s", None),
            ("1S", None),
            ("1 s", None),
            ("1e3s", None),
            ("inf", None),
            ("NaN", None),
            ("1.2.3s", None),
            ("１０s", None),
            ("1s ", ms(1000)),
            ("1s2", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go_duration(input), *want, "input {input:?}");
        }
    }
}
