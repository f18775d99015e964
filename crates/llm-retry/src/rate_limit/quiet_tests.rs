//! A learning gate before its first news: its sends go unkeyed, and the
//! first key its news makes takes over what the quiet sends showed.
//!
//! Each test drives `RetryLayer` over `RateLimitLayer::learned()` against
//! an in-process upstream under tokio's paused clock, and looks at the
//! gate's keys only to see what the sends left there.
#![allow(clippy::unwrap_used)]

use super::RateLimitLayer;
use crate::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

fn request(model: &str) -> Request<Full<Bytes>> {
    let body = format!(r#"{{"model":"{model}","max_tokens":16,"messages":[]}}"#);
    Request::post("http://api.test/v1/messages")
        .header("x-api-key", "sk-test")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn answer(code: u16) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from_static(b"{}")));
    *res.status_mut() = StatusCode::from_u16(code).unwrap();
    res
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .no_budget()
        .max_retries(40)
        .seed(7)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_learning_gate_keeps_no_key_until_an_answer_says_something() {
    let refuse = Arc::new(AtomicBool::new(false));
    let upstream = {
        let refuse = Arc::clone(&refuse);
        tower::service_fn(move |_: Request<ReplayBody<Full<Bytes>>>| {
            let code = if refuse.swap(false, Ordering::SeqCst) {
                429
            } else {
                200
            };
            async move { Ok::<_, crate::BoxError>(answer(code)) }
        })
    };
    let layer = RateLimitLayer::learned();
    let svc = RetryLayer::new(policy()).layer(layer.layer(upstream));
    for _ in 0..20 {
        let res = svc.clone().oneshot(request("m")).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }
    assert_eq!(
        layer.gate.key_stats().0,
        0,
        "successes stating nothing key nothing"
    );
    assert!(layer.gate.quiet().is_some());

    refuse.store(true, Ordering::SeqCst);
    let res = svc.clone().oneshot(request("m")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK, "served at its resend");
    assert_eq!(layer.gate.key_stats().0, 1, "the 429 keyed its key");
    assert!(
        layer.gate.quiet().is_none(),
        "every send is keyed from then on"
    );
    svc.clone().oneshot(request("other")).await.unwrap();
    assert_eq!(layer.gate.key_stats().0, 2, "another model is another key");
}

#[tokio::test(start_paused = true)]
async fn the_first_rate_counts_the_successes_the_quiet_gate_let_go() {
    // Ten requests served a tenth of a second apart, then a crowd the
    // upstream refuses for a second, naming no wait: the key's first
    // rate is what the quiet sends showed (ten a second), not a guess from
    // the instant the key was first keyed.
    let start = Instant::now();
    let upstream = tower::service_fn(move |_: Request<ReplayBody<Full<Bytes>>>| {
        let elapsed = start.elapsed();
        let refused =
            elapsed >= Duration::from_millis(1_000) && elapsed < Duration::from_millis(2_000);
        async move { Ok::<_, crate::BoxError>(answer(if refused { 429 } else { 200 })) }
    });
    let layer = RateLimitLayer::learned();
    let svc = RetryLayer::new(policy()).layer(layer.layer(upstream));
    for _ in 0..10 {
        svc.clone().oneshot(request("m")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let crowd: Vec<_> = (0..40)
        .map(|_| tokio::spawn(svc.clone().oneshot(request("m"))))
        .collect();
    for call in crowd {
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    let rate = layer.gate.learned_rates()[0];
    assert!(
        (5.0..=12.0).contains(&rate),
        "first rate {rate}/s, from ten served in a second"
    );
}
