//! A small RFC 3339 timestamp parser, for `anthropic-ratelimit-*-reset`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses an RFC 3339 timestamp such as `"2026-11-29T21:40:53Z"`,
/// `"2026-11-29T21:40:53.123456789Z"` or `"2026-11-29T23:40:53+02:00"`.
///
/// Accepted: `YYYY-MM-DD`, then `T`, `t` or a space, then `hh:mm:ss`, an
/// optional `.` with one or more fraction digits (nanosecond precision, the
/// rest truncated), then `Z`, `z` or a `+hh:mm` / `-hh:mm` offset. Every field
/// is range-checked (day within its month, leap years, hour ≤ 23, minute ≤ 59,
/// second ≤ 60 for a leap second). Anything else gives `None`, as does a time
/// [`SystemTime`] cannot represent on this platform.
pub(super) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let year = digits(b, 0, 4)?;
    let month = digits(b, 5, 2)?;
    let day = digits(b, 8, 2)?;
    let hour = digits(b, 11, 2)?;
    let minute = digits(b, 14, 2)?;
    let second = digits(b, 17, 2)?;
    let separators_ok = b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
        && b[16] == b':';
    let in_range = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour <= 23
        && minute <= 59
        && second <= 60;
    if !separators_ok || !in_range {
        return None;
    }
    let (nanos, zone) = fraction(&b[19..])?;
    let offset_secs = offset(zone)?;
    let day_secs = i64::from(hour * 3600 + minute * 60 + second);
    let secs = days_from_civil(year, month, day) * 86_400 + day_secs - offset_secs;
    let whole = if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(secs.unsigned_abs()))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
    };
    whole?.checked_add(Duration::from_nanos(nanos))
}

/// Reads `len` ASCII digits at `at` as a number.
fn digits(b: &[u8], at: usize, len: usize) -> Option<u32> {
    b.get(at..at + len)?.iter().try_fold(0u32, |acc, d| {
        d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
    })
}

/// Splits an optional `.digits` fraction off; returns nanoseconds and the rest.
fn fraction(b: &[u8]) -> Option<(u64, &[u8])> {
    let Some(after_dot) = b.strip_prefix(b".") else {
        return Some((0, b));
    };
    let n = after_dot.iter().take_while(|d| d.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let (frac, rest) = after_dot.split_at(n);
    let mut nanos = 0u64;
    for i in 0..9 {
        let d = frac.get(i).map_or(0, |d| u64::from(d - b'0'));
        nanos = nanos * 10 + d;
    }
    Some((nanos, rest))
}

/// The zone designator as seconds east of UTC.
fn offset(b: &[u8]) -> Option<i64> {
    let sign = match b {
        b"Z" | b"z" => return Some(0),
        [b'+', ..] => 1,
        [b'-', ..] => -1,
        _ => return None,
    };
    if b.len() != 6 || b[3] != b':' {
        return None;
    }
    let hours = digits(b, 1, 2)?;
    let minutes = digits(b, 4, 2)?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some(sign * i64::from(hours * 3600 + minutes * 60))
}

/// Whether `year` is a leap year in the proleptic Gregorian calendar.
fn is_leap(year: u32) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Days in `month` (1–12) of `year`.
fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (month 1–12).
fn days_from_civil(year: u32, month: u32, day: u32) -> i64 {
    // Count years from March so the leap day is the last day of the year.
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, nanos: u32) -> Option<SystemTime> {
        Some(UNIX_EPOCH + Duration::new(secs, nanos))
    }

    #[test]
    fn rfc3339_table() {
        // 2026-11-29T21:40:53Z is 1_795_988_453 seconds after the epoch.
        let t = 1_795_988_453;
        let cases: &[(&str, Option<SystemTime>)] = &[
            ("1970-01-01T00:00:00Z", at(0, 0)),
            ("2026-11-29T21:40:53Z", at(t, 0)),
            ("2026-11-29t21:40:53z", at(t, 0)),
            ("2026-11-29 21:40:53Z", at(t, 0)),
            ("2026-11-29T21:40:53.5Z", at(t, 500_000_000)),
            ("2026-11-29T21:40:53.123456789123Z", at(t, 123_456_789)),
            ("2026-11-29T23:40:53+02:00", at(t, 0)),
            ("2026-11-29T16:10:53-05:30", at(t, 0)),
            ("2026-11-29T21:40:53-00:00", at(t, 0)),
            // The widest offsets there are.
            ("2026-11-30T21:39:53+23:59", at(t, 0)),
            ("2026-11-28T21:41:53-23:59", at(t, 0)),
            ("2026-11-29T21:40:53.25+00:00", at(t, 250_000_000)),
            ("2000-02-29T00:00:00Z", at(951_782_400, 0)),
            ("2024-02-29T12:00:00Z", at(1_709_208_000, 0)),
            ("2016-12-31T23:59:60Z", at(1_483_228_800, 0)),
            ("9999-12-31T23:59:59Z", at(253_402_300_799, 0)),
            (
                "1969-12-31T23:59:59Z",
                UNIX_EPOCH.checked_sub(Duration::from_secs(1)),
            ),
            ("", None),
            ("2026-11-29", None),
            ("2026-11-29T21:40:53", None),
            ("2026-11-29T21:40:53ZZ", None),
            ("2026-11-29T21:40:53.Z", None),
            ("2026-13-01T00:00:00Z", None),
            ("2026-00-01T00:00:00Z", None),
            ("2026-02-29T00:00:00Z", None),
            ("1900-02-29T00:00:00Z", None),
            ("2026-04-31T00:00:00Z", None),
            ("2026-04-00T00:00:00Z", None),
            ("2026-11-29T24:00:00Z", None),
            ("2026-11-29T21:60:00Z", None),
            ("2026-11-29T21:40:61Z", None),
            ("2026-11-29T21:40:53+24:00", None),
            ("2026-11-29T21:40:53+02:60", None),
            ("2026-11-29T21:40:53+0200", None),
            ("2026-11-29T21:40:53+02:00:00", None),
            ("2026-11-29X21:40:53Z", None),
            ("2026/11/29T21:40:53Z", None),
            ("+026-11-29T21:40:53Z", None),
            ("２０２６-11-29T21:40:53Z", None),
            ("2026-11-29T21:40:5３Z", None),
            ("99999999999999999999999999999999999", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_rfc3339(input), *want, "input {input:?}");
        }
    }

    #[test]
    fn days_from_civil_matches_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(0, 1, 1), -719_528);
    }
}
