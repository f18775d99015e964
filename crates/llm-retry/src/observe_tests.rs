//! The `metrics` feature: what a retried request records.
#![allow(clippy::unwrap_used)]

use crate::retry::tests_support::{reply, request, Upstream};
use crate::{RetryLayer, RetryPolicy};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tower::{Layer, ServiceExt};

/// Runs `replies` through a RetryLayer and returns every metric recorded,
/// as `(name, labels, value)`.
fn record(
    replies: Vec<Result<http::Response<http_body_util::Full<bytes::Bytes>>, crate::BoxError>>,
) -> Vec<(String, Vec<String>, DebugValue)> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let budget = crate::budget::RetryBudget::default();
            let policy = RetryPolicy::builder().budget(budget).build().unwrap();
            let _ = RetryLayer::new(policy)
                .layer(Upstream::new(replies))
                .oneshot(request())
                .await;
        });
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

#[test]
fn retries_and_give_ups_are_counted_by_fixed_labels() {
    let metrics = record(vec![
        reply(503, &[], ""),
        reply(429, &[], ""),
        reply(400, &[], ""),
    ]);
    let find = |name: &str, label: &str| {
        metrics
            .iter()
            .find(|(n, l, _)| n == name && l.iter().any(|x| x == label))
            .map(|(_, _, v)| v)
    };
    assert_eq!(
        find("llm_retry_retries_total", "class=status"),
        Some(&DebugValue::Counter(1))
    );
    assert_eq!(
        find("llm_retry_retries_total", "class=rate_limited"),
        Some(&DebugValue::Counter(1))
    );
    assert_eq!(
        find("llm_retry_give_ups_total", "reason=not_retryable"),
        Some(&DebugValue::Counter(1))
    );
    let budget = metrics
        .iter()
        .find(|(n, _, _)| n == "llm_retry_budget_available");
    assert!(
        matches!(budget, Some((_, _, DebugValue::Gauge(_)))),
        "{metrics:?}"
    );
    let labels: String = metrics.iter().flat_map(|(_, l, _)| l.clone()).collect();
    assert!(
        !labels.contains("sk-secret") && !labels.contains("upstream.test"),
        "{labels}"
    );
}
