//! Property: whatever the upstream answers, a request stays inside every
//! bound at once and ends in exactly one answer whose report matches what
//! the upstream saw.
#![allow(clippy::unwrap_used)]

use super::service_tests::{reply, request, Upstream};
use crate::backoff::Jitter;
use crate::{BoxError, RetryError, RetryLayer, RetryPolicy, RetryReport};
use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use proptest::prelude::*;
use std::time::Duration;
use tower::{Layer, ServiceExt};

fn outcome() -> impl Strategy<Value = Result<Response<Full<Bytes>>, BoxError>> {
    let status = prop_oneof![
        Just(200u16),
        Just(400),
        Just(408),
        Just(429),
        Just(500),
        Just(503),
        Just(529)
    ];
    let retry_after = prop_oneof![
        Just(None),
        (0u64..300).prop_map(|s| Some(s.to_string())),
        Just(Some("99999999999999999999999999999999999".to_owned())),
        Just(Some("-1".to_owned())),
        Just(Some("NaN".to_owned())),
    ];
    let should_retry = prop_oneof![Just(None), Just(Some("true")), Just(Some("false"))];
    prop_oneof![
        8 => (status, retry_after, should_retry).prop_map(|(s, ra, sr)| {
            let mut headers = Vec::new();
            if let Some(ra) = &ra {
                headers.push(("retry-after", ra.as_str()));
            }
            if let Some(sr) = sr {
                headers.push(("x-should-retry", sr));
            }
            reply(s, &headers, "")
        }),
        1 => Just(()).prop_map(|_| Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_bound_holds_at_once(
        script in proptest::collection::vec(outcome(), 1..40),
        max_retries in 0u32..12,
        max_elapsed_s in 1u64..400,
        max_server_wait_s in 0u64..200,
        jitter in prop_oneof![Just(Jitter::None), Just(Jitter::default()), Just(Jitter::Full)],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let policy = RetryPolicy::builder()
            .max_retries(max_retries)
            .max_elapsed(Duration::from_secs(max_elapsed_s))
            .max_server_wait(Duration::from_secs(max_server_wait_s))
            .jitter(jitter)
            .seed(9)
            .build()
            .unwrap();
        let upstream = Upstream::new(script);
        let svc = RetryLayer::new(policy).layer(upstream.clone());
        let (report, start) = runtime.block_on(async {
            let start = tokio::time::Instant::now();
            let report = match svc.oneshot(request()).await {
                Ok(res) => res.extensions().get::<RetryReport>().cloned(),
                Err(e) => Some(e.downcast::<RetryError>().unwrap().report().clone()),
            };
            (report, start)
        });
        let calls = upstream.call_offsets(start);
        let Some(report) = report else {
            // No report: served at the first send, at once.
            prop_assert_eq!(calls, vec![0]);
            return Ok(());
        };
        prop_assert_eq!(calls.len() as u32, report.attempts);
        prop_assert!(report.attempts <= max_retries + 1);
        prop_assert!(report.elapsed <= Duration::from_secs(max_elapsed_s));
        prop_assert_eq!(report.elapsed, report.total_wait);
    }
}
