//! The storm benchmark: what retry policies do to an upstream that is at
//! capacity, or down.
//!
//! ```text
//! cargo run --release --example storm            # ~2–4 min; writes docs/storm.md and docs/storm.svg
//! cargo run --release --example storm -- --help  # options (also as STORM_* environment variables)
//! ```
//!
//! # What it models
//!
//! The upstream is `llm-retry-mock` on 127.0.0.1: one route behind
//! [`Route::capacity`], a token bucket of C requests per second (default
//! 200, bursts of 10) that answers Anthropic's `429 rate_limit_error` with
//! the exact time until the next token as `retry-after-ms` and `Retry-After`
//! (whole seconds, rounded up) when it is empty. Every reply — 200, 429 or
//! 503 — takes the same fixed response time (default 20 ms), standing in
//! for the network and the provider's front door.
//!
//! N closed-loop clients (default 200) share one connection pool; each
//! sends its next logical request as soon as the previous one ended, in
//! success or failure. The same workload runs once per policy, one policy
//! after the other, each against a fresh upstream (full bucket, fresh
//! clock):
//!
//! 1. **llm-retry defaults**: `RetryLayer::new(project_policy())` over a
//!    hyper-util client — the real middleware, not a model.
//! 2. **naive backoff** (a model of reqwest-retry's default
//!    `RetryTransientMiddleware` with `ExponentialBackoff::builder()
//!    .build_with_max_retries(3)`): up to 3 retries of 408, 429, 5xx and
//!    transport errors, waiting `U(0, 1) × 1 s × 2ⁿ` (full jitter, n = retries
//!    so far, cap 30 min), never reading `Retry-After`.
//! 3. **official SDKs** (a model of the Anthropic and OpenAI Python/TS
//!    SDKs' defaults): up to 2 retries of 408, 409, 429, 5xx and transport
//!    errors (`x-should-retry` overrides), waiting the server's
//!    `retry-after-ms` / `Retry-After` when it is in (0, 60] s, else
//!    `min(0.5 s × 2ⁿ, 8 s) × U(0.75, 1]`.
//! 4. **no retries**: one send per logical request.
//!
//! Two scenarios:
//!
//! - **Rate limiting**: every client sends a fixed number of requests
//!   (default 10, so 2 000 requests take 10 s at exactly C). Per policy:
//!   goodput (successes per second of the run ÷ C), upstream sends per
//!   logical request (amplification), success rate, p50/p99 latency of all
//!   logical requests (success or not), run duration.
//! - **Outage**: the same clients run closed-loop for that ideal duration
//!   (10 s by default) while the upstream answers `503` to everything for a
//!   window in the middle (3 s by default). Per policy: upstream sends per
//!   second during the window ÷ new logical requests per second before it
//!   (the offered rate), and retries per new request inside the window.
//!
//! In both, every logical request must end in exactly one result (counted
//! per request id, sent as `x-storm-request`), and the upstream must have
//! answered no request id with a success twice.
//!
//! The project's targets (for the budget- and gate-equipped version; the
//! defaults today are not expected to meet them): goodput ≥ 95 % of C,
//! amplification ≤ 1.2, outage load within a retry budget (20 % + 10
//! retries/s, Finagle's), zero requests lost or duplicated. Change
//! [`project_policy`] to measure another configuration.

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::{BoxError, RetryError, RetryLayer, RetryPolicy, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::io::Write as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The policy measured in the "llm-retry" row. Switch it to a budgeted
/// policy to measure that instead.
fn project_policy() -> RetryPolicy {
    RetryPolicy::default()
}

const PATH: &str = "/v1/messages";
const ID_HEADER: &str = "x-storm-request";
const PROMPT: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"Hello"}]}"#;

/// Targets for the project's row.
const TARGET_GOODPUT: f64 = 0.95;
const TARGET_AMPLIFICATION: f64 = 1.2;
/// The reference retry budget for the outage target: 20 % + 10 retries/s.
const BUDGET_RATIO: f64 = 0.2;
const BUDGET_FLOOR_PER_SEC: f64 = 10.0;

// ---------------------------------------------------------------- options

/// Benchmark parameters.
#[derive(Debug, Clone)]
struct Config {
    capacity: u32,
    burst: u32,
    clients: usize,
    requests: usize,
    seed: u64,
    latency: Duration,
    outage: Duration,
    docs: Option<PathBuf>,
}

const USAGE: &str = "\
usage: cargo run --release --example storm -- [options]

  --capacity N     upstream capacity C, requests/s         (STORM_CAPACITY, 200)
  --burst N        token bucket burst                      (STORM_BURST, 10)
  --clients N      concurrent closed-loop clients          (STORM_CLIENTS, 200)
  --requests N     logical requests per client             (STORM_REQUESTS, 10)
  --seed N         seed of the modelled policies' jitter   (STORM_SEED, 2026)
  --latency-ms N   upstream response time, every reply     (STORM_LATENCY_MS, 20)
  --outage-secs N  length of the 503 window                (STORM_OUTAGE_SECS, 3)
  --docs DIR       where storm.md and storm.svg go         (STORM_DOCS, <workspace>/docs)
  --no-docs        print only, write nothing
";

