//! What the layers hold in memory, measured as peak resident set size
//! (`VmHWM` in `/proc/self/status`, Linux only), each case in a process of
//! its own so one case's peak never hides another's:
//!
//! - `buffered`: 1,000 concurrent requests, each with its own 1 MiB
//!   `Full<Bytes>` body, through `bare`, `tower_retry` (the least a retry
//!   layer must do: keep a `ReplayBody` clone) and `client_layer`
//!   (`ClientLayer::default()`). Two ways of calling: `kept` (the caller
//!   keeps its bodies, e.g. as conversation history, until every answer is
//!   in) and `handed` (the caller hands each body over and keeps nothing).
//! - `streamed`: the same with 1 MiB bodies streamed in 64 KiB chunks made
//!   as they are polled, through `bare`, `client_layer` and `client_layer`
//!   with a 256 KiB replay cap.
//! - `guard`: 10,000 concurrent streamed responses whose upstream sends
//!   60 KiB of events before any content and then stalls, `bare` and
//!   through `StreamGuardLayer` (64 KiB prefix limit, the default), and
//!   256 KiB before content through a guard limited to 8 KiB.
//! - `keys`: 100,000 requests in turn through `ClientLayer::default()`,
//!   each paced under a key of its own (`RateKey`), every answer stating a
//!   quota of 60 a minute (so each key has pacing state for a second): the
//!   resident size and the time per send after each 10,000.
//!
//! In every case the in-process upstream reads the request body frame by
//! frame, dropping each, and answers only once every request of the case
//! has arrived (a barrier), so the peak is the moment all are in flight.
//!
//! Run: `cargo bench -p llm-retry --bench memory` (about a minute; peaks of
//! up to ~2.2 GiB). `MEMORY_CASE=<case>` runs one case alone and prints its
//! line.

// Shared with `overhead.rs`, which uses more of it.
#[allow(dead_code)]
#[path = "support/in_process.rs"]
mod in_process;
#[path = "support/never_retry.rs"]
mod never_retry;

use bytes::Bytes;
use futures_util::stream;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, StreamBody};
use llm_retry::rate_limit::RateKey;
use llm_retry::stream_guard::StreamGuardLayer;

/// The stream guard's default prefix limit (64 KiB).
const DEFAULT_PREFIX_LIMIT: usize = 64 * KIB;
use llm_retry::{ClientLayer, ReplayBody, RetryPolicy};
use never_retry::NeverRetry;
use std::convert::Infallible;
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::Barrier;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const MIB: usize = 1024 * 1024;
const KIB: usize = 1024;
/// Concurrent requests in the body cases.
const REQUESTS: usize = 1000;
/// Concurrent streams in the guard cases.
const STREAMS: usize = 10_000;
/// Requests (and keys) in the key case.
const KEYS: usize = 100_000;
/// Keys per measured block of the key case.
const KEYS_PER_BLOCK: usize = 10_000;

/// Every case, run in this order by the parent process.
const CASES: &[&str] = &[
    "buffered/kept/bare",
    "buffered/kept/tower_retry",
    "buffered/kept/client_layer",
    "buffered/handed/bare",
    "buffered/handed/tower_retry",
    "buffered/handed/client_layer",
    "streamed/bare",
    "streamed/client_layer",
    "streamed/client_layer_cap_256k",
    "guard/bare",
    "guard/guard",
    "guard/past_limit_bare",
    "guard/past_limit_guard_8k",
    "keys/client_layer",
];

fn main() {
    if let Ok(case) = std::env::var("MEMORY_CASE") {
        run_case(&case);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    for case in CASES {
        let output = std::process::Command::new(&exe)
            .env("MEMORY_CASE", case)
            .output()
            .expect("run a case");
        assert!(
            output.status.success(),
            "{case} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        print!("{}", String::from_utf8_lossy(&output.stdout));
    }
}

fn run_case(case: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let start = status_kib("VmRSS");
    let parts: Vec<&str> = case.split('/').collect();
    let extra = rt.block_on(async {
        match parts[..] {
            ["buffered", how, stack] => buffered(how == "kept", stack).await,
            ["streamed", stack] => streamed(stack).await,
            ["guard", stack] => guard(stack).await,
            ["keys", _] => keys().await,
            _ => panic!("no case {case}"),
        }
    });
    let peak = status_kib("VmHWM");
    println!(
        "{case:<32} peak {:>8.1} MiB  above start {:>8.1} MiB{extra}",
        peak as f64 / 1024.0,
        peak.saturating_sub(start) as f64 / 1024.0,
    );
}

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches(" kB").parse().ok())
        .expect("field in /proc/self/status")
}

/// A distinct, resident 1 MiB body (a non-zero fill, so every page is
/// touched rather than left to the zero page).
fn payload(i: usize) -> Bytes {
    Bytes::from(vec![b'a' + (i % 26) as u8; MIB])
}

fn request<B>(body: B) -> Request<B> {
    Request::post("http://127.0.0.1:1/v1/messages")
        .header("content-type", "application/json")
        .header("x-api-key", "sk-memory")
        .body(body)
        .expect("valid request")
}

