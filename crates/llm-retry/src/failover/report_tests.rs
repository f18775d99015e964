//! What a failover's report answers: which target's answer was handed
//! over, and which targets a mark set aside.
#![allow(clippy::unwrap_used)]

use super::service_tests::{
    dead_address, rate_limited, report, request, target, target_at, upstream, Svc,
};
use super::*;
use llm_retry_mock::{Reply, Route};
use std::time::Duration;
use tower::ServiceExt;

#[tokio::test(start_paused = true)]
async fn the_report_names_the_target_whose_answer_was_handed_over() {
    let a = upstream(Route::always(rate_limited("3"))).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;

    let served = Failover::builder(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let served = report(&served.oneshot(request()).await.unwrap());
    assert_eq!(served.answered_by().map(|t| &**t), Some("b"));

    // The last target tried refused the connection: the answer handed
    // over is the first one's rejection, and the report says so.
    let exhausted = Failover::builder(vec![target("a", &a), target_at("dead", dead_address())])
        .build()
        .unwrap();
    let response = exhausted.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 429);
    let exhausted = report(&response);
    assert_eq!(exhausted.stop, FailoverStop::Exhausted);
    assert_eq!(exhausted.target_attempts(), 2);
    assert_eq!(exhausted.answered_by().map(|t| &**t), Some("a"));

    let unanswered = Failover::builder(vec![target_at("dead", dead_address())])
        .build()
        .unwrap();
    let error = unanswered.oneshot(request()).await.unwrap_err();
    let error = error.downcast_ref::<FailoverError>().unwrap();
    assert_eq!(error.stop(), FailoverStop::Exhausted);
    assert_eq!(error.report().answered_by(), None);
}

/// What the failover over `a` (marked by its first failure) and `b` set
/// aside in a second request, after a first that tried `a`.
async fn set_aside_the_second_time(a: Target<Svc>, b: Target<Svc>) -> FailoverReport {
    let failover = Failover::builder(vec![a, b]).build().unwrap();
    let first = report(&failover.clone().oneshot(request()).await.unwrap());
    assert_eq!(first.set_aside().count(), 0, "a was tried: {first:?}");
    report(&failover.oneshot(request()).await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn the_report_names_the_targets_a_mark_set_aside_with_the_mark() {
    let a = upstream(Route::always(rate_limited("5"))).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let later = set_aside_the_second_time(target("a", &a).cooldown(), target("b", &b)).await;
    assert_eq!(
        later.set_aside().collect::<Vec<_>>(),
        [("a", MarkKind::Cooldown)]
    );
    assert_eq!(later.answered_by().map(|t| &**t), Some("b"));

    let a = upstream(Route::always(Reply::overloaded())).await;
    let unhealthy = target("a", &a).unhealthy_after(1, Duration::from_secs(10));
    let later = set_aside_the_second_time(unhealthy, target("b", &b)).await;
    assert_eq!(
        later.set_aside().collect::<Vec<_>>(),
        [("a", MarkKind::Unhealthy)]
    );
    assert_eq!(a.request_count(), 1);
}
