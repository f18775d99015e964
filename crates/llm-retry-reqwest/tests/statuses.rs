//! The status table reqwest-retry's own suite checks, through the adapter:
//! what is returned untouched after one send, what is retried once and
//! then served, and where this library's table differs (and why).
#![allow(clippy::unwrap_used)]

mod support;

use http::HeaderMap;
use llm_retry::{BoxError, StopReason};
use llm_retry_mock::{Reply, Route};
use std::future::Future;
use std::pin::Pin;
use support::{client, fast_policy, mock, post};

/// 2xx, 3xx and 4xx answers that are final: handed back as they came.
const UNTOUCHED: [u16; 42] = [
    200, 201, 202, 203, 204, 205, 206, 207, 208, 226, //
    300, 301, 302, 303, 304, 305, 307, 308, //
    400, 401, 402, 403, 404, 405, 406, 407, 410, 411, 412, 413, 414, 415, 416, 417, 418, 421, 422,
    423, 424, 426, 428, 431,
];

/// Failures that are retried: the first send fails, the second is served.
/// 409 is here (reqwest-retry does not retry it): a conflict on an LLM API
/// is a concurrent-request lock that clears on its own.
const RETRIED: [u16; 12] = [408, 409, 429, 500, 502, 503, 504, 506, 507, 508, 510, 511];

/// Failures a resend cannot fix (reqwest-retry retries them): the server
/// does not implement the method (501) or the HTTP version (505).
const NOT_RETRIED_HERE: [u16; 2] = [501, 505];

#[tokio::test(start_paused = true)]
async fn a_final_answer_is_returned_untouched_after_one_send() {
    let client = client(fast_policy().build().unwrap());
    for status in UNTOUCHED.into_iter().chain([451]) {
        let mock = mock(Route::always(
            Reply::status(status).body(format!("answer {status}")),
        ))
        .await;
        let response = post(&client, &mock).await.unwrap();
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(mock.request_count(), 1, "{status} was sent again");
        // No report: served at the first send.
        let attempts = llm_retry_reqwest::report(&response).map_or(1, |r| r.attempts);
        assert_eq!(attempts, 1, "{status}");
        if status == 304 || status == 204 || status == 205 {
            continue; // these carry no body on the wire
        }
        assert_eq!(response.text().await.unwrap(), format!("answer {status}"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_once_then_served() {
    let client = client(fast_policy().build().unwrap());
    for status in RETRIED {
        let mock = mock(Route::sequence([
            Reply::status(status),
            Reply::anthropic_ok("served"),
        ]))
        .await;
        let response = post(&client, &mock).await.unwrap();
        assert_eq!(response.status(), 200, "{status}");
        assert_eq!(mock.request_count(), 2, "{status}: sends");
        assert_eq!(llm_retry_reqwest::report(&response).unwrap().attempts, 2);
        let body = response.text().await.unwrap();
        assert!(
            body.contains("served"),
            "{status}: body after a retry: {body}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn not_implemented_and_version_not_supported_are_not_resent() {
    let client = client(fast_policy().build().unwrap());
    for status in NOT_RETRIED_HERE {
        let mock = mock(Route::sequence([
            Reply::status(status),
            Reply::anthropic_ok("served"),
        ]))
        .await;
        let response = post(&client, &mock).await.unwrap();
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(mock.request_count(), 1, "{status} was sent again");
        let report = llm_retry_reqwest::report(&response).unwrap();
        assert!(
            matches!(report.stop, StopReason::NotRetryable(_)),
            "{status}: {:?}",
            report.stop
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_retry_count_is_reached_exactly() {
    for max_retries in [0, 1, 3, 10] {
        let client = client(fast_policy().max_retries(max_retries).build().unwrap());
        let mock = mock(Route::always(Reply::status(500))).await;
        let response = post(&client, &mock).await.unwrap();
        assert_eq!(response.status(), 500, "the last answer is handed over");
        assert_eq!(mock.request_count(), max_retries as usize + 1);
        let report = llm_retry_reqwest::report(&response).unwrap();
        assert_eq!(report.attempts, max_retries + 1);
        assert_eq!(report.stop, StopReason::RetriesExhausted { max_retries });
    }
}

/// Hands out a fresh key, once asked.
struct FreshKey;

impl llm_retry::policy::RefreshCredentials for FreshKey {
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send>> {
        Box::pin(async {
            let mut headers = http::HeaderMap::new();
            headers.insert("x-api-key", http::HeaderValue::from_static("fresh"));
            Ok(headers)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_401_is_resent_once_with_fresh_credentials_when_a_hook_is_set() {
    let mock = mock(Route::sequence([
        Reply::anthropic_error(401, "authentication_error", "invalid x-api-key"),
        Reply::anthropic_ok("served"),
    ]))
    .await;
    let client = client(fast_policy().refresh_credentials(FreshKey).build().unwrap());
    let response = client
        .post(mock.url("/v1/messages"))
        .header("x-api-key", "stale")
        .body(support::PROMPT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].header_str("x-api-key"), Some("stale"));
    assert_eq!(sent[1].header_str("x-api-key"), Some("fresh"));
}
