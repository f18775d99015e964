//! `ClientLayer` over a hyper-util client with a per-attempt timeout: the
//! stack a Rust program calling an LLM API puts in front of its client.
//!
//! ```text
//! cargo run --example hyper_client
//! ```
//!
//! Against a mock upstream on 127.0.0.1 that first hangs past the attempt
//! timeout, then answers 529, then serves.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::{BoxError, ClientLayer, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let upstream = MockServer::start(Script::new().route(
        "/v1/messages",
        Route::sequence([
            Reply::anthropic_ok("too late").delay(Duration::from_secs(10)),
            Reply::overloaded(),
            Reply::anthropic_ok("Hello from the third attempt!"),
        ]),
    ))
    .await?;

    let policy = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(1)) // time to the response head
        .max_elapsed(Duration::from_secs(30)) // nothing outlives this
        .initial_backoff(Duration::from_millis(50))
        .build()?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let service = ServiceBuilder::new()
        .layer(ClientLayer::new(policy))
        .service(client);

    let request = http::Request::post(upstream.url("/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-ant-example")
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#,
        )))?;
    let response = service.oneshot(request).await?;
    let report = response
        .extensions()
        .get::<RetryReport>()
        .cloned()
        .ok_or("every response carries its report")?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    println!("{status} after {} attempts: {report}", report.attempts);
    println!("{}", String::from_utf8_lossy(&body));
    assert_eq!(report.attempts, 3, "cut at 1 s, then a 529, then served");
    Ok(())
}
