//! The gate's service holds a key for a wait its provider named, seen
//! from outside: the whole key, no longer than a request honours, and the
//! request whose 429 held it keeps its place. On an in-process upstream
//! under tokio's paused clock: exact virtual send times.
#![allow(clippy::unwrap_used)]

mod service_support;

use service_support::*;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{RetryError, RetryPolicy};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

#[tokio::test(start_paused = true)]
async fn a_named_wait_holds_the_whole_key() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let svc = judged(once(), gate);
    let start = Instant::now();
    let busy = svc
        .clone()
        .oneshot(post("http://a.test/busy"))
        .await
        .unwrap();
    assert_eq!(busy.status(), http::StatusCode::TOO_MANY_REQUESTS);
    // Another key first: the hold is not its business.
    svc.clone()
        .oneshot(post("http://b.test/other-key"))
        .await
        .unwrap();
    svc.clone()
        .oneshot(post("http://a.test/next"))
        .await
        .unwrap();
    assert_eq!(offsets(&sends, start), [0, 0, 2_000]);
}

#[tokio::test(start_paused = true)]
async fn under_a_gate_that_only_holds_a_resend_sleeps_its_own_spread_wait() {
    // The gate holds the key for the named 2 s but paces nothing: the
    // retry layer's resend is the request's own, spread past the 2 s (up
    // to a tenth more), not released by the gate at its end.
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let svc = judged(RetryPolicy::builder().max_retries(1).seed(7), gate);
    let start = Instant::now();
    let busy = svc.oneshot(post("http://a.test/busy")).await.unwrap();
    assert_eq!(busy.status(), http::StatusCode::TOO_MANY_REQUESTS);
    let sent = offsets(&sends, start);
    assert_eq!(sent.len(), 2);
    assert!(
        sent[1] > 2_000 && sent[1] <= 2_200,
        "resent {} ms after the first, past the named 2 s",
        sent[1]
    );
}

#[tokio::test(start_paused = true)]
async fn a_huge_named_wait_fails_fast_and_holds_the_key_no_longer_than_the_limit() {
    let sends = Sends::default();
    let gate = RateLimitLayer::new(Quotas::none())
        .unwrap()
        .layer(upstream::<Replayed>(sends.clone()));
    let limit = Duration::from_secs(30);
    let svc = judged(
        RetryPolicy::builder().max_retries(1).max_server_wait(limit),
        gate,
    );
    let start = Instant::now();
    let too_long = |response: Response<llm_retry::RetryBody<Full<Bytes>>>| {
        let report = response
            .extensions()
            .get::<llm_retry::RetryReport>()
            .unwrap();
        matches!(report.stop, llm_retry::StopReason::ServerWaitTooLong { .. })
    };
    let huge = svc.clone().oneshot(post("http://a.test/huge"));
    assert!(too_long(huge.await.unwrap()));
    // Later sends meet the key's hold, longer than they honour. Until one
    // corroborates it they are sent, as without a gate: each is refused
    // the same way.
    for _ in 0..2 {
        tokio::time::advance(Duration::from_secs(1)).await;
        let huge = svc.clone().oneshot(post("http://a.test/huge"));
        assert!(too_long(huge.await.unwrap()));
    }
    // Corroborated: the next request fails fast with the same words
    // instead of waiting out the limit in silence, and sends nothing.
    tokio::time::advance(Duration::from_secs(1)).await;
    let err = svc
        .clone()
        .oneshot(post("http://a.test/next"))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    let err = err.downcast::<RetryError>().unwrap();
    assert!(
        matches!(
            err.report().stop,
            llm_retry::StopReason::ServerWaitTooLong { limit: l, .. } if l == limit
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("more than the 30 s limit"),
        "{err}"
    );
    assert_eq!(err.report().attempts, 0, "{err}");
    // The hold ends at the limit after the last refusal: the key is tried
    // again then.
    tokio::time::sleep_until(start + Duration::from_secs(2) + limit).await;
    svc.clone()
        .oneshot(post("http://a.test/later"))
        .await
        .unwrap();
    assert_eq!(offsets(&sends, start), [0, 1_000, 2_000, 32_000]);
}

#[tokio::test(start_paused = true)]
async fn a_huge_named_wait_no_later_send_corroborates_holds_no_one_who_cannot_wait() {
    // `/huge` is refused for a reason of its own: the requests after it
    // are sent, as without a gate, and served.
    let sends = Sends::default();
    let gate = RateLimitLayer::learned().layer(upstream::<Replayed>(sends.clone()));
    let limit = Duration::from_secs(30);
    let svc = judged(
        RetryPolicy::builder().max_retries(1).max_server_wait(limit),
        gate,
    );
    let start = Instant::now();
    let huge = svc.clone().oneshot(post("http://a.test/huge")).await;
    assert_eq!(huge.unwrap().status(), http::StatusCode::TOO_MANY_REQUESTS);
    tokio::time::advance(Duration::from_secs(1)).await;
    let next = svc.clone().oneshot(post("http://a.test/next")).await;
    assert_eq!(next.unwrap().status(), http::StatusCode::OK);
    assert_eq!(offsets(&sends, start), [0, 1_000]);
}

#[tokio::test(start_paused = true)]
async fn the_request_whose_429_held_the_key_keeps_its_place() {
    // The first request is answered 429 `retry-after: 2`; 20 more arrive
    // during the hold. The first goes first when the hold ends, not after
    // the 20.
    let sends = Sends::default();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let upstream = {
        let sends = sends.clone();
        tower::service_fn(move |req: Request<Replayed>| {
            let (sends, answered) = (Arc::clone(&sends), Arc::clone(&answered));
            async move {
                sends
                    .lock()
                    .unwrap()
                    .push((Instant::now(), req.uri().path().to_owned()));
                let mut res = Response::new(Full::new(Bytes::new()));
                if answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                    res.headers_mut()
                        .insert("retry-after", http::HeaderValue::from_static("2"));
                }
                Ok::<_, llm_retry::BoxError>(res)
            }
        })
    };
    let gate = RateLimitLayer::new(Quotas::none().requests_per_minute_with_burst(600, 1))
        .unwrap()
        .layer(upstream);
    let svc = judged(RetryPolicy::builder().max_retries(3), gate);
    let start = Instant::now();
    let first = tokio::spawn(svc.clone().oneshot(post("http://a.test/first")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let crowd: Vec<_> = (0..20)
        .map(|i| tokio::spawn(svc.clone().oneshot(post(&format!("http://a.test/n{i}")))))
        .collect();
    assert_eq!(first.await.unwrap().unwrap().status(), http::StatusCode::OK);
    for call in crowd {
        assert_eq!(call.await.unwrap().unwrap().status(), http::StatusCode::OK);
    }
    let sent = sends.lock().unwrap().clone();
    let after_hold: Vec<&str> = sent
        .iter()
        .filter(|(t, _)| *t - start >= Duration::from_secs(2))
        .map(|(_, path)| path.as_str())
        .collect();
    assert_eq!(after_hold.first(), Some(&"/first"), "{sent:?}");
    assert_eq!(after_hold.len(), 21);
}
