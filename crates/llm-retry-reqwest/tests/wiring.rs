//! The adapter sits in a reqwest-middleware chain like any middleware: the
//! chain above sees one call, the chain below one call per attempt, and
//! what the chain below writes into the extensions reaches the caller.
#![allow(clippy::unwrap_used)]

mod support;

use http::Extensions;
use llm_retry::RetryReport;
use llm_retry_mock::{Reply, Route};
use llm_retry_reqwest::RetryMiddleware;
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{fast_policy, mock, PROMPT};

/// Counts the calls it sees and tags the extensions with the count.
#[derive(Clone, Default)]
struct Count(Arc<AtomicU32>);

#[derive(Clone, Debug, PartialEq)]
struct SeenBy(u32);

#[async_trait::async_trait]
impl Middleware for Count {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        extensions.insert(SeenBy(n));
        next.run(request, extensions).await
    }
}

#[tokio::test(start_paused = true)]
async fn the_chain_below_sees_every_attempt_and_the_chain_above_one_call() {
    let mock = mock(Route::sequence([
        Reply::status(503),
        Reply::overloaded(),
        Reply::anthropic_ok("served"),
    ]))
    .await;
    let (above, below) = (Count::default(), Count::default());
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(above.clone())
        .with(RetryMiddleware::retry_only(llm_retry::RetryLayer::new(
            fast_policy().build().unwrap(),
        )))
        .with(below.clone())
        .build();
    let mut extensions = Extensions::new();
    let request = client
        .post(mock.url("/v1/messages"))
        .body(PROMPT)
        .build()
        .unwrap();
    let response = client
        .execute_with_extensions(request, &mut extensions)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(above.0.load(Ordering::SeqCst), 1);
    assert_eq!(below.0.load(Ordering::SeqCst), 3);
    assert_eq!(mock.request_count(), 3);
    assert_eq!(
        extensions.get::<SeenBy>(),
        Some(&SeenBy(3)),
        "the extensions of the attempt that answered"
    );
    assert_eq!(extensions.get::<RetryReport>().unwrap().attempts, 3);
}

// On the real clock: B must be sent after A's 429 was judged, which a
// paused clock (advancing while sockets are busy) cannot promise. The retry
// hook says when: the gate is told of the hold before the hook fires.
#[tokio::test]
async fn the_default_middleware_is_the_whole_client_stack() {
    // A's 429 names a 2 s wait. With the rate-limit gate, B (sent once A's
    // 429 was judged) waits it out in the gate behind A's resend, instead
    // of being sent into the same limit; without the gate it would be sent
    // at once, inside the wait.
    let mock = mock(Route::sequence_then(
        [Reply::rate_limited(Some(2))],
        Reply::anthropic_ok("served"),
    ))
    .await;
    let judged = Arc::new(tokio::sync::Notify::new());
    let policy = llm_retry::RetryPolicy::default().with_hooks(llm_retry::on_retry({
        let judged = Arc::clone(&judged);
        move |_| judged.notify_one()
    }));
    let client = support::client_with(RetryMiddleware::new(policy));
    let url = mock.url("/v1/messages");
    let a = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move {
            client
                .post(url)
                .header("x-who", "a")
                .body(PROMPT)
                .send()
                .await
        }
    });
    judged.notified().await;
    let b = client
        .post(&url)
        .header("x-who", "b")
        .body(PROMPT)
        .send()
        .await
        .unwrap();
    let a = a.await.unwrap().unwrap();
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let sent = mock.requests();
    assert_eq!(sent.len(), 3, "A twice, B once");
    let mut order: Vec<_> = sent
        .iter()
        .map(|r| r.header_str("x-who").unwrap_or("?"))
        .collect();
    assert_eq!(order[0], "a");
    // Both leave the gate when the hold ends, A's resend first (the gate's
    // own tests pin that order); over two connections they may arrive in
    // either order. Without the gate B goes at once, inside the wait.
    order[1..].sort_unstable();
    assert_eq!(order, ["a", "a", "b"]);
    // A lower bound only: a loaded machine makes these later, never earlier.
    for later in &sent[1..] {
        let after = later.received_at - sent[0].received_at;
        assert!(
            after >= Duration::from_secs(2),
            "sent {after:?} after the 429"
        );
    }
    assert_eq!(llm_retry_reqwest::report(&a).unwrap().attempts, 2);
    assert!(
        llm_retry_reqwest::report(&b).is_none(),
        "served at its first send: nothing to report"
    );
}
