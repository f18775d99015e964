//! The official Anthropic and OpenAI Python SDKs pointed at the gateway:
//! a served request, a failover, and a final give-up after which the SDK
//! makes no further attempt.
//!
//! Ignored by a plain `cargo test`: they need `LLM_RETRY_SDK_PYTHON`, a
//! Python with `anthropic` and `openai` installed. `.ci/run` makes one in
//! `target/sdk-venv` and runs them with `--ignored`; run that way without
//! the variable, they fail.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry_mock::{Reply, Route};
use std::process::Command;
use support::{gateway, no_env, one_target, rate_limited, two_targets};

/// The Python to run the SDKs with.
fn python() -> String {
    std::env::var("LLM_RETRY_SDK_PYTHON")
        .expect("LLM_RETRY_SDK_PYTHON names a Python with anthropic and openai (.ci/run sets it)")
}

/// Runs one SDK call against the gateway at `base`; the JSON line it printed.
fn sdk(python: &str, sdk: &str, mode: &str, base: &str) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk_client.py");
    let output = Command::new(python)
        .args([script, sdk, mode, base])
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(line.trim()).unwrap_or_else(|_| panic!("not JSON: {line}"))
}

/// What each SDK and mode is answered with when served.
fn served(sdk: &str, mode: &str) -> Reply {
    match (sdk, mode) {
        ("anthropic", "plain") => Reply::anthropic_ok("Hello there"),
        ("anthropic", _) => Reply::anthropic_stream(&["Hello", " there"]),
        (_, "plain") => Reply::openai_ok("Hello there"),
        _ => Reply::openai_stream(&["Hello", " there"]),
    }
}

const CASES: [(&str, &str); 4] = [
    ("anthropic", "plain"),
    ("anthropic", "stream"),
    ("openai", "plain"),
    ("openai", "stream"),
];

