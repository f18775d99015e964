//! The wire between clients and the mock upstream: the request every
//! client sends, and a counting layer that sees every send.

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use llm_retry::BoxError;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::time::Instant;

pub(crate) const PATH: &str = "/v1/messages";
const ID_HEADER: &str = "x-storm-request";
/// A request's place in its client's sequence: the upstream draws random
/// refusals by it, so every row meets the same ones.
pub(crate) const DRAW_HEADER: &str = "x-storm-draw";
const PROMPT: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"Hello"}]}"#;
/// One request in ten asks for a long answer: what a tokens-per-minute
/// quota notices.
const LARGE_PROMPT: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":8192,"messages":[{"role":"user","content":"Write the report"}]}"#;

/// The body of request `id`: every tenth is large.
fn prompt(id: u64) -> &'static str {
    if id % 10 == 9 {
        LARGE_PROMPT
    } else {
        PROMPT
    }
}

/// The token costs of a small and a large request, as the mock counts them.
pub(crate) fn token_costs() -> (u64, u64) {
    let cost = |body: &str| llm_retry_mock::Limit::token_cost(body.as_bytes());
    (cost(PROMPT), cost(LARGE_PROMPT))
}

/// The model the storm's bodies name, unless a scenario names another.
const MODEL: &str = "claude-sonnet-4-5";

/// The body of request `id`, naming `model` in place of [`MODEL`] when a
/// scenario gives one; without one, the very same bytes as ever.
fn body(id: u64, model: Option<&str>) -> Bytes {
    let prompt = prompt(id);
    match model {
        None => Bytes::from_static(prompt.as_bytes()),
        Some(model) => Bytes::from(prompt.replacen(MODEL, model, 1)),
    }
}

/// One logical request's HTTP request, tagged with its id and its `draw`
/// (see [`DRAW_HEADER`]); its body names `model` if given.
pub(crate) fn request(
    url: &str,
    id: u64,
    draw: u64,
    model: Option<&str>,
) -> Result<Request<Full<Bytes>>, BoxError> {
    Ok(Request::post(url)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", "sk-ant-storm-not-a-real-key")
        .header(ID_HEADER, id.to_string())
        .header(DRAW_HEADER, draw.to_string())
        .body(Full::new(body(id, model)))?)
}

/// The logical request a send belongs to.
pub(crate) fn request_id(headers: &HeaderMap) -> Option<u64> {
    headers.get(ID_HEADER)?.to_str().ok()?.parse().ok()
}

/// What the client saw answered: per request id, how many sends the
/// upstream answered with a success; and when each refused send went and
/// its 429 came back.
#[derive(Default)]
pub(crate) struct Answers {
    successes: Mutex<HashMap<u64, u32>>,
    refusals: Mutex<Vec<(Instant, Instant)>>,
}

impl Answers {
    fn add(&self, id: u64) {
        let mut map = self
            .successes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *map.entry(id).or_default() += 1;
    }

    fn refused(&self, sent: Instant, answered: Instant) {
        let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        refusals.push((sent, answered));
    }

    /// Request ids answered with a success more than once.
    pub(crate) fn duplicated(&self) -> usize {
        let map = self
            .successes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.values().filter(|n| **n > 1).count()
    }

    /// Refused sends that went before the first 429 came back: nothing
    /// above the connection pool can have heard of a refusal when they
    /// went.
    pub(crate) fn unwarned_refusals(&self) -> usize {
        let refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(first) = refusals.iter().map(|(_, answered)| *answered).min() else {
            return 0;
        };
        refusals.iter().filter(|(sent, _)| *sent < first).count()
    }
}

/// Sits between the retry logic and the connection pool: sees every send
/// and notes which request ids the upstream answered with a success, and
/// when refused sends went and came back.
#[derive(Clone)]
pub(crate) struct Counted<S> {
    inner: S,
    answers: Arc<Answers>,
}

/// A fresh connection pool behind the counting layer.
pub(crate) type UpstreamClient = Counted<Client<HttpConnector, Full<Bytes>>>;

/// A fresh connection pool for request bodies of type `B`, counted into
/// `answers`.
pub(crate) fn counted_client<B>(answers: &Arc<Answers>) -> Counted<Client<HttpConnector, B>>
where
    B: hyper::body::Body + Send,
    B::Data: Send,
{
    Counted {
        inner: Client::builder(TokioExecutor::new()).build_http(),
        answers: Arc::clone(answers),
    }
}

impl<S, B, R> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
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
        let answers = Arc::clone(&self.answers);
        let sent = Instant::now();
        let future = self.inner.call(request);
        Box::pin(async move {
            let result = future.await;
            if let Ok(response) = &result {
                if response.status() == http::StatusCode::TOO_MANY_REQUESTS {
                    answers.refused(sent, Instant::now());
                } else if let (true, Some(id)) = (response.status().is_success(), id) {
                    answers.add(id);
                }
            }
            result
        })
    }
}
