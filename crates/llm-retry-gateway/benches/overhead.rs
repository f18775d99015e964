//! What the gateway adds to a request on loopback: latency and throughput
//! against calling the mock target directly, time to first token for
//! streams, and memory per streamed request held open.
//!
//! The mock target runs on its own runtime thread, the gateway on another,
//! the clients on the main thread. Rounds alternate direct and through the
//! gateway, so a noisy neighbour slows both alike.
//!
//! ```text
//! cargo bench -p llm-retry-gateway --bench overhead
//! OVERHEAD_ROUNDS=10 OVERHEAD_REQUESTS=4000 cargo bench -p llm-retry-gateway --bench overhead
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry_gateway::{Config, Gateway};
use llm_retry_mock::{MockServer, Reply, Route, Script, SseEvent};
use std::time::{Duration, Instant};

const PROMPT: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#;
const CONCURRENCY: usize = 32;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn post(url: &str) -> http::Request<Full<Bytes>> {
    let mut request = http::Request::post(url).header("content-type", "application/json");
    // The other proxy's own key, when it wants one (OVERHEAD_ALSO_AUTH).
    if let Ok(auth) = std::env::var("OVERHEAD_ALSO_AUTH") {
        if !url.contains("/v1/held") {
            request = request.header("authorization", format!("Bearer {auth}"));
        }
    }
    request
        .body(Full::new(Bytes::from_static(PROMPT.as_bytes())))
        .unwrap()
}

/// Runs `n` requests `CONCURRENCY` at a time: the round's time and, per
/// request, the time to the first content (or to the whole answer).
async fn round(
    client: &HttpClient,
    url: &str,
    n: usize,
    stream: bool,
) -> (Duration, Vec<Duration>) {
    let started = Instant::now();
    let one = || async {
        let at = Instant::now();
        let response = client.request(post(url)).await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut first = None;
        let mut seen = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                seen.extend_from_slice(&data);
                if first.is_none()
                    && (!stream || seen.windows(19).any(|w| w == b"content_block_delta"))
                {
                    first = Some(at.elapsed());
                }
            }
        }
        first.unwrap_or_else(|| at.elapsed())
    };
    let mut times = Vec::with_capacity(n);
    let mut in_flight = FuturesUnordered::new();
    let mut started_n = 0;
    while started_n < n.min(CONCURRENCY) {
        in_flight.push(one());
        started_n += 1;
    }
    while let Some(time) = in_flight.next().await {
        times.push(time);
        if started_n < n {
            in_flight.push(one());
            started_n += 1;
        }
    }
    (started.elapsed(), times)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Resident memory of the process, in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let rounds = env("OVERHEAD_ROUNDS", 6);
    let requests = env("OVERHEAD_REQUESTS", 2_000);
    let held = env("OVERHEAD_HELD_STREAMS", 500);
    let mock_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let gateway_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // A stream that sends its start, then holds for 30 s: for memory.
    let held_reply = Reply::sse([
        SseEvent::new(
            Some("message_start"),
            r#"{"type":"message_start","message":{"id":"m"}}"#,
        ),
        SseEvent::new(
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        SseEvent::new(Some("message_stop"), r#"{"type":"message_stop"}"#)
            .after(Duration::from_secs(30)),
    ]);
    // OVERHEAD_MOCK_PORT pins the mock's port, and OVERHEAD_ALSO names
    // another proxy (`label=http://host:port`) in front of it to measure
    // beside the gateway (LiteLLM, say, configured for that port).
    let mock_port = env("OVERHEAD_MOCK_PORT", 0) as u16;
    let also = std::env::var("OVERHEAD_ALSO").ok().and_then(|v| {
        let (label, url) = v.split_once('=')?;
        Some((label.to_owned(), url.trim_end_matches('/').to_owned()))
    });
    let mock = mock_rt.block_on(async {
        MockServer::start_on(
            mock_port,
            Script::new()
                .route("/v1/messages", Route::always(Reply::anthropic_ok("Hello")))
                .route(
                    "/v1/stream",
                    Route::always(Reply::anthropic_stream(&["Hello", ", world", "!"])),
                )
                .route("/v1/held", Route::always(held_reply)),
        )
        .await
        .unwrap()
    });
    let toml = format!(
        "listen = \"127.0.0.1:0\"\n[[route]]\nname = \"bench\"\n[[route.target]]\nname = \"mock\"\nbase_url = \"{}\"\n",
        mock.url("")
    );
    let config = Config::parse(&toml, |_| None).unwrap();
    let address = gateway_rt.block_on(async {
        let gateway = Gateway::new(&config).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(gateway.serve(listener, std::future::pending()));
        address
    });
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_rt.block_on(async {
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(CONCURRENCY)
            .build_http();
        for (workload, path, stream) in [("JSON answer", "/v1/messages", false), ("SSE stream", "/v1/stream", true)] {
            let mut paths = vec![
                ("direct to the mock".to_owned(), mock.url(path)),
                ("through the gateway".to_owned(), format!("http://{address}{path}")),
            ];
            if let (Some((label, base)), false) = (&also, stream) {
                paths.push((format!("through {label}"), format!("{base}{path}")));
            }
            for (_, url) in &paths {
                round(&client, url, requests / 4, stream).await;
            }
            let mut results: Vec<(Vec<f64>, Vec<Duration>)> = paths.iter().map(|_| (Vec::new(), Vec::new())).collect();
            for _ in 0..rounds {
                for (i, (_, url)) in paths.iter().enumerate() {
                    let (took, times) = round(&client, url, requests, stream).await;
                    results[i].0.push(requests as f64 / took.as_secs_f64());
                    results[i].1.extend(times);
                }
            }
            let what = if stream { "time to first token" } else { "latency" };
            println!("\n{workload}: {rounds} rounds of {requests}, {CONCURRENCY} in flight; {what}");
            println!("| path | req/s (median round) | p50 | p99 |");
            println!("|---|---:|---:|---:|");
            for ((name, _), (mut rates, mut times)) in paths.iter().zip(results) {
                rates.sort_by(f64::total_cmp);
                times.sort();
                println!(
                    "| {name} | {:.0} | {:.0} µs | {:.0} µs |",
                    rates[rates.len() / 2],
                    percentile(&times, 0.5).as_secs_f64() * 1e6,
                    percentile(&times, 0.99).as_secs_f64() * 1e6
                );
            }
        }
        // Memory: `held` streams open at once, direct and then through the gateway.
        let mut per_stream = Vec::new();
        for url in [mock.url("/v1/held"), format!("http://{address}/v1/held")] {
            let before = rss();
            let mut open = Vec::with_capacity(held);
            for _ in 0..held {
                let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                let mut body = client.request(post(&url)).await.unwrap().into_body();
                // Read up to the first content, then keep the stream open.
                let mut seen = Vec::new();
                while !seen.windows(19).any(|w| w == b"content_block_delta") {
                    let frame = body.frame().await.unwrap().unwrap();
                    if let Ok(data) = frame.into_data() {
                        seen.extend_from_slice(&data);
                    }
                }
                open.push((client, body));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            per_stream.push((rss().saturating_sub(before)) as f64 / held as f64);
            drop(open);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        println!(
            "\nmemory with {held} streams held open: {:.1} KiB per stream direct, {:.1} KiB through the gateway: the gateway adds {:.1} KiB per in-flight stream",
            per_stream[0] / 1024.0,
            per_stream[1] / 1024.0,
            (per_stream[1] - per_stream[0]) / 1024.0
        );
    });
    mock_rt.shutdown_background();
    gateway_rt.shutdown_background();
}
