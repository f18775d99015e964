//! Loopback throughput of a reqwest client: bare, with reqwest-retry, and
//! with this adapter (the whole `ClientLayer` stack, and retries only), on
//! an upstream that always succeeds at once, one that answers 10 % 503s,
//! and one that takes 20 ms to answer.
//!
//! The mock upstream runs on its own runtime thread, the clients on
//! another. Rounds are interleaved (every client runs round 1, then every
//! client runs round 2, …) so a noisy neighbour slows all of them alike.
//!
//! ```text
//! cargo bench -p llm-retry-reqwest --bench throughput
//! THROUGHPUT_ROUNDS=20 THROUGHPUT_REQUESTS=4000 cargo bench -p llm-retry-reqwest --bench throughput
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

use futures_util::stream::{FuturesUnordered, StreamExt};
use llm_retry::backoff::Jitter;
use llm_retry::{RetryLayer, RetryPolicy};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use llm_retry_reqwest::RetryMiddleware;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use std::time::{Duration, Instant};

const PROMPT: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#;
/// Requests in flight at once.
const CONCURRENCY: usize = 32;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Both retrying stacks step from 1 ms to 5 ms, so the 503 mix measures
/// the engines rather than their default waits.
fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(5))
        .jitter(Jitter::Full)
        .build()
        .unwrap()
}

fn clients() -> Vec<(&'static str, ClientWithMiddleware)> {
    let base = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(CONCURRENCY)
            .build()
            .unwrap()
    };
    let reqwest_retry = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(1), Duration::from_millis(5))
        .build_with_max_retries(10);
    vec![
        ("bare reqwest", ClientWithMiddleware::from(base())),
        (
            "reqwest-retry",
            ClientBuilder::new(base())
                .with(RetryTransientMiddleware::new_with_policy(reqwest_retry))
                .build(),
        ),
        (
            "adapter (ClientLayer)",
            ClientBuilder::new(base())
                .with(RetryMiddleware::new(policy()))
                .build(),
        ),
        (
            "adapter (retry only)",
            ClientBuilder::new(base())
                .with(RetryMiddleware::retry_only(RetryLayer::new(policy())))
                .build(),
        ),
    ]
}

/// One round: `requests` posts, `CONCURRENCY` at a time. Returns the
/// round's wall time, each request's latency and how many ended in 200.
async fn round(
    client: &ClientWithMiddleware,
    url: &str,
    requests: usize,
) -> (Duration, Vec<Duration>, usize) {
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(requests);
    let mut ok = 0;
    let mut in_flight = FuturesUnordered::new();
    let send = || async {
        let at = Instant::now();
        let response = client.post(url).body(PROMPT).send().await;
        let served = match response {
            Ok(response) => {
                let status = response.status();
                let _ = response.bytes().await;
                status == 200
            }
            Err(_) => false,
        };
        (at.elapsed(), served)
    };
    let mut started_requests = 0;
    while started_requests < requests.min(CONCURRENCY) {
        in_flight.push(send());
        started_requests += 1;
    }
    while let Some((latency, served)) = in_flight.next().await {
        latencies.push(latency);
        ok += usize::from(served);
        if started_requests < requests {
            in_flight.push(send());
            started_requests += 1;
        }
    }
    (started.elapsed(), latencies, ok)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let rounds = env("THROUGHPUT_ROUNDS", 10);
    let requests = env("THROUGHPUT_REQUESTS", 2_000);
    let upstream_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mock = upstream_rt.block_on(async {
        MockServer::start(
            Script::new()
                .route("/ok", Route::always(Reply::anthropic_ok("Hello")))
                .route(
                    "/slow",
                    Route::always(Reply::anthropic_ok("Hello").delay(Duration::from_millis(20))),
                )
                .route(
                    "/mix",
                    Route::mix([(9, Reply::anthropic_ok("Hello")), (1, Reply::status(503))]),
                ),
        )
        .await
        .unwrap()
    });
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_rt.block_on(async {
        // THROUGHPUT_ONLY=adapter keeps the clients whose name contains it
        // (for profiling one of them alone).
        let only = std::env::var("THROUGHPUT_ONLY").unwrap_or_default();
        let clients: Vec<_> = clients()
            .into_iter()
            .filter(|(name, _)| name.contains(only.as_str()))
            .collect();
        // THROUGHPUT_WORKLOAD=success (or 503, or slow) runs one workload
        // alone: no name contains another's.
        let workload_filter = std::env::var("THROUGHPUT_WORKLOAD").unwrap_or_default();
        let workloads = [
            ("success", "/ok", requests),
            ("10 % 503", "/mix", requests),
            // An upstream that takes 20 ms to answer (LLM APIs take
            // longer): the client's CPU is no longer the bottleneck.
            ("slow upstream (20 ms)", "/slow", requests / 4),
        ];
        for (workload, path, requests) in workloads {
            if !workload.contains(workload_filter.as_str()) {
                continue;
            }
            let url = mock.url(path);
            let mut results: Vec<(Vec<f64>, Vec<Duration>, usize)> = clients
                .iter()
                .map(|_| (Vec::new(), Vec::new(), 0))
                .collect();
            // Warm-up: connections opened, code paths paged in.
            for (_, client) in &clients {
                round(client, &url, requests / 4).await;
            }
            for _ in 0..rounds {
                for ((_, client), result) in clients.iter().zip(&mut results) {
                    let (took, latencies, ok) = round(client, &url, requests).await;
                    result.0.push(requests as f64 / took.as_secs_f64());
                    result.1.extend(latencies);
                    result.2 += ok;
                }
            }
            println!(
                "\n{workload}: {rounds} rounds of {requests} requests, {CONCURRENCY} in flight"
            );
            println!("| client | req/s (median round) | vs bare | p50 | p99 | served |");
            println!("|---|---:|---:|---:|---:|---:|");
            let mut bare = None;
            for ((name, _), (mut rates, mut latencies, ok)) in clients.iter().zip(results) {
                rates.sort_by(f64::total_cmp);
                latencies.sort();
                let median = rates[rates.len() / 2];
                let bare = *bare.get_or_insert(median);
                println!(
                    "| {name} | {median:.0} | {:.1} % | {:.0} µs | {:.0} µs | {:.1} % |",
                    100.0 * median / bare,
                    percentile(&latencies, 0.5).as_secs_f64() * 1e6,
                    percentile(&latencies, 0.99).as_secs_f64() * 1e6,
                    100.0 * ok as f64 / (rounds * requests) as f64,
                );
            }
        }
    });
    drop(mock);
    upstream_rt.shutdown_background();
}
