//! A scripted upstream for the gate's boundary tests: it answers each
//! send as its script says and records when each arrived, on tokio's
//! (paused) clock. Only the crate's public items are used.
#![allow(dead_code, clippy::unwrap_used)]

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use llm_retry::rate_limit::{RateLimit, RateLimitLayer};
use llm_retry::{
    BoxError, ReplayBody, Retry, RetryBody, RetryLayer, RetryPolicy, RetryPolicyBuilder,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

/// The body the gate passes down under the retry layer.
pub(crate) type Body = ReplayBody<Full<Bytes>>;

/// The upstream as a service.
pub(crate) type UpstreamService =
    BoxCloneSyncService<Request<Body>, Response<Full<Bytes>>, BoxError>;

/// The whole stack a user builds: the retry layer over the gate.
pub(crate) type Stack = Retry<RateLimit<UpstreamService>>;

/// One send as the upstream saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// How many sends came before it.
    pub(crate) nth: usize,
    /// The request's path.
    pub(crate) path: String,
    /// When it arrived, since the upstream was built.
    pub(crate) at: Duration,
}

type Script = dyn Fn(&Seen) -> (Duration, Response<Full<Bytes>>) + Send + Sync;

/// An upstream that answers each send when and as its script says.
#[derive(Clone)]
pub(crate) struct Upstream {
    start: Instant,
    script: Arc<Script>,
    log: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    /// Answers at once.
    pub(crate) fn new(
        script: impl Fn(&Seen) -> Response<Full<Bytes>> + Send + Sync + 'static,
    ) -> Self {
        Upstream::slow(Duration::ZERO, script)
    }

    /// Answers each send `latency` after it arrived.
    pub(crate) fn slow(
        latency: Duration,
        script: impl Fn(&Seen) -> Response<Full<Bytes>> + Send + Sync + 'static,
    ) -> Self {
        Upstream::timed(move |seen| (latency, script(seen)))
    }

    /// Answers each send after the latency its script names with it.
    pub(crate) fn timed(
        script: impl Fn(&Seen) -> (Duration, Response<Full<Bytes>>) + Send + Sync + 'static,
    ) -> Self {
        Upstream {
            start: Instant::now(),
            script: Arc::new(script),
            log: Arc::default(),
        }
    }

    /// The upstream as the service under the gate.
    pub(crate) fn service(&self) -> UpstreamService {
        let this = self.clone();
        BoxCloneSyncService::new(tower::service_fn(move |req: Request<Body>| {
            let this = this.clone();
            async move {
                let seen = {
                    let mut log = this.log.lock().unwrap();
                    let seen = Seen {
                        nth: log.len(),
                        path: req.uri().path().to_owned(),
                        at: this.start.elapsed(),
                    };
                    log.push(seen.clone());
                    seen
                };
                drop(req);
                let (latency, response) = (this.script)(&seen);
                tokio::time::sleep(latency).await;
                Ok::<_, BoxError>(response)
            }
        }))
    }

    /// Every send so far, in arrival order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    /// How many sends arrived.
    pub(crate) fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// `(path, ms since the upstream was built)` of every send.
    pub(crate) fn sends(&self) -> Vec<(String, u128)> {
        self.seen()
            .into_iter()
            .map(|s| (s.path, s.at.as_millis()))
            .collect()
    }

    /// When each send to `path` arrived, in ms since the upstream was built.
    pub(crate) fn sent_to(&self, path: &str) -> Vec<u128> {
        self.seen()
            .into_iter()
            .filter(|s| s.path == path)
            .map(|s| s.at.as_millis())
            .collect()
    }

    /// The instant the upstream was built.
    pub(crate) fn start(&self) -> Instant {
        self.start
    }
}

/// A 200 with an empty JSON body.
pub(crate) fn ok() -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from_static(b"{}")))
}

