//! A gateway built with this library tells SDK-like clients when it gave up,
//! so their retries do not multiply its own (3 × 3 = 9 upstream sends).
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use llm_retry::downstream::GiveUpHeadersLayer;
use llm_retry::{BoxError, ReplayBody, RetryLayer};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::net::SocketAddr;
use support::{fast_policy, PROMPT};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};

const GATEWAY_RETRIES: u32 = 2;
const SDK_RETRIES: u32 = 2;

/// A gateway on 127.0.0.1 proxying every request to `upstream` through
/// `RetryLayer`, with or without the give-up headers.
async fn start_gateway(upstream: String, mark_give_ups: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client: Client<_, ReplayBody<Incoming>> =
        Client::builder(TokioExecutor::new()).build_http();
    let retrying = ServiceBuilder::new()
        .option_layer(mark_give_ups.then(GiveUpHeadersLayer::new))
        .layer(RetryLayer::new(
            fast_policy().max_retries(GATEWAY_RETRIES).build().unwrap(),
        ))
        .service(client);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let retrying = retrying.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
                        *req.uri_mut() = upstream.parse().unwrap();
                        retrying.clone().oneshot(req)
                    });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// What the official SDKs do: retry 429 up to `SDK_RETRIES` times unless
/// the answer says `x-should-retry: false`. Returns the final status.
async fn sdk_like_call(url: &str) -> StatusCode {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut attempt = 0;
    loop {
        let req = http::Request::post(url)
            .body(Full::new(Bytes::from_static(PROMPT.as_bytes())))
            .unwrap();
        let res = client.request(req).await.unwrap();
        let status = res.status();
        let declined = res
            .headers()
            .get("x-should-retry")
            .is_some_and(|v| v == "false");
        let _ = res.into_body().collect().await;
        if status != StatusCode::TOO_MANY_REQUESTS || declined || attempt == SDK_RETRIES {
            return status;
        }
        attempt += 1;
    }
}

async fn upstream_sends(mark_give_ups: bool) -> Result<(usize, StatusCode), BoxError> {
    let upstream = MockServer::start(
        Script::new().route("/v1/messages", Route::always(Reply::rate_limited(Some(0)))),
    )
    .await?;
    let gateway = start_gateway(upstream.url("/v1/messages"), mark_give_ups).await;
    let status = sdk_like_call(&format!("http://{gateway}/v1/messages")).await;
    Ok((upstream.request_count(), status))
}

#[tokio::test]
async fn marked_give_ups_keep_upstream_sends_at_the_gateways_own_limit() {
    let (sends, status) = upstream_sends(true).await.unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(sends, (GATEWAY_RETRIES + 1) as usize);
}

#[tokio::test]
async fn unmarked_give_ups_are_multiplied_by_the_client() {
    // The negative control: without the headers the SDK retries the gateway.
    let (sends, _) = upstream_sends(false).await.unwrap();
    assert_eq!(sends, ((GATEWAY_RETRIES + 1) * (SDK_RETRIES + 1)) as usize);
}

#[tokio::test]
async fn the_give_up_carries_the_remaining_named_wait() {
    let upstream = MockServer::start(Script::new().route(
        "/v1/messages",
        Route::always(Reply::rate_limited(Some(200))),
    ))
    .await
    .unwrap();
    let gateway = start_gateway(upstream.url("/v1/messages"), true).await;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(format!("http://{gateway}/v1/messages"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["x-should-retry"], "false");
    assert_eq!(res.headers()["retry-after"], "200");
    assert_eq!(
        upstream.request_count(),
        1,
        "200 s is past the gateway's own limit: no retry"
    );
}
