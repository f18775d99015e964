//! Hundreds of concurrent streams through the gateway while its first
//! target turns a share of them away: every client gets exactly one
//! complete stream, and every send is accounted for.
#![allow(clippy::unwrap_used)]

mod support;

use http_body_util::BodyExt;
use llm_retry_mock::{Reply, Route};
use support::{gateway, no_env, post, target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_concurrent_streams_fail_over_with_nothing_lost_or_duplicated() {
    let good = Reply::anthropic_stream(&["One", " stream", " each"]);
    let expected = good.expected_body().unwrap();
    // The first target turns every third request away before content.
    let a = target(Route::mix([
        (2, good.clone()),
        (
            1,
            Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        ),
    ]))
    .await;
    let b = target(Route::always(good)).await;
    let toml = support::two_targets(&a, &b, "");
    let gw = gateway(&toml, no_env).await;
    let url = gw.url("/v1/messages");
    let clients = (0..300).map(|i| {
        let url = url.clone();
        tokio::spawn(async move {
            let body =
                format!(r#"{{"model":"m","max_tokens":8,"stream":true,"messages":[],"id":{i}}}"#);
            let response = support::client().request(post(&url, &body)).await.unwrap();
            assert_eq!(response.status(), 200);
            response.into_body().collect().await.unwrap().to_bytes()
        })
    });
    let bodies = futures_util::future::join_all(clients).await;
    for body in bodies {
        assert_eq!(body.unwrap(), expected, "exactly one complete stream");
    }
    let (to_a, to_b) = (a.request_count(), b.request_count());
    assert_eq!(to_a, 300, "every request tried the first target once");
    assert!(to_b > 50 && to_b < 150, "a third failed over: {to_b}");
    // Every request that went to b was turned away by a first.
    let ids = |mock: &llm_retry_mock::MockServer| -> Vec<u64> {
        mock.requests()
            .iter()
            .map(|r| r.body_json().unwrap()["id"].as_u64().unwrap())
            .collect()
    };
    let mut at_b = ids(&b);
    at_b.sort_unstable();
    at_b.dedup();
    assert_eq!(at_b.len(), to_b, "no request went to b twice");
    assert_eq!(gw.gateway.in_flight(), 0, "every stream ended");
}
