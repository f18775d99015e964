//! An axum service that forwards through `ClientLayer`: the caller sees one
//! clean stream while the proxy retried the upstream's overload behind it.
#![allow(clippy::unwrap_used)]

mod support;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::{ClientLayer, ClientStack, ReplayBody, RetryReport};
use llm_retry_mock::{Reply, Route};
use support::{fast_policy, mock, PROMPT};
use tower::{Layer, ServiceExt};

type Upstream = ClientStack<Client<HttpConnector, ReplayBody<Body>>>;

async fn forward(State((upstream, url)): State<(Upstream, String)>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let mut forwarded = http::Request::post(url).body(body).unwrap();
    *forwarded.headers_mut() = parts.headers;
    let response = upstream.oneshot(forwarded).await.unwrap();
    let attempts = response.extensions().get::<RetryReport>().unwrap().attempts;
    let mut response = response.map(Body::new);
    response
        .headers_mut()
        .insert("x-upstream-attempts", attempts.into());
    response
}

#[tokio::test]
async fn the_caller_sees_one_stream_while_the_service_retried_the_upstream() {
    let good = Reply::anthropic_stream(&["Hello", "!"]);
    let expected = good.expected_body().unwrap();
    let upstream = mock(Route::sequence([
        Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        good,
    ]))
    .await;
    let client = ClientLayer::new(fast_policy().build().unwrap())
        .layer(Client::builder(TokioExecutor::new()).build_http());
    let app = Router::new()
        .route("/v1/messages", post(forward))
        .with_state((client, upstream.url("/v1/messages")));
    let response = app
        .oneshot(
            http::Request::post("/v1/messages")
                .header("content-type", "application/json")
                .body(Body::from(PROMPT))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-upstream-attempts"], "2");
    let stream = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(stream, expected, "one complete stream, no replayed bytes");
    assert_eq!(upstream.request_count(), 2);
    assert!(upstream
        .requests()
        .iter()
        .all(|r| r.body == PROMPT.as_bytes()));
}
