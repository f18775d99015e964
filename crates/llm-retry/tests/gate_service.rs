//! The gate's service on an in-process upstream under tokio's paused
//! clock, alone or under the retry layer: exact virtual send times, through
//! the crate's public items only.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use llm_retry::rate_limit::{GateError, Quotas, RateLimitLayer, TokenCost};
use llm_retry::{ReplayBody, RetryError, RetryLayer, RetryPolicy};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Sends = Arc<Mutex<Vec<(Instant, String)>>>;

/// An upstream recording when each request arrives; `/busy` answers 429
/// with `retry-after: 2`, `/nowait` a 429 naming no wait.
fn upstream<B: Send + 'static>(
    sends: Sends,
) -> impl Service<Request<B>, Response = Response<Full<Bytes>>, Error = llm_retry::BoxError> + Clone
{
    tower::service_fn(move |req: Request<B>| {
        let sends = Arc::clone(&sends);
        async move {
            sends
                .lock()
                .unwrap()
                .push((Instant::now(), req.uri().to_string()));
            if req.uri().path() == "/slow" {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            let mut res = Response::new(Full::new(Bytes::new()));
            let wait = match req.uri().path() {
                "/busy" => Some("2"),
                "/huge" => Some("99999999999999999999"),
                _ => None,
            };
            if let Some(wait) = wait {
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static(wait));
            }
            if req.uri().path() == "/nowait" {
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            }
            Ok::<_, llm_retry::BoxError>(res)
        }
    })
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

/// A request for a gate under the retry layer.
fn post(uri: &str) -> Request<Full<Bytes>> {
    Request::post(uri).body(Full::default()).unwrap()
}

/// The body the gate sees under the retry layer.
type Replayed = ReplayBody<Full<Bytes>>;

/// The retry layer that judges each answer and tells the gate what it
/// meant for the key: the gate learns only from it.
fn judged<S>(policy: llm_retry::RetryPolicyBuilder, gate: S) -> llm_retry::Retry<S> {
    let policy = policy.no_budget().build().unwrap();
    RetryLayer::new(policy).layer(gate)
}

/// A policy that resends nothing.
fn once() -> llm_retry::RetryPolicyBuilder {
    RetryPolicy::builder().max_retries(0)
}

fn offsets(sends: &Sends, start: Instant) -> Vec<u128> {
    sends
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| (*t - start).as_millis())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_gate_and_its_future_say_what_they_are() {
    let mut svc = RateLimitLayer::learned().layer(upstream(Sends::default()));
    svc.ready().await.unwrap();
    let future = svc.call(get("http://a.test/"));
    assert!(format!("{future:?}").starts_with("ResponseFuture"));
    future.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn sends_are_paced_first_in_first_out() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(600, 1))
        .unwrap()
        .layer(upstream(sends.clone()));
    let start = Instant::now();
    let calls: Vec<_> = (0..6)
        .map(|i| svc.clone().oneshot(get(&format!("http://a.test/{i}"))))
        .collect();
    for res in futures_util::future::join_all(calls).await {
        res.unwrap();
    }
    assert_eq!(offsets(&sends, start), [0, 100, 200, 300, 400, 500]);
    let order: Vec<String> = sends
        .lock()
        .unwrap()
        .iter()
        .map(|(_, u)| u.clone())
        .collect();
    let want: Vec<String> = (0..6).map(|i| format!("http://a.test/{i}")).collect();
    assert_eq!(order, want, "slots are handed out in arrival order");
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_holds_the_whole_key() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let svc = judged(once(), gate);
    let start = Instant::now();
    let busy = svc
        .clone()
        .oneshot(post("http://a.test/busy"))
        .await
        .unwrap();
    assert_eq!(busy.status(), http::StatusCode::TOO_MANY_REQUESTS);
    svc.clone()
        .oneshot(post("http://a.test/next"))
        .await
        .unwrap();
    svc.clone()
        .oneshot(post("http://b.test/other-key"))
        .await
        .unwrap();
    assert_eq!(offsets(&sends, start), [0, 2_000, 2_000]);
}

