//! `retry-after-ms`: milliseconds, a fraction allowed.
//!
//! Input: the header value. Checks: nothing panics; every wait is at most
//! `MAX_HINT` and never called whole seconds; whole milliseconds read
//! exactly; the header beats a `Retry-After` beside it whenever it names a
//! positive wait.

#![no_main]

#[path = "common.rs"]
mod common;

use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use llm_retry::fuzzing::{parse_hint, WaitSource, MAX_HINT};
use std::time::{Duration, UNIX_EPOCH};

fuzz_target!(|value: &[u8]| {
    let Some(mut map) = common::headers(&["retry-after-ms"], value) else {
        return;
    };
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let alone = parse_hint(&map, None, now).wait;
    map.insert("retry-after", HeaderValue::from_static("7"));
    let beside = parse_hint(&map, None, now)
        .wait
        .expect("retry-after names 7 s");
    let Some(wait) = alone else {
        assert_eq!(beside.duration, Duration::from_secs(7));
        return;
    };
    assert_eq!(wait.source, WaitSource::RetryAfterMs);
    assert!(wait.duration <= MAX_HINT);
    assert!(!wait.whole_seconds);
    if wait.duration >= Duration::from_millis(1) {
        assert_eq!(beside, wait);
    } else {
        // A zero wait does not hide the real one named beside it.
        assert_eq!(beside.duration, Duration::from_secs(7));
    }
    let text = common::trimmed(value).expect("a parsed value is text");
    if common::all_digits(text) && text.len() <= 12 {
        let ms: u64 = text.parse().expect("digits");
        assert_eq!(wait.duration, Duration::from_millis(ms));
    }
});
