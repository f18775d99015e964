//! The learned gate against upstreams shaped like real providers, on the
//! paused clock: a window that resets for everyone at once, and a bucket
//! that states its quota per minute but names waits in whole seconds.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{RetryLayer, RetryPolicy};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// Every answer's response time: the first wave is out before the first
/// answer is back.
const LATENCY: Duration = Duration::from_millis(20);

/// Arrival time and verdict of every send.
type Sends = Arc<Mutex<Vec<(Instant, bool)>>>;

type Upstream = tower::util::BoxCloneSyncService<
    Request<llm_retry::ReplayBody<Full<Bytes>>>,
    Response<Full<Bytes>>,
    llm_retry::BoxError,
>;

fn answer(ok: bool, headers: &[(&'static str, String)]) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::new()));
    if !ok {
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    }
    for (name, value) in headers {
        res.headers_mut()
            .insert(*name, HeaderValue::from_str(value).unwrap());
    }
    res
}

/// Every request before `reset` is refused, each told the same instant
/// (`retry-after-ms` to it, `retry-after: 1`); every request after is served.
fn window_reset(reset: Duration, sends: Sends) -> Upstream {
    let start = Instant::now();
    tower::util::BoxCloneSyncService::new(tower::service_fn(move |_req| {
        let sends = Arc::clone(&sends);
        async move {
            tokio::time::sleep(LATENCY).await;
            let now = Instant::now();
            let left = (start + reset).saturating_duration_since(now);
            let ok = left.is_zero();
            sends.lock().unwrap().push((now, ok));
            let wait = [
                ("retry-after-ms", left.as_millis().to_string()),
                ("retry-after", "1".to_owned()),
            ];
            Ok::<_, llm_retry::BoxError>(answer(ok, if ok { &[] } else { &wait }))
        }
    }))
}

/// A bucket of `per_sec` a second in bursts of `burst`, stated the way
/// Anthropic states it: `anthropic-ratelimit-requests-limit` per minute on
/// every answer, and a 429's wait as `retry-after` in whole seconds.
fn anthropic_bucket(per_sec: u32, burst: u32, sends: Sends) -> Upstream {
    let level = Arc::new(Mutex::new((f64::from(burst), Instant::now())));
    tower::util::BoxCloneSyncService::new(tower::service_fn(move |_req| {
        let (sends, level) = (Arc::clone(&sends), Arc::clone(&level));
        async move {
            tokio::time::sleep(LATENCY).await;
            let now = Instant::now();
            let (ok, left) = {
                let mut level = level.lock().unwrap();
                let refill = (now - level.1).as_secs_f64() * f64::from(per_sec);
                level.0 = (level.0 + refill).min(f64::from(burst));
                level.1 = now;
                let ok = level.0 >= 1.0;
                if ok {
                    level.0 -= 1.0;
                }
                (ok, level.0.floor())
            };
            sends.lock().unwrap().push((now, ok));
            let mut headers = vec![
                (
                    "anthropic-ratelimit-requests-limit",
                    (per_sec * 60).to_string(),
                ),
                ("anthropic-ratelimit-requests-remaining", left.to_string()),
                (
                    "anthropic-ratelimit-requests-reset",
                    humantime::format_rfc3339_seconds(
                        std::time::SystemTime::now() + Duration::from_secs(1),
                    )
                    .to_string(),
                ),
            ];
            if !ok {
                headers.push(("retry-after", "1".to_owned()));
            }
            Ok::<_, llm_retry::BoxError>(answer(ok, &headers))
        }
    }))
}

/// `clients` closed-loop clients sending `each` requests through the
/// default gate; returns when the last ended, and every answer's status.
async fn run(upstream: Upstream, clients: usize, each: usize) -> (Duration, Vec<StatusCode>) {
    let policy = RetryPolicy::builder().no_budget().build().unwrap();
    let svc = RetryLayer::new(policy).layer(RateLimitLayer::learned().layer(upstream));
    let start = Instant::now();
    let clients = (0..clients).map(|_| {
        let svc = svc.clone();
        async move {
            let mut statuses = Vec::new();
            for _ in 0..each {
                let req = Request::post("http://a.test/v1/messages")
                    .body(Full::default())
                    .unwrap();
                statuses.push(svc.clone().oneshot(req).await.unwrap().status());
            }
            statuses
        }
    });
    let statuses = futures_util::future::join_all(clients).await.concat();
    (start.elapsed(), statuses)
}

#[tokio::test(start_paused = true)]
async fn a_window_reset_releases_the_waiting_sends_together_not_one_per_named_wait() {
    // 50 requests at once, each told to come back at the same instant
    // 800 ms away: a window's reset, not a rate of one send per 800 ms.
    let sends = Sends::default();
    let start = Instant::now();
    let (took, statuses) = run(
        window_reset(Duration::from_millis(800), sends.clone()),
        50,
        1,
    )
    .await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let sends = sends.lock().unwrap().clone();
    assert_eq!(sends.len(), 100, "each request refused once, then served");
    assert!(took < Duration::from_millis(1000), "took {took:?}");
    // From the reset on, paced a millisecond or less apart and speeding
    // up: not together (each waiting out its own wait, with jitter, would
    // bunch at random), and not one per named wait.
    let served: Vec<Duration> = sends
        .iter()
        .filter(|(_, ok)| *ok)
        .map(|(at, _)| *at - start)
        .collect();
    assert_eq!(served.len(), 50);
    let reset = Duration::from_millis(800);
    assert!(served.iter().all(|at| *at >= reset), "{served:?}");
    assert!(
        served.windows(2).all(|w| w[1] > w[0]),
        "one at a time: {served:?}"
    );
    // 50 a millisecond apart (the upstream records each after its reply's
    // latency, so they start after the reset).
    assert!(
        served[49] - served[0] < Duration::from_millis(60),
        "{served:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stated_quota_paces_the_key_and_a_whole_second_wait_does_not_hold_it() {
    // 10 requests/s in bursts of 2, 20 clients × 3 requests: at the quota
    // the 60 take (60 − 2) / 10 = 5.8 s. Holding the key for every
    // rounded-up second instead leaves the bucket refilling unused.
    let sends = Sends::default();
    let (took, statuses) = run(anthropic_bucket(10, 2, sends.clone()), 20, 3).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let sends = sends.lock().unwrap().clone();
    let refused = sends.iter().filter(|(_, ok)| !ok).count();
    // The first wave goes before any answer came back: 18 of its 20 are
    // refused; the quota, once stated, keeps the rest from being refused.
    assert!(refused <= 19, "{refused} refused");
    // 6.3 s on the paused clock; holding the key for each rounded-up
    // second takes 6.7 s.
    assert!(took <= Duration::from_millis(6_500), "took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_told_whole_seconds_still_waits_them_on_a_paced_key() {
    // The key is paced at its stated quota, so the rounded-up second does
    // not hold it; the request that was told it still honours it.
    let sends = Sends::default();
    let (_, statuses) = run(anthropic_bucket(10, 1, sends.clone()), 2, 1).await;
    assert_eq!(statuses, [StatusCode::OK, StatusCode::OK]);
    let sends = sends.lock().unwrap().clone();
    let refused = sends.iter().position(|(_, ok)| !ok).unwrap();
    let resent = sends[refused + 1..].iter().find(|(_, ok)| *ok).unwrap();
    assert!(
        resent.0 - sends[refused].0 >= Duration::from_secs(1),
        "{sends:?}"
    );
}

/// `529 overloaded_error` past `max` requests in flight, each answer
/// taking 100 ms.
fn concurrency_limited(max: usize, sends: Sends) -> Upstream {
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tower::util::BoxCloneSyncService::new(tower::service_fn(move |_req| {
        let (sends, in_flight) = (Arc::clone(&sends), Arc::clone(&in_flight));
        async move {
            use std::sync::atomic::Ordering;
            let ok = in_flight.fetch_add(1, Ordering::SeqCst) < max;
            sends.lock().unwrap().push((Instant::now(), ok));
            if ok {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut res = answer(true, &[]);
            if !ok {
                *res.status_mut() = StatusCode::from_u16(529).unwrap();
            }
            Ok::<_, llm_retry::BoxError>(res)
        }
    }))
}

#[tokio::test(start_paused = true)]
async fn overloads_cap_the_keys_sends_in_flight_not_its_rate() {
    // 40 clients, 10 requests each, against room for 10 at a time: the
    // key's ceiling keeps the overloads rare and the 400 requests take
    // little more than the 4 s that room allows.
    let sends = Sends::default();
    let (took, statuses) = run(concurrency_limited(10, sends.clone()), 40, 10).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let sends = sends.lock().unwrap().clone();
    let refused = sends.iter().filter(|(_, ok)| !ok).count();
    // 30: the first wave's refusals (the ceiling forms once overloads are
    // most of the key's answers, about ten in a row, and this upstream
    // refuses at once), and after that few or none, when the ceiling
    // probes past the room.
    assert!(refused <= 33, "{refused} overloads");
    // 4.0 s on the paused clock: a refused send's resend waits for a slot,
    // not a backoff (which made it 4.3 to 5.3 s).
    assert!(took <= Duration::from_millis(4_200), "took {took:?}");
}

/// A token bucket of `per_sec` tokens a second (as much in a burst),
/// requests unlimited, stated as OpenAI states it on every answer; a
/// request costs its `max_tokens` plus a quarter of its bytes.
fn token_bucket(per_sec: u64, sends: Sends) -> Upstream {
    let level = Arc::new(Mutex::new((per_sec as f64, Instant::now())));
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |req: Request<llm_retry::ReplayBody<Full<Bytes>>>| {
            let (sends, level) = (Arc::clone(&sends), Arc::clone(&level));
            async move {
                use http_body_util::BodyExt;
                let body = req.into_body().collect().await?.to_bytes();
                // Its `max_tokens` plus a quarter of its bytes, read as the
                // upstream reads it (a JSON parse), not with the gate's skim.
                let max_tokens = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|json| json.get("max_tokens")?.as_u64())
                    .unwrap_or(0);
                let cost = (max_tokens + body.len() as u64 / 4) as f64;
                tokio::time::sleep(LATENCY).await;
                let now = Instant::now();
                let (ok, left, wait) = {
                    let mut level = level.lock().unwrap();
                    let refill = (now - level.1).as_secs_f64() * per_sec as f64;
                    level.0 = (level.0 + refill).min(per_sec as f64);
                    level.1 = now;
                    let ok = level.0 >= cost;
                    if ok {
                        level.0 -= cost;
                    }
                    let wait = ((cost - level.0).max(0.0) / per_sec as f64 * 1000.0).ceil();
                    (ok, level.0.floor(), wait)
                };
                sends.lock().unwrap().push((now, ok));
                let mut headers = vec![
                    ("x-ratelimit-limit-requests", "1000000".to_owned()),
                    ("x-ratelimit-remaining-requests", "999999".to_owned()),
                    ("x-ratelimit-reset-requests", "0ms".to_owned()),
                    ("x-ratelimit-limit-tokens", (per_sec * 60).to_string()),
                    ("x-ratelimit-remaining-tokens", left.to_string()),
                ];
                if !ok {
                    headers.push(("retry-after-ms", wait.to_string()));
                }
                Ok::<_, llm_retry::BoxError>(answer(ok, &headers))
            }
        },
    ))
}

#[tokio::test(start_paused = true)]
async fn under_a_stated_token_quota_large_requests_wait_their_turn_and_small_ones_flow() {
    // 20 000 tokens a second; 40 clients, one request in ten asking for
    // 8 000 tokens, the rest for 100: about 900 tokens a request, so the
    // 200 requests take about 9 s, most of it for the large ones. Unpaced,
    // the small ones take every token as it comes and the large ones run
    // out of retries.
    let sends = Sends::default();
    let policy = RetryPolicy::builder().no_budget().build().unwrap();
    let svc = RetryLayer::new(policy)
        .layer(RateLimitLayer::learned().layer(token_bucket(20_000, sends.clone())));
    let clients = (0..40u64).map(|c| {
        let svc = svc.clone();
        async move {
            let mut statuses = Vec::new();
            for n in 0..5u64 {
                let max_tokens = if (c * 5 + n) % 10 == 9 { 8_000 } else { 100 };
                let body = format!(r#"{{"model":"m","max_tokens":{max_tokens}}}"#);
                let req = Request::post("http://a.test/v1/chat/completions")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                statuses.push(svc.clone().oneshot(req).await.unwrap().status());
            }
            statuses
        }
    });
    let start = Instant::now();
    let statuses = futures_util::future::join_all(clients).await.concat();
    let took = start.elapsed();
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let sends = sends.lock().unwrap().clone();
    let refused = sends.iter().filter(|(_, ok)| !ok).count();
    // 1 refused and 8.2 s on the paused clock.
    assert!(refused <= 10, "{refused} refused");
    assert!(took <= Duration::from_secs(10), "took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_configured_token_quota_estimates_each_cost_from_the_body() {
    // 600 tokens a minute in bursts of 100: the first request (90 + 4)
    // goes at once, the second waits for the 88 tokens it lacks, 8.8 s.
    let quotas = Quotas::none().tokens_per_minute_with_burst(600, 100);
    let policy = RetryPolicy::builder().no_budget().build().unwrap();
    let svc = RetryLayer::new(policy).layer(
        RateLimitLayer::new(quotas)
            .unwrap()
            .layer(window_reset(Duration::ZERO, Sends::default())),
    );
    let start = Instant::now();
    for _ in 0..2 {
        let req = Request::post("http://a.test/v1/messages")
            .body(Full::new(Bytes::from_static(br#"{"max_tokens":90}"#)))
            .unwrap();
        assert_eq!(
            svc.clone().oneshot(req).await.unwrap().status(),
            StatusCode::OK
        );
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(8), "took {took:?}");
}
