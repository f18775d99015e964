//! A reqwest client with one middleware: `RetryMiddleware`. An OpenAI chat
//! call meets a 429 that names its wait in `retry-after-ms` and a 503, and
//! is served; a request whose body is a stream (which reqwest-retry refuses
//! to send) is sent at once and replayed from the first send's copy; a
//! quota error is final, and the report says why.
//!
//! ```text
//! cargo run --example reqwest
//! ```

use bytes::Bytes;
use http_body_util::StreamBody;
use llm_retry::{on_retry, BoxError, RetryPolicy, StopReason};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use llm_retry_reqwest::RetryMiddleware;
use reqwest_middleware::ClientBuilder;
use std::convert::Infallible;
use std::time::Duration;

const CHAT: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let upstream = MockServer::start(
        Script::new()
            .route(
                "/v1/chat/completions",
                Route::sequence([
                    Reply::openai_error(
                        429,
                        "requests",
                        Some("rate_limit_exceeded"),
                        "Rate limit reached",
                    )
                    .header("retry-after-ms", "300"),
                    Reply::status(503),
                    Reply::openai_ok("Hello!"),
                    Reply::status(502),
                    Reply::openai_ok("Hello again!"),
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
                "  retry {}/{} in {} ms ({})",
                event.retry,
                event.max_retries,
                event.delay.as_millis(),
                event
                    .status
                    .map_or("no answer".to_owned(), |s| s.to_string())
            );
        }));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy))
        .build();
    let url = upstream.url("/v1/chat/completions");

    let response = client
        .post(&url)
        .bearer_auth("sk-example")
        .header("content-type", "application/json")
        .body(CHAT)
        .send()
        .await?;
    let report = llm_retry_reqwest::report(&response)
        .cloned()
        .ok_or("a report")?;
    println!("{} after {report}", response.status());
    println!("  {}", response.text().await?);
    assert_eq!(report.attempts, 3);
    assert!(
        report.total_wait >= Duration::from_millis(300),
        "retry-after-ms honoured"
    );

    // A body reqwest cannot clone: its chunks come from a stream.
    let chunks = [&CHAT[..20], &CHAT[20..]]
        .map(|c| Ok::<_, Infallible>(http_body::Frame::data(Bytes::copy_from_slice(c.as_bytes()))));
    let body = reqwest::Body::wrap(StreamBody::new(futures_util::stream::iter(chunks)));
    let response = client.post(&url).body(body).send().await?;
    let report = llm_retry_reqwest::report(&response)
        .cloned()
        .ok_or("a report")?;
    println!("streamed body: {} after {report}", response.status());
    let sent = upstream.requests();
    assert!(
        sent[3..].iter().all(|r| r.body == CHAT.as_bytes()),
        "replayed byte-identical"
    );

    let error = client
        .post(upstream.url("/v1/quota"))
        .body(CHAT)
        .send()
        .await;
    let response = error?;
    let report = llm_retry_reqwest::report(&response)
        .cloned()
        .ok_or("a report")?;
    println!("quota: {} after {report}", response.status());
    assert!(matches!(report.stop, StopReason::NotRetryable(_)));
    Ok(())
}
