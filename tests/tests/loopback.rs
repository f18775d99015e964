//! `RetryLayer` over a real hyper-util client against `llm-retry-mock` on
//! 127.0.0.1: each test fails if the retry path is bypassed or overreaches.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use llm_retry::{RetryError, RetryLayer, RetryReport, StopReason};
use llm_retry_mock::{Reply, Route};
use support::{client, fast_policy, mock, send, PROMPT};
use tower::{Layer, ServiceExt};

fn report(res: &http::Response<impl Sized>) -> RetryReport {
    res.extensions()
        .get::<RetryReport>()
        .cloned()
        .expect("every response carries a report")
}

#[tokio::test]
async fn a_429_then_200_succeeds_on_the_second_send() {
    let mock = mock(Route::sequence([
        Reply::rate_limited(Some(0)),
        Reply::anthropic_ok("Hello"),
    ]))
    .await;
    let res = send(fast_policy().build().unwrap(), &mock).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let report = report(&res);
    // `Retry-After: 0` is no wait at all: computed backoff applies instead.
    assert_eq!((report.attempts, report.server_waits_honoured), (2, 0));
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(Some(body), Reply::anthropic_ok("Hello").expected_body());
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter().all(|r| r.body == PROMPT.as_bytes()),
        "both sends carry the same body"
    );
}

#[tokio::test]
async fn a_400_is_not_retried_and_its_body_reaches_the_caller() {
    let bad = Reply::anthropic_error(400, "invalid_request_error", "messages: field required");
    let expected = bad.expected_body().unwrap();
    let mock = mock(Route::always(bad)).await;
    let res = send(fast_policy().build().unwrap(), &mock).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(report(&res).attempts, 1);
    assert_eq!(
        res.into_body().collect().await.unwrap().to_bytes(),
        expected
    );
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn a_permanent_429_stops_at_the_retry_cap_with_the_report() {
    let mock = mock(Route::always(Reply::rate_limited(None))).await;
    let res = send(fast_policy().max_retries(4).build().unwrap(), &mock)
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let report = report(&res);
    assert_eq!(report.attempts, 5);
    assert_eq!(report.stop, StopReason::RetriesExhausted { max_retries: 4 });
    assert_eq!(report.last_error_type.as_deref(), Some("rate_limit_error"));
    let text = report.to_string();
    assert!(text.starts_with("gave up after 5 attempts in "), "{text}");
    assert!(
        text.ends_with(": last status 429 rate_limit_error (all 4 retries spent)"),
        "{text}"
    );
    assert_eq!(mock.request_count(), 5);
}

#[tokio::test]
async fn x_should_retry_false_on_a_503_is_final() {
    let declined =
        Reply::anthropic_error(503, "api_error", "busy").header("x-should-retry", "false");
    let mock = mock(Route::sequence([
        declined,
        Reply::anthropic_ok("unreachable"),
    ]))
    .await;
    let res = send(fast_policy().build().unwrap(), &mock).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.request_count(), 1);
    assert!(matches!(report(&res).stop, StopReason::NotRetryable(_)));
}

