//! Counters, gauges and histograms through the `metrics` facade (feature
//! `metrics`); without the feature every call here compiles to nothing.
//!
//! The names and labels are listed in the crate docs (feature flags).

use crate::classify::{Classification, RetryableKind};
use crate::report::StopReason;
use std::time::Duration;

/// A retry is about to wait.
pub(crate) fn retry(class: &Classification) {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_retries_total", "class" => class_label(class)).increment(1);
    let _ = class;
}

/// A recovery is applied.
pub(crate) fn recovery(action: crate::report::RecoveryAction) {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_recoveries_total", "action" => action.label()).increment(1);
    let _ = action;
}

/// The loop stopped without success.
pub(crate) fn give_up(stop: &StopReason) {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_give_ups_total", "reason" => stop.label()).increment(1);
    let _ = stop;
}

/// The shared budget's level after a deposit or withdrawal.
pub(crate) fn budget_available(available: u64, name: Option<&str>) {
    #[cfg(feature = "metrics")]
    match name {
        Some(name) => metrics::gauge!("llm_retry_budget_available", "budget" => name.to_owned())
            .set(available as f64),
        None => metrics::gauge!("llm_retry_budget_available").set(available as f64),
    }
    let _ = (available, name);
}

/// A send waited for its rate-limit slot.
pub(crate) fn gate_wait(wait: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("llm_retry_rate_limit_wait_seconds").record(wait.as_secs_f64());
    let _ = wait;
}

/// A key's gate stood down: its refusals (`what`: 429s against the rate,
/// or 529s against the sends in flight) did not follow what it limited.
pub(crate) fn gate_stood_down(what: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_rate_limit_stood_down_total", "signal" => what).increment(1);
    let _ = what;
}

/// The gate refused a send.
pub(crate) fn gate_refusal(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_rate_limit_refusals_total", "reason" => reason).increment(1);
    let _ = reason;
}

/// The label of a classification.
pub(crate) fn class_label(class: &Classification) -> &'static str {
    match class {
        Classification::Success => "success",
        Classification::Fatal(_) => "fatal",
        Classification::Retryable(kind) => match kind {
            RetryableKind::RateLimited => "rate_limited",
            RetryableKind::Overloaded => "overloaded",
            RetryableKind::Status(_) => "status",
            RetryableKind::ServerRequested(_) => "server_requested",
            RetryableKind::Connect => "connect",
            RetryableKind::Reset => "reset",
            RetryableKind::Timeout => "timeout",
            RetryableKind::Transport => "transport",
        },
    }
}

/// A failover attempt starts, in round `round`.
pub(crate) fn failover_attempt(round: u32) {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_failover_attempts_total", "round" => round_label(round))
        .increment(1);
    let _ = round;
}

/// A failover request waits for a further round.
pub(crate) fn failover_wait(wait: Duration) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("llm_retry_failover_rounds_admitted_total").increment(1);
        metrics::histogram!("llm_retry_failover_round_wait_seconds").record(wait.as_secs_f64());
    }
    let _ = wait;
}

/// A request was answered in a further round.
pub(crate) fn failover_round_served() {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_failover_round_successes_total").increment(1);
}

/// No further round began, for `reason`.
pub(crate) fn failover_suppressed(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_failover_suppressions_total", "reason" => reason).increment(1);
    let _ = reason;
}

/// Every allowed round was exhausted.
pub(crate) fn failover_exhausted() {
    #[cfg(feature = "metrics")]
    metrics::counter!("llm_retry_failover_exhaustions_total").increment(1);
}

/// A bounded label for a round number.
#[cfg(feature = "metrics")]
fn round_label(round: u32) -> &'static str {
    match round {
        1 => "1",
        2 => "2",
        3 => "3",
        _ => "4+",
    }
}
