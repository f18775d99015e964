//! The failover on loopback, against mock upstreams, on tokio's paused clock.
#![allow(clippy::unwrap_used)]

use super::report::Suppression;
use super::*;
use crate::error::BoxError;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::time::Duration;
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

pub(super) type Svc = BoxCloneSyncService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

const PATH: &str = "/v1/messages";
const PROMPT: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[]}"#;

pub(super) async fn upstream(route: Route) -> MockServer {
    MockServer::start(Script::new().route(PATH, route))
        .await
        .unwrap()
}

/// A plain client (one send per attempt) aimed at `base`.
pub(super) fn target_at(name: &str, base: String) -> Target<Svc> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let service = BoxCloneSyncService::new(client.map_err(BoxError::from));
    Target::new(name, service).rewrite(move |parts, _| {
        parts.uri = format!("{base}{}", parts.uri.path()).parse()?;
        Ok(())
    })
}

/// The base URL of a port nothing listens on: every connect is refused.
pub(super) fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    dead
}

pub(super) fn target(name: &str, mock: &MockServer) -> Target<Svc> {
    target_at(name, mock.url(""))
}

pub(super) fn request() -> Request<Full<Bytes>> {
    Request::post(format!("http://failover.invalid{PATH}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(PROMPT.as_bytes())))
        .unwrap()
}

pub(super) fn report<B>(response: &Response<B>) -> FailoverReport {
    response
        .extensions()
        .get::<FailoverReport>()
        .cloned()
        .unwrap()
}

fn outcomes(report: &FailoverReport) -> Vec<(&str, u32, String)> {
    report
        .attempts
        .iter()
        .map(|a| {
            let outcome = match &a.outcome {
                AttemptOutcome::Answered(status) => format!("answered {}", status.as_u16()),
                AttemptOutcome::Rejected(r) => format!("rejected {}", r.kind.label()),
                AttemptOutcome::MovedOn(status) => format!("moved on {}", status.as_u16()),
                AttemptOutcome::Skipped(reason) => format!("skipped {}", reason.label()),
                AttemptOutcome::FirstContentTimeout => "first content timeout".to_owned(),
                AttemptOutcome::Failed => "failed".to_owned(),
            };
            (&*a.target, a.round, outcome)
        })
        .collect()
}

/// A failover over `targets` allowing one further round after waits of up
/// to 2 s.
fn with_round<S>(targets: Vec<Target<S>>) -> FailoverBuilder<S> {
    Failover::builder(targets).exhaustion_retry(rounds(2))
}

fn rounds(max_wait_secs: u64) -> ExhaustionRetry {
    ExhaustionRetry::new(1, Duration::from_secs(max_wait_secs))
}

pub(super) fn rate_limited(secs: &str) -> Reply {
    Reply::anthropic_error(429, "rate_limit_error", "Rate limited").header("retry-after", secs)
}

#[tokio::test(start_paused = true)]
async fn the_first_target_serves_when_it_can() {
    let (a, b) = (
        upstream(Route::always(Reply::anthropic_ok("a"))).await,
        upstream(Route::always(Reply::anthropic_ok("b"))).await,
    );
    let failover = Failover::builder(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    let report = report(&response);
    assert_eq!(outcomes(&report), [("a", 1, "answered 200".to_owned())]);
    assert_eq!(
        (report.upstream_sends, report.stop),
        (1, FailoverStop::Answered)
    );
    assert_eq!((a.request_count(), b.request_count()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_rejection_or_an_overload_before_content_moves_the_request_on_and_nothing_else_does() {
    let cases: [(Reply, bool); 12] = [
        (rate_limited("1"), true),
        (Reply::overloaded(), true),
        (
            Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
            false,
        ),
        (Reply::status(503), true),
        (Reply::status(502).body("<html>Bad Gateway</html>"), true),
        (Reply::status(504), true),
        (
            Reply::openai_error(500, "server_error", None, "The server had an error"),
            true,
        ),
        (
            Reply::anthropic_error(500, "overloaded_error", "Overloaded"),
            true,
        ),
        (Reply::status(500), false),
        (Reply::anthropic_error(500, "api_error", "Internal"), false),
        (
            Reply::anthropic_error(401, "authentication_error", "bad key"),
            false,
        ),
        (Reply::reset_before_headers(), false),
    ];
    for (first, moves) in cases {
        let label = format!("{first:?}");
        let a = upstream(Route::always(first)).await;
        let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
        let failover = Failover::builder(vec![target("a", &a), target("b", &b)])
            .build()
            .unwrap();
        let result = failover.oneshot(request()).await;
        assert_eq!(a.request_count(), 1, "{label}");
        assert_eq!(b.request_count(), usize::from(moves), "{label}: moved on?");
        if moves {
            assert_eq!(result.unwrap().status(), 200, "{label}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_whose_first_event_is_an_overload_moves_on_under_the_stream_guard() {
    let a = upstream(Route::always(Reply::anthropic_stream_error(
        "overloaded_error",
        "Overloaded",
    )))
    .await;
    let b = upstream(Route::always(Reply::anthropic_stream(&["b"]))).await;
    let guarded = |mock: &MockServer| {
        let base = mock.url("");
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let service = tower::ServiceBuilder::new()
            .layer(crate::stream_guard::StreamGuardLayer::new())
            .service(client)
            .map_response(|r: Response<_>| r.map(|b| b.boxed()))
            .map_err(BoxError::from);
        Target::new(mock.url(""), BoxCloneSyncService::new(service)).rewrite(move |parts, _| {
            parts.uri = format!("{base}{}", parts.uri.path()).parse()?;
            Ok(())
        })
    };
    let failover = Failover::builder(vec![guarded(&a), guarded(&b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    let report = response
        .extensions()
        .get::<FailoverReport>()
        .cloned()
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body,
        Reply::anthropic_stream(&["b"]).expected_body().unwrap()
    );
    assert_eq!(report.upstream_sends, 2);
    assert!(
        matches!(report.attempts[0].outcome, AttemptOutcome::Rejected(r) if r.kind == crate::policy::RejectionKind::Overloaded)
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_moves_on() {
    let dead = dead_address();
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![target_at("dead", dead), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    let report = report(&response);
    assert_eq!(
        outcomes(&report)[0],
        ("dead", 1, "rejected not_connected".to_owned())
    );
    assert_eq!(
        report.upstream_sends, 1,
        "a refused connection sent nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn one_pass_without_exhaustion_retry_hands_over_the_last_rejection_marked_final() {
    let a = upstream(Route::always(rate_limited("7"))).await;
    let b = upstream(Route::always(rate_limited("3"))).await;
    let failover = Failover::builder(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["x-should-retry"], "false");
    assert_eq!(
        response.headers()["retry-after"],
        "3",
        "the soonest target's wait"
    );
    assert_eq!(response.headers()["retry-after-ms"], "3000");
    let report = report(&response);
    assert_eq!(
        (report.rounds, report.suppressed),
        (1, Some(Suppression::Disabled))
    );
    assert_eq!(report.stop, FailoverStop::Exhausted);
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_further_round_starts_at_the_first_target_after_the_named_wait() {
    let a = upstream(Route::sequence([
        rate_limited("1"),
        Reply::anthropic_ok("a"),
    ]))
    .await;
    let b = upstream(Route::always(rate_limited("1"))).await;
    let failover = with_round(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let started = Instant::now();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    let report = report(&response);
    assert_eq!(
        outcomes(&report),
        [
            ("a", 1, "rejected rate_limited".to_owned()),
            ("b", 1, "rejected rate_limited".to_owned()),
            ("a", 2, "answered 200".to_owned()),
        ]
    );
    assert_eq!((report.rounds, report.upstream_sends), (2, 3));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited <= Duration::from_millis(1250),
        "{waited:?}"
    );
    let sent = a.requests();
    assert!(sent[1].received_at - sent[0].received_at >= Duration::from_secs(1));
    assert!(
        sent.iter().all(|r| r.body == PROMPT.as_bytes()),
        "fresh copies of the original"
    );
}

#[tokio::test(start_paused = true)]
async fn both_rounds_exhausted_hand_over_the_final_429_with_the_wait_left() {
    let a = upstream(Route::always(rate_limited("2"))).await;
    let b = upstream(Route::always(rate_limited("1"))).await;
    let failover = with_round(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let report = report(&response);
    // Round 2 began after b's 1 s; a was still inside its 2 s and skipped.
    assert_eq!(
        outcomes(&report),
        [
            ("a", 1, "rejected rate_limited".to_owned()),
            ("b", 1, "rejected rate_limited".to_owned()),
            ("a", 2, "skipped cooling_down".to_owned()),
            ("b", 2, "rejected rate_limited".to_owned()),
        ]
    );
    assert_eq!(
        (report.rounds, report.suppressed),
        (2, Some(Suppression::RoundsSpent))
    );
    assert_eq!((a.request_count(), b.request_count()), (1, 2));
    // a's 2 s named at 0 end about 1 s from now, b's new 1 s in 1 s.
    let left: u64 = response.headers()["retry-after-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((700..=1000).contains(&left), "{left} ms left");
}

#[tokio::test(start_paused = true)]
async fn a_missing_or_malformed_wait_is_half_a_second_and_an_excessive_one_ends_the_request() {
    for (value, expect_round) in [
        (None, true),
        (Some("soon"), true),
        (Some("-3"), true),
        (Some("3600"), false),
    ] {
        let reply = match value {
            Some(v) => Reply::anthropic_error(429, "rate_limit_error", "Rate limited")
                .header("retry-after", v),
            None => Reply::anthropic_error(429, "rate_limit_error", "Rate limited"),
        };
        let a = upstream(Route::sequence([reply, Reply::anthropic_ok("a")])).await;
        let failover = with_round(vec![target("a", &a)]).build().unwrap();
        let started = Instant::now();
        let response = failover.oneshot(request()).await.unwrap();
        let report = report(&response);
        if expect_round {
            assert_eq!(response.status(), 200, "{value:?}");
            let waited = started.elapsed();
            assert!(
                waited >= Duration::from_millis(500) && waited < Duration::from_secs(1),
                "{value:?}: {waited:?}"
            );
        } else {
            assert_eq!(response.status(), 429, "{value:?}");
            assert_eq!(
                report.suppressed,
                Some(Suppression::WaitTooLong {
                    asked: Duration::from_secs(3600),
                    limit: Duration::from_secs(2)
                })
            );
            assert_eq!(started.elapsed(), Duration::ZERO, "no wait at all");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn concurrent_waiters_do_not_wake_together_and_admission_is_bounded() {
    let a = upstream(Route::sequence_then(
        (0..10).map(|_| rate_limited("1")),
        Reply::anthropic_ok("a"),
    ))
    .await;
    let failover = with_round(vec![target("a", &a)])
        .max_waiting_rounds(6)
        .policy(crate::RetryPolicy::builder().seed(7).build().unwrap())
        .build()
        .unwrap();
    let calls = (0..10).map(|_| failover.clone().oneshot(request()));
    let results = futures_util::future::join_all(calls).await;
    let statuses: Vec<u16> = results
        .iter()
        .map(|r| r.as_ref().unwrap().status().as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        6,
        "{statuses:?}"
    );
    let suppressed: Vec<_> = results
        .iter()
        .filter_map(|r| report(r.as_ref().unwrap()).suppressed)
        .collect();
    assert_eq!(suppressed, vec![Suppression::AdmissionFull; 4]);
    let second: Vec<_> = a.requests()[10..].iter().map(|r| r.received_at).collect();
    assert_eq!(second.len(), 6);
    let (first, last) = (second.iter().min().unwrap(), second.iter().max().unwrap());
    assert!(
        *last - *first >= Duration::from_millis(50),
        "jitter spreads the waiters' wake-ups over the 200 ms past the named wait: {:?}",
        *last - *first
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_request_gives_its_place_back_and_sends_nothing_more() {
    let a = upstream(Route::always(rate_limited("1"))).await;
    let failover = with_round(vec![target("a", &a)])
        .max_waiting_rounds(1)
        .build()
        .unwrap();
    let waiting = tokio::time::timeout(
        Duration::from_millis(500),
        failover.clone().oneshot(request()),
    )
    .await;
    assert!(waiting.is_err(), "cancelled during the wait");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(a.request_count(), 1);
    // The place is free again: the next request may wait.
    let _ = tokio::time::timeout(
        Duration::from_millis(100),
        failover.clone().oneshot(request()),
    )
    .await;
    assert_eq!(
        failover
            .config
            .waiting_rounds
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_the_wait_hands_over_the_last_rejection_at_once() {
    let a = upstream(Route::always(rate_limited("1"))).await;
    let shutdown = Shutdown::new();
    let failover = with_round(vec![target("a", &a)])
        .shutdown(shutdown.clone())
        .build()
        .unwrap();
    let call = tokio::spawn(failover.oneshot(request()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at = Instant::now();
    shutdown.trigger();
    let response = call.await.unwrap().unwrap();
    assert_eq!(at.elapsed(), Duration::ZERO);
    assert_eq!(response.status(), 429);
    assert_eq!(report(&response).suppressed, Some(Suppression::Shutdown));
    assert_eq!(a.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_attempts_and_forbids_a_round_it_cannot_hold() {
    let slow = upstream(Route::always(
        Reply::anthropic_ok("late").delay(Duration::from_secs(10)),
    ))
    .await;
    let failover = Failover::builder(vec![target("slow", &slow)])
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

    // Answers take 1.4 s: at 1.4 s, a 1 s wait and another 1.4 s attempt
    // cannot fit in 2.5 s, so no round begins.
    let a = upstream(Route::always(
        rate_limited("1").delay(Duration::from_millis(1400)),
    ))
    .await;
    let failover = with_round(vec![target("a", &a)])
        .deadline(Duration::from_millis(2500))
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(report(&response).suppressed, Some(Suppression::Deadline));
    assert_eq!(a.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_ambiguous_attempt_lets_the_request_move_on_but_not_begin_another_round() {
    let slow = upstream(Route::always(
        Reply::anthropic_ok("late").delay(Duration::from_secs(30)),
    ))
    .await;
    let b = upstream(Route::always(rate_limited("1"))).await;
    let failover = with_round(vec![
        target("slow", &slow).first_content_timeout(Duration::from_secs(1)),
        target("b", &b),
    ])
    .build()
    .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    let report = report(&response);
    assert_eq!(
        outcomes(&report),
        [
            ("slow", 1, "first content timeout".to_owned()),
            ("b", 1, "rejected rate_limited".to_owned()),
        ]
    );
    assert_eq!(report.suppressed, Some(Suppression::Ambiguous));
    assert_eq!(b.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_state_bound_request_never_changes_targets() {
    let a = upstream(Route::always(rate_limited("1"))).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = with_round(vec![target("a", &a), target("b", &b)])
        .state_bound(|parts, _| parts.headers.contains_key("x-conversation"))
        .build()
        .unwrap();
    let mut bound = request();
    bound
        .headers_mut()
        .insert("x-conversation", "c1".parse().unwrap());
    let response = failover.clone().oneshot(bound).await.unwrap();
    assert_eq!(response.status(), 429);
    let report = report(&response);
    assert_eq!(
        outcomes(&report)[1],
        ("b", 1, "skipped state_bound".to_owned())
    );
    assert_eq!(report.suppressed, Some(Suppression::StateBound));
    assert_eq!(b.request_count(), 0);
    // Unbound requests still move on.
    assert_eq!(failover.oneshot(request()).await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn attempts_and_sends_stop_exactly_at_their_bounds() {
    let mocks = [
        upstream(Route::always(rate_limited("1"))).await,
        upstream(Route::always(rate_limited("1"))).await,
        upstream(Route::always(rate_limited("1"))).await,
    ];
    let targets = || {
        vec![
            target("a", &mocks[0]),
            target("b", &mocks[1]),
            target("c", &mocks[2]),
        ]
    };
    let failover = Failover::builder(targets())
        .max_target_attempts(2)
        .build()
        .unwrap();
    let first = report(&failover.oneshot(request()).await.unwrap());
    assert_eq!(first.target_attempts(), 2);
    assert_eq!(
        outcomes(&first)[2],
        ("c", 1, "skipped attempt_limit".to_owned())
    );
    let failover = Failover::builder(targets())
        .max_upstream_sends(4)
        .exhaustion_retry(rounds(2))
        .build()
        .unwrap();
    let second = report(&failover.oneshot(request()).await.unwrap());
    assert_eq!(second.upstream_sends, 4, "{second}");
    assert_eq!(
        outcomes(&second)[4],
        ("b", 2, "skipped send_budget".to_owned())
    );
    let sent: usize = mocks.iter().map(MockServer::request_count).sum();
    assert_eq!(sent, 2 + 4);
}

/// `a` (cooling down) answering 429 naming `secs` once and then serving,
/// before `b` always serving.
async fn a_limited_once_then_b(secs: &str) -> (MockServer, MockServer, Failover<Svc>) {
    let a = upstream(Route::sequence([
        rate_limited(secs),
        Reply::anthropic_ok("a"),
    ]))
    .await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![target("a", &a).cooldown(), target("b", &b)])
        .build()
        .unwrap();
    (a, b, failover)
}

#[tokio::test(start_paused = true)]
async fn a_cooling_target_is_skipped_by_later_requests_until_its_wait_passes() {
    let (a, b, failover) = a_limited_once_then_b("5").await;
    for _ in 0..3 {
        assert_eq!(
            failover.clone().oneshot(request()).await.unwrap().status(),
            200
        );
    }
    assert_eq!((a.request_count(), b.request_count()), (1, 3));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = report(&failover.oneshot(request()).await.unwrap());
    assert_eq!(outcomes(&later), [("a", 1, "answered 200".to_owned())]);
}

/// `a` always answering `reply`, down after 2 failures within 10 s, then
/// `b` always serving.
async fn unhealthy_a_then_b(reply: Reply) -> (MockServer, MockServer, Failover<Svc>) {
    let a = upstream(Route::always(reply)).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![
        target("a", &a).unhealthy_after(2, Duration::from_secs(10)),
        target("b", &b),
    ])
    .build()
    .unwrap();
    (a, b, failover)
}

#[tokio::test(start_paused = true)]
async fn a_target_failing_too_often_is_skipped_for_its_window_then_tried_again() {
    let (a, _b, failover) = unhealthy_a_then_b(Reply::overloaded()).await;
    let send = || async { report(&failover.clone().oneshot(request()).await.unwrap()) };
    // Two failures (apart, within the window) take it down.
    send().await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    send().await;
    assert_eq!(a.request_count(), 2);
    let skipped = send().await;
    assert_eq!(
        outcomes(&skipped),
        [
            ("a", 1, "skipped unhealthy".to_owned()),
            ("b", 1, "answered 200".to_owned())
        ]
    );
    tokio::time::sleep(Duration::from_secs(9)).await;
    send().await;
    assert_eq!(a.request_count(), 2, "still down 9 s into its 10 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
    send().await;
    assert_eq!(a.request_count(), 3, "tried again once its window passed");
    // Its count started over: one failure does not take it down again.
    send().await;
    assert_eq!(a.request_count(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_failure_a_whole_window_old_no_longer_counts() {
    let (a, b, failover) = unhealthy_a_then_b(Reply::status(500)).await;
    let status = || async { failover.clone().oneshot(request()).await.unwrap().status() };
    // A plain 500 is handed over, and counts as a failure.
    assert_eq!(status().await, 500);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(status().await, 500);
    // The first failure is 10 s old, out of the window: one counts.
    assert_eq!(status().await, 500);
    assert_eq!(a.request_count(), 3);
    // Two inside the window: a is down.
    assert_eq!(status().await, 200);
    assert_eq!((a.request_count(), b.request_count()), (3, 1));
}

#[tokio::test(start_paused = true)]
async fn a_rewrite_sets_the_model_of_each_target() {
    let a = upstream(Route::always(Reply::overloaded())).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![
        target("a", &a),
        target("b", &b).rewrite({
            let base = b.url("");
            let model = set_model("claude-haiku-4-5");
            move |parts, body| {
                parts.uri = format!("{base}{PATH}").parse()?;
                model(parts, body)
            }
        }),
    ])
    .build()
    .unwrap();
    failover.oneshot(request()).await.unwrap();
    assert_eq!(
        a.requests()[0].body_json().unwrap()["model"],
        "claude-sonnet-4-5"
    );
    assert_eq!(
        b.requests()[0].body_json().unwrap()["model"],
        "claude-haiku-4-5"
    );
}

#[test]
fn unsafe_or_contradictory_budgets_are_refused_naming_the_setting() {
    let t = |name: &str| Target::new(name, ());
    let cases: Vec<(FailoverBuilder<()>, &str)> = vec![
        (Failover::builder(vec![]), "targets"),
        (Failover::builder(vec![t("a"), t("a")]), "targets"),
        (
            Failover::builder(vec![t("a")]).max_target_attempts(0),
            "max_target_attempts",
        ),
        (
            Failover::builder(vec![Target::new("a", ()).max_sends(3)]).max_upstream_sends(2),
            "max_upstream_sends",
        ),
        (
            Failover::builder(vec![t("a")])
                .exhaustion_retry(ExhaustionRetry::new(0, Duration::from_secs(1))),
            "exhaustion_retry.max_rounds",
        ),
        (
            Failover::builder(vec![t("a")])
                .exhaustion_retry(ExhaustionRetry::new(9, Duration::from_secs(1))),
            "exhaustion_retry.max_rounds",
        ),
        (
            Failover::builder(vec![t("a")])
                .exhaustion_retry(ExhaustionRetry::new(1, Duration::ZERO)),
            "exhaustion_retry.max_wait",
        ),
        (
            Failover::builder(vec![t("a")])
                .exhaustion_retry(ExhaustionRetry::new(1, Duration::from_secs(600))),
            "exhaustion_retry.max_wait",
        ),
        (
            Failover::builder(vec![t("a"), t("b")])
                .max_upstream_sends(2)
                .exhaustion_retry(rounds(1)),
            "exhaustion_retry",
        ),
        (
            Failover::builder(vec![t("a")])
                .deadline(Duration::from_secs(1))
                .exhaustion_retry(rounds(2)),
            "exhaustion_retry.max_wait",
        ),
        (
            Failover::builder(vec![t("a")]).deadline(Duration::ZERO),
            "deadline",
        ),
    ];
    for (builder, setting) in cases {
        let error = builder.build().unwrap_err();
        assert_eq!(error.setting(), setting, "{error}");
        assert_eq!(error.of(), "failover");
    }
    assert!(Failover::builder(vec![t("a"), t("b")])
        .exhaustion_retry(rounds(1))
        .build()
        .is_ok());
}

/// A boxed body, for targets whose bodies differ in type.
type Boxed = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;
/// A target that is the library's retry stack (`ClientLayer`).
pub(super) type RetrySvc = BoxCloneSyncService<Request<Full<Bytes>>, Response<Boxed>, BoxError>;

/// `ClientLayer` with `retries` retries over a client aimed at `mock`.
pub(super) fn retrying_target(name: &str, mock: &MockServer, retries: u32) -> Target<RetrySvc> {
    let base = mock.url("");
    let policy = crate::RetryPolicy::builder()
        .max_retries(retries)
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(2))
        .build()
        .unwrap();
    let client =
        Client::builder(TokioExecutor::new()).build_http::<crate::ReplayBody<Full<Bytes>>>();
    let stack = tower::Layer::layer(&crate::ClientLayer::new(policy), client)
        .map_response(|r: Response<_>| r.map(|b| b.map_err(BoxError::from).boxed_unsync()));
    Target::new(name, BoxCloneSyncService::new(stack))
        .max_sends(retries + 1)
        .rewrite(move |parts, _| {
            parts.uri = format!("{base}{}", parts.uri.path()).parse()?;
            Ok(())
        })
}

#[tokio::test(start_paused = true)]
async fn a_retrying_target_is_certified_only_when_every_send_was_turned_away() {
    // A 500 first (it may have run), then a 429: not certified.
    let a = upstream(Route::sequence([Reply::status(500), rate_limited("1")])).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![
        retrying_target("a", &a, 1),
        retrying_target("b", &b, 1),
    ])
    .build()
    .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(
        response.status(),
        429,
        "handed over: an earlier send may have run"
    );
    assert_eq!((a.request_count(), b.request_count()), (2, 0));
    assert_eq!(report(&response).upstream_sends, 2);
    // Two 429s: every send turned away, so the request moves on.
    let a = upstream(Route::always(rate_limited("1"))).await;
    let failover = Failover::builder(vec![
        retrying_target("a", &a, 1),
        retrying_target("b", &b, 1),
    ])
    .build()
    .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    let report = report(&response);
    assert_eq!(
        report.upstream_sends, 3,
        "two to a, counted from its report, one to b"
    );
}

#[tokio::test(start_paused = true)]
async fn an_error_event_after_the_answer_began_is_not_a_rejection() {
    use llm_retry_mock::SseEvent;
    let begun = Reply::sse([
        SseEvent::new(
            Some("message_start"),
            r#"{"type":"message_start","message":{"id":"m"}}"#,
        ),
        SseEvent::new(
            Some("error"),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
    ]);
    let a = upstream(Route::always(begun)).await;
    let b = upstream(Route::always(Reply::anthropic_stream(&["b"]))).await;
    let failover = Failover::builder(vec![
        retrying_target("a", &a, 0),
        retrying_target("b", &b, 0),
    ])
    .build()
    .unwrap();
    let error = failover.oneshot(request()).await.unwrap_err();
    let error = error.downcast_ref::<FailoverError>().unwrap();
    assert_eq!(error.stop(), FailoverStop::Failed, "{error}");
    assert_eq!(
        b.request_count(),
        0,
        "the request may have run on a: it stays there"
    );
}

#[tokio::test(start_paused = true)]
async fn only_rate_limits_and_overloads_let_a_further_round_begin() {
    let dead = dead_address();
    let b = upstream(Route::always(rate_limited("1"))).await;
    let failover = with_round(vec![target_at("dead", dead), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(
        report(&response).suppressed,
        Some(Suppression::NotThrottled)
    );
    assert_eq!(b.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_inside_a_further_round_hands_over_the_kept_rejection() {
    // Round 1: a 429 at once; round 2: a's answer takes 30 s.
    let a = upstream(Route::sequence([
        rate_limited("1"),
        Reply::anthropic_ok("late").delay(Duration::from_secs(30)),
    ]))
    .await;
    let failover = with_round(vec![target("a", &a)])
        .deadline(Duration::from_secs(5))
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let report = report(&response);
    assert_eq!(report.suppressed, Some(Suppression::Deadline));
    assert!(response.body().is_kept());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("rate_limit_error"),
        "the rejection's own body"
    );
}

#[tokio::test(start_paused = true)]
async fn a_window_with_nothing_left_cools_the_target_down() {
    let spent = Reply::anthropic_ok("a")
        .header("anthropic-ratelimit-requests-remaining", "0")
        .header("x-ratelimit-remaining-requests", "0")
        .header("x-ratelimit-reset-requests", "10s");
    let a = upstream(Route::always(spent)).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![target("a", &a).cooldown(), target("b", &b)])
        .build()
        .unwrap();
    failover.clone().oneshot(request()).await.unwrap();
    let report = report(&failover.oneshot(request()).await.unwrap());
    assert_eq!(
        outcomes(&report)[0],
        ("a", 1, "skipped cooling_down".to_owned())
    );
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_failing_rewrite_and_an_oversized_body_end_the_request_with_their_stop() {
    let a = upstream(Route::always(Reply::anthropic_ok("a"))).await;
    let failover = Failover::builder(vec![target("a", &a).rewrite(|_, _| Err("no route".into()))])
        .build()
        .unwrap();
    let error = failover.oneshot(request()).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<FailoverError>().unwrap().stop(),
        FailoverStop::Rewrite
    );
    let failover = Failover::builder(vec![target("a", &a)])
        .max_body(8)
        .build()
        .unwrap();
    let error = failover.oneshot(request()).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<FailoverError>().unwrap().stop(),
        FailoverStop::BodyTooLarge { cap: 8 }
    );
    assert_eq!(a.request_count(), 0);
}

/// A body that counts how many of its kind are alive.
struct Live {
    inner: Full<Bytes>,
    alive: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Live {
    fn new(text: &'static str, alive: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Live {
        alive.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Live {
            inner: Full::new(Bytes::from_static(text.as_bytes())),
            alive: std::sync::Arc::clone(alive),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl http_body::Body for Live {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }
}

#[tokio::test(start_paused = true)]
async fn no_rejection_body_is_alive_while_a_request_waits_for_its_next_round() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let alive = std::sync::Arc::new(AtomicUsize::new(0));
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let service = {
        let (alive, calls) = (alive.clone(), calls.clone());
        tower::service_fn(move |_: Request<Full<Bytes>>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let body = Live::new(
                if n < 2 {
                    r#"{"type":"error"}"#
                } else {
                    "served"
                },
                &alive,
            );
            async move {
                let status = if n < 2 { 429 } else { 200 };
                let response = Response::builder()
                    .status(status)
                    .header("retry-after", "1")
                    .body(body)?;
                Ok::<_, BoxError>(response)
            }
        })
    };
    let targets = vec![
        Target::new("a", BoxCloneSyncService::new(service.clone())),
        Target::new("b", BoxCloneSyncService::new(service)),
    ];
    let failover = with_round(targets).build().unwrap();
    let call = tokio::spawn(failover.oneshot(Request::new(Full::new(Bytes::from_static(b"{}")))));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "round 1 done, waiting");
    assert_eq!(
        alive.load(Ordering::SeqCst),
        0,
        "both rejections' bodies were read and dropped"
    );
    let response = call.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        alive.load(Ordering::SeqCst),
        1,
        "the answer's own body, streaming through"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "served");
    assert_eq!(alive.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn the_final_retry_after_names_only_waits_a_provider_named_that_are_still_ahead() {
    // a names 1 s; b answers 2 s later naming nothing: a's wait is past.
    let a = upstream(Route::always(rate_limited("1"))).await;
    let b = upstream(Route::always(
        Reply::anthropic_error(429, "rate_limit_error", "Rate limited")
            .delay(Duration::from_secs(2)),
    ))
    .await;
    let failover = Failover::builder(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["x-should-retry"], "false");
    assert!(
        response.headers().get("retry-after").is_none(),
        "{:?}",
        response.headers()
    );
    assert!(response.headers().get("retry-after-ms").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_equal_to_max_wait_is_waited_out() {
    let a = upstream(Route::sequence([
        rate_limited("2"),
        Reply::anthropic_ok("a"),
    ]))
    .await;
    let failover = with_round(vec![target("a", &a)]).build().unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(report(&response).rounds, 2);
}

#[tokio::test(start_paused = true)]
async fn an_error_says_why_the_failover_stopped() {
    let slow = upstream(Route::always(
        Reply::anthropic_ok("late").delay(Duration::from_secs(10)),
    ))
    .await;
    let failover = Failover::builder(vec![target("slow", &slow)])
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let error = failover.oneshot(request()).await.unwrap_err();
    let error = error.downcast_ref::<FailoverError>().unwrap();
    assert_eq!(error.report().stop, FailoverStop::Deadline);

    let dead = dead_address();
    let failover = Failover::builder(vec![target_at("dead", dead)])
        .build()
        .unwrap();
    let error = failover.oneshot(request()).await.unwrap_err();
    let error = error.downcast_ref::<FailoverError>().unwrap();
    assert_eq!(error.stop(), FailoverStop::Exhausted);
    assert_eq!(error.report().stop, FailoverStop::Exhausted);
    assert_eq!(error.retry_after(), None, "no provider named a wait");
}

#[tokio::test(start_paused = true)]
async fn a_request_body_that_fails_is_not_called_too_large() {
    let a = upstream(Route::always(Reply::anthropic_ok("a"))).await;
    let failover = Failover::builder(vec![target("a", &a)]).build().unwrap();
    let failing = http_body_util::StreamBody::new(futures_util::stream::iter([
        Ok(http_body::Frame::data(Bytes::from_static(b"{\"model\""))),
        Err::<http_body::Frame<Bytes>, BoxError>("the client went away".into()),
    ]));
    let error = failover.oneshot(Request::new(failing)).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<FailoverError>().unwrap().stop(),
        FailoverStop::BodyFailed
    );
    assert_eq!(a.request_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancellation_at_any_moment_around_the_second_dispatch_sends_nothing_after_it() {
    // The wait ends somewhere in [1 s, 1.2 s]: cancel at every 10 ms across it.
    let mut before_and_after = [false, false];
    for step in 0..30u64 {
        let a = upstream(Route::sequence([
            rate_limited("1"),
            Reply::anthropic_ok("a").delay(Duration::from_secs(1)),
        ]))
        .await;
        let failover = with_round(vec![target("a", &a)])
            .policy(crate::RetryPolicy::builder().seed(step).build().unwrap())
            .build()
            .unwrap();
        let call = tokio::spawn(failover.clone().oneshot(request()));
        tokio::time::sleep(Duration::from_millis(950 + 10 * step)).await;
        call.abort();
        let _ = call.await;
        let sent = a.request_count();
        assert!((1..=2).contains(&sent), "step {step}: {sent} sends");
        before_and_after[sent - 1] = true;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            a.request_count(),
            sent,
            "step {step}: a send after the cancellation"
        );
        assert_eq!(
            failover
                .config
                .waiting_rounds
                .load(std::sync::atomic::Ordering::SeqCst),
            0,
            "step {step}"
        );
    }
    assert_eq!(
        before_and_after,
        [true, true],
        "the cancellations fell on both sides of the second send"
    );
}

#[test]
fn set_model_keeps_every_other_byte_and_leaves_bodies_without_a_model_alone() {
    let rewrite = set_model("claude-haiku-4-5");
    let mut parts = Request::new(()).into_parts().0;
    let mut body = Bytes::from_static(br#"{"z":1,"model":"a","messages":[ {"role":"user"} ]}"#);
    rewrite(&mut parts, &mut body).unwrap();
    assert_eq!(
        &body[..],
        br#"{"z":1,"model":"claude-haiku-4-5","messages":[ {"role":"user"} ]}"#
    );
    for untouched in [&b""[..], b"not json", br#"{"messages":[]}"#, b"[1,2]"] {
        let mut body = Bytes::copy_from_slice(untouched);
        rewrite(&mut parts, &mut body).unwrap();
        assert_eq!(&body[..], untouched);
    }
    // An object that does not parse (cut short, trailing bytes) is no body
    // to send on under another target's model name.
    for broken in [&br#"{"model":"a","#[..], br#" {"model":"a"} x"#] {
        let mut body = Bytes::copy_from_slice(broken);
        assert!(rewrite(&mut parts, &mut body).is_err(), "{broken:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_overload_that_is_no_certified_rejection_moves_on_but_begins_no_round() {
    let a = upstream(Route::always(Reply::openai_error(
        503,
        "server_error",
        None,
        "The server is overloaded",
    )))
    .await;
    let b = upstream(Route::always(Reply::status(502))).await;
    let failover = with_round(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 502, "the last answer is handed over");
    assert_eq!(response.headers()["x-should-retry"], "false");
    let report = report(&response);
    assert_eq!(
        outcomes(&report),
        [
            ("a", 1, "moved on 503".to_owned()),
            ("b", 1, "moved on 502".to_owned())
        ]
    );
    assert_eq!(report.suppressed, Some(Suppression::Ambiguous));
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_500_that_names_no_overload_is_handed_over_whole() {
    let body = format!(
        r#"{{"type":"error","error":{{"type":"api_error","message":"{}"}}}}"#,
        "x".repeat(100)
    );
    let a = upstream(Route::always(Reply::status(500).body(body.clone()))).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 500);
    let read = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(read, body.as_bytes());
    assert_eq!(b.request_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stall_with_no_answer_to_hand_over_ends_as_a_first_content_timeout() {
    let slow = upstream(Route::always(
        Reply::anthropic_ok("late").delay(Duration::from_secs(30)),
    ))
    .await;
    let failover = Failover::builder(vec![
        target("slow", &slow).first_content_timeout(Duration::from_secs(1))
    ])
    .build()
    .unwrap();
    let error = failover.oneshot(request()).await.unwrap_err();
    let error = error.downcast_ref::<FailoverError>().unwrap();
    assert_eq!(error.stop(), FailoverStop::FirstContentTimeout);
    assert!(!error.is_rate_limited());
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_remembers_whether_a_rate_limit_named_it() {
    for (first, rate_limited) in [
        (rate_limited("5"), true),
        (Reply::overloaded().header("retry-after", "5"), false),
    ] {
        let a = upstream(Route::always(first)).await;
        let failover = Failover::builder(vec![target("a", &a).cooldown()])
            .build()
            .unwrap();
        let _ = failover.clone().oneshot(request()).await.unwrap();
        let error = failover.oneshot(request()).await.unwrap_err();
        let error = error.downcast_ref::<FailoverError>().unwrap();
        assert_eq!(error.stop(), FailoverStop::Exhausted);
        assert_eq!(error.is_rate_limited(), rate_limited);
        assert_eq!(error.retry_after(), Some(Duration::from_secs(5)));
        assert_eq!(a.request_count(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn rounds_without_a_named_wait_back_off_from_the_end_of_the_round_and_double() {
    // a is overloaded at once, b only after 450 ms: a wait counted from
    // a's rejection would be nearly over when the round ends.
    let a = upstream(Route::always(Reply::overloaded())).await;
    let b = upstream(Route::always(
        Reply::overloaded().delay(Duration::from_millis(450)),
    ))
    .await;
    let failover = Failover::builder(vec![target("a", &a), target("b", &b)])
        .exhaustion_retry(ExhaustionRetry::new(2, Duration::from_secs(5)))
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 529);
    let report = report(&response);
    assert_eq!(report.rounds, 3);
    assert_eq!(report.upstream_sends, 6);
    // 500 ms, then 1 s, each with up to a fifth of jitter on top.
    assert!(
        report.waited >= Duration::from_millis(1500)
            && report.waited <= Duration::from_millis(1800),
        "{:?}",
        report.waited
    );
}

#[tokio::test(start_paused = true)]
async fn an_overload_handed_over_at_the_end_keeps_the_wait_it_named() {
    let a = upstream(Route::always(Reply::status(503).header("retry-after", "7"))).await;
    let failover = Failover::builder(vec![target("a", &a)]).build().unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["x-should-retry"], "false");
    assert_eq!(response.headers()["retry-after"], "7");
}

#[path = "shared_marks_tests.rs"]
mod shared_marks;

/// A request naming `model`, otherwise as [`request`] builds one.
pub(super) fn request_for(model: &str) -> Request<Full<Bytes>> {
    let body = format!(r#"{{"model":"{model}","max_tokens":64,"messages":[]}}"#);
    Request::post(format!("http://failover.invalid{PATH}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// `a`, refusing `claude-opus-4-5` with a 429 naming 30 s and serving
/// every other model (providers limit each model apart), and `b`, always
/// serving.
pub(super) async fn one_model_held() -> (MockServer, MockServer) {
    let held = Route::always(rate_limited("30"));
    let a = upstream(Route::by_model(
        [("claude-opus-4-5", held)],
        Route::always(Reply::anthropic_ok("a")),
    ))
    .await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    (a, b)
}

#[tokio::test(start_paused = true)]
async fn a_cooldown_sets_a_target_aside_for_the_model_whose_limit_named_it_only() {
    let (a, b) = one_model_held().await;
    let failover = Failover::builder(vec![target("a", &a).cooldown(), target("b", &b)])
        .build()
        .unwrap();
    let send = |model: &'static str| {
        let failover = failover.clone();
        async move { report(&failover.oneshot(request_for(model)).await.unwrap()) }
    };
    let refused = send("claude-opus-4-5").await;
    assert_eq!(
        outcomes(&refused),
        [
            ("a", 1, "rejected rate_limited".to_owned()),
            ("b", 1, "answered 200".to_owned())
        ]
    );
    // Another model's requests still go to `a`, inside the held one's wait.
    let other = send("claude-haiku-4-5").await;
    assert_eq!(outcomes(&other), [("a", 1, "answered 200".to_owned())]);
    // The held model's skip `a` until the wait its provider named passed.
    let again = send("claude-opus-4-5").await;
    assert_eq!(
        outcomes(&again)[0],
        ("a", 1, "skipped cooling_down".to_owned())
    );
    assert_eq!(a.request_count(), 2);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = send("claude-opus-4-5").await;
    assert_eq!(
        outcomes(&after)[0],
        ("a", 1, "rejected rate_limited".to_owned())
    );
}

/// `target("a", mock)` whose rewrite also sets the body's model to
/// `model`, as a deployment serving every model's requests under one name.
fn target_renaming_models(mock: &MockServer, model: &str) -> Target<Svc> {
    let base = mock.url("");
    let rename = super::set_model(model);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let service = BoxCloneSyncService::new(client.map_err(BoxError::from));
    Target::new("a", service).rewrite(move |parts, body| {
        parts.uri = format!("{base}{}", parts.uri.path()).parse()?;
        rename(parts, body)
    })
}

#[tokio::test(start_paused = true)]
async fn a_wait_named_for_a_model_the_target_renamed_holds_it_for_every_model() {
    let a = upstream(Route::always(rate_limited("30"))).await;
    let b = upstream(Route::always(Reply::anthropic_ok("b"))).await;
    let failover = Failover::builder(vec![
        target_renaming_models(&a, "one-deployment").cooldown(),
        target("b", &b),
    ])
    .build()
    .unwrap();
    let first = report(
        &failover
            .clone()
            .oneshot(request_for("gpt-4o"))
            .await
            .unwrap(),
    );
    assert_eq!(
        outcomes(&first)[0],
        ("a", 1, "rejected rate_limited".to_owned())
    );
    // Its wait is the deployment's, whichever model a request names.
    let other = report(&failover.oneshot(request_for("gpt-4o-mini")).await.unwrap());
    assert_eq!(
        outcomes(&other)[0],
        ("a", 1, "skipped cooling_down".to_owned())
    );
    assert_eq!(a.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_wait_named_to_a_request_naming_no_model_holds_every_model() {
    let (a, _b, failover) = a_limited_once_then_b("30").await;
    let unnamed = Request::post(format!("http://failover.invalid{PATH}"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let first = report(&failover.clone().oneshot(unnamed).await.unwrap());
    assert_eq!(
        outcomes(&first)[0],
        ("a", 1, "rejected rate_limited".to_owned())
    );
    let named = report(
        &failover
            .oneshot(request_for("claude-opus-4-5"))
            .await
            .unwrap(),
    );
    assert_eq!(
        outcomes(&named)[0],
        ("a", 1, "skipped cooling_down".to_owned())
    );
    assert_eq!(a.request_count(), 1);
}

/// mod.rs: "one more round may begin — again from the first target,
/// skipping those still inside the wait their provider named".
/// b's provider named no wait: b must be asked again in round 2.
#[tokio::test(start_paused = true)]
async fn a_target_whose_provider_named_no_wait_is_asked_again_in_a_further_round() {
    // a names 100 ms; b is overloaded (529) naming no wait, then serves.
    let a = upstream(Route::always(
        Reply::anthropic_error(429, "rate_limit_error", "Rate limited")
            .header("retry-after-ms", "100"),
    ))
    .await;
    let b = upstream(Route::sequence_then(
        [Reply::overloaded()],
        Reply::anthropic_ok("b"),
    ))
    .await;
    let failover = with_round(vec![target("a", &a), target("b", &b)])
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    let report = report(&response);
    let trail = outcomes(&report);
    assert_eq!(
        (response.status().as_u16(), b.request_count()),
        (200, 2),
        "round 2 must ask b again (no wait was named for it); trail: {trail:?}"
    );
}

/// config.rs ExhaustionRetry::max_wait: "The longest provider-named wait a
/// further round waits out (up to 60 s): when the soonest one is longer,
/// no round begins." mod.rs: "the wait fits in `max_wait`".
#[tokio::test(start_paused = true)]
async fn a_named_wait_beyond_max_wait_begins_no_round_on_a_target_with_cooldown() {
    let a = upstream(Route::always(rate_limited("3600"))).await;
    let failover = Failover::builder(vec![target("a", &a).cooldown()])
        .exhaustion_retry(ExhaustionRetry::new(1, Duration::from_secs(60)))
        .build()
        .unwrap();
    let started = Instant::now();
    let response = failover.oneshot(request()).await.unwrap();
    let report = report(&response);
    let trail = outcomes(&report);
    assert_eq!(response.status(), 429);
    assert_eq!(
        (report.rounds, started.elapsed(), report.suppressed),
        (
            1,
            Duration::ZERO,
            Some(Suppression::WaitTooLong {
                asked: Duration::from_secs(3600),
                limit: Duration::from_secs(60)
            })
        ),
        "a 3600 s wait is longer than max_wait: no round, no wait; trail: {trail:?}, waited {:?}",
        report.waited
    );
}

/// Same, with a smaller max_wait: the suppression must name the wait the
/// provider asked for (Suppression::WaitTooLong { asked } = "The wait that
/// was named").
#[tokio::test(start_paused = true)]
async fn the_wait_too_long_suppression_names_the_wait_the_provider_named() {
    let a = upstream(Route::always(rate_limited("3600"))).await;
    let failover = Failover::builder(vec![target("a", &a).cooldown()])
        .exhaustion_retry(ExhaustionRetry::new(1, Duration::from_secs(2)))
        .build()
        .unwrap();
    let response = failover.oneshot(request()).await.unwrap();
    let report = report(&response);
    assert_eq!(
        report.suppressed,
        Some(Suppression::WaitTooLong {
            asked: Duration::from_secs(3600),
            limit: Duration::from_secs(2)
        })
    );
}
