//! Chaos soak: a seeded mix of every fault the mock can play, a crowd of
//! concurrent requests (some cancelled at random) through each way of
//! composing the retry loop, and the invariants checked for every request:
//!
//! - exactly one final outcome (or a cancellation);
//! - no caller receives a byte the upstream did not send for the attempt it
//!   committed to, nor any byte twice: a complete body is exactly the body
//!   of the reply the upstream's record shows for the request's last send,
//!   an interrupted one a prefix of what that reply delivered;
//! - a request is served if and only if its last send was answered whole
//!   with a 200 in time (counted both ways);
//! - the report's sends equal the upstream's record for that request, and
//!   stay inside the configured bounds;
//! - nothing panics, and once a composition's stack and upstream are gone
//!   nothing it started lives on: no task (timers live in tasks or in the
//!   futures their callers dropped) and no copy of a request body.
//!
//! The last two compositions share state through a real Redis
//! (`soak_redis`), which is killed, restarted and hung (`DEBUG SLEEP`)
//! mid-run: three gateway replicas sharing their retry budgets and
//! failover marks, and two `RetryLayer` stacks sharing their budget. No
//! answer or error may mention Redis. They need `redis-server` (skipped,
//! saying so, without one unless `LLM_RETRY_REQUIRE_REDIS` is set, as
//! under CI).
//!
//! `SOAK_REQUESTS` sets the requests per composition (default 3,400: 17,000
//! in all, over five compositions, and a quarter as many through each of
//! the gateway and the Redis compositions); the documented large run is
//! `SOAK_REQUESTS=250000`.
#![allow(clippy::unwrap_used)]

#[path = "../../crates/llm-retry-redis/tests/support/mod.rs"]
mod redis_support;
mod soak_redis;
mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{BoxError, ClientLayer, ReplayBody, RetryError, RetryLayer, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script, SseEvent};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::{client, fast_policy, PROMPT};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const MAX_RETRIES: u32 = 6;
const MAX_ELAPSED: Duration = Duration::from_secs(30);
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
const CONCURRENCY: usize = 200;

/// Where [`faults`] lists its absurd wait.
const ABSURD_WAIT: usize = 5;

/// Every fault, weighted: successes are a minority of first answers.
fn faults() -> Vec<(u32, Reply)> {
    vec![
        (10, Reply::anthropic_ok("Hello!")),
        (4, Reply::openai_ok("Hi.")),
        (6, Reply::anthropic_stream(&["Hel", "lo", "!"])),
        (5, Reply::rate_limited(Some(1))),
        (3, Reply::rate_limited(None)),
        (
            1,
            Reply::rate_limited(None).header("retry-after", "99999999999999999999"),
        ),
        (1, Reply::rate_limited(None).header("retry-after", "-3")),
        (1, Reply::rate_limited(None).header("retry-after", "soon")),
        (1, Reply::rate_limited(None).header("retry-after-ms", "250")),
        (
            1,
            Reply::rate_limited(None).header("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ),
        (
            1,
            Reply::rate_limited(None)
                .header("x-ratelimit-remaining-requests", "0")
                .header("x-ratelimit-reset-requests", "1s"),
        ),
        (4, Reply::overloaded()),
        (3, Reply::status(503)),
        (2, Reply::status(500)),
        (1, Reply::status(503).header("x-should-retry", "false")),
        (1, Reply::status(400).header("x-should-retry", "true")),
        (2, Reply::reset_before_headers()),
        // Cut before any content (retried), and after content reached the
        // caller (never replayed).
        (
            2,
            Reply::anthropic_stream(&["Hel", "lo", "!"]).reset_after_bytes(40),
        ),
        (2, cut_after_content()),
        (1, error_after_content()),
        (1, slow_body()),
        (
            2,
            Reply::anthropic_stream_error("overloaded_error", "Overloaded"),
        ),
        (
            1,
            Reply::anthropic_stream_error("rate_limit_error", "Slow down"),
        ),
        (
            1,
            Reply::anthropic_ok("late").delay(Duration::from_millis(300)),
        ),
        (
            1,
            Reply::anthropic_ok("slow headers").delay(Duration::from_secs(3)),
        ),
        (
            1,
            Reply::json(
                200,
                serde_json::json!({"error": {"type": "api_error", "message": "in a 200"}}),
            ),
        ),
        (
            1,
            Reply::status(200).body(r#"{"type":"message","content":[{"type":"te"#),
        ),
        (
            1,
            Reply::anthropic_error(404, "not_found_error", "no such model"),
        ),
    ]
}

/// A stream cut 30 bytes before its end: after its content events.
fn cut_after_content() -> Reply {
    let stream = Reply::anthropic_stream(&["Hel", "lo", "!"]);
    let len = stream.expected_body().unwrap().len();
    stream.reset_after_bytes(len - 30)
}

/// A stream whose error event comes after its first content: the caller
/// already has content, so the error is the stream's own news, passed on
/// and never replayed.
fn error_after_content() -> Reply {
    Reply::sse([
        SseEvent::json(Some("message_start"), &json!({"type": "message_start"})),
        content_delta("Hel"),
        SseEvent::json(
            Some("error"),
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ])
}

/// A stream whose events come 800 ms apart: 3.2 s in all, longer than the
/// attempt timeout, which bounds the time to the head, not the body.
fn slow_body() -> Reply {
    let gap = Duration::from_millis(800);
    Reply::sse([
        SseEvent::json(Some("message_start"), &json!({"type": "message_start"})),
        content_delta("Slo").after(gap),
        content_delta("w").after(gap),
        content_delta("ly").after(gap),
        SseEvent::json(Some("message_stop"), &json!({"type": "message_stop"})).after(gap),
    ])
}

fn content_delta(text: &str) -> SseEvent {
    SseEvent::json(
        Some("content_block_delta"),
        &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
    )
}

/// What one request ended with.
enum Ended {
    Cancelled,
    Answered {
        report: RetryReport,
        body: Result<Bytes, (Bytes, BoxError)>,
    },
    Failed(RetryReport),
}

async fn read_all<B>(body: B) -> Result<Bytes, (Bytes, BoxError)>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = std::pin::pin!(body);
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    got.extend_from_slice(data);
                }
            }
            Err(error) => return Err((Bytes::from(got), error.into())),
        }
    }
    Ok(Bytes::from(got))
}

