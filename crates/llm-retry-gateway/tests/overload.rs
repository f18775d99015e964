//! Failover on every overload shape answered before content: Anthropic's
//! 529 and `overloaded_error`, OpenAI's 503 and 500 `server_error`, 502 and
//! 504. Such an answer moves the request on; it lets no further round
//! begin.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry_mock::{Reply, Route};
use support::{gateway, no_env, post, send, target, two_targets, PROMPT};

const CHAT: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}"#;

/// Each overload shape on the first target, and the path it is sent to.
fn shapes() -> Vec<(&'static str, Reply, &'static str)> {
    vec![
        ("anthropic 529", Reply::overloaded(), "/v1/messages"),
        (
            "anthropic overloaded_error on a 500",
            Reply::anthropic_error(500, "overloaded_error", "Overloaded"),
            "/v1/messages",
        ),
        (
            "openai 503",
            Reply::openai_error(503, "server_error", None, "The server is overloaded"),
            "/v1/chat/completions",
        ),
        (
            "openai 500 server_error",
            Reply::openai_error(500, "server_error", None, "The server had an error"),
            "/v1/chat/completions",
        ),
        (
            "502 from a proxy, in HTML",
            Reply::status(502).body("<html>Bad Gateway</html>"),
            "/v1/chat/completions",
        ),
        ("504 from a proxy", Reply::status(504), "/v1/messages"),
    ]
}

#[tokio::test]
async fn every_overload_shape_before_content_moves_to_the_next_target() {
    for (name, reply, path) in shapes() {
        let a = target(Route::always(reply)).await;
        let b = target(Route::always(Reply::openai_ok("from b"))).await;
        let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
        let body = if path == "/v1/messages" { PROMPT } else { CHAT };
        let (head, answer) = send(post(&gw.url(path), body)).await;
        assert_eq!(head.status, 200, "{name}");
        assert!(
            String::from_utf8_lossy(&answer).contains("from b"),
            "{name}"
        );
        assert_eq!((a.request_count(), b.request_count()), (1, 1), "{name}");
    }
}

#[tokio::test]
async fn a_plain_500_is_still_the_answer() {
    let a = target(Route::always(Reply::anthropic_error(
        500,
        "api_error",
        "Internal",
    )))
    .await;
    let b = target(Route::always(Reply::anthropic_ok("b"))).await;
    let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/messages"), PROMPT)).await;
    assert_eq!(head.status, 500);
    assert_eq!(b.request_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_overload_that_is_not_a_certified_rejection_begins_no_further_round() {
    let a = target(Route::always(Reply::openai_error(
        503,
        "server_error",
        None,
        "The server is overloaded",
    )))
    .await;
    let b = target(Route::always(Reply::status(502))).await;
    let extra = "exhaustion_retry = { max_rounds = 2, max_wait = \"2s\" }";
    let gw = gateway(&two_targets(&a, &b, extra), no_env).await;
    let (head, _) = send(post(&gw.url("/v1/chat/completions"), CHAT)).await;
    assert_eq!(head.status, 502, "the last answer is handed over");
    assert_eq!(head.headers["x-should-retry"], "false");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}
