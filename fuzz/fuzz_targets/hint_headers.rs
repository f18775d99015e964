//! Every hint header at once, repeated and mixed, with a body.
//!
//! Input: eight bytes of clock, then records `[name index][length][value]`
//! over the headers that name waits, windows and quotas, then the rest as
//! the body. Checks: nothing panics; every wait is at most `MAX_HINT`;
//! precedence: a positive `retry-after-ms` wins, then a positive
//! `Retry-After`; a body phrase counts only when no header named a positive
//! wait; `x-should-retry` reads as the classifier's own reading; a token
//! window never states a zero quota.

#![no_main]

#[path = "common.rs"]
mod common;

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use llm_retry::fuzzing::should_retry_header;
use llm_retry::fuzzing::{
    parse_hint, parse_retry_after, request_window, token_quota_only, token_window, WaitSource,
    MAX_HINT,
};
use std::time::Duration;

const NAMES: &[&str] = &[
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "anthropic-ratelimit-output-tokens-remaining",
];

const ONE_MS: Duration = Duration::from_millis(1);

fuzz_target!(|input: &[u8]| {
    let Some((clock, mut rest)) = input.split_first_chunk::<8>() else {
        return;
    };
    let now = common::now_from(*clock);
    let mut map = HeaderMap::new();
    while let [name, len, tail @ ..] = rest {
        if *name == 0xff {
            rest = tail;
            break;
        }
        let len = usize::from(*len).min(tail.len());
        let (value, tail) = tail.split_at(len);
        rest = tail;
        if let Ok(value) = HeaderValue::from_bytes(value) {
            let name = NAMES[usize::from(*name) % NAMES.len()];
            map.append(HeaderName::from_static(name), value);
        }
    }
    let body = rest;

    let hint = parse_hint(&map, Some(body), now);
    assert_eq!(hint.should_retry, should_retry_header(&map));
    let headers_only = parse_hint(&map, None, now);
    if let Some(wait) = hint.wait {
        assert!(wait.duration <= MAX_HINT);
    }
    match headers_only.wait {
        Some(wait) if wait.duration >= ONE_MS => assert_eq!(hint.wait, Some(wait)),
        _ => {}
    }
    if hint.wait.map(|w| w.source) == Some(WaitSource::BodyPhrase) {
        assert!(headers_only.wait.is_none_or(|w| w.duration < ONE_MS));
    }

    let first_positive = |name: &str| {
        map.get_all(name).iter().find_map(|value| {
            let wait = match name {
                "retry-after" => parse_retry_after(value, now)?,
                _ => {
                    let mut one = HeaderMap::new();
                    one.insert(HeaderName::from_static("retry-after-ms"), value.clone());
                    parse_hint(&one, None, now).wait?
                }
            };
            Some(wait)
        })
    };
    if let Some(ms) = first_positive("retry-after-ms").filter(|w| w.duration >= ONE_MS) {
        assert_eq!(hint.wait, Some(ms));
    } else if let Some(secs) = first_positive("retry-after").filter(|w| w.duration >= ONE_MS) {
        assert_eq!(hint.wait, Some(secs));
    }

    if let Some(tokens) = token_window(&map) {
        assert!(tokens.per_minute > 0);
    }
    let _ = token_quota_only(&map);
    if let Some(window) = request_window(&map, now) {
        assert!(window.reset_in.is_none_or(|r| r <= MAX_HINT));
    }
});
