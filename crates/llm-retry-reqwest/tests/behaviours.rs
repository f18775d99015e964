//! What the adapter does that reqwest-retry cannot: server-named waits, a
//! streamed request body replayed, a streamed answer never duplicated, the
//! report on every answer; and the transport failures both retry, with
//! connections that really fail.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http_body_util::StreamBody;
use llm_retry::{RetryReport, StopReason};
use llm_retry_mock::{Reply, Route};
use std::convert::Infallible;
use std::time::Duration;
use support::{client, fast_policy, mock, post, PROMPT};
use tokio::time::Instant;

/// A request body reqwest cannot clone: three chunks from a stream.
fn streamed_body(chunks: &[&'static str]) -> reqwest::Body {
    let frames = chunks.iter().map(|chunk| {
        Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(chunk.as_bytes())))
    });
    reqwest::Body::wrap(StreamBody::new(futures_util::stream::iter(
        frames.collect::<Vec<_>>(),
    )))
}

/// Reads a response to its end: the bytes that arrived, and the error that
/// ended it early, if one did.
async fn read_all(mut response: reqwest::Response) -> (Vec<u8>, Option<reqwest::Error>) {
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => return (bytes, None),
            Err(error) => return (bytes, Some(error)),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_is_honoured_over_a_shorter_computed_step() {
    let mock = mock(Route::sequence([
        Reply::rate_limited(Some(1)),
        Reply::anthropic_ok("served"),
    ]))
    .await;
    let started = Instant::now();
    let response = post(&client(fast_policy().build().unwrap()), &mock)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(response.status(), 200);
    assert!(waited >= Duration::from_secs(1), "resent after {waited:?}");
    assert!(waited < Duration::from_millis(1500), "waited {waited:?}");
    let report = llm_retry_reqwest::report(&response).unwrap();
    assert_eq!(report.server_waits_honoured, 1);
    let sent = mock.requests();
    let gap = sent[1].received_at - sent[0].received_at;
    assert!(
        gap >= Duration::from_secs(1),
        "the mock saw a resend after {gap:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_streamed_request_body_is_sent_at_once_and_replayed_byte_identical() {
    let mock = mock(Route::sequence([
        Reply::status(503),
        Reply::anthropic_ok("served"),
    ]))
    .await;
    let chunks = [&PROMPT[..10], &PROMPT[10..40], &PROMPT[40..]];
    let response = client(fast_policy().build().unwrap())
        .post(mock.url("/v1/messages"))
        .body(streamed_body(&chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    for request in &sent {
        assert_eq!(
            request.body,
            PROMPT.as_bytes(),
            "every send carries the whole body"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_past_the_replay_cap_is_sent_once_and_its_retry_refused() {
    let mock = mock(Route::sequence([
        Reply::status(503),
        Reply::anthropic_ok("served"),
    ]))
    .await;
    let policy = fast_policy().max_replay_body(16).build().unwrap();
    let chunks = [&PROMPT[..10], &PROMPT[10..40], &PROMPT[40..]];
    let response = client(policy)
        .post(mock.url("/v1/messages"))
        .body(streamed_body(&chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503, "the only answer there is");
    assert_eq!(mock.request_count(), 1);
    assert_eq!(mock.requests()[0].body, PROMPT.as_bytes());
    let report = llm_retry_reqwest::report(&response).unwrap();
    assert_eq!(report.stop, StopReason::BodyNotReplayable { cap: 16 });
}

#[tokio::test]
async fn a_streamed_answer_that_fails_after_content_is_never_replayed() {
    let full = Reply::anthropic_stream(&["The answer", " is 42", "."])
        .expected_body()
        .unwrap();
    let first_delta = find(&full, b"event: content_block_delta").unwrap();
    let cut =
        find(&full[first_delta + 1..], b"event: content_block_delta").unwrap() + first_delta + 20;
    let mock = mock(Route::sequence([
        Reply::anthropic_stream(&["The answer", " is 42", "."]).reset_after_bytes(cut),
        Reply::anthropic_stream(&["The answer", " is 42", "."]),
    ]))
    .await;
    let response = post(&client(fast_policy().build().unwrap()), &mock)
        .await
        .unwrap();
    let (bytes, error) = read_all(response).await;
    assert_eq!(bytes, &full[..cut], "the first {cut} bytes, once");
    assert!(error.is_some(), "the stream ends in an error");
    assert_eq!(
        mock.request_count(),
        1,
        "a committed stream is never replayed"
    );
}

#[tokio::test]
async fn a_streamed_answer_that_fails_before_content_is_retried_and_delivered_once() {
    let full = Reply::anthropic_stream(&["Hello"]).expected_body().unwrap();
    let mock = mock(Route::sequence([
        Reply::anthropic_stream(&["Hello"]).reset_after_bytes(40),
        Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        Reply::anthropic_stream(&["Hello"]),
    ]))
    .await;
    let response = post(&client(fast_policy().build().unwrap()), &mock)
        .await
        .unwrap();
    assert_eq!(llm_retry_reqwest::report(&response).unwrap().attempts, 3);
    let (bytes, error) = read_all(response).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(bytes, full, "exactly the stream that succeeded");
}

#[tokio::test(start_paused = true)]
async fn a_connection_reset_before_the_answer_is_retried() {
    let mock = mock(Route::sequence([
        Reply::reset_before_headers(),
        Reply::reset_before_headers(),
        Reply::anthropic_ok("served"),
    ]))
    .await;
    let response = post(&client(fast_policy().build().unwrap()), &mock)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(mock.request_count(), 3);
    assert!(response.text().await.unwrap().contains("served"));
}

#[tokio::test(start_paused = true)]
async fn connections_that_keep_failing_end_in_one_retry_error() {
    let mock = mock(Route::always(Reply::reset_before_headers())).await;
    let client = client(fast_policy().max_retries(2).build().unwrap());
    let error = post(&client, &mock).await.unwrap_err();
    assert_eq!(mock.request_count(), 3);
    let retry = llm_retry_reqwest::retry_error(&error).expect("a RetryError");
    assert_eq!(retry.report().attempts, 3);
    assert_eq!(
        retry.report().stop,
        StopReason::RetriesExhausted { max_retries: 2 }
    );
    assert!(
        std::error::Error::source(retry).is_some(),
        "the last attempt's error is kept"
    );
}

#[tokio::test]
async fn a_connection_refused_is_retried_until_the_bounds_say_stop() {
    // A port nothing listens on: every connect really fails.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/messages", listener.local_addr().unwrap());
    drop(listener);
    let client = client(fast_policy().max_retries(2).build().unwrap());
    let error = client.post(url).body(PROMPT).send().await.unwrap_err();
    let retry = llm_retry_reqwest::retry_error(&error).expect("a RetryError");
    assert_eq!(retry.report().attempts, 3);
    let last = llm_retry_reqwest::reqwest_error(&error).expect("the last attempt's reqwest error");
    assert!(last.is_connect(), "{last}");
    assert_eq!(
        retry.report().last_class,
        Some(llm_retry::classify::Classification::Retryable(
            llm_retry::classify::RetryableKind::Connect
        ))
    );
}

#[tokio::test(start_paused = true)]
async fn a_per_request_timeout_bounds_each_attempt() {
    let mock = mock(Route::sequence([
        Reply::anthropic_ok("late").delay(Duration::from_secs(30)),
        Reply::anthropic_ok("served"),
    ]))
    .await;
    let started = Instant::now();
    let response = client(fast_policy().build().unwrap())
        .post(mock.url("/v1/messages"))
        .timeout(Duration::from_secs(1))
        .body(PROMPT)
        .send()
        .await
        .unwrap();
    assert!(response.text().await.unwrap().contains("served"));
    assert_eq!(mock.request_count(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn the_answer_keeps_its_url_and_carries_the_report_both_ways() {
    let mock = mock(Route::sequence([
        Reply::overloaded(),
        Reply::anthropic_ok("ok"),
    ]))
    .await;
    let client = client(fast_policy().build().unwrap());
    let request = client
        .post(mock.url("/v1/messages"))
        .body(PROMPT)
        .build()
        .unwrap();
    let mut extensions = http::Extensions::new();
    let response = client
        .execute_with_extensions(request, &mut extensions)
        .await
        .unwrap();
    assert_eq!(response.url().as_str(), mock.url("/v1/messages"));
    let on_response = response.extensions().get::<RetryReport>().cloned().unwrap();
    assert_eq!(on_response.attempts, 2);
    assert_eq!(on_response.stop, StopReason::Succeeded);
    assert_eq!(extensions.get::<RetryReport>(), Some(&on_response));
}
