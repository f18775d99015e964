//! The gate's service paces sends, seen from outside: quotas first in
//! first out, token costs, deadlines, sends dropped while they wait, a
//! learned rate under a provider's limit, a stated window. On an
//! in-process upstream under tokio's paused clock: exact virtual send
//! times.
#![allow(clippy::unwrap_used)]

mod service_support;

use service_support::*;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use llm_retry::rate_limit::{GateError, Quotas, RateLimitLayer, TokenCost};
use llm_retry::RetryError;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// Sends `n` requests to `host` at once through a gate told `quotas`:
/// what the upstream saw, and when each went (ms from the start).
async fn at_once(quotas: Quotas, host: &str, n: usize) -> (Sends, Vec<u128>) {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(quotas)
        .unwrap()
        .layer(upstream(sends.clone()));
    let start = Instant::now();
    let calls: Vec<_> = (0..n)
        .map(|i| svc.clone().oneshot(get(&format!("http://{host}/{i}"))))
        .collect();
    for res in futures_util::future::join_all(calls).await {
        res.unwrap();
    }
    let at = offsets(&sends, start);
    (sends, at)
}

#[tokio::test(start_paused = true)]
async fn sends_are_paced_first_in_first_out() {
    let quota = Quotas::none().requests_per_minute_with_burst(600, 1);
    let (sends, at) = at_once(quota, "a.test", 6).await;
    assert_eq!(at, [0, 100, 200, 300, 400, 500]);
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
async fn a_fresh_key_lets_its_configured_burst_go_at_once() {
    // A bucket starts full: a key's first sends go as a burst, and only
    // the sends beyond it are paced.
    let quota = Quotas::none().requests_per_minute_with_burst(600, 4);
    assert_eq!(at_once(quota, "a.test", 6).await.1, [0, 0, 0, 0, 100, 200]);
    // The default burst is one second's worth.
    let quota = Quotas::none().requests_per_minute(120);
    assert_eq!(at_once(quota, "b.test", 3).await.1, [0, 0, 500]);
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
