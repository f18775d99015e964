//! Behind a gateway that forbids retrying (`x-should-retry: false`), every
//! refusal loses a request: once a burst's refusals taught the gate the
//! key's rate, no later send may be refused.
//!
//! Each test drives `ClientLayer::default()` over a hyper client against
//! `llm-retry-mock` on 127.0.0.1, under tokio's paused clock.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry_mock::{Limit, MockServer, Quota, Reply, Route, Script, Shape};
use std::time::Duration;
use tower::{Layer, ServiceExt};

const PATH: &str = "/v1/messages";

/// A gateway over a bucket of 100 requests a second in bursts of 10: its
/// 429 names the exact wait to the next token and forbids a retry; every
/// answer takes 20 ms.
async fn gateway() -> MockServer {
    let latency = Duration::from_millis(20);
    let bucket = Limit::new(Quota::Bucket {
        per_second: 100,
        burst: 10,
    })
    .shape(Shape::Exact);
    let refused = Reply::rate_limited(None)
        .delay(latency)
        .header("x-should-retry", "false");
    let served = Route::always(Reply::anthropic_ok("ok").delay(latency));
    let script = Script::new().route(PATH, Route::limited(bucket, refused, served));
    MockServer::start(script).await.unwrap()
}

fn request(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .header("x-api-key", "sk-test")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"m","max_tokens":16,"messages":[]}"#,
        )))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn final_refusals_of_a_spread_burst_teach_a_rate_the_bucket_keeps_up_with() {
    // A first wave of 100 arrives over 8 ms: ten are served, and the
    // refusals name shorter and shorter waits (9 ms down to 2 ms) as the
    // next token nears. The refusal that starts the key's rate comes late
    // in the wave, naming a wait well under the bucket's 10 ms (6 ms: a
    // rate a third too fast, more than the margin a final refusal leaves);
    // the longest wait the wave named is about the bucket's period.
    let mock = gateway().await;
    let url = mock.url(PATH);
    let client = Client::builder(TokioExecutor::new()).build_http();
    let svc = crate::ClientLayer::default().layer(client);
    let wave: Vec<_> = (0..100u64)
        .map(|i| {
            let (svc, request) = (svc.clone(), request(&url));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(80 * i)).await;
                svc.oneshot(request).await.unwrap().status()
            })
        })
        .collect();
    let mut first_served = 0;
    for call in wave {
        first_served += usize::from(call.await.unwrap() == StatusCode::OK);
    }
    assert!(first_served < 20, "the wave overdrew the bucket");
    // Then 50 clients, 3 requests each, one after the other: every send is
    // paced under the bucket's rate, so none is refused.
    let clients: Vec<_> = (0..50)
        .map(|_| {
            let (svc, url) = (svc.clone(), url.clone());
            tokio::spawn(async move {
                let mut refused = 0;
                for _ in 0..3 {
                    let status = svc.clone().oneshot(request(&url)).await.unwrap().status();
                    refused += usize::from(status != StatusCode::OK);
                }
                refused
            })
        })
        .collect();
    let mut refused = 0;
    for client in clients {
        refused += client.await.unwrap();
    }
    assert_eq!(refused, 0, "refused after the wave taught the rate");
}