const RESPONSE: &[u8] = br#"{"id":"msg_mem","type":"message","role":"assistant","content":[{"type":"text","text":"Hi!"}],"stop_reason":"end_turn"}"#;

/// An upstream that drains each request body frame by frame, then answers
/// once `barrier` has seen every request of the case.
fn upstream<B>(
    barrier: Arc<Barrier>,
) -> impl Service<Request<B>, Response = Response<Full<Bytes>>, Error = Infallible, Future = impl Send>
       + Clone
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Debug,
{
    tower::service_fn(move |request: Request<B>| {
        let barrier = barrier.clone();
        async move {
            let mut body = request.into_body();
            while let Some(frame) = body.frame().await {
                drop(frame.expect("request body frame"));
            }
            barrier.wait().await;
            let mut response = Response::new(Full::new(Bytes::from_static(RESPONSE)));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Ok::<_, Infallible>(response)
        }
    })
}

/// Sends every request at once through clones of `svc`, reads every
/// answer to its end, and waits for all.
async fn all_at_once<S, Req, B>(svc: S, requests: Vec<Req>)
where
    S: Service<Req, Response = Response<B>> + Clone + 'static,
    S::Error: Debug,
    S::Future: 'static,
    Req: 'static,
    B: Body + 'static,
    B::Error: Debug,
{
    let local = tokio::task::LocalSet::new();
    for request in requests {
        let svc = svc.clone();
        local.spawn_local(async move {
            let response = svc.oneshot(request).await.expect("a response");
            response.into_body().collect().await.expect("answer body");
        });
    }
    local.await;
}

async fn buffered(kept: bool, stack: &str) -> String {
    let barrier = Arc::new(Barrier::new(REQUESTS));
    let cap = RetryPolicy::default().max_replay_body();
    if kept {
        // Every body made first and kept by the caller until all answers
        // are in; the requests share them (`Bytes` clones).
        let bodies: Vec<Bytes> = (0..REQUESTS).map(payload).collect();
        let requests = bodies.iter().cloned().map(Body1MiB::Made).collect();
        send_buffered(stack, barrier, cap, requests).await;
        drop(bodies);
    } else {
        // Each body made as its request is sent, and kept by nobody else.
        let requests = (0..REQUESTS).map(Body1MiB::Later).collect();
        send_buffered(stack, barrier, cap, requests).await;
    }
    String::new()
}

/// A request's 1 MiB body: made already, or made as the request is sent.
enum Body1MiB {
    Made(Bytes),
    Later(usize),
}

impl Body1MiB {
    /// The request, made as it is sent.
    fn request(self) -> Request<Full<Bytes>> {
        match self {
            Body1MiB::Made(body) => request(Full::new(body)),
            Body1MiB::Later(i) => request(Full::new(payload(i))),
        }
    }
}

async fn send_buffered(stack: &str, barrier: Arc<Barrier>, cap: usize, requests: Vec<Body1MiB>) {
    match stack {
        "bare" => {
            let svc = ServiceBuilder::new()
                .map_request(Body1MiB::request)
                .service(upstream(barrier));
            all_at_once(svc, requests).await
        }
        "tower_retry" => {
            let svc = ServiceBuilder::new()
                .map_request(Body1MiB::request)
                .map_request(move |r: Request<Full<Bytes>>| r.map(|b| ReplayBody::new(b, cap)))
                .layer(tower::retry::RetryLayer::new(NeverRetry))
                .service(upstream(barrier));
            all_at_once(svc, requests).await
        }
        "client_layer" => {
            let svc = ServiceBuilder::new()
                .map_request(Body1MiB::request)
                .layer(ClientLayer::default())
                .service(upstream(barrier));
            all_at_once(svc, requests).await
        }
        _ => panic!("no stack {stack}"),
    }
}

/// A 1 MiB body streamed in 64 KiB chunks, each made when it is polled.
type Streamed = StreamBody<
    stream::Iter<
        std::iter::Map<std::ops::Range<usize>, fn(usize) -> Result<Frame<Bytes>, Infallible>>,
    >,
>;

fn streamed_body() -> Streamed {
    fn chunk(i: usize) -> Result<Frame<Bytes>, Infallible> {
        Ok(Frame::data(Bytes::from(vec![
            b'a' + (i % 26) as u8;
            64 * KIB
        ])))
    }
    StreamBody::new(stream::iter((0..MIB / (64 * KIB)).map(chunk as fn(_) -> _)))
}

async fn streamed(stack: &str) -> String {
    let requests: Vec<_> = (0..REQUESTS).map(|_| request(streamed_body())).collect();
    let barrier = Arc::new(Barrier::new(REQUESTS));
    let layer = match stack {
        "bare" => {
            all_at_once(upstream(barrier), requests).await;
            return String::new();
        }
        "client_layer" => ClientLayer::default(),
        "client_layer_cap_256k" => ClientLayer::new(
            RetryPolicy::builder()
                .max_replay_body(256 * KIB)
                .build()
                .expect("valid policy"),
        ),
        _ => panic!("no stack {stack}"),
    };
    all_at_once(layer.layer(upstream(barrier)), requests).await;
    String::new()
}

