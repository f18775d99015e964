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
use tower::{Layer, Service, ServiceExt};

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

#[tokio::test(start_paused = true)]
async fn a_client_layer_keys_the_first_news_of_a_send_it_noted_itself() {
    // The first answer is a 429 naming 5 s; a request sent after it goes
    // no sooner: the note the retry loop kept reached the gate, which now
    // holds the key.
    let start = Instant::now();
    let sends = Arc::new(std::sync::Mutex::new(Vec::new()));
    let upstream = {
        let sends = Arc::clone(&sends);
        tower::service_fn(move |_: Request<ReplayBody<Full<Bytes>>>| {
            let mut sends = sends.lock().unwrap();
            sends.push(start.elapsed());
            let res = if sends.len() == 1 {
                let mut res = answer(429);
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("5"));
                res
            } else {
                answer(200)
            };
            async move { Ok::<_, crate::BoxError>(res) }
        })
    };
    let layer = RateLimitLayer::learned();
    let svc = crate::ClientLayer::new(policy())
        .rate_limit(layer.clone())
        .layer(upstream);
    let first = tokio::spawn(svc.clone().oneshot(request("m")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(layer.gate.quiet().is_none(), "the 429 was news");
    let second = svc.clone().oneshot(request("m")).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 3, "{sends:?}");
    assert!(
        sends[1..].iter().all(|at| *at >= Duration::from_secs(5)),
        "the key was held for the named wait: {sends:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn readiness_taken_while_quiet_serves_the_send_made_after_the_first_news() {
    // Under a ClientLayer's retry loop a quiet gate is ready when its inner
    // service is. News before the call: the keyed send goes through the
    // instance readied then, not a clone that would wait for its slot.
    let upstream = tower::service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, crate::BoxError>(answer(200))
    });
    let limited = tower::limit::ConcurrencyLimitLayer::new(1).layer(upstream);
    let layer = RateLimitLayer::learned();
    let (mut gate, _) = layer.layer_under_retry(limited);
    std::future::poll_fn(|cx| gate.poll_ready(cx))
        .await
        .unwrap();
    let now = Instant::now();
    layer.gate.hold(
        7,
        0,
        now,
        Duration::from_millis(1),
        Duration::from_secs(1),
        false,
    );
    assert!(
        layer.gate.quiet().is_none(),
        "news came between ready and call"
    );
    let call = gate.call(request("m"));
    let res = tokio::time::timeout(Duration::from_secs(60), call).await;
    assert_eq!(
        res.expect("no wait for a slot held by the readied instance")
            .unwrap()
            .status(),
        StatusCode::OK
    );
}