/// Runs one SDK call off the runtime's threads.
async fn call(
    python: &str,
    name: &'static str,
    mode: &'static str,
    base: String,
) -> serde_json::Value {
    let python = python.to_owned();
    tokio::task::spawn_blocking(move || sdk(&python, name, mode, &base))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs LLM_RETRY_SDK_PYTHON; .ci/run runs it with --ignored"]
async fn an_openai_overload_fails_over_in_one_call() {
    let python = python();
    for mode in ["plain", "stream"] {
        for overload in [
            Reply::openai_error(503, "server_error", None, "The server is overloaded"),
            Reply::openai_error(500, "server_error", None, "The server had an error"),
        ] {
            let a = support::target(Route::always(overload)).await;
            let b = support::target(Route::always(served("openai", mode))).await;
            let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
            let result = call(&python, "openai", mode, gw.url("")).await;
            assert_eq!(result["text"], "Hello there", "{mode}: {result}");
            assert_eq!((a.request_count(), b.request_count()), (1, 1), "{mode}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs LLM_RETRY_SDK_PYTHON; .ci/run runs it with --ignored"]
async fn each_sdk_is_served_and_failed_over_in_one_call() {
    let python = python();
    for (name, mode) in CASES {
        // Served by the first target.
        let a = support::target(Route::always(served(name, mode))).await;
        let b = support::target(Route::always(served(name, mode))).await;
        let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
        let base = gw.url("");
        let result = tokio::task::spawn_blocking({
            let (python, base) = (python.clone(), base.clone());
            move || sdk(&python, name, mode, &base)
        })
        .await
        .unwrap();
        assert_eq!(result["text"], "Hello there", "{name} {mode}: {result}");
        assert_eq!(
            (a.request_count(), b.request_count()),
            (1, 0),
            "{name} {mode}"
        );

        // The first target is rate-limited: failed over, one SDK call.
        let a = support::target(Route::always(rate_limited("1"))).await;
        let b = support::target(Route::always(served(name, mode))).await;
        let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
        let base = gw.url("");
        let result = tokio::task::spawn_blocking({
            let python = python.clone();
            move || sdk(&python, name, mode, &base)
        })
        .await
        .unwrap();
        assert_eq!(result["text"], "Hello there", "{name} {mode}: {result}");
        assert_eq!(
            (a.request_count(), b.request_count()),
            (1, 1),
            "{name} {mode}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs LLM_RETRY_SDK_PYTHON; .ci/run runs it with --ignored"]
async fn after_the_gateway_gives_up_no_sdk_tries_again() {
    let python = python();
    for (name, mode) in CASES {
        let a = support::target(Route::always(rate_limited("1"))).await;
        let b = support::target(Route::always(rate_limited("1"))).await;
        let gw = gateway(&two_targets(&a, &b, ""), no_env).await;
        let base = gw.url("");
        let result = tokio::task::spawn_blocking({
            let python = python.clone();
            move || sdk(&python, name, mode, &base)
        })
        .await
        .unwrap();
        assert_eq!(result["error_status"], 429, "{name} {mode}: {result}");
        assert_eq!(result["error"], "RateLimitError", "{name} {mode}: {result}");
        // Without `x-should-retry: false` the SDK would have sent twice more.
        assert_eq!(
            (a.request_count(), b.request_count()),
            (1, 1),
            "{name} {mode}: the SDK retried"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs LLM_RETRY_SDK_PYTHON; .ci/run runs it with --ignored"]
async fn a_stalled_target_is_reported_as_a_timeout_and_not_retried() {
    let python = python();
    for (name, mode) in CASES {
        // Answers 200 at once, then sends nothing for a minute.
        let stalls = Reply::sse([llm_retry_mock::SseEvent::new(Some("ping"), "{}")
            .after(std::time::Duration::from_secs(60))]);
        let a = support::target(Route::always(stalls)).await;
        let toml = one_target(
            &a.url(""),
            "",
            "max_retries = 0\nfirst_content_timeout = \"300ms\"",
        );
        let gw = gateway(&toml, no_env).await;
        let result = call(&python, name, mode, gw.url("")).await;
        assert_eq!(result["error_status"], 504, "{name} {mode}: {result}");
        assert_eq!(a.request_count(), 1, "{name} {mode}: the SDK retried");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs LLM_RETRY_SDK_PYTHON; .ci/run runs it with --ignored"]
async fn during_a_cooldown_a_rate_limit_caused_the_sdk_sees_a_rate_limit() {
    let python = python();
    for (name, mode) in CASES {
        let a = support::target(Route::always(rate_limited("30"))).await;
        let toml = one_target(&a.url(""), "", "max_retries = 0\ncooldown = true");
        let gw = gateway(&toml, no_env).await;
        for call_number in 1..=2 {
            let result = call(&python, name, mode, gw.url("")).await;
            assert_eq!(
                result["error"], "RateLimitError",
                "{name} {mode} call {call_number}: {result}"
            );
        }
        assert_eq!(a.request_count(), 1, "{name} {mode}: the cooldown held");
    }
}

/// A route over `a` then `b`, every target setting at its default.
fn with_defaults(a: &llm_retry_mock::MockServer, b: &llm_retry_mock::MockServer) -> String {
    format!(
        "[[route]]\nname = \"r\"\n[[route.target]]\nname = \"a\"\nbase_url = \"{}\"\n[[route.target]]\nname = \"b\"\nbase_url = \"{}\"\n",
        a.url(""),
        b.url("")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs LLM_RETRY_SDK_PYTHON; .ci/run runs it with --ignored"]
async fn when_every_target_names_a_long_wait_the_sdk_gets_a_rate_limit_at_once() {
    let python = python();
    for (name, mode) in CASES {
        let a = support::target(Route::always(rate_limited("30"))).await;
        let b = support::target(Route::always(rate_limited("30"))).await;
        let gw = gateway(&with_defaults(&a, &b), no_env).await;
        let result = call(&python, name, mode, gw.url("")).await;
        assert_eq!(result["error"], "RateLimitError", "{name} {mode}: {result}");
        // No target waited the 30 s out and sent again.
        assert_eq!(
            (a.request_count(), b.request_count()),
            (1, 1),
            "{name} {mode}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs LLM_RETRY_SDK_PYTHON; .ci/run runs it with --ignored"]
async fn every_target_overloaded_costs_no_more_sends_than_the_sdk_alone() {
    let python = python();
    for (name, mode) in CASES {
        let a = support::target(Route::always(Reply::overloaded())).await;
        let b = support::target(Route::always(Reply::overloaded())).await;
        let gw = gateway(&with_defaults(&a, &b), no_env).await;
        let result = call(&python, name, mode, gw.url("")).await;
        assert_eq!(result["error_status"], 529, "{name} {mode}: {result}");
        let sends = a.request_count() + b.request_count();
        assert!(
            sends <= 3,
            "{name} {mode}: {sends} sends; the SDK alone makes 3"
        );
    }
}
