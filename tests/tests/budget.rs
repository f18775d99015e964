//! A shared retry budget on loopback: bursts cannot buy more resends than
//! the budget allows, and waiting retries are admitted up to its limit.
#![allow(clippy::unwrap_used)]

mod support;

use llm_retry::budget::RetryBudget;
use llm_retry::{RetryLayer, RetryReport, StopReason};
use llm_retry_mock::{Reply, Route};
use std::time::Duration;
use support::{client, fast_policy, messages_request, mock};
use tower::{Layer, ServiceExt};

#[tokio::test]
async fn a_burst_against_a_failing_upstream_spends_only_the_budget() {
    let mock = mock(Route::always(Reply::status(503))).await;
    // 20% of requests, no per-second floor: 20 requests buy 4 resends.
    let budget = RetryBudget::new(0.2, 0, Duration::from_secs(10)).unwrap();
    let policy = fast_policy().budget(budget.clone()).build().unwrap();
    let svc = RetryLayer::new(policy).layer(client());
    let url = mock.url("/v1/messages");
    let calls = (0..20).map(|_| svc.clone().oneshot(messages_request(&url)));
    let results = futures_util::future::join_all(calls).await;
    let reports: Vec<RetryReport> = results
        .into_iter()
        .map(|r| {
            r.unwrap()
                .extensions()
                .get::<RetryReport>()
                .cloned()
                .unwrap()
        })
        .collect();
    let exhausted = reports
        .iter()
        .filter(|r| matches!(r.stop, StopReason::BudgetExhausted { .. }))
        .count();
    assert_eq!(
        exhausted, 20,
        "every request ends on the budget: {reports:?}"
    );
    assert_eq!(
        mock.request_count(),
        24,
        "20 first sends + 4 budgeted resends"
    );
    let message = reports
        .iter()
        .find(|r| r.attempts == 1)
        .unwrap()
        .to_string();
    assert!(message.contains("retry budget exhausted"), "{message}");
    assert_eq!(budget.level().withdrawn, 4);
}

#[tokio::test]
async fn waiting_retries_beyond_the_admission_limit_are_suppressed() {
    let mock = mock(Route::always(Reply::rate_limited(Some(30)))).await;
    let budget = RetryBudget::new(1.0, 10, Duration::from_secs(10))
        .unwrap()
        .with_max_waiting(1);
    let policy = fast_policy().budget(budget.clone()).build().unwrap();
    let svc = RetryLayer::new(policy).layer(client());
    let url = mock.url("/v1/messages");
    let mut tasks: Vec<_> = (0..5)
        .map(|_| tokio::spawn(svc.clone().oneshot(messages_request(&url))))
        .collect();
    // Four calls end at once, suppressed; one holds the only waiting place.
    let mut suppressed = 0;
    while suppressed < 4 {
        let done = tasks.iter().position(|t| t.is_finished());
        let Some(i) = done else {
            tokio::task::yield_now().await;
            continue;
        };
        let res = tasks.swap_remove(i).await.unwrap().unwrap();
        let report = res.extensions().get::<RetryReport>().unwrap();
        assert_eq!(report.stop, StopReason::AdmissionFull { max_waiting: 1 });
        assert!(report.to_string().contains("1 retries are already waiting"));
        suppressed += 1;
    }
    assert_eq!(tasks.len(), 1);
    assert_eq!(budget.waiting(), 1);
    tasks[0].abort();
    assert!(tasks.pop().unwrap().await.unwrap_err().is_cancelled());
    assert_eq!(
        budget.waiting(),
        0,
        "dropping the waiting call frees its place"
    );
    assert_eq!(mock.request_count(), 5);
}

#[tokio::test]
async fn a_resend_that_cannot_happen_spends_no_budget() {
    let mock = mock(Route::always(Reply::status(503))).await;
    let budget = RetryBudget::new(1.0, 10, Duration::from_secs(10)).unwrap();
    let policy = fast_policy()
        .max_replay_body(16)
        .budget(budget.clone())
        .build()
        .unwrap();
    let svc = RetryLayer::new(policy).layer(client());
    // A streamed body larger than the 16-byte replay buffer: sent once, not replayable.
    let chunks: Vec<Result<http_body::Frame<bytes::Bytes>, llm_retry::BoxError>> = (0..4)
        .map(|_| {
            Ok(http_body::Frame::data(bytes::Bytes::from_static(
                b"0123456789",
            )))
        })
        .collect();
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
    let req = http::Request::post(mock.url("/v1/messages"))
        .body(body)
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    let report = res.extensions().get::<RetryReport>().unwrap();
    assert_eq!(report.stop, StopReason::BodyNotReplayable { cap: 16 });
    assert_eq!(budget.level().withdrawn, 0);
}
