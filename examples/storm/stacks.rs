//! The real middleware, in the configurations the report measures. Each
//! run builds its stack once — one retry budget, one gate — and every
//! client of that run sends through a clone of it.

use crate::config::Config;
use crate::models::Outcome;
use crate::upstream::{counted_client, request, Successes};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use llm_retry::budget::RetryBudget;
use llm_retry::rate_limit::{Quotas, RateLimitLayer};
use llm_retry::{
    BoxError, RetryBody, RetryError, RetryLayer, RetryPolicy, RetryReport, StopReason,
};
use std::sync::Arc;
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

/// A configuration of the middleware.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stack {
    /// `RetryPolicy::default()`: no budget, no gate.
    Defaults,
    /// A default budget, and a gate with no quota that learns holds from
    /// the 429s' named waits.
    GateBudget,
    /// As `GateBudget`, the gate also learning a send rate from the 429s.
    AdaptiveGateBudget,
    /// A default budget, and a gate that knows the upstream's quota.
    KnownQuota,
}

/// One run's clients' shared service.
pub(crate) type Shared =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<RetryBody<hyper::body::Incoming>>, BoxError>;

impl Stack {
    /// The adaptive gate's bounds, in sends per second: 1 to 2 × C.
    fn adaptive_bounds(config: &Config) -> (f64, f64) {
        (1.0, 2.0 * f64::from(config.capacity))
    }

    /// The known quota: C per second as a per-minute rate, the upstream's burst.
    fn quota(config: &Config) -> (u32, u32) {
        (config.capacity.saturating_mul(60), config.burst)
    }

    /// What the report says this stack is.
    pub(crate) fn describe(self, config: &Config) -> String {
        let (min, max) = Stack::adaptive_bounds(config);
        let (per_minute, burst) = Stack::quota(config);
        let retry =
            "`RetryLayer::new(RetryPolicy::builder().budget(RetryBudget::default()).build()?)`";
        match self {
            Stack::Defaults => "`RetryLayer::new(RetryPolicy::default())`".to_owned(),
            Stack::GateBudget => format!(
                "{retry} over `RateLimitLayer::new(Quotas::none())` over the client. The budget \
                 lets retries add 20 % of the last 10 s's first sends plus 10 retries/s; the gate \
                 has no quota and only learns holds: a 429's named wait holds every later send \
                 of the key until then, and sends leave in arrival order."
            ),
            Stack::AdaptiveGateBudget => format!(
                "as above, with `RateLimitLayer::try_new(Quotas::none().adaptive({min:.1}, \
                 {max:.1}))?`: the gate also paces the key at a learned rate that starts at \
                 2 × C = {max:.0} sends/s, falls × 0.7 per congestion event (a burst of 429s \
                 counts once), regains 90 % of the rate that drew the 429 within a few \
                 seconds and then probes upward by 1 % of the ceiling per second."
            ),
            Stack::KnownQuota => format!(
                "{retry} over `RateLimitLayer::new(Quotas::none()\
                 .requests_per_minute_with_burst({per_minute}, {burst}))`: the gate is told \
                 the upstream's capacity (C × 60 per minute, the bucket's burst) and paces \
                 every send to it."
            ),
        }
    }

    /// A fresh stack: new budget, new gate, new connection pool. Clone
    /// the result into every client of one run.
    pub(crate) fn build(
        self,
        config: &Config,
        successes: &Arc<Successes>,
    ) -> Result<Shared, BoxError> {
        let client = counted_client(successes);
        let budgeted = || -> Result<RetryLayer, BoxError> {
            let policy = RetryPolicy::builder()
                .budget(RetryBudget::default())
                .build()?;
            Ok(RetryLayer::new(policy))
        };
        let shared = match self {
            Stack::Defaults => BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .layer(RetryLayer::new(RetryPolicy::default()))
                    .service(client),
            ),
            Stack::GateBudget => BoxCloneSyncService::new(
                ServiceBuilder::new()
                    .layer(budgeted()?)
                    .layer(RateLimitLayer::new(Quotas::none()))
                    .service(client),
            ),
            Stack::AdaptiveGateBudget => {
                let (min, max) = Stack::adaptive_bounds(config);
                BoxCloneSyncService::new(
                    ServiceBuilder::new()
                        .layer(budgeted()?)
                        .layer(RateLimitLayer::try_new(Quotas::none().adaptive(min, max))?)
                        .service(client),
                )
            }
            Stack::KnownQuota => {
                let (per_minute, burst) = Stack::quota(config);
                let quotas = Quotas::none().requests_per_minute_with_burst(per_minute, burst);
                BoxCloneSyncService::new(
                    ServiceBuilder::new()
                        .layer(budgeted()?)
                        .layer(RateLimitLayer::new(quotas))
                        .service(client),
                )
            }
        };
        Ok(shared)
    }
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

/// Runs one logical request through a clone of the shared stack.
pub(crate) async fn send(service: &Shared, url: &str, id: u64) -> Outcome {
    let request = match request(url, id) {
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
