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

/// A target that stalls for a second, cut by its first-content timeout or
/// by the route's deadline: the gateway's own time (the overhead header,
/// read on the real clock) leaves that second out. The client's whole wait
/// contains the gateway's, so the gateway's own time is at most that wait
/// less the stall: an ordering, whatever the machine's load.
#[tokio::test]
async fn a_target_s_stall_is_not_counted_as_the_gateway_s_time() {
    let cut_by = [
        ("max_retries = 0\nfirst_content_timeout = \"1s\"", ""),
        ("max_retries = 0", "deadline = \"1s\"\n"),
    ];
    for (target_extra, route_extra) in cut_by {
        let a = target(Route::always(stalls(Duration::from_secs(60)))).await;
        let toml = one_target(&a.url(""), "", target_extra)
            .replace("name = \"r\"\n", &format!("name = \"r\"\n{route_extra}"));
        let gw = gateway(&toml, no_env).await;
        let started = std::time::Instant::now();
        let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
        let waited_ms = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(head.status, 504, "{target_extra} {route_extra}");
        let overhead: f64 = head.headers["x-llm-retry-gateway-overhead-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // The 1 s stall is the target's: the gateway's own time is what is
        // left of the client's wait without it (half of it as slack, for a
        // loaded machine that pauses a thread between the two clocks).
        assert!(
            overhead <= waited_ms - 500.0,
            "{overhead} ms of {waited_ms} ms ({target_extra} {route_extra})"
        );
    }
}

/// The answer's JSON body.
fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|_| panic!("not JSON: {body:?}"))
}

#[tokio::test]
async fn while_draining_the_answer_is_retryable_json_in_the_routes_shape() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let gw = gateway(&one_target(&a.url(""), "", ""), no_env).await;
    gw.gateway.start_draining();
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 503);
    assert_eq!(head.headers["content-type"], "application/json");
    assert_eq!(head.headers["x-should-retry"], "true");
    assert_eq!(head.headers["retry-after"], "1");
    let body = json(&body);
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["message"], "draining", "{body}");
    let chat = r#"{"model":"gpt-4o-mini","messages":[]}"#;
    let (head, body) = send(post(&gw.url("/v1/chat/completions"), chat)).await;
    assert_eq!(head.status, 503);
    let body = json(&body);
    assert_eq!(body["error"]["type"], "server_error", "{body}");
    assert_eq!(body["error"]["message"], "draining", "{body}");
    assert_eq!(a.request_count(), 0);
}

#[tokio::test]
async fn the_gateways_own_refusals_are_typed_as_the_provider_types_them() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let toml = format!(
        "client_key_env = \"GW\"\n[[route]]\nname = \"r\"\npath_prefix = \"/v1/messages\"\n[[route.target]]\nname = \"a\"\nbase_url = \"{}\"\n",
        a.url("")
    );
    let gw = gateway(&toml, |var| (var == "GW").then(|| "k".to_owned())).await;
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 401);
    assert_eq!(head.headers["x-should-retry"], "false");
    assert_eq!(json(&body)["error"]["type"], "authentication_error");
    let mut request = post(&gw.url("/v1/chat/completions"), "{}");
    request
        .headers_mut()
        .insert("authorization", "Bearer k".parse().unwrap());
    let (head, body) = send(request).await;
    assert_eq!(head.status, 404);
    let body = json(&body);
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["code"], "not_found", "{body}");
}

#[tokio::test]
async fn a_rate_limit_cooldown_is_answered_as_the_providers_rate_limit() {
    let a = target(Route::always(support::rate_limited("5"))).await;
    let toml = one_target(&a.url(""), "", "max_retries = 0\ncooldown = true");
    let gw = gateway(&toml, no_env).await;
    send(post(&gw.url("/v1/messages"), PROMPT)).await;
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 429);
    assert_eq!(json(&body)["error"]["type"], "rate_limit_error");
}
