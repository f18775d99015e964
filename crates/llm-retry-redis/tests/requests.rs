//! Requests through the real retry layer, to a real upstream on loopback,
//! with their budget shared through a real Redis that dies: they still
//! retry and succeed, and no error reaches them.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::backoff::Jitter;
use llm_retry::budget::RetryBudget;
use llm_retry::{RetryLayer, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use llm_retry_redis::{RedisBudgetStore, SharedOptions, StateName};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;
use tower::{Layer, ServiceExt};

const REQUESTS: usize = 5;

#[tokio::test]
async fn requests_keep_retrying_through_a_redis_outage() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let budget = RetryBudget::new(0.2, 10, Duration::from_secs(10)).unwrap();
    let options = SharedOptions::default()
        .with_timeout(Duration::from_millis(500))
        .with_sync_interval(Duration::from_secs(3600));
    let store = RedisBudgetStore::start(
        redis.client(),
        StateName::new("upstream").unwrap(),
        budget.rule(),
        options,
    )
    .unwrap();
    assert!(store.sync().await);
    let budget = budget.with_store(Arc::new(store.clone()));

    // Each request meets a 503, then a 200.
    let replies = (0..REQUESTS).flat_map(|_| [Reply::status(503), Reply::anthropic_ok("Hi")]);
    let upstream = MockServer::start(Script::new().route("/v1/messages", Route::sequence(replies)))
        .await
        .unwrap();
    let policy = RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(5))
        .jitter(Jitter::None)
        .budget(budget.clone())
        .build()
        .unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http();
    let service = RetryLayer::new(policy).layer(client);

    redis.kill();
    for n in 0..REQUESTS {
        let request = http::Request::post(upstream.url("/v1/messages"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(br#"{"model":"claude"}"#)))
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "request {n}");
        let report = response.extensions().get::<RetryReport>().unwrap();
        assert_eq!(report.attempts, 2, "request {n}");
        if n == 0 {
            // The first retry spent the reserve; the next sync fails.
            assert!(!store.sync().await);
        }
    }
    assert!(store.is_degraded());
    assert_eq!(upstream.request_count(), 2 * REQUESTS);
    assert_eq!(budget.level().withdrawn, REQUESTS as u64);
}
