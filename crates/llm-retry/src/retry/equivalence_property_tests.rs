//! Property: the four ways to put the retry loop in front of an upstream —
//! `RetryLayer`, the stack built by hand, `ClientLayer`, and tower's own
//! `Retry` with the policy — make the same decisions where their inputs are
//! the same: the same sends and the same reason to stop. Provider error
//! bodies are in the script for the three stacks that read them; the tower
//! path, which cannot, is compared on the same statuses and headers; the
//! hand-built stack and `ClientLayer` are also compared under a tight
//! shared budget (which the gate's pacing changes for 429s, alike in both).
#![allow(clippy::unwrap_used)]

use super::service_tests::{reply, request, Upstream};
use crate::rate_limit::RateLimitLayer;
use crate::stream_guard::StreamGuardLayer;
use crate::{
    BoxError, ClientLayer, ReplayBody, RetryError, RetryLayer, RetryPolicy, RetryReport, StopReason,
};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use proptest::prelude::*;
use std::time::Duration;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// One scripted answer, kept cloneable so every stack gets its own copy.
#[derive(Debug, Clone)]
enum Answer {
    Status {
        code: u16,
        retry_after: Option<&'static str>,
        should_retry: Option<&'static str>,
        body: &'static str,
    },
    Reset,
}

/// Provider error bodies that change the decision when read.
const BODIES: [&str; 5] = [
    "",
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
    r#"{"type":"error","error":{"type":"rate_limit_error","message":"Please try again in 2s."}}"#,
    r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 199000 + 20000 > 200000"}}"#,
];

impl Answer {
    /// The same answer without its body, as a headers-only reader sees it.
    fn bodiless(&self) -> Answer {
        match self {
            Answer::Status {
                code,
                retry_after,
                should_retry,
                ..
            } => Answer::Status {
                code: *code,
                retry_after: *retry_after,
                should_retry: *should_retry,
                body: "",
            },
            Answer::Reset => Answer::Reset,
        }
    }

    fn reply(&self) -> Result<Response<Full<Bytes>>, BoxError> {
        match self {
            Answer::Status {
                code,
                retry_after,
                should_retry,
                body,
            } => {
                let mut headers = Vec::new();
                if let Some(v) = retry_after {
                    headers.push(("retry-after", *v));
                }
                if let Some(v) = should_retry {
                    headers.push(("x-should-retry", *v));
                }
                reply(*code, &headers, body)
            }
            Answer::Reset => Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into()),
        }
    }
}

fn answer() -> impl Strategy<Value = Answer> {
    let code = prop_oneof![
        Just(200u16),
        Just(400),
        Just(408),
        Just(429),
        Just(500),
        Just(503),
        Just(529)
    ];
    let retry_after = prop_oneof![
        Just(None),
        Just(Some("0")),
        Just(Some("1")),
        Just(Some("3")),
        Just(Some("999")),
        Just(Some("junk")),
    ];
    let should_retry =
        prop_oneof![4 => Just(None), 1 => Just(Some("true")), 1 => Just(Some("false"))];
    prop_oneof![
        8 => (code, retry_after, should_retry, proptest::sample::select(&BODIES[..])).prop_map(
            |(code, retry_after, should_retry, body)| {
                Answer::Status { code, retry_after, should_retry, body }
            }
        ),
        1 => Just(Answer::Reset),
    ]
}

/// What a stack did: the upstream's sends and the report's stop.
#[derive(Debug, PartialEq)]
struct Seen {
    sends: usize,
    reported_sends: u32,
    stop: StopReason,
}

fn builder() -> crate::RetryPolicyBuilder {
    RetryPolicy::builder()
        .max_retries(6)
        .max_elapsed(Duration::from_secs(60))
        .max_server_wait(Duration::from_secs(30))
        .seed(3)
}

fn policy() -> RetryPolicy {
    builder().no_budget().build().unwrap()
}

/// A budget of one retry a second and nothing in proportion.
fn tight() -> RetryPolicy {
    let budget = crate::budget::RetryBudget::new(0.0, 1, Duration::from_secs(10)).unwrap();
    builder().budget(budget).build().unwrap()
}

/// Sends made and why the request stopped: a response without a report
/// was served at its first send.
fn report_of<B>(result: Result<Response<B>, BoxError>) -> (u32, StopReason) {
    let report = match result {
        Ok(res) => res.extensions().get::<RetryReport>().cloned(),
        Err(e) => Some(e.downcast::<RetryError>().unwrap().report().clone()),
    };
    report.map_or((1, StopReason::Succeeded), |r| (r.attempts, r.stop))
}

async fn run<S, B, RB>(svc: S, upstream: &Upstream, request: Request<B>) -> Seen
where
    S: Service<Request<B>, Response = Response<RB>, Error = BoxError>,
{
    let (reported_sends, stop) = report_of(svc.oneshot(request).await);
    Seen {
        sends: upstream.call_offsets(tokio::time::Instant::now()).len(),
        reported_sends,
        stop,
    }
}

fn gated<S>(
    policy: RetryPolicy,
    upstream: S,
) -> crate::Retry<crate::rate_limit::RateLimit<crate::stream_guard::StreamGuard<S>>> {
    ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(RateLimitLayer::learned())
        .layer(StreamGuardLayer::new())
        .service(upstream)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_composition_decides_alike(script in proptest::collection::vec(answer(), 1..10)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let bodiless: Vec<Answer> = script.iter().map(Answer::bodiless).collect();
        let replies = |script: &[Answer]| Upstream::new(script.iter().map(Answer::reply).collect());
        let seen = runtime.block_on(async {
            let up = replies(&script);
            let retry = run(RetryLayer::new(policy()).layer(up.clone()), &up, request()).await;
            let up = replies(&script);
            let by_hand = run(gated(policy(), up.clone()), &up, request()).await;
            let up = replies(&script);
            let client = run(ClientLayer::new(policy()).layer(up.clone()), &up, request()).await;

            let up = replies(&script);
            let by_hand_tight = run(gated(tight(), up.clone()), &up, request()).await;
            let up = replies(&script);
            let client_tight = run(ClientLayer::new(tight()).layer(up.clone()), &up, request()).await;

            let up = replies(&bodiless);
            let retry_bodiless = run(RetryLayer::new(policy()).layer(up.clone()), &up, request()).await;
            let up = replies(&bodiless);
            let tower_retry = ServiceBuilder::new()
                .layer(tower::retry::RetryLayer::new(policy()))
                .service(up.clone());
            let (parts, body) = request().into_parts();
            let request = Request::from_parts(parts, ReplayBody::new(body, 1 << 20));
            let tower_path = run(tower_retry, &up, request).await;
            (retry, by_hand, client, by_hand_tight, client_tight, retry_bodiless, tower_path)
        });
        let (retry, by_hand, client, by_hand_tight, client_tight, retry_bodiless, tower_path) = seen;
        prop_assert_eq!(retry.sends as u32, retry.reported_sends);
        prop_assert_eq!(&by_hand, &retry, "hand-built stack");
        prop_assert_eq!(&client, &retry, "ClientLayer");
        prop_assert_eq!(&client_tight, &by_hand_tight, "ClientLayer under a budget");
        prop_assert_eq!(&tower_path, &retry_bodiless, "tower::retry path");
    }
}
