//! The gate on an in-process upstream under tokio's paused clock: exact
//! virtual send times.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::policy::RequestDeadline;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Sends = Arc<Mutex<Vec<(Instant, String)>>>;

/// An upstream recording when each request arrives; `/busy` answers 429
/// with `retry-after: 2`.
fn upstream(
    sends: Sends,
) -> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = crate::BoxError> + Clone {
    tower::service_fn(move |req: Request<()>| {
        let sends = Arc::clone(&sends);
        async move {
            sends
                .lock()
                .unwrap()
                .push((Instant::now(), req.uri().to_string()));
            let mut res = Response::new(Full::new(Bytes::new()));
            if req.uri().path() == "/busy" {
                *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("2"));
            }
            Ok::<_, crate::BoxError>(res)
        }
    })
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

fn offsets(sends: &Sends, start: Instant) -> Vec<u128> {
    sends
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| (*t - start).as_millis())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn sends_are_paced_first_in_first_out() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(600, 1))
        .layer(upstream(sends.clone()));
    let start = Instant::now();
    let calls: Vec<_> = (0..6)
        .map(|i| svc.clone().oneshot(get(&format!("http://a.test/{i}"))))
        .collect();
    for res in futures_util::future::join_all(calls).await {
        res.unwrap();
    }
    assert_eq!(offsets(&sends, start), [0, 100, 200, 300, 400, 500]);
    let order: Vec<String> = sends
        .lock()
        .unwrap()
        .iter()
        .map(|(_, u)| u.clone())
        .collect();
    let want: Vec<String> = (0..6).map(|i| format!("http://a.test/{i}")).collect();
    assert_eq!(order, want, "slots are handed out in arrival order");
}

#[tokio::test(start_paused = true)]
async fn keys_are_paced_apart() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .layer(upstream(sends.clone()));
    let start = Instant::now();
    let a = svc.clone().oneshot(get("http://a.test/"));
    let b = svc.clone().oneshot(get("http://b.test/"));
    let (a, b) = tokio::join!(a, b);
    a.unwrap();
    b.unwrap();
    assert_eq!(offsets(&sends, start), [0, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_named_wait_holds_the_whole_key() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none()).layer(upstream(sends.clone()));
    let start = Instant::now();
    let busy = svc
        .clone()
        .oneshot(get("http://a.test/busy"))
        .await
        .unwrap();
    assert_eq!(busy.status(), http::StatusCode::TOO_MANY_REQUESTS);
    svc.clone()
        .oneshot(get("http://a.test/next"))
        .await
        .unwrap();
    svc.clone()
        .oneshot(get("http://b.test/other-key"))
        .await
        .unwrap();
    assert_eq!(offsets(&sends, start), [0, 2_000, 2_000]);
}

#[tokio::test(start_paused = true)]
async fn tokens_per_minute_pace_by_cost_and_refuse_what_never_fits() {
    let sends = Sends::default();
    let svc =
        RateLimitLayer::new(Quotas::none().tokens_per_minute(6_000)).layer(upstream(sends.clone()));
    let start = Instant::now();
    let with_cost = |cost| {
        let mut req = get("http://a.test/");
        req.extensions_mut().insert(TokenCost(cost));
        req
    };
    svc.clone().oneshot(with_cost(6_000)).await.unwrap();
    svc.clone().oneshot(with_cost(3_000)).await.unwrap();
    assert_eq!(
        offsets(&sends, start),
        [0, 30_000],
        "3000 tokens need half a minute to refill"
    );
    let err = svc.clone().oneshot(with_cost(7_000)).await.unwrap_err();
    let err = err.downcast::<GateError>().unwrap();
    assert_eq!(
        *err,
        GateError::NeverFits {
            cost: 7_000,
            capacity: 6_000
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_slot_past_the_deadline_is_refused_at_once() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none()).layer(upstream(sends.clone()));
    svc.clone()
        .oneshot(get("http://a.test/busy"))
        .await
        .unwrap();
    let start = Instant::now();
    let mut req = get("http://a.test/");
    req.extensions_mut()
        .insert(RequestDeadline(start + Duration::from_secs(1)));
    let err = svc.clone().oneshot(req).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(matches!(
        *err.downcast::<GateError>().unwrap(),
        GateError::PastDeadline { .. }
    ));
    assert_eq!(sends.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_waiting_sends_nothing() {
    let sends = Sends::default();
    let svc = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(60, 1))
        .layer(upstream(sends.clone()));
    svc.clone()
        .oneshot(get("http://a.test/first"))
        .await
        .unwrap();
    let waiting = svc.clone().oneshot(get("http://a.test/second"));
    assert!(tokio::time::timeout(Duration::from_millis(500), waiting)
        .await
        .is_err());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(sends.lock().unwrap().len(), 1);
}
