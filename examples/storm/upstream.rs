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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;
    use tokio::task::JoinHandle;
    use tokio::time::sleep;
    use tower::{Service, ServiceExt};

    const STATUS: &str = "x-test-status";
    const AFTER_MS: &str = "x-test-after-ms";

    /// The counting layer over an upstream that answers each send with the
    /// status its request names, after the delay it names.
    fn counted(
        answers: &Arc<Answers>,
    ) -> Counted<
        impl tower::Service<
                Request<Full<Bytes>>,
                Response = Response<()>,
                Error = BoxError,
                Future = impl Send + 'static,
            > + Clone,
    > {
        let upstream = tower::service_fn(|request: Request<Full<Bytes>>| async move {
            let number = |name: &str| -> u64 {
                let value = request.headers().get(name).unwrap();
                value.to_str().unwrap().parse().unwrap()
            };
            let (status, after) = (number(STATUS), number(AFTER_MS));
            sleep(Duration::from_millis(after)).await;
            let mut response = Response::new(());
            *response.status_mut() = http::StatusCode::from_u16(status as u16)?;
            Ok::<_, BoxError>(response)
        });
        Counted {
            inner: upstream,
            answers: Arc::clone(answers),
        }
    }

    /// Sends request `id` now; the upstream answers `status` after
    /// `after_ms`.
    async fn send<S>(counted: &Counted<S>, id: u64, status: u16, after_ms: u64) -> JoinHandle<()>
    where
        S: tower::Service<Request<Full<Bytes>>, Response = Response<()>, Error = BoxError> + Clone,
        S::Future: Send + 'static,
    {
        let request = Request::post("http://upstream.test/")
            .header(ID_HEADER, id)
            .header(STATUS, status)
            .header(AFTER_MS, after_ms)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let mut counted = counted.clone();
        counted.ready().await.unwrap();
        // The send goes (and is dated) here; its answer comes on a task.
        let answer = counted.call(request);
        tokio::spawn(async move {
            answer.await.unwrap();
        })
    }

    #[tokio::test(start_paused = true)]
    async fn only_refusals_sent_before_the_first_429_came_back_are_unwarned() {
        let answers = Arc::new(Answers::default());
        let counted = counted(&answers);
        let mut sends = vec![
            send(&counted, 1, 429, 10).await, // goes at 0, refused at 10
            send(&counted, 7, 200, 1).await,
        ];
        sleep(Duration::from_millis(5)).await;
        sends.push(send(&counted, 2, 429, 10).await); // goes at 5, before any 429 is back
        sends.push(send(&counted, 7, 200, 1).await); // request 7 served twice
        sleep(Duration::from_millis(7)).await;
        sends.push(send(&counted, 3, 429, 10).await); // goes at 12, after the first 429
        sends.push(send(&counted, 8, 200, 1).await);
        for send in sends {
            send.await.unwrap();
        }
        assert_eq!(answers.unwarned_refusals(), 2);
        assert_eq!(answers.duplicated(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_with_no_refusal_has_none_unwarned() {
        let answers = Arc::new(Answers::default());
        let counted = counted(&answers);
        let sends = [
            send(&counted, 1, 200, 3).await,
            send(&counted, 2, 503, 1).await,
        ];
        for send in sends {
            send.await.unwrap();
        }
        assert_eq!(answers.unwarned_refusals(), 0);
        assert_eq!(answers.duplicated(), 0);
    }
}