impl Config {
    fn from_env_and_args() -> Result<Option<Config>, BoxError> {
        let mut values: HashMap<String, String> = HashMap::new();
        for (name, var) in [
            ("capacity", "STORM_CAPACITY"),
            ("burst", "STORM_BURST"),
            ("clients", "STORM_CLIENTS"),
            ("requests", "STORM_REQUESTS"),
            ("seed", "STORM_SEED"),
            ("latency-ms", "STORM_LATENCY_MS"),
            ("outage-secs", "STORM_OUTAGE_SECS"),
            ("docs", "STORM_DOCS"),
        ] {
            if let Ok(value) = std::env::var(var) {
                values.insert(name.to_owned(), value);
            }
        }
        let mut no_docs = false;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "-h" | "--help" => {
                    print!("{USAGE}");
                    return Ok(None);
                }
                "--no-docs" => no_docs = true,
                _ => {
                    let Some(flag) = arg.strip_prefix("--") else {
                        return Err(format!("unexpected argument {arg:?}\n\n{USAGE}").into());
                    };
                    let (name, value) = match flag.split_once('=') {
                        Some((name, value)) => (name.to_owned(), value.to_owned()),
                        None => {
                            let value = args
                                .next()
                                .ok_or_else(|| format!("--{flag} needs a value"))?;
                            (flag.to_owned(), value)
                        }
                    };
                    values.insert(name, value);
                }
            }
        }
        let known = [
            "capacity",
            "burst",
            "clients",
            "requests",
            "seed",
            "latency-ms",
            "outage-secs",
            "docs",
        ];
        if let Some(name) = values.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("unknown option --{name}\n\n{USAGE}").into());
        }
        fn num<T: std::str::FromStr>(
            values: &HashMap<String, String>,
            name: &str,
            default: T,
        ) -> Result<T, BoxError> {
            match values.get(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("--{name}: not a number: {v:?}").into()),
            }
        }
        let config = Config {
            capacity: num(&values, "capacity", 200)?,
            burst: num(&values, "burst", 10)?,
            clients: num(&values, "clients", 200)?,
            requests: num(&values, "requests", 10)?,
            seed: num(&values, "seed", 2026)?,
            latency: Duration::from_millis(num(&values, "latency-ms", 20)?),
            outage: Duration::from_secs_f64(num(&values, "outage-secs", 3.0)?),
            docs: match (no_docs, values.get("docs")) {
                (true, _) => None,
                (false, Some(dir)) if dir.is_empty() => None,
                (false, Some(dir)) => Some(PathBuf::from(dir)),
                (false, None) => Some(PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../docs"
                ))),
            },
        };
        if config.capacity == 0 || config.clients == 0 || config.requests == 0 {
            return Err("capacity, clients and requests must be at least 1".into());
        }
        if config.outage >= config.ideal_duration() {
            return Err("the outage must be shorter than the ideal run".into());
        }
        Ok(Some(config))
    }

    fn logical_requests(&self) -> usize {
        self.clients * self.requests
    }

    /// How long the fixed workload takes at exactly C.
    fn ideal_duration(&self) -> Duration {
        Duration::from_secs_f64(self.logical_requests() as f64 / f64::from(self.capacity))
    }

    /// The 503 window of the outage scenario: centred in the ideal run.
    fn outage_window(&self) -> std::ops::Range<Duration> {
        let start = (self.ideal_duration() - self.outage) / 2;
        start..start + self.outage
    }
}

// ---------------------------------------------------------------- policies

/// A client-side retry behaviour under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Project,
    Naive,
    Sdk,
    NoRetry,
}

impl Policy {
    const ALL: [Policy; 4] = [Policy::Project, Policy::Naive, Policy::Sdk, Policy::NoRetry];

    fn label(self) -> &'static str {
        match self {
            Policy::Project => "llm-retry defaults",
            Policy::Naive => "naive backoff (model)",
            Policy::Sdk => "official SDKs (model)",
            Policy::NoRetry => "no retries",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Policy::Project => "#2b6cb0",
            Policy::Naive => "#c05621",
            Policy::Sdk => "#6b46c1",
            Policy::NoRetry => "#718096",
        }
    }
}

/// What one upstream send came back with.
enum Attempt {
    Success,
    Status {
        status: StatusCode,
        headers: HeaderMap,
    },
    Transport,
}

/// The final outcome of one logical request.
struct Outcome {
    ok: bool,
    /// `200`, `429 after 3 sends`, `transport error`…: for the breakdown.
    why: String,
}

/// Sends one attempt through `client` and reads the whole body.
async fn send_once(client: &UpstreamClient, url: &str, id: u64) -> Attempt {
    let request = match request(url, id, Full::new(Bytes::from_static(PROMPT.as_bytes()))) {
        Ok(request) => request,
        Err(_) => return Attempt::Transport,
    };
    match client.clone().oneshot(request).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            match body.collect().await {
                Ok(_) if parts.status.is_success() => Attempt::Success,
                Ok(_) => Attempt::Status {
                    status: parts.status,
                    headers: parts.headers,
                },
                Err(_) => Attempt::Transport,
            }
        }
        Err(_) => Attempt::Transport,
    }
}

fn request<B>(url: &str, id: u64, body: B) -> Result<Request<B>, BoxError> {
    Ok(Request::post(url)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", "sk-ant-storm-not-a-real-key")
        .header(ID_HEADER, id.to_string())
        .body(body)?)
}

/// The server-named wait as the SDKs read it: `retry-after-ms`, else
/// `Retry-After` in (fractional) seconds.
fn sdk_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
    };
    let secs = number("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| number("retry-after"))?;
    (secs > 0.0 && secs <= 60.0).then(|| Duration::from_secs_f64(secs))
}

