//! `RetryLayer` over `StreamGuardLayer` over a real client, against streamed
//! replies from `llm-retry-mock`: retried before the first content byte,
//! never after.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use llm_retry::classify::{Classification, RetryableKind};
use llm_retry::stream_guard::{StreamCommit, StreamEnd, StreamGuardLayer, StreamInterrupted};
use llm_retry::{BoxError, RetryError, RetryLayer, RetryReport};
use llm_retry_mock::{Reply, Route, SseEvent};
use support::{client, fast_policy, messages_request, mock};
use tower::{Layer, ServiceExt};

/// The full stack: retry over guard over a hyper-util client.
fn stack(
    policy: llm_retry::RetryPolicy,
) -> llm_retry::Retry<llm_retry::stream_guard::StreamGuard<support::TestClient>> {
    RetryLayer::new(policy).layer(StreamGuardLayer::new().layer(client()))
}

/// Reads a body to its end or first error, returning the bytes and the error.
async fn read_all<B>(mut body: B) -> (Vec<u8>, Option<BoxError>)
where
    B: http_body::Body<Data = Bytes, Error = BoxError> + Unpin,
{
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    out.extend_from_slice(data);
                }
            }
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

#[tokio::test]
async fn an_overloaded_first_event_is_retried_and_the_caller_sees_one_response() {
    let good = Reply::anthropic_stream(&["Hello", ", world"]);
    let expected = good.expected_body().unwrap();
    let mock = mock(Route::sequence([
        Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        good,
    ]))
    .await;
    let res = stack(fast_policy().build().unwrap())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.extensions().get::<RetryReport>().unwrap().attempts, 2);
    let commit = res.extensions().get::<StreamCommit>().cloned().unwrap();
    let (bytes, error) = read_all(res.into_body()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(bytes, expected, "exactly one complete stream");
    assert_eq!(commit.bytes_forwarded(), expected.len() as u64);
    assert_eq!(commit.end(), Some(StreamEnd::Completed));
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn a_reset_after_content_is_never_replayed() {
    let full = Reply::anthropic_stream(&["The answer", " is 42", "."])
        .expected_body()
        .unwrap();
    // Cut inside the second text delta: well after the first content event.
    let first_delta = find(&full, b"event: content_block_delta").unwrap();
    let n =
        find(&full[first_delta + 1..], b"event: content_block_delta").unwrap() + first_delta + 20;
    let mock = mock(Route::always(
        Reply::anthropic_stream(&["The answer", " is 42", "."]).reset_after_bytes(n),
    ))
    .await;
    let res = stack(fast_policy().build().unwrap())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let commit = res.extensions().get::<StreamCommit>().cloned().unwrap();
    assert!(!commit.is_committed(), "nothing forwarded yet");
    let (bytes, error) = read_all(res.into_body()).await;
    assert_eq!(bytes, &full[..n], "the first {n} bytes, once");
    let error = error.expect("the stream ends in an error");
    let interrupted = error
        .downcast_ref::<StreamInterrupted>()
        .expect("StreamInterrupted");
    assert_eq!(interrupted.bytes_forwarded(), n as u64);
    assert!(commit.is_committed());
    assert_eq!(commit.end(), Some(StreamEnd::Interrupted));
    assert_eq!(
        mock.request_count(),
        1,
        "a committed attempt is never replayed"
    );
}

#[tokio::test]
async fn failures_before_any_content_are_retried() {
    let in_band_error = Reply::sse([SseEvent::new(
        None,
        r#"{"error":{"message":"The server is overloaded","type":"server_error","code":null}}"#,
    )]);
    let cases = [
        (
            "reset before any byte",
            Reply::anthropic_stream(&["x"]).reset_after_bytes(0),
        ),
        (
            "reset inside the envelope",
            Reply::anthropic_stream(&["x"]).reset_after_bytes(40),
        ),
        ("empty 200 stream", Reply::sse([])),
        (
            "[DONE] before content",
            Reply::sse([SseEvent::new(None, "[DONE]")]),
        ),
        ("in-band error object", in_band_error),
        (
            "rate-limit error event",
            Reply::anthropic_stream_error("rate_limit_error", "slow down"),
        ),
    ];
    for (name, failure) in cases {
        let good = Reply::openai_stream(&["ok"]);
        let expected = good.expected_body().unwrap();
        let mock = mock(Route::sequence([failure, good])).await;
        let res = stack(fast_policy().build().unwrap())
            .oneshot(messages_request(&mock.url("/v1/messages")))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (bytes, error) = read_all(res.into_body()).await;
        assert!(error.is_none(), "{name}: {error:?}");
        assert_eq!(bytes, expected, "{name}");
        assert_eq!(mock.request_count(), 2, "{name}");
    }
}

#[tokio::test]
async fn a_non_retryable_error_event_is_final() {
    let mock = mock(Route::always(Reply::anthropic_stream_error(
        "invalid_request_error",
        "bad",
    )))
    .await;
    let err = stack(fast_policy().build().unwrap())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap_err();
    let err = err.downcast::<RetryError>().unwrap();
    assert!(err.stop().is_not_retryable());
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn overloaded_first_events_count_as_overloads() {
    let mock = mock(Route::always(Reply::anthropic_stream_error(
        "overloaded_error",
        "Overloaded",
    )))
    .await;
    let err = stack(fast_policy().max_retries(2).build().unwrap())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap_err();
    let err = err.downcast::<RetryError>().unwrap();
    assert!(err.stop().is_overloaded_repeatedly(), "{err}");
    assert_eq!(
        err.report().last_class,
        Some(Classification::Retryable(RetryableKind::Overloaded))
    );
    assert!(err.to_string().contains("overloaded_error"), "{err}");
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test]
async fn provider_streams_pass_through_byte_identical() {
    for reply in [
        Reply::anthropic_stream(&["Hel", "lo", " wörld ", "🦀"]),
        Reply::openai_stream(&["Hel", "lo", " wörld ", "🦀"]),
    ] {
        let expected = reply.expected_body().unwrap();
        let mock = mock(Route::always(reply)).await;
        let res = stack(fast_policy().build().unwrap())
            .oneshot(messages_request(&mock.url("/v1/messages")))
            .await
            .unwrap();
        let (bytes, error) = read_all(res.into_body()).await;
        assert!(error.is_none());
        assert_eq!(bytes, expected);
        assert_eq!(mock.request_count(), 1);
    }
}

#[tokio::test]
async fn non_streamed_responses_pass_through_without_a_commit_handle() {
    let ok = Reply::anthropic_ok("plain");
    let expected = ok.expected_body().unwrap();
    let mock = mock(Route::always(ok)).await;
    let res = stack(fast_policy().build().unwrap())
        .oneshot(messages_request(&mock.url("/v1/messages")))
        .await
        .unwrap();
    assert!(
        res.extensions().get::<StreamCommit>().is_none(),
        "an unguarded response carries no commit: an outer loop may replay it"
    );
    assert_eq!(
        res.into_body().collect().await.unwrap().to_bytes(),
        expected
    );
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
