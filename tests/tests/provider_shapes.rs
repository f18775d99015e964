//! The mock's provider-shaped limits speak the headers the library reads:
//! what `Route::limited` states on the wire is the window the hint parser
//! finds, for Anthropic's RFC 3339 resets and OpenAI's Go durations alike.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::hint::{parse_hint, request_window, WaitSource};
use llm_retry_mock::{Limit, MockServer, Quota, Reply, Route, Script, Shape};
use std::time::{Duration, SystemTime};

async fn heads(limit: Limit, sends: usize) -> Vec<http::response::Parts> {
    let route = Route::limited(
        limit,
        Reply::rate_limited(None),
        Route::always(Reply::anthropic_ok("hi")),
    );
    let mock = MockServer::start(Script::new().route("/v1/messages", route))
        .await
        .unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut heads = Vec::new();
    for _ in 0..sends {
        let request = http::Request::post(mock.url("/v1/messages"))
            .body(Full::new(Bytes::from_static(br#"{"max_tokens":10}"#)))
            .unwrap();
        let (parts, _) = client.request(request).await.unwrap().into_parts();
        heads.push(parts);
    }
    mock.shutdown().await;
    heads
}

#[tokio::test]
async fn anthropic_shaped_answers_state_the_bucket_in_rfc_3339() {
    // 1 request/s in bursts of 2: the second answer has 0 left, and the
    // bucket is full again within 2 s (whole seconds, rounded up).
    let limit = Limit::new(Quota::Bucket {
        per_second: 1,
        burst: 2,
    })
    .shape(Shape::Anthropic);
    let heads = heads(limit, 3).await;
    let now = SystemTime::now();
    let first = request_window(&heads[0].headers, now).unwrap();
    assert_eq!(first.remaining, 1);
    let second = request_window(&heads[1].headers, now).unwrap();
    assert_eq!(second.remaining, 0);
    assert!(second.reset_in <= Duration::from_secs(3), "{second:?}");
    assert_eq!(heads[2].status, 429);
    assert_eq!(heads[2].headers["retry-after"], "1");
    assert!(!heads[2].headers.contains_key("retry-after-ms"));
}

#[tokio::test]
async fn openai_shaped_answers_state_the_bucket_as_go_durations() {
    let limit = Limit::new(Quota::Bucket {
        per_second: 10,
        burst: 1,
    })
    .shape(Shape::OpenAi);
    let heads = heads(limit, 2).await;
    let now = SystemTime::now();
    let first = request_window(&heads[0].headers, now).unwrap();
    assert_eq!(first.remaining, 0);
    assert!(first.reset_in > Duration::ZERO && first.reset_in <= Duration::from_millis(100));
    assert_eq!(heads[1].status, 429);
    let wait = parse_hint(&heads[1].headers, None, now).wait.unwrap();
    assert_eq!(wait.source, WaitSource::RetryAfterMs);
    assert!(wait.duration > Duration::ZERO && wait.duration <= Duration::from_millis(100));
}
