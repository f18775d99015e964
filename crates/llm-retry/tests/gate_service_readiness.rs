//! The gate's service and the services around it, seen from outside: it
//! holds and wastes no inner readiness while a send waits, and an attempt
//! timeout counts from the send, not from the queue, however late a layer
//! between reaches the gate. On an in-process upstream under tokio's
//! paused clock.
#![allow(clippy::unwrap_used)]

mod service_support;

use service_support::*;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{RetryError, RetryPolicy};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

#[tokio::test(start_paused = true)]
async fn the_gate_and_its_future_say_what_they_are() {
    let mut svc = RateLimitLayer::learned().layer(upstream(Sends::default()));
    svc.ready().await.unwrap();
    let future = svc.call(get("http://a.test/"));
    assert!(format!("{future:?}").starts_with("ResponseFuture"));
    future.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_send_waiting_for_its_slot_holds_no_inner_readiness() {
    use futures_util::FutureExt;
    let sends = Sends::default();
    let limited = tower::limit::ConcurrencyLimitLayer::new(1).layer(upstream(sends.clone()));
    let mut svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .unwrap()
        .layer(limited);
    svc.ready().await.unwrap();
    svc.call(get("http://a.test/first")).await.unwrap();
    // The second send waits a second for its slot...
    svc.ready().await.unwrap();
    let second = svc.call(get("http://a.test/second"));
    // ...without keeping the only concurrency permit from the next caller.
    let ready = svc.ready().now_or_never();
    assert!(
        matches!(ready, Some(Ok(_))),
        "the inner service is free while the send waits"
    );
    // The permit just reserved goes back with the service; then the
    // waiting send takes it when its slot comes.
    drop(svc);
    second.await.unwrap();
    assert_eq!(
        offsets(&sends, tokio::time::Instant::now() - Duration::from_secs(1)),
        [0, 1_000]
    );
}

/// A 429 holds the key 2 s; the next send waits that out in the gate
/// under a 1 s attempt timeout and is not cut: the timeout counts from the
/// send, not from the queue. Returns when the test started.
async fn a_held_send_outlasts_the_attempt_timeout<S, B>(svc: &S) -> Instant
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = llm_retry::BoxError> + Clone,
{
    let start = Instant::now();
    let busy = svc
        .clone()
        .oneshot(post("http://a.test/busy"))
        .await
        .unwrap();
    assert_eq!(busy.status(), http::StatusCode::TOO_MANY_REQUESTS);
    let next = svc
        .clone()
        .oneshot(post("http://a.test/next"))
        .await
        .unwrap();
    assert_eq!(
        next.status(),
        http::StatusCode::OK,
        "held 2 s in the gate, not cut at 1 s"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    start
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_counts_from_the_send_not_from_the_queue() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let svc = judged(once().attempt_timeout(Duration::from_secs(1)), gate);
    let start = a_held_send_outlasts_the_attempt_timeout(&svc).await;
    // Once sent, a slow answer is cut at 1 s and counts as a timeout.
    let err = svc
        .clone()
        .oneshot(post("http://b.test/slow"))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let err = err.downcast::<RetryError>().unwrap();
    assert_eq!(
        err.report().last_class,
        Some(llm_retry::classify::Classification::Retryable(
            llm_retry::classify::RetryableKind::Timeout
        )),
        "{err}"
    );
}

/// A layer between the retry layer and the gate. It calls the gate only
/// when first polled, as a buffer's worker does (the gate sees the attempt
/// later than the retry layer sent it), and from its call number
/// `hangs_from` on it answers nothing, as a layer that short-circuits some
/// attempts (a cache, a circuit breaker) might hang: those never reach the
/// gate.
#[derive(Clone)]
struct Between<S> {
    gate: S,
    calls: Arc<std::sync::atomic::AtomicU32>,
    hangs_from: u32,
}

impl<S> Between<S> {
    fn deferred(gate: S) -> Between<S> {
        Between {
            gate,
            calls: Arc::default(),
            hangs_from: u32::MAX,
        }
    }

    fn gate_only_first(gate: S) -> Between<S> {
        Between {
            hangs_from: 1,
            ..Between::deferred(gate)
        }
    }
}

impl<S, R> Service<R> for Between<S>
where
    S: Service<R> + Clone + 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>>>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        let call = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let hangs = call >= self.hangs_from;
        let mut gate = self.gate.clone();
        Box::pin(async move {
            tokio::task::yield_now().await;
            if hangs {
                std::future::pending::<()>().await;
            }
            gate.ready().await?.call(request).await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_counts_from_the_send_when_the_gate_is_reached_late() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let svc = judged(
        once().attempt_timeout(Duration::from_secs(1)),
        Between::deferred(gate),
    );
    a_held_send_outlasts_the_attempt_timeout(&svc).await;
}

#[tokio::test(start_paused = true)]
async fn an_attempt_the_gate_never_takes_is_timed_by_the_retry_layer_even_after_one_it_took() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let policy = RetryPolicy::builder()
        .max_retries(1)
        .initial_backoff(Duration::from_millis(100))
        .jitter(llm_retry::backoff::Jitter::None)
        .attempt_timeout(Duration::from_secs(1))
        .max_elapsed(Duration::from_secs(60));
    let svc = judged(policy, Between::gate_only_first(gate));
    let start = Instant::now();
    // The first attempt goes through the gate (a 429 naming no wait); the
    // second never reaches it, so the retry layer's 1 s timer is its bound.
    let err = svc
        .oneshot(post("http://a.test/nowait"))
        .await
        .unwrap_err()
        .downcast::<RetryError>()
        .unwrap();
    assert_eq!(
        sends.lock().unwrap().len(),
        1,
        "one send reached the upstream"
    );
    assert_eq!(
        err.report().last_class,
        Some(llm_retry::classify::Classification::Retryable(
            llm_retry::classify::RetryableKind::Timeout
        )),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "cut at its attempt timeout, not at the deadline: {:?}",
        start.elapsed()
    );
}

/// A service that counts readiness it granted but that no call used.
#[derive(Clone, Default)]
struct Reservations {
    wasted: Arc<std::sync::atomic::AtomicUsize>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    ready: bool,
}

impl Drop for Reservations {
    fn drop(&mut self) {
        if self.ready {
            self.wasted
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Service<Request<()>> for Reservations {
    type Response = Response<Full<Bytes>>;
    type Error = llm_retry::BoxError;
    type Future = std::future::Ready<Result<Response<Full<Bytes>>, llm_retry::BoxError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), llm_retry::BoxError>> {
        self.ready = true;
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        assert!(self.ready, "called without readiness");
        self.ready = false;
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(Ok(Response::new(Full::default())))
    }
}

#[tokio::test(start_paused = true)]
async fn the_gate_throws_no_readiness_away() {
    let inner = Reservations::default();
    let (wasted, calls) = (Arc::clone(&inner.wasted), Arc::clone(&inner.calls));
    let mut svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .unwrap()
        .layer(inner);
    for _ in 0..3 {
        svc.ready().await.unwrap();
        svc.call(get("http://a.test/")).await.unwrap();
    }
    drop(svc);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(
        wasted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every readiness the inner service granted was used by a call"
    );
}