fn request(url: &str, id: usize) -> http::Request<Counted> {
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-request-id", id.to_string())
        .body(Counted::new(PROMPT))
        .unwrap()
}

/// Request bodies alive: the bytes of every [`Counted`] body made, while
/// any `Bytes` of them lives (the body itself, a replay buffer, a
/// template, a leaked clone).
static LIVE_BODIES: AtomicUsize = AtomicUsize::new(0);

/// A request body whose bytes count themselves in [`LIVE_BODIES`] for as
/// long as anything holds them, so bytes kept after their request ended
/// show at the end. It states its exact size, as a buffered body does.
struct Counted(Full<Bytes>);

/// The owner of a [`Counted`] body's bytes.
struct Tracked(&'static str);

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        LIVE_BODIES.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Counted {
    fn new(text: &'static str) -> Counted {
        LIVE_BODIES.fetch_add(1, Ordering::SeqCst);
        Counted(Full::new(Bytes::from_owner(Tracked(text))))
    }
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}

/// Once a composition's stack is dropped and its upstream shut down,
/// waits for what they started to end, and fails if a task or a request
/// body outlives them. Up to ten minutes of the paused clock, which runs
/// ahead whenever the runtime is idle; each look also gives the kernel
/// 5 ms of real time to deliver a closed connection's news (3 s at most).
async fn nothing_left(name: &str, upstream: MockServer) {
    upstream.shutdown().await;
    let runtime = tokio::runtime::Handle::current().metrics();
    for _ in 0..600 {
        if runtime.num_alive_tasks() == 0 && LIVE_BODIES.load(Ordering::SeqCst) == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "{name}: {} tasks and {} request bodies outlived the stack and its upstream",
        runtime.num_alive_tasks(),
        LIVE_BODIES.load(Ordering::SeqCst)
    );
}

/// Runs `n` requests through `service`, at most [`CONCURRENCY`] at once;
/// every 13th is cancelled after a seeded delay. Time is tokio's paused
/// clock: waits, holds, deadlines and cancellations are exact.
async fn crowd<S, B>(service: S, url: &str, n: usize) -> Vec<(usize, Ended)>
where
    S: Service<http::Request<Counted>, Response = http::Response<B>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut ended = Vec::with_capacity(n);
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..n {
        if tasks.len() >= CONCURRENCY {
            ended.push(tasks.join_next().await.unwrap().unwrap());
        }
        let service = service.clone();
        let request = request(url, id);
        tasks.spawn(async move {
            let call = async {
                match service.oneshot(request).await {
                    Ok(response) => {
                        // No report: served at its first send (checked
                        // against the upstream's record like any other).
                        let report = response.extensions().get::<RetryReport>().cloned();
                        let report = report.unwrap_or_else(|| served_first(response.status()));
                        let body = read_all(response.into_body()).await;
                        Ended::Answered { report, body }
                    }
                    Err(error) => {
                        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&*error);
                        while let Some(error) = source {
                            assert!(
                                !soak_redis::mentions_redis(error.to_string().as_bytes()),
                                "request {id}'s error names Redis: {error}"
                            );
                            source = error.source();
                        }
                        let error = error
                            .downcast::<RetryError>()
                            .expect("every error is one RetryError");
                        Ended::Failed(error.report().clone())
                    }
                }
            };
            if id % 13 == 5 {
                let patience = Duration::from_millis(((id * 7919) % 2_000) as u64);
                match tokio::time::timeout(patience, call).await {
                    Ok(ended) => (id, ended),
                    Err(_) => (id, Ended::Cancelled),
                }
            } else {
                (id, call.await)
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        ended.push(done.unwrap());
    }
    ended
}

/// Totals of one composition, printed at the end.
#[derive(Debug, Default)]
struct Totals {
    /// Why the failed requests stopped, by label.
    stops: std::collections::BTreeMap<&'static str, usize>,
    succeeded: usize,
    /// Requests (not cancelled) whose last send got a reply that [`serves`].
    last_send_serves: usize,
    answered_failure: usize,
    interrupted: usize,
    failed: usize,
    cancelled: usize,
    sends: usize,
}

/// A way of composing the retry loop, as the checks see it.
#[derive(Debug, Clone, Copy)]
struct Composition {
    name: &'static str,
    /// Whether the caller gets the engine's own report on every answer and
    /// error (its sends are then checked against the upstream's record).
    /// The gateway keeps its reports, and may answer with its own error.
    reports: bool,
    /// Whether an attempt times out after [`ATTEMPT_TIMEOUT`] (the
    /// `tower::retry` path has no attempt timeout of its own).
    times_out: bool,
}

impl Composition {
    const fn reports(name: &'static str) -> Composition {
        Composition {
            name,
            reports: true,
            times_out: true,
        }
    }
}

/// Checks every request of one composition against the upstream's record,
/// and sums them up.
fn check(through: Composition, ended: &[(usize, Ended)], mock: &MockServer) -> Totals {
    let name = through.name;
    let sends = sends_per_id(mock);
    let mut totals = Totals {
        sends: mock.request_count(),
        ..Totals::default()
    };
    let mut ended_once = vec![false; ended.len()];
    for (id, outcome) in ended {
        assert!(!ended_once[*id], "{name}: request {id} ended twice");
        ended_once[*id] = true;
        let replies = sends.get(id).map_or(&[][..], Vec::as_slice);
        let last = replies.last().and_then(Option::as_ref);
        if last.is_some_and(|reply| serves(reply, through.times_out))
            && !matches!(outcome, Ended::Cancelled)
        {
            totals.last_send_serves += 1;
            assert!(
                matches!(outcome, Ended::Answered { report, body: Ok(_) }
                    if report.last_status == Some(http::StatusCode::OK)),
                "{name}: request {id}'s last send was answered whole with a 200, \
                 yet the request was not served"
            );
        }
        let report = match outcome {
            Ended::Cancelled => {
                totals.cancelled += 1;
                continue;
            }
            Ended::Failed(_) if !through.reports => {
                panic!("{name}: request {id} got no answer at all")
            }
            Ended::Failed(report) => {
                totals.failed += 1;
                *totals.stops.entry(report.stop.label()).or_default() += 1;
                report
            }
            Ended::Answered { report, body } => {
                check_body(through, *id, report, body, replies, &mut totals);
                report
            }
        };
        assert!(
            replies.len() <= MAX_RETRIES as usize + 1,
            "{name}: request {id} was sent {} times",
            replies.len()
        );
        if through.reports {
            assert_eq!(
                report.attempts as usize,
                replies.len(),
                "{name}: request {id}'s report counts {} sends, the upstream saw {}: {report}",
                report.attempts,
                replies.len()
            );
            assert!(report.elapsed <= MAX_ELAPSED, "{name}: {report}");
        }
    }
    assert!(
        ended_once.iter().all(|s| *s),
        "{name}: a request never ended"
    );
    // Exact: a request is served if and only if its last send was answered
    // with a whole 200 in time.
    assert_eq!(
        totals.succeeded, totals.last_send_serves,
        "{name}: served requests and requests whose last send was answered whole with a 200"
    );
    let counted: usize = sends.values().map(Vec::len).sum();
    assert_eq!(
        counted, totals.sends,
        "{name}: every send carried its request's id"
    );
    totals
}

/// Whether `reply` is a 200 that completes (within the attempt timeout,
/// when there is one) and is no stream error before content: an answer the
/// engine must hand to its caller.
fn serves(reply: &Reply, times_out: bool) -> bool {
    let Reply::Response(response) = reply else {
        return false;
    };
    let body = reply.expected_body().unwrap_or_default();
    let find = |what: &[u8]| body.windows(what.len()).position(|w| w == what);
    let error_before_content = match (find(b"event: error"), find(b"content_block_delta")) {
        (Some(error), Some(content)) => error < content,
        (error, _) => error.is_some(),
    };
    response.status() == http::StatusCode::OK
        && response.reset_after().is_none()
        && (!times_out || response.delay() < ATTEMPT_TIMEOUT)
        && !error_before_content
}

/// Per request id, the replies the upstream played for its sends, in order.
fn sends_per_id(mock: &MockServer) -> HashMap<usize, Vec<Option<Reply>>> {
    let mut sends: HashMap<usize, Vec<Option<Reply>>> = HashMap::new();
    for record in mock.requests() {
        let id = record.header_str("x-request-id").unwrap().parse().unwrap();
        sends.entry(id).or_default().push(record.reply);
    }
    sends
}

/// An answered request's body against the reply its last send got (the
/// only attempt the caller may see bytes of): a complete body is that
/// reply's body byte for byte, an interrupted one a prefix of what that
/// reply delivers. Through the gateway, an answer that is not a 200 may be
/// the gateway's own.
fn check_body(
    through: Composition,
    id: usize,
    report: &RetryReport,
    body: &Result<Bytes, (Bytes, BoxError)>,
    replies: &[Option<Reply>],
    totals: &mut Totals,
) {
    let name = through.name;
    let served = report.last_status == Some(http::StatusCode::OK);
    let last = replies.last().and_then(Option::as_ref);
    let got = match body {
        Ok(bytes) | Err((bytes, _)) => bytes,
    };
    assert!(
        !soak_redis::mentions_redis(got),
        "{name}: request {id}'s answer names Redis"
    );
    match body {
        Ok(bytes) => {
            if served {
                totals.succeeded += 1;
            } else {
                totals.answered_failure += 1;
            }
            if served || through.reports {
                let sent = last.and_then(Reply::expected_body);
                assert_eq!(
                    Some(bytes),
                    sent.as_ref(),
                    "{name}: request {id} got a body its last send's reply did not send whole"
                );
            }
        }
        Err((prefix, _)) => {
            totals.interrupted += 1;
            let sent = last.and_then(Reply::delivered_body).unwrap_or_default();
            assert!(
                sent.starts_with(prefix),
                "{name}: request {id} got bytes its last send's reply did not send: {prefix:?}"
            );
        }
    }
}

async fn mock() -> MockServer {
    mock_of(faults()).await
}

async fn mock_of(faults: Vec<(u32, Reply)>) -> MockServer {
    let script = Script::new()
        .seed(2026)
        .route("/v1/messages", Route::mix(faults));
    MockServer::start(script).await.unwrap()
}

/// The mix without its absurd wait. One 429 naming 10^20 s holds a shared
/// key for the longest honoured wait, and every request meeting the hold
/// fails fast; this mix lets ClientLayer's retries be soaked too.
fn sane_faults() -> Vec<(u32, Reply)> {
    let mut faults = faults();
    let (_, absurd) = faults.remove(ABSURD_WAIT);
    assert!(format!("{absurd:?}").contains("99999999999999999999"));
    faults
}

fn policy() -> llm_retry::RetryPolicy {
    policy_builder().build().unwrap()
}

/// The soak's policy, to be built, with its own budget or another.
fn policy_builder() -> llm_retry::RetryPolicyBuilder {
    fast_policy()
        .max_retries(MAX_RETRIES)
        .max_elapsed(MAX_ELAPSED)
        .max_server_wait(Duration::from_secs(5))
        .attempt_timeout(ATTEMPT_TIMEOUT)
}

/// A reqwest client with `RetryMiddleware` (the `ClientLayer` stack), as a
/// tower service of the same shape as the others: the request rebuilt as
/// reqwest's, the answer as `http`'s, and a failure as its `RetryError`.
fn through_reqwest() -> impl Service<
    http::Request<Counted>,
    Response = http::Response<reqwest::Body>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(llm_retry_reqwest::RetryMiddleware::new(policy()))
        .build();
    tower::service_fn(move |request: http::Request<Counted>| {
        let client = client.clone();
        async move {
            let (parts, _) = request.into_parts();
            let sent = client
                .post(parts.uri.to_string())
                .headers(parts.headers)
                .body(PROMPT)
                .send()
                .await;
            match sent {
                Ok(response) => Ok(http::Response::from(response)),
                Err(reqwest_middleware::Error::Middleware(error)) => {
                    Err(Box::new(error.downcast::<RetryError>()?) as BoxError)
                }
                Err(error) => Err(error.into()),
            }
        }
    })
}

/// The gateway with one route and one target (the upstream), on a free
/// port, and a plain client service to it of the same shape as the others.
async fn through_gateway(
    upstream: &MockServer,
) -> (
    impl Service<
            http::Request<Counted>,
            Response = http::Response<hyper::body::Incoming>,
            Error = BoxError,
            Future = impl Send,
        > + Clone
        + Send
        + 'static,
    std::net::SocketAddr,
    Stop,
) {
    let toml = format!(
        r#"
[[route]]
name = "soak"
deadline = "30s"
[[route.target]]
name = "upstream"
base_url = "{}"
max_retries = {MAX_RETRIES}
attempt_timeout = "2s"
"#,
        upstream.url("")
    );
    let config = llm_retry_gateway::Config::parse(&toml, |_| None).unwrap();
    let gateway = llm_retry_gateway::Gateway::new(&config).unwrap();
    let listener = llm_retry_gateway::listen(([127, 0, 0, 1], 0).into()).unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, signal) = tokio::sync::oneshot::channel();
    let serving = tokio::spawn(gateway.serve(listener, async {
        let _ = signal.await;
    }));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Counted>();
    let service = tower::service_fn(move |request: http::Request<Counted>| {
        let client = client.clone();
        async move {
            let response = client.request(request).await?;
            Ok::<_, BoxError>(stand_in_report(response))
        }
    });
    (service, addr, Stop { stop, serving })
}

