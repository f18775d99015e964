//! A target's retry stack inside the failover's deadline: it waits and
//! resends only within what the route has left.
#![allow(clippy::unwrap_used)]

use super::service_tests::{rate_limited, report, request, retrying_target, upstream, RetrySvc};
use super::*;
use llm_retry_mock::{MockServer, Reply, Route};
use std::time::Duration;
use tokio::time::Instant;
use tower::ServiceExt;

/// Two retrying targets, `a` before `b`, each allowed two retries, under a
/// 10 s route deadline.
fn a_then_b(a: &MockServer, b: &MockServer) -> Failover<RetrySvc> {
    Failover::builder(vec![retrying_target("a", a, 2), retrying_target("b", b, 2)])
        .deadline(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_longer_than_the_route_has_left_moves_on_at_once() {
    let a = upstream(Route::always(rate_limited("30"))).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = a_then_b(&a, &b);
    let started = Instant::now();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200, "b serves");
    assert_eq!(started.elapsed(), Duration::ZERO, "a's 30 s was not waited");
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    assert_eq!(report(&response).upstream_sends, 2);
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_that_fits_what_is_left_is_waited_out() {
    let a = upstream(Route::sequence([
        rate_limited("2"),
        Reply::anthropic_ok("a"),
    ]))
    .await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = a_then_b(&a, &b);
    let started = Instant::now();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the wait was honoured"
    );
    assert_eq!((a.request_count(), b.request_count()), (2, 0));
}

#[tokio::test(start_paused = true)]
async fn what_is_left_counts_from_the_route_start_not_the_target_attempt() {
    // a stalls for its 6 s first-content timeout; b's 5 s wait then no
    // longer fits in the 10 s deadline, so b's 429 is handed over at 6 s
    // instead of the request running into the deadline.
    let a = upstream(Route::always(
        Reply::anthropic_ok("late").delay(Duration::from_secs(60)),
    ))
    .await;
    let b = upstream(Route::always(rate_limited("5"))).await;
    let failover = Failover::builder(vec![
        retrying_target("a", &a, 0).first_content_timeout(Duration::from_secs(6)),
        retrying_target("b", &b, 2),
    ])
    .deadline(Duration::from_secs(10))
    .build()
    .unwrap();
    let started = Instant::now();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 429, "b's answer, handed over");
    assert_eq!(started.elapsed(), Duration::from_secs(6));
    assert_eq!(b.request_count(), 1, "b did not resend");
    assert_eq!(
        response.headers()["x-should-retry"],
        "false",
        "marked final"
    );
}

#[tokio::test(start_paused = true)]
async fn a_target_cut_at_the_route_deadline_ends_the_request_as_a_deadline() {
    let slow = upstream(Route::always(
        Reply::anthropic_ok("late").delay(Duration::from_secs(60)),
    ))
    .await;
    let failover = Failover::builder(vec![retrying_target("slow", &slow, 2)])
        .deadline(Duration::from_secs(2))
        .build()
        .unwrap();
    let started = Instant::now();
    let error = failover.oneshot(request()).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(
        error.downcast_ref::<FailoverError>().unwrap().stop(),
        FailoverStop::Deadline
    );
}
