//! One proxied request through the gateway, as the binary runs it (its
//! tracing subscriber and Prometheus recorder installed), against calling
//! the mock target directly.
//!
//! `benches/hop.sh` runs every mode and prints the tables of
//! `docs/benchmarks.md`; each mode alone:
//!
//! ```text
//! HOP_MODE=serial cargo bench -p llm-retry-gateway --bench hop    # one at a time, interleaved
//! HOP_MODE=serve  cargo bench -p llm-retry-gateway --bench hop    # for a load generator
//! HOP_MODE=calls HOP_PATH=gateway HOP_CALLS=2000 cargo bench ...  # a fixed count, for callgrind
//! ```
//!
//! The mock runs on a one-worker runtime whose threads are named
//! `hop-mock`, the gateway on one named `hop-gateway` (so the CPU time of
//! the gateway's threads can be read from `/proc`), the client on the main
//! thread. `HOP_GATEWAY_WORKERS` gives the gateway's runtime more workers
//! (the binary's `#[tokio::main]` runs one per core).
#![allow(missing_docs, clippy::unwrap_used)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry_gateway::{Config, Gateway};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::time::{Duration, Instant};

const PROMPT: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hi"}]}"#;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runtime(name: &str, workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
}

/// One request to `url`, its whole answer read: its time (for a stream,
/// to its first content: the gateway's stream guard holds the head until
/// then, so a first byte would compare different events).
async fn one(client: &HttpClient, url: &str) -> Duration {
    let at = Instant::now();
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(PROMPT.as_bytes())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let (mut first, mut seen) = (None, Vec::new());
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            seen.extend_from_slice(&data);
            if first.is_none() && seen.windows(19).any(|w| w == b"content_block_delta") {
                first = Some(at.elapsed());
            }
        }
    }
    if url.ends_with("/v1/stream") {
        first.unwrap_or_else(|| at.elapsed())
    } else {
        at.elapsed()
    }
}

/// `requests` calls to `direct` and to `through`, interleaved pair by
/// pair (which goes first alternates): each path's times, sorted.
async fn interleaved(
    client: &HttpClient,
    direct: &str,
    through: &str,
    requests: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut direct_times, mut gateway_times) = (Vec::new(), Vec::new());
    for i in 0..requests {
        if i % 2 == 0 {
            direct_times.push(one(client, direct).await);
            gateway_times.push(one(client, through).await);
        } else {
            gateway_times.push(one(client, through).await);
            direct_times.push(one(client, direct).await);
        }
    }
    direct_times.sort();
    gateway_times.sort();
    (direct_times, gateway_times)
}

fn print_table(what: &str, requests: usize, direct: &[Duration], gateway: &[Duration]) {
    println!("\n{what}, one request at a time, {requests} each, interleaved");
    println!("| path | p50 | p99 | p99.9 |");
    println!("|---|---:|---:|---:|");
    for (name, times) in [
        ("direct to the mock", direct),
        ("through the gateway", gateway),
    ] {
        println!(
            "| {name} | {:.0} µs | {:.0} µs | {:.0} µs |",
            micros(percentile(times, 0.5)),
            micros(percentile(times, 0.99)),
            micros(percentile(times, 0.999)),
        );
    }
    let added = |p| micros(percentile(gateway, p)) - micros(percentile(direct, p));
    println!(
        "| added by the gateway | {:.0} µs | {:.0} µs | {:.0} µs |",
        added(0.5),
        added(0.99),
        added(0.999)
    );
}

/// CPU time (user and system) of this process's threads named `name`.
fn threads_cpu(name: &str) -> Duration {
    let ticks = 100.0; // USER_HZ on Linux
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // After the `(comm)` field: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        total += fields.iter().sum::<u64>();
    }
    Duration::from_secs_f64(total as f64 / ticks)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // As the binary: a fmt subscriber at INFO (to a sink here) and the
    // Prometheus recorder, `/metrics` served from it.
    tracing_subscriber::fmt().with_writer(std::io::sink).init();
    let handle = llm_retry_gateway::prometheus().install_recorder().unwrap();
    let mock_rt = runtime("hop-mock", 1);
    let gateway_rt = runtime("hop-gateway", env("HOP_GATEWAY_WORKERS", 1));
    let mock = mock_rt.block_on(async {
        let script = Script::new()
            .route("/v1/messages", Route::always(Reply::anthropic_ok("Hello")))
            .route(
                "/v1/stream",
                Route::always(Reply::anthropic_stream(&["Hello", ", world", "!"])),
            );
        MockServer::start(script).await.unwrap()
    });
    let toml = format!(
        "listen = \"127.0.0.1:0\"\n[[route]]\nname = \"bench\"\n[[route.target]]\nname = \"mock\"\nbase_url = \"{}\"\n",
        mock.url("")
    );
    let config = Config::parse(&toml, |_| None).unwrap();
    let address = gateway_rt.block_on(async {
        let gateway = Gateway::new(&config).unwrap().with_metrics(handle);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(gateway.serve(listener, std::future::pending()));
        address
    });
    let direct = mock.url("/v1/messages");
    let through = format!("http://{address}/v1/messages");
    let mode = std::env::var("HOP_MODE").unwrap_or_else(|_| "serial".to_owned());
    if mode == "serve" {
        println!("direct {direct}");
        println!("gateway {through}");
        std::thread::sleep(Duration::from_secs(u64::MAX / 4));
        return;
    }
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_rt.block_on(async {
        let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
        if mode == "calls" {
            let url = match std::env::var("HOP_PATH").as_deref() {
                Ok("direct") => &direct,
                _ => &through,
            };
            for _ in 0..env("HOP_CALLS", 1_000) {
                one(&client, url).await;
            }
            return;
        }
        let requests = env("HOP_REQUESTS", 5_000);
        for _ in 0..500 {
            one(&client, &direct).await;
            one(&client, &through).await;
        }
        let cpu_before = threads_cpu("hop-gateway");
        let (direct_times, gateway_times) = interleaved(&client, &direct, &through, requests).await;
        let cpu = threads_cpu("hop-gateway").saturating_sub(cpu_before);
        print_table("JSON answer", requests, &direct_times, &gateway_times);
        let stream_direct = mock.url("/v1/stream");
        let stream_through = format!("http://{address}/v1/stream");
        let (direct_times, gateway_times) =
            interleaved(&client, &stream_direct, &stream_through, requests / 5).await;
        print_table(
            "SSE stream, time to its first content_block_delta",
            requests / 5,
            &direct_times,
            &gateway_times,
        );
        println!(
            "\ngateway threads' CPU: {:.1} µs per proxied JSON request ({:.2} s over {requests})",
            micros(cpu) / requests as f64,
            cpu.as_secs_f64()
        );
    });
    mock_rt.shutdown_background();
    gateway_rt.shutdown_background();
}
