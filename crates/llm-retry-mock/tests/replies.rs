//! What arrives at the client: headers, bodies, streams, delays, h2c.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{client, fetch, get, start};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry_mock::{Reply, Route, Script, SseEvent};
use tokio::time::Instant;

#[tokio::test]
async fn headers_arrive_including_non_utf8_bytes() {
    let reply = Reply::rate_limited(Some(3))
        .header_bytes("retry-after-ms", b"\xff\xfe1500")
        .header("x-should-retry", "true")
        .header("x-multi", "a")
        .header("x-multi", "b")
        .header("bad header name", "dropped")
        .header("x-bad-value", "a\r\nx-injected: 1");
    let server = start(Script::new().route("/h", Route::always(reply))).await;
    let response = get(&client(), &server.url("/h")).await.unwrap();
    assert_eq!(response.status(), 429);
    let headers = response.headers();
    assert_eq!(headers["retry-after"], "3");
    assert_eq!(headers["retry-after-ms"].as_bytes(), b"\xff\xfe1500");
    assert_eq!(headers["x-should-retry"], "true");
    assert_eq!(headers["content-type"], "application/json");
    let multi: Vec<_> = headers.get_all("x-multi").iter().collect();
    assert_eq!(multi, ["a", "b"]);
    assert!(headers.get("x-bad-value").is_none());
    assert!(headers.get("x-injected").is_none());
}

#[tokio::test]
async fn json_bodies_are_byte_identical() {
    let replies = [
        Reply::anthropic_ok("Hello there"),
        Reply::openai_ok("Hi"),
        Reply::anthropic_error(
            400,
            "invalid_request_error",
            "prompt is too long: 250000 tokens > 200000 maximum",
        ),
        Reply::openai_error(
            429,
            "insufficient_quota",
            Some("insufficient_quota"),
            "quota",
        ),
        Reply::status(503),
        Reply::status(200).body(&b"\x00not json\xff"[..]),
    ];
    let expected: Vec<Bytes> = replies.iter().map(|r| r.expected_body().unwrap()).collect();
    let server = start(Script::new().route("/j", Route::sequence(replies))).await;
    let client = client();
    for want in expected {
        let (_, body) = fetch(&client, &server.url("/j")).await;
        assert_eq!(body, want);
    }
}

#[tokio::test]
async fn streams_are_byte_identical() {
    let replies = [
        Reply::anthropic_stream(&["Hel", "lo", ", world"]),
        Reply::openai_stream(&["a", "b"]),
        Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        Reply::sse([
            SseEvent::raw(": keep-alive\n\n"),
            SseEvent::new(Some("x"), "multi\nline"),
            SseEvent::raw(&b"data: \xff\n\n"[..]),
        ]),
    ];
    let expected: Vec<Bytes> = replies.iter().map(|r| r.expected_body().unwrap()).collect();
    let server = start(Script::new().route("/s", Route::sequence(replies))).await;
    let client = client();
    for want in expected {
        let response = get(&client, &server.url("/s")).await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert!(response.headers().get("content-length").is_none());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, want);
    }
}

#[tokio::test(start_paused = true)]
async fn delay_before_headers_runs_on_the_tokio_clock() {
    let wait = Duration::from_secs(30);
    let server = start(Script::new().route(
        "/slow",
        Route::always(Reply::anthropic_ok("late").delay(wait)),
    ))
    .await;
    let start = Instant::now();
    let response = get(&client(), &server.url("/slow")).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(response.status(), 200);
    assert!(
        elapsed >= wait,
        "headers after {elapsed:?}, before the {wait:?} delay"
    );
    // Virtual time: the delay is the only timer, so nothing else can add to it.
    assert!(elapsed < wait + Duration::from_secs(1), "{elapsed:?}");
    let recorded = &server.requests()[0];
    assert!(
        recorded.received_at - start < Duration::from_secs(1),
        "recorded before the delay"
    );
}

#[tokio::test(start_paused = true)]
async fn sse_event_delays_pace_the_stream() {
    let step = Duration::from_secs(2);
    let reply = Reply::sse([
        SseEvent::new(Some("a"), "1"),
        SseEvent::new(Some("b"), "2").after(step),
        SseEvent::new(Some("c"), "3").after(step),
    ]);
    let want = reply.expected_body().unwrap();
    let server = start(Script::new().route("/s", Route::always(reply))).await;
    let start = Instant::now();
    let mut body = get(&client(), &server.url("/s")).await.unwrap().into_body();
    let mut got = Vec::new();
    let mut arrivals = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            got.extend_from_slice(&data);
            arrivals.push((start.elapsed(), got.len()));
        }
    }
    assert_eq!(got, want);
    let first_len = SseEvent::new(Some("a"), "1").bytes().len();
    // The first event is out before any delay; the rest only after both.
    assert!(
        arrivals.iter().any(|(t, n)| *t < step && *n == first_len),
        "{arrivals:?}"
    );
    assert!(start.elapsed() >= step * 2);
}

#[tokio::test]
async fn h2c_prior_knowledge_works() {
    let server = start(Script::new().route(
        "/v1/messages",
        Route::always(Reply::anthropic_stream(&["x"])),
    ))
    .await;
    let h2 = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let request = http::Request::post(server.url("/v1/messages"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = h2.request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(Some(body), Reply::anthropic_stream(&["x"]).expected_body());
    assert_eq!(server.requests()[0].body, Bytes::from_static(b"{}"));
}
