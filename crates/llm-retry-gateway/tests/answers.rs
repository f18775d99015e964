//! What the gateway says when it answers itself: a stall is a timeout, a
//! cooldown a rate limit caused is a rate limit, and every answer is in
//! the provider's error shape.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry_mock::{Reply, Route, SseEvent};
use std::time::Duration;
use support::{gateway, no_env, one_target, post, send, target, PROMPT};

/// A 200 stream whose first event comes only after `after`.
pub fn stalls(after: Duration) -> Reply {
    Reply::sse([SseEvent::new(
        Some("content_block_delta"),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
    )
    .after(after)])
}

#[tokio::test(start_paused = true)]
async fn a_first_content_timeout_is_answered_as_a_timeout() {
    let a = target(Route::always(stalls(Duration::from_secs(60)))).await;
    let toml = one_target(
        &a.url(""),
        "",
        "max_retries = 0\nfirst_content_timeout = \"2s\"",
    );
    let gw = gateway(&toml, no_env).await;
    let started = tokio::time::Instant::now();
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    let took = started.elapsed();
    assert_eq!(head.status, 504);
    assert_eq!(head.headers["x-should-retry"], "false");
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["type"], "error", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("stalled") && message.contains("first content"),
        "{message}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(a.request_count(), 1);
}
