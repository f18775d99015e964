//! The mock's provider-shaped limits speak the headers the library reads:
//! what `Route::limited` states on the wire is the window the hint parser
//! finds, for Anthropic's RFC 3339 resets and OpenAI's Go durations alike.
#![allow(clippy::unwrap_used)]

use super::{parse_hint, request_window, WaitSource};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
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

#[tokio::test(start_paused = true)]
async fn anthropic_shaped_answers_state_the_quota_in_rfc_3339() {
    // 2 requests a minute (a window, so nothing refills while the test
    // runs, however slow the machine): the second answer has 0 left, the
    // third is refused for the rest of the minute in whole seconds.
    let limit = Limit::new(Quota::Window {
        limit: 2,
        length: Duration::from_secs(60),
    })
    .shape(Shape::Anthropic);
    let heads = heads(limit, 3).await;
    let now = SystemTime::now();
    let first = request_window(&heads[0].headers, now).unwrap();
    assert_eq!((first.remaining, first.per_minute), (1, Some(2)));
    let second = request_window(&heads[1].headers, now).unwrap();
    assert_eq!(second.remaining, 0);
    // The reset is wall-clock RFC 3339 in whole seconds: the window's end
    // a minute on, give or take the second it is rounded to.
    let reset = second.reset_in.unwrap();
    assert!(
        reset > Duration::from_secs(58) && reset <= Duration::from_secs(61),
        "{second:?}"
    );
    assert_eq!(heads[2].status, 429);
    let wait: u64 = heads[2].headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(wait, 60, "the rest of the minute, on the paused clock");
    assert!(!heads[2].headers.contains_key("retry-after-ms"));
}

#[tokio::test(start_paused = true)]
async fn openai_shaped_answers_state_the_quota_as_go_durations() {
    // One request a minute: the answer has 0 left until the window's end,
    // and the next is refused with the wait to it in milliseconds.
    let limit = Limit::new(Quota::Window {
        limit: 1,
        length: Duration::from_secs(60),
    })
    .shape(Shape::OpenAi);
    let heads = heads(limit, 2).await;
    let now = SystemTime::now();
    let first = request_window(&heads[0].headers, now).unwrap();
    assert_eq!((first.remaining, first.per_minute), (0, Some(1)));
    // On the paused clock no time passes between the sends: the window's
    // whole minute is left.
    assert_eq!(heads[0].headers["x-ratelimit-reset-requests"], "1m0s");
    assert_eq!(first.reset_in, Some(Duration::from_secs(60)));
    assert_eq!(heads[1].status, 429);
    let wait = parse_hint(&heads[1].headers, None, now).wait.unwrap();
    assert_eq!(wait.source, WaitSource::RetryAfterMs);
    assert_eq!(wait.duration, Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn azure_shaped_answers_state_what_is_left_and_no_reset() {
    let limit = Limit::new(Quota::Window {
        limit: 2,
        length: Duration::from_secs(60),
    })
    .shape(Shape::Azure);
    let heads = heads(limit, 3).await;
    let now = SystemTime::now();
    let first = request_window(&heads[0].headers, now).unwrap();
    assert_eq!(
        (first.remaining, first.reset_in, first.per_minute),
        (1, None, None)
    );
    assert_eq!(request_window(&heads[1].headers, now).unwrap().remaining, 0);
    // The refusal names the window's end.
    assert_eq!(heads[2].status, 429);
    let wait = parse_hint(&heads[2].headers, None, now).wait.unwrap();
    assert_eq!(wait.duration, Duration::from_secs(60));
}
