//! What `StreamGuardLayer` (and `RetryLayer` over it) costs a streamed call,
//! on loopback against `llm_retry_mock::MockServer`.
//!
//! - `stream_guard/ttfb`: time from sending the request until the caller has
//!   seen the first `content_block_delta` bytes of a realistic Anthropic
//!   stream. The guard holds `message_start`, `content_block_start` and
//!   `ping` back and releases at the first content event, so every stack,
//!   the bare client included, is timed to the same point: the caller reads
//!   frames until the accumulated bytes contain `content_block_delta`. The rest of each stream is drained
//!   outside the timed span, so the pooled connection is reused.
//! - `stream_guard/throughput`: a ~2 MiB stream (2000 content events of
//!   ~1 KiB) read to its end, reported in bytes per second.
//!
//! Each is measured for the bare hyper-util client, the client under
//! `StreamGuardLayer`, and under `RetryLayer` + `StreamGuardLayer`. Client
//! and mock server share one current-thread tokio runtime, so every CPU
//! cycle the layers spend shows up in the numbers.
//!
//! Run with `cargo bench -p llm-retry --bench stream_guard`; see
//! docs/benchmarks.md.

// `criterion_group!` expands to an undocumented `pub fn`.
#![allow(missing_docs)]

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode};
use criterion::{measurement::WallTime, Throughput};
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::stream_guard::{StreamGuard, StreamGuardLayer};
use llm_retry::{ReplayBody, Retry, RetryLayer, RetryPolicy};
use llm_retry_mock::{MockServer, Reply, Route, Script, SseEvent};
use serde_json::json;
use std::hint::black_box;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt};

const PATH: &str = "/v1/messages";
const PROMPT: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;
const FIRST_CONTENT: &[u8] = b"content_block_delta";
/// Content events in the throughput stream.
const LONG_EVENTS: usize = 2000;
/// Characters of text in each of them (~1 KiB per event on the wire).
const LONG_EVENT_TEXT: usize = 940;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn request(url: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::from_static(PROMPT.as_bytes())))
        .expect("valid request")
}

/// Sends one request through `svc`; resolves to the response.
async fn send<S, B>(svc: &mut S, url: &str) -> Response<B>
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    svc.ready()
        .await
        .expect("service ready")
        .call(request(url))
        .await
        .expect("response")
}

/// Reads frames until the bytes seen so far contain the first content
/// event; returns how many bytes that took.
async fn read_to_first_content<B>(body: &mut B) -> usize
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut seen = Vec::with_capacity(1024);
    loop {
        let frame = body
            .frame()
            .await
            .expect("content before the end")
            .expect("body frame");
        if let Some(data) = frame.data_ref() {
            // Search only where a match could newly end.
            let from = seen.len().saturating_sub(FIRST_CONTENT.len() - 1);
            seen.extend_from_slice(data);
            if contains(&seen[from..], FIRST_CONTENT) {
                return seen.len();
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Reads the rest of a body; returns its byte count.
async fn drain<B>(body: &mut B) -> usize
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.expect("body frame").data_ref() {
            n += data.len();
        }
    }
    n
}

/// Time to the first content event for `iters` requests; each stream is
/// drained after the clock stops so its connection goes back to the pool.
async fn time_to_first_content<S, B>(mut svc: S, mock: &MockServer, iters: u64) -> Duration
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let url = mock.url(PATH);
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        let mut body = send(&mut svc, &url).await.into_body();
        black_box(read_to_first_content(&mut body).await);
        total += start.elapsed();
        black_box(drain(&mut body).await);
    }
    // The mock records every request; keep that memory flat.
    mock.reset_records();
    total
}

/// Reads `iters` whole streams, each to its end, checking their length.
async fn read_streams<S, B>(mut svc: S, mock: &MockServer, len: usize, iters: u64) -> Duration
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let url = mock.url(PATH);
    let start = Instant::now();
    for _ in 0..iters {
        let mut body = send(&mut svc, &url).await.into_body();
        assert_eq!(drain(&mut body).await, len, "the whole stream");
    }
    let elapsed = start.elapsed();
    mock.reset_records();
    elapsed
}

