//! `ClientLayer`, the recommended stack, on loopback: a crowd sharing one
//! layer learns a rate limit once instead of once per request, and a
//! streamed answer that fails before content is retried.
#![allow(clippy::unwrap_used)]

mod support;

use http::StatusCode;
use http_body_util::BodyExt;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{ClientLayer, RetryLayer, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route};
use std::time::Duration;
use support::{client, fast_policy, messages_request, mock};
use tower::{Layer, Service, ServiceExt};

/// 10 requests a second, bursts of 2; Anthropic's 429 with the exact wait
/// for the next token when empty.
async fn limited_upstream() -> MockServer {
    mock(Route::capacity(
        10,
        2,
        Reply::rate_limited(None),
        Route::always(Reply::anthropic_ok("ok")),
    ))
    .await
}

/// Sends `n` requests at once through clones of `service`; returns how many
/// succeeded and the upstream's send count.
async fn crowd<S, B>(service: S, mock: &MockServer, n: usize) -> (usize, usize)
where
    S: Service<http::Request<http_body_util::Full<bytes::Bytes>>, Response = http::Response<B>>
        + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let url = mock.url("/v1/messages");
    let calls = (0..n).map(|_| {
        let service = service.clone();
        let request = messages_request(&url);
        async move {
            let response = service.oneshot(request).await.unwrap();
            let ok = response.status() == StatusCode::OK;
            response.into_body().collect().await.unwrap();
            ok
        }
    });
    let ok = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count();
    (ok, mock.request_count())
}

#[tokio::test(start_paused = true)]
async fn a_crowd_sharing_one_client_layer_learns_the_limit_once() {
    const CROWD: usize = 40;
    let policy = || fast_policy().max_retries(30).build().unwrap();
    let mock = limited_upstream().await;
    let (ok, sends) = crowd(ClientLayer::new(policy()).layer(client()), &mock, CROWD).await;
    assert_eq!(ok, CROWD, "every request is served");
    // The first burst goes unpaced — nothing is known about the key yet —
    // and all but the bucket's 2 get a 429. From there the shared gate
    // paces the key: the 38 requests left need few more than 38 sends.
    let after_first_burst = sends - CROWD;
    assert!(
        after_first_burst * 4 <= (CROWD - 2) * 5,
        "{after_first_burst} sends for {} requests after the first burst",
        CROWD - 2
    );
    // Paced at the learned rate, the rest arrive spread out, not in herds.
    let times: Vec<_> = mock.requests().iter().map(|r| r.received_at).collect();
    let spread = *times.last().unwrap() - times[0];
    assert!(
        spread >= Duration::from_millis(3_500),
        "38 more successes at 10/s take about 3.8 s: {spread:?}"
    );

    // The negative control: the same crowd through RetryLayer alone, each
    // request honouring its own 429's wait, comes back as a herd and spends
    // the retry budget.
    let alone_mock = limited_upstream().await;
    let alone = RetryLayer::new(policy()).layer(client());
    let (alone_ok, alone_sends) = crowd(alone, &alone_mock, CROWD).await;
    assert!(alone_ok < CROWD, "{alone_ok}");
    assert!(alone_sends > sends, "{alone_sends} vs {sends}");
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_before_content_is_retried_by_the_stack() {
    let good = Reply::anthropic_stream(&["Hello", "!"]);
    let expected = good.expected_body().unwrap();
    let mock = mock(Route::sequence([
        Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        good,
    ]))
    .await;
    let service = ClientLayer::new(fast_policy().build().unwrap()).layer(client());
    let response = service
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let report = response.extensions().get::<RetryReport>().unwrap().clone();
    let commit = response
        .extensions()
        .get::<llm_retry::stream_guard::StreamCommit>()
        .cloned()
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, expected);
    assert_eq!(report.attempts, 2);
    assert!(commit.is_committed());
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_known_quota_replaces_the_learning_gate() {
    // Told 10 a second with bursts of 2, the gate never lets the crowd see a 429.
    let mock = limited_upstream().await;
    let gate = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(600, 2)).unwrap();
    let layer = ClientLayer::new(fast_policy().build().unwrap()).rate_limit(gate);
    let (ok, sends) = crowd(layer.layer(client()), &mock, 20).await;
    assert_eq!((ok, sends), (20, 20));
}