/// The gateway keeps its reports; the client sees statuses. A stand-in
/// report carries what the checks read.
fn stand_in_report<B>(mut response: http::Response<B>) -> http::Response<B> {
    let mut report = RetryReport::new(llm_retry::StopReason::Succeeded);
    report.last_status = Some(response.status());
    response.extensions_mut().insert(report);
    response
}

/// What a response without a report was: served at its first send.
fn served_first(status: http::StatusCode) -> RetryReport {
    let mut report = RetryReport::new(llm_retry::StopReason::Succeeded);
    report.attempts = 1;
    report.last_status = Some(status);
    report
}

/// Stops a gateway started by [`through_gateway`].
struct Stop {
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Stop {
    async fn now(self) {
        let _ = self.stop.send(());
        self.serving.await.unwrap().unwrap();
    }
}

fn requests() -> usize {
    std::env::var("SOAK_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_400)
}

#[tokio::test(start_paused = true)]
async fn every_request_ends_once_with_only_bytes_the_upstream_sent() {
    let n = requests();
    let mut all = Vec::new();

    let upstream = mock().await;
    let stack = ServiceBuilder::new()
        .layer(RetryLayer::new(policy()))
        .layer(StreamGuardLayer::new())
        .service(client());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "RetryLayer + StreamGuard",
        check(Composition::reports("RetryLayer"), &ended, &upstream),
    ));
    nothing_left("RetryLayer + StreamGuard", upstream).await;

