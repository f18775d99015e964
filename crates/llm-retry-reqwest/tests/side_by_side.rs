//! The same upstreams through reqwest-retry and through this adapter, in
//! one run: what each does with a named wait and a streamed request body.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http_body_util::StreamBody;
use llm_retry_mock::{MockServer, Reply, Route};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use std::convert::Infallible;
use std::time::Duration;
use support::{client, fast_policy, mock, PROMPT};

/// reqwest-retry with the same millisecond steps as [`fast_policy`].
fn reqwest_retry() -> ClientWithMiddleware {
    let policy = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(1), Duration::from_millis(5))
        .build_with_max_retries(10);
    ClientBuilder::new(reqwest::Client::new())
        .with(RetryTransientMiddleware::new_with_policy(policy))
        .build()
}

fn streamed_body() -> reqwest::Body {
    let frames = [&PROMPT[..30], &PROMPT[30..]]
        .map(|c| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(c.as_bytes()))));
    reqwest::Body::wrap(StreamBody::new(futures_util::stream::iter(frames)))
}

/// The gap between the first two sends the mock saw.
fn first_resend_gap(mock: &MockServer) -> Duration {
    let sent = mock.requests();
    sent[1].received_at - sent[0].received_at
}

#[tokio::test(start_paused = true)]
async fn a_two_second_retry_after_is_honoured_here_and_ignored_there() {
    let route = || Route::sequence([Reply::rate_limited(Some(2)), Reply::anthropic_ok("ok")]);
    let theirs = mock(route()).await;
    let ours = mock(route()).await;
    for (client, upstream) in [
        (reqwest_retry(), &theirs),
        (client(fast_policy().build().unwrap()), &ours),
    ] {
        let response = support::post(&client, upstream).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    assert!(
        first_resend_gap(&theirs) < Duration::from_secs(1),
        "reqwest-retry resends at once"
    );
    assert!(
        first_resend_gap(&ours) >= Duration::from_secs(2),
        "the adapter waits as told"
    );
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_is_sent_here_and_refused_before_sending_there() {
    let route = || Route::sequence([Reply::status(503), Reply::anthropic_ok("ok")]);
    let theirs = mock(route()).await;
    let ours = mock(route()).await;
    let refused = reqwest_retry()
        .post(theirs.url("/v1/messages"))
        .body(streamed_body())
        .send()
        .await;
    // reqwest-retry cannot clone the request, so it fails before any send.
    assert!(refused.is_err());
    assert_eq!(theirs.request_count(), 0);
    let served = client(fast_policy().build().unwrap())
        .post(ours.url("/v1/messages"))
        .body(streamed_body())
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(ours.request_count(), 2);
    assert!(ours.requests().iter().all(|r| r.body == PROMPT.as_bytes()));
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_false_is_final_here_and_resent_there() {
    let route = || {
        Route::sequence([
            Reply::status(503).header("x-should-retry", "false"),
            Reply::anthropic_ok("ok"),
        ])
    };
    let theirs = mock(route()).await;
    let ours = mock(route()).await;
    let response = support::post(&reqwest_retry(), &theirs).await.unwrap();
    assert_eq!(
        (response.status().as_u16(), theirs.request_count()),
        (200, 2)
    );
    let response = support::post(&client(fast_policy().build().unwrap()), &ours)
        .await
        .unwrap();
    assert_eq!((response.status().as_u16(), ours.request_count()), (503, 1));
}
