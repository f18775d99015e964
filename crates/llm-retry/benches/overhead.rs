//! Per-call cost of the success path, for five stacks over one in-process
//! upstream, measured in one process:
//!
//! | stack          | what                                                   |
//! | -------------- | ------------------------------------------------------ |
//! | `bare`         | the upstream alone                                     |
//! | `tower_retry`  | `tower::retry::Retry` with a never-retrying policy whose `clone_request` rebuilds the request around a `ReplayBody` clone: the least any retry-capable layer must do |
//! | `retry`        | `RetryLayer::new(RetryPolicy::default())`              |
//! | `retry_guard`  | `RetryLayer` over `StreamGuardLayer`                   |
//! | `client_layer` | `ClientLayer::default()`                               |
//!
//! The upstream is a `tower::service_fn` that drains the request body and
//! answers `200 application/json` with a ~200-byte body (as in
//! `success_path.rs`). The request, a POST with `content-type`, `x-api-key`
//! and a ~1 KiB JSON `Full<Bytes>` body, is built outside the timed region.
//! One call is `ready` + `call` on a long-lived service, then reading the
//! response body to its end.
//!
//! Modes:
//!
//! - default (`cargo bench -p llm-retry --bench overhead`): an allocation
//!   table, then one criterion benchmark per stack (`overhead/<stack>`).
//! - `OVERHEAD_INTERLEAVED=1`: blocks of `OVERHEAD_BLOCK` calls (2,000)
//!   alternate between all stacks for `OVERHEAD_ROUNDS` rounds (30), the
//!   order rotating each round; prints the median ns/call per stack, its
//!   ratio to `tower_retry`, and allocations per call. Interleaving cancels
//!   drift from a noisy neighbour.
//! - `OVERHEAD_STACK=<stack> OVERHEAD_CALLS=<n>`: a short warm-up, then `n`
//!   calls of that stack inside `measured_region`, and exit. For callgrind
//!   (`--toggle-collect=*measured_region*`), instructions per call are
//!   `(total(n2) - total(n1)) / (n2 - n1)`; see `overhead_callgrind.sh`.
//!
//! Allocations are counted by `stats_alloc`'s instrumented `System`
//! allocator (the crate's lints forbid `unsafe_code`, which a bench file
//! cannot override, so the `GlobalAlloc` impl comes from that crate). Its
//! counters are atomic and on in every mode, so each allocation costs a few
//! extra nanoseconds in every stack.

// `criterion_group!` expands to an undocumented `pub fn`.
#![allow(missing_docs)]

#[path = "support/in_process.rs"]
mod in_process;
#[path = "support/never_retry.rs"]
mod never_retry;

use bytes::Bytes;
use criterion::{criterion_group, Criterion};
use http::{Request, Response};
use http_body::Body;
use http_body_util::Full;
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{ClientLayer, ReplayBody, RetryLayer, RetryPolicy};
use never_retry::NeverRetry;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use std::alloc::System;
use std::fmt::Debug;
use std::future::Future;
use std::hint::black_box;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tower::{Service, ServiceBuilder};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The stacks, in the order `Stacks::run` dispatches on.
const STACKS: [&str; 5] = [
    "bare",
    "tower_retry",
    "retry",
    "retry_guard",
    "client_layer",
];
/// Index of the baseline in `STACKS`.
const BASELINE: usize = 1;

type Req = Request<Full<Bytes>>;

fn requests(payload: &Bytes, n: usize) -> Vec<Req> {
    (0..n)
        .map(|_| {
            Request::post("http://127.0.0.1:1/v1/messages")
                .header("content-type", "application/json")
                .header("x-api-key", "sk-bench")
                .body(Full::new(payload.clone()))
                .expect("valid request")
        })
        .collect()
}

/// Anything that takes the bench request and answers with a body.
trait Stack {
    /// Sends each request in turn: `ready`, `call`, the response body read
    /// to its end.
    fn run(&mut self, requests: Vec<Req>) -> impl Future<Output = ()>;
}

impl<S, B> Stack for S
where
    S: Service<Req, Response = Response<B>>,
    S::Error: Debug,
    B: Body<Data = Bytes>,
    B::Error: Debug,
{
    async fn run(&mut self, requests: Vec<Req>) {
        in_process::send_all(self, requests).await;
    }
}

/// The five stacks, each built once and long-lived.
struct Stacks<A, B, C, D, E> {
    bare: A,
    tower_retry: B,
    retry: C,
    retry_guard: D,
    client_layer: E,
}

fn stacks() -> Stacks<impl Stack, impl Stack, impl Stack, impl Stack, impl Stack> {
    let cap = RetryPolicy::default().max_replay_body();
    Stacks {
        bare: tower::service_fn(in_process::upstream::<Full<Bytes>>),
        tower_retry: ServiceBuilder::new()
            .map_request(move |request: Req| request.map(|body| ReplayBody::new(body, cap)))
            .layer(tower::retry::RetryLayer::new(NeverRetry))
            .service_fn(in_process::upstream::<ReplayBody<Full<Bytes>>>),
        retry: ServiceBuilder::new()
            .layer(RetryLayer::new(RetryPolicy::default()))
            .service_fn(in_process::upstream),
        retry_guard: ServiceBuilder::new()
            .layer(RetryLayer::new(RetryPolicy::default()))
            .layer(StreamGuardLayer::new())
            .service_fn(in_process::upstream),
        client_layer: ServiceBuilder::new()
            .layer(ClientLayer::default())
            .service_fn(in_process::upstream),
    }
}

