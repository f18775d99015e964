//! OpenAI's `x-ratelimit-reset-requests` / `-tokens`: Go durations.
//!
//! Input: the header value. Checks: nothing panics; every wait is at most
//! `MAX_HINT`; a duration read back from its own nanosecond spelling is the
//! same; the request window states the same reset; the two headers read
//! alike.

#![no_main]

#[path = "common.rs"]
mod common;

use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use llm_retry::fuzzing::{parse_hint, request_window, WaitSource, MAX_HINT};
use std::time::{Duration, UNIX_EPOCH};

fuzz_target!(|value: &[u8]| {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let Some(mut requests) = common::headers(&["x-ratelimit-reset-requests"], value) else {
        return;
    };
    requests.insert(
        "x-ratelimit-remaining-requests",
        HeaderValue::from_static("0"),
    );
    let wait = parse_hint(&requests, None, now).wait;

    let mut tokens = common::headers(&["x-ratelimit-reset-tokens"], value).expect("valid");
    tokens.insert(
        "x-ratelimit-remaining-tokens",
        HeaderValue::from_static("0"),
    );
    assert_eq!(parse_hint(&tokens, None, now).wait, wait);

    let window = request_window(&requests, now).expect("a count of zero names a window");
    assert_eq!(window.remaining, 0);
    assert_eq!(window.reset_in, wait.map(|w| w.duration));

    let Some(wait) = wait else {
        return;
    };
    assert_eq!(wait.source, WaitSource::RateLimitReset);
    assert!(wait.duration <= MAX_HINT);
    if wait.duration < MAX_HINT {
        let spelled = format!("{}ns", wait.duration.as_nanos());
        let again =
            common::headers(&["x-ratelimit-reset-requests"], spelled.as_bytes()).expect("ascii");
        let again = parse_hint(&again, None, now).wait.expect("a Go duration");
        assert_eq!(again.duration, wait.duration);
    }
});
