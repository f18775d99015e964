//! A learning gate before its first news: its sends go unkeyed, and the
//! first key its news makes takes over what the quiet sends showed.
//!
//! Each test drives `RetryLayer` over `RateLimitLayer::learned()` against
//! an in-process upstream under tokio's paused clock, and looks at the
//! gate's keys only to see what the sends left there.
#![allow(clippy::unwrap_used)]

use super::RateLimitLayer;
use crate::{ReplayBody, RetryPolicy};
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

/// An upstream of a `ClientLayer`'s stack.
type Upstream = tower::util::BoxCloneService<
    Request<ReplayBody<Full<Bytes>>>,
    Response<Full<Bytes>>,
    crate::BoxError,
>;

/// When each send arrived since now.
type Sends = Arc<std::sync::Mutex<Vec<Duration>>>;

/// An upstream that answers its `nth` send (from 0) with `answer(nth)`,
/// recording when each arrived.
fn recorded(
    answer: impl Fn(usize) -> Response<Full<Bytes>> + Clone + Send + Sync + 'static,
) -> (Upstream, Sends) {
    let start = Instant::now();
    let sends = Sends::default();
    let log = Arc::clone(&sends);
    let upstream = tower::service_fn(move |_: Request<ReplayBody<Full<Bytes>>>| {
        let mut log = log.lock().unwrap();
        log.push(start.elapsed());
        std::future::ready(Ok(answer(log.len() - 1)))
    });
    (Upstream::new(upstream), sends)
}

/// A `ClientLayer` over `layer`'s gate.
fn client(layer: &RateLimitLayer) -> crate::ClientLayer {
    crate::ClientLayer::new(policy()).rate_limit(layer.clone())
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
    let svc = client(&layer).layer(upstream);
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
    let svc = client(&layer).layer(upstream);
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
    let (upstream, sends) = recorded(|nth| {
        if nth > 0 {
            return answer(200);
        }
        let mut res = answer(429);
        res.headers_mut()
            .insert("retry-after", http::HeaderValue::from_static("5"));
        res
    });
    let layer = RateLimitLayer::learned();
    let svc = client(&layer).layer(upstream);
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
async fn a_send_noted_while_quiet_passes_its_gate_whatever_news_came_since() {
    // The loop looked while the gate was quiet and noted the send; news
    // came before its call reached the gate: the gate lets it pass (the
    // loop reports its answer), keying nothing and booking nothing.
    let upstream = tower::service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, crate::BoxError>(answer(200))
    });
    let layer = RateLimitLayer::learned();
    let (mut gate, shared) = layer.layer_under_retry(upstream);
    let now = Instant::now();
    shared.hold(
        7,
        0,
        now,
        Duration::from_secs(60),
        Duration::from_secs(60),
        false,
    );
    assert!(!shared.is_quiet(), "news came");
    let call = super::offer::noted(|| gate.call(request("m")));
    assert!(
        !super::offer::take_noted(),
        "the mark is gone with the call"
    );
    let res = tokio::time::timeout(Duration::from_secs(1), call).await;
    assert_eq!(res.expect("not held").unwrap().status(), StatusCode::OK);
    assert_eq!(
        layer.gate.key_stats().0,
        1,
        "only the held key: the send keyed none"
    );
    // An unmarked call is keyed as ever (and waits out nothing here: its
    // key is another).
    gate.call(request("m")).await.unwrap();
    assert_eq!(layer.gate.key_stats().0, 2);
}

/// An upstream whose first readiness fails as a refused connection would.
#[derive(Clone)]
struct RefusedOnce(Arc<AtomicBool>);

impl Service<Request<ReplayBody<Full<Bytes>>>> for RefusedOnce {
    type Response = Response<Full<Bytes>>;
    type Error = crate::BoxError;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        if self.0.swap(false, Ordering::SeqCst) {
            let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            return std::task::Poll::Ready(Err(Box::new(refused)));
        }
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<ReplayBody<Full<Bytes>>>) -> Self::Future {
        std::future::ready(Ok(answer(200)))
    }
}

#[tokio::test(start_paused = true)]
async fn a_quiet_gate_leaves_its_inner_service_s_readiness_to_the_attempt() {
    // A send that passes the quiet gate is readied in the attempt, as any
    // send the gate takes: a readiness failure is the attempt's, judged
    // and retried, not the stack's own `poll_ready` error.
    let layer = RateLimitLayer::learned();
    let svc = client(&layer).layer(RefusedOnce(Arc::new(AtomicBool::new(true))));
    let res = svc.oneshot(request("m")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let report = res.extensions().get::<crate::RetryReport>().unwrap();
    assert_eq!(report.attempts, 2, "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn adaptive_bounds_that_start_paced_key_every_send_from_the_first() {
    // Bounds of 1 to 10 a second start every key at 10 a second: nothing
    // to learn before it is paced, so no quiet start.
    let (upstream, sends) = recorded(|_| answer(200));
    let quotas = super::Quotas::none().adaptive(1.0, 10.0);
    let layer = RateLimitLayer::new(quotas).unwrap();
    let svc = client(&layer).layer(upstream);
    let calls: Vec<_> = (0..5)
        .map(|_| tokio::spawn(svc.clone().oneshot(request("m"))))
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.last(), Some(&Duration::from_millis(400)), "{sends:?}");
}
