//! The policy under tower's own retry layer, on loopback.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use llm_retry::{BoxError, ReplayBody};
use llm_retry_mock::{Reply, Route};
use support::{client, fast_policy, mock, PROMPT};
use tower::{ServiceBuilder, ServiceExt};

/// Sends one request through `tower::retry::RetryLayer` with the policy;
/// returns the final status and how many sends the upstream saw.
async fn through_tower_retry(route: Route) -> (StatusCode, usize) {
    let mock = mock(route).await;
    let svc = ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(
            fast_policy().build().unwrap(),
        ))
        .map_err(BoxError::from)
        .service(client::<Full<Bytes>>());
    let body = ReplayBody::new(Full::new(Bytes::from_static(PROMPT.as_bytes())), 1 << 20);
    let req = http::Request::post(mock.url("/v1/messages"))
        .body(body)
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    (res.status(), mock.request_count())
}

#[tokio::test]
async fn plain_tower_retry_layer_retries_with_the_policy() {
    let route = Route::sequence([
        Reply::overloaded(),
        Reply::status(503),
        Reply::anthropic_ok("ok"),
    ]);
    assert_eq!(through_tower_retry(route).await, (StatusCode::OK, 3));
}

#[tokio::test]
async fn plain_tower_retry_layer_respects_x_should_retry_false() {
    let declined = Reply::status(503).header("x-should-retry", "false");
    let route = Route::sequence([declined, Reply::anthropic_ok("ok")]);
    assert_eq!(
        through_tower_retry(route).await,
        (StatusCode::SERVICE_UNAVAILABLE, 1)
    );
}
