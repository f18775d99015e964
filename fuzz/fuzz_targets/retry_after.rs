//! `Retry-After`: seconds (a fraction allowed) or an HTTP-date.
//!
//! Input: eight bytes of clock, then the header value. Checks: nothing
//! panics; every wait is at most `MAX_HINT`; whole seconds read exactly; an
//! HTTP-date that `httpdate` reads is the time left until it (zero when
//! past); `parse_hint` over the header alone gives the same wait.

#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use llm_retry::fuzzing::{parse_hint, parse_retry_after, WaitSource, MAX_HINT};
use std::time::Duration;

fuzz_target!(|input: &[u8]| {
    let Some((clock, value)) = input.split_first_chunk::<8>() else {
        return;
    };
    let now = common::now_from(*clock);
    let Some(map) = common::headers(&["retry-after"], value) else {
        return;
    };
    let wait = parse_retry_after(&map["retry-after"], now);
    assert_eq!(parse_hint(&map, None, now).wait, wait);
    let Some(wait) = wait else {
        return;
    };
    assert!(wait.duration <= MAX_HINT);
    let text = common::trimmed(value).expect("a parsed value is text");
    if common::all_digits(text) && text.len() <= 9 {
        let secs: u64 = text.parse().expect("digits");
        assert_eq!(wait.duration, Duration::from_secs(secs));
        assert_eq!(wait.source, WaitSource::RetryAfterSeconds);
        assert!(wait.whole_seconds);
    }
    if let Ok(date) = httpdate::parse_http_date(text) {
        assert_eq!(wait.source, WaitSource::RetryAfterDate);
        let left = date.duration_since(now).unwrap_or_default().min(MAX_HINT);
        assert_eq!(wait.duration, left);
        assert!(wait.whole_seconds);
    }
    if wait.source == WaitSource::RetryAfterSeconds {
        assert_eq!(wait.whole_seconds, wait.duration.subsec_nanos() == 0);
    }
});