/// Runs one logical request under a modelled policy.
async fn modelled(
    policy: Policy,
    client: &UpstreamClient,
    url: &str,
    id: u64,
    rng: &mut SmallRng,
) -> Outcome {
    let max_retries = match policy {
        Policy::Naive => 3,
        Policy::Sdk => 2,
        Policy::NoRetry | Policy::Project => 0,
    };
    let mut retries: u32 = 0;
    loop {
        let attempt = send_once(client, url, id).await;
        let sends = retries + 1;
        let (retryable, wait, why) = match &attempt {
            Attempt::Success => {
                return Outcome {
                    ok: true,
                    why: "200".to_owned(),
                }
            }
            Attempt::Status { status, headers } => {
                let code = status.as_u16();
                let retryable = match policy {
                    // reqwest-retry's DefaultRetryableStrategy.
                    Policy::Naive => code == 408 || code == 429 || status.is_server_error(),
                    // The SDKs' _should_retry.
                    Policy::Sdk => match headers.get("x-should-retry").map(|v| v.as_bytes()) {
                        Some(b"true") => true,
                        Some(b"false") => false,
                        _ => matches!(code, 408 | 409 | 429) || code >= 500,
                    },
                    Policy::NoRetry | Policy::Project => false,
                };
                let hint = match policy {
                    Policy::Sdk => sdk_retry_after(headers),
                    _ => None,
                };
                (retryable, hint, format!("{code}"))
            }
            Attempt::Transport => (true, None, "transport error".to_owned()),
        };
        if !retryable || retries >= max_retries {
            let why = if sends == 1 {
                why
            } else {
                format!("{why} after {sends} sends")
            };
            return Outcome { ok: false, why };
        }
        let delay = match policy {
            // ExponentialBackoff: min(1 s × 2ⁿ, 30 min) × U(0, 1).
            Policy::Naive => {
                let base =
                    Duration::from_secs(1u64 << retries.min(10)).min(Duration::from_secs(1800));
                base.mul_f64(rng.random::<f64>())
            }
            Policy::Sdk => wait.unwrap_or_else(|| {
                let base = (0.5 * 2f64.powi(retries as i32)).min(8.0);
                Duration::from_secs_f64(base * (1.0 - 0.25 * rng.random::<f64>()))
            }),
            Policy::NoRetry | Policy::Project => Duration::ZERO,
        };
        tokio::time::sleep(delay).await;
        retries += 1;
    }
}

/// Runs one logical request through the real `RetryLayer`.
async fn project<S>(service: &S, url: &str, id: u64) -> Outcome
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<llm_retry::RetryBody<hyper::body::Incoming>>,
            Error = BoxError,
        > + Clone,
{
    let request = match request(url, id, Full::new(Bytes::from_static(PROMPT.as_bytes()))) {
        Ok(request) => request,
        Err(e) => {
            return Outcome {
                ok: false,
                why: e.to_string(),
            }
        }
    };
    match service.clone().oneshot(request).await {
        Ok(response) => {
            let status = response.status();
            let sends = response
                .extensions()
                .get::<RetryReport>()
                .map_or(1, |r| r.attempts);
            let complete = response.into_body().collect().await.is_ok();
            let ok = complete && status.is_success();
            let why = match (ok, complete, sends) {
                (true, _, _) => "200".to_owned(),
                (false, false, _) => "body failed".to_owned(),
                (false, true, 1) => status.as_u16().to_string(),
                (false, true, n) => format!("{} after {n} sends", status.as_u16()),
            };
            Outcome { ok, why }
        }
        Err(e) => {
            let why = match e.downcast_ref::<RetryError>() {
                Some(e) => format!("no response: {}", e.report().stop),
                None => e.to_string(),
            };
            Outcome { ok: false, why }
        }
    }
}

// ---------------------------------------------------------------- counting

/// Per request id, how many sends the upstream answered with a success.
#[derive(Default)]
struct Successes(Mutex<HashMap<u64, u32>>);

impl Successes {
    fn add(&self, id: u64) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *map.entry(id).or_default() += 1;
    }

    fn duplicated(&self) -> usize {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().filter(|n| **n > 1).count()
    }
}

/// Sits between the retry logic and the connection pool: sees every send
/// and notes which request ids the upstream answered with a success.
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    successes: Arc<Successes>,
}

type UpstreamClient =
    Counted<Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>>;

impl<S, B, R> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let id = request_id(request.headers());
        let successes = Arc::clone(&self.successes);
        let future = self.inner.call(request);
        Box::pin(async move {
            let result = future.await;
            if let (Ok(response), Some(id)) = (&result, id) {
                if response.status().is_success() {
                    successes.add(id);
                }
            }
            result
        })
    }
}

fn request_id(headers: &HeaderMap) -> Option<u64> {
    headers.get(ID_HEADER)?.to_str().ok()?.parse().ok()
}

// ---------------------------------------------------------------- one run

/// Which upstream and which workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// Fixed requests per client against the token bucket.
    RateLimit,
    /// Closed loop for the ideal duration, 503 for a window in the middle.
    Outage,
}

/// One logical request's end.
struct Done {
    id: u64,
    ok: bool,
    why: String,
    latency: Duration,
}

/// Everything one (policy, scenario) run measured.
struct Run {
    policy: Policy,
    logical: usize,
    succeeded: usize,
    results: usize,
    lost: usize,
    duplicated_results: usize,
    duplicated_upstream: usize,
    unknown_sends: usize,
    sends: usize,
    duration: Duration,
    p50: Duration,
    p99: Duration,
    outcomes: BTreeMap<String, usize>,
    /// Outage scenario only.
    outage: Option<OutageLoad>,
}

/// Load around the outage window.
struct OutageLoad {
    /// New logical requests per second before the window.
    offered_before: f64,
    /// Upstream sends per second within the window.
    sends_during: f64,
    /// New logical requests (first sends) within the window.
    first_sends_during: usize,
    /// Every send within the window.
    all_sends_during: usize,
}

impl OutageLoad {
    fn ratio(&self) -> f64 {
        self.sends_during / self.offered_before
    }

