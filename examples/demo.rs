//! The demo: a few hundred concurrent LLM calls against a flaky upstream,
//! once bare and once through `RetryLayer`, side by side.
//!
//! ```text
//! cargo run --example demo
//! ```
//!
//! The upstream is `llm-retry-mock` on 127.0.0.1 with a seeded mix of what
//! real providers send: 429 with and without `Retry-After`, 529 overloads,
//! 5xx, resets before headers and `x-should-retry: false`.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::backoff::Jitter;
use llm_retry::{BoxError, RetryLayer, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::{Service, ServiceBuilder, ServiceExt};

const REQUESTS: usize = 300;
const PROMPT: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"Hello"}]}"#;

/// What one run measured.
#[derive(Default)]
struct Tally {
    succeeded: usize,
    failed: usize,
    sends: usize,
    waits_honoured: u32,
    latencies: Vec<Duration>,
    wall: Duration,
    /// Why failed requests stopped, with counts.
    stops: std::collections::BTreeMap<String, usize>,
}

/// One request's result.
struct Done {
    ok: bool,
    latency: Duration,
    waits_honoured: u32,
    stop: Option<String>,
}

/// What the caller learned from one result: success, server waits honoured,
/// and why it stopped when it failed.
type Verdict = (bool, u32, Option<String>);

fn upstream_script() -> Script {
    let ok = Reply::anthropic_ok("Hello! How can I help?").delay(Duration::from_millis(20));
    Script::new().seed(2026).route(
        "/v1/messages",
        Route::mix([
            (50, ok),
            (10, Reply::rate_limited(Some(1))),
            (8, Reply::rate_limited(None)),
            (10, Reply::overloaded()),
            (
                6,
                Reply::anthropic_error(503, "api_error", "Service unavailable"),
            ),
            (
                5,
                Reply::anthropic_error(500, "api_error", "Internal server error"),
            ),
            (4, Reply::reset_before_headers()),
            (2, Reply::anthropic_error(502, "api_error", "Bad gateway")),
            (
                2,
                Reply::anthropic_error(503, "api_error", "Gateway gave up")
                    .header("x-should-retry", "false"),
            ),
        ]),
    )
}

fn demo_policy() -> Result<RetryPolicy, BoxError> {
    // Shorter steps than the 500 ms → 32 s default so the demo ends quickly.
    Ok(RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(100))
        .max_backoff(Duration::from_secs(2))
        .jitter(Jitter::default())
        .max_retries(8)
        .max_elapsed(Duration::from_secs(20))
        .build()?)
}

fn request<B>(url: &str, body: B) -> Result<http::Request<B>, BoxError> {
    Ok(http::Request::post(url)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", "sk-ant-demo-not-a-real-key")
        .body(body)?)
}

