//! Retries for LLM API calls that survive rate limits, overloads and flaky
//! networks — honouring what the server says, never replaying blindly, and
//! explaining every stop.
//!
//! # Overview
//!
//! [`ClientLayer`] is the recommended stack in one layer: [`RetryLayer`]
//! with a shared retry budget, over a [`rate_limit::RateLimitLayer`] that
//! learns each key's rate from its 429s, over a
//! [`stream_guard::StreamGuardLayer`]. Build it once per client and clone it.
//!
//! [`RetryLayer`] is a tower middleware for `http::Request<B>` services. Each
//! attempt's outcome is classified ([`classify`]), the server's own wait is
//! read (`retry-after`, rate-limit resets, a delay named in the error
//! body), a delay is chosen ([`backoff`]) inside hard per-request
//! bounds ([`budget`]), and the [`RetryPolicy`] decides. The request body is
//! wrapped in a [`ReplayBody`] so it can be sent again without copying.
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::{client::legacy::Client, rt::TokioExecutor};
//! use llm_retry::{ClientLayer, RetryReport};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # async fn run() -> Result<(), llm_retry::BoxError> {
//! let client = Client::builder(TokioExecutor::new()).build_http();
//! let service = ServiceBuilder::new()
//!     .layer(ClientLayer::default())
//!     .service(client);
//! let request = http::Request::post("https://api.anthropic.com/v1/messages")
//!     .body(Full::new(Bytes::from_static(b"{}")))?;
//! let response = service.oneshot(request).await?;
//! // No report: served at the first attempt.
//! let attempts = response.extensions().get::<RetryReport>().map_or(1, |r| r.attempts);
//! # let _ = attempts;
//! # Ok(())
//! # }
//! ```
//!
//! Every logical request ends in exactly one answer: the final response, or
//! one [`RetryError`] with a [`RetryReport`] when the last attempt produced
//! no response. The response carries the report in its extensions too,
//! unless it is a success at the first attempt with nothing waited: then
//! there is nothing to report, and nothing is paid for one.
//!
//! `RetryPolicy` also implements [`tower::retry::Policy`], for tower's own
//! retry layer.
//!
//! # Feature flags
//!
//! - `metrics`: counters, gauges and histograms through the [`metrics`
//!   facade](https://docs.rs/metrics) (labels are fixed vocabularies; no URL,
//!   header or key ever becomes a label):
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `llm_retry_retries_total` | counter | `class` (`rate_limited`, `overloaded`, `status`, `connect`, …) |
//! | `llm_retry_recoveries_total` | counter | `action` (`cut_max_tokens`, `fallback_model`, `refresh_credentials`) |
//! | `llm_retry_give_ups_total` | counter | `reason` ([`StopReason::label`]) |
//! | `llm_retry_budget_available` | gauge | retries the shared budget would grant now; `budget` ([`RetryBudget::named`](budget::RetryBudget::named)) when named |
//! | `llm_retry_rate_limit_wait_seconds` | histogram | time a send waited for its slot |
//! | `llm_retry_rate_limit_refusals_total` | counter | `reason` (`past_deadline`, `never_fits`) |
//! | `llm_retry_failover_attempts_total` | counter | `round` (`1`, `2`, `3`, `4+`) |
//! | `llm_retry_failover_rounds_admitted_total` | counter | further rounds begun |
//! | `llm_retry_failover_round_wait_seconds` | histogram | wait before a further round |
//! | `llm_retry_failover_round_successes_total` | counter | requests answered in a further round |
//! | `llm_retry_failover_suppressions_total` | counter | `reason` (`disabled`, `rounds_spent`, `state_bound`, `ambiguous`, `not_throttled`, `shutdown`, `send_budget`, `wait_too_long`, `deadline`, `admission_full`) |
//! | `llm_retry_failover_exhaustions_total` | counter | requests every round of which was exhausted |
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod budget;
pub mod classify;
pub mod downstream;
pub mod failover;
pub mod policy;
pub mod rate_limit;
pub mod replay;
pub mod stream_guard;

mod client_layer;
mod config_error;
mod deadline;
mod error;
mod held;
mod hint;
mod hooks;
mod noop_waker;
mod observe;
#[cfg(all(test, feature = "metrics"))]
mod observe_tests;
mod recover;
mod redact;
mod report;
mod retry;
mod size_hint;
mod sse;

pub use client_layer::{ClientLayer, ClientStack};
pub use config_error::ConfigError;
pub use error::{BoxError, RetryError};
pub use hooks::{on_retry, RecoveryEvent, RetryEvent, RetryHooks};
pub use policy::{RetryPolicy, RetryPolicyBuilder};
pub use replay::ReplayBody;
pub use report::{RetryReport, StopReason};
pub use retry::{Retry, RetryBody, RetryLayer};

/// The pure parsers the fuzz targets in `fuzz/` drive, compiled only under
/// `--cfg fuzzing` (cargo-fuzz sets it): not part of the API, and absent
/// from every other build.
#[cfg(fuzzing)]
#[allow(missing_docs)]
pub mod fuzzing {
    use crate::classify::{Classification, ProviderError};
    use http::{HeaderMap, StatusCode};

    pub use crate::hint::{
        parse_hint, parse_retry_after, request_window, token_quota_only, token_window,
        RequestWindow, ServerHint, ServerWait, TokenWindow, WaitSource, MAX_HINT,
    };
    pub use crate::recover::{
        overflow_max_tokens, requested_max_tokens, rewrite_body, BodyEdit, CutRefused, EditApplied,
        RewriteError, MAX_TOKENS_FIELDS,
    };
    pub use crate::sse::{classify_stream_error, EventKind, SseDecoder, SseError, SseEvent};

    /// What one event means before any content, under `rules`.
    pub fn classify_event(rules: &crate::stream_guard::EventRules, event: &SseEvent) -> EventKind {
        rules.classify(event)
    }

    /// A response's classification (the decision table).
    pub fn classify_response(
        status: StatusCode,
        headers: &HeaderMap,
        provider: Option<&ProviderError>,
    ) -> Classification {
        crate::classify::classify_response(status, headers, provider)
    }

    /// The `x-should-retry` header's verdict.
    pub fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
        crate::classify::should_retry_header(headers)
    }
}

/// The future [`Retry`] returns.
pub mod future {
    pub use crate::retry::future::ResponseFuture;
}
