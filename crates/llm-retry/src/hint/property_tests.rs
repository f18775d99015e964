//! Property tests: no header or body input panics, and waits stay bounded.

use super::{parse_hint, parse_retry_after, WaitSource, MAX_HINT};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Every header `parse_hint` reads.
const NAMES: [&str; 15] = [
    "x-should-retry",
    "retry-after-ms",
    "retry-after",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-remaining",
];

/// Values that look almost right, to reach deep into the parsers.
fn near_miss() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9.+-]{0,40}",
        "[0-9.]{0,12}(ns|us|µs|ms|s|m|h){0,1}([0-9.]{0,6}(ms|s|m|h|x)){0,3}",
        concat!(
            "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}",
            "(\\.[0-9]{0,12})?(Z|[+-][0-9]{2}:[0-9]{2})",
        ),
        "(Mon|Sun), [0-9]{2} (Jan|Feb|Nov) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
    ]
}

/// Checks the invariants of one `parse_hint` call.
fn check(headers: &HeaderMap, body: Option<&[u8]>, now: SystemTime) -> Result<(), TestCaseError> {
    let hint = parse_hint(headers, body, now);
    if let Some(wait) = hint.wait {
        prop_assert!(wait.duration <= MAX_HINT);
        prop_assert!(wait.duration.as_secs_f64().is_finite());
    }
    Ok(())
}

proptest! {
    // Failing cases are saved next to this file, as `property_tests.regressions`.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn strings_never_panic(
        values in proptest::collection::vec((0..NAMES.len(), near_miss()), 0..8),
        body in proptest::option::of(any::<String>()),
        now_secs in 0u64..=253_402_300_799,
    ) {
        let mut headers = HeaderMap::new();
        for (i, value) in &values {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(NAMES[*i], value);
            }
        }
        let body = body.map(|b| format!("try again in {b}"));
        let now = UNIX_EPOCH + Duration::from_secs(now_secs);
        check(&headers, body.as_deref().map(str::as_bytes), now)?;
    }

    #[test]
    fn bytes_never_panic(
        values in proptest::collection::vec((0..NAMES.len(), any::<Vec<u8>>()), 0..8),
        body in proptest::option::of(any::<Vec<u8>>()),
    ) {
        let mut headers = HeaderMap::new();
        for (i, value) in &values {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.append(NAMES[*i], value);
            }
        }
        check(&headers, body.as_deref(), SystemTime::now())?;
    }

    #[test]
    fn retry_after_integer_is_exact(n in 0u64..1_000_000) {
        let value = HeaderValue::from(n);
        let wait = parse_retry_after(&value, SystemTime::now());
        prop_assert_eq!(wait.map(|w| w.duration), Some(Duration::from_secs(n)));
        prop_assert_eq!(wait.map(|w| w.source), Some(WaitSource::RetryAfterSeconds));
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", value);
        let hint = parse_hint(&headers, None, SystemTime::now());
        prop_assert_eq!(hint.wait.map(|w| w.duration), Some(Duration::from_secs(n)));
    }

    #[test]
    fn go_duration_seconds_round_trip(n in 0u64..1_000_000, ms in 0u64..1000) {
        let text = format!("{}m{}.{:03}s", n / 60, n % 60, ms);
        let want = Duration::from_secs(n) + Duration::from_millis(ms);
        prop_assert_eq!(super::go_duration::parse_go_duration(&text), Some(want));
    }
}