impl<A: Stack, B: Stack, C: Stack, D: Stack, E: Stack> Stacks<A, B, C, D, E> {
    async fn run(&mut self, which: usize, requests: Vec<Req>) {
        match which {
            0 => self.bare.run(requests).await,
            1 => self.tower_retry.run(requests).await,
            2 => self.retry.run(requests).await,
            3 => self.retry_guard.run(requests).await,
            4 => self.client_layer.run(requests).await,
            _ => unreachable!("no stack {which}"),
        }
    }

    /// Wall time of sending `requests` through stack `which`.
    fn time(&mut self, rt: &Runtime, which: usize, requests: Vec<Req>) -> Duration {
        rt.block_on(async {
            let start = Instant::now();
            self.run(which, requests).await;
            start.elapsed()
        })
    }

    /// Allocations and bytes allocated per call over `n` calls.
    fn allocs(&mut self, rt: &Runtime, which: usize, payload: &Bytes, n: usize) -> (f64, f64) {
        let requests = requests(payload, n);
        let region = Region::new(GLOBAL);
        rt.block_on(self.run(which, requests));
        let change = region.change();
        let per = |x: usize| x as f64 / n as f64;
        (
            per(change.allocations + change.reallocations),
            per(change.bytes_allocated),
        )
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

fn print_allocs<A: Stack, B: Stack, C: Stack, D: Stack, E: Stack>(
    stacks: &mut Stacks<A, B, C, D, E>,
    rt: &Runtime,
    payload: &Bytes,
) {
    println!("{:<14} {:>12} {:>12}", "stack", "allocs/call", "bytes/call");
    for (which, name) in STACKS.iter().enumerate() {
        stacks.allocs(rt, which, payload, 200); // warm-up
        let (allocs, bytes) = stacks.allocs(rt, which, payload, 2_000);
        println!("{name:<14} {allocs:>12.2} {bytes:>12.1}");
    }
}

/// Blocks of calls alternating between all stacks; median ns/call each.
fn interleaved() {
    let rt = runtime();
    let payload = in_process::json_body(1024);
    let mut stacks = stacks();
    let block = env_usize("OVERHEAD_BLOCK", 2_000);
    let rounds = env_usize("OVERHEAD_ROUNDS", 30);

    // Warm-up: one block per stack, untimed.
    for which in 0..STACKS.len() {
        stacks.time(&rt, which, requests(&payload, block));
    }
    let mut samples = vec![Vec::with_capacity(rounds); STACKS.len()];
    for round in 0..rounds {
        for k in 0..STACKS.len() {
            let which = (round + k) % STACKS.len();
            let requests = requests(&payload, block);
            let elapsed = stacks.time(&rt, which, requests);
            samples[which].push(elapsed.as_nanos() as f64 / block as f64);
        }
    }
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            s.sort_by(f64::total_cmp);
            let mid = s.len() / 2;
            if s.len() % 2 == 0 {
                (s[mid - 1] + s[mid]) / 2.0
            } else {
                s[mid]
            }
        })
        .collect();

    println!("interleaved: {rounds} rounds x {block} calls per stack, 1 KiB request body");
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "stack", "ns/call", "min", "max", "vs bare", "vs tower_retry"
    );
    for (which, name) in STACKS.iter().enumerate() {
        let s = &samples[which];
        println!(
            "{:<14} {:>10.1} {:>10.1} {:>10.1} {:>+11.1}ns {:>13.3}x",
            name,
            medians[which],
            s[0],
            s[s.len() - 1],
            medians[which] - medians[0],
            medians[which] / medians[BASELINE],
        );
    }
    println!();
    print_allocs(&mut stacks, &rt, &payload);
}

/// The region callgrind collects with `--toggle-collect=*measured_region*`.
#[inline(never)]
fn measured_region(f: &mut dyn FnMut()) {
    f();
}

/// One stack, `calls` calls, for an instruction counter.
fn single_stack(name: &str) {
    let which = STACKS
        .iter()
        .position(|s| *s == name)
        .unwrap_or_else(|| panic!("OVERHEAD_STACK={name}: not one of {STACKS:?}"));
    let calls = env_usize("OVERHEAD_CALLS", 1_000);
    let rt = runtime();
    let payload = in_process::json_body(1024);
    let mut stacks = stacks();
    stacks.time(&rt, which, requests(&payload, 200)); // warm-up
    let mut batch = Some(requests(&payload, calls));
    measured_region(&mut || {
        let requests = batch.take().expect("one batch");
        rt.block_on(stacks.run(which, requests));
    });
    black_box(&batch);
}

fn overhead(c: &mut Criterion) {
    let rt = runtime();
    let payload = in_process::json_body(1024);
    let mut stacks = stacks();
    print_allocs(&mut stacks, &rt, &payload);

    let mut group = c.benchmark_group("overhead");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for (which, name) in STACKS.iter().enumerate() {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                const BATCH: u64 = 1024;
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(BATCH);
                    left -= n;
                    total += stacks.time(&rt, which, requests(&payload, n as usize));
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, overhead);

fn main() {
    if let Ok(name) = std::env::var("OVERHEAD_STACK") {
        single_stack(&name);
    } else if std::env::var("OVERHEAD_INTERLEAVED").is_ok_and(|v| v == "1") {
        interleaved();
    } else {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
