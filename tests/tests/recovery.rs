//! Recovery actions on loopback: the resent request is changed, not merely
//! repeated — and only where the change can help.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::Full;
use llm_retry::policy::{FallbackMode, RefreshCredentials};
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{BoxError, RetryError, RetryLayer, RetryReport, StopReason};
use llm_retry_mock::{MockServer, Reply, Route};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{client, fast_policy, mock, API_KEY};
use tower::{Layer, ServiceExt};

fn post(url: &str, body: &Value) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-api-key", API_KEY)
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap()
}

/// Sends `body` to the mock's messages route through `RetryLayer` with `policy`.
async fn call(
    policy: llm_retry::RetryPolicy,
    mock: &MockServer,
    body: &Value,
) -> Result<http::Response<llm_retry::RetryBody<hyper::body::Incoming>>, llm_retry::BoxError> {
    RetryLayer::new(policy)
        .layer(client())
        .oneshot(post(&mock.url("/v1/messages"), body))
        .await
}

/// Anthropic's answer to a bad key.
fn unauthorized() -> Reply {
    Reply::anthropic_error(401, "authentication_error", "invalid x-api-key")
}

/// Calls `mock` with a policy that refreshes credentials through a new
/// [`Refresher`]; returns the response and the hook, to count its calls.
async fn call_refreshing(
    mock: &MockServer,
) -> (
    http::Response<llm_retry::RetryBody<hyper::body::Incoming>>,
    Refresher,
) {
    let hook = Refresher::default();
    let policy = fast_policy()
        .refresh_credentials(hook.clone())
        .build()
        .unwrap();
    let res = call(policy, mock, &anthropic_body()).await.unwrap();
    (res, hook)
}

fn anthropic_body() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 20000,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Summarise the attached files."}],
        "stream": false
    })
}

/// Anthropic's answer to a request whose input and max_tokens (20,000)
/// overflow the context: the cut is to 10,941.
fn anthropic_overflow() -> Reply {
    Reply::anthropic_error(
        400,
        "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000, \
         decrease input length or `max_tokens` and try again",
    )
}

fn without(mut value: Value, field: &str) -> Value {
    value.as_object_mut().unwrap().remove(field);
    value
}

#[tokio::test(start_paused = true)]
async fn context_overflows_are_resent_at_once_with_the_exact_cut() {
    let anthropic = anthropic_overflow();
    let openai = Reply::openai_error(
        400,
        "invalid_request_error",
        Some("context_length_exceeded"),
        "This model's maximum context length is 128000 tokens. However, you requested 130000 tokens \
         (100000 in the messages, 30000 in the completion). Please reduce the length of the messages or completion.",
    );
    let openai_body = json!({"model": "gpt-4o", "max_completion_tokens": 30000, "messages": [{"role": "user", "content": "hi"}]});
    let cases = [
        (anthropic, anthropic_body(), "max_tokens", 10941),
        (openai, openai_body, "max_completion_tokens", 27000),
    ];
    for (overflow, body, field, want) in cases {
        let mock = mock(Route::sequence([overflow, Reply::anthropic_ok("fits")])).await;
        let svc = RetryLayer::new(llm_retry::RetryPolicy::default()).layer(client());
        let start = tokio::time::Instant::now();
        let res = svc
            .oneshot(post(&mock.url("/v1/messages"), &body))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{field}");
        assert_eq!(
            start.elapsed(),
            std::time::Duration::ZERO,
            "no sleep before the cut resend"
        );
        let sent = mock.requests();
        assert_eq!(sent.len(), 2);
        let resent = sent[1].body_json().unwrap();
        assert_eq!(resent[field], json!(want), "{field}");
        assert_eq!(
            without(resent, field),
            without(body, field),
            "the rest of the body is unchanged"
        );
        let report = res.extensions().get::<RetryReport>().unwrap();
        assert_eq!(
            report.recoveries,
            [llm_retry::policy::RecoveryAction::CutMaxTokens]
        );
    }
}

