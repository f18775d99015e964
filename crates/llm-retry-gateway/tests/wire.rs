//! The gateway on the wire: failover, the give-up answer, credentials,
//! routing, streams passing through, draining.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry_mock::{Reply, Route};
use std::time::Duration;
use support::{gateway, no_env, post, rate_limited, send, target, two_targets, PROMPT};

#[tokio::test]
async fn a_rate_limited_first_target_fails_over_to_the_second() {
    let a = target(Route::always(rate_limited("1"))).await;
    let b = target(Route::always(Reply::anthropic_ok("from b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert!(String::from_utf8_lossy(&body).contains("from b"));
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    assert_eq!(
        b.requests()[0].body,
        PROMPT.as_bytes(),
        "the body unchanged"
    );
}

#[tokio::test]
async fn when_every_target_refuses_the_answer_says_do_not_retry_and_when_to_come_back() {
    let a = target(Route::always(rate_limited("5"))).await;
    let b = target(Route::always(rate_limited("3"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 429);
    assert_eq!(head.headers["x-should-retry"], "false");
    assert_eq!(head.headers["retry-after"], "3");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn an_ambiguous_failure_is_not_failed_over_and_is_final() {
    let a = target(Route::always(Reply::status(500))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 500);
    assert_eq!(
        head.headers["x-should-retry"], "false",
        "the gateway already retried"
    );
    assert_eq!(b.request_count(), 0);
}

#[tokio::test]
async fn a_target_with_its_own_key_never_sees_the_clients_and_no_header_picks_the_upstream() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let decoy = target(Route::always(Reply::anthropic_ok("decoy"))).await;
    let toml = format!(
        r#"
[[route]]
name = "r"
[[route.target]]
name = "a"
base_url = "{}"
api_key_env = "TARGET_KEY"
auth = "x-api-key"
"#,
        a.url("")
    );
    let gw = gateway(&toml, |var| {
        (var == "TARGET_KEY").then(|| "target-secret".to_owned())
    })
    .await;
    let mut request = post(&gw.url("/v1/messages"), PROMPT);
    let headers = request.headers_mut();
    headers.insert("x-api-key", "client-secret".parse().unwrap());
    headers.insert("authorization", "Bearer client-secret".parse().unwrap());
    headers.insert("host", decoy.addr().to_string().parse().unwrap());
    headers.insert(
        "x-forwarded-host",
        decoy.addr().to_string().parse().unwrap(),
    );
    let (head, _) = send(request).await;
    assert_eq!(head.status, 200);
    assert_eq!(decoy.request_count(), 0);
    let seen = &a.requests()[0];
    assert_eq!(seen.header_str("x-api-key"), Some("target-secret"));
    assert_eq!(seen.header_str("authorization"), None);
}

#[tokio::test]
async fn a_target_without_a_key_forwards_the_clients() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let mut request = post(&gw.url("/v1/messages"), PROMPT);
    request
        .headers_mut()
        .insert("x-api-key", "client-key".parse().unwrap());
    send(request).await;
    assert_eq!(a.requests()[0].header_str("x-api-key"), Some("client-key"));
}

#[tokio::test]
async fn routes_match_by_path_and_model_and_targets_rewrite_the_model() {
    let claude = target(Route::always(Reply::anthropic_ok("claude"))).await;
    let gpt = target(Route::always(Reply::openai_ok("gpt"))).await;
    let toml = format!(
        r#"
[[route]]
name = "claude"
path_prefix = "/v1/messages"
models = ["claude-sonnet-4-5"]
[[route.target]]
name = "c"
base_url = "{}"
model = "claude-sonnet-4-5-20250929"

[[route]]
name = "openai"
path_prefix = "/v1/chat/completions"
[[route.target]]
name = "o"
base_url = "{}"
"#,
        claude.url(""),
        gpt.url("")
    );
    let gw = gateway(&toml, no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        claude.requests()[0].body_json().unwrap()["model"],
        "claude-sonnet-4-5-20250929"
    );
    let other_model = PROMPT.replace("claude-sonnet-4-5", "claude-opus-4");
    let (head, _) = send(post(&gw.url("/v1/messages"), &other_model)).await;
    assert_eq!(head.status, 404, "no route takes that model");
    let (head, _) = send(post(
        &gw.url("/v1/chat/completions"),
        r#"{"model":"gpt-4o","messages":[]}"#,
    ))
    .await;
    assert_eq!(head.status, 200);
    assert_eq!(gpt.request_count(), 1);
}

#[tokio::test]
async fn a_stream_passes_through_byte_for_byte_after_a_failover_before_content() {
    let a = target(Route::always(Reply::anthropic_stream_error(
        "overloaded_error",
        "Overloaded",
    )))
    .await;
    let good = Reply::anthropic_stream(&["Hello", " there"]);
    let expected = good.expected_body().unwrap();
    let b = target(Route::always(good)).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, body) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["content-type"], "text/event-stream");
    assert_eq!(body, expected);
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test]
async fn draining_lets_streams_finish_and_turns_new_requests_away() {
    let slow = Reply::sse(
        (0..5).map(|i| {
            llm_retry_mock::SseEvent::new(Some("content_block_delta"), &format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{i}"}}}}"#))
                .after(Duration::from_millis(100))
        }),
    );
    let expected = slow.expected_body().unwrap();
    let a = target(Route::always(slow)).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let mut gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let response = support::client()
        .request(post(&gw.url("/v1/messages"), PROMPT))
        .await
        .unwrap();
    assert_eq!(gw.gateway.in_flight(), 1);
    gw.signal();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 503);
    assert_eq!(head.headers["retry-after"], "1");
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, expected, "the stream in flight finished whole");
    tokio::time::timeout(Duration::from_secs(5), gw.served)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn health_answers_until_the_drain() {
    let a = target(Route::always(Reply::anthropic_ok("a"))).await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let response = support::client()
        .request(
            http::Request::get(gw.url("/healthz"))
                .body(Default::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    gw.gateway.start_draining();
    let response = support::client()
        .request(
            http::Request::get(gw.url("/healthz"))
                .body(Default::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
}
