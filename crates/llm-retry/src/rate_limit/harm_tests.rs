//! First, do no harm: on shapes where the provider's answers give no
//! evidence that the key is out of capacity, the learned gate under the
//! retry layer costs a request no more than the retry layer alone.
//!
//! Every test drives the public stack (`RetryLayer` over
//! `RateLimitLayer::learned()`) against an in-process upstream under
//! tokio's paused clock, and compares it with `RetryLayer` alone on the
//! same workload: virtual times, not wall-clock ones.
#![allow(clippy::unwrap_used)]

use crate::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};

use super::RateLimitLayer;

type Body = ReplayBody<Full<Bytes>>;

/// How the upstream answers its `nth` send (counted from 0) of a request
/// to `path`, `since` its first send.
type Answer = fn(nth: u64, path: &str, since: Duration) -> Response<Full<Bytes>>;

/// What a workload saw.
#[derive(Debug, Clone)]
struct Tally {
    completion: Duration,
    p50: Duration,
    mean: Duration,
    sends: u64,
    served: usize,
    requests: usize,
}

/// An upstream that answers after `latency` as `answer` says, counting sends.
#[derive(Clone)]
struct Upstream {
    answer: Answer,
    latency: Duration,
    sends: Arc<AtomicU64>,
    log: Arc<Mutex<Vec<(Duration, String)>>>,
    start: Instant,
}

impl Upstream {
    fn new(answer: Answer, latency: Duration) -> Upstream {
        Upstream {
            answer,
            latency,
            sends: Arc::default(),
            log: Arc::default(),
            start: Instant::now(),
        }
    }

    fn service(&self) -> BoxCloneService<Request<Body>, Response<Full<Bytes>>, crate::BoxError> {
        let this = self.clone();
        BoxCloneService::new(tower::service_fn(move |req: Request<Body>| {
            let this = this.clone();
            async move {
                let nth = this.sends.fetch_add(1, Ordering::SeqCst);
                let since = this.start.elapsed();
                let path = req.uri().path().to_owned();
                drop(req);
                this.log.lock().unwrap().push((since, path.clone()));
                tokio::time::sleep(this.latency).await;
                Ok::<_, crate::BoxError>((this.answer)(nth, &path, since))
            }
        }))
    }

    /// When each send to `path` arrived.
    fn sent_to(&self, path: &str) -> Vec<Duration> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(_, p)| p == path)
            .map(|(t, _)| *t)
            .collect()
    }
}

/// A deterministic "random" share: `pct` of every hundred sends, spread.
fn picked(nth: u64, pct: u64) -> bool {
    let mut x = nth.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    x % 100 < pct
}

fn ok() -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from_static(b"{}")))
}

fn status(code: u16, headers: &[(&'static str, &'static str)]) -> Response<Full<Bytes>> {
    let mut res = ok();
    *res.status_mut() = StatusCode::from_u16(code).unwrap();
    for (name, value) in headers {
        res.headers_mut()
            .insert(*name, http::HeaderValue::from_static(value));
    }
    res
}

fn request(model: &str) -> Request<Full<Bytes>> {
    request_to(&format!("/{model}"), model)
}

/// A request to `path` whose body names `model`.
fn request_to(path: &str, model: &str) -> Request<Full<Bytes>> {
    let body = format!(r#"{{"model":"{model}","max_tokens":16,"messages":[]}}"#);
    Request::post(format!("http://api.test{path}"))
        .header("x-api-key", "sk-test")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .no_budget()
        .max_consecutive_overloads(100)
        .seed(7)
        .build()
        .unwrap()
}

/// `clients` closed-loop clients, each sending `each` requests for `model`
/// through `svc`.
async fn crowd<S>(svc: S, clients: usize, each: usize, model: &'static str) -> Tally
where
    S: Service<Request<Full<Bytes>>, Response = Response<Body2>, Error = crate::BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let svc = svc.clone();
        tasks.spawn(async move {
            let mut ends = Vec::new();
            for _ in 0..each {
                let began = Instant::now();
                let res = svc.clone().oneshot(request(model)).await;
                let ok = res.is_ok_and(|r| r.status().is_success());
                ends.push((began.elapsed(), Instant::now() - start, ok));
            }
            ends
        });
    }
    let mut latencies = Vec::new();
    let mut completion = Duration::ZERO;
    let mut served = 0;
    while let Some(ends) = tasks.join_next().await {
        for (latency, end, ok) in ends.unwrap() {
            latencies.push(latency);
            completion = completion.max(end);
            served += usize::from(ok);
        }
    }
    latencies.sort();
    let total: Duration = latencies.iter().sum();
    Tally {
        completion,
        p50: latencies[latencies.len() / 2],
        mean: total / u32::try_from(latencies.len()).unwrap(),
        sends: 0,
        served,
        requests: clients * each,
    }
}

