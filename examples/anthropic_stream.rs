//! A streamed Anthropic Messages call: an `overloaded_error` as the first
//! event is retried, three overloads in a row switch to the fallback model,
//! and the hooks print the retry progress as a user would want to see it.
//! Once a content byte has reached the caller the stream is never replayed.
//!
//! ```text
//! cargo run --example anthropic_stream
//! ```

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::policy::FallbackMode;
use llm_retry::stream_guard::StreamCommit;
use llm_retry::{
    BoxError, ClientLayer, RecoveryEvent, RetryEvent, RetryHooks, RetryPolicy, RetryReport,
};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};

/// Retry progress on standard error, one line per event.
struct Progress;

impl RetryHooks for Progress {
    fn on_retry(&self, event: &RetryEvent) {
        let why = match (event.status, &event.error) {
            (Some(status), _) => format!("status {}", status.as_u16()),
            (None, Some(error)) => error.clone(),
            (None, None) => "failure".to_owned(),
        };
        eprintln!(
            "  retry {}/{} in {} ms ({why})",
            event.retry,
            event.max_retries,
            event.delay.as_millis()
        );
    }

    fn on_recover(&self, event: &RecoveryEvent) {
        eprintln!(
            "  {}: {} -> {}",
            event.action,
            event.old.as_deref().unwrap_or("?"),
            event.new.as_deref().unwrap_or("?")
        );
    }

    fn on_recovered(&self, report: &RetryReport) {
        eprintln!("  recovered: {report}");
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let overloaded = || Reply::anthropic_stream_error("overloaded_error", "Overloaded");
    let good = Reply::anthropic_stream(&["Hello", ", world", "!"]);
    let expected = good.expected_body().ok_or("a complete stream")?;
    let upstream = MockServer::start(Script::new().route(
        "/v1/messages",
        Route::sequence([overloaded(), overloaded(), overloaded(), good]),
    ))
    .await?;

    let policy = RetryPolicy::builder()
        .fallback_model("claude-haiku-4-5", FallbackMode::Automatic)
        .initial_backoff(Duration::from_millis(20))
        .build()?;
    let service = ServiceBuilder::new()
        .layer(ClientLayer::new(policy).with_hooks(Progress))
        .service(Client::builder(TokioExecutor::new()).build_http());

    let request = http::Request::post(upstream.url("/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-example")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}"#,
        )))?;
    eprintln!("streaming from {}", upstream.url("/v1/messages"));
    let response = service.oneshot(request).await?;
    let commit = response
        .extensions()
        .get::<StreamCommit>()
        .cloned()
        .ok_or("a guarded stream")?;
    let stream = response.into_body().collect().await?.to_bytes();
    assert!(commit.is_committed(), "content reached the caller");
    assert_eq!(stream, expected, "one complete stream, no replayed bytes");
    let models: Vec<String> = upstream
        .requests()
        .iter()
        .filter_map(|r| r.body_json())
        .filter_map(|json| json["model"].as_str().map(str::to_owned))
        .collect();
    println!("models sent: {}", models.join(", "));
    assert_eq!(models.last().map(String::as_str), Some("claude-haiku-4-5"));
    Ok(())
}
