//! Chaos soak: a seeded mix of every fault the mock can play, a crowd of
//! concurrent requests (some cancelled at random) through each way of
//! composing the retry loop, and the invariants checked for every request:
//!
//! - exactly one final outcome (or a cancellation);
//! - no caller receives a byte the upstream did not send for the attempt it
//!   committed to, nor any byte twice: a complete body is exactly one
//!   reply's body, an interrupted one a prefix of one;
//! - the report's sends equal the upstream's record for that request, and
//!   stay inside the configured bounds;
//! - nothing panics.
//!
//! `SOAK_REQUESTS` sets the requests per composition (default 3,400: 17,000
//! in all, over five compositions, and a quarter as many through the
//! gateway); the documented large run is `SOAK_REQUESTS=250000`.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use llm_retry::stream_guard::StreamGuardLayer;
use llm_retry::{BoxError, ClientLayer, ReplayBody, RetryError, RetryLayer, RetryReport};
use llm_retry_mock::{MockServer, Reply, Route, Script};
use std::collections::HashMap;
use std::time::Duration;
use support::{client, fast_policy, PROMPT};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const MAX_RETRIES: u32 = 6;
const MAX_ELAPSED: Duration = Duration::from_secs(30);
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

/// The bytes a caller may see from a reply: complete bodies, and the
/// bodies a cut reply delivers before its reset.
struct Known {
    complete: Vec<Bytes>,
    delivered: Vec<Bytes>,
}

fn known() -> Known {
    let replies: Vec<Reply> = faults().into_iter().map(|(_, r)| r).collect();
    Known {
        complete: replies.iter().filter_map(Reply::expected_body).collect(),
        delivered: replies.iter().filter_map(Reply::delivered_body).collect(),
    }
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

fn request(url: &str, id: usize) -> http::Request<Full<Bytes>> {
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-request-id", id.to_string())
        .body(Full::new(Bytes::from_static(PROMPT.as_bytes())))
        .unwrap()
}

/// Runs `n` requests through `service`, at most [`CONCURRENCY`] at once;
/// every 13th is cancelled after a seeded delay. Time is tokio's paused
/// clock: waits, holds, deadlines and cancellations are exact.
async fn crowd<S, B>(service: S, url: &str, n: usize) -> Vec<(usize, Ended)>
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>, Error = BoxError>
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
                        let report = response.extensions().get::<RetryReport>().cloned();
                        let body = read_all(response.into_body()).await;
                        Ended::Answered {
                            report: report.expect("every response carries its report"),
                            body,
                        }
                    }
                    Err(error) => {
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
    answered_failure: usize,
    interrupted: usize,
    failed: usize,
    cancelled: usize,
    sends: usize,
}

fn check(name: &str, ended: &[(usize, Ended)], mock: &MockServer, known: &Known) -> Totals {
    let sends_per_id = sends_per_id(mock);
    let mut totals = Totals {
        sends: mock.request_count(),
        ..Totals::default()
    };
    let mut seen = vec![false; ended.len()];
    for (id, outcome) in ended {
        assert!(!seen[*id], "{name}: request {id} ended twice");
        seen[*id] = true;
        let report = match outcome {
            Ended::Cancelled => {
                totals.cancelled += 1;
                continue;
            }
            Ended::Failed(report) => {
                totals.failed += 1;
                *totals.stops.entry(report.stop.label()).or_default() += 1;
                report
            }
            Ended::Answered { report, body } => {
                check_body(name, *id, report, body, known, &mut totals);
                report
            }
        };
        let sent = sends_per_id.get(id).copied().unwrap_or(0);
        assert_eq!(
            report.attempts as usize, sent,
            "{name}: request {id}'s report counts {} sends, the upstream saw {sent}: {report}",
            report.attempts
        );
        assert!(report.attempts <= MAX_RETRIES + 1, "{name}: {report}");
        assert!(report.elapsed <= MAX_ELAPSED, "{name}: {report}");
    }
    assert!(seen.iter().all(|s| *s), "{name}: a request never ended");
    let counted: usize = sends_per_id.values().sum();
    assert_eq!(
        counted, totals.sends,
        "{name}: every send carried its request's id"
    );
    totals
}

/// Per request id, the sends the upstream saw.
fn sends_per_id(mock: &MockServer) -> HashMap<usize, usize> {
    let mut sends: HashMap<usize, usize> = HashMap::new();
    for record in mock.requests() {
        let id = record.header_str("x-request-id").unwrap().parse().unwrap();
        *sends.entry(id).or_default() += 1;
    }
    sends
}