type Body2 = crate::RetryBody<Full<Bytes>>;

/// The same workload through the gated stack and through the retry layer
/// alone, each against a fresh upstream: (gated, alone).
async fn gated_and_alone(
    answer: Answer,
    latency: Duration,
    clients: usize,
    each: usize,
) -> (Tally, Tally) {
    gate_and_alone(RateLimitLayer::learned(), answer, latency, clients, each).await
}

/// As [`gated_and_alone`], through `gate`.
async fn gate_and_alone(
    gate: RateLimitLayer,
    answer: Answer,
    latency: Duration,
    clients: usize,
    each: usize,
) -> (Tally, Tally) {
    let upstream = Upstream::new(answer, latency);
    let gated = RetryLayer::new(policy()).layer(gate.layer(upstream.service()));
    let mut with_gate = crowd(gated, clients, each, "m").await;
    with_gate.sends = upstream.sends.load(Ordering::SeqCst);

    let upstream = Upstream::new(answer, latency);
    let alone = RetryLayer::new(policy()).layer(upstream.service());
    let mut without = crowd(alone, clients, each, "m").await;
    without.sends = upstream.sends.load(Ordering::SeqCst);
    (with_gate, without)
}

fn assert_no_worse(gated: &Tally, alone: &Tally, what: &str) {
    assert!(
        gated.served * 100 >= gated.requests * 99,
        "{what}: served {} of {}",
        gated.served,
        gated.requests
    );
    let time = gated.completion.as_secs_f64() / alone.completion.as_secs_f64();
    assert!(
        time <= 1.2,
        "{what}: completion {time:.2}× the retry layer alone's\ngated {gated:?}\nalone {alone:?}"
    );
    let sends = gated.sends as f64 / alone.sends as f64;
    assert!(
        sends <= 1.1,
        "{what}: {sends:.2}× the sends of the retry layer alone\ngated {gated:?}\nalone {alone:?}"
    );
}

/// 15 % of answers are 429s naming a second, whatever the rate.
fn refused_a_second(nth: u64, _: &str, _: Duration) -> Response<Full<Bytes>> {
    if picked(nth, 15) {
        status(429, &[("retry-after", "1")])
    } else {
        ok()
    }
}

#[tokio::test(start_paused = true)]
async fn random_429s_naming_a_second_cost_no_more_than_no_gate() {
    let (gated, alone) = gated_and_alone(refused_a_second, Duration::from_millis(20), 60, 10).await;
    assert_no_worse(&gated, &alone, "429 retry-after: 1 to 15 %");
}

