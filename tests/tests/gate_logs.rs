//! What the rate-limit gate logs: a send that waits for its slot says how
//! long, once; a send that goes at once says nothing; a refusal warns with
//! its reason.
#![allow(clippy::unwrap_used)]

mod support;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use llm_retry::rate_limit::{Quotas, RateLimitLayer, TokenCost};
use std::time::Duration;
use tower::{Layer, ServiceExt};

#[tokio::test(start_paused = true)]
async fn a_send_that_waits_logs_its_wait_once_and_a_refusal_warns() {
    let logs = support::captured_logs();

    let upstream = tower::service_fn(|_req: Request<()>| async {
        Ok::<_, llm_retry::BoxError>(Response::new(Full::new(Bytes::new())))
    });
    let gate = RateLimitLayer::new(
        Quotas::none()
            .requests_per_minute_with_burst(60, 1)
            .tokens_per_minute(1_000),
    )
    .unwrap()
    .layer(upstream);
    let send = |cost: u64| {
        let mut request = Request::get("http://a.test/").body(()).unwrap();
        request.extensions_mut().insert(TokenCost(cost));
        gate.clone().oneshot(request)
    };
    let waits = |lines: &[String]| {
        lines
            .iter()
            .filter(|line| line.contains("waiting for a rate-limit slot"))
            .count()
    };

    send(1).await.unwrap();
    let first = logs.take_lines();
    assert_eq!(waits(&first), 0, "the first goes at once: {first:?}");

    let start = tokio::time::Instant::now();
    send(1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let second = logs.take_lines();
    assert_eq!(waits(&second), 1, "{second:?}");
    assert!(
        second
            .iter()
            .any(|line| line.contains("DEBUG") && line.contains("wait_ms=1000")),
        "{second:?}"
    );

    assert!(send(5_000).await.is_err());
    let refused = logs.take_lines();
    assert_eq!(waits(&refused), 0, "{refused:?}");
    assert!(
        refused
            .iter()
            .any(|line| line.contains("WARN") && line.contains("rate limit refused a send")),
        "{refused:?}"
    );
}
