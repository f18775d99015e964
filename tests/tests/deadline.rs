//! Nothing of a request outlives its deadline: an attempt waiting for its
//! response head, a credential refresh, a failed response's body being read.
#![allow(clippy::unwrap_used)]

mod support;

use http::HeaderMap;
use llm_retry::policy::RefreshCredentials;
use llm_retry::{BoxError, RetryError, RetryLayer, RetryReport, StopReason};
use llm_retry_mock::{Reply, Route};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use support::{client, fast_policy, messages_request, mock};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// A credential hook that never answers.
struct Stuck;

impl RefreshCredentials for Stuck {
    fn clear_token_cache(&self) {}

    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn a_credential_refresh_that_never_completes_ends_at_the_deadline() {
    let mock = mock(Route::always(Reply::anthropic_error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )))
    .await;
    let deadline = Duration::from_secs(60);
    let policy = fast_policy()
        .max_elapsed(deadline)
        .refresh_credentials(Stuck)
        .build()
        .unwrap();
    let start = Instant::now();
    let call = RetryLayer::new(policy)
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")));
    // Far past the deadline: the call must have ended by itself, with the
    // 401 that asked for credentials as its answer.
    let response = tokio::time::timeout(Duration::from_secs(3_600), call)
        .await
        .expect("the refresh is bounded by the deadline")
        .unwrap();
    let elapsed = start.elapsed();
    assert!(
        elapsed >= deadline && elapsed < deadline + Duration::from_secs(1),
        "{elapsed:?}"
    );
    assert_eq!(response.status(), 401);
    let report = response.extensions().get::<RetryReport>().unwrap();
    assert!(
        matches!(
            &report.stop,
            StopReason::RecoveryFailed { reason, .. } if reason.contains("deadline")
        ),
        "{report}"
    );
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_still_waiting_for_its_head_ends_at_the_deadline() {
    let slow = Reply::anthropic_ok("late").delay(Duration::from_secs(3_600));
    let mock = mock(Route::always(slow)).await;
    let deadline = Duration::from_secs(10);
    let policy = fast_policy().max_elapsed(deadline).build().unwrap();
    let start = Instant::now();
    let error = RetryLayer::new(policy)
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), deadline);
    let error = error.downcast_ref::<RetryError>().unwrap();
    assert!(error.stop().is_deadline(), "{error}");
    assert_eq!(
        error.report().last_class,
        Some(llm_retry::classify::Classification::Retryable(
            llm_retry::classify::RetryableKind::Timeout
        )),
        "the cut attempt counts as a timeout"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_cuts_a_slow_attempt_and_retries_it() {
    let slow = Reply::anthropic_ok("late").delay(Duration::from_secs(30));
    let mock = mock(Route::sequence([slow, Reply::anthropic_ok("ok")])).await;
    let policy = fast_policy()
        .attempt_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let start = Instant::now();
    let response = RetryLayer::new(policy)
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(3),
        "cut at 2 s, then one quick resend: {elapsed:?}"
    );
    assert_eq!(mock.request_count(), 2);
}
