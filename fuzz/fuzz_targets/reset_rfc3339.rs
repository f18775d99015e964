//! Anthropic's `anthropic-ratelimit-*-reset`: RFC 3339 instants.
//!
//! Input: eight bytes of clock, then the header value. Checks: nothing
//! panics; every wait is at most `MAX_HINT`; an instant in UTC that
//! `humantime`'s RFC 3339 parser reads is the time left until it (zero when
//! past); the request window states the same reset.

#![no_main]

#[path = "common.rs"]
mod common;

use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use llm_retry::fuzzing::{parse_hint, request_window, WaitSource, MAX_HINT};

/// `YYYY-MM-DDThh:mm:ss`, an optional `.` and digits, then `Z`.
fn utc_shape(text: &str) -> bool {
    let b = text.as_bytes();
    let digit_at = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let fixed = b.len() >= 20
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .into_iter()
            .all(digit_at)
        && (b[4], b[7], b[10], b[13], b[16]) == (b'-', b'-', b'T', b':', b':');
    let tail = &b[19.min(b.len())..];
    let fraction_ok = match tail {
        [b'Z'] => true,
        [b'.', digits @ .., b'Z'] => !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    fixed && fraction_ok && &b[17..19] != b"60"
}

fuzz_target!(|input: &[u8]| {
    let Some((clock, value)) = input.split_first_chunk::<8>() else {
        return;
    };
    let now = common::now_from(*clock);
    let Some(mut map) = common::headers(&["anthropic-ratelimit-requests-reset"], value) else {
        return;
    };
    map.insert(
        "anthropic-ratelimit-requests-remaining",
        HeaderValue::from_static("0"),
    );
    let wait = parse_hint(&map, None, now).wait;
    let window = request_window(&map, now).expect("a count of zero names a window");
    assert_eq!(window.reset_in, wait.map(|w| w.duration));

    // humantime also takes text after the `Z` (`…53Z589Z`), which RFC 3339
    // does not, and reads a leap second `:60` as `:59` where the gate reads
    // the next second (the later instant, a safe reset): only the shape both
    // read alike is compared.
    let text = common::trimmed(value).filter(|t| utc_shape(t));
    if let Some(Ok(instant)) = text.map(humantime::parse_rfc3339) {
        let left = instant
            .duration_since(now)
            .unwrap_or_default()
            .min(MAX_HINT);
        assert_eq!(wait.map(|w| w.duration), Some(left), "{text:?}");
    }
    let Some(wait) = wait else {
        return;
    };
    assert_eq!(wait.source, WaitSource::AnthropicRateLimitReset);
    assert!(wait.duration <= MAX_HINT);
});
