//! The demo: a few hundred concurrent LLM calls against a flaky,
//! rate-limited upstream — bare, through `RetryLayer` alone, and through
//! `ClientLayer` (the recommended stack: retries with a shared budget over
//! a rate-limit gate that learns the key's rate, over the stream guard) —
//! side by side.
//!
//! ```text
//! cargo run --example demo
//! ```
//!
//! The upstream is `llm-retry-mock` on 127.0.0.1: a token bucket of 100
//! requests a second that answers 429 with the time to its next token when
//! empty, as providers' rate limits do, and behind it a seeded mix of what
//! real providers send: 529 overloads, 5xx, resets before headers and
//! `x-should-retry: false`. Each column gets a fresh upstream.

#[path = "support/progress.rs"]
mod progress;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::backoff::Jitter;
use llm_retry::{BoxError, ClientLayer, RetryLayer, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::{Service, ServiceBuilder, ServiceExt};

const REQUESTS: usize = 300;
/// The upstream's rate limit: requests a second, and how many at once.
const RATE: u32 = 100;
const BURST: u32 = 20;
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
    let admitted = Route::mix([
        (71, ok),
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
    ]);
    Script::new().seed(2026).route(
        "/v1/messages",
        Route::capacity(RATE, BURST, Reply::rate_limited(None), admitted),
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
async fn run<S, F>(label: &str, svc: S, judge: F) -> Result<Tally, BoxError>
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
    let mock = MockServer::start(upstream_script()).await?;
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
            let mut shown = progress::Progress::new();
            loop {
                let n = finished.load(Ordering::Relaxed);
                let line = format!(
                    "  {label:<16} {n:>4}/{REQUESTS} done, {:>5.1} s",
                    started.elapsed().as_secs_f64()
                );
                if n == REQUESTS {
                    shown.finish(&line);
                    break;
                }
                shown.update(&line);
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
    mock.shutdown().await;
    Ok(tally)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// How one row of the table reads a column's tally.
type Cell = fn(&Tally) -> String;

fn print_table(columns: [(&str, &Tally); 3]) {
    let rows: [(&str, Cell); 7] = [
        ("succeeded", |t| format!("{}/{REQUESTS}", t.succeeded)),
        ("failed", |t| t.failed.to_string()),
        ("upstream sends per request", |t| {
            format!("{:.2}", t.sends as f64 / REQUESTS as f64)
        }),
        ("server-named waits honoured", |t| {
            t.waits_honoured.to_string()
        }),
        ("p50 latency", |t| {
            format!(
                "{:.0} ms",
                percentile(&t.latencies, 50.0).as_secs_f64() * 1000.0
            )
        }),
        ("p99 latency", |t| {
            format!(
                "{:.0} ms",
                percentile(&t.latencies, 99.0).as_secs_f64() * 1000.0
            )
        }),
        ("wall time", |t| {
            format!("{:.0} ms", t.wall.as_secs_f64() * 1000.0)
        }),
    ];
    println!();
    print!("{:<30}", "");
    for (name, _) in &columns {
        print!(" {name:>14}");
    }
    println!();
    println!("{}", "-".repeat(30 + 15 * columns.len()));
    for (row, value) in rows {
        print!("{row:<30}");
        for (_, tally) in &columns {
            print!(" {:>14}", value(tally));
        }
        println!();
    }
}

/// Why the requests through a retrying stack that failed stopped.
fn print_stops(label: &str, tally: &Tally) {
    if tally.stops.is_empty() {
        return;
    }
    println!();
    println!("why the requests that failed through {label} stopped:");
    for (stop, count) in &tally.stops {
        println!("  {count:>4} x {stop}");
    }
}

/// Reads a retrying stack's result: success, waits honoured, why it stopped.
fn judge_retried<B>(
    result: Result<http::Response<B>, BoxError>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send>>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
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
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    println!(
        "llm-retry demo: {REQUESTS} concurrent requests, three times, each to a fresh mock upstream"
    );
    println!(
        "upstream: a token bucket of {RATE} req/s (bursts of {BURST}) answering 429 with the time \
         to its next token; past it 71% ok, 10% 529, 13% 5xx, 4% reset before headers, \
         2% 503 with x-should-retry: false"
    );

    let bare_client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let bare = run("bare client", bare_client, |result| {
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

    let retry_only = ServiceBuilder::new()
        .layer(RetryLayer::new(demo_policy()?))
        .service(Client::builder(TokioExecutor::new()).build_http());
    let alone = run("RetryLayer", retry_only, judge_retried).await?;

    let stack = ServiceBuilder::new()
        .layer(ClientLayer::new(demo_policy()?))
        .service(Client::builder(TokioExecutor::new()).build_http());
    let client_layer = run("ClientLayer", stack, judge_retried).await?;

    print_table([
        ("bare client", &bare),
        ("RetryLayer", &alone),
        ("ClientLayer", &client_layer),
    ]);
    print_stops("RetryLayer", &alone);
    print_stops("ClientLayer", &client_layer);
    println!();
    println!(
        "RetryLayer alone honours each 429's wait per request, so the requests come back \
         together, collide again, and spend the shared retry budget (20% + 10/s). \
         ClientLayer's gate holds every request to the key for the wait one 429 named and \
         learns the key's rate from the first burst's 429s — 300 requests at once against a \
         bucket of {BURST}, the one moment it knows nothing — after which they queue instead \
         of colliding, and the budget is left for the 5xx."
    );
    Ok(())
}
