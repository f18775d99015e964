//! OpenAI chat completions as OpenAI answers: `x-ratelimit-*` headers on
//! every answer, a 429 `rate_limit_exceeded` with `retry-after-ms`, an
//! in-band error as a stream's first event. `ClientLayer`'s gate reads the
//! request window the successes state, so the key is paced before it meets
//! a 429; a quota error (`insufficient_quota`) is final.
//!
//! ```text
//! cargo run --example openai_chat
//! ```

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::{on_retry, BoxError, ClientLayer, RetryPolicy, RetryReport, StopReason};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::time::Duration;
use tower::{Service, ServiceBuilder, ServiceExt};

/// OpenAI's window headers: `remaining` requests left, reset in `reset`.
fn windowed(reply: Reply, remaining: u32, reset: &str) -> Reply {
    reply
        .header("x-ratelimit-limit-requests", "3")
        .header("x-ratelimit-remaining-requests", &remaining.to_string())
        .header("x-ratelimit-reset-requests", reset)
}

fn chat(url: &str, stream: bool) -> Result<http::Request<Full<Bytes>>, http::Error> {
    let body = if stream {
        r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#
    } else {
        r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}"#
    };
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-example")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let in_band_error = Reply::status(200)
        .header("content-type", "text/event-stream")
        .body("data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n");
    let upstream = MockServer::start(
        Script::new()
            .route(
                "/v1/chat/completions",
                Route::sequence([
                    windowed(Reply::openai_ok("one"), 2, "300ms"),
                    windowed(Reply::openai_ok("two"), 1, "250ms"),
                    windowed(Reply::openai_ok("three"), 0, "200ms"),
                    // Paced by the window above, the fourth call waits for
                    // its reset instead of drawing this 429.
                    windowed(Reply::openai_ok("four"), 2, "1s"),
                    in_band_error,
                    Reply::openai_stream(&["Hel", "lo"]),
                ]),
            )
            .route(
                "/v1/quota",
                Route::always(Reply::openai_error(
                    429,
                    "insufficient_quota",
                    Some("insufficient_quota"),
                    "You exceeded your current quota",
                )),
            ),
    )
    .await?;

    let policy = RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(20))
        .build()?
        .with_hooks(on_retry(|event| {
            eprintln!(
                "  retry {} in {:?} ({:?})",
                event.retry, event.delay, event.class
            );
        }));
    let mut service = ServiceBuilder::new()
        .layer(ClientLayer::new(policy))
        .service(Client::builder(TokioExecutor::new()).build_http());

    let url = upstream.url("/v1/chat/completions");
    for _ in 0..4 {
        let response = service.ready().await?.call(chat(&url, false)?).await?;
        // No report: served at the first send.
        let sends = response
            .extensions()
            .get::<RetryReport>()
            .map_or(1, |r| r.attempts);
        let body = response.into_body().collect().await?.to_bytes();
        println!("{sends} sends: {}", String::from_utf8_lossy(&body));
    }
    let times: Vec<_> = upstream.requests().iter().map(|r| r.received_at).collect();
    println!(
        "the fourth call waited {} ms for the window to reset",
        (times[3] - times[2]).as_millis()
    );
    assert!(times[3] - times[2] >= Duration::from_millis(200));

    let response = service.ready().await?.call(chat(&url, true)?).await?;
    let report = response
        .extensions()
        .get::<RetryReport>()
        .cloned()
        .ok_or("a report")?;
    let stream = response.into_body().collect().await?.to_bytes();
    println!(
        "stream after {} sends: {} bytes",
        report.attempts,
        stream.len()
    );
    assert_eq!(
        report.attempts, 2,
        "the in-band error before content was retried"
    );

    let quota = service
        .ready()
        .await?
        .call(chat(&upstream.url("/v1/quota"), false)?)
        .await?;
    let report = quota
        .extensions()
        .get::<RetryReport>()
        .cloned()
        .ok_or("a report")?;
    println!("quota: {report}");
    assert!(matches!(report.stop, StopReason::NotRetryable(_)));
    Ok(())
}