    fn retries_per_new_request(&self) -> Option<f64> {
        (self.first_sends_during > 0).then(|| {
            (self.all_sends_during - self.first_sends_during) as f64
                / self.first_sends_during as f64
        })
    }
}

impl Run {
    fn goodput(&self, capacity: u32) -> f64 {
        self.succeeded as f64 / self.duration.as_secs_f64().max(1e-9) / f64::from(capacity)
    }

    fn amplification(&self) -> f64 {
        self.sends as f64 / self.logical.max(1) as f64
    }

    fn success_rate(&self) -> f64 {
        self.succeeded as f64 / self.logical.max(1) as f64
    }
}

fn script(config: &Config, scenario: Scenario) -> Script {
    let latency = config.latency;
    let ok = Route::always(Reply::anthropic_ok("Hello! How can I help?").delay(latency));
    let limited = Route::capacity(
        config.capacity,
        config.burst,
        Reply::rate_limited(None).delay(latency),
        ok,
    );
    let route = match scenario {
        Scenario::RateLimit => limited,
        Scenario::Outage => Route::outage(
            config.outage_window(),
            Reply::anthropic_error(503, "api_error", "Service unavailable").delay(latency),
            limited,
        ),
    };
    Script::new().route(PATH, route)
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

async fn run(config: &Config, policy: Policy, scenario: Scenario) -> Result<Run, BoxError> {
    let mock = MockServer::start(script(config, scenario)).await?;
    let url = mock.url(PATH);
    let t0 = mock.started_at();
    let successes = Arc::new(Successes::default());
    let client = Counted {
        inner: Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>(),
        successes: Arc::clone(&successes),
    };
    let retrying = ServiceBuilder::new()
        .layer(RetryLayer::new(project_policy()))
        .service(Counted {
            inner: Client::builder(TokioExecutor::new()).build_http(),
            successes: Arc::clone(&successes),
        });
    let next_id = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let deadline = match scenario {
        Scenario::RateLimit => None,
        Scenario::Outage => Some(t0 + config.ideal_duration()),
    };

    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..config.clients {
        let (client, retrying, url) = (client.clone(), retrying.clone(), url.clone());
        let (next_id, finished) = (Arc::clone(&next_id), Arc::clone(&finished));
        let per_client = config.requests;
        let seed = splitmix64(config.seed ^ splitmix64(c as u64 + 1));
        tasks.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut done = Vec::new();
            for n in 0.. {
                let more = match deadline {
                    None => n < per_client,
                    Some(deadline) => Instant::now() < deadline,
                };
                if !more {
                    break;
                }
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                let started = Instant::now();
                let outcome = match policy {
                    Policy::Project => project(&retrying, &url, id).await,
                    _ => modelled(policy, &client, &url, id, &mut rng).await,
                };
                done.push(Done {
                    id,
                    ok: outcome.ok,
                    why: outcome.why,
                    latency: started.elapsed(),
                });
                finished.fetch_add(1, Ordering::Relaxed);
            }
            done
        });
    }

    let progress = {
        let finished = Arc::clone(&finished);
        let label = format!(
            "{:<22} {}",
            policy.label(),
            match scenario {
                Scenario::RateLimit => "rate limit",
                Scenario::Outage => "outage",
            }
        );
        let total = match scenario {
            Scenario::RateLimit => config.logical_requests().to_string(),
            Scenario::Outage => "?".to_owned(),
        };
        tokio::spawn(async move {
            loop {
                eprint!(
                    "\r  {label:<34} {:>6}/{total} requests ended, {:>6.1} s",
                    finished.load(Ordering::Relaxed),
                    t0.elapsed().as_secs_f64()
                );
                let _ = std::io::stderr().flush();
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done?);
    }
    let duration = t0.elapsed();
    progress.abort();
    let _ = progress.await;
    eprintln!(
        "\r  {:<34} {:>6} requests ended in {:.1} s{}",
        format!(
            "{:<22} {}",
            policy.label(),
            match scenario {
                Scenario::RateLimit => "rate limit",
                Scenario::Outage => "outage",
            }
        ),
        all.len(),
        duration.as_secs_f64(),
        " ".repeat(12)
    );

    let records = mock.requests();
    mock.shutdown().await;
    let handed_out = usize::try_from(next_id.load(Ordering::Relaxed))?;
    Ok(tally(
        config, policy, scenario, t0, duration, handed_out, all, &records, &successes,
    ))
}

#[allow(clippy::too_many_arguments)]
fn tally(
    config: &Config,
    policy: Policy,
    scenario: Scenario,
    t0: Instant,
    duration: Duration,
    handed_out: usize,
    all: Vec<Done>,
    records: &[llm_retry_mock::RecordedRequest],
    successes: &Successes,
) -> Run {
    // Ids are handed out densely from 0, one per started logical request;
    // the rate-limit workload must have started all of its requests.
    let logical = match scenario {
        Scenario::RateLimit => handed_out.max(config.logical_requests()),
        Scenario::Outage => handed_out,
    };
    let mut results_per_id = vec![0u32; logical];
    for done in &all {
        if let Some(slot) = results_per_id.get_mut(done.id as usize) {
            *slot += 1;
        }
    }
    let lost = results_per_id.iter().filter(|n| **n == 0).count();
    let duplicated_results = results_per_id.iter().filter(|n| **n > 1).count();

    let mut latencies: Vec<Duration> = all.iter().map(|d| d.latency).collect();
    latencies.sort();
    let mut outcomes = BTreeMap::new();
    for done in &all {
        *outcomes.entry(done.why.clone()).or_insert(0) += 1;
    }

    // Upstream sends, from the server's own log.
    let mut seen = vec![false; logical];
    let mut unknown_sends = 0;
    let window = config.outage_window();
    let (mut all_during, mut first_during, mut first_before) = (0usize, 0usize, 0usize);
    for record in records {
        let Some(id) = request_id(&record.headers).filter(|id| (*id as usize) < logical) else {
            unknown_sends += 1;
            continue;
        };
        let first = !std::mem::replace(&mut seen[id as usize], true);
        let at = record.received_at.saturating_duration_since(t0);
        if window.contains(&at) {
            all_during += 1;
            first_during += usize::from(first);
        } else if at < window.start && first {
            first_before += 1;
        }
    }
    let outage = (scenario == Scenario::Outage).then(|| OutageLoad {
        offered_before: first_before as f64 / window.start.as_secs_f64(),
        sends_during: all_during as f64 / (window.end - window.start).as_secs_f64(),
        first_sends_during: first_during,
        all_sends_during: all_during,
    });
    Run {
        policy,
        logical,
        succeeded: all.iter().filter(|d| d.ok).count(),
        results: all.len(),
        lost,
        duplicated_results,
        duplicated_upstream: successes.duplicated(),
        unknown_sends,
        sends: records.len(),
        duration,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        outcomes,
        outage,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

// ---------------------------------------------------------------- report

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn integrity(run: &Run) -> String {
    let bad = run.lost + run.duplicated_results + run.duplicated_upstream + run.unknown_sends;
    if bad == 0 && run.results == run.logical {
        "0 / 0".to_owned()
    } else {
        format!(
            "{} / {} ⚠",
            run.lost,
            run.duplicated_results + run.duplicated_upstream
        )
    }
}

fn rate_limit_table(config: &Config, runs: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | goodput (÷ C) | sends per request | success | p50 latency | p99 latency | run | lost / duplicated |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|--:|");
    for run in runs {
        let _ = writeln!(
            t,
            "| {} | {} | {:.2} | {} ({}/{}) | {} | {} | {:.1} s | {} |",
            run.policy.label(),
            pct(run.goodput(config.capacity)),
            run.amplification(),
            pct(run.success_rate()),
            run.succeeded,
            run.logical,
            ms(run.p50),
            ms(run.p99),
            run.duration.as_secs_f64(),
            integrity(run),
        );
    }
    t
}

fn outage_table(runs: &[Run]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | offered before (new req/s) | sends/s during outage | load during ÷ offered before | retries per new request during | success | sends per request | last answer | lost / duplicated |"
    );
    let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for run in runs {
        let Some(load) = &run.outage else { continue };
        let retries = load
            .retries_per_new_request()
            .map_or_else(|| "— (no new requests)".to_owned(), |r| format!("{r:.2}"));
        let _ = writeln!(
            t,
            "| {} | {:.0} | {:.0} | {:.2} | {} | {} ({}/{}) | {:.2} | {:.1} s | {} |",
            run.policy.label(),
            load.offered_before,
            load.sends_during,
            load.ratio(),
            retries,
            pct(run.success_rate()),
            run.succeeded,
            run.logical,
            run.amplification(),
            run.duration.as_secs_f64(),
            integrity(run),
        );
    }
    t
}

fn outcomes_list(runs: &[Run]) -> String {
    let mut t = String::new();
    for run in runs {
        let mut outcomes: Vec<(&String, &usize)> = run.outcomes.iter().collect();
        outcomes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let list: Vec<String> = outcomes
            .iter()
            .take(6)
            .map(|(why, n)| format!("{n} × {why}"))
            .collect();
        let more = outcomes.len().saturating_sub(6);
        let _ = writeln!(
            t,
            "- {}: {}{}",
            run.policy.label(),
            list.join(", "),
            if more > 0 {
                format!(", and {more} other outcomes")
            } else {
                String::new()
            }
        );
    }
    t
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

fn targets(config: &Config, rate: &Run, outage: &Run) -> String {
    let mut t = String::new();
    let goodput = rate.goodput(config.capacity);
    let amp = rate.amplification();
    let _ = writeln!(t, "| target | llm-retry row | |");
    let _ = writeln!(t, "|---|--:|---|");
    let _ = writeln!(
        t,
        "| goodput ≥ 95 % of C | {} | {} |",
        pct(goodput),
        verdict(goodput >= TARGET_GOODPUT)
    );
    let _ = writeln!(
        t,
        "| amplification ≤ 1.2 sends per request | {amp:.2} | {} |",
        verdict(amp <= TARGET_AMPLIFICATION)
    );
    if let Some(load) = &outage.outage {
        let allowed = 1.0 + BUDGET_RATIO + BUDGET_FLOOR_PER_SEC / load.offered_before.max(1e-9);
        let _ = writeln!(
            t,
            "| outage load ≤ (1 + 20 %) × offered + 10/s, i.e. ratio ≤ {allowed:.2} | {:.2} | {} |",
            load.ratio(),
            verdict(load.ratio() <= allowed)
        );
    }
    let clean = |r: &Run| {
        r.lost + r.duplicated_results + r.duplicated_upstream + r.unknown_sends == 0
            && r.results == r.logical
    };
    let _ = writeln!(
        t,
        "| zero lost or duplicated (both scenarios) | {} / {} | {} |",
        rate.lost + outage.lost,
        rate.duplicated_results
            + rate.duplicated_upstream
            + outage.duplicated_results
            + outage.duplicated_upstream,
        verdict(clean(rate) && clean(outage))
    );
    t
}

/// Machine facts for the report.
struct Machine {
    cores: usize,
    cpu: String,
    load: String,
}

fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned());
    Machine {
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu,
        load,
    }
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the system clock.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Howard Hinnant's civil_from_days.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn command(config: &Config) -> String {
    let defaults = Config {
        docs: config.docs.clone(),
        ..default_config()
    };
    let mut cmd = "cargo run --release --example storm".to_owned();
    let mut flags = Vec::new();
    if config.capacity != defaults.capacity {
        flags.push(format!("--capacity {}", config.capacity));
    }
    if config.burst != defaults.burst {
        flags.push(format!("--burst {}", config.burst));
    }
    if config.clients != defaults.clients {
        flags.push(format!("--clients {}", config.clients));
    }
    if config.requests != defaults.requests {
        flags.push(format!("--requests {}", config.requests));
    }
    if config.seed != defaults.seed {
        flags.push(format!("--seed {}", config.seed));
    }
    if config.latency != defaults.latency {
        flags.push(format!("--latency-ms {}", config.latency.as_millis()));
    }
    if config.outage != defaults.outage {
        flags.push(format!("--outage-secs {}", config.outage.as_secs_f64()));
    }
    if !flags.is_empty() {
        cmd.push_str(" -- ");
        cmd.push_str(&flags.join(" "));
    }
    cmd
}

fn default_config() -> Config {
    Config {
        capacity: 200,
        burst: 10,
        clients: 200,
        requests: 10,
        seed: 2026,
        latency: Duration::from_millis(20),
        outage: Duration::from_secs(3),
        docs: None,
    }
}

fn markdown(config: &Config, machine: &Machine, rate: &[Run], outage: &[Run]) -> String {
    let window = config.outage_window();
    let mut md = String::new();
    let _ = writeln!(md, "# Storm benchmark\n");
    let _ = writeln!(
        md,
        "What four client retry policies do to an upstream that is at capacity, \
         or down. Generated by `examples/storm.rs`; regenerate with:\n"
    );
    let _ = writeln!(md, "```sh\n{}\n```\n", command(config));
    let _ = writeln!(
        md,
        "Run on {} on {} (nproc = {}, load average {} when it started), \
         client and upstream in one process on loopback. Numbers move by a few \
         percent between runs; the policies' ranking does not.\n",
        today(),
        machine.cpu,
        machine.cores,
        machine.load
    );
    let _ = writeln!(
        md,
        "![goodput, amplification and outage load per policy](storm.svg)\n"
    );
    let _ = writeln!(md, "## Setup\n");
    let _ = writeln!(
        md,
        "- Upstream: `llm-retry-mock`, one route behind `Route::capacity({}, {}, …)`: \
         a token bucket of C = {} requests/s, bursts of {}, shared by every connection. \
         When it is empty the answer is Anthropic's `429 rate_limit_error` with the exact \
         time until the next token as `retry-after-ms` and `Retry-After` (seconds, rounded up). \
         Every reply (200, 429, 503) takes {} ms.",
        config.capacity,
        config.burst,
        config.capacity,
        config.burst,
        config.latency.as_millis()
    );
    let _ = writeln!(
        md,
        "- Clients: {} closed-loop clients on one connection pool; each starts its next \
         logical request as soon as the previous one ended, success or failure.",
        config.clients
    );
    let _ = writeln!(
        md,
        "- Rate limiting: {} requests per client, {} in all: {:.0} s at exactly C.",
        config.requests,
        config.logical_requests(),
        config.ideal_duration().as_secs_f64()
    );
    let _ = writeln!(
        md,
        "- Outage: the same clients in a closed loop for {:.0} s; every request arriving \
         between {:.1} s and {:.1} s after the upstream started gets `503 api_error` \
         (`Route::outage`), the bucket applies before and after.",
        config.ideal_duration().as_secs_f64(),
        window.start.as_secs_f64(),
        window.end.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "- Policies, one after the other, each against a fresh upstream:\n  \
         1. **llm-retry defaults**: `RetryLayer::new(RetryPolicy::default())` over a hyper-util \
         client — the middleware itself (10 retries, 300 s; server-named waits are floors with \
         ≤ 10 % jitter; otherwise 500 ms · 2ⁿ⁻¹ + 0–25 %, capped at 32 s).\n  \
         2. **naive backoff (model)** of reqwest-retry's default \
         (`ExponentialBackoff::builder().build_with_max_retries(3)`): 3 retries of 408/429/5xx \
         and transport errors after `U(0,1) × 1 s × 2ⁿ`; `Retry-After` is never read.\n  \
         3. **official SDKs (model)**, Anthropic's and OpenAI's defaults: 2 retries of \
         408/409/429/5xx and transport errors (`x-should-retry` overrides), after the server's \
         `retry-after-ms` / `Retry-After` when it is in (0, 60] s, else \
         `min(0.5 s · 2ⁿ, 8 s) × U(0.75, 1]`.\n  \
         4. **no retries**: one send per request.\n\
         - Seed {} for the models' jitter (the middleware draws its own).",
        config.seed
    );
    let _ = writeln!(md, "\n## Rate limiting\n");
    md.push_str(&rate_limit_table(config, rate));
    let _ = writeln!(
        md,
        "\nGoodput: successes per second of the run ÷ C (the bucket's initial burst lets a \
         very short run exceed 100 %). Sends per request: upstream sends (the server's own \
         log) ÷ logical requests. Latency: from a logical request's start to its final \
         answer, success or not. Lost / duplicated: logical requests that ended in no result \
         or more than one, plus request ids the upstream answered with a success twice.\n"
    );
    let _ = writeln!(md, "How the requests ended:\n");
    md.push_str(&outcomes_list(rate));
    let _ = writeln!(md, "\n## Outage\n");
    md.push_str(&outage_table(outage));
    let _ = writeln!(
        md,
        "\nOffered before: new logical requests per second before the window. Load during ÷ \
         offered before: upstream sends per second inside the window ÷ that rate (1.00 = the \
         outage costs the upstream nothing beyond its normal load). Retries per new request: \
         sends inside the window that were not a request's first, per first send inside it \
         — the number a retry budget caps. Last answer: when the last request that started \
         before the {:.0} s mark got its final answer.\n",
        config.ideal_duration().as_secs_f64()
    );
    let _ = writeln!(md, "How the requests ended:\n");
    md.push_str(&outcomes_list(outage));
    md.push_str(&findings(config, rate, outage));
    if let (Some(rate), Some(outage)) = (
        rate.iter().find(|r| r.policy == Policy::Project),
        outage.iter().find(|r| r.policy == Policy::Project),
    ) {
        let _ = writeln!(md, "\n## The project's targets\n");
        let _ = writeln!(
            md,
            "For the budget- and gate-equipped version (issue 5); `project_policy()` in the \
             example is `RetryPolicy::default()` today, which has neither.\n"
        );
        md.push_str(&targets(config, rate, outage));
        if rate.goodput(config.capacity) >= TARGET_GOODPUT && rate.success_rate() < TARGET_GOODPUT {
            let _ = writeln!(
                md,
                "\nThe goodput target is met only as defined above: the upstream stayed \
                 saturated while {} of the project's requests gave up. Read it together with \
                 the success rate and the sends per request.",
                pct(1.0 - rate.success_rate())
            );
        }
    }
    md
}

/// The mechanisms behind this run's numbers, with its numbers.
fn findings(config: &Config, rate: &[Run], outage: &[Run]) -> String {
    let find = |runs: &'_ [Run], p: Policy| runs.iter().position(|r| r.policy == p);
    let (Some(pr), Some(nr), Some(sr), Some(zr), Some(po)) = (
        find(rate, Policy::Project),
        find(rate, Policy::Naive),
        find(rate, Policy::Sdk),
        find(rate, Policy::NoRetry),
        find(outage, Policy::Project),
    ) else {
        return String::new();
    };
    let (pr, nr, sr, zr, po) = (&rate[pr], &rate[nr], &rate[sr], &rate[zr], &outage[po]);
    let token_ms = 1000.0 / f64::from(config.capacity);
    let mut t = String::new();
    let _ = writeln!(t, "\n## What the numbers say\n");
    let _ = writeln!(
        t,
        "- **Goodput does not separate the policies; success rate and sends per request \
         do.** {} clients offer far more than C, so the bucket is empty in every run and \
         admits about C per second whatever the clients do ({} to {} here). A policy that \
         gives up sooner only makes its run shorter: no retries \"reaches\" {} with {} of \
         its requests served.",
        config.clients,
        pct(rate
            .iter()
            .map(|r| r.goodput(config.capacity))
            .fold(f64::INFINITY, f64::min)),
        pct(rate
            .iter()
            .map(|r| r.goodput(config.capacity))
            .fold(0.0, f64::max)),
        pct(zr.goodput(config.capacity)),
        pct(zr.success_rate()),
    );
    let _ = writeln!(
        t,
        "- **Honouring an exact wait, per request, is a thundering herd.** Every 429 names \
         the time to the next token, at most {token_ms:.0} ms. Each waiting request sleeps \
         exactly that (its ≤ 10 % spread is a fraction of a millisecond, below the \
         timers' resolution), \
         so all of them come back together for one token, again and again: the llm-retry \
         defaults send {:.2} times per request, spend all 10 retries on {} of the requests \
         and serve {}; the SDKs' policy, with the same reading of the hint but 2 retries, \
         sends {:.2} times and serves {}.",
        pr.amplification(),
        pct(1.0 - pr.success_rate()),
        pct(pr.success_rate()),
        sr.amplification(),
        pct(sr.success_rate()),
    );
    let _ = writeln!(
        t,
        "- **Ignoring the hint does better here, slowly.** The naive backoff sleeps \
         U(0, 1) s × 2ⁿ whatever the server said; that spreads the clients over seconds, \
         the offered load falls to about what the bucket admits, and {} of the requests \
         succeed with {:.2} sends each, at a p99 latency of {}.",
        pct(nr.success_rate()),
        nr.amplification(),
        ms(nr.p99),
    );
    if let Some(load) = &po.outage {
        let _ = writeln!(
            t,
            "- **In the outage the defaults back off, and then stay away.** A 503 names no \
             wait, so the computed backoff applies (500 ms · 2ⁿ⁻¹, n counting every attempt \
             of the request, the 429s before it included): the upstream sees {:.0} sends/s \
             during the window, {:.2} × the offered rate before it, but requests keep \
             sleeping long after the upstream is back — the last one answered at {:.1} s, \
             for a {:.0} s workload.",
            load.sends_during,
            load.ratio(),
            po.duration.as_secs_f64(),
            config.ideal_duration().as_secs_f64(),
        );
    }
    let (lost, duplicated): (usize, usize) = rate
        .iter()
        .chain(outage)
        .map(|r| {
            (
                r.lost + r.unknown_sends,
                r.duplicated_results + r.duplicated_upstream,
            )
        })
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    if lost + duplicated == 0 {
        let _ = writeln!(
            t,
            "- **Nothing was lost or duplicated**: every logical request of every run ended \
             in exactly one result, and the upstream answered no request id with a success \
             twice."
        );
    } else {
        let _ = writeln!(
            t,
            "- **⚠ {lost} requests lost and {duplicated} duplicated** across the runs: see the \
             tables."
        );
    }
    t
}

/// A hand-written SVG: four bar panels.
fn svg(config: &Config, rate: &[Run], outage: &[Run]) -> String {
    struct Panel<'a> {
        title: &'a str,
        values: Vec<(Policy, f64)>,
        format: fn(f64) -> String,
        target: Option<(f64, &'a str)>,
    }
    let panels = [
        Panel {
            title: "Rate limit: goodput, % of C",
            values: rate
                .iter()
                .map(|r| (r.policy, r.goodput(config.capacity) * 100.0))
                .collect(),
            format: |v| format!("{v:.0} %"),
            target: Some((TARGET_GOODPUT * 100.0, "target ≥ 95 %")),
        },
        Panel {
            title: "Rate limit: success rate",
            values: rate
                .iter()
                .map(|r| (r.policy, r.success_rate() * 100.0))
                .collect(),
            format: |v| format!("{v:.0} %"),
            target: None,
        },
        Panel {
            title: "Rate limit: sends per request",
            values: rate.iter().map(|r| (r.policy, r.amplification())).collect(),
            format: |v| format!("{v:.2}"),
            target: Some((TARGET_AMPLIFICATION, "target ≤ 1.2")),
        },
        Panel {
            title: "Outage: load ÷ offered before",
            values: outage
                .iter()
                .filter_map(|r| Some((r.policy, r.outage.as_ref()?.ratio())))
                .collect(),
            format: |v| format!("{v:.2}"),
            target: Some((1.0 + BUDGET_RATIO, "1.2 ≈ a 20 % retry budget")),
        },
    ];
    let (panel_w, panel_h, top, bottom) = (250.0, 260.0, 80.0, 40.0);
    let width = panel_w * panels.len() as f64 + 20.0;
    let height = top + panel_h + bottom + 40.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="{:.0}" y="24" text-anchor="middle" font-size="16" font-weight="bold">Storm benchmark: C = {} req/s, {} clients × {} requests</text>"##,
        width / 2.0,
        config.capacity,
        config.clients,
        config.requests
    );
    for (i, panel) in panels.iter().enumerate() {
        let x0 = 10.0 + panel_w * i as f64 + 40.0;
        let plot_w = panel_w - 60.0;
        let max = panel
            .values
            .iter()
            .map(|(_, v)| *v)
            .chain(panel.target.map(|(t, _)| t))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.15;
        let y = |v: f64| top + panel_h - v / max * panel_h;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>"##,
            x0 + plot_w / 2.0,
            top - 36.0,
            panel.title
        );
        let _ = writeln!(
            s,
            r##"<line x1="{x0:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
            top + panel_h,
            x0 + plot_w,
            top + panel_h
        );
        let n = panel.values.len().max(1) as f64;
        let slot = plot_w / n;
        for (j, (policy, value)) in panel.values.iter().enumerate() {
            let bx = x0 + slot * j as f64 + slot * 0.15;
            let bw = slot * 0.7;
            let by = y(*value);
            let _ = writeln!(
                s,
                r##"<rect x="{bx:.1}" y="{by:.1}" width="{bw:.1}" height="{:.1}" fill="{}"/>"##,
                top + panel_h - by,
                policy.color()
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                bx + bw / 2.0,
                by - 4.0,
                (panel.format)(*value)
            );
        }
        if let Some((target, label)) = panel.target {
            let ty = y(target);
            let _ = writeln!(
                s,
                r##"<line x1="{x0:.1}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#c53030" stroke-dasharray="5,4"/>"##,
                x0 + plot_w
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#c53030" font-size="11">- - - {label}</text>"##,
                x0 + plot_w / 2.0,
                top - 20.0
            );
        }
    }
    // Legend.
    let ly = top + panel_h + bottom;
    for (i, policy) in Policy::ALL.iter().enumerate() {
        let lx = 20.0 + i as f64 * (width - 40.0) / 4.0;
        let _ = writeln!(
            s,
            r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/>"##,
            ly - 10.0,
            policy.color()
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{ly:.1}">{}</text>"##,
            lx + 18.0,
            policy.label()
        );
    }
    s.push_str("</svg>\n");
    s
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let config = match Config::from_env_and_args() {
        Ok(Some(config)) => config,
        Ok(None) => return Ok(()),
        Err(e) => {
            eprintln!("storm: {e}");
            std::process::exit(2);
        }
    };
    let machine = machine();
    let window = config.outage_window();
    eprintln!(
        "storm: C = {} req/s (burst {}), {} clients × {} requests, {} ms per reply, seed {}; \
         {} cores, {}",
        config.capacity,
        config.burst,
        config.clients,
        config.requests,
        config.latency.as_millis(),
        config.seed,
        machine.cores,
        machine.cpu
    );
    eprintln!(
        "rate limiting ({} requests per policy):",
        config.logical_requests()
    );
    let mut rate = Vec::new();
    for policy in Policy::ALL {
        rate.push(run(&config, policy, Scenario::RateLimit).await?);
    }
    eprintln!(
        "outage ({:.0} s closed loop, 503 from {:.1} s to {:.1} s):",
        config.ideal_duration().as_secs_f64(),
        window.start.as_secs_f64(),
        window.end.as_secs_f64()
    );
    let mut outage = Vec::new();
    for policy in Policy::ALL {
        outage.push(run(&config, policy, Scenario::Outage).await?);
    }

    let md = markdown(&config, &machine, &rate, &outage);
    println!("{md}");
    if let Some(dir) = &config.docs {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("storm.md"), &md)?;
        std::fs::write(dir.join("storm.svg"), svg(&config, &rate, &outage))?;
        eprintln!(
            "wrote {} and {}",
            dir.join("storm.md").display(),
            dir.join("storm.svg").display()
        );
    }
    Ok(())
}