/// An answered request's body: a served one byte for byte one reply's
/// body, an interrupted one a prefix of a body a reply delivers.
fn check_body(
    name: &str,
    id: usize,
    report: &RetryReport,
    body: &Result<Bytes, (Bytes, BoxError)>,
    known: &Known,
    totals: &mut Totals,
) {
    match body {
        Ok(bytes) if report.last_status == Some(http::StatusCode::OK) => {
            totals.succeeded += 1;
            assert!(
                known.complete.contains(bytes),
                "{name}: request {id} got a body no reply sent whole: {bytes:?}"
            );
        }
        Ok(_) => totals.answered_failure += 1,
        Err((prefix, _)) => {
            totals.interrupted += 1;
            assert!(
                known.delivered.iter().any(|d| d.starts_with(prefix)),
                "{name}: request {id} got bytes no reply sent: {prefix:?}"
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
    fast_policy()
        .max_retries(MAX_RETRIES)
        .max_elapsed(MAX_ELAPSED)
        .max_server_wait(Duration::from_secs(5))
        .attempt_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// A reqwest client with `RetryMiddleware` (the `ClientLayer` stack), as a
/// tower service of the same shape as the others: the request rebuilt as
/// reqwest's, the answer as `http`'s, and a failure as its `RetryError`.
fn through_reqwest() -> impl Service<
    http::Request<Full<Bytes>>,
    Response = http::Response<reqwest::Body>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(llm_retry_reqwest::RetryMiddleware::new(policy()))
        .build();
    tower::service_fn(move |request: http::Request<Full<Bytes>>| {
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
            http::Request<Full<Bytes>>,
            Response = http::Response<hyper::body::Incoming>,
            Error = BoxError,
            Future = impl Send,
        > + Clone
        + Send
        + 'static,
    std::net::SocketAddr,
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gateway.serve(listener, std::future::pending()));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let service = tower::service_fn(move |request: http::Request<Full<Bytes>>| {
        let client = client.clone();
        async move {
            let mut response = client.request(request).await?;
            // The gateway keeps its reports; the client sees statuses. A
            // stand-in report carries what the checks below read.
            let mut report =
                llm_retry::policy::RetryState::new().report(llm_retry::StopReason::Succeeded);
            report.last_status = Some(response.status());
            response.extensions_mut().insert(report);
            Ok::<_, BoxError>(response)
        }
    });
    (service, addr)
}

/// The gateway's requests, checked for one outcome each, only bytes the
/// upstream sent (or the gateway's own error answer, marked final), and
/// sends within the target's bounds.
fn check_gateway(ended: &[(usize, Ended)], mock: &MockServer, known: &Known) -> Totals {
    let sends_per_id = sends_per_id(mock);
    let mut totals = Totals {
        sends: mock.request_count(),
        ..Totals::default()
    };
    let mut seen = vec![false; ended.len()];
    for (id, outcome) in ended {
        assert!(!seen[*id], "gateway: request {id} ended twice");
        seen[*id] = true;
        match outcome {
            Ended::Cancelled => totals.cancelled += 1,
            Ended::Failed(_) => panic!("gateway: request {id} got no answer at all"),
            Ended::Answered { report, body } => {
                check_body("gateway", *id, report, body, known, &mut totals);
            }
        }
        let sent = sends_per_id.get(id).copied().unwrap_or(0);
        assert!(
            sent <= MAX_RETRIES as usize + 1,
            "gateway: request {id} was sent {sent} times"
        );
    }
    assert!(seen.iter().all(|s| *s), "gateway: a request never ended");
    totals
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
    let known = known();
    let mut all = Vec::new();

    let upstream = mock().await;
    let stack = ServiceBuilder::new()
        .layer(RetryLayer::new(policy()))
        .layer(StreamGuardLayer::new())
        .service(client());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "RetryLayer + StreamGuard",
        check("RetryLayer", &ended, &upstream, &known),
    ));

    let upstream = mock().await;
    let stack = ClientLayer::new(policy()).layer(client());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "ClientLayer",
        check("ClientLayer", &ended, &upstream, &known),
    ));

    let upstream = mock_of(sane_faults()).await;
    let stack = ClientLayer::new(policy()).layer(client());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "ClientLayer, sane waits",
        check("ClientLayer, sane waits", &ended, &upstream, &known),
    ));

    let upstream = mock().await;
    let stack = ServiceBuilder::new()
        .map_request(|req: http::Request<Full<Bytes>>| req.map(|b| ReplayBody::new(b, 1 << 20)))
        .layer(tower::retry::RetryLayer::new(policy()))
        .layer(StreamGuardLayer::new())
        .service(client::<Full<Bytes>>());
    let ended = crowd(stack, &upstream.url("/v1/messages"), n).await;
    all.push((
        "tower::retry",
        check("tower::retry", &ended, &upstream, &known),
    ));

    let upstream = mock().await;
    let ended = crowd(through_reqwest(), &upstream.url("/v1/messages"), n).await;
    all.push((
        "reqwest adapter",
        check("reqwest adapter", &ended, &upstream, &known),
    ));

    let upstream = mock().await;
    let (gateway, gateway_addr) = through_gateway(&upstream).await;
    let ended = crowd(
        gateway,
        &format!("http://{gateway_addr}/v1/messages"),
        n / 4,
    )
    .await;
    all.push((
        "gateway (a quarter)",
        check_gateway(&ended, &upstream, &known),
    ));

    for (name, totals) in &all {
        println!("{name:<26} {totals:?}");
    }
    let served: usize = all.iter().map(|(_, t)| t.succeeded).sum();
    assert!(served > 0, "some requests are served");
}
