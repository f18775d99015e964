//! The gate's service on an in-process upstream: helpers shared by the
//! `gate_service_*` tests (only the crate's public items are used).
#![allow(dead_code, clippy::unwrap_used)]

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use llm_retry::{ReplayBody, RetryLayer, RetryPolicy};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service};

pub(crate) type Sends = Arc<Mutex<Vec<(Instant, String)>>>;

/// An upstream recording when each request arrives; `/busy` answers 429
/// with `retry-after: 2`, `/nowait` a 429 naming no wait.
pub(crate) fn upstream<B: Send + 'static>(
    sends: Sends,
) -> impl Service<Request<B>, Response = Response<Full<Bytes>>, Error = llm_retry::BoxError> + Clone
{
    tower::service_fn(move |req: Request<B>| {
        let sends = Arc::clone(&sends);
        async move {
            sends
                .lock()
                .unwrap()
                .push((Instant::now(), req.uri().to_string()));
            if req.uri().path() == "/slow" {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            let mut res = Response::new(Full::new(Bytes::new()));
            let wait = match req.uri().path() {
                "/busy" => Some("2"),
                "/huge" => Some("99999999999999999999"),
                _ => None,
            };
            if let Some(wait) = wait {
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static(wait));
            }
            if req.uri().path() == "/nowait" {
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            }
            Ok::<_, llm_retry::BoxError>(res)
        }
    })
}

pub(crate) fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

/// A request for a gate under the retry layer.
pub(crate) fn post(uri: &str) -> Request<Full<Bytes>> {
    Request::post(uri).body(Full::default()).unwrap()
}

/// The body the gate sees under the retry layer.
pub(crate) type Replayed = ReplayBody<Full<Bytes>>;

/// The retry layer that judges each answer and tells the gate what it
/// meant for the key: the gate learns only from it.
pub(crate) fn judged<S>(policy: llm_retry::RetryPolicyBuilder, gate: S) -> llm_retry::Retry<S> {
    let policy = policy.no_budget().build().unwrap();
    RetryLayer::new(policy).layer(gate)
}

/// A policy that resends nothing.
pub(crate) fn once() -> llm_retry::RetryPolicyBuilder {
    RetryPolicy::builder().max_retries(0)
}

pub(crate) fn offsets(sends: &Sends, start: Instant) -> Vec<u128> {
    sends
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| (*t - start).as_millis())
        .collect()
}
