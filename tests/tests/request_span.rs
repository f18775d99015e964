//! The retry path's `llm_retry.request` span covers every poll of an
//! attempt, not only its call: what a service below logs while its
//! answer is awaited carries the request's method, host and path, and a
//! retried request records its resend count.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry::RetryLayer;
use llm_retry_mock::{Reply, Route};
use support::{client, fast_policy, messages_request, mock};
use tower::{Layer, ServiceExt};

#[tokio::test]
async fn what_a_service_below_logs_while_polled_is_inside_the_request_span() {
    let logs = support::captured_logs();
    let mock = mock(Route::sequence_then(
        [Reply::status(503)],
        Reply::anthropic_ok("hi"),
    ))
    .await;
    let http = client();
    let below = tower::service_fn(move |request| {
        let http = http.clone();
        async move {
            // Past the call: the retry future's own poll resumes this.
            tokio::task::yield_now().await;
            tracing::info!("attempt polled below the retry layer");
            http.oneshot(request).await
        }
    });
    let svc = RetryLayer::new(fast_policy().build().unwrap()).layer(below);
    let response = svc
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let lines = logs.take_lines();
    let inner: Vec<&String> = lines
        .iter()
        .filter(|line| line.contains("attempt polled below the retry layer"))
        .collect();
    assert_eq!(inner.len(), 2, "one line per attempt: {lines:?}");
    let span = "llm_retry.request{http.request.method=POST server.address=\"127.0.0.1\" \
                url.path=\"/v1/messages\"";
    for line in &inner {
        assert!(line.contains(span), "{line}");
    }
    assert!(
        lines
            .iter()
            .any(|line| line.contains("http.request.resend_count=1") && line.contains("recovered")),
        "{lines:?}"
    );
}
