//! What `RetryLayer` adds to a call that succeeds at once, in process, with
//! no network: the upstream is a `tower::service_fn` that reads the request
//! body to its end and answers `200 application/json` with a small body.
//!
//! For a ~1 KiB and a 1 MiB JSON request body (`Full<Bytes>`), one call —
//! `ready` + `call` on a long-lived service, then reading the response
//! body — is timed for the bare
//! upstream, under `RetryLayer::new(RetryPolicy::default())` (which counts
//! each first send in its shared retry budget), under `RetryLayer` +
//! `StreamGuardLayer`, and under `ClientLayer::default()` (those plus the
//! rate-limit gate's per-key lookup). Building the request is left out of
//! the timing. Since an already-buffered body is replayed without copying,
//! the layer's overhead should not depend on the body size.
//!
//! Run with `cargo bench -p llm-retry --bench success_path`; see
//! docs/benchmarks.md.

// `criterion_group!` expands to an undocumented `pub fn`.
#![allow(missing_docs)]

#[path = "support/in_process.rs"]
mod in_process;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{ClientLayer, RetryLayer, RetryPolicy};
use std::time::{Duration, Instant};
use tower::{Service, ServiceBuilder};

fn request(body: &Bytes) -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1:1/v1/messages")
        .header("content-type", "application/json")
        .header("x-api-key", "sk-bench")
        .body(Full::new(body.clone()))
        .expect("valid request")
}

/// Times `iters` calls through one long-lived `svc` (`ready`, `call`, the
/// response body read to its end). Requests are built in untimed batches.
async fn time_calls<S, B>(mut svc: S, payload: &Bytes, iters: u64) -> Duration
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    const BATCH: u64 = 1024;
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BATCH);
        left -= n;
        let requests: Vec<_> = (0..n).map(|_| request(payload)).collect();
        let start = Instant::now();
        in_process::send_all(&mut svc, requests).await;
        total += start.elapsed();
    }
    total
}

fn success_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");

    for (name, size) in [("1KiB", 1024), ("1MiB", 1024 * 1024)] {
        let payload = in_process::json_body(size);
        let mut group = c.benchmark_group(format!("success_path/{name}"));
        group
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(50);

        let bare = tower::service_fn(in_process::upstream::<Full<Bytes>>);
        group.bench_function("bare", |b| {
            b.to_async(&rt)
                .iter_custom(|iters| time_calls(bare, &payload, iters));
        });

        let retry = ServiceBuilder::new()
            .layer(RetryLayer::new(RetryPolicy::default()))
            .service_fn(in_process::upstream);
        group.bench_function("retry", |b| {
            b.to_async(&rt)
                .iter_custom(|iters| time_calls(retry.clone(), &payload, iters));
        });

        let retry_guard = ServiceBuilder::new()
            .layer(RetryLayer::new(RetryPolicy::default()))
            .layer(StreamGuardLayer::new())
            .service_fn(in_process::upstream);
        group.bench_function("retry+guard", |b| {
            b.to_async(&rt)
                .iter_custom(|iters| time_calls(retry_guard.clone(), &payload, iters));
        });

        let client_layer = ServiceBuilder::new()
            .layer(ClientLayer::default())
            .service_fn(in_process::upstream);
        group.bench_function("client_layer", |b| {
            b.to_async(&rt)
                .iter_custom(|iters| time_calls(client_layer.clone(), &payload, iters));
        });
        group.finish();
    }
}

criterion_group!(benches, success_path);
criterion_main!(benches);