#[tokio::test]
async fn an_overflow_the_cut_cannot_fix_ends_at_once_with_the_reason() {
    let too_long = Reply::anthropic_error(
        400,
        "invalid_request_error",
        "prompt is too long: 208310 tokens > 200000 maximum",
    );
    let mock = mock(Route::always(too_long)).await;
    let res = call(fast_policy().build().unwrap(), &mock, &anthropic_body())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let report = res.extensions().get::<RetryReport>().unwrap();
    assert!(
        matches!(report.stop, StopReason::RecoveryFailed { .. }),
        "{:?}",
        report.stop
    );
    assert!(report.to_string().contains("208310"), "{report}");
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn the_cut_is_made_at_most_once_per_request() {
    let overflow = Reply::anthropic_error(
        400,
        "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000",
    );
    let mock = mock(Route::always(overflow)).await;
    let res = call(fast_policy().build().unwrap(), &mock, &anthropic_body())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn an_overflow_as_the_first_stream_event_is_cut_too() {
    let event = Reply::anthropic_stream_error(
        "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000",
    );
    let mock = mock(Route::sequence([event, Reply::anthropic_stream(&["ok"])])).await;
    let svc = RetryLayer::new(fast_policy().build().unwrap())
        .layer(StreamGuardLayer::new().layer(client()));
    let res = svc
        .oneshot(post(&mock.url("/v1/messages"), &anthropic_body()))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        mock.requests()[1].body_json().unwrap()["max_tokens"],
        json!(10941)
    );
}

#[tokio::test]
async fn three_overloads_switch_to_the_fallback_model_automatically() {
    let mock = mock(Route::sequence([
        Reply::overloaded(),
        Reply::overloaded(),
        Reply::overloaded(),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let policy = fast_policy()
        .fallback_model("claude-haiku-4-5", FallbackMode::Automatic)
        .build()
        .unwrap();
    let res = call(policy, &mock, &anthropic_body()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let models: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r.body_json().unwrap()["model"].clone())
        .collect();
    assert_eq!(
        models,
        [
            json!("claude-sonnet-4-5"),
            json!("claude-sonnet-4-5"),
            json!("claude-sonnet-4-5"),
            json!("claude-haiku-4-5")
        ]
    );
}

#[tokio::test]
async fn three_overloads_in_manual_mode_end_with_fallback_triggered() {
    let mock = mock(Route::always(Reply::overloaded())).await;
    let policy = fast_policy()
        .fallback_model("claude-haiku-4-5", FallbackMode::Manual)
        .build()
        .unwrap();
    let err = call(policy, &mock, &anthropic_body()).await.unwrap_err();
    let err = err.downcast::<RetryError>().unwrap();
    assert!(err.stop().is_fallback());
    assert_eq!(err.stop().fallback_model(), Some("claude-haiku-4-5"));
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test]
async fn another_failure_between_overloads_resets_the_count() {
    let o = Reply::overloaded;
    let mock = mock(Route::sequence([
        o(),
        o(),
        Reply::status(503),
        o(),
        o(),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let policy = fast_policy()
        .fallback_model("claude-haiku-4-5", FallbackMode::Manual)
        .build()
        .unwrap();
    let res = call(policy, &mock, &anthropic_body()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.request_count(), 6);
    assert!(mock
        .requests()
        .iter()
        .all(|r| r.body_json().unwrap()["model"] == "claude-sonnet-4-5"));
}

#[tokio::test]
async fn without_a_fallback_an_overload_streak_gives_up() {
    let mock = mock(Route::always(Reply::overloaded())).await;
    let res = call(fast_policy().build().unwrap(), &mock, &anthropic_body())
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 529);
    let report = res.extensions().get::<RetryReport>().unwrap();
    assert_eq!(report.stop, StopReason::OverloadedRepeatedly { count: 3 });
    assert_eq!(mock.request_count(), 3);
}

/// A credential hook that hands out a new key and counts its calls.
#[derive(Clone, Default)]
struct Refresher {
    refreshed: Arc<AtomicUsize>,
    cleared: Arc<AtomicUsize>,
}

const FRESH_KEY: &str = "sk-ant-api03-FRESH-after-refresh";

impl RefreshCredentials for Refresher {
    fn clear_token_cache(&self) {
        self.cleared.fetch_add(1, Ordering::SeqCst);
    }

    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send>> {
        self.refreshed.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            let mut headers = HeaderMap::new();
            headers.insert("x-api-key", HeaderValue::from_static(FRESH_KEY));
            Ok(headers)
        })
    }
}

#[tokio::test]
async fn a_401_refreshes_credentials_once_and_resends() {
    let mock = mock(Route::sequence([unauthorized(), Reply::anthropic_ok("ok")])).await;
    let (res, hook) = call_refreshing(&mock).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(hook.refreshed.load(Ordering::SeqCst), 1);
    assert_eq!(hook.cleared.load(Ordering::SeqCst), 1);
    let keys: Vec<_> = mock
        .requests()
        .iter()
        .map(|r| r.header_str("x-api-key").unwrap().to_owned())
        .collect();
    assert_eq!(keys, [API_KEY, FRESH_KEY]);
}

#[tokio::test]
async fn a_second_401_is_final_and_no_hook_means_the_first_is() {
    let mock = mock(Route::always(unauthorized())).await;
    let (res, hook) = call_refreshing(&mock).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        (hook.refreshed.load(Ordering::SeqCst), mock.request_count()),
        (1, 2)
    );

    mock.reset_records();
    let res = call(fast_policy().build().unwrap(), &mock, &anthropic_body())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(mock.request_count(), 1);
}

/// A credential hook whose token service is down.
struct VaultDown;

impl RefreshCredentials for VaultDown {
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send>> {
        Box::pin(async { Err::<HeaderMap, BoxError>("vault down".into()) })
    }
}

/// Which hooks fired, in order.
#[derive(Clone, Default)]
struct Fired(Arc<std::sync::Mutex<Vec<&'static str>>>);

impl llm_retry::RetryHooks for Fired {
    fn on_recover(&self, _: &llm_retry::RecoveryEvent) {
        self.0.lock().unwrap().push("recover");
    }
    fn on_recovered(&self, _: &RetryReport) {
        self.0.lock().unwrap().push("recovered");
    }
    fn on_give_up(&self, _: &RetryReport) {
        self.0.lock().unwrap().push("give up");
    }
}

#[tokio::test]
async fn a_refresh_is_reported_and_announced_once_its_credentials_are_on_the_resend() {
    let mock = mock(Route::sequence([unauthorized(), Reply::anthropic_ok("ok")])).await;
    let fired = Fired::default();
    let policy = fast_policy()
        .refresh_credentials(Refresher::default())
        .build()
        .unwrap()
        .with_hooks(fired.clone());
    let res = call(policy, &mock, &anthropic_body()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let report = res.extensions().get::<RetryReport>().unwrap();
    assert_eq!(
        report.recoveries,
        [llm_retry::policy::RecoveryAction::RefreshCredentials]
    );
    assert_eq!(*fired.0.lock().unwrap(), ["recover", "recovered"]);
}

/// The 401 is a response: when no credentials come, it is the answer, with
/// the reason in its report, and nothing is reported as recovered.
#[tokio::test]
async fn a_401_whose_refresh_fails_is_the_answer_with_the_reason() {
    let mock = mock(Route::always(unauthorized())).await;
    let fired = Fired::default();
    let policy = fast_policy()
        .refresh_credentials(VaultDown)
        .build()
        .unwrap()
        .with_hooks(fired.clone());
    let res = call(policy, &mock, &anthropic_body()).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(mock.request_count(), 1);
    let report = res.extensions().get::<RetryReport>().unwrap().clone();
    assert!(
        matches!(
            &report.stop,
            StopReason::RecoveryFailed { reason, .. } if reason == "vault down"
        ),
        "{report}"
    );
    assert!(report.recoveries.is_empty(), "{:?}", report.recoveries);
    assert_eq!(*fired.0.lock().unwrap(), ["give up"]);
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("authentication_error"),
        "the 401's own body: {body:?}"
    );
}

#[tokio::test]
async fn behind_a_gateway_only_an_explicit_yes_is_retried() {
    let plain = mock(Route::sequence([
        Reply::rate_limited(Some(0)),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let res = call(
        fast_policy().behind_gateway(true).build().unwrap(),
        &plain,
        &anthropic_body(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        res.extensions().get::<RetryReport>().unwrap().stop,
        StopReason::LeftToGateway
    );
    assert_eq!(plain.request_count(), 1);

    let yes = Reply::rate_limited(Some(0)).header("x-should-retry", "true");
    let invited = mock(Route::sequence([yes, Reply::anthropic_ok("ok")])).await;
    let res = call(
        fast_policy().behind_gateway(true).build().unwrap(),
        &invited,
        &anthropic_body(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(invited.request_count(), 2);
}

#[tokio::test]
async fn behind_a_gateway_an_overloaded_first_stream_event_is_left_to_it() {
    let event = Reply::anthropic_stream_error("overloaded_error", "Overloaded");
    let mock = mock(Route::sequence([event, Reply::anthropic_stream(&["ok"])])).await;
    let policy = fast_policy().behind_gateway(true).build().unwrap();
    let svc = RetryLayer::new(policy).layer(StreamGuardLayer::new().layer(client()));
    let err = svc
        .oneshot(post(&mock.url("/v1/messages"), &anthropic_body()))
        .await
        .unwrap_err();
    let err = err.downcast::<RetryError>().unwrap();
    assert_eq!(err.report().stop, StopReason::LeftToGateway);
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_cut_resend_is_booked_at_its_new_cost_by_a_token_quota() {
    // 1,000 tokens a second in bursts of 25,000: the first send books its
    // ~20,000 (max_tokens 20,000 plus a token per four bytes). The cut
    // resend asks for max_tokens 10,941: it waits ~6 s for what it lacks,
    // not the ~15 s the uncut cost would.
    let overflow = anthropic_overflow();
    let mock = mock(Route::sequence([overflow, Reply::anthropic_ok("fits")])).await;
    let quotas = llm_retry::rate_limit::Quotas::none().tokens_per_minute_with_burst(60_000, 25_000);
    let gate = llm_retry::rate_limit::RateLimitLayer::new(quotas).unwrap();
    let svc = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(llm_retry::RetryPolicy::default()))
        .layer(gate)
        .service(client());
    let start = tokio::time::Instant::now();
    let res = svc
        .oneshot(post(&mock.url("/v1/messages"), &anthropic_body()))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let waited = start.elapsed();
    assert!(
        waited > std::time::Duration::from_secs(5) && waited < std::time::Duration::from_secs(7),
        "{waited:?}"
    );
    // The wait is the resend's own, between the two sends as the upstream
    // saw them (booked at the uncut cost, it would be about 15 s).
    let sent: Vec<_> = mock.requests().iter().map(|r| r.received_at).collect();
    assert_eq!(sent.len(), 2);
    let between = sent[1] - sent[0];
    assert!(
        between > std::time::Duration::from_secs(5) && between < std::time::Duration::from_secs(7),
        "the resend waited {between:?}"
    );
}
