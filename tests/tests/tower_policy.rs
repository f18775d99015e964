//! The policy under tower's own retry layer, on loopback.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use llm_retry::{BoxError, ReplayBody};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use support::{client, fast_policy, PROMPT};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::test]
async fn plain_tower_retry_layer_retries_with_the_policy() {
    let script = Script::new().route(
        "/v1/messages",
        Route::sequence([
            Reply::overloaded(),
            Reply::status(503),
            Reply::anthropic_ok("ok"),
        ]),
    );
    let mock = MockServer::start(script).await.unwrap();
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
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test]
async fn plain_tower_retry_layer_respects_x_should_retry_false() {
    let declined = Reply::status(503).header("x-should-retry", "false");
    let script = Script::new().route(
        "/v1/messages",
        Route::sequence([declined, Reply::anthropic_ok("ok")]),
    );
    let mock = MockServer::start(script).await.unwrap();
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
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.request_count(), 1);
}