/// An answer with `code` and `headers`.
pub(crate) fn answer(code: u16, headers: &[(&str, String)]) -> Response<Full<Bytes>> {
    let mut res = ok();
    *res.status_mut() = StatusCode::from_u16(code).unwrap();
    for (name, value) in headers {
        res.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    res
}

/// A 429 naming `retry-after` seconds.
pub(crate) fn refused_for(secs: u64) -> Response<Full<Bytes>> {
    answer(429, &[("retry-after", secs.to_string())])
}

/// A 429 naming a wait to the millisecond.
pub(crate) fn refused_for_ms(ms: u64) -> Response<Full<Bytes>> {
    answer(429, &[("retry-after-ms", ms.to_string())])
}

/// A POST to `path` on one key (authority and credential), empty body.
pub(crate) fn post(path: &str) -> Request<Full<Bytes>> {
    Request::post(format!("http://a.test{path}"))
        .header("x-api-key", "sk-test")
        .body(Full::default())
        .unwrap()
}

/// A POST to `path` with a JSON body asking for `max_tokens`.
pub(crate) fn post_json(path: &str, max_tokens: u64) -> Request<Full<Bytes>> {
    let body = format!(r#"{{"model":"m","max_tokens":{max_tokens}}}"#);
    Request::post(format!("http://a.test{path}"))
        .header("x-api-key", "sk-test")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// A policy that resends nothing and keeps no budget.
pub(crate) fn once() -> RetryPolicyBuilder {
    RetryPolicy::builder().no_budget().max_retries(0)
}

/// The retry layer built from `policy` over `gate` over `upstream`.
pub(crate) fn stack(
    policy: RetryPolicyBuilder,
    gate: &RateLimitLayer,
    upstream: &Upstream,
) -> Stack {
    over(policy, gate.layer(upstream.service()))
}

/// The retry layer built from `policy` over a gate already built: several
/// retry layers over one gate share its keys.
pub(crate) fn over<S>(policy: RetryPolicyBuilder, gated: S) -> Retry<S> {
    RetryLayer::new(policy.build().unwrap()).layer(gated)
}

/// Lets every spawned task run until it waits on the clock.
pub(crate) async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// A request spawned onto its own task.
pub(crate) type Call = tokio::task::JoinHandle<Result<Response<RetryBody<Full<Bytes>>>, BoxError>>;

/// Spawns a request to each of `paths` in turn, each reaching the gate
/// before the next.
pub(crate) async fn spawn_all<S>(svc: &S, paths: &[&str]) -> Vec<Call>
where
    S: tower::Service<
            Request<Full<Bytes>>,
            Response = Response<RetryBody<Full<Bytes>>>,
            Error = BoxError,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let mut calls = Vec::new();
    for path in paths {
        calls.push(tokio::spawn(svc.clone().oneshot(post(path))));
        settle().await;
    }
    calls
}

/// A service ready only from an instant on: each clone (the gate takes
/// one per send) keeps the instant its original was set to when cloned.
pub(crate) struct Valve<S> {
    inner: S,
    opens_at: Arc<Mutex<Instant>>,
    until: Instant,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Valve<S> {
    /// `inner`, ready from `opens_at` on (as it is when cloned).
    pub(crate) fn new(inner: S, opens_at: Arc<Mutex<Instant>>) -> Valve<S> {
        let until = *opens_at.lock().unwrap();
        Valve {
            inner,
            opens_at,
            until,
            sleep: None,
        }
    }
}

impl<S: Clone> Clone for Valve<S> {
    fn clone(&self) -> Self {
        Valve {
            inner: self.inner.clone(),
            opens_at: Arc::clone(&self.opens_at),
            until: *self.opens_at.lock().unwrap(),
            sleep: None,
        }
    }
}

impl<S: tower::Service<R>, R> tower::Service<R> for Valve<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        let until = self.until;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
        std::task::ready!(std::future::Future::poll(sleep.as_mut(), cx));
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.inner.call(request)
    }
}

/// An answer stating `remaining` requests left in the window, and no reset.
pub(crate) fn window(remaining: u64) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    answer(
        200,
        &[("x-ratelimit-remaining-requests", remaining.to_string())],
    )
}