#[tokio::test(start_paused = true)]
async fn under_a_gate_that_only_holds_a_resend_sleeps_its_own_spread_wait() {
    // The gate holds the key for the named 2 s but paces nothing: the
    // retry layer's resend is the request's own, spread past the 2 s (up
    // to a tenth more), not released by the gate at its end.
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let svc = judged(RetryPolicy::builder().max_retries(1).seed(7), gate);
    let start = Instant::now();
    let busy = svc.oneshot(post("http://a.test/busy")).await.unwrap();
    assert_eq!(busy.status(), http::StatusCode::TOO_MANY_REQUESTS);
    let sent = offsets(&sends, start);
    assert_eq!(sent.len(), 2);
    assert!(
        sent[1] > 2_000 && sent[1] <= 2_200,
        "resent {} ms after the first, past the named 2 s",
        sent[1]
    );
}

#[tokio::test(start_paused = true)]
async fn tokens_per_minute_pace_by_cost_and_refuse_what_never_fits() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none().tokens_per_minute(6_000))
        .unwrap()
        .layer(upstream(sends.clone()));
    let start = Instant::now();
    let with_cost = |cost| {
        let mut req = get("http://a.test/");
        req.extensions_mut().insert(TokenCost(cost));
        req
    };
    svc.clone().oneshot(with_cost(6_000)).await.unwrap();
    svc.clone().oneshot(with_cost(3_000)).await.unwrap();
    assert_eq!(
        offsets(&sends, start),
        [0, 30_000],
        "3000 tokens need half a minute to refill"
    );
    let err = svc.clone().oneshot(with_cost(7_000)).await.unwrap_err();
    let err = err.downcast::<GateError>().unwrap();
    assert_eq!(
        *err,
        GateError::NeverFits {
            cost: 7_000,
            capacity: 6_000
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_slot_past_the_deadline_is_refused_at_once() {
    // A quota of one send per 2 s: the second send's slot is past its
    // request's deadline of 1 s.
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(30, 1))
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let deadline = Duration::from_secs(1);
    let svc = judged(once().max_elapsed(deadline), gate);
    svc.clone()
        .oneshot(post("http://a.test/first"))
        .await
        .unwrap();
    let start = Instant::now();
    let err = svc
        .clone()
        .oneshot(post("http://a.test/"))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let err = err.downcast::<RetryError>().unwrap();
    assert_eq!(
        err.report().attempts,
        0,
        "a send the gate refused never reached the upstream: {}",
        err.report()
    );
    let source = std::error::Error::source(&*err).unwrap();
    assert!(matches!(
        source.downcast_ref::<GateError>(),
        Some(GateError::PastDeadline { .. })
    ));
    assert_eq!(sends.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_waiting_sends_nothing() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .unwrap()
        .layer(upstream(sends.clone()));
    svc.clone()
        .oneshot(get("http://a.test/first"))
        .await
        .unwrap();
    let waiting = svc.clone().oneshot(get("http://a.test/second"));
    assert!(tokio::time::timeout(Duration::from_millis(500), waiting)
        .await
        .is_err());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(sends.lock().unwrap().len(), 1);
}

/// An upstream with a token bucket of `per_sec` sends a second holding 5,
/// answering 429 without naming a wait when it is empty.
fn limited_upstream<B: Send + 'static>(
    per_sec: u32,
    sends: Sends,
) -> impl Service<Request<B>, Response = Response<Full<Bytes>>, Error = llm_retry::BoxError> + Clone
{
    let tat = Arc::new(Mutex::new(Instant::now()));
    let interval = Duration::from_secs(1) / per_sec;
    tower::service_fn(move |req: Request<B>| {
        let (sends, tat) = (Arc::clone(&sends), Arc::clone(&tat));
        async move {
            let now = Instant::now();
            let admitted = {
                let mut tat = tat.lock().unwrap();
                let due = (*tat).max(now) + interval;
                let ok = due - now <= interval * 5;
                if ok {
                    *tat = due;
                }
                ok
            };
            sends
                .lock()
                .unwrap()
                .push((now, if admitted { "ok".into() } else { "429".into() }));
            let _ = req;
            let mut res = Response::new(Full::new(Bytes::new()));
            if !admitted {
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            }
            Ok::<_, llm_retry::BoxError>(res)
        }
    })
}

/// 20 closed-loop clients, each sending as fast as the gate lets it for
/// `run_secs`; returns the share of 429s and the successes per second after
/// `warmup_secs`.
async fn throttled_share(quotas: Quotas, run_secs: u64, warmup_secs: u64) -> (f64, f64) {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(quotas)
        .unwrap()
        .layer(limited_upstream::<Replayed>(10, sends.clone()));
    let svc = judged(once(), gate);
    let start = Instant::now();
    let clients = (0..20).map(|_| {
        let svc = svc.clone();
        async move {
            while start.elapsed() < Duration::from_secs(run_secs) {
                let _ = svc.clone().oneshot(post("http://a.test/")).await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    futures_util::future::join_all(clients).await;
    let sends = sends.lock().unwrap();
    let late: Vec<_> = sends
        .iter()
        .filter(|(t, _)| *t - start >= Duration::from_secs(warmup_secs))
        .collect();
    let refused = late.iter().filter(|(_, s)| s == "429").count();
    let share = refused as f64 / late.len() as f64;
    let goodput = (late.len() - refused) as f64 / (run_secs - warmup_secs) as f64;
    (share, goodput)
}

#[tokio::test(start_paused = true)]
async fn adaptive_pacing_settles_below_the_providers_limit() {
    let (refused, goodput) = throttled_share(Quotas::none().adaptive(1.0, 20.0), 30, 10).await;
    assert!(
        refused < 0.05,
        "the learned rate keeps 429s rare: {refused}"
    );
    assert!(
        goodput >= 8.5,
        "and uses most of the 10/s capacity: {goodput}"
    );
    let (unpaced, _) = throttled_share(Quotas::none(), 2, 0).await;
    assert!(
        unpaced > 0.9,
        "without pacing nearly every send is refused: {unpaced}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_huge_named_wait_fails_fast_and_holds_the_key_no_longer_than_the_limit() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let limit = Duration::from_secs(30);
    let svc = judged(
        RetryPolicy::builder().max_retries(1).max_server_wait(limit),
        gate,
    );
    let start = Instant::now();
    let too_long = |response: Response<llm_retry::RetryBody<Full<Bytes>>>| {
        let report = response
            .extensions()
            .get::<llm_retry::RetryReport>()
            .unwrap();
        matches!(report.stop, llm_retry::StopReason::ServerWaitTooLong { .. })
    };
    let huge = svc.clone().oneshot(post("http://a.test/huge"));
    assert!(too_long(huge.await.unwrap()));
    // Later sends meet the key's hold, longer than they honour. Until one
    // corroborates it they are sent, as without a gate: each is refused
    // the same way.
    for _ in 0..2 {
        tokio::time::advance(Duration::from_secs(1)).await;
        let huge = svc.clone().oneshot(post("http://a.test/huge"));
        assert!(too_long(huge.await.unwrap()));
    }
    // Corroborated: the next request fails fast with the same words
    // instead of waiting out the limit in silence, and sends nothing.
    tokio::time::advance(Duration::from_secs(1)).await;
    let err = svc
        .clone()
        .oneshot(post("http://a.test/next"))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let err = err.downcast::<RetryError>().unwrap();
    assert!(
        matches!(
            err.report().stop,
            llm_retry::StopReason::ServerWaitTooLong { limit: l, .. } if l == limit
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("more than the 30 s limit"),
        "{err}"
    );
    assert_eq!(err.report().attempts, 0, "{err}");
    // The hold ends at the limit after the last refusal: the key is tried
    // again then.
    tokio::time::sleep_until(start + Duration::from_secs(2) + limit).await;
    svc.clone()
        .oneshot(post("http://a.test/later"))
        .await
        .unwrap();
    assert_eq!(offsets(&sends, start), [0, 1_000, 2_000, 32_000]);
}

#[tokio::test(start_paused = true)]
async fn a_huge_named_wait_no_later_send_corroborates_holds_no_one_who_cannot_wait() {
    // `/huge` is refused for a reason of its own: the requests after it
    // are sent, as without a gate, and served.
    let sends = Sends::default();
    let gate = RateLimitLayer::learned().layer(upstream::<Replayed>(sends.clone()));
    let limit = Duration::from_secs(30);
    let svc = judged(
        RetryPolicy::builder().max_retries(1).max_server_wait(limit),
        gate,
    );
    let start = Instant::now();
    let huge = svc.clone().oneshot(post("http://a.test/huge")).await;
    assert_eq!(huge.unwrap().status(), http::StatusCode::TOO_MANY_REQUESTS);
    tokio::time::advance(Duration::from_secs(1)).await;
    let next = svc.clone().oneshot(post("http://a.test/next")).await;
    assert_eq!(next.unwrap().status(), http::StatusCode::OK);
    assert_eq!(offsets(&sends, start), [0, 1_000]);
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

#[tokio::test(start_paused = true)]
async fn a_send_dropped_while_it_waits_gives_its_place_up() {
    let sends = Sends::default();
    let gate = RateLimitLayer::learned().layer(upstream::<Replayed>(sends.clone()));
    let svc = judged(once(), gate);
    // Teach the key one send a second (five successes in 5 s, then a burst
    // of 429s naming no wait: most sends refused), through the layer itself.
    for _ in 0..5 {
        svc.clone().oneshot(post("http://a.test/")).await.unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    let burst = (0..40).map(|_| svc.clone().oneshot(post("http://a.test/nowait")));
    for throttled in futures_util::future::join_all(burst).await {
        assert_eq!(
            throttled.unwrap().status(),
            http::StatusCode::TOO_MANY_REQUESTS
        );
    }
    let start = Instant::now();
    // Three queue up, in order; the second is dropped before its turn.
    let mut first = Box::pin(svc.clone().oneshot(post("http://a.test/1")));
    let _ = tokio::time::timeout(Duration::ZERO, &mut first).await;
    let second = svc.clone().oneshot(post("http://a.test/2"));
    assert!(tokio::time::timeout(Duration::ZERO, second).await.is_err());
    let mut third = Box::pin(svc.clone().oneshot(post("http://a.test/3")));
    let _ = tokio::time::timeout(Duration::ZERO, &mut third).await;
    let (first, third) = tokio::join!(first, third);
    first.unwrap();
    third.unwrap();
    let sent: Vec<(Duration, String)> = sends
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, uri)| *t >= start && !uri.ends_with("nowait"))
        .map(|(t, uri)| (*t - start, uri.clone()))
        .collect();
    let uris: Vec<&str> = sent.iter().map(|(_, u)| u.as_str()).collect();
    assert_eq!(uris, ["http://a.test/1", "http://a.test/3"]);
    assert!(
        sent[1].0 - sent[0].0 <= Duration::from_secs(1),
        "the third took the second's place: {sent:?}"
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

#[tokio::test(start_paused = true)]
async fn sends_that_never_go_give_their_quota_slots_back() {
    use futures_util::FutureExt;
    let sends = Sends::default();
    let mut svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .unwrap()
        .layer(upstream(sends.clone()));
    let start = Instant::now();
    svc.ready().await.unwrap();
    svc.call(get("http://a.test/first")).await.unwrap();
    // 50 queue up behind it: half are polled (waiting), half never are;
    // all are dropped, in arrival order.
    let mut queued: Vec<_> = (0..50)
        .map(|i| Box::pin(svc.call(get(&format!("http://a.test/{i}")))))
        .collect();
    for waiting in queued.iter_mut().take(25) {
        assert!(waiting.as_mut().now_or_never().is_none());
    }
    drop(queued);
    // The next send waits for one period after the first, not for 50 more.
    svc.ready().await.unwrap();
    svc.call(get("http://a.test/next")).await.unwrap();
    assert_eq!(offsets(&sends, start), [0, 1_000]);
}

#[tokio::test(start_paused = true)]
async fn a_slot_given_up_in_the_middle_keeps_the_queue_in_order_and_returns_with_its_tail() {
    let sends = Sends::default();
    let mut svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .unwrap()
        .layer(upstream(sends.clone()));
    let start = Instant::now();
    svc.call(get("http://a.test/first")).await.unwrap();
    let q1 = svc.call(get("http://a.test/q1"));
    let q2 = svc.call(get("http://a.test/q2"));
    let q3 = svc.call(get("http://a.test/q3"));
    drop(q2);
    // q3 keeps its slot: the queue never sends faster than the quota.
    let (r1, r3) = tokio::join!(q1, q3);
    r1.unwrap();
    r3.unwrap();
    assert_eq!(offsets(&sends, start), [0, 1_000, 3_000]);
    // Now the tail went: a late send after q1 and a given-up q2 and q3...
    let q4 = svc.call(get("http://a.test/q4"));
    let q5 = svc.call(get("http://a.test/q5"));
    drop(q5);
    drop(q4);
    // ...gives both back: the next send goes one period after q3.
    svc.call(get("http://a.test/next")).await.unwrap();
    assert_eq!(offsets(&sends, start), [0, 1_000, 3_000, 4_000]);
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

#[tokio::test(start_paused = true)]
async fn the_request_whose_429_held_the_key_keeps_its_place() {
    // The first request is answered 429 `retry-after: 2`; 20 more arrive
    // during the hold. The first goes first when the hold ends, not after
    // the 20.
    let sends = Sends::default();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let upstream = {
        let sends = sends.clone();
        tower::service_fn(move |req: Request<Replayed>| {
            let (sends, answered) = (Arc::clone(&sends), Arc::clone(&answered));
            async move {
                sends
                    .lock()
                    .unwrap()
                    .push((Instant::now(), req.uri().path().to_owned()));
                let mut res = Response::new(Full::new(Bytes::new()));
                if answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                    res.headers_mut()
                        .insert("retry-after", http::HeaderValue::from_static("2"));
                }
                Ok::<_, llm_retry::BoxError>(res)
            }
        })
    };
    let gate = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(600, 1))
        .unwrap()
        .layer(upstream);
    let svc = judged(RetryPolicy::builder().max_retries(3), gate);
    let start = Instant::now();
    let first = tokio::spawn(svc.clone().oneshot(post("http://a.test/first")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let crowd: Vec<_> = (0..20)
        .map(|i| tokio::spawn(svc.clone().oneshot(post(&format!("http://a.test/n{i}")))))
        .collect();
    assert_eq!(first.await.unwrap().unwrap().status(), http::StatusCode::OK);
    for call in crowd {
        assert_eq!(call.await.unwrap().unwrap().status(), http::StatusCode::OK);
    }
    let sent = sends.lock().unwrap().clone();
    let after_hold: Vec<&str> = sent
        .iter()
        .filter(|(t, _)| *t - start >= Duration::from_secs(2))
        .map(|(_, path)| path.as_str())
        .collect();
    assert_eq!(after_hold.first(), Some(&"/first"), "{sent:?}");
    assert_eq!(after_hold.len(), 21);
}

/// An upstream admitting 3 requests per 5 s window, saying so on every
/// answer as OpenAI does (`x-ratelimit-remaining-requests`,
/// `x-ratelimit-reset-requests`), and answering 429 past it.
fn windowed_upstream(
    sends: Sends,
) -> impl Service<Request<Replayed>, Response = Response<Full<Bytes>>, Error = llm_retry::BoxError> + Clone
{
    let start = Instant::now();
    let window = Duration::from_secs(5);
    let counts = Arc::new(Mutex::new((0u64, 0u64)));
    tower::service_fn(move |req: Request<Replayed>| {
        let (sends, counts) = (Arc::clone(&sends), Arc::clone(&counts));
        async move {
            let now = Instant::now();
            let index = ((now - start).as_nanos() / window.as_nanos()) as u64;
            let used = {
                let mut counts = counts.lock().unwrap();
                if counts.0 != index {
                    *counts = (index, 0);
                }
                counts.1 += 1;
                counts.1
            };
            let admitted = used <= 3;
            sends.lock().unwrap().push((
                now,
                format!(
                    "{} {}",
                    req.uri().path(),
                    if admitted { "ok" } else { "429" }
                ),
            ));
            let resets_in = window
                - Duration::from_nanos(((now - start).as_nanos() % window.as_nanos()) as u64);
            let mut res = Response::new(Full::new(Bytes::new()));
            let headers = res.headers_mut();
            headers.insert(
                "x-ratelimit-remaining-requests",
                http::HeaderValue::from_str(&3u64.saturating_sub(used).to_string()).unwrap(),
            );
            headers.insert(
                "x-ratelimit-reset-requests",
                http::HeaderValue::from_str(&format!("{}ms", resets_in.as_millis())).unwrap(),
            );
            if !admitted {
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            }
            Ok::<_, llm_retry::BoxError>(res)
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_window_the_provider_states_paces_the_key_before_its_first_429() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(windowed_upstream(sends.clone()));
    let svc = judged(once(), gate);
    let start = Instant::now();
    for i in 0..6 {
        let res = svc
            .clone()
            .oneshot(post(&format!("http://a.test/{i}")))
            .await
            .unwrap();
        assert_eq!(res.status(), http::StatusCode::OK, "request {i}");
    }
    let sent = sends.lock().unwrap().clone();
    assert!(sent.iter().all(|(_, s)| s.ends_with("ok")), "{sent:?}");
    // Three in the first window, the fourth at its reset.
    assert_eq!(sent[3].0 - start, Duration::from_secs(5), "{sent:?}");
}

#[tokio::test(start_paused = true)]
async fn a_token_quota_429_does_not_cut_the_learned_request_rate() {
    // Large requests exhaust a tokens-per-minute quota and get 429s whose
    // headers say so; small ones are fine. The 429s say nothing about the
    // request rate: small requests keep flowing unpaced.
    let sends = Sends::default();
    let upstream = {
        let sends = sends.clone();
        tower::service_fn(move |req: Request<Replayed>| {
            let sends = Arc::clone(&sends);
            async move {
                sends
                    .lock()
                    .unwrap()
                    .push((Instant::now(), req.uri().path().to_owned()));
                let mut res = Response::new(Full::new(Bytes::new()));
                if req.uri().path().starts_with("/big") {
                    *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                    let headers = res.headers_mut();
                    for (name, value) in [
                        ("x-ratelimit-remaining-tokens", "0"),
                        ("x-ratelimit-remaining-requests", "450"),
                        ("x-ratelimit-reset-tokens", "20ms"),
                    ] {
                        headers.insert(name, http::HeaderValue::from_static(value));
                    }
                }
                Ok::<_, llm_retry::BoxError>(res)
            }
        })
    };
    let gate = RateLimitLayer::learned().layer(upstream);
    let svc = judged(once(), gate);
    for i in 0..10 {
        svc.clone()
            .oneshot(post(&format!("http://a.test/big{i}")))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let start = Instant::now();
    let small: Vec<_> = (0..20)
        .map(|i| {
            svc.clone()
                .oneshot(post(&format!("http://a.test/small{i}")))
        })
        .collect();
    for res in futures_util::future::join_all(small).await {
        assert_eq!(res.unwrap().status(), http::StatusCode::OK);
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "20 small requests took {:?}: the token 429s cut the request rate",
        start.elapsed()
    );
}