    let upstream = mock().await;
    let stack = ClientLayer::new(policy()).layer(client());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "ClientLayer",
        check(Composition::reports("ClientLayer"), &ended, &upstream),
    ));
    nothing_left("ClientLayer", upstream).await;

    let upstream = mock_of(sane_faults()).await;
    let stack = ClientLayer::new(policy()).layer(client());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "ClientLayer, sane waits",
        check(
            Composition::reports("ClientLayer, sane waits"),
            &ended,
            &upstream,
        ),
    ));
    nothing_left("ClientLayer, sane waits", upstream).await;

    let upstream = mock().await;
    let stack = ServiceBuilder::new()
        .map_request(|req: http::Request<Counted>| req.map(|b| ReplayBody::new(b, 1 << 20)))
        .layer(tower::retry::RetryLayer::new(policy()))
        .layer(StreamGuardLayer::new())
        .service(client::<Counted>());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "tower::retry",
        check(
            Composition {
                times_out: false,
                ..Composition::reports("tower::retry")
            },
            &ended,
            &upstream,
        ),
    ));
    nothing_left("tower::retry", upstream).await;

    let upstream = mock().await;
    let ended = crowd(through_reqwest(), &upstream.url("/v1/messages"), n).await;
    all.push((
        "reqwest adapter",
        check(Composition::reports("reqwest adapter"), &ended, &upstream),
    ));
    nothing_left("reqwest adapter", upstream).await;

    let upstream = mock().await;
    let (gateway, gateway_addr, stop) = through_gateway(&upstream).await;
    let ended = crowd(
        gateway,
        &format!("http://{gateway_addr}/v1/messages"),
        n / 4,
    )
    .await;
    all.push((
        "gateway (a quarter)",
        check(
            Composition {
                reports: false,
                ..Composition::reports("gateway")
            },
            &ended,
            &upstream,
        ),
    ));
    stop.now().await;
    nothing_left("gateway", upstream).await;

    let upstream = mock().await;
    if let Some(mut redis) = redis_support::RedisServer::start() {
        let started = std::time::Instant::now();
        let replicas = soak_redis::SharedGateways::start(&upstream, &redis).await;
        let (ended, faults) = tokio::join!(
            crowd(
                replicas.service(),
                "http://replicas.invalid/v1/messages",
                n / 4
            ),
            soak_redis::faults(&mut redis, &replicas, n / 4),
        );
        replicas.stop().await;
        all.push((
            "3 gateways sharing Redis",
            check(
                Composition {
                    reports: false,
                    ..Composition::reports("3 gateways sharing Redis")
                },
                &ended,
                &upstream,
            ),
        ));
        nothing_left("3 gateways sharing Redis", upstream).await;
        println!(
            "3 gateways sharing Redis: {faults:?}, {:?} of real time",
            started.elapsed()
        );
    }

    let upstream = mock().await;
    if let Some(mut redis) = redis_support::RedisServer::start() {
        let started = std::time::Instant::now();
        let layers = soak_redis::SharedLayers::start(&redis);
        let url = upstream.url("/v1/messages");
        let (ended, faults) = tokio::join!(
            crowd(layers.service(), &url, n / 4),
            soak_redis::faults(&mut redis, &layers, n / 4),
        );
        drop(layers);
        all.push((
            "2 RetryLayers sharing Redis",
            check(
                Composition::reports("2 RetryLayers sharing Redis"),
                &ended,
                &upstream,
            ),
        ));
        nothing_left("2 RetryLayers sharing Redis", upstream).await;
        println!(
            "2 RetryLayers sharing Redis: {faults:?}, {:?} of real time",
            started.elapsed()
        );
    }

    for (name, totals) in &all {
        println!("{name:<28} {totals:?}");
    }
    // Every composition serves: the mix answers a fifth of first sends with
    // a 200, so a composition serving none has stopped sending.
    for (name, totals) in &all {
        assert!(totals.succeeded > 0, "{name} served no request");
    }
    // First, do no harm: the gate in ClientLayer serves at least what the
    // retry layer alone serves, whatever the mix's 429s say.
    let served = |name: &str| {
        all.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.succeeded)
    };
    assert!(
        served("ClientLayer") >= served("RetryLayer + StreamGuard"),
        "the gate served fewer: {:?} against {:?}",
        served("ClientLayer"),
        served("RetryLayer + StreamGuard")
    );
}
