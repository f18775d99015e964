//! Where a request goes (`/healthz`, `/metrics`, or through the routes),
//! with what the gateway does for every request around it: the client's
//! secrets marked sensitive before anything can log them, and the
//! request's log (a `request` span and its events at `debug`, and an
//! `error` for every answer in the 5xx class).
//!
//! One service for both ways of serving: [`Gateway::serve`] hands it to
//! hyper as it is, [`Gateway::router`] mounts it in axum.
//!
//! [`Gateway::serve`]: crate::Gateway::serve
//! [`Gateway::router`]: crate::Gateway::router

use crate::gateway::Shared;
use crate::proxy;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Request, StatusCode};
use llm_retry::BoxError;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::Instrument;

/// Request headers that carry a client's secrets: their values are marked
/// sensitive, so a `Debug` of the headers prints no secret.
const SENSITIVE: [HeaderName; 4] = [
    header::AUTHORIZATION,
    crate::upstream::X_API_KEY,
    crate::upstream::API_KEY,
    header::COOKIE,
];

/// A request's answer, boxed once: the handler's future holds no service
/// type whose `Send` the compiler cannot prove in general.
pub(crate) type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// The gateway as one service: every path, every method.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    shared: Arc<Shared>,
}

impl Dispatch {
    pub(crate) fn new(shared: Arc<Shared>) -> Dispatch {
        Dispatch { shared }
    }

    fn answer<B>(&self, request: Request<B>) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { Ok(dispatch(shared, request).await) })
    }
}

impl<B> hyper::service::Service<Request<B>> for Dispatch
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: Request<B>) -> Answer {
        self.answer(request)
    }
}

impl<B> tower::Service<Request<B>> for Dispatch
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Answer {
        self.answer(request)
    }
}

async fn dispatch<B>(shared: Arc<Shared>, mut request: Request<B>) -> Response
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    mark_sensitive(request.headers_mut());
    // At `debug` only: disabled, the span costs a check of its callsite.
    // The path, not the URI: a query string may hold a key (`?key=…`).
    let span = tracing::debug_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        version = ?request.version(),
    );
    let started = Instant::now();
    let answer = async {
        tracing::debug!("started processing request");
        match request.uri().path() {
            "/healthz" => own(&request, || crate::gateway::healthz(&shared)),
            "/metrics" => own(&request, || crate::gateway::metrics(&shared)),
            _ => proxy::forward(shared, request).await,
        }
    }
    .instrument(span.clone())
    .await;
    log_answer(&span, answer.status(), started.elapsed());
    answer
}

/// One of the gateway's own pages: `GET` (and `HEAD`) only.
fn own<B>(request: &Request<B>, page: impl FnOnce() -> Response) -> Response {
    if request.method() == Method::GET || request.method() == Method::HEAD {
        return page();
    }
    let mut answer = Response::new(Body::empty());
    *answer.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    answer
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
    answer
}

/// Marks the values of [`SENSITIVE`] headers sensitive, in one pass over
/// the headers present.
fn mark_sensitive(headers: &mut http::HeaderMap) {
    for (name, value) in headers.iter_mut() {
        if SENSITIVE.contains(name) {
            value.set_sensitive(true);
        }
    }
}

/// The answer's head in the request's log: at `debug` always, at `error`
/// for a status in the 5xx class.
fn log_answer(span: &tracing::Span, status: StatusCode, took: std::time::Duration) {
    let _entered = span.enter();
    let millis = took.as_millis();
    if status.is_server_error() {
        tracing::error!(
            latency = %format_args!("{millis} ms"),
            status = status.as_u16(),
            "response failed"
        );
    }
    tracing::debug!(
        latency = %format_args!("{millis} ms"),
        status = status.as_u16(),
        "finished processing request"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_of_a_secret_header_is_marked_and_no_other() {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer a"));
        headers.append("x-api-key", HeaderValue::from_static("k1"));
        headers.append("x-api-key", HeaderValue::from_static("k2"));
        headers.insert("api-key", HeaderValue::from_static("k3"));
        headers.insert("cookie", HeaderValue::from_static("c=1"));
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        mark_sensitive(&mut headers);
        for (name, value) in &headers {
            assert_eq!(
                value.is_sensitive(),
                name != header::CONTENT_TYPE,
                "{name}: {value:?}"
            );
        }
        assert!(!format!("{headers:?}").contains("k2"));
    }
}
