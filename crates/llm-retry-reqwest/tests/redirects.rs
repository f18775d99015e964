//! A body reqwest can clone reaches it as those bytes on every attempt, so
//! reqwest follows a `307`/`308` redirect of a POST itself, body and all;
//! a streamed first send cannot be followed, and is handed over as it came.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http_body_util::StreamBody;
use llm_retry::{ClientLayer, RetryLayer};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use llm_retry_reqwest::RetryMiddleware;
use std::convert::Infallible;
use support::{client_with, fast_policy, PROMPT};

/// `/v1/messages` plays `first`, then redirects with `status`, to
/// `/v1/moved`, which answers.
async fn redirecting(first: Option<Reply>, status: u16) -> MockServer {
    let redirect = Reply::status(status).header("location", "/v1/moved");
    let route = match first {
        Some(first) => Route::sequence([first, redirect]),
        None => Route::always(redirect),
    };
    MockServer::start(
        Script::new()
            .route("/v1/messages", route)
            .route("/v1/moved", Route::always(Reply::anthropic_ok("moved"))),
    )
    .await
    .unwrap()
}

/// Both stacks: the whole client stack (its gate reads the body before the
/// first send) and retries only (nothing does).
fn middlewares() -> [RetryMiddleware; 2] {
    let policy = || fast_policy().build().unwrap();
    [
        RetryMiddleware::from(ClientLayer::new(policy())),
        RetryMiddleware::retry_only(RetryLayer::new(policy())),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_307_or_308_of_a_post_is_followed_with_its_body() {
    for status in [307, 308] {
        for middleware in middlewares() {
            let mock = redirecting(None, status).await;
            let response = client_with(middleware)
                .post(mock.url("/v1/messages"))
                .body(PROMPT)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{status}");
            assert_eq!(response.url().as_str(), mock.url("/v1/moved"));
            let attempts = llm_retry_reqwest::report(&response).map_or(1, |r| r.attempts);
            assert_eq!(attempts, 1, "reqwest followed it, not the engine");
            let sent = mock.requests();
            let paths: Vec<_> = sent.iter().map(|r| r.path.as_str()).collect();
            assert_eq!(paths, ["/v1/messages", "/v1/moved"], "{status}");
            for request in &sent {
                assert_eq!(request.method, http::Method::POST);
                assert_eq!(request.body, PROMPT.as_bytes(), "{status}");
            }
        }
    }
}

/// The resend is the engine's (a 503 first); its 307 is followed by
/// reqwest, from the bytes the engine kept.
#[tokio::test(start_paused = true)]
async fn a_retry_that_is_redirected_is_followed_with_its_body() {
    for middleware in middlewares() {
        let mock = redirecting(Some(Reply::status(503)), 307).await;
        let response = client_with(middleware)
            .post(mock.url("/v1/messages"))
            .body(PROMPT)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(llm_retry_reqwest::report(&response).unwrap().attempts, 2);
        let sent = mock.requests();
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[2].path, "/v1/moved");
        assert!(sent.iter().all(|r| r.body == PROMPT.as_bytes()));
    }
}

/// A streamed first send cannot be followed (reqwest cannot clone it): the
/// 307 comes back as it came, after one send.
#[tokio::test(start_paused = true)]
async fn a_redirect_of_a_streamed_first_send_is_handed_over() {
    for middleware in middlewares() {
        let mock = redirecting(None, 307).await;
        let chunks = [&PROMPT[..10], &PROMPT[10..]];
        let frames: Vec<_> = chunks
            .iter()
            .map(|c| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(c.as_bytes()))))
            .collect();
        let body = reqwest::Body::wrap(StreamBody::new(futures_util::stream::iter(frames)));
        let response = client_with(middleware)
            .post(mock.url("/v1/messages"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 307);
        assert_eq!(mock.request_count(), 1);
        assert_eq!(mock.requests()[0].body, PROMPT.as_bytes());
    }
}
