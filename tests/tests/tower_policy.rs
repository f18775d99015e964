//! The policy under tower's own retry layer, on loopback.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use llm_retry::{BoxError, ReplayBody};
use llm_retry_mock::{Reply, Route};
use support::{client, fast_policy, mock, PROMPT};
use tower::{ServiceBuilder, ServiceExt};

/// Sends one request through `tower::retry::RetryLayer` with the policy;
/// returns the final status and how many sends the upstream saw.
async fn through_tower_retry(route: Route) -> (StatusCode, usize) {
    let mock = mock(route).await;
    let res = through_tower(fast_policy().build().unwrap(), &mock).await;
    (res.status(), mock.request_count())
}

/// The prompt, posted to `mock`'s messages route, its body replayable as
/// tower's loop needs it.
fn prompt_request(mock: &llm_retry_mock::MockServer) -> http::Request<ReplayBody<Full<Bytes>>> {
    let body = ReplayBody::new(Full::new(Bytes::from_static(PROMPT.as_bytes())), 1 << 20);
    http::Request::post(mock.url("/v1/messages"))
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

/// One request to `mock` through `tower::retry::RetryLayer` with `policy`.
async fn through_tower(
    policy: llm_retry::RetryPolicy,
    mock: &llm_retry_mock::MockServer,
) -> http::Response<hyper::body::Incoming> {
    ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(policy))
        .map_err(BoxError::from)
        .service(client::<Full<Bytes>>())
        .oneshot(prompt_request(mock))
        .await
        .unwrap()
}

#[tokio::test]
async fn plain_tower_retry_layer_retries_with_the_policy() {
    let route = Route::sequence([
        Reply::overloaded(),
        Reply::status(503),
        Reply::anthropic_ok("ok"),
    ]);
    assert_eq!(through_tower_retry(route).await, (StatusCode::OK, 3));
}

#[tokio::test]
async fn plain_tower_retry_layer_respects_x_should_retry_false() {
    let declined = Reply::status(503).header("x-should-retry", "false");
    let route = Route::sequence([declined, Reply::anthropic_ok("ok")]);
    assert_eq!(
        through_tower_retry(route).await,
        (StatusCode::SERVICE_UNAVAILABLE, 1)
    );
}

#[tokio::test]
async fn the_tower_path_reports_fires_hooks_and_falls_back_like_retry_layer() {
    use llm_retry::policy::FallbackMode;
    let mock = mock(Route::sequence([
        Reply::overloaded(),
        Reply::overloaded(),
        Reply::overloaded(),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let policy = fast_policy()
        .fallback_model("claude-haiku-4-5", FallbackMode::Automatic)
        .build()
        .unwrap()
        .with_hooks(support::Recorder(tx));
    let res = through_tower(policy, &mock).await;
    assert_eq!(res.status(), StatusCode::OK);
    let report = res.extensions().get::<llm_retry::RetryReport>().unwrap();
    assert_eq!(report.attempts, 4);
    assert_eq!(report.stop, llm_retry::StopReason::Succeeded);
    assert_eq!(
        report.recoveries,
        [llm_retry::policy::RecoveryAction::FallbackModel]
    );
    let models: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| {
            let json: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            json["model"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(models[3], "claude-haiku-4-5", "{models:?}");
    assert!(models[..3].iter().all(|m| m != "claude-haiku-4-5"));
    let lines = support::drain(&mut rx);
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("retry ")).count(),
        2,
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("recover ")),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l == "recovered after 4"), "{lines:#?}");
}

#[tokio::test(start_paused = true)]
async fn the_tower_path_books_its_resends_at_their_estimated_token_cost() {
    // 10 tokens a second in bursts of 100; the body asks for 64 output
    // tokens (cost 64 plus a token per four bytes, about 86). Tower sends
    // the first attempt itself (no cost known below), the first resend
    // books its cost from the burst, and the second waits for the tokens
    // it lacks, about 7 s: the resends' cost is read from the body, as
    // under `RetryLayer`.
    let mock = mock(Route::sequence([
        Reply::status(503),
        Reply::status(503),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let quotas = llm_retry::rate_limit::Quotas::none().tokens_per_minute_with_burst(600, 100);
    let svc = ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(
            fast_policy().build().unwrap(),
        ))
        .map_err(BoxError::from)
        .layer(llm_retry::rate_limit::RateLimitLayer::new(quotas).unwrap())
        .service(client::<Full<Bytes>>());
    let start = tokio::time::Instant::now();
    let res = svc.oneshot(prompt_request(&mock)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let waited = start.elapsed();
    assert!(
        waited > std::time::Duration::from_secs(6) && waited < std::time::Duration::from_secs(9),
        "{waited:?}"
    );
}

/// A credential hook whose token service is down.
struct VaultDown;

impl llm_retry::policy::RefreshCredentials for VaultDown {
    fn refresh(
        &self,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<http::HeaderMap, BoxError>> + Send>,
    > {
        Box::pin(async { Err::<http::HeaderMap, BoxError>("vault down".into()) })
    }
}

/// As through `RetryLayer`: the 401 is the answer, with the reason, and a
/// refresh that failed is neither recorded nor announced as a recovery.
#[tokio::test]
async fn under_tower_a_401_whose_refresh_fails_is_the_answer_and_no_recovery() {
    let mock = mock(Route::always(Reply::anthropic_error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )))
    .await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let policy = fast_policy()
        .refresh_credentials(VaultDown)
        .build()
        .unwrap()
        .with_hooks(support::Recorder(tx));
    let res = through_tower(policy, &mock).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(mock.request_count(), 1);
    let report = res.extensions().get::<llm_retry::RetryReport>().unwrap();
    assert!(report.recoveries.is_empty(), "{report:?}");
    assert!(report.stop.is_recovery_failed(), "{report:?}");
    let lines = support::drain(&mut rx);
    assert!(
        lines.iter().all(|l| !l.starts_with("recover ")),
        "{lines:#?}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("give up")).count(),
        1,
        "{lines:#?}"
    );
}
