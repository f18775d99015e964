//! Shared pieces: a mock upstream, a reqwest client through the adapter.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use llm_retry::backoff::Jitter;
use llm_retry::{RetryLayer, RetryPolicy};
use llm_retry_mock::{MockServer, Route, Script};
use llm_retry_reqwest::RetryMiddleware;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use std::time::Duration;

/// A Messages API request body.
pub const PROMPT: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#;

/// A policy with millisecond steps, so the paused clock has little to skip.
pub fn fast_policy() -> llm_retry::RetryPolicyBuilder {
    RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(5))
        .jitter(Jitter::None)
        .seed(1)
}

/// A mock upstream serving `route` at `/v1/messages`.
pub async fn mock(route: Route) -> MockServer {
    MockServer::start(Script::new().route("/v1/messages", route))
        .await
        .unwrap()
}

/// A reqwest client whose only middleware is `middleware`.
pub fn client_with(middleware: RetryMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build()
}

/// A reqwest client retrying by `policy` (retries and stream guard, no gate).
pub fn client(policy: RetryPolicy) -> ClientWithMiddleware {
    client_with(RetryMiddleware::retry_only(RetryLayer::new(policy)))
}

/// Posts the prompt to `mock`'s `/v1/messages` through `client`.
pub async fn post(
    client: &ClientWithMiddleware,
    mock: &MockServer,
) -> reqwest_middleware::Result<reqwest::Response> {
    client
        .post(mock.url("/v1/messages"))
        .header("content-type", "application/json")
        .body(PROMPT)
        .send()
        .await
}
