//! The real middleware, in the configurations the report measures. Each
//! run builds its stack once — one retry budget, one gate — and every
//! client of that run sends through a clone of it.

use crate::config::Config;
use crate::models::Outcome;
use crate::upstream::{counted_client, request, Answers};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{
    BoxError, ClientLayer, RetryError, RetryLayer, RetryPolicy, RetryReport, StopReason,
};
use std::sync::Arc;
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

/// A configuration of the middleware.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stack {
    /// `ClientLayer::default()`: retries with the default budget over a
    /// gate that learns each key's rate from its 429s.
    Defaults,
    /// `RetryLayer::new(RetryPolicy::default())`: retries with the default
    /// budget, no gate.
    RetryOnly,
    /// `ClientLayer` with a gate told the upstream's quota.
    KnownQuota,
}

/// One run's clients' shared service.
pub(crate) type Shared =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<UnsyncBoxBody<Bytes, BoxError>>, BoxError>;

impl Stack {
    /// The known quota: C per second as a per-minute rate, the upstream's burst.
    fn quota(config: &Config) -> (u32, u32) {
        (config.capacity.saturating_mul(60), config.burst)
    }

    /// What the report says this stack is.
    pub(crate) fn describe(self, config: &Config) -> String {
        let (per_minute, burst) = Stack::quota(config);
        match self {
            Stack::Defaults => "`ClientLayer::default()` over a hyper-util client — what the \
                 README puts in front of a client: retries by `RetryPolicy::default()` (10 \
                 retries, 300 s; server-named waits are floors with ≤ 10 % jitter, otherwise \
                 500 ms · 2ⁿ⁻¹ + 0–25 % capped at 32 s, n counting computed waits only; a \
                 retry budget of 20 % of the last 10 s's first sends plus 10 retries/s), over \
                 a gate that learns each key's rate (`RateLimitLayer::learned()`: unpaced until \
                 the first 429; then one send per wait the 429 named to the millisecond, or the \
                 successes per second so far, growing 25 % a second until the next 429; then \
                 × 0.8 per congestion event, a quick regain to 95 % of the rate that drew it \
                 and a probe upward by 1 % a second; a 429's named wait holds the whole key), \
                 over the stream guard. A 429's retry waits in the gate and is not charged to \
                 the budget; any other retry is."
                .to_owned(),
            Stack::RetryOnly => "`RetryLayer::new(RetryPolicy::default())`: the same retries \
                 and budget, without the gate — every request honours its own 429's wait."
                .to_owned(),
            Stack::KnownQuota => format!(
                "`ClientLayer::default().rate_limit(RateLimitLayer::new(Quotas::none()\
                 .requests_per_minute_with_burst({per_minute}, {burst})))`: the gate is told \
                 the upstream's capacity (C × 60 per minute, the bucket's burst) and paces \
                 every send to it."
            ),
        }
    }

    /// A fresh stack: new budget, new gate, new connection pool. Clone
    /// the result into every client of one run.
    pub(crate) fn build(self, config: &Config, answers: &Arc<Answers>) -> Result<Shared, BoxError> {
        let client = counted_client(answers);
        let shared = match self {
            Stack::Defaults => BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .map_response(box_body)
                    .layer(ClientLayer::default())
                    .service(client),
            ),
            Stack::RetryOnly => BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .map_response(box_body)
                    .layer(RetryLayer::new(RetryPolicy::default()))
                    .service(client),
            ),
            Stack::KnownQuota => {
                let (per_minute, burst) = Stack::quota(config);
                // Under a token quota the requests are not what is limited.
                let quotas = match config.known_tokens {
                    Some((tokens, token_burst)) => {
                        Quotas::none().tokens_per_minute_with_burst(tokens, token_burst)
                    }
                    None => Quotas::none().requests_per_minute_with_burst(per_minute, burst),
                };
                BoxCloneSyncService::new(
                    ServiceBuilder::new()
                        .map_response(box_body)
                        .layer(
                            ClientLayer::default()
                                .rate_limit(RateLimitLayer::new(quotas).expect("valid quotas")),
                        )
                        .service(client),
                )
            }
        };
        Ok(shared)
    }
}

/// One body type for every stack's response.
fn box_body<B>(response: Response<B>) -> Response<UnsyncBoxBody<Bytes, BoxError>>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    response.map(|body| body.map_err(Into::into).boxed_unsync())
}

/// Why the middleware stopped, briefly, for the breakdown of outcomes.
fn stopped(stop: &StopReason) -> Option<&'static str> {
    match stop {
        StopReason::Succeeded | StopReason::NotRetryable(_) => None,
        StopReason::RetriesExhausted { .. } => Some("retries spent"),
        StopReason::BudgetExhausted { .. } => Some("budget exhausted"),
        StopReason::AdmissionFull { .. } => Some("too many waiting"),
        StopReason::DeadlineReached { .. } => Some("deadline"),
        other => Some(other.label()),
    }
}

/// Runs one logical request through a clone of the shared stack; its
/// body names `model` if given.
pub(crate) async fn send(
    service: &Shared,
    url: &str,
    (id, draw): (u64, u64),
    model: Option<&str>,
) -> Outcome {
    let request = match request(url, id, draw, model) {
        Ok(request) => request,
        Err(e) => {
            return Outcome {
                ok: false,
                why: e.to_string(),
            }
        }
    };
    match service.clone().oneshot(request).await {
        Ok(response) => {
            let status = response.status();
            let report = response.extensions().get::<RetryReport>();
            let sends = report.map_or(1, |r| r.attempts);
            let stop = report.and_then(|r| stopped(&r.stop));
            let complete = response.into_body().collect().await.is_ok();
            let ok = complete && status.is_success();
            let mut why = match (ok, complete, sends) {
                (true, _, _) => "200".to_owned(),
                (false, false, _) => "body failed".to_owned(),
                (false, true, 1) => status.as_u16().to_string(),
                (false, true, n) => format!("{} after {n} sends", status.as_u16()),
            };
            if let (false, Some(stop)) = (ok, stop) {
                why = format!("{why} ({stop})");
            }
            Outcome { ok, why }
        }
        Err(e) => {
            let why = match e.downcast_ref::<RetryError>() {
                Some(e) => match stopped(&e.report().stop) {
                    Some(stop) => format!("no response ({stop})"),
                    None => format!("no response: {}", e.report().stop),
                },
                None => e.to_string(),
            };
            Outcome { ok: false, why }
        }
    }
}
