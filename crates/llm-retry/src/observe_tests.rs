//! The `metrics` feature: what a retried request records.
#![allow(clippy::unwrap_used)]

use crate::retry::service_tests::{reply, request, Upstream};
use crate::{RetryLayer, RetryPolicy};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tower::{Layer, ServiceExt};

/// Every metric recorded while `run` runs on a paused current-thread
/// runtime, as `(name, labels, value)`.
pub(crate) fn recorded(
    run: impl std::future::Future<Output = ()>,
) -> Vec<(String, Vec<String>, DebugValue)> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(run);
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

/// Runs `replies` through a RetryLayer and returns every metric recorded.
fn record(
    replies: Vec<Result<http::Response<http_body_util::Full<bytes::Bytes>>, crate::BoxError>>,
) -> Vec<(String, Vec<String>, DebugValue)> {
    recorded(async {
        let budget = crate::budget::RetryBudget::default();
        let policy = RetryPolicy::builder().budget(budget).build().unwrap();
        let _ = RetryLayer::new(policy)
            .layer(Upstream::new(replies))
            .oneshot(request())
            .await;
    })
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

#[test]
fn two_named_budgets_keep_a_gauge_each() {
    let metrics = recorded(async {
        for (name, retries) in [("claude/primary", 1), ("claude/backup", 3)] {
            let budget =
                crate::budget::RetryBudget::new(0.0, 10, std::time::Duration::from_secs(10))
                    .unwrap()
                    .named(name);
            let policy = RetryPolicy::builder().budget(budget).build().unwrap();
            let mut replies: Vec<_> = (0..retries).map(|_| reply(503, &[], "")).collect();
            replies.push(reply(200, &[], ""));
            let _ = RetryLayer::new(policy)
                .layer(Upstream::new(replies))
                .oneshot(request())
                .await;
        }
    });
    let gauge = |label: &str| {
        metrics
            .iter()
            .find(|(n, l, _)| n == "llm_retry_budget_available" && l == &[label.to_owned()])
            .map(|(_, _, v)| v)
    };
    // 10 retries a second over 10 s: 100, less those withdrawn.
    let level = |n: f64| Some(DebugValue::Gauge(n.into()));
    assert_eq!(
        gauge("budget=claude/primary"),
        level(99.0).as_ref(),
        "{metrics:?}"
    );
    assert_eq!(
        gauge("budget=claude/backup"),
        level(97.0).as_ref(),
        "{metrics:?}"
    );
}

#[test]
fn a_failover_counts_attempts_by_round_waits_and_its_end() {
    use crate::failover::{ExhaustionRetry, Failover, Target};
    use bytes::Bytes;
    use http_body_util::Full;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    let metrics = recorded(async {
        // A 429 naming 1 s, then a success.
        let calls = Arc::new(AtomicU32::new(0));
        let target = tower::service_fn(move |_: http::Request<Full<Bytes>>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let status = if n == 0 { 429 } else { 200 };
                let response = http::Response::builder()
                    .status(status)
                    .header("retry-after", "1")
                    .body(Full::<Bytes>::default())?;
                Ok::<_, crate::BoxError>(response)
            }
        });
        let failover = Failover::builder(vec![Target::new(
            "a",
            tower::util::BoxCloneSyncService::new(target),
        )])
        .exhaustion_retry(ExhaustionRetry::new(1, Duration::from_secs(2)))
        .build()
        .unwrap();
        let response = failover
            .oneshot(http::Request::new(Full::<Bytes>::default()))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    });
    let has = |name: &str, label: Option<&str>| {
        metrics
            .iter()
            .any(|(n, l, _)| n == name && label.is_none_or(|label| l.iter().any(|x| x == label)))
    };
    assert!(
        has("llm_retry_failover_attempts_total", Some("round=1")),
        "{metrics:?}"
    );
    assert!(
        has("llm_retry_failover_attempts_total", Some("round=2")),
        "{metrics:?}"
    );
    assert!(
        has("llm_retry_failover_rounds_admitted_total", None),
        "{metrics:?}"
    );
    assert!(
        has("llm_retry_failover_round_wait_seconds", None),
        "{metrics:?}"
    );
    assert!(
        has("llm_retry_failover_round_successes_total", None),
        "{metrics:?}"
    );
}