#[test]
fn the_default_stack_carries_a_shared_budget() {
    let layer = ClientLayer::default();
    let budget = layer.policy().budget().expect("a budget by default");
    let clone = layer.clone();
    budget.deposit();
    assert_eq!(
        clone.policy().budget().unwrap().level(),
        budget.level(),
        "clones share it"
    );
    assert!(RetryPolicy::builder()
        .no_budget()
        .build()
        .unwrap()
        .budget()
        .is_none());
}

#[tokio::test(start_paused = true)]
async fn under_the_gate_a_429s_retry_spends_no_budget_and_a_5xx_retry_does() {
    // A budget that grants nothing: only retries it does not charge happen.
    let policy = || unfunded(fast_policy().max_retries(30));
    let mock = limited_upstream().await;
    let (ok, _) = crowd(ClientLayer::new(policy()).layer(client()), &mock, 20).await;
    assert_eq!(ok, 20, "every 429 was retried, paced by the gate");
    // Without the gate the same budget ends the throttled requests at once.
    let alone_mock = limited_upstream().await;
    let (alone_ok, alone_sends) =
        crowd(RetryLayer::new(policy()).layer(client()), &alone_mock, 20).await;
    assert_eq!((alone_ok, alone_sends), (2, 20));
    // A 503 is charged as ever: the gate does not pace it.
    let mock = mock_503_then_ok().await;
    let response = ClientLayer::new(policy())
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let report = response.extensions().get::<RetryReport>().unwrap();
    assert!(
        matches!(report.stop, llm_retry::StopReason::BudgetExhausted { .. }),
        "{:?}",
        report.stop
    );
}

#[tokio::test(start_paused = true)]
async fn a_stack_built_by_hand_behaves_as_client_layer() {
    // The documented order, layer by layer: retries, the learning gate, the
    // stream guard. No flag ties them: the gate hears the retry policy's
    // decision through the request, so the hand-built stack paces 429
    // retries without charging the budget exactly as ClientLayer does.
    let policy = || unfunded(fast_policy().max_retries(30));
    let by_hand = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(policy()))
        .layer(RateLimitLayer::learned())
        .layer(llm_retry::stream_guard::StreamGuardLayer::new())
        .service(client());
    let mock = limited_upstream().await;
    let (ok, _) = crowd(by_hand, &mock, 20).await;
    assert_eq!(ok, 20, "every 429 was retried, paced by the gate");
    let mock = limited_upstream().await;
    let (ok, _) = crowd(ClientLayer::new(policy()).layer(client()), &mock, 20).await;
    assert_eq!(ok, 20);
    // Send for send, the two make the same decisions: proven without a
    // network in retry/equivalence_property_tests.rs, where arrival order is fixed.
}

/// `builder` with a shared budget that grants no retry at all: only the
/// retries it does not charge happen.
fn unfunded(builder: llm_retry::RetryPolicyBuilder) -> RetryPolicy {
    let empty = llm_retry::budget::RetryBudget::new(0.0, 0, Duration::from_secs(10)).unwrap();
    builder.budget(empty).build().unwrap()
}

async fn mock_503_then_ok() -> MockServer {
    mock(Route::sequence([
        Reply::anthropic_error(503, "api_error", "Service unavailable"),
        Reply::anthropic_ok("ok"),
    ]))
    .await
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_the_gate_paces_goes_uncharged_whatever_carried_it() {
    let policy = || unfunded(fast_policy());
    let stopped_for_budget =
        |report: &RetryReport| matches!(report.stop, llm_retry::StopReason::BudgetExhausted { .. });
    // A rate limit inside a stream is judged like a 429: the gate paces
    // its retry, so the empty budget is not asked.
    let mock = mock(Route::sequence([
        Reply::anthropic_stream_error("rate_limit_error", "Rate limited"),
        Reply::anthropic_stream(&["ok"]),
    ]))
    .await;
    let response = ClientLayer::new(policy())
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    let report = response.extensions().get::<RetryReport>().unwrap();
    assert_eq!(report.stop, llm_retry::StopReason::Succeeded, "{report:?}");
    assert_eq!(mock.request_count(), 2);
    // A gate that only holds (no quota, no learned rate) paces nothing: charged too.
    let mock = mock_429_then_ok().await;
    let holds_only =
        ClientLayer::new(policy()).rate_limit(RateLimitLayer::new(Quotas::none()).unwrap());
    let response = holds_only
        .layer(client())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(stopped_for_budget(
        response.extensions().get::<RetryReport>().unwrap()
    ));
}

async fn mock_429_then_ok() -> MockServer {
    mock(Route::sequence([
        Reply::rate_limited(Some(1)),
        Reply::anthropic_ok("ok"),
    ]))
    .await
}