/// A gate told a quota far above what the crowd sends contests the holds
/// random 429s put as a learning one does: later sends served end them.
#[tokio::test(start_paused = true)]
async fn random_429s_naming_a_second_cost_a_configured_gate_no_more_than_no_gate() {
    let none = super::Quotas::none;
    for (what, quotas) in [
        (
            "requests",
            none().requests_per_minute_with_burst(600_000, 60),
        ),
        (
            "tokens",
            none().tokens_per_minute_with_burst(60_000_000, 1_000_000),
        ),
    ] {
        let gate = RateLimitLayer::new(quotas).unwrap();
        let (gated, alone) =
            gate_and_alone(gate, refused_a_second, Duration::from_millis(20), 60, 10).await;
        let what = format!("told a {what} quota, 429 retry-after: 1 to 15 %");
        assert_no_worse(&gated, &alone, &what);
        // The completion is the unluckiest request's: the mean shows the
        // holds every request waited out.
        let mean = gated.mean.as_secs_f64() / alone.mean.as_secs_f64();
        assert!(
            mean <= 1.2,
            "{what}: mean {mean:.2}× the retry layer alone's"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn random_429s_naming_no_wait_cost_no_more_than_no_gate() {
    fn answer(nth: u64, _: &str, _: Duration) -> Response<Full<Bytes>> {
        if picked(nth, 15) {
            status(429, &[])
        } else {
            ok()
        }
    }
    let (gated, alone) = gated_and_alone(answer, Duration::from_millis(20), 60, 10).await;
    assert_no_worse(&gated, &alone, "429 without a wait to 15 %");
}

/// An organisation quota others drain: most answers are 429s whatever
/// this client's rate. A learned rate starts (the share is high), and its
/// cuts do not lower the share: it must stand down, not sink to its floor.
#[tokio::test(start_paused = true)]
async fn mostly_refused_whatever_the_rate_costs_no_more_than_no_gate() {
    fn answer(nth: u64, _: &str, _: Duration) -> Response<Full<Bytes>> {
        if picked(nth, 70) {
            status(429, &[])
        } else {
            ok()
        }
    }
    let (gated, alone) = gated_and_alone(answer, Duration::from_millis(20), 60, 5).await;
    // Which requests run out of retries differs from run to run: the
    // served count within 2 %, and the average request's time.
    assert!(
        gated.served * 100 >= alone.served * 98,
        "gated {gated:?}\nalone {alone:?}"
    );
    assert!(
        gated.sends as f64 <= alone.sends as f64 * 1.1,
        "{gated:?}\n{alone:?}"
    );
    assert!(
        gated.mean.as_secs_f64() <= alone.mean.as_secs_f64() * 1.2,
        "gated {gated:?}\nalone {alone:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn random_529s_cost_no_more_than_no_gate() {
    fn answer(nth: u64, _: &str, _: Duration) -> Response<Full<Bytes>> {
        if picked(nth, 10) {
            status(529, &[])
        } else {
            ok()
        }
    }
    let (gated, alone) = gated_and_alone(answer, Duration::from_millis(100), 60, 10).await;
    assert_no_worse(&gated, &alone, "529 to 10 %");
    let p50 = gated.p50.as_secs_f64() / alone.p50.as_secs_f64();
    assert!(
        p50 <= 1.2,
        "p50 {p50:.2}×\ngated {gated:?}\nalone {alone:?}"
    );
}

/// A platform overloaded whatever we hold: most answers are 529s, so a
/// ceiling is set, and its cuts do not lower them. It stands down.
#[tokio::test(start_paused = true)]
async fn a_ceiling_whose_cuts_do_not_lower_overloads_stands_down() {
    fn answer(nth: u64, _: &str, _: Duration) -> Response<Full<Bytes>> {
        if picked(nth, 60) {
            status(529, &[])
        } else {
            ok()
        }
    }
    let (gated, alone) = gated_and_alone(answer, Duration::from_millis(100), 60, 10).await;
    // Completion is the one request that meets the longest run of
    // overloads, and its backoffs: which request that is differs from run
    // to run. The typical and the average request tell the gate's cost.
    assert!(gated.served * 100 >= gated.requests * 99, "{gated:?}");
    assert!(
        gated.sends as f64 <= alone.sends as f64 * 1.1,
        "{gated:?}\n{alone:?}"
    );
    for (what, gated_time, alone_time) in [
        ("p50", gated.p50, alone.p50),
        ("mean", gated.mean, alone.mean),
    ] {
        let ratio = gated_time.as_secs_f64() / alone_time.as_secs_f64();
        assert!(
            ratio <= 1.2,
            "{what} {ratio:.2}×\ngated {gated:?}\nalone {alone:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_stated_quota_with_room_left_lets_a_burst_go_at_once() {
    // OpenAI's head: 10,000 requests a minute, 9,998 left.
    fn answer(_: u64, _: &str, _: Duration) -> Response<Full<Bytes>> {
        let mut res = ok();
        for (name, value) in [
            ("x-ratelimit-limit-requests", "10000"),
            ("x-ratelimit-remaining-requests", "9998"),
            ("x-ratelimit-reset-requests", "6ms"),
        ] {
            res.headers_mut()
                .insert(name, http::HeaderValue::from_static(value));
        }
        res
    }
    let upstream = Upstream::new(answer, Duration::from_millis(20));
    let svc = RetryLayer::new(policy()).layer(RateLimitLayer::learned().layer(upstream.service()));
    // The first answer states the quota; then a burst of 200.
    svc.clone().oneshot(request("m")).await.unwrap();
    let burst = crowd(svc, 200, 1, "m").await;
    assert_eq!(burst.served, 200);
    let sent = upstream.sent_to("/m");
    let spread = *sent.last().unwrap() - sent[1];
    assert!(
        spread <= Duration::from_millis(5),
        "a burst within the stated remaining went over {spread:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn one_model_s_named_wait_holds_that_model_only() {
    // Model `held` is refused with `retry-after: 60` for its first minute;
    // model `free`, on the same key, is served.
    fn answer(_: u64, path: &str, since: Duration) -> Response<Full<Bytes>> {
        if path == "/held" && since < Duration::from_secs(60) {
            status(429, &[("retry-after", "60")])
        } else {
            ok()
        }
    }
    let upstream = Upstream::new(answer, Duration::from_millis(20));
    let svc = RetryLayer::new(policy()).layer(RateLimitLayer::learned().layer(upstream.service()));
    let held = tokio::spawn(svc.clone().oneshot(request("held")));
    tokio::time::sleep(Duration::from_millis(30)).await;
    let free = crowd(svc, 40, 1, "free").await;
    assert_eq!(free.served, 40);
    assert!(
        free.completion <= Duration::from_millis(25),
        "the free model's requests took {:?}",
        free.completion
    );
    let held = held.await.unwrap().unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let sent = upstream.sent_to("/held");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[1] >= Duration::from_secs(60), "{sent:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hold_later_answers_contradict_lets_the_sends_queued_behind_it_go() {
    // `/busy` is refused with `retry-after: 60` after 10 ms; five requests
    // sent with it are served after 20 ms. A request arriving in between
    // waits for the key's hold, and goes as soon as the served answers
    // show the refusal was `/busy`'s own.
    fn answer(_: u64, path: &str, _: Duration) -> Response<Full<Bytes>> {
        if path == "/busy" {
            status(429, &[("retry-after", "60")])
        } else {
            ok()
        }
    }
    let upstream = Upstream::new(answer, Duration::from_millis(20));
    let quick = Upstream::new(answer, Duration::from_millis(10));
    let (slow, fast) = (upstream.service(), quick.service());
    let route = tower::service_fn(move |req: Request<Body>| {
        let mut svc = if req.uri().path() == "/busy" {
            fast.clone()
        } else {
            slow.clone()
        };
        async move { svc.ready().await?.call(req).await }
    });
    let svc = RetryLayer::new(
        RetryPolicy::builder()
            .no_budget()
            .max_retries(0)
            .build()
            .unwrap(),
    )
    .layer(RateLimitLayer::learned().layer(route));
    let start = Instant::now();
    let busy = tokio::spawn(svc.clone().oneshot(request_to("/busy", "m")));
    let crowd: Vec<_> = (0..5)
        .map(|_| tokio::spawn(svc.clone().oneshot(request("m"))))
        .collect();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let late = svc.clone().oneshot(request("m")).await.unwrap();
    assert_eq!(late.status(), StatusCode::OK);
    assert!(
        start.elapsed() <= Duration::from_millis(50),
        "the request queued behind a contradicted hold took {:?}",
        start.elapsed()
    );
    assert_eq!(
        busy.await.unwrap().unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    for call in crowd {
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    }
}

/// Standing down is told: the `llm_retry_rate_limit_stood_down_total`
/// counter (`signal="rate"`) counts the key whose refusals did not follow
/// its rate (the workload above).
#[cfg(feature = "metrics")]
#[test]
fn the_gate_standing_down_is_observed_as_a_metric() {
    use metrics_util::debugging::DebugValue;
    fn answer(nth: u64, _: &str, _: Duration) -> Response<Full<Bytes>> {
        if picked(nth, 70) {
            status(429, &[])
        } else {
            ok()
        }
    }
    let metrics = crate::observe_tests::recorded(async {
        gated_and_alone(answer, Duration::from_millis(20), 60, 5).await;
    });
    let stood_down: u64 = metrics
        .iter()
        .filter(|(name, labels, _)| {
            name == "llm_retry_rate_limit_stood_down_total"
                && labels.iter().any(|l| l == "signal=rate")
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum();
    assert!(stood_down >= 1, "counted {stood_down}");
}
