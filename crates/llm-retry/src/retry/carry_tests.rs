//! How requests carry their gate link: in the extensions only until the
//! stack showed it needs them there.
#![allow(clippy::unwrap_used)]

use crate::rate_limit::link::GateLink;
use crate::rate_limit::{Quotas, RateLimitLayer};
use crate::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// Per request that reached it: its path, whether it carried a link in its
/// extensions, and when it came.
type Seen = Arc<Mutex<Vec<(String, bool, Instant)>>>;

/// An upstream recording what reaches it; `/busy` answers 429 with
/// `retry-after: 2`.
fn upstream<B: Send + 'static>(
    seen: Seen,
) -> impl Service<Request<B>, Response = Response<Full<Bytes>>, Error = crate::BoxError> + Clone {
    tower::service_fn(move |req: Request<B>| {
        let seen = Arc::clone(&seen);
        async move {
            let linked = req.extensions().get::<GateLink>().is_some();
            let path = req.uri().path().to_owned();
            seen.lock()
                .unwrap()
                .push((path.clone(), linked, Instant::now()));
            let mut res = Response::new(Full::new(Bytes::new()));
            if path == "/busy" {
                *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("2"));
            }
            Ok::<_, crate::BoxError>(res)
        }
    })
}

fn retry<S>(inner: S) -> crate::Retry<S> {
    let policy = RetryPolicy::builder()
        .max_retries(0)
        .no_budget()
        .build()
        .unwrap();
    RetryLayer::new(policy).layer(inner)
}

async fn send<S, B>(svc: &S, path: &str) -> StatusCode
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = crate::BoxError> + Clone,
{
    let request = Request::post(format!("http://a.test{path}"))
        .body(Full::default())
        .unwrap();
    svc.clone().oneshot(request).await.unwrap().status()
}

fn linked(seen: &Seen) -> Vec<bool> {
    seen.lock().unwrap().iter().map(|(_, l, _)| *l).collect()
}

#[tokio::test(start_paused = true)]
async fn a_gate_reached_during_the_call_gets_the_link_without_extensions() {
    let seen = Seen::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream(seen.clone()));
    let svc = retry(gate);
    assert_eq!(send(&svc, "/first").await, StatusCode::OK);
    let start = Instant::now();
    assert_eq!(send(&svc, "/busy").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(&svc, "/next").await, StatusCode::OK);
    // The 429's wait reached the gate through the offered link: the key
    // was held for it.
    let next = seen.lock().unwrap()[2].2;
    assert_eq!(next - start, Duration::from_secs(2));
    assert_eq!(linked(&seen), [true, false, false]);
}

#[tokio::test(start_paused = true)]
async fn requests_that_meet_no_gate_carry_no_extension_after_the_first() {
    let seen = Seen::default();
    let svc = retry(upstream(seen.clone()));
    for _ in 0..3 {
        assert_eq!(send(&svc, "/ok").await, StatusCode::OK);
    }
    // Clones share what the first request showed.
    assert_eq!(send(&svc.clone(), "/ok").await, StatusCode::OK);
    assert_eq!(linked(&seen), [true, false, false, false]);
}

/// Calls its inner service only when first polled, as a buffer's worker
/// does.
#[derive(Clone)]
struct Deferred<S>(S);

impl<S, R> Service<R> for Deferred<S>
where
    S: Service<R> + Clone + 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>>>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        let mut inner = self.0.clone();
        Box::pin(async move {
            tokio::task::yield_now().await;
            inner.ready().await?.call(request).await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_gate_reached_after_the_call_keeps_getting_the_link_in_extensions() {
    let seen = Seen::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream(seen.clone()));
    let svc = retry(Deferred(gate));
    assert_eq!(send(&svc, "/first").await, StatusCode::OK);
    let start = Instant::now();
    assert_eq!(send(&svc, "/busy").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(&svc, "/next").await, StatusCode::OK);
    let next = seen.lock().unwrap()[2].2;
    assert_eq!(next - start, Duration::from_secs(2), "the key was held");
    assert_eq!(linked(&seen), [true, true, true]);
}
