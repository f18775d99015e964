//! The plain tower path: `tower::retry::RetryLayer` with `RetryPolicy`, for
//! stacks built from tower's own layers. It makes the same decisions as
//! `RetryLayer` on status and headers, fires the same hooks and attaches the
//! same report; it cannot read a failed response's body.
//!
//! ```text
//! cargo run --example tower_retry
//! ```

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::{on_retry, BoxError, ReplayBody, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let upstream = MockServer::start(Script::new().route(
        "/v1/chat/completions",
        Route::sequence([
            Reply::status(503),
            Reply::rate_limited(None).header("retry-after-ms", "200"),
            Reply::openai_ok("Hi from the third attempt."),
        ]),
    ))
    .await?;

    let policy = RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(20))
        .build()?
        .with_hooks(on_retry(|event| {
            eprintln!("  retry {} after {:?}", event.retry, event.delay);
        }));
    let service = ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(policy))
        .map_err(BoxError::from)
        .service(Client::builder(TokioExecutor::new()).build_http::<ReplayBody<Full<Bytes>>>());

    // tower's loop clones the request itself: give it a replayable body.
    let body = Full::new(Bytes::from_static(
        br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}"#,
    ));
    let request = http::Request::post(upstream.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(ReplayBody::new(body, 1 << 20))?;
    let response = service.oneshot(request).await?;
    let report = response
        .extensions()
        .get::<RetryReport>()
        .cloned()
        .ok_or("the report rides on the response")?;
    println!(
        "{} after {} attempts: {report}",
        response.status(),
        report.attempts
    );
    assert_eq!(report.attempts, 3);
    assert!(
        report.total_wait >= Duration::from_millis(200),
        "the named wait is a floor"
    );
    Ok(())
}
