//! Three replicas behind one provider key, sharing through Redis or not.
//!
//! One upstream key with a quota: a token bucket of 50 requests a second
//! (bursts of 50), its answers stating it in a provider's headers, its
//! 429s naming their wait. 300 requests, spread evenly over three
//! replicas (20 closed-loop clients each, 5 requests a client). Rows:
//!
//! - `shared`: three `ClientLayer` stacks, their gates sharing holds and
//!   paces (`RedisGate`) and their budgets sharing counts through one
//!   `redis-server`, each synced once at start;
//! - `unshared`: the same three stacks, each on its own;
//! - `one client, known quota`: one stack whose gate is told the quota,
//!   serving all 300: the sends a client that knows the quota is forced
//!   to make, the reference for the shared row.
//!
//! Reported: sends upstream (÷ the reference's), completion (÷ the
//! capacity bound: the requests past the burst at the quota's rate), and
//! requests served. Run with
//! `cargo run --release -p llm-retry-redis --example replicas` (needs
//! `redis-server`; `REPLICAS_TRACE=1` prints when refusals came); results
//! in docs/scale-out.md.

#[path = "../tests/support/mod.rs"]
mod support;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::budget::RetryBudget;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{BoxError, ClientLayer, RetryPolicy};
use llm_retry_mock::{Limit, MockServer, Quota, Reply, Route, Script, Shape};
use llm_retry_redis::{RedisBudgetStore, RedisGate, SharedOptions, StateName};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

const PER_SECOND: u64 = 50;
const BURST: u64 = 50;
const REPLICAS: usize = 3;
const CLIENTS: usize = 20;
const EACH: usize = 5;
const LATENCY: Duration = Duration::from_millis(20);

/// A replica's stack; the status is all the bench reads of an answer.
type Svc = BoxCloneSyncService<http::Request<Full<Bytes>>, http::StatusCode, BoxError>;

fn upstream(shape: Shape) -> Script {
    let limit = Limit::new(Quota::Bucket {
        per_second: PER_SECOND,
        burst: BURST,
    })
    .shape(shape);
    Script::new().route(
        "/v1/messages",
        Route::limited(
            limit,
            Reply::rate_limited(None).delay(LATENCY),
            Route::always(Reply::anthropic_ok("Hi").delay(LATENCY)),
        ),
    )
}

fn stack(layer: ClientLayer) -> Svc {
    let client = Client::builder(TokioExecutor::new()).build_http();
    BoxCloneSyncService::new(
        layer
            .layer(client)
            .map_response(|answer: http::Response<_>| answer.status()),
    )
}

fn request(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-api-key", "sk-fleet-key")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[]}"#,
        )))
        .expect("request")
}

/// Each replica's clients, closed loop: how many were served.
async fn run(replicas: &[Svc], url: &str) -> usize {
    let mut tasks = Vec::new();
    for replica in replicas {
        for _ in 0..CLIENTS {
            let (replica, url) = (replica.clone(), url.to_owned());
            tasks.push(tokio::spawn(async move {
                let mut served = 0;
                for _ in 0..EACH {
                    if let Ok(answer) = replica.clone().oneshot(request(&url)).await {
                        served += usize::from(answer == 200);
                    }
                }
                served
            }));
        }
    }
    let mut served = 0;
    for task in tasks {
        served += task.await.unwrap_or(0);
    }
    served
}

struct Row {
    name: &'static str,
    sends: usize,
    served: usize,
    took: Duration,
}

async fn row<F>(name: &'static str, shape: Shape, replicas: F) -> Row
where
    F: AsyncFnOnce() -> Vec<Svc>,
{
    let mock = MockServer::start(upstream(shape)).await.expect("mock");
    let replicas = replicas().await;
    let start = Instant::now();
    let served = run(&replicas, &mock.url("/v1/messages")).await;
    if std::env::var_os("REPLICAS_TRACE").is_some() {
        // When the refused sends came, from the first send on.
        let sent = mock.requests();
        if let Some(first) = sent.first().map(|r| r.received_at) {
            let refused: Vec<u128> = sent
                .iter()
                .filter(|r| {
                    r.reply
                        .as_ref()
                        .is_some_and(|reply| format!("{reply:?}").contains("429"))
                })
                .map(|r| (r.received_at - first).as_millis())
                .collect();
            eprintln!("{name}: refused at {refused:?} ms");
        }
    }
    Row {
        name,
        sends: mock.request_count(),
        served,
        took: start.elapsed(),
    }
}

/// A replica sharing through `redis`, synced once as a replica starting
/// up would be (its connection made, its scripts loaded).
async fn shared_replica(redis: &support::RedisServer, n: usize) -> Svc {
    let options = SharedOptions::default().with_replicas(REPLICAS as u32);
    let name = StateName::new("upstream").expect("name");
    let budget = RetryBudget::default();
    let store = RedisBudgetStore::start(redis.client(), name.clone(), budget.rule(), options)
        .expect("budget store");
    let holds = RedisGate::start(redis.client(), name, options, b"bench fleet").expect("holds");
    // A first sync also connects: a loaded machine may take a few tries.
    let mut tries = 0;
    while !(store.sync().await && holds.sync().await) {
        tries += 1;
        assert!(tries < 100, "Redis does not answer");
    }
    let policy = RetryPolicy::builder()
        .budget(
            budget
                .with_store(Arc::new(store))
                .named(format!("replica {n}")),
        )
        .build()
        .expect("policy");
    stack(
        ClientLayer::new(policy).rate_limit(RateLimitLayer::learned().share_with(Arc::new(holds))),
    )
}

#[tokio::main]
async fn main() {
    let Some(redis) = support::RedisServer::start() else {
        eprintln!("replicas: needs redis-server");
        return;
    };
    let total = REPLICAS * CLIENTS * EACH;
    let bound = (total as f64 - BURST as f64) / PER_SECOND as f64;
    println!(
        "{REPLICAS} replicas × {CLIENTS} clients × {EACH} requests = {total}; bucket {PER_SECOND}/s, burst {BURST}; \
         capacity bound {bound:.1} s; {} ms a reply",
        LATENCY.as_millis()
    );
    for (shape, label) in [
        (Shape::OpenAi, "OpenAI-shaped"),
        (Shape::Anthropic, "Anthropic-shaped"),
    ] {
        let known = row("one client, known quota", shape, async || {
            let quota =
                Quotas::none().requests_per_minute_with_burst(PER_SECOND as u32 * 60, BURST as u32);
            let gate = RateLimitLayer::new(quota).expect("quota");
            // One client: all the clients of the three replicas, in one.
            let one = stack(ClientLayer::default().rate_limit(gate));
            vec![one.clone(), one.clone(), one]
        })
        .await;
        let shared = row("shared (holds, pace, budget)", shape, async || {
            let mut replicas = Vec::new();
            for n in 0..REPLICAS {
                replicas.push(shared_replica(&redis, n).await);
            }
            replicas
        })
        .await;
        let unshared = row("unshared", shape, async || {
            (0..REPLICAS)
                .map(|_| stack(ClientLayer::default()))
                .collect()
        })
        .await;
        println!("\n{label} upstream:");
        println!("| row | sends (÷ known quota's) | completion (÷ bound) | served |");
        println!("|---|--:|--:|--:|");
        for r in [&known, &shared, &unshared] {
            println!(
                "| {} | {} ({:.2}×) | {:.2} s ({:.2}×) | {}/{total} |",
                r.name,
                r.sends,
                r.sends as f64 / known.sends as f64,
                r.took.as_secs_f64(),
                r.took.as_secs_f64() / bound,
                r.served
            );
        }
    }
}