/// The bare hyper-util client.
type Bare = Client<HttpConnector, Full<Bytes>>;
/// The client under `StreamGuardLayer`.
type Guarded = StreamGuard<Bare>;
/// The client under `RetryLayer` + `StreamGuardLayer` (requests reach the
/// client as `ReplayBody`s).
type RetryGuarded = Retry<StreamGuard<Client<HttpConnector, ReplayBody<Full<Bytes>>>>>;

fn bare() -> Bare {
    Client::builder(TokioExecutor::new()).build_http()
}

fn guarded() -> Guarded {
    StreamGuardLayer::new().layer(bare())
}

fn retry_guarded() -> RetryGuarded {
    let client = Client::builder(TokioExecutor::new()).build_http();
    RetryLayer::new(RetryPolicy::default()).layer(StreamGuardLayer::new().layer(client))
}

fn start_mock(rt: &Runtime, reply: Reply) -> MockServer {
    rt.block_on(MockServer::start(
        Script::new().route(PATH, Route::always(reply)),
    ))
    .expect("mock server")
}

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
}

fn ttfb(c: &mut Criterion) {
    let rt = runtime();
    let reply = Reply::anthropic_stream(&["Hello", ", world", "! How can I help?"]);
    let mock = start_mock(&rt, reply);

    let mut group = c.benchmark_group("stream_guard/ttfb");
    configure(&mut group);
    // Each stack keeps its client (and so its pooled connection) across
    // samples, like a long-lived application would.
    let bare_client = bare();
    group.bench_function("bare", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| time_to_first_content(bare_client.clone(), &mock, iters));
    });
    let guarded_client = guarded();
    group.bench_function("guard", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| time_to_first_content(guarded_client.clone(), &mock, iters));
    });
    let retry_client = retry_guarded();
    group.bench_function("retry+guard", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| time_to_first_content(retry_client.clone(), &mock, iters));
    });
    group.finish();
    rt.block_on(mock.shutdown());
}

/// `message_start` … `ping`, 2000 content deltas of ~1 KiB, then the
/// closing events: ~2 MiB.
fn long_stream() -> Reply {
    let text: String = "lorem ipsum ".repeat(LONG_EVENT_TEXT / 12 + 1)[..LONG_EVENT_TEXT].into();
    let mut events = vec![
        SseEvent::json(
            Some("message_start"),
            &json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message",
                "role": "assistant", "model": "claude-mock-1", "content": [],
                "stop_reason": null, "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ),
        SseEvent::json(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ),
        SseEvent::json(Some("ping"), &json!({"type": "ping"})),
    ];
    let delta = SseEvent::json(
        Some("content_block_delta"),
        &json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}),
    );
    events.extend(std::iter::repeat_n(delta, LONG_EVENTS));
    events.extend([
        SseEvent::json(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        SseEvent::json(Some("message_stop"), &json!({"type": "message_stop"})),
    ]);
    Reply::sse(events)
}

fn throughput(c: &mut Criterion) {
    let rt = runtime();
    let reply = long_stream();
    let len = reply.expected_body().expect("a complete reply").len();
    let mock = start_mock(&rt, reply);
    let mut group = c.benchmark_group("stream_guard/throughput");
    configure(&mut group);
    // Iterations take milliseconds: one per sample step is plenty.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(30)
        .throughput(Throughput::Bytes(len as u64));

    let bare_client = bare();
    group.bench_function("bare", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| read_streams(bare_client.clone(), &mock, len, iters));
    });
    let guarded_client = guarded();
    group.bench_function("guard", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| read_streams(guarded_client.clone(), &mock, len, iters));
    });
    let retry_client = retry_guarded();
    group.bench_function("retry+guard", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| read_streams(retry_client.clone(), &mock, len, iters));
    });
    group.finish();
    rt.block_on(mock.shutdown());
}

criterion_group!(benches, ttfb, throughput);
criterion_main!(benches);