/// Runs `REQUESTS` concurrent calls through `svc`, showing progress.
async fn run<S, F>(label: &str, svc: S, mock: &MockServer, judge: F) -> Result<Tally, BoxError>
where
    S: Service<http::Request<Full<Bytes>>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
    F: Fn(
            Result<S::Response, S::Error>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send>>
        + Send
        + Sync
        + 'static,
{
    mock.reset_records();
    let url = mock.url("/v1/messages");
    let finished = Arc::new(AtomicUsize::new(0));
    let judge = Arc::new(judge);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        let svc = svc.clone();
        let req = request(&url, Full::new(Bytes::from_static(PROMPT.as_bytes())))?;
        let finished = Arc::clone(&finished);
        let judge = Arc::clone(&judge);
        tasks.spawn(async move {
            let t0 = Instant::now();
            let result = svc.oneshot(req).await;
            let (ok, waits_honoured, stop) = judge(result).await;
            finished.fetch_add(1, Ordering::Relaxed);
            Done {
                ok,
                latency: t0.elapsed(),
                waits_honoured,
                stop,
            }
        });
    }
    let progress = {
        let finished = Arc::clone(&finished);
        let label = label.to_owned();
        tokio::spawn(async move {
            loop {
                let n = finished.load(Ordering::Relaxed);
                eprint!(
                    "\r  {label:<16} {n:>4}/{REQUESTS} done, {:>5.1} s",
                    started.elapsed().as_secs_f64()
                );
                let _ = std::io::stderr().flush();
                if n == REQUESTS {
                    eprintln!();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let mut tally = Tally::default();
    while let Some(done) = tasks.join_next().await {
        let done = done?;
        if done.ok {
            tally.succeeded += 1;
        } else {
            tally.failed += 1;
        }
        tally.waits_honoured += done.waits_honoured;
        if let Some(stop) = done.stop {
            *tally.stops.entry(stop).or_default() += 1;
        }
        tally.latencies.push(done.latency);
    }
    progress.await?;
    tally.wall = started.elapsed();
    tally.sends = mock.request_count();
    tally.latencies.sort();
    Ok(tally)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn print_table(bare: &Tally, retried: &Tally) {
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    let rows: [(&str, String, String); 7] = [
        (
            "succeeded",
            format!("{}/{REQUESTS}", bare.succeeded),
            format!("{}/{REQUESTS}", retried.succeeded),
        ),
        (
            "failed",
            bare.failed.to_string(),
            retried.failed.to_string(),
        ),
        (
            "upstream sends per request",
            format!("{:.2}", bare.sends as f64 / REQUESTS as f64),
            format!("{:.2}", retried.sends as f64 / REQUESTS as f64),
        ),
        (
            "server-named waits honoured",
            bare.waits_honoured.to_string(),
            retried.waits_honoured.to_string(),
        ),
        (
            "p50 latency",
            ms(percentile(&bare.latencies, 50.0)),
            ms(percentile(&retried.latencies, 50.0)),
        ),
        (
            "p99 latency",
            ms(percentile(&bare.latencies, 99.0)),
            ms(percentile(&retried.latencies, 99.0)),
        ),
        ("wall time", ms(bare.wall), ms(retried.wall)),
    ];
    println!();
    println!("{:<30} {:>14} {:>16}", "", "bare client", "with RetryLayer");
    println!("{}", "-".repeat(62));
    for (name, a, b) in rows {
        println!("{name:<30} {a:>14} {b:>16}");
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mock = MockServer::start(upstream_script()).await?;
    println!(
        "llm-retry demo: {REQUESTS} concurrent requests to a flaky mock upstream at {}",
        mock.url("")
    );
    println!(
        "fault mix: 50% ok, 18% 429 (10% with Retry-After: 1), 10% 529, 13% 5xx, \
         4% reset before headers, 2% 503 with x-should-retry: false"
    );

    let bare_client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let bare = run("bare client", bare_client, &mock, |result| {
        Box::pin(async move {
            match result {
                Ok(res) => {
                    let status = res.status();
                    let ok = res.into_body().collect().await.is_ok() && status.is_success();
                    (ok, 0, (!ok).then(|| format!("status {}", status.as_u16())))
                }
                Err(_) => (false, 0, Some("connection reset".to_owned())),
            }
        })
    })
    .await?;

    let policy = demo_policy()?;
    let retry_client = Client::builder(TokioExecutor::new()).build_http();
    let retrying = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(retry_client);
    let retried = run("with RetryLayer", retrying, &mock, |result| {
        Box::pin(async move {
            match result {
                Ok(res) => {
                    let report = res.extensions().get::<RetryReport>().cloned();
                    let status = res.status();
                    let ok = res.into_body().collect().await.is_ok() && status.is_success();
                    let waits = report.as_ref().map_or(0, |r| r.server_waits_honoured);
                    let stop = report
                        .filter(|_| !ok)
                        .map(|r| format!("{}: {}", status.as_u16(), r.stop));
                    (ok, waits, stop)
                }
                Err(e) => match e.downcast_ref::<llm_retry::RetryError>() {
                    Some(e) => {
                        let report = e.report();
                        (
                            false,
                            report.server_waits_honoured,
                            Some(report.stop.to_string()),
                        )
                    }
                    None => (false, 0, Some(e.to_string())),
                },
            }
        })
    })
    .await?;

    print_table(&bare, &retried);
    println!();
    println!("why the requests that failed through RetryLayer stopped:");
    for (stop, count) in &retried.stops {
        println!("  {count:>4} x {stop}");
    }
    mock.shutdown().await;
    Ok(())
}
