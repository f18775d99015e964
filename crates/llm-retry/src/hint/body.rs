//! "try again in …" phrases in error bodies, e.g. OpenAI's
//! `"Please try again in 6ms."`.

use super::go_duration::parse_go_duration;
use super::number::{Decimal, NANOS_PER_MILLI, NANOS_PER_SEC};
use std::time::Duration;

/// Only this many leading bytes of a body are scanned.
pub(crate) const BODY_SCAN_LIMIT: usize = 64 * 1024;

/// The phrase that introduces a wait, matched ASCII-case-insensitively.
const PHRASE: &[u8] = b"try again in";

/// The first "try again in …" duration in the first [`BODY_SCAN_LIMIT`]
/// bytes of `body`.
///
/// The body is scanned as bytes, so invalid UTF-8 elsewhere does not matter.
/// The duration is either a Go duration (`6ms`, `1.5s`, `2m30s`) or a number
/// followed by a unit word, with or without a space (`20 seconds`, `1.5 s`,
/// `3min`). A number without a unit is not a wait.
pub(crate) fn parse_body_phrase(body: &[u8]) -> Option<Duration> {
    let scanned = &body[..body.len().min(BODY_SCAN_LIMIT)];
    let mut from = 0;
    while let Some(pos) = find_phrase(&scanned[from..]) {
        let after = from + pos + PHRASE.len();
        if let Some(wait) = duration_at(&scanned[after..]) {
            return Some(wait);
        }
        from = after;
    }
    None
}

/// Position of the next [`PHRASE`], ignoring ASCII case.
fn find_phrase(hay: &[u8]) -> Option<usize> {
    hay.windows(PHRASE.len())
        .position(|w| w.eq_ignore_ascii_case(PHRASE))
}

/// The duration at the start of `rest` (after optional blanks).
fn duration_at(rest: &[u8]) -> Option<Duration> {
    let rest = skip_blanks(rest);
    let len = rest
        .iter()
        .position(|b| !is_token_byte(*b))
        .unwrap_or(rest.len());
    let (token, after) = rest.split_at(len);
    let token = trim_trailing_dots(token);
    let lower = std::str::from_utf8(token).ok()?.to_ascii_lowercase();
    if lower.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        // A bare number: the unit is the next word.
        let number = Decimal::parse(lower.as_bytes())?;
        let after = skip_blanks(after);
        let word_len = after.iter().take_while(|b| b.is_ascii_alphabetic()).count();
        let word = after[..word_len].to_ascii_lowercase();
        return Some(number.duration(word_unit_nanos(&word)?));
    }
    if let Some(go) = parse_go_duration(&lower) {
        return Some(go);
    }
    // A number glued to a unit word, as in `20seconds`.
    let (number, word) = Decimal::parse_prefix(lower.as_bytes())?;
    Some(number.duration(word_unit_nanos(word)?))
}

/// Bytes that may make up a duration token: ASCII letters and digits, `.`,
/// and the UTF-8 bytes of `µ` (U+00B5) and `μ` (U+03BC).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | 0xC2 | 0xB5 | 0xCE | 0xBC)
}

/// `bytes` without leading ASCII whitespace.
fn skip_blanks(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &bytes[n..]
}

/// `token` without a sentence-ending dot (`"1.5s."`).
fn trim_trailing_dots(token: &[u8]) -> &[u8] {
    let n = token.iter().rev().take_while(|b| **b == b'.').count();
    &token[..token.len() - n]
}

/// Nanoseconds in one unit word (lowercase).
fn word_unit_nanos(word: &[u8]) -> Option<u64> {
    Some(match word {
        b"ms" | b"msec" | b"msecs" | b"millisecond" | b"milliseconds" => NANOS_PER_MILLI,
        b"s" | b"sec" | b"secs" | b"second" | b"seconds" => NANOS_PER_SEC,
        b"m" | b"min" | b"mins" | b"minute" | b"minutes" => 60 * NANOS_PER_SEC,
        b"h" | b"hr" | b"hrs" | b"hour" | b"hours" => 3_600 * NANOS_PER_SEC,
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
    fn body_phrase_table() {
        let cases: &[(&[u8], Option<Duration>)] = &[
            (b"Rate limit reached. Please try again in 6ms.", ms(6)),
            (b"Please try again in 1.5s.", ms(1500)),
            (b"try again in 20 seconds", ms(20_000)),
            (b"try again in 2m30s", ms(150_000)),
            (b"TRY AGAIN IN 3 MIN", ms(180_000)),
            (b"Try again in 1 minute.", ms(60_000)),
            (b"try again in 250 milliseconds", ms(250)),
            (b"try again in 1.5 s.", ms(1500)),
            (b"try again in 20seconds", ms(20_000)),
            (b"try again in 7sec!", ms(7000)),
            (
                "try again in 250µs".as_bytes(),
                Some(Duration::from_micros(250)),
            ),
            (b"try again in 1h2m3.5s", ms(3_723_500)),
            (b"try again in 2 hours", ms(7_200_000)),
            (b"try again in 1.5 hr", ms(5_400_000)),
            (
                br#"{"error":{"message":"... Please try again in 20s. Visit ..."}}"#,
                ms(20_000),
            ),
            (b"try again in a moment; try again in 5s", ms(5000)),
            (b"try again in\n 4s", ms(4000)),
            (b"\xff\xfe try again in 2s \xff", ms(2000)),
            (
                b"try again in 99999999999999999999999999999999999s",
                Some(MAX_HINT),
            ),
            (b"try again in 20", None),
            (b"try again in 20 parsecs", None),
            (b"try again in -5s", None),
            (b"try again in 1e300s", None),
            (b"try again in NaN seconds", None),
            (b"try again in inf s", None),
            ("try again in １０s".as_bytes(), None),
            (b"try again in", None),
            (b"try again later", None),
            (b"", None),
            (b"retry after 5 seconds", None),
        ];
        for (input, want) in cases {
            let text = String::from_utf8_lossy(input);
            assert_eq!(parse_body_phrase(input), *want, "body {text:?}");
        }
    }

    #[test]
    fn scans_only_the_first_64_kib() {
        let mut body = vec![b' '; 65_536 - 20];
        body.extend_from_slice(b"try again in 2s");
        assert_eq!(parse_body_phrase(&body), ms(2000));
        let mut late = vec![b' '; 65_536];
        late.extend_from_slice(b"try again in 2s");
        assert_eq!(parse_body_phrase(&late), None);
    }
}