/// An event stream that sends `before_content` bytes of `ping` events in
/// 4 KiB chunks (each made when polled), counts itself in `stalled`, and
/// then never ends.
struct StallingStream {
    left: usize,
    stalled: Arc<AtomicUsize>,
    counted: bool,
}

/// One 4 KiB chunk of `ping` events, none of them content.
fn ping_chunk() -> Bytes {
    let event = format!(
        "event: ping\ndata: {{\"type\": \"ping\", \"pad\": \"{}\"}}\n\n",
        "x".repeat(984)
    );
    Bytes::from(event.repeat(4))
}

impl Body for StallingStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left > 0 {
            let chunk = ping_chunk();
            self.left = self.left.saturating_sub(chunk.len());
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if !self.counted {
            self.counted = true;
            self.stalled.fetch_add(1, Ordering::SeqCst);
        }
        // Stalls for good: nothing will wake this body again.
        Poll::Pending
    }
}

async fn guard(stack: &str) -> String {
    let (before_content, guard) = match stack {
        "bare" => (60 * KIB, None),
        "guard" => (60 * KIB, Some(StreamGuardLayer::new())),
        "past_limit_bare" => (256 * KIB, None),
        "past_limit_guard_8k" => (
            256 * KIB,
            Some(StreamGuardLayer::new().prefix_limit(8 * KIB)),
        ),
        _ => panic!("no stack {stack}"),
    };
    let limit = if stack.ends_with("8k") {
        8 * KIB
    } else {
        DEFAULT_PREFIX_LIMIT
    };
    let stalled = Arc::new(AtomicUsize::new(0));
    let upstream = {
        let stalled = stalled.clone();
        tower::service_fn(move |_: Request<Full<Bytes>>| {
            let body = StallingStream {
                left: before_content,
                stalled: stalled.clone(),
                counted: false,
            };
            let mut response = Response::new(body);
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/event-stream"),
            );
            std::future::ready(Ok::<_, Infallible>(response))
        })
    };
    let local = tokio::task::LocalSet::new();
    let before = status_kib("VmRSS");
    for _ in 0..STREAMS {
        let request = request(Full::new(Bytes::from_static(b"{}")));
        match &guard {
            None => {
                let svc = upstream.clone();
                local.spawn_local(async move {
                    let response = svc.oneshot(request).await.expect("a response");
                    // Reads every frame as it comes, keeping none.
                    let mut body = response.into_body();
                    while let Some(frame) = body.frame().await {
                        drop(frame);
                    }
                });
            }
            Some(layer) => {
                let svc = layer.layer(upstream.clone());
                local.spawn_local(async move {
                    let Ok(response) = svc.oneshot(request).await else {
                        return;
                    };
                    let mut body = response.into_body();
                    while let Some(frame) = body.frame().await {
                        drop(frame);
                    }
                });
            }
        }
    }
    local
        .run_until(async {
            while stalled.load(Ordering::SeqCst) < STREAMS {
                tokio::task::yield_now().await;
            }
        })
        .await;
    let now = status_kib("VmRSS");
    let per_stream = (now.saturating_sub(before) * 1024) as f64 / STREAMS as f64;
    format!(
        "  held now {:>7.1} KiB per stream (prefix limit {} KiB)",
        per_stream / 1024.0,
        limit / KIB
    )
}

async fn keys() -> String {
    // Every answer states a quota of 60 requests a minute, so the gate keeps
    // each key's pacing for a second after its send: keys pile up unless
    // the gate bounds them.
    let mut svc = ServiceBuilder::new()
        .layer(ClientLayer::default())
        .map_response(|mut response: Response<Full<Bytes>>| {
            let headers = response.headers_mut();
            for (name, value) in [
                ("x-ratelimit-limit-requests", "60"),
                ("x-ratelimit-remaining-requests", "59"),
                ("x-ratelimit-reset-requests", "1s"),
            ] {
                headers.insert(name, http::HeaderValue::from_static(value));
            }
            response
        })
        .service_fn(in_process::upstream::<ReplayBody<Full<Bytes>>>);
    let mut out = String::new();
    for block in 0..KEYS / KEYS_PER_BLOCK {
        let requests = (block * KEYS_PER_BLOCK..(block + 1) * KEYS_PER_BLOCK)
            .map(|key| {
                let mut request = request(Full::new(Bytes::from_static(b"{\"max_tokens\":1}")));
                request.extensions_mut().insert(RateKey(key as u64));
                request
            })
            .collect();
        let start = Instant::now();
        in_process::send_all(&mut svc, requests).await;
        let per_send = start.elapsed().as_nanos() as f64 / KEYS_PER_BLOCK as f64;
        out.push_str(&format!(
            "\n    after {:>7} keys: resident {:>6.1} MiB, {:>6.0} ns per send",
            (block + 1) * KEYS_PER_BLOCK,
            status_kib("VmRSS") as f64 / 1024.0,
            per_send
        ));
    }
    out
}