#[tokio::test]
async fn a_reset_before_headers_is_retried() {
    let mock = mock(Route::sequence([
        Reply::reset_before_headers(),
        Reply::anthropic_ok("back"),
    ]))
    .await;
    let res = send(fast_policy().build().unwrap(), &mock).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(report(&res).attempts, 2);
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn resets_to_the_end_give_one_typed_error_with_the_report() {
    let mock = mock(Route::always(Reply::reset_before_headers())).await;
    let err = send(fast_policy().max_retries(2).build().unwrap(), &mock)
        .await
        .unwrap_err();
    let err = err.downcast::<RetryError>().expect("a RetryError");
    assert!(err.stop().is_retries_exhausted());
    assert_eq!(err.report().attempts, 3);
    assert!(std::error::Error::source(&*err).is_some());
    assert_eq!(mock.request_count(), 3);
}

fn streaming_body(
    total: usize,
    chunk: usize,
) -> (
    Bytes,
    impl http_body::Body<Data = Bytes, Error = llm_retry::BoxError>,
) {
    let data: Bytes = (0..total)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let frames: Vec<Result<http_body::Frame<Bytes>, llm_retry::BoxError>> = (0..total)
        .step_by(chunk)
        .map(|at| {
            Ok(http_body::Frame::data(
                data.slice(at..(at + chunk).min(total)),
            ))
        })
        .collect();
    (data, StreamBody::new(futures_util::stream::iter(frames)))
}

#[tokio::test]
async fn a_2_mib_streaming_body_under_the_cap_is_replayed_byte_identical() {
    let mock = mock(Route::sequence([
        Reply::overloaded(),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let (data, body) = streaming_body(2 * 1024 * 1024, 64 * 1024);
    let svc = RetryLayer::new(fast_policy().build().unwrap()).layer(client());
    let req = http::Request::post(mock.url("/v1/messages"))
        .body(body)
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body, data);
    assert_eq!(sent[1].body, data);
}

#[tokio::test]
async fn a_streaming_body_over_the_cap_is_sent_once_and_not_retried() {
    let mock = mock(Route::always(Reply::overloaded())).await;
    let (data, body) = streaming_body(2 * 1024 * 1024, 64 * 1024);
    let policy = fast_policy().max_replay_body(1024 * 1024).build().unwrap();
    let svc = RetryLayer::new(policy).layer(client());
    let req = http::Request::post(mock.url("/v1/messages"))
        .body(body)
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    assert_eq!(res.status().as_u16(), 529);
    let report = report(&res);
    assert_eq!(
        report.stop,
        StopReason::BodyNotReplayable { cap: 1024 * 1024 }
    );
    assert!(report
        .to_string()
        .contains("larger than the 1048576-byte replay buffer"));
    let sent = mock.requests();
    assert_eq!(sent.len(), 1, "sent once");
    assert_eq!(sent[0].body, data, "and sent whole");
}

#[tokio::test]
async fn a_full_body_is_sent_with_its_content_length_on_every_attempt() {
    let mock = mock(Route::sequence([
        Reply::status(502),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let res = send(fast_policy().build().unwrap(), &mock).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    for sent in mock.requests() {
        assert_eq!(
            sent.header_str("content-length"),
            Some(PROMPT.len().to_string().as_str())
        );
    }
}

#[tokio::test]
async fn a_broken_error_body_is_still_judged_by_its_status() {
    // A 404 whose body is cut stays final: no resend, one typed error.
    let cut =
        Reply::anthropic_error(404, "not_found_error", "model: claude-nope").reset_after_bytes(10);
    let mock = mock(Route::sequence([cut, Reply::anthropic_ok("unreachable")])).await;
    let err = send(fast_policy().build().unwrap(), &mock)
        .await
        .unwrap_err();
    let err = err.downcast::<RetryError>().unwrap();
    assert!(err.stop().is_not_retryable(), "{err}");
    assert_eq!(err.report().last_status, Some(StatusCode::NOT_FOUND));
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn x_should_retry_false_holds_even_when_the_body_breaks() {
    let cut = Reply::anthropic_error(503, "api_error", "busy")
        .header("x-should-retry", "false")
        .reset_after_bytes(5);
    let mock = mock(Route::sequence([cut, Reply::anthropic_ok("unreachable")])).await;
    assert!(send(fast_policy().build().unwrap(), &mock).await.is_err());
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn each_attempt_can_name_its_retry_count_in_a_header() {
    let upstream = mock(Route::sequence([
        Reply::status(503),
        Reply::overloaded(),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let policy = fast_policy()
        .attempt_header(http::HeaderName::from_static("x-stainless-retry-count"))
        .build()
        .unwrap();
    let res = send(policy, &upstream).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let counts: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| r.header_str("x-stainless-retry-count").unwrap().to_owned())
        .collect();
    assert_eq!(counts, ["0", "1", "2"]);
    // Off by default: no header at all.
    let plain = mock(Route::always(Reply::anthropic_ok("ok"))).await;
    send(fast_policy().build().unwrap(), &plain).await.unwrap();
    assert!(plain.requests()[0]
        .header_str("x-stainless-retry-count")
        .is_none());
}
